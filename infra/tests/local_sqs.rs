//! The local endpoint keeps SQS's FIFO order where moto alone does not: when the received
//! messages of a group become visible again together, the next receive starts at the group's
//! first message, never at a later one. A long queue (a second group, in flight) makes each
//! receive take a while, as it does on a busy endpoint, so the group's messages become visible
//! while a receive is under way.

mod common;

use std::time::Duration;

use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use local_aws::provision::ProvisionedQueue;

const GROUP: usize = 7;
const ROUNDS: usize = 6;
const QUEUES: usize = 2;
const FILLER: usize = 1000;

/// Receives the whole group (visibility 1 s) without deleting it, `ROUNDS` times; returns the
/// bodies of each receive that handed out messages.
async fn rounds(clients: local_aws::Clients, queue: ProvisionedQueue) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut received = 0;
    while received < ROUNDS {
        let batch = clients
            .sqs
            .receive_message()
            .queue_url(&queue.url)
            .max_number_of_messages(10)
            .visibility_timeout(1)
            .wait_time_seconds(2)
            .send()
            .await
            .expect("ReceiveMessage");
        let bodies: Vec<String> = batch
            .messages
            .unwrap_or_default()
            .into_iter()
            .filter_map(|m| m.body)
            .collect();
        if !bodies.is_empty() {
            received += 1;
            out.push(bodies);
        }
    }
    out
}

/// Sends `FILLER` messages of group `f` and receives the first: the rest of `f` stays behind
/// it, never handed out, but every receive goes through them.
async fn fill(clients: &local_aws::Clients, queue: &ProvisionedQueue) {
    for chunk in 0..FILLER / 10 {
        let entries = (0..10)
            .map(|i| {
                let id = format!("f{}", chunk * 10 + i);
                SendMessageBatchRequestEntry::builder()
                    .id(&id)
                    .message_body(&id)
                    .message_group_id("f")
                    .message_deduplication_id(&id)
                    .build()
                    .unwrap()
            })
            .collect();
        clients
            .sqs
            .send_message_batch()
            .queue_url(&queue.url)
            .set_entries(Some(entries))
            .send()
            .await
            .expect("SendMessageBatch");
    }
    let first = clients
        .sqs
        .receive_message()
        .queue_url(&queue.url)
        .max_number_of_messages(1)
        .visibility_timeout(600)
        .send()
        .await
        .expect("ReceiveMessage");
    assert_eq!(first.messages().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_group_visible_again_starts_at_its_first_message() {
    let clients = common::clients().await;
    let expected: Vec<String> = (0..GROUP).map(|i| format!("m{i}")).collect();
    let mut tasks = Vec::new();
    for _ in 0..QUEUES {
        let queue = common::queue(&clients, true, 30).await;
        let bodies: Vec<&str> = expected.iter().map(String::as_str).collect();
        fill(&clients, &queue).await;
        common::send(&clients, &queue, Some("g"), &bodies).await;
        tasks.push(tokio::spawn(rounds(clients.clone(), queue)));
    }
    // Other clients keep the endpoint busy meanwhile, as the functions and the suites do.
    let busy = tokio_util::sync::CancellationToken::new();
    let other = common::queue(&clients, false, 30).await;
    for _ in 0..3 {
        let (sqs, url, busy) = (clients.sqs.clone(), other.url.clone(), busy.clone());
        tokio::spawn(async move {
            while !busy.is_cancelled() {
                let _ = sqs
                    .send_message()
                    .queue_url(&url)
                    .message_body("x")
                    .send()
                    .await;
            }
        });
    }
    let mut all = Vec::new();
    for task in tasks {
        all.push(
            tokio::time::timeout(Duration::from_secs(60), task)
                .await
                .expect("the rounds finish")
                .unwrap(),
        );
    }
    busy.cancel();
    for receives in all {
        for (round, bodies) in receives.iter().enumerate() {
            assert_eq!(
                bodies, &expected,
                "receive {round} of a group that was visible again: {receives:?}"
            );
        }
    }
}
