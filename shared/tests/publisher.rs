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

/// A new FIFO queue on the local endpoint, and a client whose requests `counter` counts.
async fn fifo_queue() -> (RequestCounter, aws_sdk_sqs::Client, String) {
    let counter = RequestCounter::default();
    let client = common::sqs(&counter).await;
    let queue = common::create_fifo_queue(&client).await;
    (counter, client, queue)
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
async fn twenty_five_messages_in_ten_groups_take_three_calls_and_keep_group_order() {
    let (counter, client, queue) = fifo_queue().await;
    let messages: Vec<_> = (0..25)
        .map(|i| {
            fifo(
                &format!("acct-{}", i % 10),
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
    assert_eq!(by_group.len(), 10);
    for (group, bodies) in by_group {
        let g: u32 = group.trim_start_matches("acct-").parse().unwrap();
        let expected: Vec<u32> = (0..25).filter(|i| i % 10 == g).collect();
        assert_eq!(bodies, expected, "group {group} in send order");
    }
}

#[tokio::test]
async fn the_messages_of_one_group_go_one_call_each_in_order() {
    let (counter, client, queue) = fifo_queue().await;
    let messages: Vec<_> = (0..3)
        .map(|i| fifo("acct-1", &format!("p-{i}"), &i.to_string()))
        .collect();
    counter.reset();
    let results = Publisher::new(client.clone(), &queue)
        .send_all(messages)
        .await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(counter.count("SendMessageBatch"), 3);
    let bodies: Vec<_> = drain(&client, &queue)
        .await
        .into_iter()
        .map(|(_, body)| body)
        .collect();
    assert_eq!(bodies, ["0", "1", "2"]);
}

#[tokio::test]
async fn the_same_dedup_id_twice_is_one_message() {
    let (_, client, queue) = fifo_queue().await;
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
    let (counter, client, queue) = fifo_queue().await;
    let messages = vec![
        fifo("acct-1", "p-1", "ok"),
        Message::standard("no group").unwrap(),
        fifo("acct-2", "p-2", "ok too"),
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
        .send_all(
            (0..3)
                .map(|i| fifo(&format!("g{i}"), &format!("k{i}"), "b"))
                .collect(),
        )
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
    let messages: Vec<_> = (0..5)
        .map(|i| fifo(&format!("g{i}"), &format!("k{i}"), "b"))
        .collect();
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

/// What the mocked FIFO queue does with an entry, by body.
#[derive(Clone, Copy)]
enum Fault {
    /// Fails (a server fault) this many more times, then is accepted.
    Transient(u32),
    /// Refused as the sender's fault, every time.
    Refused,
}

/// A FIFO queue behind a mocked client: it accepts entries in their order in each call, fails the
/// ones it is told to, and records what it accepted.
#[derive(Clone, Default)]
struct MockFifo {
    faults: Arc<Mutex<HashMap<String, Fault>>>,
    /// (group, body) of every accepted entry, in the order accepted.
    accepted: Arc<Mutex<Vec<(String, String)>>>,
    /// The groups of each call's entries.
    calls: Arc<Mutex<Vec<Vec<String>>>>,
}

impl MockFifo {
    fn failing(faults: &[(&str, Fault)]) -> Self {
        let queue = Self::default();
        queue.faults.lock().unwrap().extend(
            faults
                .iter()
                .map(|(body, fault)| (body.to_string(), *fault)),
        );
        queue
    }

    fn publisher(&self) -> Publisher {
        let queue = self.clone();
        let rule = mock!(aws_sdk_sqs::Client::send_message_batch)
            .then_compute_output(move |input| queue.respond(input));
        let client = mock_client!(aws_sdk_sqs, RuleMode::MatchAny, [&rule]);
        Publisher::new(client, "https://queue.example/q.fifo")
            .max_attempts(3)
            .backoff(
                std::time::Duration::from_millis(1),
                std::time::Duration::from_millis(5),
            )
    }

    fn respond(
        &self,
        input: &aws_sdk_sqs::operation::send_message_batch::SendMessageBatchInput,
    ) -> SendMessageBatchOutput {
        let mut out = SendMessageBatchOutput::builder()
            .set_successful(Some(vec![]))
            .set_failed(Some(vec![]));
        let mut groups = Vec::new();
        for e in input.entries() {
            let group = e.message_group_id().unwrap_or_default().to_owned();
            groups.push(group.clone());
            let fault = self
                .faults
                .lock()
                .unwrap()
                .get_mut(e.message_body())
                .and_then(|f| match f {
                    Fault::Transient(0) => None,
                    Fault::Transient(n) => {
                        *n -= 1;
                        Some(failed_entry(e.id()))
                    }
                    Fault::Refused => Some(
                        BatchResultErrorEntry::builder()
                            .id(e.id())
                            .sender_fault(true)
                            .code("InvalidMessageContents")
                            .build()
                            .unwrap(),
                    ),
                });
            out = match fault {
                Some(failed) => out.failed(failed),
                None => {
                    let body = e.message_body().to_owned();
                    self.accepted.lock().unwrap().push((group, body));
                    out.successful(ok_entry(e.id()))
                }
            };
        }
        self.calls.lock().unwrap().push(groups);
        out.build().unwrap()
    }

    /// The bodies of `group`, in the order the queue accepted them.
    fn accepted(&self, group: &str) -> Vec<String> {
        let accepted = self.accepted.lock().unwrap();
        accepted
            .iter()
            .filter(|(g, _)| g == group)
            .map(|(_, body)| body.clone())
            .collect()
    }

    fn assert_no_call_holds_a_group_twice(&self) {
        for call in self.calls.lock().unwrap().iter() {
            let mut groups = call.clone();
            groups.sort();
            groups.dedup();
            assert_eq!(groups.len(), call.len(), "one call: {call:?}");
        }
    }
}

/// Two interleaved groups, `g` and `h`, of three messages each: `g0 h0 g1 h1 g2 h2`.
fn two_groups() -> Vec<Message> {
    (0..3)
        .flat_map(|i| ["g", "h"].map(|g| fifo(g, &format!("{g}{i}"), &format!("{g}{i}"))))
        .collect()
}

#[tokio::test]
async fn a_middle_message_that_fails_for_a_while_keeps_its_place_in_the_group() {
    let queue = MockFifo::failing(&[("g1", Fault::Transient(2))]);
    let results = queue.publisher().send_all(two_groups()).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(queue.accepted("g"), ["g0", "g1", "g2"]);
    assert_eq!(queue.accepted("h"), ["h0", "h1", "h2"]);
    queue.assert_no_call_holds_a_group_twice();
}

#[tokio::test]
async fn after_a_refused_message_the_rest_of_its_group_is_not_sent() {
    let queue = MockFifo::failing(&[("g1", Fault::Refused)]);
    let results = queue.publisher().send_all(two_groups()).await;
    assert_eq!(queue.accepted("g"), ["g0"]);
    assert_eq!(queue.accepted("h"), ["h0", "h1", "h2"]);
    assert!(
        matches!(&results[2], Err(PublishError::Rejected { code, .. }) if code == "InvalidMessageContents")
    );
    assert_eq!(
        results[4],
        Err(PublishError::EarlierInGroupFailed {
            group_id: "g".into(),
            earlier: 2
        })
    );
    for i in [0, 1, 3, 5] {
        assert!(results[i].is_ok(), "{i}: {results:?}");
    }
    queue.assert_no_call_holds_a_group_twice();
}

#[tokio::test]
async fn after_a_message_that_never_gets_through_the_rest_of_its_group_is_not_sent() {
    let queue = MockFifo::failing(&[("g0", Fault::Transient(u32::MAX))]);
    let results = queue.publisher().send_all(two_groups()).await;
    assert!(queue.accepted("g").is_empty());
    assert_eq!(queue.accepted("h"), ["h0", "h1", "h2"]);
    assert!(
        matches!(
            &results[0],
            Err(PublishError::Exhausted { attempts: 3, .. })
        ),
        "{results:?}"
    );
    for i in [2, 4] {
        assert_eq!(
            results[i],
            Err(PublishError::EarlierInGroupFailed {
                group_id: "g".into(),
                earlier: 0
            })
        );
        assert!(
            results[i]
                .as_ref()
                .unwrap_err()
                .to_string()
                .contains("message 0 of group g")
        );
    }
    // g0 was tried 3 times; g1 and g2 never.
    let calls = queue.calls.lock().unwrap().clone();
    let tries_of_g: usize = calls.iter().flatten().filter(|g| *g == "g").count();
    assert_eq!(tries_of_g, 3, "{calls:?}");
}

/// A call refused as a whole (HTTP 400) whenever it carries the body `big`, as an emulator
/// refuses a message over the queue's size limit; every other call is accepted. Counts calls.
fn refusing_big(code: &'static str) -> (aws_sdk_sqs::Client, Arc<Mutex<Vec<Vec<String>>>>) {
    let calls: Arc<Mutex<Vec<Vec<String>>>> = Arc::default();
    let log = calls.clone();
    let refused = mock!(aws_sdk_sqs::Client::send_message_batch)
        .match_requests(move |input| {
            let bodies: Vec<String> = input
                .entries()
                .iter()
                .map(|e| e.message_body().to_owned())
                .collect();
            let big = bodies.iter().any(|b| b == "big");
            log.lock().unwrap().push(bodies);
            big
        })
        .sequence()
        .http_status(
            400,
            Some(format!(
                r#"{{"__type":"com.amazonaws.sqs#{code}","message":"refused"}}"#
            )),
        )
        .repeatedly()
        .build();
    let accepted = mock!(aws_sdk_sqs::Client::send_message_batch).then_compute_output(|input| {
        input
            .entries()
            .iter()
            .fold(
                SendMessageBatchOutput::builder().set_failed(Some(vec![])),
                |out, e| out.successful(ok_entry(e.id())),
            )
            .build()
            .unwrap()
    });
    let client = mock_client!(aws_sdk_sqs, RuleMode::MatchAny, [&refused, &accepted]);
    (client, calls)
}

#[tokio::test]
async fn a_call_refused_for_one_entry_is_sent_again_one_entry_at_a_time() {
    let (client, calls) = refusing_big("InvalidParameterValue");
    let messages = ["a", "big", "c"]
        .iter()
        .enumerate()
        .map(|(i, body)| fifo(&format!("g{i}"), body, body))
        .collect();
    let results = Publisher::new(client, "https://queue.example/q.fifo")
        .send_all(messages)
        .await;
    assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
    assert!(
        matches!(&results[1], Err(PublishError::Rejected { code, .. }) if code == "InvalidParameterValue"),
        "{results:?}"
    );
    // One call of three, refused; then each alone; the refused one is not retried.
    assert_eq!(
        *calls.lock().unwrap(),
        [vec!["a", "big", "c"], vec!["a"], vec!["big"], vec!["c"]]
    );
}

#[tokio::test]
async fn a_call_refused_for_its_queue_is_not_split() {
    let (client, calls) = refusing_big("AWS.SimpleQueueService.NonExistentQueue");
    let messages = ["big", "b", "c"]
        .iter()
        .enumerate()
        .map(|(i, body)| fifo(&format!("g{i}"), body, body))
        .collect();
    let results = Publisher::new(client, "https://queue.example/q.fifo")
        .send_all(messages)
        .await;
    for r in &results {
        assert!(
            matches!(r, Err(PublishError::Rejected { code, .. }) if code.contains("NonExistentQueue")),
            "{results:?}"
        );
    }
    assert_eq!(calls.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn the_trace_header_goes_with_the_message() {
    let headers: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let log = headers.clone();
    let rule = mock!(aws_sdk_sqs::Client::send_message_batch).then_compute_output(move |input| {
        let mut out = SendMessageBatchOutput::builder().set_failed(Some(vec![]));
        for e in input.entries() {
            let header = e
                .message_system_attributes()
                .and_then(|a| {
                    a.get(&aws_sdk_sqs::types::MessageSystemAttributeNameForSends::AwsTraceHeader)
                })
                .and_then(|v| v.string_value())
                .map(str::to_owned);
            log.lock().unwrap().push(header);
            out = out.successful(ok_entry(e.id()));
        }
        out.build().unwrap()
    });
    let client = mock_client!(aws_sdk_sqs, RuleMode::MatchAny, [&rule]);
    let traced = fifo("g", "k1", "b")
        .with_trace_header("Root=1-5759e988-bd862e3fe1be46a994272793")
        .unwrap();
    let results = Publisher::new(client, "https://queue.example/q.fifo")
        .send_all(vec![traced, fifo("h", "k2", "b")])
        .await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(
        *headers.lock().unwrap(),
        [
            Some("Root=1-5759e988-bd862e3fe1be46a994272793".to_owned()),
            None
        ]
    );
}
