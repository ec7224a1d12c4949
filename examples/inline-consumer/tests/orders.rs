//! The consumer on its sample event, on the in-memory backend: no endpoint needed.

use std::sync::Arc;

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use inline_consumer::consumer;
use lambda_idempotency::prelude::*;
use lambda_idempotency::store::InMemoryBackend;
use lambda_runtime::{Context, LambdaEvent};

const EVENT: &str = include_str!("../events/order-placed.json");

fn event(json: &str) -> LambdaEvent<SqsEvent> {
    LambdaEvent::new(serde_json::from_str(json).unwrap(), Context::default())
}

/// The sample event with one body and message id changed.
fn edited(message_id: &str, body: &str) -> LambdaEvent<SqsEvent> {
    let mut e = event(EVENT);
    e.payload.records.truncate(1);
    e.payload.records[0].message_id = Some(message_id.into());
    e.payload.records[0].body = Some(body.into());
    e
}

fn failed(response: &SqsBatchResponse) -> Vec<&str> {
    response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect()
}

fn orders() -> (Arc<InMemoryBackend>, Consumer<Deduplicated<()>>) {
    let backend = Arc::new(InMemoryBackend::default());
    (
        backend.clone(),
        consumer(Consumer::builder(backend), "orders".into()),
    )
}

#[tokio::test]
async fn each_order_is_written_once_however_often_it_is_delivered() {
    let (backend, consumer) = orders();
    assert!(failed(&consumer.handle(event(EVENT)).await.unwrap()).is_empty());
    let written = backend.item("orders", "order-1001");
    assert_eq!(
        written.as_deref(),
        Some(r#"{"customerId":"cust-7","orderId":"order-1001","totalCents":4599}"#)
    );
    assert!(backend.item("orders", "order-1002").is_some());

    // The same batch again, and the same order from another producer (another message id, its
    // fields in another order): duplicates, nothing written.
    let report = consumer.process(&event(EVENT)).await.unwrap();
    assert_eq!(
        report.successes().filter(|(_, d)| d.is_duplicate()).count(),
        2
    );
    let again = r#"{"totalCents": 4599, "customerId": "cust-7", "orderId": "order-1001"}"#;
    let report = consumer
        .process(&edited("other-producer", again))
        .await
        .unwrap();
    assert!(report.successes().all(|(_, d)| d.is_duplicate()));
    assert_eq!(backend.item("orders", "order-1001"), written);
    assert!(backend.records().is_empty(), "the records are on the items");
}

#[tokio::test]
async fn another_payload_for_an_order_is_refused_and_the_item_kept() {
    let (backend, consumer) = orders();
    consumer.handle(event(EVENT)).await.unwrap();
    let written = backend.item("orders", "order-1001");

    let changed = r#"{"orderId":"order-1001","customerId":"cust-7","totalCents":1}"#;
    let report = consumer
        .process(&edited("m-changed", changed))
        .await
        .unwrap();
    let error = report.records[0].result.as_ref().unwrap_err();
    assert!(
        matches!(error, RecordError::PayloadMismatch { .. }),
        "{error}"
    );
    assert_eq!(failed(&report.response()), ["m-changed"]);
    assert_eq!(backend.item("orders", "order-1001"), written);
}

#[tokio::test]
async fn an_order_that_can_never_succeed_is_permanent_and_writes_nothing() {
    let (backend, consumer) = orders();
    let free = r#"{"orderId":"order-9","customerId":"cust-7","totalCents":0}"#;
    let report = consumer.process(&edited("m-free", free)).await.unwrap();
    let error = report.records[0].result.as_ref().unwrap_err();
    assert!(error.is_permanent(), "{error}");
    assert!(
        error
            .to_string()
            .contains("order order-9 has a total of 0 cents"),
        "{error}"
    );
    assert_eq!(backend.item("orders", "order-9"), None);
}
