//! The idempotency engine on the in-memory backend: the record's life, leases, expiry, results,
//! failures and panics, and what `run` answers when its completion cannot be recorded.

mod common;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use futures_util::FutureExt;
use lambda_idempotency::idempotency::MAX_ITEM_BYTES;
use lambda_idempotency::state::Status;
use lambda_idempotency::store::InMemoryBackend;
use lambda_idempotency::time::{Deadline, ManualClock};
use lambda_idempotency::{AcquireError, Acquired, Idempotency, Outcome, RunError};

use common::FailingCompletions;

fn engine(clock: &Arc<ManualClock>) -> Idempotency<InMemoryBackend> {
    Idempotency::new(InMemoryBackend::default())
        .with_clock(clock.clone())
        .with_expiry(Duration::from_secs(100))
}

fn deadline(ms: i64) -> Option<Deadline> {
    Some(Deadline::at_epoch_ms(ms))
}

#[tokio::test]
async fn lifecycle() {
    let clock = Arc::new(ManualClock::new(1_000_000));
    let e = engine(&clock);
    let Acquired::Started(lease) = e.acquire("k", b"p", deadline(1_005_000)).await.unwrap() else {
        panic!("fresh key must start")
    };
    assert_eq!(
        lease.lease_until_ms(),
        1_005_000,
        "the lease ends at the deadline"
    );
    assert_eq!(
        e.acquire("k", b"p", deadline(1_005_000)).await.unwrap(),
        Acquired::InProgress {
            lease_until_ms: 1_005_000
        }
    );
    e.fail(&lease, "boom").await.unwrap();
    let Acquired::Started(lease) = e.acquire("k", b"p", None).await.unwrap() else {
        panic!("failed key must be re-acquired")
    };
    e.complete(&lease, Some("7")).await.unwrap();
    let record = e.get("k").await.unwrap().unwrap();
    assert_eq!((record.status, record.attempts), (Status::Completed, 1));
    assert_eq!(record.last_error.as_deref(), Some("boom"));
    assert_eq!(
        e.acquire("k", b"p", None).await.unwrap(),
        Acquired::Duplicate {
            result: Some("7".into()),
            result_omitted: false
        }
    );
    assert!(matches!(
        e.acquire("k", b"other", None).await,
        Err(AcquireError::PayloadMismatch { .. })
    ));
    clock.advance(Duration::from_secs(101));
    assert!(
        matches!(
            e.acquire("k", b"other", None).await,
            Ok(Acquired::Started(_))
        ),
        "expired"
    );
}

#[tokio::test]
async fn lease_is_never_zero() {
    let clock = Arc::new(ManualClock::new(10_000));
    let e = engine(&clock).with_default_lease(Duration::ZERO);
    let Acquired::Started(lease) = e.acquire("k", b"p", deadline(0)).await.unwrap() else {
        panic!()
    };
    assert_eq!(lease.lease_until_ms(), 11_000);
    let Acquired::Started(lease) = e.acquire("k2", b"p", None).await.unwrap() else {
        panic!()
    };
    assert!(lease.lease_until_ms() > 10_000);
}

#[tokio::test]
async fn lease_end_lets_another_attempt_in() {
    let clock = Arc::new(ManualClock::new(0));
    let e = engine(&clock);
    assert!(matches!(
        e.acquire("k", b"p", deadline(3_000)).await,
        Ok(Acquired::Started(_))
    ));
    clock.set(3_000);
    assert!(matches!(
        e.acquire("k", b"p", None).await,
        Ok(Acquired::InProgress { .. })
    ));
    clock.set(3_001);
    assert!(matches!(
        e.acquire("k", b"p", None).await,
        Ok(Acquired::Started(_))
    ));
}

#[tokio::test]
async fn oversized_result_is_omitted_not_an_error() {
    let clock = Arc::new(ManualClock::new(0));
    let e = engine(&clock);
    let Acquired::Started(lease) = e.acquire("k", b"p", None).await.unwrap() else {
        panic!()
    };
    let big = "x".repeat(MAX_ITEM_BYTES);
    e.complete(&lease, Some(&big)).await.unwrap();
    assert_eq!(
        e.acquire("k", b"p", None).await.unwrap(),
        Acquired::Duplicate {
            result: None,
            result_omitted: true
        }
    );
}

#[tokio::test]
async fn run_records_failures_and_panics() {
    let clock = Arc::new(ManualClock::new(0));
    let e = engine(&clock);
    let failed = e
        .run("k", b"p", None, || async { Err::<u8, _>("nope") })
        .await;
    assert!(matches!(failed, Err(RunError::Failed("nope"))));
    let panicked = AssertUnwindSafe(e.run("k", b"p", None, || async {
        if true {
            panic!("kaboom");
        }
        Ok::<u8, String>(1)
    }))
    .catch_unwind()
    .await;
    assert!(panicked.is_err());
    let record = e.get("k").await.unwrap().unwrap();
    assert_eq!(record.status, Status::Failed);
    assert_eq!(record.attempts, 2);
    assert_eq!(record.last_error.as_deref(), Some("panicked: kaboom"));
    assert_eq!(
        e.run("k", b"p", None, || async { Ok::<_, String>(5) })
            .await
            .unwrap(),
        Outcome::Ran(5)
    );
}

#[tokio::test]
async fn a_completion_that_fails_is_retried() {
    let e = Idempotency::new(FailingCompletions {
        failures: 2,
        ..FailingCompletions::default()
    });
    let outcome = e
        .run("k", b"p", None, || async { Ok::<_, String>(3) })
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Ran(3));
    assert_eq!(
        e.backend().tried.load(Ordering::SeqCst),
        3,
        "two failures, then recorded"
    );
    assert_eq!(e.get("k").await.unwrap().unwrap().status, Status::Completed);
}

#[tokio::test]
async fn work_that_ran_but_could_not_be_recorded_is_not_an_error() {
    let e = Idempotency::new(FailingCompletions {
        failures: u32::MAX,
        ..FailingCompletions::default()
    });
    let outcome = e
        .run("k", b"p", None, || async { Ok::<_, String>(3) })
        .await
        .expect("never a store error that invites running the work again");
    assert_eq!(outcome, Outcome::RanNotRecorded(3));
    assert_eq!(
        e.backend().tried.load(Ordering::SeqCst),
        lambda_idempotency::idempotency::COMPLETE_ATTEMPTS,
        "bounded"
    );
}

#[tokio::test]
async fn completion_retries_stop_at_the_deadline() {
    let e = Idempotency::new(FailingCompletions {
        failures: u32::MAX,
        ..FailingCompletions::default()
    });
    let outcome = e
        .run(
            "k",
            b"p",
            Some((SystemTime::now() + Duration::from_millis(120)).into()),
            || async { Ok::<_, String>(3) },
        )
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::RanNotRecorded(3));
    assert!(
        e.backend().tried.load(Ordering::SeqCst)
            < lambda_idempotency::idempotency::COMPLETE_ATTEMPTS,
        "no retry without room for it before the deadline"
    );
}

/// The lease mode's window: the work ran and the store refused its completion (every try). The
/// engine remembers it: a delivery of the key after the lease ended is a duplicate answered with
/// the result, the completion written first, instead of the work running a second time.
#[tokio::test]
async fn a_completion_the_store_refused_is_written_on_the_next_delivery() {
    let clock = Arc::new(ManualClock::new(1_000_000));
    let backend = Arc::new(FailingCompletions {
        failures: lambda_idempotency::idempotency::COMPLETE_ATTEMPTS + 1,
        ..FailingCompletions::default()
    });
    let e = Idempotency::new(backend.clone()).with_clock(clock.clone());
    let ran = std::sync::atomic::AtomicU32::new(0);
    let work = || async {
        ran.fetch_add(1, Ordering::SeqCst);
        Ok::<_, String>(3)
    };
    let first = e.run("k", b"p", deadline(1_030_000), work).await.unwrap();
    assert_eq!(first, Outcome::RanNotRecorded(3));
    assert_eq!(e.unrecorded_completions(), 1, "remembered");
    clock.advance(Duration::from_secs(60));
    // The store refuses once more: the work ran here, so the answer is a duplicate all the same.
    let second = e.run("k", b"p", deadline(1_090_000), work).await.unwrap();
    assert_eq!(second, Outcome::Duplicate(Some(3)));
    assert_eq!(
        e.get("k").await.unwrap().unwrap().status,
        Status::InProgress
    );
    // The store is back: the completion is written, and forgotten here.
    let third = e.run("k", b"p", deadline(1_090_000), work).await.unwrap();
    assert_eq!(third, Outcome::Duplicate(Some(3)));
    assert_eq!(ran.load(Ordering::SeqCst), 1, "the work ran once");
    let record = e.get("k").await.unwrap().unwrap();
    assert_eq!(
        (record.status, record.result.as_deref()),
        (Status::Completed, Some("3"))
    );
    assert_eq!(e.unrecorded_completions(), 0);
    // Another payload under the key is refused as against any completed record.
    assert!(matches!(
        e.acquire("k", b"other", None).await,
        Err(AcquireError::PayloadMismatch { .. })
    ));
}

/// A remembered completion whose key another process took over after the lease ended is not
/// written (the record is that attempt's): it is forgotten, and the key answers as the store says.
#[tokio::test]
async fn a_remembered_completion_yields_to_a_takeover() {
    let clock = Arc::new(ManualClock::new(1_000_000));
    let backend = Arc::new(FailingCompletions {
        failures: lambda_idempotency::idempotency::COMPLETE_ATTEMPTS,
        ..FailingCompletions::default()
    });
    let here = Idempotency::new(backend.clone()).with_clock(clock.clone());
    let elsewhere = Idempotency::new(backend.clone()).with_clock(clock.clone());
    let first = here
        .run("k", b"p", deadline(1_030_000), || async {
            Ok::<_, String>(3)
        })
        .await
        .unwrap();
    assert_eq!(first, Outcome::RanNotRecorded(3));
    clock.advance(Duration::from_secs(60));
    let other = elsewhere
        .run("k", b"p", deadline(1_090_000), || async {
            Ok::<_, String>(4)
        })
        .await
        .unwrap();
    assert_eq!(
        other,
        Outcome::Ran(4),
        "another process knows nothing of the first run"
    );
    assert_eq!(
        here.acquire("k", b"p", None).await.unwrap(),
        Acquired::Duplicate {
            result: Some("4".into()),
            result_omitted: false
        },
        "the store's record, not the remembered result"
    );
    assert_eq!(here.unrecorded_completions(), 0, "forgotten");
}
