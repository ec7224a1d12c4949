//! What the examples' tests share (a dev-dependency of each example, not an example itself).
//!
//! The tests run against the local AWS endpoint in `AWS_ENDPOINT_URL` (moto, started by
//! `make test` or `infra/local-aws/local-aws run -- ...`). Without it they fail with a message
//! saying how to start one: they never skip. Every table and queue gets a name no other test
//! uses, so the tests can run at once against one endpoint.

use std::collections::HashMap;

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use aws_sdk_dynamodb::types::AttributeValue;
use lambda_runtime::{Context, LambdaEvent};
use local_aws::template::{AttributeType, KeyAttribute, KeyType, Naming, Queue, Table};

/// The SDK configuration of the local endpoint.
///
/// # Panics
///
/// When `AWS_ENDPOINT_URL` is not set, with a message naming it and how to start an endpoint.
pub async fn sdk_config() -> aws_config::SdkConfig {
    local_aws::local_sdk_config()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A DynamoDB client of the local endpoint (see [`sdk_config`]).
pub async fn dynamodb() -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::new(&sdk_config().await)
}

/// An SQS client of the local endpoint (see [`sdk_config`]).
pub async fn sqs() -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::new(&sdk_config().await)
}

/// Creates a table named `{unique prefix}{name}` with the string partition key `key`, and TTL on
/// `ttl` when given; returns its name.
pub async fn create_table(
    client: &aws_sdk_dynamodb::Client,
    name: &str,
    key: &str,
    ttl: Option<&str>,
) -> String {
    let table = Table {
        logical_id: name.to_owned(),
        name: Naming::unique("ex").apply(name),
        key_schema: vec![KeyAttribute {
            name: key.to_owned(),
            attribute_type: AttributeType::String,
            key_type: KeyType::Hash,
        }],
        ttl_attribute: ttl.map(str::to_owned),
        stream_view_type: None,
        global_secondary_indexes: Vec::new(),
    };
    local_aws::provision::create_table(client, &table)
        .await
        .unwrap_or_else(|e| panic!("creating table {}: {e}", table.name))
        .name
}

/// Creates an idempotency table as the library expects by default (string key `id`, TTL on
/// `expiration`: see `lambda_idempotency::store::Attributes`); returns its name.
pub async fn create_idempotency_table(client: &aws_sdk_dynamodb::Client) -> String {
    create_table(client, "idempotency", "id", Some("expiration")).await
}

/// Creates a FIFO queue named `{unique prefix}{name}.fifo`, without content-based deduplication
/// (every message carries its own deduplication id); returns its URL.
pub async fn create_fifo_queue(client: &aws_sdk_sqs::Client, name: &str) -> String {
    let queue = Queue {
        logical_id: name.to_owned(),
        name: Naming::unique("ex").apply(&format!("{name}.fifo")),
        fifo: true,
        content_based_deduplication: false,
        visibility_timeout: 30,
        message_retention_period: 345_600,
        delay_seconds: 0,
        receive_message_wait_time_seconds: None,
        maximum_message_size: None,
        redrive: None,
        redrive_allow_policy: None,
    };
    local_aws::provision::create_queue(client, &queue, None)
        .await
        .unwrap_or_else(|e| panic!("creating queue {}: {e}", queue.name))
        .url
}

/// An SQS event from its JSON (a sample event of `events/`), as the runtime hands it to a
/// handler, with a default context (no deadline).
///
/// # Panics
///
/// When `json` is not an SQS event, naming the parse error.
pub fn sqs_event(json: &str) -> LambdaEvent<SqsEvent> {
    let event = serde_json::from_str(json)
        .unwrap_or_else(|e| panic!("the sample event is not an SQS event: {e}"));
    LambdaEvent::new(event, Context::default())
}

/// The message ids a partial batch response sends back to the queue, in its order.
pub fn failed_ids(response: &SqsBatchResponse) -> Vec<&str> {
    let failures = &response.batch_item_failures;
    failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect()
}

/// The item of `table` whose string key `key` is `value` (a consistent read), if there is one.
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
        .unwrap_or_else(|e| panic!("GetItem on {table}: {e:?}"))
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
    Some(
        n.parse()
            .unwrap_or_else(|e| panic!("{attribute} = {n} is not an integer: {e}")),
    )
}

/// How many items `table` holds (one `Scan`: for the small tables of a test).
pub async fn count(client: &aws_sdk_dynamodb::Client, table: &str) -> usize {
    let scan = client
        .scan()
        .table_name(table)
        .send()
        .await
        .unwrap_or_else(|e| panic!("Scan on {table}: {e:?}"));
    assert!(
        scan.last_evaluated_key.is_none(),
        "{table} holds more than one page of items"
    );
    scan.items.unwrap_or_default().len()
}
