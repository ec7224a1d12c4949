//! The inline mode on streams, on the in-memory backend (which counts the DynamoDB requests each
//! call stands for): a first delivery costs its one conditional write, as on SQS; a replay of a
//! record that succeeded costs the refused write; a dead-lettered record's replay is answered by
//! the engine's table where a failure reaches it, and is never dead-lettered twice.

use std::sync::{Arc, Mutex};

use aws_lambda_events::kafka::KafkaEvent;
use aws_lambda_events::kinesis::{KinesisEvent, KinesisEventRecord};
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::Record;
use lambda_idempotency::batch::{
    BatchProcessor, DeadLettered, EventSource, Inline, RecordContext, RecordError, RecordHandler,
    RecordHandlerExt, json,
};
use lambda_idempotency::dead_letter::DeadLetter;
use lambda_idempotency::inline::InlinePut;
use lambda_idempotency::key::KeyConfig;
use lambda_idempotency::store::{InMemoryBackend, MemoryWrite, Requests};
use lambda_idempotency::test_util::{InMemorySqs, StreamEventBuilder};
use lambda_runtime::LambdaEvent;
use serde_json::json;

/// What the handler does with each payment: writes its item, fails (retryably), is poison
/// (permanently), or returns an item over DynamoDB's 400 KB.
#[derive(Default, Clone)]
struct World {
    runs: Arc<Mutex<Vec<String>>>,
    failing: Arc<Mutex<Vec<String>>>,
    poison: Arc<Mutex<Vec<String>>>,
    huge: Arc<Mutex<Vec<String>>>,
}

#[derive(serde::Deserialize)]
struct Payment {
    id: String,
}

impl World {
    fn runs_of(&self, id: &str) -> usize {
        self.runs
            .lock()
            .unwrap()
            .iter()
            .filter(|r| *r == id)
            .count()
    }

    /// The inline handler: the payment's item in `payments`, keyed on the payment id.
    fn handler<R: Record>(
        &self,
        backend: &Arc<InMemoryBackend>,
    ) -> Inline<impl RecordHandler<R, Output = InlinePut<(), MemoryWrite>>, Arc<InMemoryBackend>>
    {
        let world = self.clone();
        json(move |p: Payment, _ctx: RecordContext| {
            let world = world.clone();
            async move {
                world.runs.lock().unwrap().push(p.id.clone());
                if world.poison.lock().unwrap().contains(&p.id) {
                    return Err(RecordError::permanent(format!(
                        "{} can never be charged",
                        p.id
                    )));
                }
                if world.failing.lock().unwrap().contains(&p.id) {
                    return Err(RecordError::handler(format!("{} failed", p.id)));
                }
                let value = if world.huge.lock().unwrap().contains(&p.id) {
                    "x".repeat(500 * 1024)
                } else {
                    "charged".to_owned()
                };
                Ok(InlinePut::new(
                    (),
                    MemoryWrite::put_if_absent("payments", &p.id, &value),
                ))
            }
        })
        .inline(Idempotency::new(backend.clone()))
        .with_keys(KeyConfig::json_pointer("/id"))
    }
}

/// Five records of one shard (partition), keys a, b, a, b, a.
fn five() -> StreamEventBuilder {
    ["a1", "b1", "a2", "b2", "a3"]
        .into_iter()
        .fold(StreamEventBuilder::new(), |events, id| {
            events.record(&id[..1], json!({ "id": id }))
        })
}

/// The requests between `before` and now.
fn since(backend: &InMemoryBackend, before: Requests) -> Requests {
    let now = backend.requests();
    Requests {
        get: now.get - before.get,
        put: now.put - before.put,
        update: now.update - before.update,
        transact: now.transact - before.transact,
        delete: now.delete - before.delete,
    }
}

/// Five first deliveries and their replay from the checkpoint, on `event`: what each cost.
async fn first_deliveries_and_replays<E: EventSource>(event: LambdaEvent<E>) {
    let backend = Arc::new(InMemoryBackend::default());
    let world = World::default();
    let handler = world.handler::<E::Record>(&backend);
    let processor = BatchProcessor::new();
    let first = processor.process(&event, &handler).await.unwrap();
    assert_eq!(first.failures().count(), 0);
    assert_eq!(
        backend.requests(),
        Requests {
            put: 5,
            ..Requests::default()
        },
        "{}: each first delivery costs its one conditional write",
        std::any::type_name::<E>()
    );
    let before = backend.requests();
    let replay = processor.process(&event, &handler).await.unwrap();
    assert_eq!(
        replay.successes().filter(|(_, d)| d.is_duplicate()).count(),
        5
    );
    assert_eq!(
        since(&backend, before),
        Requests {
            put: 5,
            ..Requests::default()
        },
        "{}: each replayed record costs its refused write",
        std::any::type_name::<E>()
    );
    assert_eq!(
        world.runs.lock().unwrap().len(),
        10,
        "the handler builds its item on a replay"
    );
    assert_eq!(backend.item("payments", "a3").as_deref(), Some("charged"));
}

#[tokio::test]
async fn a_first_delivery_on_a_stream_costs_one_write_and_a_replay_its_refused_write() {
    first_deliveries_and_replays::<KinesisEvent>(five().kinesis()).await;
    first_deliveries_and_replays::<KafkaEvent>(five().kafka()).await;
    first_deliveries_and_replays(five().dynamodb()).await;
}

/// A processor with a dead-letter queue and `max_attempts`, and what it dead-lettered.
fn dead_lettering(sqs: &InMemorySqs, max_attempts: u32) -> BatchProcessor {
    BatchProcessor::new()
        .with_dead_letter(DeadLetter::in_memory(sqs, "dlq"))
        .max_attempts(max_attempts)
}

#[tokio::test]
async fn a_poison_records_replay_is_answered_by_its_failure_and_never_dead_lettered_twice() {
    let backend = Arc::new(InMemoryBackend::default());
    let world = World::default();
    world.poison.lock().unwrap().push("b1".into());
    let sqs = InMemorySqs::new();
    let told = Arc::new(Mutex::new(0));
    let t = told.clone();
    let handler = world
        .handler::<KinesisEventRecord>(&backend)
        .on_dead_letter(move |_: DeadLettered<KinesisEventRecord>| {
            *t.lock().unwrap() += 1;
            async {}
        });
    let processor = dead_lettering(&sqs, 5);
    let first = processor
        .process(&five().kinesis(), &handler)
        .await
        .unwrap();
    assert!(first.response().batch_item_failures.is_empty());
    assert_eq!(sqs.dead_letters().len(), 1);
    // The replay runs b1 again (nothing read before it), and its failure, noted by a
    // conditional write, finds the key settled as dead-lettered: a duplicate.
    let before = backend.requests();
    let replay = processor
        .process(&five().kinesis(), &handler)
        .await
        .unwrap();
    assert!(replay.response().batch_item_failures.is_empty());
    assert_eq!(
        replay.successes().filter(|(_, d)| d.is_duplicate()).count(),
        5
    );
    assert_eq!(sqs.dead_letters().len(), 1, "never sent to the queue twice");
    assert_eq!(*told.lock().unwrap(), 1, "the application told once");
    assert_eq!(world.runs_of("b1"), 2);
    assert_eq!(
        since(&backend, before),
        Requests {
            put: 4,
            update: 1,
            ..Requests::default()
        },
        "four refused writes, and b1's failure refused by its settled key"
    );
    assert_eq!(backend.item("payments", "b1"), None);
}

#[tokio::test]
async fn an_item_over_the_limit_is_dead_lettered_once_its_replay_read_before_the_dead_letter() {
    let backend = Arc::new(InMemoryBackend::default());
    let world = World::default();
    world.huge.lock().unwrap().push("a2".into());
    let sqs = InMemorySqs::new();
    let handler = world.handler::<KinesisEventRecord>(&backend);
    let processor = dead_lettering(&sqs, 5);
    processor
        .process(&five().kinesis(), &handler)
        .await
        .unwrap();
    assert_eq!(sqs.dead_letters().len(), 1);
    assert!(
        sqs.dead_letters()[0].reason.contains("at most 409600"),
        "{}",
        sqs.dead_letters()[0].reason
    );
    // The limit is found before any request: the replay reads the engine's table before it
    // would dead-letter the record again.
    let before = backend.requests();
    let replay = processor
        .process(&five().kinesis(), &handler)
        .await
        .unwrap();
    assert!(replay.response().batch_item_failures.is_empty());
    assert_eq!(sqs.dead_letters().len(), 1, "never sent to the queue twice");
    assert_eq!(
        since(&backend, before),
        Requests {
            get: 1,
            put: 4,
            ..Requests::default()
        },
        "four refused writes, and one read for the record over the limit"
    );
}

#[tokio::test]
async fn a_dead_lettered_record_whose_replay_succeeds_writes_its_item_once() {
    let backend = Arc::new(InMemoryBackend::default());
    let world = World::default();
    world.failing.lock().unwrap().push("a2".into());
    let sqs = InMemorySqs::new();
    let handler = world.handler::<KinesisEventRecord>(&backend);
    // One attempt: a2's failure dead-letters it at once.
    let processor = dead_lettering(&sqs, 1);
    processor
        .process(&five().kinesis(), &handler)
        .await
        .unwrap();
    assert_eq!(sqs.dead_letters().len(), 1);
    assert_eq!(backend.item("payments", "a2"), None);
    // Its cause gone, a replay of the shard runs it, and its item is written, once.
    world.failing.lock().unwrap().clear();
    let replay = processor
        .process(&five().kinesis(), &handler)
        .await
        .unwrap();
    assert!(replay.response().batch_item_failures.is_empty());
    assert_eq!(backend.item("payments", "a2").as_deref(), Some("charged"));
    assert_eq!(sqs.dead_letters().len(), 1);
    // Every later replay is a duplicate of that item.
    let again = processor
        .process(&five().kinesis(), &handler)
        .await
        .unwrap();
    assert_eq!(
        again.successes().filter(|(_, d)| d.is_duplicate()).count(),
        5
    );
    assert_eq!(world.runs_of("a2"), 3);

    // With the attempts read, every stream record reads the engine's table first: the
    // dead-lettered record's replay is answered there, and does not run.
    let backend = Arc::new(InMemoryBackend::default());
    let world = World::default();
    world.failing.lock().unwrap().push("a2".into());
    let sqs = InMemorySqs::new();
    let handler = world
        .handler::<KinesisEventRecord>(&backend)
        .with_attempts_read();
    let processor = dead_lettering(&sqs, 1);
    processor
        .process(&five().kinesis(), &handler)
        .await
        .unwrap();
    assert_eq!(backend.requests().get, 5, "one read per first delivery");
    world.failing.lock().unwrap().clear();
    processor
        .process(&five().kinesis(), &handler)
        .await
        .unwrap();
    assert_eq!(world.runs_of("a2"), 1);
    assert_eq!(backend.item("payments", "a2"), None);
    assert_eq!(sqs.dead_letters().len(), 1);
}
