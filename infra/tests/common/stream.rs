//! Helpers of the DynamoDB stream mapping tests: tables with streams, writes, a handler that
//! records every batch.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::dynamodb::Event;
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use aws_sdk_dynamodb::types::AttributeValue;
use lambda_runtime::{Error, LambdaEvent};
use local_aws::Clients;
use local_aws::provision::{ProvisionedQueue, ProvisionedTable};
use local_aws::runner::{
    InProcess, Runner, RunningRunner, StreamEventSourceMapping, StreamOptions,
};
use local_aws::template::{AttributeType, KeyAttribute, KeyType, StreamViewType, Table};
use tokio_util::sync::CancellationToken;

pub const WAIT: Duration = Duration::from_secs(20);

/// Fast local pacing: tests wait milliseconds, not seconds.
pub fn fast() -> StreamOptions {
    StreamOptions {
        poll_interval: Duration::from_millis(20),
        shard_refresh_interval: Duration::from_millis(200),
        retry_base_delay: Duration::from_millis(10),
        retry_max_delay: Duration::from_millis(50),
    }
}

/// A table (key `k`) with a stream of `view`.
pub async fn table(clients: &Clients, view: StreamViewType) -> ProvisionedTable {
    let model = Table {
        logical_id: "T".into(),
        name: super::unique_name("st", false),
        key_schema: vec![KeyAttribute {
            name: "k".into(),
            attribute_type: AttributeType::String,
            key_type: KeyType::Hash,
        }],
        ttl_attribute: None,
        stream_view_type: Some(view),
        global_secondary_indexes: Vec::new(),
    };
    let table = local_aws::provision::create_table(&clients.dynamodb, &model)
        .await
        .expect("create the table");
    assert!(table.stream_arn.is_some(), "{table:?}");
    table
}

pub async fn put(clients: &Clients, table: &ProvisionedTable, key: &str, value: &str) {
    clients
        .dynamodb
        .put_item()
        .table_name(&table.name)
        .item("k", AttributeValue::S(key.into()))
        .item("v", AttributeValue::S(value.into()))
        .send()
        .await
        .expect("PutItem");
}

pub async fn delete(clients: &Clients, table: &ProvisionedTable, key: &str) {
    clients
        .dynamodb
        .delete_item()
        .table_name(&table.name)
        .key("k", AttributeValue::S(key.into()))
        .send()
        .await
        .expect("DeleteItem");
}

pub fn keys(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("r{i:02}")).collect()
}

/// Every batch every invocation saw: the keys, in order.
#[derive(Clone, Default)]
pub struct Seen(Arc<Mutex<Vec<Vec<String>>>>);

impl Seen {
    pub fn record(&self, event: &Event) -> Vec<(String, String)> {
        let batch: Vec<(String, String)> = event
            .records
            .iter()
            .map(|r| {
                let key = match r.change.keys.get("k") {
                    Some(serde_dynamo::AttributeValue::S(k)) => k.clone(),
                    other => panic!("no key: {other:?}"),
                };
                (key, r.change.sequence_number.clone().unwrap_or_default())
            })
            .collect();
        self.0
            .lock()
            .unwrap()
            .push(batch.iter().map(|(k, _)| k.clone()).collect());
        batch
    }

    pub fn batches(&self) -> Vec<Vec<String>> {
        self.0.lock().unwrap().clone()
    }

    pub fn flat(&self) -> Vec<String> {
        self.batches().concat()
    }
}

pub fn failures(sequence_numbers: &[String]) -> DynamoDbEventResponse {
    let mut response = DynamoDbEventResponse::default();
    for s in sequence_numbers {
        let mut f = DynamoDbBatchItemFailure::default();
        f.item_identifier = Some(s.clone());
        response.batch_item_failures.push(f);
    }
    response
}

/// Runs `mapping` with a handler that records each batch and answers `respond(invocation
/// index, batch of (key, sequence number))`.
pub fn start(
    clients: &Clients,
    mapping: StreamEventSourceMapping,
    seen: &Seen,
    respond: impl Fn(usize, &[(String, String)]) -> Result<DynamoDbEventResponse, String>
    + Send
    + Sync
    + 'static,
) -> RunningRunner {
    let (seen, respond) = (seen.clone(), Arc::new(respond));
    Runner::from_clients(clients)
        .stream_options(fast())
        .stream_mapping(
            mapping,
            InProcess::new(move |event: LambdaEvent<Event>| {
                let (seen, respond) = (seen.clone(), Arc::clone(&respond));
                async move {
                    let index = seen.batches().len();
                    let batch = seen.record(&event.payload);
                    respond(index, &batch).map_err(Error::from)
                }
            }),
        )
        .expect("a runner with a streams client")
        .start(CancellationToken::new())
}

pub fn mapping(name: &str, table: &ProvisionedTable) -> StreamEventSourceMapping {
    StreamEventSourceMapping::new(
        name,
        table.stream_arn.as_deref().unwrap(),
        Duration::from_secs(5),
    )
}

/// The invocation records on the on-failure queue.
pub async fn invocation_records(
    clients: &Clients,
    queue: &ProvisionedQueue,
) -> Vec<serde_json::Value> {
    super::receive_all(clients, &queue.url)
        .await
        .iter()
        .map(|b| serde_json::from_str(b).unwrap())
        .collect()
}
