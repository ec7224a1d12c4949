//! Shared set-up for the tests against the local AWS endpoint (moto, started by `make test`).
#![allow(dead_code)]

pub mod kinesis;
pub mod split_stream;
pub mod stream;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use aws_sdk_sqs::types::QueueAttributeName;
use local_aws::Clients;
use local_aws::provision::ProvisionedQueue;
use local_aws::template::{Queue, Redrive};

/// Clients for the local endpoint; a test never skips without one.
pub async fn clients() -> Clients {
    Clients::from_env().await.unwrap_or_else(|e| {
        panic!("{e}\n(these tests need a local AWS endpoint: run them with `make test`)")
    })
}

/// A sample event of the library's `shared/tests/data/`, in the shape AWS sends (see its README).
pub fn sample_event(name: &str) -> serde_json::Value {
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/tests/data/"
    ))
    .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read the sample event {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A queue name no other test in this run uses (`.fifo` added for FIFO).
pub fn unique_name(tag: &str, fifo: bool) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{tag}-{}-{nanos:x}-{}{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        if fifo { ".fifo" } else { "" }
    )
}

/// A queue model with a short visibility timeout.
pub fn queue_model(tag: &str, fifo: bool, visibility_timeout: u32) -> Queue {
    Queue {
        logical_id: tag.to_owned(),
        name: unique_name(tag, fifo),
        fifo,
        content_based_deduplication: false,
        visibility_timeout,
        message_retention_period: 345_600,
        delay_seconds: 0,
        receive_message_wait_time_seconds: None,
        maximum_message_size: None,
        redrive: None,
        redrive_allow_policy: None,
    }
}

/// A queue with a dead-letter queue after `max_receive_count` receives: (queue, dlq).
pub async fn queue_with_dlq(
    clients: &Clients,
    fifo: bool,
    visibility_timeout: u32,
    max_receive_count: u32,
) -> (ProvisionedQueue, ProvisionedQueue) {
    let dlq_model = queue_model("dlq", fifo, 30);
    let dlq = local_aws::provision::create_queue(&clients.sqs, &dlq_model, None)
        .await
        .expect("create the DLQ");
    let mut model = queue_model("src", fifo, visibility_timeout);
    model.redrive = Some(Redrive {
        dead_letter_queue: dlq_model.logical_id.clone(),
        max_receive_count,
    });
    let queue = local_aws::provision::create_queue(&clients.sqs, &model, Some(&dlq.arn))
        .await
        .expect("create the queue");
    (queue, dlq)
}

/// A queue without a dead-letter queue.
pub async fn queue(clients: &Clients, fifo: bool, visibility_timeout: u32) -> ProvisionedQueue {
    local_aws::provision::create_queue(
        &clients.sqs,
        &queue_model("q", fifo, visibility_timeout),
        None,
    )
    .await
    .expect("create the queue")
}

/// Sends `bodies` to a standard queue (or FIFO with group `group`, dedup id = body).
pub async fn send(
    clients: &Clients,
    queue: &ProvisionedQueue,
    group: Option<&str>,
    bodies: &[&str],
) {
    for body in bodies {
        let mut send = clients
            .sqs
            .send_message()
            .queue_url(&queue.url)
            .message_body(*body);
        if let Some(group) = group {
            send = send.message_group_id(group).message_deduplication_id(*body);
        }
        send.send().await.expect("SendMessage");
    }
}

/// The visible + in-flight count of a queue.
pub async fn depth(clients: &Clients, url: &str) -> u64 {
    local_aws::runner::queue_depth(&clients.sqs, url)
        .await
        .map(|d| d.visible + d.not_visible + d.delayed)
        .expect("queue depth")
}

/// Receives everything visible from a queue (several calls), returning the bodies.
pub async fn receive_all(clients: &Clients, url: &str) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..5 {
        let got = clients
            .sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(0)
            .send()
            .await
            .expect("ReceiveMessage")
            .messages
            .unwrap_or_default();
        if got.is_empty() {
            break;
        }
        out.extend(got.into_iter().filter_map(|m| m.body));
    }
    out
}

pub async fn queue_attribute(
    clients: &Clients,
    url: &str,
    name: QueueAttributeName,
) -> Option<String> {
    clients
        .sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(name.clone())
        .send()
        .await
        .expect("GetQueueAttributes")
        .attributes
        .and_then(|mut a| a.remove(&name))
}

pub const SECOND: Duration = Duration::from_secs(1);
