//! The consumer in memory (no endpoint): the in-memory idempotency store and SQS, a `Stock` in a
//! map, Kafka events as the event source mapping delivers them, and AWS's documented sample.
//! There is no local Kafka broker.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kafka_consumer::{Applied, Stock, StockError, consumer};
use lambda_idempotency::batch::{BatchReport, KafkaMessage};
use lambda_idempotency::prelude::*;
use lambda_idempotency::store::InMemoryBackend;
use lambda_idempotency::test_util::{InMemorySqs, LambdaEvent, StreamEventBuilder};
use lambda_runtime::Context;
use serde_json::json;

/// The Amazon MSK event of AWS's Lambda developer guide ("Using Lambda with Amazon MSK",
/// "Example event"), as it is printed there.
const AWS_SAMPLE: &str = include_str!("../events/aws-msk-sample.json");

/// The products' stock, and the products being counted.
#[derive(Clone, Default)]
struct Levels(Arc<Mutex<Counts>>);

#[derive(Default)]
struct Counts {
    counts: HashMap<String, i64>,
    refused: Vec<String>,
}

impl Stock for Levels {
    async fn move_units(&self, sku: &str, delta: i64) -> Result<(), StockError> {
        let Counts {
            counts: levels,
            refused: stocktake,
        } = &mut *self.0.lock().unwrap();
        if stocktake.iter().any(|s| s == sku) {
            return Err(StockError::Stocktake(sku.into()));
        }
        *levels.entry(sku.into()).or_default() += delta;
        Ok(())
    }
}

impl Levels {
    fn of(&self, sku: &str) -> Option<i64> {
        self.0.lock().unwrap().counts.get(sku).copied()
    }
}

type StockConsumer = Consumer<Deduplicated<Applied>, KafkaEvent>;

fn setup() -> (Levels, InMemorySqs, StockConsumer) {
    let (levels, sqs) = (Levels::default(), InMemorySqs::new());
    let builder = Consumer::builder(Arc::new(InMemoryBackend::default())).with_in_memory_sqs(&sqs);
    (levels.clone(), sqs, consumer(builder, levels))
}

fn change(id: &str, sku: &str, delta: i64) -> serde_json::Value {
    json!({"changeId": id, "sku": sku, "delta": delta})
}

/// Partition 0 (`payments-0`): offsets 100 (sku-1), 101 (sku-2), 102 (sku-1), 103 (sku-3's
/// tombstone).
fn changes() -> StreamEventBuilder {
    StreamEventBuilder::new()
        .record("sku-1", change("c-1", "sku-1", 10))
        .record("sku-2", change("c-2", "sku-2", -3))
        .record("sku-1", change("c-3", "sku-1", -4))
        .tombstone("sku-3")
}

/// The (partition, offset) pairs the response names.
fn reported(report: &BatchReport<Deduplicated<Applied>, KafkaEvent>) -> Vec<(String, i64)> {
    let response = serde_json::to_value(report.response()).unwrap();
    let failures = response["batchItemFailures"].as_array().unwrap().iter();
    let id = |f: &serde_json::Value| f["itemIdentifier"].clone();
    failures
        .map(|f| {
            (
                id(f)["partition"].as_str().unwrap().to_owned(),
                id(f)["offset"].as_i64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn each_change_applies_once_and_a_tombstone_is_read_as_none() {
    let (levels, _sqs, consumer) = setup();
    let report = consumer.process(&changes().kafka()).await.unwrap();
    assert!(reported(&report).is_empty());
    assert_eq!(
        (levels.of("sku-1"), levels.of("sku-2")),
        (Some(6), Some(-3))
    );
    let outputs: Vec<_> = report.successes().map(|(_, done)| done.clone()).collect();
    assert!(
        outputs.contains(&Deduplicated::Processed(Applied::Tombstone)),
        "{outputs:?}"
    );

    let replay = consumer.process(&changes().kafka()).await.unwrap();
    assert!(replay.successes().all(|(_, done)| done.is_duplicate()));
    assert_eq!(
        (levels.of("sku-1"), levels.of("sku-2")),
        (Some(6), Some(-3))
    );
}

#[tokio::test]
async fn a_failure_is_its_partitions_checkpoint_holds_its_key_and_the_replay_redoes_nothing() {
    let (levels, _sqs, consumer) = setup();
    levels.0.lock().unwrap().refused.push("sku-1".into());
    let report = consumer.process(&changes().kafka()).await.unwrap();
    // c-1 (offset 100) failed: the partition's lowest reported offset. c-3, sku-1's too, waited;
    // sku-2's change ran.
    let reported = reported(&report);
    assert_eq!(
        reported.iter().map(|(_, o)| *o).min(),
        Some(100),
        "{reported:?}"
    );
    assert!(
        reported.iter().all(|(p, _)| p == "payments-0"),
        "{reported:?}"
    );
    assert_eq!((levels.of("sku-1"), levels.of("sku-2")), (None, Some(-3)));

    // The stocktake ends; Lambda delivers the partition again from the checkpoint.
    levels.0.lock().unwrap().refused.clear();
    let report = consumer.process(&changes().kafka()).await.unwrap();
    assert!(self::reported(&report).is_empty());
    assert_eq!(
        (levels.of("sku-1"), levels.of("sku-2")),
        (Some(6), Some(-3))
    );
}

#[tokio::test]
async fn a_change_that_can_never_apply_is_dead_lettered_with_its_partition_and_offset() {
    let (levels, sqs, consumer) = setup();
    let batch = StreamEventBuilder::new()
        .record("sku-1", change("c-9", "sku-1", 0))
        .record("sku-1", change("c-10", "sku-1", 5));
    let report = consumer.process(&batch.kafka()).await.unwrap();
    assert!(reported(&report).is_empty());
    assert_eq!(levels.of("sku-1"), Some(5));
    let dead = sqs.dead_letters();
    let copy: serde_json::Value = serde_json::from_str(dead[0].message.body()).unwrap();
    assert_eq!(
        (copy["topic"].as_str(), copy["offset"].as_i64()),
        (Some("payments"), Some(100))
    );
    let reason = &dead[0].reason;
    assert!(
        reason.contains("change c-9 of sku-1 moves no units"),
        "{reason}"
    );

    // A replay sends nothing again.
    consumer.process(&batch.kafka()).await.unwrap();
    assert_eq!(sqs.dead_letters().len(), 1);
}

/// The sample's key, `abcDEFghiJKLmnoPQRstuVWXyz1234==`, has non-zero trailing bits: a strict
/// base64 decoder refuses it ("Invalid last symbol 52, offset 29"), where Python's `b64decode`
/// (Powertools) reads it. `KafkaMessage::decode` must read what AWS prints.
#[tokio::test]
async fn aws_documented_sample_event_is_decoded_and_dead_lettered_as_not_a_stock_change() {
    let sample: KafkaEvent = serde_json::from_str(AWS_SAMPLE).expect("AWS's sample parses");
    let message = KafkaMessage::decode(&sample.records["mytopic-0"][0]).unwrap();
    assert_eq!(
        (message.topic.as_str(), message.partition, message.offset),
        ("mytopic", 0, 15)
    );
    assert_eq!(
        message.value.as_deref(),
        Some(&b"Hello, this is a test."[..])
    );
    assert_eq!(message.header("headerKey"), Some(&b"headerValue"[..]));

    let (_levels, sqs, consumer) = setup();
    let report = consumer
        .process(&LambdaEvent::new(sample, Context::default()))
        .await
        .unwrap();
    assert!(reported(&report).is_empty());
    let copy: serde_json::Value =
        serde_json::from_str(sqs.dead_letters()[0].message.body()).unwrap();
    assert_eq!(copy["record"]["value"], "SGVsbG8sIHRoaXMgaXMgYSB0ZXN0Lg==");
}
