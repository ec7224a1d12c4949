//! One suite of checks every durable backend passes: `dynamodb_store.rs` runs it on DynamoDB
//! (moto), `redis_store.rs` on Redis (valkey-server), both started by `make test`.
//!
//! Each check takes a [`Suite`]: an engine over the backend with a manual clock, and the counter
//! of the backend's requests, so that every check also asserts what each operation costs.
//! [`backend_suite!`] turns every check into a `#[tokio::test]` of the file that invokes it;
//! `inline_suite!` does the same for the inline mode's checks (`inline.rs`), on the backends
//! that have it.
#![allow(dead_code)]

// Redis has no inline mode: its file uses neither the macro nor the checks.
#[macro_use]
#[allow(unused_macros)]
mod inline;
mod done_work;
mod items;
mod limits;
mod payloads;
mod transitions;
pub use done_work::*;
#[allow(unused_imports)]
pub use inline::*;
#[allow(unused_imports)]
pub use items::*;
#[allow(unused_imports)]
pub use limits::*;
pub use payloads::*;
pub use transitions::*;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::batch::{BatchProcessor, RecordHandlerExt, message};
use lambda_idempotency::count::RequestCounter;
use lambda_idempotency::payload::PayloadHash;
use lambda_idempotency::state::{IdempotencyRecord, Status};
use lambda_idempotency::store::{Backend, Put, Updated};
use lambda_idempotency::time::{Clock, Deadline, ManualClock};
use lambda_idempotency::{AcquireError, Acquired, Idempotency, Lease, Outcome};
use lambda_runtime::{Context, LambdaEvent};

/// The owner token of a record a test writes itself (32 hex characters, as the engine makes them).
const OWNER: &str = "0123456789abcdef0123456789abcdef";

/// The names a backend's requests are counted under, by engine operation.
#[derive(Debug, Clone, Copy)]
pub struct Operations {
    pub acquire: &'static str,
    pub complete: &'static str,
    pub fail: &'static str,
    pub reset_attempts: &'static str,
    pub get: &'static str,
    pub delete: &'static str,
    /// Requests of an acquire that replaces a record the store still holds without carrying its
    /// attempts: an expired record, or a failed record of another payload.
    pub replace: u64,
}

/// An engine over the backend under test, its clock and its request counter.
pub struct Suite<B> {
    pub engine: Idempotency<B>,
    pub clock: Arc<ManualClock>,
    pub counter: RequestCounter,
    pub ops: Operations,
}

impl<B: Backend + Clone + 'static> Suite<B> {
    /// An engine over `backend` (whose requests `counter` counts): expiry 1 hour, key prefix
    /// `fn`, a manual clock standing at the current time.
    pub fn new(backend: B, counter: RequestCounter, ops: Operations) -> Self {
        let clock = Arc::new(ManualClock::starting_now());
        let engine = Idempotency::new(backend)
            .with_clock(clock.clone())
            .with_expiry(Duration::from_secs(3600))
            .with_key_prefix("fn");
        counter.reset();
        Self {
            engine,
            clock,
            counter,
            ops,
        }
    }

    fn deadline_in(&self, ms: i64) -> Option<Deadline> {
        Some(Deadline::at_epoch_ms(self.clock.now_ms() + ms))
    }

    async fn started(&self, key: &str, payload: &[u8], deadline: Option<Deadline>) -> Lease {
        match self.engine.acquire(key, payload, deadline).await {
            Ok(Acquired::Started(lease)) => lease,
            other => panic!("expected Started for {key}, got {other:?}"),
        }
    }

    /// Asserts the requests counted since the last call (or the fixture), by operation, and
    /// starts counting again.
    #[track_caller]
    fn requests(&self, expected: &[(&str, u64)], what: &str) {
        let mut want = BTreeMap::new();
        for (operation, n) in expected {
            *want.entry((*operation).to_owned()).or_insert(0) += n;
        }
        assert_eq!(self.counter.snapshot(), want, "requests for {what}");
        self.counter.reset();
    }
}

/// Declares one `#[tokio::test]` per check of the suite, each on a fresh fixture from `$fixture`
/// (an expression giving a future of a [`Suite`]). The file declares `#[macro_use] mod
/// backend_suite;`.
macro_rules! backend_suite {
    ($fixture:expr) => {
        backend_suite!(@checks $fixture;
            acquire_on_a_fresh_key_writes_an_in_progress_record,
            a_duplicate_after_completion_gets_the_stored_result_in_one_request,
            an_in_progress_key_conflicts_until_its_lease_ends_then_is_taken_over,
            a_late_complete_or_fail_after_a_takeover_changes_nothing,
            the_same_key_with_another_payload_is_a_mismatch,
            a_failed_record_is_reacquired_with_its_attempts_carried,
            reset_attempts_applies_to_a_failed_record_only,
            an_expired_record_is_replaced_and_starts_again,
            an_in_progress_record_never_expires_before_its_lease_ends,
            forget_deletes_the_record,
            results_are_stored_and_replayed,
            keys_over_the_dynamodb_limit_are_hashed,
            ten_concurrent_acquires_of_one_key_start_exactly_once,
            a_batch_costs_two_requests_per_fresh_record_and_one_per_duplicate,
            a_reserialized_resend_is_a_duplicate,
            a_corrected_payload_after_a_failed_one_runs,
            an_ended_lease_of_another_payload_is_taken_over,
            a_record_of_the_previous_hash_scheme_is_compared_under_it,
            retried_writes_find_their_own_record,
            two_engines_sharing_a_store_and_a_cache_never_answer_for_each_other,
            follows_the_table_of_transitions,
            a_key_done_by_another_message_is_a_duplicate_of_a_later_failure,
        );
    };
    (@checks $fixture:expr; $($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                backend_suite::$check(&$fixture.await).await;
            }
        )*
    };
}

pub async fn acquire_on_a_fresh_key_writes_an_in_progress_record<B: Backend + Clone + 'static>(
    s: &Suite<B>,
) {
    let lease = s.started("fresh", b"body", s.deadline_in(5_000)).await;
    s.requests(&[(s.ops.acquire, 1)], "an acquire");
    let now = s.clock.now_ms();
    assert_eq!(
        lease.lease_until_ms(),
        now + 5_000,
        "lease ends at the deadline"
    );
    assert_eq!(lease.attempts(), 0);
    let r = s
        .engine
        .get("fresh")
        .await
        .unwrap()
        .expect("record written");
    s.requests(&[(s.ops.get, 1)], "a read");
    assert_eq!(r.key, "fn#fresh");
    assert_eq!(r.status, Status::InProgress);
    assert_eq!(r.lease_until_ms, Some(now + 5_000));
    assert_eq!(r.expires_at, now / 1000 + 3600);
    assert_eq!(r.payload_hash, PayloadHash::raw(b"body").to_string());
    assert_eq!(r.owner.as_deref(), Some(lease.owner()));
    assert_eq!((r.attempts, r.last_error, r.result), (0, None, None));
    assert_eq!(s.engine.get("never-written").await.unwrap(), None);
}

pub async fn a_duplicate_after_completion_gets_the_stored_result_in_one_request<
    B: Backend + Clone + 'static,
>(
    s: &Suite<B>,
) {
    let lease = s.started("done", b"body", None).await;
    s.counter.reset();
    assert!(matches!(
        s.engine.complete(&lease, Some(r#"{"charged":true}"#)).await,
        Ok(Updated::Applied { .. })
    ));
    s.requests(&[(s.ops.complete, 1)], "a completion");
    let r = s.engine.get("done").await.unwrap().unwrap();
    assert_eq!(r.status, Status::Completed);
    assert_eq!(r.expires_at, s.clock.now_ms() / 1000 + 3600);
    s.counter.reset();
    assert_eq!(
        s.engine.acquire("done", b"body", None).await.unwrap(),
        Acquired::Duplicate {
            result: Some(r#"{"charged":true}"#.into()),
            result_omitted: false
        }
    );
    s.requests(
        &[(s.ops.acquire, 1)],
        "a duplicate: the record comes back with the refused acquire",
    );
}

pub async fn an_in_progress_key_conflicts_until_its_lease_ends_then_is_taken_over<
    B: Backend + Clone + 'static,
>(
    s: &Suite<B>,
) {
    let lease = s.started("crashed", b"body", s.deadline_in(2_000)).await;
    s.counter.reset();
    // The holder crashed: it never completes. Until its lease ends, others are told to wait.
    assert_eq!(
        s.engine.acquire("crashed", b"body", None).await.unwrap(),
        Acquired::InProgress {
            lease_until_ms: lease.lease_until_ms()
        }
    );
    s.requests(&[(s.ops.acquire, 1)], "a conflicting acquire");
    s.clock.advance(Duration::from_millis(2_000));
    assert!(
        matches!(
            s.engine.acquire("crashed", b"body", None).await,
            Ok(Acquired::InProgress { .. })
        ),
        "the lease holds through its last millisecond"
    );
    s.clock.advance(Duration::from_millis(1));
    let taken = s.started("crashed", b"body", None).await;
    assert_ne!(taken.owner(), lease.owner());
}

pub async fn a_late_complete_or_fail_after_a_takeover_changes_nothing<
    B: Backend + Clone + 'static,
>(
    s: &Suite<B>,
) {
    let first = s.started("fenced", b"body", s.deadline_in(1_000)).await;
    s.clock.advance(Duration::from_millis(1_500));
    let second = s.started("fenced", b"body", s.deadline_in(5_000)).await;
    assert_ne!(first.owner(), second.owner());
    s.counter.reset();
    assert_eq!(
        s.engine.complete(&first, Some("\"late\"")).await.unwrap(),
        Updated::NotApplied,
        "a writer that lost its lease cannot complete the record of the one that took it over"
    );
    assert_eq!(
        s.engine.fail(&first, "late").await.unwrap(),
        Updated::NotApplied
    );
    s.requests(
        &[(s.ops.complete, 1), (s.ops.fail, 1)],
        "two refused updates",
    );
    let record = s.engine.get("fenced").await.unwrap().unwrap();
    assert_eq!((record.status, record.attempts), (Status::InProgress, 0));
    assert_eq!(record.owner.as_deref(), Some(second.owner()));
    assert_eq!(record.result, None);
    assert!(matches!(
        s.engine.complete(&second, Some("1")).await.unwrap(),
        Updated::Applied { .. }
    ));
    assert_eq!(
        s.engine.fail(&second, "after completion").await.unwrap(),
        Updated::NotApplied,
        "a completed record is never failed"
    );
    // The same attempt completing again (an SDK retry of its completion) finds its own
    // completed record: that is success, and nothing is written twice.
    assert!(
        matches!(
            s.engine.complete(&second, Some("2")).await.unwrap(),
            Updated::Applied { .. }
        ),
        "its own completion, already applied"
    );
    let record = s.engine.get("fenced").await.unwrap().unwrap();
    assert_eq!(
        (record.status, record.result.as_deref()),
        (Status::Completed, Some("1"))
    );
    // A record that is gone is not updated either.
    s.engine.forget("fenced").await.unwrap();
    assert_eq!(
        s.engine.complete(&second, None).await.unwrap(),
        Updated::NotApplied
    );
    assert_eq!(s.engine.get("fenced").await.unwrap(), None, "not recreated");
}

pub async fn the_same_key_with_another_payload_is_a_mismatch<B: Backend + Clone + 'static>(
    s: &Suite<B>,
) {
    let lease = s.started("reused", b"first", None).await;
    // In progress, then completed: the refused acquire sees the other hash either way.
    assert!(matches!(
        s.engine.acquire("reused", b"second", None).await,
        Err(AcquireError::PayloadMismatch { key, stored: Status::InProgress }) if key == "reused"
    ));
    s.engine.complete(&lease, None).await.unwrap();
    s.counter.reset();
    assert!(matches!(
        s.engine.acquire("reused", b"second", None).await,
        Err(AcquireError::PayloadMismatch { .. })
    ));
    s.requests(&[(s.ops.acquire, 1)], "a mismatch");
    // A mismatch against a completed record is final; against a running one it may pass.
    assert!(matches!(
        s.engine.acquire("reused", b"second", None).await,
        Err(AcquireError::PayloadMismatch {
            stored: Status::Completed,
            ..
        })
    ));
    // Once the record expires, the key is free for any payload.
    s.clock.advance(Duration::from_secs(3_601));
    s.started("reused", b"second", None).await;
}

pub async fn a_failed_record_is_reacquired_with_its_attempts_carried<
    B: Backend + Clone + 'static,
>(
    s: &Suite<B>,
) {
    for attempt in 1..=3 {
        let lease = s.started("flaky", b"body", None).await;
        assert_eq!(
            lease.attempts(),
            attempt - 1,
            "failed attempts before this one"
        );
        s.counter.reset();
        assert_eq!(
            s.engine
                .fail(&lease, &format!("attempt {attempt} failed"))
                .await
                .unwrap(),
            Updated::Applied {
                attempts: Some(attempt)
            },
            "the fail update returns the new count"
        );
        s.requests(&[(s.ops.fail, 1)], "a failure");
        let r = s.engine.get("flaky").await.unwrap().unwrap();
        assert_eq!((r.status, r.attempts), (Status::Failed, attempt));
        assert_eq!(r.last_error, Some(format!("attempt {attempt} failed")));
    }
    let lease = s.started("flaky", b"body", None).await;
    let r = s.engine.get("flaky").await.unwrap().unwrap();
    assert_eq!(
        (r.status, r.attempts, r.last_error.as_deref()),
        (Status::InProgress, 3, Some("attempt 3 failed")),
        "a new attempt keeps the attempts and the last error"
    );
    s.engine.complete(&lease, None).await.unwrap();
    let r = s.engine.get("flaky").await.unwrap().unwrap();
    assert_eq!((r.status, r.attempts), (Status::Completed, 3));
    // A late failure report never overwrites a completion.
    s.engine.fail(&lease, "late").await.unwrap();
    assert_eq!(
        s.engine.get("flaky").await.unwrap().unwrap().status,
        Status::Completed
    );
    // The stored error is truncated.
    let lease = s.started("long-error", b"body", None).await;
    s.engine.fail(&lease, &"e".repeat(5_000)).await.unwrap();
    let r = s.engine.get("long-error").await.unwrap().unwrap();
    assert_eq!(
        r.last_error.map(|e| e.len()),
        Some(lambda_idempotency::state::MAX_ERROR_LEN)
    );
}

pub async fn reset_attempts_applies_to_a_failed_record_only<B: Backend + Clone + 'static>(
    s: &Suite<B>,
) {
    assert_eq!(
        s.engine.reset_attempts("counted").await.unwrap(),
        Updated::NotApplied,
        "no record"
    );
    let lease = s.started("counted", b"body", None).await;
    assert_eq!(
        s.engine.reset_attempts("counted").await.unwrap(),
        Updated::NotApplied,
        "in progress"
    );
    s.engine.fail(&lease, "first").await.unwrap();
    let lease = s.started("counted", b"body", None).await;
    s.engine.fail(&lease, "second").await.unwrap();
    s.counter.reset();
    assert!(matches!(
        s.engine.reset_attempts("counted").await.unwrap(),
        Updated::Applied { .. }
    ));
    s.requests(&[(s.ops.reset_attempts, 1)], "a reset");
    let r = s.engine.get("counted").await.unwrap().unwrap();
    assert_eq!(
        (r.status, r.attempts, r.last_error.as_deref()),
        (Status::Failed, 0, Some("second")),
        "the last error stays"
    );
    let lease = s.started("counted", b"body", None).await;
    assert_eq!(lease.attempts(), 0, "a redrive starts a new budget");
    s.engine.complete(&lease, None).await.unwrap();
    assert_eq!(
        s.engine.reset_attempts("counted").await.unwrap(),
        Updated::NotApplied,
        "completed"
    );
}

pub async fn an_expired_record_is_replaced_and_starts_again<B: Backend + Clone + 'static>(
    s: &Suite<B>,
) {
    let lease = s.started("old", b"body", None).await;
    s.engine.complete(&lease, None).await.unwrap();
    let lease = s.started("old-failed", b"body", None).await;
    s.engine.fail(&lease, "boom").await.unwrap();
    // No server has deleted them yet (the manual clock runs ahead of the servers'): the
    // condition itself must see expiry.
    s.clock.advance(Duration::from_secs(3_601));
    assert!(s.engine.get("old").await.unwrap().is_some(), "still stored");
    s.counter.reset();
    let lease = s.started("old", b"another body", None).await;
    s.requests(
        &[(s.ops.acquire, s.ops.replace)],
        "replacing an expired record",
    );
    assert_eq!(lease.attempts(), 0);
    let lease = s.started("old-failed", b"body", None).await;
    assert_eq!(
        lease.attempts(),
        0,
        "an expired record's attempts start again"
    );
    let r = s.engine.get("old-failed").await.unwrap().unwrap();
    assert_eq!((r.attempts, r.last_error), (0, None));
    assert_eq!(r.expires_at, s.clock.now_ms() / 1000 + 3600);
}

pub async fn an_in_progress_record_never_expires_before_its_lease_ends<
    B: Backend + Clone + 'static,
>(
    s: &Suite<B>,
) {
    // The expiry is 1 hour; this lease 2 hours.
    let lease = s.started("long", b"body", s.deadline_in(7_200_000)).await;
    s.clock.advance(Duration::from_secs(5_400));
    assert!(
        matches!(
            s.engine.acquire("long", b"body", None).await,
            Ok(Acquired::InProgress { .. })
        ),
        "an in-progress record never expires before its lease ends"
    );
    assert!(matches!(
        s.engine.acquire("long", b"other", None).await,
        Err(AcquireError::PayloadMismatch { .. })
    ));
    s.clock.advance(Duration::from_secs(1_900));
    assert!(matches!(
        s.engine.acquire("long", b"other", None).await,
        Ok(Acquired::Started(_))
    ));
    assert_eq!(
        s.engine.complete(&lease, None).await.unwrap(),
        Updated::NotApplied
    );
}

pub async fn forget_deletes_the_record<B: Backend + Clone + 'static>(s: &Suite<B>) {
    let lease = s.started("forgotten", b"body", None).await;
    s.engine.fail(&lease, "boom").await.unwrap();
    s.counter.reset();
    s.engine.forget("forgotten").await.unwrap();
    s.requests(&[(s.ops.delete, 1)], "a delete");
    assert_eq!(s.engine.get("forgotten").await.unwrap(), None);
    let lease = s.started("forgotten", b"other body", None).await;
    assert_eq!(lease.attempts(), 0, "a new record");
    s.engine.forget("never-written").await.unwrap();
}

pub async fn results_are_stored_and_replayed<B: Backend + Clone + 'static>(s: &Suite<B>) {
    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Charge {
        id: String,
        cents: u64,
    }
    let charge = || async {
        Ok::<_, std::io::Error>(Charge {
            id: "ch_1".into(),
            cents: 500,
        })
    };
    let first = s.engine.run("pay-1", b"500", None, charge).await.unwrap();
    assert!(matches!(first, Outcome::Ran(ref c) if c.cents == 500));
    s.requests(
        &[(s.ops.acquire, 1), (s.ops.complete, 1)],
        "a run of fresh work",
    );
    let again = s
        .engine
        .run("pay-1", b"500", None, || async {
            Err::<Charge, _>(std::io::Error::other("must not run"))
        })
        .await
        .unwrap();
    assert_eq!(
        again,
        Outcome::Duplicate(Some(Charge {
            id: "ch_1".into(),
            cents: 500
        }))
    );
    s.requests(&[(s.ops.acquire, 1)], "a replay");

    // A large result: stored whole within the backend's limit, omitted beyond it.
    let lease = s.started("big", b"body", None).await;
    let big = format!("\"{}\"", "x".repeat(500 * 1024));
    s.engine
        .complete(&lease, Some(&big))
        .await
        .expect("a too-large result never fails the completion");
    let stored = match s.engine.backend().max_result_bytes(lease.stored_key()) {
        Some(max) if big.len() > max => Acquired::Duplicate {
            result: None,
            result_omitted: true,
        },
        _ => Acquired::Duplicate {
            result: Some(big),
            result_omitted: false,
        },
    };
    assert_eq!(
        s.engine.acquire("big", b"body", None).await.unwrap(),
        stored
    );
}

pub async fn keys_over_the_dynamodb_limit_are_hashed<B: Backend + Clone + 'static>(s: &Suite<B>) {
    let key = "k".repeat(5_000);
    let lease = s.started(&key, b"body", None).await;
    assert!(lease.stored_key().starts_with("fn#sha256:"));
    s.engine.complete(&lease, None).await.unwrap();
    assert!(matches!(
        s.engine.acquire(&key, b"body", None).await,
        Ok(Acquired::Duplicate { .. })
    ));
    let mut other = key.clone();
    other.push('!');
    s.started(&other, b"body", None).await;
}

/// Ten acquires at once, on 20 keys: through the engine (ten tasks), and on the backend itself
/// (ten puts of ten owners). A store whose conditional write is not atomic lets two in on some
/// key.
pub async fn ten_concurrent_acquires_of_one_key_start_exactly_once<B: Backend + Clone + 'static>(
    s: &Suite<B>,
) {
    let engine = Arc::new(s.engine.clone());
    for round in 0..20 {
        let key = format!("race-{round}");
        let tasks: Vec<_> = (0..10)
            .map(|_| {
                let (engine, key) = (engine.clone(), key.clone());
                tokio::spawn(async move { engine.acquire(&key, b"body", None).await })
            })
            .collect();
        let mut started = Vec::new();
        for task in tasks {
            match task.await.unwrap() {
                Ok(Acquired::Started(lease)) => started.push(lease),
                Ok(Acquired::InProgress { .. }) => {}
                other => panic!("{key}: unexpected {other:?}"),
            }
        }
        assert_eq!(started.len(), 1, "{key}");
        let record = s.engine.get(&key).await.unwrap().unwrap();
        assert_eq!(record.owner.as_deref(), Some(started[0].owner()), "{key}");
    }
    s.counter.reset();
    let now_ms = s.clock.now_ms();
    for round in 0..20 {
        let key = format!("fn#raw-race-{round}");
        let tasks: Vec<_> = (0..10)
            .map(|_| {
                let backend = s.engine.backend().clone();
                let record = IdempotencyRecord {
                    key: key.clone(),
                    status: Status::InProgress,
                    expires_at: now_ms / 1000 + 3600,
                    lease_until_ms: Some(now_ms + 60_000),
                    owner: Some(OWNER.to_owned()),
                    payload_hash: PayloadHash::raw(b"body").to_string(),
                    attempts: 0,
                    last_error: None,
                    result: None,
                    result_omitted: false,
                };
                tokio::spawn(async move { (backend.put(&record, now_ms).await, record.owner) })
            })
            .collect();
        let mut winners = Vec::new();
        let mut held_by = Vec::new();
        for task in tasks {
            match task.await.unwrap() {
                (Ok(Put::Written { attempts: 0, .. }), owner) => winners.push(owner),
                (Ok(Put::Exists(existing)), _) => held_by.push(existing.owner),
                other => panic!("{key}: unexpected {other:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "{key}");
        assert!(
            held_by.iter().all(|owner| *owner == winners[0]),
            "{key}: every refused put sees the winner's record"
        );
    }
    assert_eq!(
        s.counter.total(),
        200,
        "one request per put: {:?}",
        s.counter.snapshot()
    );
}

pub async fn a_batch_costs_two_requests_per_fresh_record_and_one_per_duplicate<
    B: Backend + Clone + 'static,
>(
    s: &Suite<B>,
) {
    let handler = message(|m, _| async move { Ok::<_, std::io::Error>(m.body.map(|b| b.len())) })
        .idempotent(s.engine.clone());
    let mut event = SqsEvent::default();
    event.records = (0..5)
        .map(|i| {
            let mut m = SqsMessage::default();
            m.message_id = Some(format!("msg-{i}"));
            m.body = Some(format!("{{\"n\":{i}}}"));
            m
        })
        .collect();
    let event = LambdaEvent::new(event, Context::default());
    let processor = BatchProcessor::new();

    s.counter.reset();
    let report = processor.process(&event, &handler).await.unwrap();
    assert!(report.response().batch_item_failures.is_empty());
    s.requests(
        &[(s.ops.acquire, 5), (s.ops.complete, 5)],
        "5 fresh records: acquire + complete each",
    );

    let report = processor.process(&event, &handler).await.unwrap();
    assert!(
        report
            .records
            .iter()
            .all(|r| matches!(&r.result, Ok(d) if d.is_duplicate()))
    );
    s.requests(&[(s.ops.acquire, 5)], "5 completed duplicates");
}
