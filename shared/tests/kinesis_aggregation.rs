//! Kinesis records aggregated by the Kinesis Producer Library (KPL), on the in-memory backend:
//! each user record runs as a record of its own (its own key, its partition key's order), a
//! failure checkpoints the enclosing record's sequence number, a replay redoes only the user
//! records not done, a corrupt aggregate is dead-lettered whole with its reason, and a record
//! without the KPL's magic bytes is processed as it is.

use std::sync::{Arc, Mutex};

use aws_lambda_events::kinesis::{KinesisEvent, KinesisEventRecord};
use aws_lambda_events::streams::KinesisEventResponse;
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{
    AggregateError, BatchProcessor, RecordContext, RecordError, RecordHandler, RecordHandlerExt,
    json, record,
};
use lambda_idempotency::dead_letter::DeadLetter;
use lambda_idempotency::store::InMemoryBackend;
use lambda_idempotency::test_util::{InMemorySqs, StreamEventBuilder};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};

/// What the handler did: each payment it ran, with its record's id and order key, and the
/// payments that fail.
#[derive(Default, Clone)]
struct World {
    runs: Arc<Mutex<Vec<(String, String, String)>>>,
    failing: Arc<Mutex<Vec<String>>>,
}

#[derive(serde::Deserialize)]
struct Payment {
    id: String,
}

impl World {
    fn payments(&self) -> Vec<String> {
        self.runs
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.0.clone())
            .collect()
    }

    fn handler(&self) -> impl RecordHandler<KinesisEventRecord, Output = String> + 'static {
        let world = self.clone();
        json(move |p: Payment, ctx: RecordContext| {
            let world = world.clone();
            async move {
                if world.failing.lock().unwrap().contains(&p.id) {
                    return Err(RecordError::handler(format!("{} failed", p.id)));
                }
                world.runs.lock().unwrap().push((
                    p.id.clone(),
                    ctx.message_id.clone(),
                    ctx.group_id.clone().unwrap_or_default(),
                ));
                Ok(p.id)
            }
        })
    }
}

fn payment(id: &str) -> Value {
    json!({ "id": id })
}

/// An aggregate (sequence 100) of a1, b1, a2, b2 (partition keys a and b), then an ordinary
/// record a3 (sequence 101).
fn batch() -> StreamEventBuilder {
    StreamEventBuilder::new()
        .aggregate([
            ("a", payment("a1")),
            ("b", payment("b1")),
            ("a", payment("a2")),
            ("b", payment("b2")),
        ])
        .record("a", payment("a3"))
}

fn reported(response: &KinesisEventResponse) -> Vec<String> {
    response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone().unwrap_or_default())
        .collect()
}

/// A record's id: its stream's ARN, then its shard (`test_util::KINESIS_STREAM_ARN`).
const SHARD: &str = "arn:aws:kinesis:us-east-1:123456789012:stream/payments/shardId-000000000000";

#[tokio::test]
async fn each_user_record_runs_once_with_its_own_id_and_its_partition_key() {
    let world = World::default();
    let handler = world
        .handler()
        .idempotent(Idempotency::new(InMemoryBackend::default()));
    let report = BatchProcessor::new()
        .process(&batch().kinesis(), &handler)
        .await
        .unwrap();
    assert!(report.response().batch_item_failures.is_empty());
    let mut runs = world.runs.lock().unwrap().clone();
    // Keys run concurrently: each key's records in order.
    let order_of = |key: &str| -> Vec<String> {
        runs.iter()
            .filter(|r| r.2 == key)
            .map(|r| r.0.clone())
            .collect()
    };
    assert_eq!(order_of("a"), ["a1", "a2", "a3"]);
    assert_eq!(order_of("b"), ["b1", "b2"]);
    runs.sort();
    let expected = [
        ("a1", format!("{SHARD}:100:0"), "a"),
        ("a2", format!("{SHARD}:100:2"), "a"),
        ("a3", format!("{SHARD}:101"), "a"),
        ("b1", format!("{SHARD}:100:1"), "b"),
        ("b2", format!("{SHARD}:100:3"), "b"),
    ]
    .map(|(p, id, key)| (p.to_owned(), id, key.to_owned()));
    assert_eq!(runs, expected);
    // One report entry per user record, in the aggregate's order, then the ordinary record.
    let ids: Vec<_> = report
        .records
        .iter()
        .map(|r| r.message_id.clone())
        .collect();
    assert_eq!(
        ids,
        [":100:0", ":100:1", ":100:2", ":100:3", ":101"].map(|s| format!("{SHARD}{s}"))
    );
}

#[tokio::test]
async fn a_failed_user_record_reports_the_sequence_number_of_its_aggregate() {
    let world = World::default();
    world.failing.lock().unwrap().push("b1".into());
    let report = BatchProcessor::new()
        .process(&batch().kinesis(), &world.handler())
        .await
        .unwrap();
    assert_eq!(reported(&report.response()), ["100"]);
    // b2 waits behind b1 (its key); a's records run.
    let mut payments = world.payments();
    payments.sort();
    assert_eq!(payments, ["a1", "a2", "a3"]);
    assert!(
        matches!(
            report.records[3].result,
            Err(RecordError::GroupBlocked { .. })
        ),
        "{:?}",
        report.records[3].result
    );
}

#[tokio::test]
async fn a_replay_of_the_aggregate_redoes_only_the_user_records_not_done() {
    let world = World::default();
    world.failing.lock().unwrap().push("b1".into());
    let handler = world
        .handler()
        .idempotent(Idempotency::new(InMemoryBackend::default()));
    let first = BatchProcessor::new()
        .process(&batch().kinesis(), &handler)
        .await
        .unwrap();
    assert_eq!(reported(&first.response()), ["100"]);
    // Lambda delivers the shard again from sequence 100: the whole aggregate, then a3.
    world.failing.lock().unwrap().clear();
    let second = BatchProcessor::new()
        .process(&batch().kinesis(), &handler)
        .await
        .unwrap();
    assert!(second.response().batch_item_failures.is_empty());
    let mut payments = world.payments();
    payments.sort();
    assert_eq!(payments, ["a1", "a2", "a3", "b1", "b2"], "each once");
    let mut duplicates: Vec<_> = second
        .successes()
        .filter(|(_, d)| d.is_duplicate())
        .map(|(id, _)| id.to_owned())
        .collect();
    duplicates.sort();
    assert_eq!(
        duplicates,
        [":100:0", ":100:2", ":101"].map(|s| format!("{SHARD}{s}"))
    );
}

/// `event` with the last byte of record `i`'s MD5 checksum flipped.
fn corrupt(mut event: LambdaEvent<KinesisEvent>, i: usize) -> LambdaEvent<KinesisEvent> {
    let data = &mut event.payload.records[i].kinesis.data.0;
    *data.last_mut().unwrap() ^= 0x01;
    event
}

#[tokio::test]
async fn a_corrupt_aggregate_is_dead_lettered_whole_with_its_reason_and_once() {
    let world = World::default();
    let sqs = InMemorySqs::new();
    let handler = world
        .handler()
        .idempotent(Idempotency::new(InMemoryBackend::default()));
    let processor = BatchProcessor::new().with_dead_letter(DeadLetter::in_memory(&sqs, "dlq"));
    let event = corrupt(batch().kinesis(), 0);
    let aggregate = event.payload.records[0].kinesis.data.clone();
    let report = processor.process(&event, &handler).await.unwrap();
    assert!(report.response().batch_item_failures.is_empty());
    // The aggregate is one record, whose error says what is wrong; a3 runs.
    assert_eq!(report.records.len(), 2);
    assert_eq!(world.payments(), ["a3"]);
    let Err(RecordError::Attempt { error, .. }) = &report.records[0].result else {
        panic!("{:?}", report.records[0].result)
    };
    let RecordError::Permanent(cause) = &**error else {
        panic!("{error:?}")
    };
    assert_eq!(
        cause.downcast_ref::<AggregateError>(),
        Some(&AggregateError::Checksum)
    );
    let dead = sqs.dead_letters();
    assert_eq!(dead.len(), 1);
    assert!(
        dead[0].reason.contains("MD5 checksum"),
        "{}",
        dead[0].reason
    );
    let body: Value = serde_json::from_str(dead[0].message.body()).unwrap();
    assert_eq!(body["sequenceNumber"], "100");
    assert_eq!(body["record"]["kinesis"]["data"], json!(aggregate));
    // A replay of the shard neither runs it nor sends it again.
    let replay = processor.process(&event, &handler).await.unwrap();
    assert!(replay.response().batch_item_failures.is_empty());
    assert_eq!(sqs.dead_letters().len(), 1);
}

#[tokio::test]
async fn a_raw_record_handler_is_not_given_a_corrupt_aggregate() {
    let given = Arc::new(Mutex::new(0));
    let g = given.clone();
    let handler = record(move |_r: KinesisEventRecord, _ctx| {
        *g.lock().unwrap() += 1;
        async { Ok::<_, String>(()) }
    });
    let event = corrupt(batch().kinesis(), 0);
    let report = BatchProcessor::new()
        .process(&event, &handler)
        .await
        .unwrap();
    // Without a dead-letter queue it is the checkpoint, and a3 (its key's) waits behind it.
    assert_eq!(*given.lock().unwrap(), 0);
    assert_eq!(reported(&report.response()), ["100"]);
    let error = report.records[0].result.as_ref().unwrap_err();
    assert!(error.is_permanent(), "{error}");
    assert!(error.to_string().contains("MD5 checksum"), "{error}");
    assert!(
        matches!(
            report.records[1].result,
            Err(RecordError::GroupBlocked { .. })
        ),
        "{:?}",
        report.records[1].result
    );
}

#[tokio::test]
async fn a_record_without_the_magic_bytes_is_processed_as_it_is() {
    let world = World::default();
    let event = StreamEventBuilder::new()
        .record("a", payment("a1"))
        .record("b", payment("b1"))
        .kinesis();
    let report = BatchProcessor::new()
        .process(&event, &world.handler())
        .await
        .unwrap();
    let ids: Vec<_> = report
        .records
        .iter()
        .map(|r| r.message_id.clone())
        .collect();
    assert_eq!(ids, [format!("{SHARD}:100"), format!("{SHARD}:101")]);
    let mut payments = world.payments();
    payments.sort();
    assert_eq!(payments, ["a1", "b1"]);
}

/// The sample event of tests/data: what the builder writes (the files give the arrival time as a
/// number, as Lambda does).
fn sample() -> KinesisEvent {
    StreamEventBuilder::new()
        .aggregate([
            ("acct-1", payment("p-1")),
            ("acct-2", payment("p-2")),
            ("acct-1", payment("p-3")),
        ])
        .record("acct-2", payment("p-4"))
        .kinesis()
        .payload
}

#[tokio::test]
async fn the_sample_aggregated_events_are_what_the_builder_writes_and_run() {
    let file: KinesisEvent =
        serde_json::from_str(include_str!("data/kinesis-aggregated.json")).unwrap();
    assert_eq!(file, sample(), "tests/data/kinesis-aggregated.json");
    let corrupt_file: KinesisEvent =
        serde_json::from_str(include_str!("data/kinesis-aggregated-corrupt.json")).unwrap();
    let mut corrupt_sample = sample();
    *corrupt_sample.records[0].kinesis.data.0.last_mut().unwrap() ^= 0x01;
    assert_eq!(
        corrupt_file, corrupt_sample,
        "tests/data/kinesis-aggregated-corrupt.json: the sample with its checksum's last byte flipped"
    );

    let world = World::default();
    let report = BatchProcessor::new()
        .process(
            &LambdaEvent::new(file, Context::default()),
            &world.handler(),
        )
        .await
        .unwrap();
    assert_eq!(report.records.len(), 4);
    let mut payments = world.payments();
    payments.sort();
    assert_eq!(payments, ["p-1", "p-2", "p-3", "p-4"]);

    let report = BatchProcessor::new()
        .process(
            &LambdaEvent::new(corrupt_file, Context::default()),
            &world.handler(),
        )
        .await
        .unwrap();
    assert_eq!(report.records.len(), 2);
    assert_eq!(
        reported(&report.response()),
        ["100"],
        "no dead-letter queue"
    );
}

#[tokio::test]
async fn a_consumer_unpacks_aggregates_and_dead_letters_a_corrupt_one() {
    use lambda_idempotency::consumer::Consumer;

    let world = World::default();
    let sqs = InMemorySqs::new();
    let consumer = Consumer::builder(InMemoryBackend::default())
        .with_in_memory_sqs(&sqs)
        .source::<KinesisEvent>()
        .idempotent(world.handler());
    let response = consumer.handle(batch().kinesis()).await.unwrap();
    assert!(response.batch_item_failures.is_empty());
    let mut payments = world.payments();
    payments.sort();
    assert_eq!(payments, ["a1", "a2", "a3", "b1", "b2"]);
    // The same aggregate again, corrupt: its records are not its user records any more.
    let response = consumer
        .handle(corrupt(batch().kinesis(), 0))
        .await
        .unwrap();
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(sqs.dead_letters().len(), 1);
    assert_eq!(world.payments().len(), 5, "a3 is a duplicate");
}
