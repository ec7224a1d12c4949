//! The publisher against a real FIFO queue (moto), and its retries against a mocked client.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use aws_sdk_sqs::operation::send_message_batch::SendMessageBatchOutput;
use aws_sdk_sqs::types::{BatchResultErrorEntry, SendMessageBatchResultEntry};
use aws_smithy_mocks::{RuleMode, mock, mock_client};
use lambda_idempotency::count::RequestCounter;
use lambda_idempotency::publish::{
    DeduplicationId, Message, MessageGroupId, PublishError, Publisher,
};

fn fifo(group: &str, key: &str, body: &str) -> Message {
    Message::fifo(
        MessageGroupId::new(group).unwrap(),
        DeduplicationId::from_key(key),
        body,
    )
    .unwrap()
}

/// Receives until the queue is empty, deleting as it goes; returns (group, body) in order received.
async fn drain(client: &aws_sdk_sqs::Client, queue_url: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    loop {
        let received = client
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .message_system_attribute_names(
                aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId,
            )
            .send()
            .await
            .unwrap();
        let messages = received.messages.unwrap_or_default();
        if messages.is_empty() {
            return out;
        }
        for m in messages {
            let group = m
                .attributes
                .as_ref()
                .and_then(|a| {
                    a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId)
                })
                .cloned()
                .unwrap_or_default();
            out.push((group, m.body.clone().unwrap_or_default()));
            client
                .delete_message()
                .queue_url(queue_url)
                .receipt_handle(m.receipt_handle.unwrap())
                .send()
                .await
                .unwrap();
        }
    }
}

#[tokio::test]
async fn twenty_five_messages_take_three_calls_and_keep_group_order() {
    let counter = RequestCounter::default();
    let client = common::sqs(&counter).await;
    let queue = common::create_fifo_queue(&client).await;
    let messages: Vec<_> = (0..25)
        .map(|i| {
            fifo(
                &format!("acct-{}", i % 3),
                &format!("payment-{i}"),
                &format!("{i}"),
            )
        })
        .collect();
    counter.reset();
    let results = Publisher::new(client.clone(), &queue)
        .send_all(messages)
        .await;
    assert_eq!(
        counter.count("SendMessageBatch"),
        3,
        "{:?}",
        counter.snapshot()
    );
    assert_eq!(results.len(), 25);
    for r in &results {
        let sent = r.as_ref().expect("every message sent");
        assert!(!sent.message_id.is_empty());
        assert!(
            sent.sequence_number.is_some(),
            "FIFO sends have sequence numbers"
        );
    }
    let received = drain(&client, &queue).await;
    assert_eq!(received.len(), 25);
    let mut by_group: HashMap<String, Vec<u32>> = HashMap::new();
    for (group, body) in received {
        by_group
            .entry(group)
            .or_default()
            .push(body.parse().unwrap());
    }
    assert_eq!(by_group.len(), 3);
    for (group, bodies) in by_group {
        let g: u32 = group.trim_start_matches("acct-").parse().unwrap();
        let expected: Vec<u32> = (0..25).filter(|i| i % 3 == g).collect();
        assert_eq!(bodies, expected, "group {group} in send order");
    }
}

#[tokio::test]
async fn the_same_dedup_id_twice_is_one_message() {
    let counter = RequestCounter::default();
    let client = common::sqs(&counter).await;
    let queue = common::create_fifo_queue(&client).await;
    let publisher = Publisher::new(client.clone(), &queue);
    let first = publisher
        .send(fifo("acct-1", "payment-7", "charge 7"))
        .await
        .unwrap();
    let again = publisher
        .send(fifo("acct-1", "payment-7", "charge 7"))
        .await
        .unwrap();
    assert!(!first.message_id.is_empty() && !again.message_id.is_empty());
    let received = drain(&client, &queue).await;
    assert_eq!(received, [("acct-1".to_string(), "charge 7".to_string())]);
}

#[tokio::test]
async fn a_message_without_group_is_refused_for_a_fifo_queue_before_any_call() {
    let counter = RequestCounter::default();
    let client = common::sqs(&counter).await;
    let queue = common::create_fifo_queue(&client).await;
    let messages = vec![
        fifo("acct-1", "p-1", "ok"),
        Message::standard("no group").unwrap(),
        fifo("acct-1", "p-2", "ok too"),
    ];
    counter.reset();
    let results = Publisher::new(client.clone(), &queue)
        .send_all(messages)
        .await;
    assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
    assert!(
        matches!(&results[1], Err(PublishError::NotFifo { .. })),
        "{results:?}"
    );
    assert_eq!(counter.count("SendMessageBatch"), 1);
    assert_eq!(drain(&client, &queue).await.len(), 2);
}

#[tokio::test]
async fn a_refused_request_is_not_retried() {
    let counter = RequestCounter::default();
    let client = common::sqs(&counter).await;
    let missing = format!(
        "{}/{}",
        common::endpoint(),
        "000000000000/no-such-queue.fifo"
    );
    counter.reset();
    let result = Publisher::new(client, missing)
        .send(fifo("g", "k", "b"))
        .await;
    assert!(
        matches!(result, Err(PublishError::Rejected { .. })),
        "{result:?}"
    );
    assert_eq!(counter.count("SendMessageBatch"), 1);
}

#[tokio::test]
async fn an_entry_refused_as_the_senders_fault_is_reported_not_retried() {
    let rule = mock!(aws_sdk_sqs::Client::send_message_batch).then_compute_output(|input| {
        let mut out = SendMessageBatchOutput::builder()
            .set_successful(Some(vec![]))
            .set_failed(Some(vec![]));
        for e in input.entries() {
            out = if e.id() == "1" {
                out.failed(
                    BatchResultErrorEntry::builder()
                        .id("1")
                        .sender_fault(true)
                        .code("InvalidMessageContents")
                        .build()
                        .unwrap(),
                )
            } else {
                out.successful(ok_entry(e.id()))
            };
        }
        out.build().unwrap()
    });
    let client = mock_client!(aws_sdk_sqs, RuleMode::MatchAny, [&rule]);
    let results = Publisher::new(client, "https://queue.example/q.fifo")
        .send_all((0..3).map(|i| fifo("g", &format!("k{i}"), "b")).collect())
        .await;
    assert_eq!(rule.num_calls(), 1);
    assert!(results[0].is_ok() && results[2].is_ok());
    assert!(
        matches!(&results[1], Err(PublishError::Rejected { code, .. }) if code == "InvalidMessageContents")
    );
}

#[test]
fn a_message_over_one_mib_is_an_error_before_any_call() {
    let body = "x".repeat(1024 * 1024 + 1);
    let err = Message::fifo(
        MessageGroupId::new("g").unwrap(),
        DeduplicationId::from_key("k"),
        body,
    )
    .unwrap_err();
    assert!(err.to_string().contains("1048577 bytes"), "{err}");
}

fn ok_entry(id: &str) -> SendMessageBatchResultEntry {
    SendMessageBatchResultEntry::builder()
        .id(id)
        .message_id(format!("mid-{id}"))
        .md5_of_message_body("x")
        .build()
        .unwrap()
}

fn failed_entry(id: &str) -> BatchResultErrorEntry {
    BatchResultErrorEntry::builder()
        .id(id)
        .sender_fault(false)
        .code("InternalError")
        .message("try again")
        .build()
        .unwrap()
}

#[tokio::test]
async fn only_the_failed_entries_are_retried() {
    let calls: Arc<Mutex<Vec<Vec<String>>>> = Arc::default();
    let log = calls.clone();
    let respond =
        move |input: &aws_sdk_sqs::operation::send_message_batch::SendMessageBatchInput| {
            let ids: Vec<String> = input.entries().iter().map(|e| e.id().to_owned()).collect();
            let first_call = log.lock().unwrap().is_empty();
            log.lock().unwrap().push(ids.clone());
            let mut out = SendMessageBatchOutput::builder()
                .set_successful(Some(vec![]))
                .set_failed(Some(vec![]));
            for id in &ids {
                // Entries 1 and 3 fail the first time, with a server fault.
                if first_call && (id == "1" || id == "3") {
                    out = out.failed(failed_entry(id));
                } else {
                    out = out.successful(ok_entry(id));
                }
            }
            out.build().unwrap()
        };
    let first = mock!(aws_sdk_sqs::Client::send_message_batch).then_compute_output(respond.clone());
    let second = mock!(aws_sdk_sqs::Client::send_message_batch).then_compute_output(respond);
    let client = mock_client!(aws_sdk_sqs, RuleMode::MatchAny, [&first, &second]);
    let publisher = Publisher::new(client, "https://queue.example/q.fifo").backoff(
        std::time::Duration::from_millis(1),
        std::time::Duration::from_millis(5),
    );
    let messages: Vec<_> = (0..5).map(|i| fifo("g", &format!("k{i}"), "b")).collect();
    let results = publisher.send_all(messages).await;
    let calls = calls.lock().unwrap().clone();
    assert_eq!(calls, vec![vec!["0", "1", "2", "3", "4"], vec!["1", "3"]]);
    let ids: Vec<_> = results.into_iter().map(|r| r.unwrap().message_id).collect();
    assert_eq!(ids, ["mid-0", "mid-1", "mid-2", "mid-3", "mid-4"]);
}

#[tokio::test]
async fn retries_are_bounded() {
    let rule = mock!(aws_sdk_sqs::Client::send_message_batch)
        .sequence()
        .output(|| {
            SendMessageBatchOutput::builder()
                .set_successful(Some(vec![]))
                .failed(failed_entry("0"))
                .build()
                .unwrap()
        })
        .times(3)
        .build();
    let client = mock_client!(aws_sdk_sqs, RuleMode::MatchAny, [&rule]);
    let publisher = Publisher::new(client, "https://queue.example/q.fifo")
        .max_attempts(3)
        .backoff(
            std::time::Duration::from_millis(1),
            std::time::Duration::from_millis(5),
        );
    let result = publisher.send(fifo("g", "k", "b")).await;
    assert_eq!(rule.num_calls(), 3);
    assert!(
        matches!(result, Err(PublishError::Exhausted { attempts: 3, ref last_error }) if last_error.contains("InternalError"))
    );
}
