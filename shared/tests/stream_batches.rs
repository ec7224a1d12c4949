//! The checkpoint rules of stream and Kafka batches, on the in-memory backend: the lowest
//! failure of each shard reported and never a later record, order per key, a retried batch that
//! runs nothing twice, stop-at-first-failure, the deadline, and poison records moved past.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::kinesis::KinesisEventRecord;
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{
    BatchError, BatchProcessor, DeadLettered, KafkaMessage, RecordContext, RecordError,
    RecordHandler, RecordHandlerExt, json, record,
};
use lambda_idempotency::dead_letter::DeadLetter;
use lambda_idempotency::store::InMemoryBackend;
use lambda_idempotency::test_util::{InMemorySqs, StreamEventBuilder};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::json;

/// What the handlers of these tests did: each payment's effects in order, and which payments
/// fail (retryably) or are poison (permanently).
#[derive(Default, Clone)]
struct World {
    effects: Arc<Mutex<Vec<String>>>,
    failing: Arc<Mutex<HashSet<String>>>,
    poison: Arc<Mutex<HashSet<String>>>,
}

#[derive(serde::Deserialize)]
struct Payment {
    id: String,
}

impl World {
    fn fail(&self, id: &str) {
        self.failing.lock().unwrap().insert(id.to_owned());
    }
    fn heal(&self) {
        self.failing.lock().unwrap().clear();
    }
    fn effects(&self) -> Vec<String> {
        self.effects.lock().unwrap().clone()
    }

    /// A handler that records its payment's effect, or fails as told.
    fn handler(
        &self,
    ) -> impl RecordHandler<KinesisEventRecord, Output = String>
    + RecordHandler<aws_lambda_events::kafka::KafkaRecord>
    + RecordHandler<aws_lambda_events::dynamodb::EventRecord>
    + 'static {
        let world = self.clone();
        json(move |p: Payment, _ctx: RecordContext| {
            let world = world.clone();
            async move {
                if world.poison.lock().unwrap().contains(&p.id) {
                    return Err(RecordError::permanent(format!(
                        "{} can never be charged",
                        p.id
                    )));
                }
                if world.failing.lock().unwrap().contains(&p.id) {
                    return Err(RecordError::handler(format!("{} failed", p.id)));
                }
                world.effects.lock().unwrap().push(p.id.clone());
                Ok(p.id)
            }
        })
    }
}

fn payment(id: &str) -> serde_json::Value {
    json!({ "id": id })
}

/// Five records of one shard: keys a, b, a, b, a.
fn five() -> StreamEventBuilder {
    StreamEventBuilder::new()
        .record("a", payment("a1"))
        .record("b", payment("b1"))
        .record("a", payment("a2"))
        .record("b", payment("b2"))
        .record("a", payment("a3"))
}

fn reported(response: &aws_lambda_events::streams::KinesisEventResponse) -> Vec<String> {
    response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone().unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn a_failure_reports_the_lowest_failed_sequence_number_and_holds_only_its_key() {
    let world = World::default();
    world.fail("a2");
    let event = five().kinesis();
    let report = BatchProcessor::new()
        .process(&event, &world.handler())
        .await
        .unwrap();
    // a2 (sequence 102) failed: a3 does not run (its order would break); b's records run.
    assert_eq!(world.effects(), ["a1", "b1", "b2"]);
    assert_eq!(reported(&report.response()), ["102"]);
    let a3 = &report.records[4];
    assert!(
        matches!(a3.result, Err(RecordError::GroupBlocked { .. })),
        "{:?}",
        a3.result
    );
}

#[tokio::test]
async fn the_checkpoint_is_the_lowest_failure_compared_as_a_number() {
    let world = World::default();
    world.fail("late");
    world.fail("early");
    // Sequence numbers of different lengths: "1000" is after "999", though it sorts first as text.
    let event = StreamEventBuilder::new()
        .record("x", payment("early"))
        .at(999)
        .record("y", payment("late"))
        .at(1000)
        .kinesis();
    let report = BatchProcessor::new()
        .process(&event, &world.handler())
        .await
        .unwrap();
    assert_eq!(reported(&report.response()), ["999"]);
}

#[tokio::test]
async fn a_batch_retried_from_its_checkpoint_runs_nothing_twice() {
    let world = World::default();
    let engine = Idempotency::new(InMemoryBackend::default());
    let handler = world.handler().idempotent(engine);
    world.fail("a2");
    let first = BatchProcessor::new()
        .process(&five().kinesis(), &handler)
        .await
        .unwrap();
    assert_eq!(reported(&first.response()), ["102"]);
    // Lambda delivers the shard again from the checkpoint: a2, b2, a3.
    world.heal();
    let mut replay = five().kinesis();
    replay.payload.records.drain(..2);
    let second = BatchProcessor::new()
        .process(&replay, &handler)
        .await
        .unwrap();
    assert!(second.response().batch_item_failures.is_empty());
    // b2 ran in the first delivery: its replay is a duplicate.
    assert_eq!(world.effects(), ["a1", "b1", "b2", "a2", "a3"]);
    let duplicates: Vec<_> = second
        .successes()
        .filter(|(_, d)| d.is_duplicate())
        .map(|(id, _)| id.to_owned())
        .collect();
    assert_eq!(
        duplicates,
        ["arn:aws:kinesis:us-east-1:123456789012:stream/payments/shardId-000000000000:103"]
    );
}

#[tokio::test]
async fn strict_order_stops_the_shard_at_its_first_failure() {
    let world = World::default();
    world.fail("b1");
    let report = BatchProcessor::new()
        .strict_order(true)
        .process(&five().kinesis(), &world.handler())
        .await
        .unwrap();
    assert_eq!(world.effects(), ["a1"]);
    assert_eq!(reported(&report.response()), ["101"]);
    assert!(matches!(
        report.records[2].result,
        Err(RecordError::BatchStopped { .. })
    ));
}

#[tokio::test]
async fn each_kafka_partition_reports_its_own_failures() {
    let world = World::default();
    world.fail("p0-second");
    world.fail("p1-first");
    let event = StreamEventBuilder::new()
        .record("k", payment("p0-first"))
        .record("k", payment("p0-second"))
        .shard(1)
        .record("j", payment("p1-first"))
        .record("i", payment("p1-other-key"))
        .kafka();
    let report = BatchProcessor::new()
        .process(&event, &world.handler())
        .await
        .unwrap();
    let response = serde_json::to_value(report.response()).unwrap();
    assert_eq!(
        response,
        json!({"batchItemFailures": [
            {"itemIdentifier": {"partition": "payments-0", "offset": 101}},
            {"itemIdentifier": {"partition": "payments-1", "offset": 100}},
        ]})
    );
    assert_eq!(world.effects(), ["p0-first", "p1-other-key"]);
}

#[tokio::test]
async fn a_dynamodb_stream_batch_reports_the_sequence_number_of_its_failure() {
    let world = World::default();
    world.fail("b1");
    let report = BatchProcessor::new()
        .process(&five().dynamodb(), &world.handler())
        .await
        .unwrap();
    let failures: Vec<_> = report
        .response()
        .batch_item_failures
        .into_iter()
        .map(|f| f.item_identifier)
        .collect();
    assert_eq!(failures, [Some("101".to_owned())]);
    assert_eq!(world.effects(), ["a1", "a2", "a3"]);
}

#[tokio::test]
async fn a_record_without_a_sequence_number_fails_the_whole_batch() {
    let mut event = five().kinesis();
    event.payload.records[3].kinesis.sequence_number.clear();
    let error = BatchProcessor::new()
        .process(&event, &World::default().handler())
        .await
        .unwrap_err();
    assert!(
        matches!(error, BatchError::MissingSequenceNumber { index: 3, .. }),
        "{error}"
    );
}

#[tokio::test]
async fn records_not_started_before_the_deadline_lie_past_the_checkpoint() {
    let world = World::default();
    let mut context = Context::default();
    // 1 s left: less than the start margin (2 s), so nothing starts.
    context.deadline = (std::time::SystemTime::now() + Duration::from_secs(1))
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let event = five().context(context).kinesis();
    let report = BatchProcessor::new()
        .process(&event, &world.handler())
        .await
        .unwrap();
    assert!(world.effects().is_empty());
    assert_eq!(reported(&report.response()), ["100"]);
}

#[tokio::test]
async fn a_poison_record_goes_to_the_destination_once_and_the_shard_moves_past_it() {
    let world = World::default();
    world.poison.lock().unwrap().insert("b1".into());
    world.fail("a2");
    let sqs = InMemorySqs::new();
    let told = Arc::new(Mutex::new(Vec::new()));
    let t = told.clone();
    // b1 is poison: its record is settled, so that no replay runs it or sends it again.
    let handler = world
        .handler()
        .idempotent(Idempotency::new(InMemoryBackend::default()))
        .on_dead_letter(move |dead: DeadLettered<KinesisEventRecord>| {
            t.lock()
                .unwrap()
                .push(dead.message.kinesis.sequence_number.clone());
            async {}
        });
    let processor = BatchProcessor::new().with_dead_letter(DeadLetter::in_memory(&sqs, "dlq"));
    let first = processor
        .process(&five().kinesis(), &handler)
        .await
        .unwrap();
    // b1 (101) is poison: dead-lettered, not reported; a2 (102) is the checkpoint.
    assert_eq!(reported(&first.response()), ["102"]);
    let dead = sqs.dead_letters();
    assert_eq!(dead.len(), 1);
    let body: serde_json::Value = serde_json::from_str(dead[0].message.body()).unwrap();
    assert_eq!(body["sequenceNumber"], "101");
    assert_eq!(body["shardId"], "shardId-000000000000");
    assert!(
        dead[0].reason.contains("b1 can never be charged"),
        "{}",
        dead[0].reason
    );
    assert_eq!(*told.lock().unwrap(), ["101"]);
    // A replay from before b1 (a bisected retry, say) neither runs it nor sends it again.
    world.heal();
    let replay = processor
        .process(&five().kinesis(), &handler)
        .await
        .unwrap();
    assert!(replay.response().batch_item_failures.is_empty());
    assert_eq!(sqs.dead_letters().len(), 1);
    assert_eq!(*told.lock().unwrap(), ["101"]);
    assert_eq!(world.effects(), ["a1", "b2", "a2", "a3"]);
}

#[tokio::test]
async fn a_handler_may_order_records_by_a_key_of_its_own() {
    let world = World::default();
    world.fail("a1");
    // By the payment's first letter's partner: every record in one order.
    let handler = world
        .handler()
        .ordered_by(|_r: &KinesisEventRecord| Some("one".to_owned()));
    let report = BatchProcessor::new()
        .process(&five().kinesis(), &handler)
        .await
        .unwrap();
    assert!(world.effects().is_empty());
    assert_eq!(reported(&report.response()), ["100"]);
}

#[tokio::test]
async fn a_kafka_record_is_decoded_with_its_headers_and_a_tombstone_is_handled() {
    let event: aws_lambda_events::kafka::KafkaEvent =
        serde_json::from_str(include_str!("data/kafka-event.json")).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let handler = record(move |r: aws_lambda_events::kafka::KafkaRecord, _ctx| {
        let s = s.clone();
        async move {
            let m = KafkaMessage::decode(&r)?;
            s.lock().unwrap().push(m);
            Ok::<_, String>(())
        }
    });
    let report = BatchProcessor::new()
        .process(&LambdaEvent::new(event, Context::default()), &handler)
        .await
        .unwrap();
    assert!(report.response().batch_item_failures.is_empty());
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 4);
        let tombstones: Vec<_> = seen.iter().filter(|m| m.is_tombstone()).collect();
        assert_eq!(tombstones.len(), 1);
        assert!(tombstones[0].key.is_some());
        let with_headers = seen.iter().find(|m| !m.headers.is_empty()).unwrap();
        assert!(with_headers.header("content-type").is_some());
        let value: serde_json::Value =
            serde_json::from_slice(with_headers.value.as_deref().unwrap()).unwrap();
        assert!(value.is_object());
    }
    // A typed handler reads a tombstone as `None`.
    let nones = Arc::new(Mutex::new(0));
    let n = nones.clone();
    let typed = json(move |p: Option<serde_json::Value>, _ctx: RecordContext| {
        let n = n.clone();
        async move {
            if p.is_none() {
                *n.lock().unwrap() += 1;
            }
            Ok::<_, String>(())
        }
    });
    let event: aws_lambda_events::kafka::KafkaEvent =
        serde_json::from_str(include_str!("data/self-managed-kafka-event.json")).unwrap();
    BatchProcessor::new()
        .process(&LambdaEvent::new(event, Context::default()), &typed)
        .await
        .unwrap();
    assert_eq!(*nones.lock().unwrap(), 1);
}

#[tokio::test]
async fn the_sample_stream_events_parse_and_run() {
    let world = World::default();
    let dynamodb: aws_lambda_events::dynamodb::Event =
        serde_json::from_str(include_str!("data/dynamodb-stream-event.json")).unwrap();
    let kinesis: aws_lambda_events::kinesis::KinesisEvent =
        serde_json::from_str(include_str!("data/kinesis-event.json")).unwrap();
    let handler =
        record(|_r: aws_lambda_events::dynamodb::EventRecord, _ctx| async { Ok::<_, String>(()) });
    let report = BatchProcessor::new()
        .process(&LambdaEvent::new(dynamodb, Context::default()), &handler)
        .await
        .unwrap();
    assert_eq!(report.records.len(), 3);
    let report = BatchProcessor::new()
        .process(
            &LambdaEvent::new(kinesis, Context::default()),
            &world.handler(),
        )
        .await
        .unwrap();
    assert_eq!(report.records.len(), 3);
}

#[tokio::test]
async fn a_consumer_of_a_stream_answers_with_its_checkpoint_and_dead_letters_with_the_record() {
    use aws_lambda_events::kinesis::KinesisEvent;
    use lambda_idempotency::consumer::Consumer;

    let world = World::default();
    world.poison.lock().unwrap().insert("b1".into());
    world.fail("a2");
    let sqs = InMemorySqs::new();
    let consumer = Consumer::builder(InMemoryBackend::default())
        .with_in_memory_sqs(&sqs)
        .source::<KinesisEvent>()
        .idempotent(world.handler());
    let response = consumer.handle(five().kinesis()).await.unwrap();
    assert_eq!(reported(&response), ["102"]);
    assert_eq!(sqs.dead_letters().len(), 1);
    assert!(
        sqs.visibility_changes().is_empty(),
        "no visibility on a stream"
    );
    // The replay from the checkpoint: a2 and a3 (held behind it) run, b2 is a duplicate.
    world.heal();
    let mut replay = five().kinesis();
    replay.payload.records.drain(..2);
    let response = consumer.handle(replay).await.unwrap();
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(world.effects(), ["a1", "b2", "a2", "a3"]);
}
