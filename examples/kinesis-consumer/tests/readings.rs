//! The consumer in memory (no endpoint): the in-memory idempotency store and SQS, a `Meters` in a
//! map, and Kinesis events as Lambda delivers them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kinesis_consumer::{CountError, Meters, consumer};
use lambda_idempotency::batch::BatchReport;
use lambda_idempotency::prelude::*;
use lambda_idempotency::store::InMemoryBackend;
use lambda_idempotency::test_util::{InMemorySqs, StreamEventBuilder};
use serde_json::json;

/// The meters' totals, and the meters out of service.
#[derive(Clone, Default)]
struct Totals(Arc<Mutex<Counts>>);

#[derive(Default)]
struct Counts {
    counts: HashMap<String, i64>,
    refused: Vec<String>,
}

impl Meters for Totals {
    async fn add(&self, meter_id: &str, watt_hours: i64) -> Result<(), CountError> {
        let Counts {
            counts: totals,
            refused: out,
        } = &mut *self.0.lock().unwrap();
        if out.iter().any(|m| m == meter_id) {
            return Err(CountError::OutOfService(meter_id.into()));
        }
        *totals.entry(meter_id.into()).or_default() += watt_hours;
        Ok(())
    }
}

impl Totals {
    fn of(&self, meter: &str) -> Option<i64> {
        self.0.lock().unwrap().counts.get(meter).copied()
    }
}

fn reading(id: &str, meter: &str, watt_hours: i64) -> serde_json::Value {
    json!({"readingId": id, "meterId": meter, "wattHours": watt_hours})
}

/// Shard 0: sequence numbers 100 (meter-17), 101 (meter-42), 102 (meter-17).
fn readings() -> StreamEventBuilder {
    StreamEventBuilder::new()
        .record("meter-17", reading("r-1", "meter-17", 1200))
        .record("meter-42", reading("r-2", "meter-42", 300))
        .record("meter-17", reading("r-3", "meter-17", 450))
}

fn setup() -> (
    Totals,
    InMemorySqs,
    Consumer<Deduplicated<i64>, KinesisEvent>,
) {
    let (meters, sqs) = (Totals::default(), InMemorySqs::new());
    let builder = Consumer::builder(Arc::new(InMemoryBackend::default())).with_in_memory_sqs(&sqs);
    (meters.clone(), sqs, consumer(builder, meters))
}

/// The sequence numbers the response names: the shard's checkpoint.
fn checkpoints(report: &BatchReport<Deduplicated<i64>, KinesisEvent>) -> Vec<String> {
    let failures = report.response().batch_item_failures.into_iter();
    failures.filter_map(|f| f.item_identifier).collect()
}

#[tokio::test]
async fn a_reading_is_counted_once_however_often_it_is_delivered_or_put() {
    let (meters, _sqs, consumer) = setup();
    let report = consumer.process(&readings().kinesis()).await.unwrap();
    assert!(checkpoints(&report).is_empty());
    assert_eq!(
        (meters.of("meter-17"), meters.of("meter-42")),
        (Some(1650), Some(300))
    );

    // Lambda delivers the batch again, and the producer put r-1 again (a new sequence number).
    let again = readings().record("meter-17", reading("r-1", "meter-17", 1200));
    let report = consumer.process(&again.kinesis()).await.unwrap();
    assert!(report.successes().all(|(_, done)| done.is_duplicate()));
    assert_eq!(
        (meters.of("meter-17"), meters.of("meter-42")),
        (Some(1650), Some(300))
    );
}

#[tokio::test]
async fn a_failure_is_the_checkpoint_holds_its_meter_and_the_replay_redoes_nothing() {
    let (meters, _sqs, consumer) = setup();
    meters.0.lock().unwrap().refused.push("meter-17".into());
    let report = consumer.process(&readings().kinesis()).await.unwrap();
    // r-1 failed: the checkpoint. r-3, of the same meter, waited; r-2, another meter's, ran.
    assert_eq!(checkpoints(&report), ["100"]);
    assert_eq!(
        (meters.of("meter-17"), meters.of("meter-42")),
        (None, Some(300))
    );

    // The meter is back; Lambda delivers the shard again from the checkpoint.
    meters.0.lock().unwrap().refused.clear();
    let report = consumer.process(&readings().kinesis()).await.unwrap();
    assert!(checkpoints(&report).is_empty());
    assert_eq!(
        (meters.of("meter-17"), meters.of("meter-42")),
        (Some(1650), Some(300))
    );
}

#[tokio::test]
async fn a_poison_reading_is_dead_lettered_with_its_reason_and_the_shard_moves_on() {
    let (meters, sqs, consumer) = setup();
    let batch = StreamEventBuilder::new()
        .record("meter-42", reading("r-9", "meter-42", -5))
        .record("meter-42", reading("r-10", "meter-42", 300));
    let report = consumer.process(&batch.kinesis()).await.unwrap();
    assert!(checkpoints(&report).is_empty());
    assert_eq!(meters.of("meter-42"), Some(300));
    let dead = sqs.dead_letters();
    let copy: serde_json::Value = serde_json::from_str(dead[0].message.body()).unwrap();
    assert_eq!(copy["sequenceNumber"], "100");
    assert!(
        dead[0]
            .reason
            .contains("reading r-9 of meter meter-42 is negative"),
        "{}",
        dead[0].reason
    );

    // A replay sends nothing again.
    consumer.process(&batch.kinesis()).await.unwrap();
    assert_eq!(sqs.dead_letters().len(), 1);
}
