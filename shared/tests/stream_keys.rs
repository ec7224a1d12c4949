//! Default idempotency keys name their source: two Kinesis streams, or two Kafka clusters with a
//! topic of the same name, at the same shard and sequence number (partition and offset), never
//! share a key, so neither one's records are skipped as the other's duplicates.

use std::sync::{Arc, Mutex};

use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{BatchProcessor, RecordContext, RecordHandlerExt, json};
use lambda_idempotency::store::InMemoryBackend;
use lambda_idempotency::test_util::StreamEventBuilder;
use serde_json::{Value, json};

/// A handler, idempotent on one store for both sources, that logs each record's id.
fn logging(
    log: Arc<Mutex<Vec<String>>>,
) -> impl lambda_idempotency::batch::RecordHandler<aws_lambda_events::kinesis::KinesisEventRecord>
+ lambda_idempotency::batch::RecordHandler<aws_lambda_events::kafka::KafkaRecord> {
    json(move |_: Value, ctx: RecordContext| {
        log.lock().unwrap().push(ctx.message_id);
        async { Ok::<_, std::convert::Infallible>(()) }
    })
    .idempotent(Idempotency::new(InMemoryBackend::default()))
}

fn one_record() -> StreamEventBuilder {
    StreamEventBuilder::new().record("k", json!({"n": 1}))
}

#[tokio::test]
async fn two_kinesis_streams_at_the_same_sequence_number_do_not_share_a_key() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let handler = logging(log.clone());
    let payments = one_record().kinesis();
    let mut refunds = payments.clone();
    refunds.payload.records[0].event_source_arn =
        Some("arn:aws:kinesis:us-east-1:123456789012:stream/refunds".into());
    let processor = BatchProcessor::new();
    processor.process(&payments, &handler).await.unwrap();
    processor.process(&refunds, &handler).await.unwrap();
    // A replay of either is a duplicate.
    processor.process(&refunds, &handler).await.unwrap();
    assert_eq!(
        *log.lock().unwrap(),
        [
            "arn:aws:kinesis:us-east-1:123456789012:stream/payments/shardId-000000000000:100",
            "arn:aws:kinesis:us-east-1:123456789012:stream/refunds/shardId-000000000000:100",
        ]
    );
}

#[tokio::test]
async fn two_kafka_clusters_with_the_same_topic_do_not_share_a_key() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let handler = logging(log.clone());
    let msk = one_record().kafka();
    let mut second = msk.clone();
    second.payload.event_source_arn =
        Some("arn:aws:kafka:us-east-1:123456789012:cluster/payments-eu/def".into());
    let mut self_managed = msk.clone();
    self_managed.payload.event_source_arn = None;
    self_managed.payload.bootstrap_servers = Some("kafka-1.internal:9092".into());
    let processor = BatchProcessor::new();
    for event in [&msk, &second, &self_managed, &second] {
        processor.process(event, &handler).await.unwrap();
    }
    assert_eq!(
        *log.lock().unwrap(),
        [
            "arn:aws:kafka:us-east-1:123456789012:cluster/payments/abc/payments-0@100",
            "arn:aws:kafka:us-east-1:123456789012:cluster/payments-eu/def/payments-0@100",
            "kafka-1.internal:9092/payments-0@100",
        ]
    );
}
