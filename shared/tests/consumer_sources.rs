//! A consumer's SQS-born settings on a stream or a Kafka topic: each works there or is warned of
//! in the source's own terms when the consumer is built. The item lookup takes the source's
//! record; the no-dead-letter-queue and the expiry warnings speak of the source (its shard, its
//! retention); `SOURCE_QUEUE_URL` on a stream is a warning naming it; and the in-memory backend
//! fails on demand (a throttled write), a store failure never dead-lettered. In memory: no
//! endpoint.

#[path = "common/logs.rs"]
mod logs;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use lambda_idempotency::consumer::{ConsumerBuilder, ConsumerConfig};
use lambda_idempotency::prelude::*;
use lambda_idempotency::store::{InMemoryBackend, MemoryWrite};
use lambda_idempotency::test_util::fault::{Crash, Fault, Faults};
use lambda_idempotency::test_util::{InMemorySqs, StreamEventBuilder};
use lambda_idempotency::time::SystemClock;
use logs::Logs;
use serde_json::json;
use tracing::Level;

const DLQ: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/readings-dlq";

fn builder(vars: &[(&str, &str)]) -> ConsumerBuilder<Arc<InMemoryBackend>> {
    let vars: HashMap<&str, &str> = vars.iter().copied().collect();
    let config = ConsumerConfig::from_lookup(|name| vars.get(name).map(|v| v.to_string()));
    ConsumerBuilder::with_config(Arc::new(InMemoryBackend::default()), config.unwrap())
}

fn ok_handler<R: lambda_idempotency::batch::Record>() -> impl RecordHandler<R, Output = ()> + 'static
{
    json(|_: serde_json::Value, _ctx: RecordContext| async { Ok::<_, Error>(()) })
}

fn checkpoints<R: serde::Serialize>(response: &R) -> Vec<serde_json::Value> {
    let response = serde_json::to_value(response).unwrap();
    let failures = response["batchItemFailures"].as_array().unwrap();
    failures
        .iter()
        .map(|f| f["itemIdentifier"].clone())
        .collect()
}

/// The warnings `build` logs when it builds its consumer.
fn warnings_of(build: impl FnOnce()) -> Vec<String> {
    let (logs, _guard) = Logs::capture();
    build();
    let errors: Vec<_> = logs
        .all()
        .into_iter()
        .filter(|l| l.level == Level::ERROR)
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    logs.at(Level::WARN)
}

fn only<'a>(warnings: &'a [String], about: &str) -> &'a str {
    let found: Vec<_> = warnings.iter().filter(|w| w.contains(about)).collect();
    assert_eq!(found.len(), 1, "one warning of {about}: {warnings:#?}");
    found[0]
}

#[tokio::test]
async fn the_item_lookup_takes_a_kinesis_record_and_answers_for_its_key() {
    let backend = Arc::new(InMemoryBackend::default());
    let down = Arc::new(AtomicBool::new(false));
    let d = down.clone();
    let reading = move |r: serde_json::Value, _ctx: RecordContext| {
        let down = d.load(Ordering::SeqCst);
        async move {
            if down {
                return Err(Error::from("the meters table is unreachable"));
            }
            let id = r["readingId"].as_str().unwrap_or_default().to_owned();
            Ok(InlinePut::new(
                (),
                MemoryWrite::put_if_absent("readings", &id, "{}"),
            ))
        }
    };
    let consumer = Consumer::builder(backend.clone())
        .source::<KinesisEvent>()
        .with_keys(KeyConfig::json_pointer("/readingId"))
        .with_item_lookup(|reading_id: &str, record: &KinesisEventRecord| {
            assert_eq!(record.kinesis.partition_key, "meter-1");
            Some(MemoryWrite::put_if_absent("readings", reading_id, ""))
        })
        .inline(json(reading));
    let first = StreamEventBuilder::new().record("meter-1", json!({"readingId": "r-1"}));
    let report = consumer.process(&first.kinesis()).await.unwrap();
    assert!(checkpoints(&report.response()).is_empty());

    // The producer put the reading again (a new sequence number), and this time the handler
    // fails before giving its item: the lookup finds the item the first delivery wrote, so the
    // record is a duplicate, not the shard's checkpoint.
    down.store(true, Ordering::SeqCst);
    let again = StreamEventBuilder::new()
        .at(200)
        .record("meter-1", json!({"readingId": "r-1"}));
    let report = consumer.process(&again.kinesis()).await.unwrap();
    assert!(
        checkpoints(&report.response()).is_empty(),
        "{:?}",
        report.records[0].result.as_ref().err()
    );
    assert!(report.successes().all(|(_, done)| done.is_duplicate()));
}

#[tokio::test]
async fn an_item_lookup_set_before_the_source_is_dropped_with_a_warning() {
    let warnings = warnings_of(|| {
        let _consumer = builder(&[("DEAD_LETTER_QUEUE_URL", DLQ)])
            .with_item_lookup(|key: &str, _: &SqsMessage| {
                Some(MemoryWrite::put_if_absent("t", key, ""))
            })
            .source::<KinesisEvent>()
            .inline(json(|_: serde_json::Value, _ctx: RecordContext| async {
                Ok::<_, Error>(InlinePut::new((), MemoryWrite::put_if_absent("t", "k", "")))
            }));
    });
    let warning = only(&warnings, "item lookup");
    for says in ["SQS message", "Kinesis record", "after `source`"] {
        assert!(warning.contains(says), "{says} in {warning}");
    }
}

#[tokio::test]
async fn no_dead_letter_queue_is_a_warning_in_the_sources_terms() {
    let kinesis = warnings_of(|| {
        let _ = builder(&[])
            .source::<KinesisEvent>()
            .idempotent(ok_handler());
    });
    let warning = only(&kinesis, "DEAD_LETTER_QUEUE_URL");
    for says in [
        "Kinesis",
        "checkpoint",
        "holds the shard",
        "MaximumRetryAttempts",
    ] {
        assert!(warning.contains(says), "{says} in {warning}");
    }
    assert!(!warning.contains("redrive"), "{warning}");

    let kafka = warnings_of(|| {
        let _ = builder(&[]).source::<KafkaEvent>().idempotent(ok_handler());
    });
    let warning = only(&kafka, "DEAD_LETTER_QUEUE_URL");
    assert!(
        warning.contains("Kafka") && warning.contains("partition"),
        "{warning}"
    );

    let sqs = warnings_of(|| {
        let _ = builder(&[]).idempotent(ok_handler());
    });
    let warning = only(&sqs, "DEAD_LETTER_QUEUE_URL");
    assert!(warning.contains("redrive policy"), "{warning}");
}

#[tokio::test]
async fn without_a_dead_letter_queue_a_poison_record_holds_its_shard_as_the_warning_says() {
    let consumer = builder(&[]).source::<KinesisEvent>().idempotent(json(
        |_: serde_json::Value, _ctx: RecordContext| async {
            Err::<(), Error>(PermanentError::new("never a reading").into())
        },
    ));
    let batch = StreamEventBuilder::new().record("meter-1", json!({"readingId": "r-1"}));
    let report = consumer.process(&batch.kinesis()).await.unwrap();
    assert_eq!(checkpoints(&report.response()), [json!("100")]);
}

#[tokio::test]
async fn the_expiry_is_compared_with_what_each_source_keeps() {
    let expiry_warning = |ttl: &str, build: &dyn Fn(ConsumerBuilder<Arc<InMemoryBackend>>)| {
        let warnings = warnings_of(|| {
            build(builder(&[
                ("IDEMPOTENCY_TTL_SECONDS", ttl),
                ("DEAD_LETTER_QUEUE_URL", DLQ),
            ]))
        });
        let found: Vec<_> = warnings
            .into_iter()
            .filter(|w| w.contains("IDEMPOTENCY_TTL_SECONDS"))
            .collect();
        assert!(found.len() <= 1, "{found:#?}");
        found.into_iter().next()
    };
    let kinesis = |b: ConsumerBuilder<_>| drop(b.source::<KinesisEvent>().idempotent(ok_handler()));
    let dynamodb =
        |b: ConsumerBuilder<_>| drop(b.source::<DynamoDbEvent>().idempotent(ok_handler()));
    let kafka = |b: ConsumerBuilder<_>| drop(b.source::<KafkaEvent>().idempotent(ok_handler()));
    let sqs = |b: ConsumerBuilder<_>| drop(b.idempotent(ok_handler()));

    // An hour: shorter than every source keeps a record.
    let warning = expiry_warning("3600", &kinesis).expect("a warning on Kinesis");
    for says in [
        "Kinesis",
        "3600",
        "86400",
        "365 days",
        "RetentionPeriodHours",
    ] {
        assert!(warning.contains(says), "{says} in {warning}");
    }
    assert!(!warning.contains("queue"), "{warning}");
    let warning = expiry_warning("3600", &dynamodb).expect("a warning on DynamoDB Streams");
    assert!(
        warning.contains("DynamoDB Streams") && warning.contains("24 hours"),
        "{warning}"
    );
    let warning = expiry_warning("3600", &kafka).expect("a warning on Kafka");
    for says in ["Kafka", "604800", "retention.ms", "cannot read it"] {
        assert!(warning.contains(says), "{says} in {warning}");
    }
    let warning = expiry_warning("3600", &sqs).expect("a warning on SQS");
    assert!(
        warning.contains("1555200") && warning.contains("MessageRetentionPeriod"),
        "{warning}"
    );

    // Two days: enough for a DynamoDB stream and Kinesis's default retention, not for SQS's
    // rule or Kafka's default retention.
    assert_eq!(expiry_warning("172800", &dynamodb), None);
    assert_eq!(expiry_warning("172800", &kinesis), None);
    assert!(expiry_warning("172800", &kafka).is_some());
    assert!(expiry_warning("172800", &sqs).is_some());
}

#[tokio::test]
async fn a_source_queue_on_a_stream_is_a_warning_naming_the_source() {
    let queue = "https://sqs.us-east-1.amazonaws.com/123456789012/orders";
    let warnings = warnings_of(|| {
        let _ = builder(&[("SOURCE_QUEUE_URL", queue), ("DEAD_LETTER_QUEUE_URL", DLQ)])
            .source::<DynamoDbEvent>()
            .idempotent(ok_handler());
    });
    let warning = only(&warnings, "SOURCE_QUEUE_URL");
    assert!(
        warning.contains("DynamoDB Streams") && warning.contains(queue),
        "{warning}"
    );
    let on_sqs = warnings_of(|| {
        let _ = builder(&[("SOURCE_QUEUE_URL", queue), ("DEAD_LETTER_QUEUE_URL", DLQ)])
            .idempotent(ok_handler());
    });
    assert!(
        !on_sqs.iter().any(|w| w.contains("SOURCE_QUEUE_URL")),
        "{on_sqs:#?}"
    );
}

#[tokio::test]
async fn a_throttled_store_holds_the_record_as_the_checkpoint_and_dead_letters_nothing() {
    let faults = Faults::new(
        "dynamodb",
        Arc::new(Crash::default()),
        Arc::new(SystemClock),
    );
    let backend = Arc::new(InMemoryBackend::default().with_faults(faults.clone()));
    let sqs = InMemorySqs::new();
    let consumer = Consumer::builder(backend.clone())
        .with_in_memory_sqs(&sqs)
        .max_attempts(1)
        .source::<KinesisEvent>()
        .idempotent(ok_handler());
    let batch = StreamEventBuilder::new()
        .record("meter-1", json!({"readingId": "r-1"}))
        .record("meter-2", json!({"readingId": "r-2"}));

    faults.arm(1, Fault::Fail);
    let report = consumer.process(&batch.kinesis()).await.unwrap();
    let refused = report.records.iter().find_map(|r| r.result.as_ref().err());
    let refused = refused
        .expect("one record met the throttled write")
        .to_string();
    assert!(refused.contains("UpdateItem"), "{refused}");
    assert_eq!(checkpoints(&report.response()).len(), 1);
    assert!(
        sqs.dead_letters().is_empty(),
        "a store failure is never dead-lettered"
    );

    // The store answers again: the replay completes both, with an attempt budget of one.
    let replay = consumer.process(&batch.kinesis()).await.unwrap();
    assert!(checkpoints(&replay.response()).is_empty());
    assert!(sqs.dead_letters().is_empty());
    assert_eq!(backend.records().len(), 2);
}
