//! Shared set-up for the tests against a local AWS endpoint (moto: run them under
//! `infra/local-aws/local-aws run -- cargo nextest run -p payments-operations --test NAME`).
//! Without `AWS_ENDPOINT_URL` every test fails: none ever talks to a real account.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};

use aws_sdk_sqs::types::QueueAttributeName;

/// The SDK configuration of the operations code, on the local endpoint only.
pub async fn sdk() -> aws_config::SdkConfig {
    let endpoint = std::env::var("AWS_ENDPOINT_URL").unwrap_or_default();
    assert!(
        endpoint.starts_with("http://127.0.0.1") || endpoint.starts_with("http://localhost"),
        "AWS_ENDPOINT_URL must name a local endpoint, not {endpoint:?}: run the tests under \
         `infra/local-aws/local-aws run -- cargo nextest run -p payments-operations`"
    );
    payments_operations::sdk_config().await
}

/// A name no other test of this run uses.
pub fn unique(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{tag}-{}-{nanos:x}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A queue created for a test.
#[derive(Clone, Debug)]
pub struct Queue {
    pub name: String,
    pub url: String,
    pub arn: String,
    pub fifo: bool,
}

/// Creates a queue named after `tag` (`.fifo` added for FIFO), with `attributes` besides the
/// FIFO one.
pub async fn queue(
    sqs: &aws_sdk_sqs::Client,
    tag: &str,
    fifo: bool,
    attributes: &[(QueueAttributeName, String)],
) -> Queue {
    let name = format!("{}{}", unique(tag), if fifo { ".fifo" } else { "" });
    let mut create = sqs.create_queue().queue_name(&name);
    if fifo {
        create = create.attributes(QueueAttributeName::FifoQueue, "true");
    }
    for (k, v) in attributes {
        create = create.attributes(k.clone(), v);
    }
    let url = create
        .send()
        .await
        .expect("CreateQueue")
        .queue_url
        .expect("a queue URL");
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("GetQueueAttributes")
        .attributes
        .and_then(|mut a| a.remove(&QueueAttributeName::QueueArn))
        .expect("a queue ARN");
    Queue {
        name,
        url,
        arn,
        fifo,
    }
}

/// A source queue whose redrive policy sends to a new dead-letter queue after
/// `max_receive_count` receives: (source, dead-letter queue).
pub async fn queue_with_dlq(
    sqs: &aws_sdk_sqs::Client,
    fifo: bool,
    max_receive_count: u32,
) -> (Queue, Queue) {
    let dlq = queue(sqs, "dlq", fifo, &[]).await;
    let policy = serde_json::json!({
        "deadLetterTargetArn": dlq.arn,
        "maxReceiveCount": max_receive_count,
    });
    let source = queue(
        sqs,
        "src",
        fifo,
        &[(QueueAttributeName::RedrivePolicy, policy.to_string())],
    )
    .await;
    (source, dlq)
}

/// A queue's approximate counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Depth {
    pub visible: u64,
    pub not_visible: u64,
}

impl Depth {
    pub fn is_empty(&self) -> bool {
        self.visible == 0 && self.not_visible == 0
    }
}

/// The visible and in-flight counts of the queue `url`.
pub async fn depth(sqs: &aws_sdk_sqs::Client, url: &str) -> Depth {
    let attributes: HashMap<QueueAttributeName, String> = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .expect("GetQueueAttributes")
        .attributes
        .unwrap_or_default();
    let count = |name: QueueAttributeName| {
        attributes
            .get(&name)
            .map_or(0, |v| v.parse().expect("a count"))
    };
    Depth {
        visible: count(QueueAttributeName::ApproximateNumberOfMessages),
        not_visible: count(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
    }
}

/// Runs the binary `program` with `args` (and `env`); its exit code and its stdout + stderr.
pub fn run(program: &str, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let out = std::process::Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}
