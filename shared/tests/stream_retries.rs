//! A stream's records are never lost to a crash nor innocently dead-lettered by an outage: the
//! consumer, with its defaults (an attempt budget of 5, backoff from 2 s), retries a failed
//! record within the invocation (after the crashed invocation's lease, or after its backoff), so
//! that Lambda's back-to-back retries neither spend the mapping's `MaximumRetryAttempts` nor the
//! budget in seconds.
//!
//! The shard and Lambda's event source mapping are the library's simulation
//! (`test_util::sim_stream`): the checkpoint from the partial batch response, back-to-back
//! retries, `MaximumRetryAttempts`, `MaximumRecordAgeInSeconds`, bisection, the on-failure
//! destination, a crash as the invocation lost with no response. The clock is a `ManualClock`
//! that the processor's waits move.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::kinesis::KinesisEvent;
use lambda_idempotency::dead_letter::DeadLetter;
use lambda_idempotency::prelude::*;
use lambda_idempotency::state::{IdempotencyRecord, Put, Update, Updated};
use lambda_idempotency::store::{Backend, InMemoryBackend, StoreError};
use lambda_idempotency::test_util::InMemorySqs;
use lambda_idempotency::test_util::StreamEventBuilder;
use lambda_idempotency::test_util::fault::Crash;
use lambda_idempotency::test_util::sim_stream::{
    self, Drained, MappingSettings, SimShard, failed_sequences,
};
use lambda_idempotency::time::{Clock, ManualClock};
use serde_json::json;

const START_MS: i64 = 1_800_000_000_000;
const OUTAGE: Duration = Duration::from_secs(10 * 60);

/// The examples' mapping before: `MaximumRetryAttempts: 5`, a 30 s function.
fn old_mapping() -> MappingSettings {
    MappingSettings {
        maximum_retry_attempts: Some(5),
        maximum_record_age: Some(Duration::from_secs(3600)),
        ..MappingSettings::default()
    }
}

thread_local! {
    /// Set when the handler raised the crash (the test's runtime is one thread).
    static CRASHED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Effects per payment id.
type Effects = Arc<Mutex<BTreeMap<String, u32>>>;

/// The idempotency store, refusing every request until `until_ms` on `clock`.
#[derive(Debug)]
struct Outage {
    inner: InMemoryBackend,
    clock: Arc<ManualClock>,
    until_ms: i64,
}

impl Outage {
    fn check(&self, operation: &'static str) -> Result<(), StoreError> {
        if self.clock.now_ms() < self.until_ms {
            return Err(StoreError::Request {
                operation,
                message: "injected outage".into(),
                source: "injected outage".into(),
            });
        }
        Ok(())
    }
}

impl Backend for Outage {
    async fn put(&self, record: &IdempotencyRecord, now_ms: i64) -> Result<Put, StoreError> {
        self.check("PutItem")?;
        self.inner.put(record, now_ms).await
    }
    async fn get(&self, key: &str, now_ms: i64) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.check("GetItem")?;
        self.inner.get(key, now_ms).await
    }
    async fn update(&self, key: &str, update: &Update, now_ms: i64) -> Result<Updated, StoreError> {
        self.check("UpdateItem")?;
        self.inner.update(key, update, now_ms).await
    }
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.inner.delete(key).await
    }
}

/// Ten payments `p01`..`p10` of three accounts (the order keys).
fn shard() -> SimShard {
    SimShard::new(
        (1..=10).map(|i| (format!("acct-{}", i % 3), json!({"id": format!("p{i:02}")}))),
        START_MS,
    )
}

/// Drains `shard()` through `consumer` under `mapping`.
async fn drain(
    consumer: &Consumer<Deduplicated<()>, KinesisEvent>,
    mapping: MappingSettings,
    clock: &ManualClock,
    crash: &Crash,
    sqs: &InMemorySqs,
) -> Drained {
    sim_stream::drain(
        shard(),
        mapping,
        clock,
        crash,
        sqs,
        |batch: StreamEventBuilder| async move {
            let response = consumer
                .handle(batch.kinesis())
                .await
                .map_err(|e| e.to_string())?;
            Ok(failed_sequences(
                response
                    .batch_item_failures
                    .iter()
                    .map(|f| f.item_identifier.as_deref()),
            ))
        },
    )
    .await
}

/// Every payment's effect exactly once, and nothing went wrong.
fn assert_exactly_once(drained: &Drained, effects: &Effects) {
    assert!(drained.problems().is_empty(), "{:#?}", drained.problems());
    let effects = effects.lock().unwrap().clone();
    let expected: BTreeMap<String, u32> = (1..=10).map(|i| (format!("p{i:02}"), 1)).collect();
    assert_eq!(effects, expected);
}

/// A handler that counts its effect per payment, after `fail` let it.
fn counting(
    effects: &Effects,
    fail: impl Fn(&str) -> Option<Result<(), Error>> + Send + Sync + 'static,
) -> impl RecordHandler<aws_lambda_events::kinesis::KinesisEventRecord, Output = ()> + 'static {
    let effects = effects.clone();
    let fail = Arc::new(fail);
    json(move |p: serde_json::Value, _ctx: RecordContext| {
        let (effects, fail) = (effects.clone(), fail.clone());
        async move {
            let id = p["id"].as_str().unwrap_or_default().to_owned();
            if let Some(result) = fail(&id) {
                if result.is_err() && CRASHED.with(|c| c.get()) {
                    // A crashed process runs nothing more.
                    std::future::pending::<()>().await;
                }
                return result;
            }
            *effects.lock().unwrap().entry(id).or_default() += 1;
            Ok::<_, Error>(())
        }
    })
}

fn builder<B: Backend + 'static>(
    backend: B,
    clock: &Arc<ManualClock>,
    sqs: &InMemorySqs,
    backoff: bool,
) -> ConsumerBuilder<B, KinesisEvent> {
    let builder = Consumer::builder(backend)
        .source::<KinesisEvent>()
        .with_in_memory_sqs(sqs)
        .map_engine(|engine| engine.with_clock(clock.clone()))
        .map_processor(|processor| processor.with_clock(clock.clone()));
    if backoff {
        builder
    } else {
        builder.without_backoff()
    }
}

/// A crash in the middle of a record (after its key was acquired) leaves the key in progress
/// until the crashed invocation's deadline; Lambda retries the batch back to back. With the
/// examples' old mapping (`MaximumRetryAttempts: 5`, `Timeout: 30`), the record and those behind
/// it are still processed, exactly once, and nothing goes to the on-failure destination.
async fn crash_mid_record(backoff: bool) -> (Drained, Effects) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (sqs, crash) = (InMemorySqs::new(), Arc::new(Crash::default()));
    let effects = Effects::default();
    let crashed = Arc::new(AtomicBool::new(false));
    let handler = counting(&effects, {
        let (crash, crashed) = (crash.clone(), crashed.clone());
        move |id| {
            (id == "p04" && !crashed.swap(true, Ordering::SeqCst)).then(|| {
                crash.raise();
                CRASHED.with(|c| c.set(true));
                Err("crashed".into())
            })
        }
    });
    let consumer =
        builder(Arc::new(InMemoryBackend::default()), &clock, &sqs, backoff).idempotent(handler);
    let drained = drain(&consumer, old_mapping(), &clock, &crash, &sqs).await;
    assert_eq!(drained.crashes, 1);
    (drained, effects)
}

#[tokio::test]
async fn a_crash_mid_record_loses_nothing_under_back_to_back_retries() {
    let (drained, effects) = crash_mid_record(true).await;
    assert_exactly_once(&drained, &effects);
}

#[tokio::test]
async fn without_backoff_a_crash_mid_record_is_given_up_by_lambda() {
    // Backoff off (BACKOFF_BASE_SECONDS=0): nothing waits the crashed lease out, and Lambda's
    // five back-to-back retries find the key in progress and give the batch up: what every
    // stream consumer did before it retried within the invocation.
    let (drained, _) = crash_mid_record(false).await;
    assert!(
        drained
            .discarded
            .iter()
            .any(|d| d.reason == "MaximumRetryAttempts"),
        "{drained:#?}"
    );
}

/// A ten-minute outage of the idempotency store: nothing dead-lettered, nothing given up.
#[tokio::test]
async fn an_outage_of_the_idempotency_store_dead_letters_nothing() {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (sqs, crash) = (InMemorySqs::new(), Crash::default());
    let effects = Effects::default();
    let backend = Arc::new(Outage {
        inner: InMemoryBackend::default(),
        clock: clock.clone(),
        until_ms: START_MS + OUTAGE.as_millis() as i64,
    });
    let consumer = builder(backend, &clock, &sqs, true).idempotent(counting(&effects, |_| None));
    let drained = drain(&consumer, MappingSettings::default(), &clock, &crash, &sqs).await;
    assert_exactly_once(&drained, &effects);
    assert!(clock.now_ms() >= START_MS + OUTAGE.as_millis() as i64);
}

/// The handler's own table is out for ten minutes, and the handler says so
/// ([`TransientError`]): never counted, so nothing is dead-lettered.
async fn own_table_outage(transient: bool) -> (Drained, Effects) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (sqs, crash) = (InMemorySqs::new(), Crash::default());
    let effects = Effects::default();
    let until_ms = START_MS + OUTAGE.as_millis() as i64;
    let handler = counting(&effects, {
        let clock = clock.clone();
        move |_| {
            (clock.now_ms() < until_ms).then(|| {
                if transient {
                    Err(TransientError::new("the ledger table is unavailable").into())
                } else {
                    Err("the ledger table is unavailable".into())
                }
            })
        }
    });
    let consumer =
        builder(Arc::new(InMemoryBackend::default()), &clock, &sqs, true).idempotent(handler);
    let drained = drain(&consumer, MappingSettings::default(), &clock, &crash, &sqs).await;
    (drained, effects)
}

#[tokio::test]
async fn an_outage_of_the_handlers_own_table_marked_transient_dead_letters_nothing() {
    let (drained, effects) = own_table_outage(true).await;
    assert_exactly_once(&drained, &effects);
}

#[tokio::test]
async fn an_outage_of_the_handlers_own_table_left_unmarked_spends_the_budget() {
    // The same outage, the error left unmarked: it counts, and five attempts at the backoff's
    // pace (about a minute) are spent long before ten minutes pass.
    let (drained, _) = own_table_outage(false).await;
    assert!(!drained.dead_letters.is_empty(), "{drained:#?}");
}

/// An unmarked error is the record's own: its attempts are spent at the backoff's pace, never
/// faster (2 s, 4 s, 8 s, 16 s between the five, or the rest of the invocation when that is
/// shorter), then the record is dead-lettered.
#[tokio::test]
async fn an_unmarked_failure_spends_its_attempts_at_the_backoffs_pace() {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (sqs, crash) = (InMemorySqs::new(), Crash::default());
    let runs: Arc<Mutex<Vec<i64>>> = Arc::default();
    let handler = json({
        let (runs, clock) = (runs.clone(), clock.clone());
        move |_p: serde_json::Value, _ctx: RecordContext| {
            runs.lock().unwrap().push(clock.now_ms());
            async { Err::<(), _>("the ledger refused it") }
        }
    });
    let consumer =
        builder(Arc::new(InMemoryBackend::default()), &clock, &sqs, true).idempotent(handler);
    let one = SimShard::new([("acct-1", json!({"id": "p01"}))], START_MS);
    let drained = sim_stream::drain(
        one,
        MappingSettings::default(),
        &clock,
        &crash,
        &sqs,
        |batch| {
            let consumer = &consumer;
            async move {
                let response = consumer
                    .handle(batch.kinesis())
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(failed_sequences(
                    response
                        .batch_item_failures
                        .iter()
                        .map(|f| f.item_identifier.as_deref()),
                ))
            }
        },
    )
    .await;
    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 5, "{runs:?}");
    // Within an invocation, after the backoff's delay; one the delay puts past the invocation's
    // latest start (its deadline less the 2 s start margin) is held until then and comes in the
    // next invocation.
    for (n, pair) in runs.windows(2).enumerate() {
        let start = drained
            .started_at
            .iter()
            .rev()
            .find(|&&s| s <= pair[0])
            .copied()
            .unwrap();
        let latest_start = start + 28_000;
        let floor = (2_000 << n).min(latest_start - pair[0]);
        assert!(
            pair[1] - pair[0] >= floor,
            "attempt {} came {} ms after the one before, under {floor} ms: {runs:?}",
            n + 2,
            pair[1] - pair[0]
        );
    }
    assert!(
        runs[4] - runs[0] >= 28_000,
        "the budget spent in seconds: {runs:?}"
    );
    assert_eq!(drained.dead_letters.len(), 1, "{drained:#?}");
    assert!(drained.discarded.is_empty(), "{drained:#?}");
}

/// The dead-letter queue is out for ten minutes while a poison record needs it: the record stays
/// the checkpoint (retried at the backoff's pace, never given up by Lambda) and is dead-lettered
/// once the queue is back; the healthy records behind it are processed once.
#[tokio::test]
async fn an_outage_of_the_dead_letter_queue_gives_nothing_up() {
    let clock = Arc::new(ManualClock::new(START_MS));
    let (sqs, crash) = (InMemorySqs::new(), Crash::default());
    let effects = Effects::default();
    let until_ms = START_MS + OUTAGE.as_millis() as i64;
    let sent: Arc<Mutex<Vec<String>>> = Arc::default();
    let dead_letter = dead_letter_queue(&clock, until_ms, sent.clone());
    let handler = counting(&effects, |id| {
        (id == "p02").then(|| Err(PermanentError::new("amount must be positive").into()))
    });
    let consumer = Consumer::builder(Arc::new(InMemoryBackend::default()))
        .source::<KinesisEvent>()
        .map_engine(|engine| engine.with_clock(clock.clone()))
        .map_processor(|processor| {
            processor
                .with_clock(clock.clone())
                .with_dead_letter(dead_letter)
        })
        .idempotent(handler);
    let drained = drain(&consumer, MappingSettings::default(), &clock, &crash, &sqs).await;
    assert!(drained.problems().is_empty(), "{:#?}", drained.problems());
    let effects = effects.lock().unwrap().clone();
    let expected: BTreeMap<String, u32> = (1..=10)
        .filter(|&i| i != 2)
        .map(|i| (format!("p{i:02}"), 1))
        .collect();
    assert_eq!(effects, expected);
    assert_eq!(sent.lock().unwrap().len(), 1, "the poison record, once");
    assert!(clock.now_ms() >= until_ms);
}

/// A dead-letter queue (mocked) that refuses every send until `until_ms`, then keeps the bodies
/// it is sent in `sent`.
fn dead_letter_queue(
    clock: &Arc<ManualClock>,
    until_ms: i64,
    sent: Arc<Mutex<Vec<String>>>,
) -> DeadLetter {
    let down = {
        let clock = clock.clone();
        aws_smithy_mocks::mock!(aws_sdk_sqs::Client::send_message_batch)
            .match_requests(move |_| clock.now_ms() < until_ms)
            .then_error(|| {
                aws_sdk_sqs::operation::send_message_batch::SendMessageBatchError::generic(
                    aws_sdk_sqs::error::ErrorMetadata::builder()
                        .code("ServiceUnavailable")
                        .message("injected outage")
                        .build(),
                )
            })
    };
    let up = aws_smithy_mocks::mock!(aws_sdk_sqs::Client::send_message_batch).then_compute_output(
        move |input| {
            let mut ok = Vec::new();
            for e in input.entries() {
                sent.lock().unwrap().push(e.message_body().to_owned());
                ok.push(
                    aws_sdk_sqs::types::SendMessageBatchResultEntry::builder()
                        .id(e.id())
                        .message_id("dlq-1")
                        .md5_of_message_body("0")
                        .build()
                        .unwrap(),
                );
            }
            aws_sdk_sqs::operation::send_message_batch::SendMessageBatchOutput::builder()
                .set_successful(Some(ok))
                .set_failed(Some(Vec::new()))
                .build()
                .unwrap()
        },
    );
    let attributes =
        aws_smithy_mocks::mock!(aws_sdk_sqs::Client::get_queue_attributes).then_error(|| {
            aws_sdk_sqs::operation::get_queue_attributes::GetQueueAttributesError::generic(
                aws_sdk_sqs::error::ErrorMetadata::builder()
                    .code("AccessDenied")
                    .build(),
            )
        });
    let sqs = aws_smithy_mocks::mock_client!(
        aws_sdk_sqs,
        aws_smithy_mocks::RuleMode::MatchAny,
        [&down, &up, &attributes],
        |c| c.retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled())
    );
    DeadLetter::new(sqs, "https://sqs.us-east-1.amazonaws.com/123456789012/dlq")
}
