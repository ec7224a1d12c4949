//! One clock: a test's manual clock, given to the engine and the processor, moves every deadline
//! check (the processor's start margin, the handler's stop, the bounded bookkeeping, the lease,
//! the completion's and the commit's retries, the visibility backoff's calls), and the system's
//! time moves none of them.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::backoff::VisibilityBackoff;
use lambda_idempotency::batch::{BatchProcessor, RecordContext, RecordHandlerExt, json};
use lambda_idempotency::count::RequestCounter;
use lambda_idempotency::error::RecordError;
use lambda_idempotency::key::KeyConfig;
use lambda_idempotency::state::{IdempotencyRecord, Put, Status, Update, Updated};
use lambda_idempotency::store::{
    Backend, Commit, Failure, InMemoryBackend, LimitError, MemoryWrite, StoreError,
    TransactionalBackend,
};
use lambda_idempotency::time::{Clock, Deadline, ManualClock};
use lambda_idempotency::transaction::{COMMIT_TRIES, TransactError, Transaction};
use lambda_idempotency::{Acquired, Idempotency};
use lambda_runtime::{Context, LambdaEvent};

use common::FailingCompletions;

/// 2030-03-17, far from the system's time: a check that read the system clock instead would see
/// years of time left, or none.
const START_MS: i64 = 1_900_000_000_000;

fn message(id: &str, body: &str) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some(id.into());
    m.body = Some(body.into());
    m
}

/// The in-memory backend, answering each update after 20 ms, as a store across a network
/// would: a bounded update with no time left does not finish.
#[derive(Debug, Default)]
struct Remote(InMemoryBackend);

impl Backend for Remote {
    async fn put(&self, record: &IdempotencyRecord, now_ms: i64) -> Result<Put, StoreError> {
        self.0.put(record, now_ms).await
    }
    async fn get(&self, key: &str, now_ms: i64) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.0.get(key, now_ms).await
    }
    async fn update(&self, key: &str, update: &Update, now_ms: i64) -> Result<Updated, StoreError> {
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.0.update(key, update, now_ms).await
    }
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.0.delete(key).await
    }
}

#[tokio::test]
async fn a_manual_clock_moves_every_deadline_check_of_a_batch() {
    let clock = Arc::new(ManualClock::new(START_MS));
    let backend = Arc::new(Remote::default());
    let engine = Idempotency::new(backend.clone())
        .without_key_prefix()
        .with_clock(clock.clone());
    let moved = clock.clone();
    let ran = Arc::new(AtomicU32::new(0));
    let counted = ran.clone();
    // The first record's handler takes 59.8 s by the manual clock: past the stop (1.5 s before
    // the deadline), the finish (0.5 s before) and the start margin (2 s) of what follows.
    let handler = json(move |body: serde_json::Value, _ctx: RecordContext| {
        let moved = moved.clone();
        let counted = counted.clone();
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            if body["slow"] == true {
                moved.advance(Duration::from_millis(59_800));
            }
            Ok::<_, std::io::Error>(())
        }
    })
    .idempotent(engine)
    .with_keys(KeyConfig::json_pointer("/id"));
    let mut event = SqsEvent::default();
    event.records = vec![
        message("m-1", r#"{"id": "slow", "slow": true}"#),
        message("m-2", r#"{"id": "next"}"#),
    ];
    let mut context = Context::default();
    let deadline = START_MS + 60_000;
    context.deadline = deadline as u64;
    let report = BatchProcessor::new()
        .concurrency(1)
        .with_clock(clock.clone())
        .process(&LambdaEvent::new(event, context), &handler)
        .await
        .unwrap();

    assert_eq!(
        ran.load(Ordering::SeqCst),
        1,
        "the second record never started"
    );
    let records = &report.records;
    assert!(records[0].result.is_ok(), "the slow handler succeeded");
    assert!(
        matches!(records[1].result, Err(RecordError::DeadlineNear { .. })),
        "less than the start margin was left by the manual clock: {:?}",
        records[1].result
    );
    // The slow record's lease ends at the context's deadline, and its completion was not sent:
    // its finish-by instant had passed by the manual clock.
    let stored = backend.0.records();
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(stored[0].key, "slow");
    assert_eq!(stored[0].status, Status::InProgress);
    assert_eq!(stored[0].lease_until_ms, Some(deadline));
}

#[tokio::test]
async fn the_stop_instant_is_read_from_the_context_clock() {
    let clock = Arc::new(ManualClock::new(START_MS));
    let mut ctx = RecordContext::new("m-1");
    ctx.clock = clock.clone();
    ctx.deadline = Some(Deadline::at_epoch_ms(START_MS + 10_000));
    ctx.stop_at = Some(Deadline::at_epoch_ms(START_MS + 8_500));
    let work = || async { Ok::<_, RecordError>(()) };
    assert!(ctx.cancellable(work()).await.is_ok());
    clock.advance(Duration::from_millis(8_500));
    assert!(
        matches!(
            ctx.cancellable(work()).await,
            Err(RecordError::DeadlineNear { margin }) if margin == Duration::from_millis(1_500)
        ),
        "the stop instant passed by the manual clock: the work never starts"
    );
}

#[tokio::test]
async fn the_completion_retries_while_the_manual_clock_leaves_room() {
    let clock = Arc::new(ManualClock::new(0));
    let engine = Idempotency::new(FailingCompletions {
        inner: InMemoryBackend::default(),
        failures: 10,
        tried: AtomicU32::new(0),
    })
    .with_clock(clock.clone());
    let Ok(Acquired::Started(lease)) = engine.acquire("k", b"body", None).await else {
        panic!("not acquired")
    };
    // Ten seconds after the epoch: long past by the system's time, ahead by the manual clock.
    let finish_by = Some(Deadline::at_epoch_ms(10_000));
    let completed = engine.complete_with_retries(&lease, None, finish_by).await;
    assert!(matches!(completed, Err(StoreError::Malformed { .. })));
    assert_eq!(
        engine.backend().tried.load(Ordering::SeqCst),
        4,
        "every try was made: the manual clock left room"
    );
    clock.set(10_000);
    let completed = engine.complete_with_retries(&lease, None, finish_by).await;
    assert!(completed.is_err());
    assert_eq!(
        engine.backend().tried.load(Ordering::SeqCst),
        5,
        "one try only: no room is left by the manual clock"
    );
    assert!(clock.now_ms() == 10_000);
}

/// The in-memory backend whose every commit finds the store busy.
#[derive(Debug, Default)]
struct Busy {
    inner: InMemoryBackend,
    commits: AtomicU32,
}

impl Backend for Busy {
    async fn put(&self, record: &IdempotencyRecord, now_ms: i64) -> Result<Put, StoreError> {
        self.inner.put(record, now_ms).await
    }
    async fn get(&self, key: &str, now_ms: i64) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.inner.get(key, now_ms).await
    }
    async fn update(&self, key: &str, update: &Update, now_ms: i64) -> Result<Updated, StoreError> {
        self.inner.update(key, update, now_ms).await
    }
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.inner.delete(key).await
    }
}

impl TransactionalBackend for Busy {
    type Write = MemoryWrite;

    fn check(
        &self,
        record: &IdempotencyRecord,
        writes: &[MemoryWrite],
        carrier: Option<usize>,
    ) -> Result<(), LimitError> {
        self.inner.check(record, writes, carrier)
    }
    async fn commit(
        &self,
        _record: &IdempotencyRecord,
        _writes: &[MemoryWrite],
        _token: &str,
        _now_ms: i64,
    ) -> Result<Commit, StoreError> {
        self.commits.fetch_add(1, Ordering::SeqCst);
        Ok(Commit::Contended {
            reason: "TransactionConflict".into(),
        })
    }
    async fn record_failure(
        &self,
        record: &IdempotencyRecord,
        now_ms: i64,
    ) -> Result<Failure, StoreError> {
        self.inner.record_failure(record, now_ms).await
    }
}

#[tokio::test]
async fn the_commit_retries_while_the_manual_clock_leaves_room() {
    let clock = Arc::new(ManualClock::new(0));
    let engine = Idempotency::new(Busy::default()).with_clock(clock.clone());
    let work = || async { Ok::<_, std::io::Error>(Transaction::<(), MemoryWrite>::new(())) };
    let finish_by = Some(Deadline::at_epoch_ms(10_000));
    let answer = engine.transact("k", b"body", finish_by, work).await;
    assert!(matches!(answer, Err(TransactError::Contended { tries, .. }) if tries == COMMIT_TRIES));
    assert_eq!(
        engine.backend().commits.load(Ordering::SeqCst),
        COMMIT_TRIES
    );
    clock.set(10_000);
    let answer = engine.transact("k", b"body", finish_by, work).await;
    assert!(matches!(
        answer,
        Err(TransactError::Contended { tries: 1, .. })
    ));
}

#[tokio::test]
async fn the_visibility_backoff_calls_while_the_manual_clock_leaves_time() {
    let counter = RequestCounter::default();
    let backoff = VisibilityBackoff::new(common::sqs(&counter).await);
    let mut record = message("m-1", "{}");
    record.event_source_arn = Some("arn:aws:sqs:us-east-1:000000000000:no-such-queue".into());
    record.receipt_handle = Some("handle".into());
    let clock = ManualClock::new(10_000);
    let until = Some(Deadline::at_epoch_ms(10_000));
    let records = [record];
    let timeout = Duration::from_secs(5);
    assert_eq!(
        backoff
            .change(&records, &[(0, 30)], until, &clock, timeout)
            .await,
        0
    );
    assert!(
        counter.snapshot().is_empty(),
        "no time left by the manual clock: no call"
    );
    clock.set(0);
    backoff
        .change(&records, &[(0, 30)], until, &clock, timeout)
        .await;
    assert_eq!(
        counter.snapshot().get("GetQueueUrl"),
        Some(&1),
        "time left by the manual clock: the queue is looked up"
    );
}
