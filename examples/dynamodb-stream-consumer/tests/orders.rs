//! The consumer in memory (no endpoint): the in-memory idempotency store and SQS, `Customers` in
//! a map, and DynamoDB stream events as Lambda delivers them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use dynamodb_stream_consumer::{Customers, Order, SpendError, consumer};
use lambda_idempotency::batch::BatchReport;
use lambda_idempotency::prelude::*;
use lambda_idempotency::store::InMemoryBackend;
use lambda_idempotency::test_util::{InMemorySqs, StreamEventBuilder};
use serde_json::json;

/// The customers' spend, and the customers closed.
#[derive(Clone, Default)]
struct Spend(Arc<Mutex<Counts>>);

#[derive(Default)]
struct Counts {
    counts: HashMap<String, i64>,
    refused: Vec<String>,
}

impl Customers for Spend {
    async fn add_spend(&self, order: &Order) -> Result<(), SpendError> {
        let Counts {
            counts: spent,
            refused: closed,
        } = &mut *self.0.lock().unwrap();
        if closed.contains(&order.customer_id) {
            return Err(SpendError::CustomerClosed(order.customer_id.clone()));
        }
        *spent.entry(order.customer_id.clone()).or_default() += order.total_cents;
        Ok(())
    }
}

impl Spend {
    fn of(&self, customer: &str) -> Option<i64> {
        self.0.lock().unwrap().counts.get(customer).copied()
    }
}

fn order(id: &str, customer: &str, cents: i64) -> serde_json::Value {
    json!({"orderId": id, "customerId": customer, "totalCents": cents})
}

/// Shard 0: sequence numbers 100 (cust-7), 101 (cust-9), 102 (cust-7), each an inserted order.
fn orders() -> StreamEventBuilder {
    StreamEventBuilder::new()
        .record("o-1", order("o-1", "cust-7", 4599))
        .record("o-2", order("o-2", "cust-9", 1000))
        .record("o-3", order("o-3", "cust-7", 1))
}

type OrdersConsumer = Consumer<Deduplicated<i64>, DynamoDbEvent>;

fn setup() -> (Spend, InMemorySqs, OrdersConsumer) {
    let (spend, sqs) = (Spend::default(), InMemorySqs::new());
    let builder = Consumer::builder(Arc::new(InMemoryBackend::default())).with_in_memory_sqs(&sqs);
    (spend.clone(), sqs, consumer(builder, spend))
}

/// The sequence numbers the response names: the shard's checkpoint.
fn checkpoints(report: &BatchReport<Deduplicated<i64>, DynamoDbEvent>) -> Vec<String> {
    let failures = report.response().batch_item_failures.into_iter();
    failures.filter_map(|f| f.item_identifier).collect()
}

#[tokio::test]
async fn each_order_is_counted_once_however_often_its_record_is_delivered() {
    let (spend, _sqs, consumer) = setup();
    let report = consumer.process(&orders().dynamodb()).await.unwrap();
    assert!(checkpoints(&report).is_empty());
    assert_eq!(
        (spend.of("cust-7"), spend.of("cust-9")),
        (Some(4600), Some(1000))
    );

    let replay = consumer.process(&orders().dynamodb()).await.unwrap();
    assert!(replay.successes().all(|(_, done)| done.is_duplicate()));
    assert_eq!(
        (spend.of("cust-7"), spend.of("cust-9")),
        (Some(4600), Some(1000))
    );
}

#[tokio::test]
async fn a_failure_is_the_checkpoint_holds_its_customer_and_the_replay_redoes_nothing() {
    let (spend, _sqs, consumer) = setup();
    spend.0.lock().unwrap().refused.push("cust-7".into());
    let report = consumer.process(&orders().dynamodb()).await.unwrap();
    // o-1 failed: the checkpoint. o-3, the same customer's, waited; o-2, another's, ran.
    assert_eq!(checkpoints(&report), ["100"]);
    assert_eq!((spend.of("cust-7"), spend.of("cust-9")), (None, Some(1000)));

    // The account is reopened; Lambda delivers the shard again from the checkpoint.
    spend.0.lock().unwrap().refused.clear();
    let report = consumer.process(&orders().dynamodb()).await.unwrap();
    assert!(checkpoints(&report).is_empty());
    assert_eq!(
        (spend.of("cust-7"), spend.of("cust-9")),
        (Some(4600), Some(1000))
    );
}

#[tokio::test]
async fn a_poison_order_is_dead_lettered_with_its_reason_and_the_shard_moves_on() {
    let (spend, sqs, consumer) = setup();
    let batch = StreamEventBuilder::new()
        .record("o-5", order("o-5", "cust-7", 0))
        .record("o-6", order("o-6", "cust-7", 250));
    let report = consumer.process(&batch.dynamodb()).await.unwrap();
    assert!(checkpoints(&report).is_empty());
    assert_eq!(spend.of("cust-7"), Some(250));
    let dead = sqs.dead_letters();
    let copy: serde_json::Value = serde_json::from_str(dead[0].message.body()).unwrap();
    assert_eq!(copy["sequenceNumber"], "100");
    let reason = &dead[0].reason;
    assert!(
        reason.contains("order o-5 has a total of 0 cents"),
        "{reason}"
    );

    // A replay sends nothing again.
    consumer.process(&batch.dynamodb()).await.unwrap();
    assert_eq!(sqs.dead_letters().len(), 1);
}
