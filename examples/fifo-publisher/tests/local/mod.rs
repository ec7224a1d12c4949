//! The local endpoint these tests run against, and what they read back from it.
//!
//! `AWS_ENDPOINT_URL` names the endpoint (moto or DynamoDB Local; the region and credentials come
//! from `AWS_REGION`, `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`): without it the tests fail
//! with a message, and never reach an AWS account. Every queue gets a name no other test uses,
//! so the tests run at once against one endpoint.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::QueueAttributeName;

/// The SDK configuration of the local endpoint.
pub async fn sdk_config() -> aws_config::SdkConfig {
    let endpoint = std::env::var("AWS_ENDPOINT_URL").unwrap_or_default();
    assert!(
        !endpoint.is_empty(),
        "AWS_ENDPOINT_URL is not set: these tests need a local endpoint (README.md, \"Test it\")"
    );
    aws_config::load_from_env().await
}

/// `name` made unique: the process, the time and a counter.
fn unique(name: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{name}-{}-{nanos}-{n}", std::process::id())
}

/// Creates a FIFO queue without content-based deduplication (every message carries its own
/// deduplication id); returns its URL.
pub async fn create_fifo_queue(client: &aws_sdk_sqs::Client, name: &str) -> String {
    let name = format!("{}.fifo", unique(name));
    client
        .create_queue()
        .queue_name(&name)
        .attributes(QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .unwrap_or_else(|e| panic!("creating queue {name}: {}", DisplayErrorContext(e)))
        .queue_url
        .expect("a queue URL")
}
