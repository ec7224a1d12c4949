//! The local endpoint these tests run against, and what they read back from it.
//!
//! `AWS_ENDPOINT_URL` names the endpoint (moto, LocalStack; the region and credentials come from
//! `AWS_REGION`, `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`): without it the tests fail with
//! a message, and never reach an AWS account. Every table and queue gets a name no other test
//! uses, so the tests run at once against one endpoint.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};

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

/// Creates a table with the string partition key `key`; returns its name. The idempotency table
/// is `create_table(client, "idempotency", "id")` (the library's default key attribute; in an
/// account, also turn on TTL on `expiration`).
pub async fn create_table(client: &aws_sdk_dynamodb::Client, name: &str, key: &str) -> String {
    let name = unique(name);
    let attribute = AttributeDefinition::builder()
        .attribute_name(key)
        .attribute_type(ScalarAttributeType::S)
        .build()
        .unwrap();
    let hash = KeySchemaElement::builder()
        .attribute_name(key)
        .key_type(KeyType::Hash)
        .build()
        .unwrap();
    client
        .create_table()
        .table_name(&name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(attribute)
        .key_schema(hash)
        .send()
        .await
        .unwrap_or_else(|e| panic!("creating table {name}: {}", DisplayErrorContext(e)));
    name
}

/// The item of `table` whose string key `key.0` is `key.1` (a consistent read), if there is one.
pub async fn item(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    key: (&str, &str),
) -> Option<HashMap<String, AttributeValue>> {
    client
        .get_item()
        .table_name(table)
        .key(key.0, AttributeValue::S(key.1.to_owned()))
        .consistent_read(true)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GetItem on {table}: {}", DisplayErrorContext(e)))
        .item
}

/// The number attribute `attribute` of the item of `table` keyed `key`, if both exist.
pub async fn number(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    key: (&str, &str),
    attribute: &str,
) -> Option<i64> {
    let item = item(client, table, key).await?;
    let n = item.get(attribute)?.as_n().ok()?;
    Some(n.parse().expect("an integer"))
}

/// Creates a standard queue; returns its URL.
pub async fn create_queue(client: &aws_sdk_sqs::Client, name: &str) -> String {
    let name = unique(name);
    client
        .create_queue()
        .queue_name(&name)
        .send()
        .await
        .unwrap_or_else(|e| panic!("creating queue {name}: {e:?}"))
        .queue_url
        .expect("a queue URL")
}

/// A message of a dead-letter queue: its body as JSON and its `DeadLetterReason`.
#[derive(Debug)]
pub struct DeadLetter {
    /// The body: the record, its shard and sequence number.
    pub body: serde_json::Value,
    /// Why it was moved there.
    pub reason: String,
}

/// Every message of the queue at `url` (received, not deleted; the queue is the test's own).
pub async fn dead_letters(client: &aws_sdk_sqs::Client, url: &str) -> Vec<DeadLetter> {
    let received = client
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .message_attribute_names("All")
        .send()
        .await
        .unwrap_or_else(|e| panic!("receiving from {url}: {e:?}"));
    received
        .messages
        .unwrap_or_default()
        .into_iter()
        .map(|m| DeadLetter {
            body: serde_json::from_str(m.body.as_deref().unwrap_or_default()).expect("a JSON body"),
            reason: m
                .message_attributes
                .unwrap_or_default()
                .get("DeadLetterReason")
                .and_then(|a| a.string_value.clone())
                .unwrap_or_default(),
        })
        .collect()
}
