//! The suite's checks of payload identity, replacement and retried writes: what a producer other
//! than our own sees (the same payment written otherwise, a corrected message after a bad one), and
//! what an SDK retry of our own write sees.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use lambda_idempotency::cache::LocalCache;
use lambda_idempotency::payload::PayloadHash;
use lambda_idempotency::state::{IdempotencyRecord, Status};
use lambda_idempotency::store::{Backend, Put, StoreError, Update, Updated};
use lambda_idempotency::time::Clock;
use lambda_idempotency::{AcquireError, Acquired, Idempotency, Outcome};

use super::Suite;

/// The same payment resent with another JSON formatting (spacing, key order) is a duplicate; a
/// different amount is a conflict.
pub async fn a_reserialized_resend_is_a_duplicate<B: Backend + Clone + 'static>(s: &Suite<B>) {
    let compact = br#"{"paymentId":"p-1","amountCents":1250,"note":"caf\u00e9"}"#;
    let python = "{\"amountCents\": 1250, \"note\": \"café\", \"paymentId\": \"p-1\"}".as_bytes();
    let lease = s.started("p-1", compact, None).await;
    s.engine
        .complete(&lease, Some("\"charged\""))
        .await
        .unwrap();
    s.counter.reset();
    assert_eq!(
        s.engine.acquire("p-1", python, None).await.unwrap(),
        Acquired::Duplicate {
            result: Some("\"charged\"".into()),
            result_omitted: false
        },
        "the same payment written otherwise is a duplicate"
    );
    s.requests(&[(s.ops.acquire, 1)], "a re-serialized duplicate");
    let record = s.engine.get("p-1").await.unwrap().unwrap();
    assert_eq!(record.payload_hash, PayloadHash::of_bytes(python).as_str());
    assert!(
        record.payload_hash.starts_with("json:"),
        "the scheme is stored"
    );
    assert!(matches!(
        s.engine
            .acquire("p-1", br#"{"paymentId":"p-1","amountCents":1251}"#, None)
            .await,
        Err(AcquireError::PayloadMismatch {
            stored: Status::Completed,
            ..
        })
    ));
}

/// A producer sent a malformed message, then the fix under the same key: the fix runs, its
/// attempts start again, and the replacement is one acquire (plus the replacing write).
pub async fn a_corrected_payload_after_a_failed_one_runs<B: Backend + Clone + 'static>(
    s: &Suite<B>,
) {
    let bad = br#"{"paymentId":"p-2","amountCents":"ten"}"#;
    let fixed = br#"{"paymentId":"p-2","amountCents":10}"#;
    for attempt in 1..=2 {
        let lease = s.started("p-2", bad, None).await;
        assert_eq!(lease.attempts(), attempt - 1);
        s.engine
            .fail(&lease, "amountCents is not a number")
            .await
            .unwrap();
    }
    s.counter.reset();
    let lease = s.started("p-2", fixed, None).await;
    s.requests(
        &[(s.ops.acquire, s.ops.replace)],
        "replacing a failed record of another payload",
    );
    assert_eq!(
        lease.attempts(),
        0,
        "another payload starts its attempts again"
    );
    let r = s.engine.get("p-2").await.unwrap().unwrap();
    assert_eq!(
        (r.status, r.attempts, r.last_error.as_deref()),
        (Status::InProgress, 0, None)
    );
    assert_eq!(r.payload_hash, PayloadHash::of_bytes(fixed).as_str());
    // The fix's own failures count as before.
    s.engine.fail(&lease, "downstream timeout").await.unwrap();
    let lease = s.started("p-2", fixed, None).await;
    assert_eq!(lease.attempts(), 1, "the same payload carries its attempts");
    s.engine.complete(&lease, None).await.unwrap();
    // Once the fix is done, the bad version is a conflict again: an effect is protected.
    assert!(matches!(
        s.engine.acquire("p-2", bad, None).await,
        Err(AcquireError::PayloadMismatch {
            stored: Status::Completed,
            ..
        })
    ));
}

/// An attempt that crashed (its lease ended) protects nothing: another payload takes the key.
pub async fn an_ended_lease_of_another_payload_is_taken_over<B: Backend + Clone + 'static>(
    s: &Suite<B>,
) {
    let crashed = s.started("p-3", b"{\"v\":1}", s.deadline_in(1_000)).await;
    assert!(matches!(
        s.engine.acquire("p-3", b"{\"v\":2}", None).await,
        Err(AcquireError::PayloadMismatch {
            stored: Status::InProgress,
            ..
        })
    ));
    s.clock.advance(Duration::from_secs(2));
    let lease = s.started("p-3", b"{\"v\":2}", None).await;
    assert_eq!(lease.attempts(), 0);
    assert_eq!(
        s.engine.complete(&crashed, None).await.unwrap(),
        Updated::NotApplied,
        "the crashed attempt is fenced out"
    );
    s.engine.complete(&lease, None).await.unwrap();
}

/// Records written before hash schemes (bare hex of the raw body) keep their meaning: the same
/// bytes are a duplicate, anything else a conflict, as that version decided.
pub async fn a_record_of_the_previous_hash_scheme_is_compared_under_it<
    B: Backend + Clone + 'static,
>(
    s: &Suite<B>,
) {
    let body = br#"{"orderId": "o-1", "qty": 2}"#;
    let now_ms = s.clock.now_ms();
    let owner = super::OWNER.to_owned();
    let legacy = IdempotencyRecord {
        key: s.engine.stored_key("o-1"),
        status: Status::InProgress,
        expires_at: now_ms / 1000 + 3600,
        lease_until_ms: Some(now_ms + 60_000),
        owner: Some(owner.clone()),
        payload_hash: PayloadHash::raw(body).to_string(),
        attempts: 0,
        last_error: None,
        result: None,
        result_omitted: false,
    };
    let backend = s.engine.backend();
    assert!(matches!(
        backend.put(&legacy, now_ms).await.unwrap(),
        Put::Written { .. }
    ));
    let complete = Update::Complete {
        owner,
        payload_hash: legacy.payload_hash.clone(),
        expires_at: now_ms / 1000 + 3600,
        result: None,
        result_omitted: false,
    };
    backend
        .update(&legacy.key, &complete, now_ms)
        .await
        .unwrap();
    assert!(
        matches!(
            s.engine.acquire("o-1", body, None).await,
            Ok(Acquired::Duplicate { .. })
        ),
        "a stored duplicate stays a duplicate"
    );
    assert!(
        matches!(
            s.engine
                .acquire("o-1", br#"{"orderId": "o-1", "qty": 3}"#, None)
                .await,
            Err(AcquireError::PayloadMismatch { .. })
        ),
        "a stored conflict stays a conflict"
    );
}

/// A backend that applies every write twice and answers the second: what an SDK retry of a write
/// whose first answer was lost looks like to the engine.
#[derive(Clone)]
struct AnswerLost<B>(B);

impl<B: Backend> Backend for AnswerLost<B> {
    async fn put(&self, record: &IdempotencyRecord, now_ms: i64) -> Result<Put, StoreError> {
        self.0.put(record, now_ms).await?;
        self.0.put(record, now_ms).await
    }
    async fn get(&self, key: &str, now_ms: i64) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.0.get(key, now_ms).await
    }
    async fn update(&self, key: &str, update: &Update, now_ms: i64) -> Result<Updated, StoreError> {
        self.0.update(key, update, now_ms).await?;
        self.0.update(key, update, now_ms).await
    }
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.0.delete(key).await
    }
}

/// An acquire, a completion and a failure whose first try was applied and whose answer was lost:
/// the retry finds the attempt's own record and succeeds (before, the acquire waited out its own
/// lease as "in progress", and the completion reported the work not recorded).
pub async fn retried_writes_find_their_own_record<B: Backend + Clone + 'static>(s: &Suite<B>) {
    let engine = Idempotency::new(AnswerLost(s.engine.backend().clone()))
        .with_clock(s.clock.clone())
        .with_expiry(Duration::from_secs(3600))
        .with_key_prefix("fn");
    let Ok(Acquired::Started(lease)) = engine.acquire("retried", b"body", None).await else {
        panic!("a retried acquire that finds its own lease holds the key");
    };
    assert_eq!(lease.attempts(), 0);
    assert!(
        matches!(
            engine.complete(&lease, Some("7")).await.unwrap(),
            Updated::Applied { .. }
        ),
        "a retried completion that finds its own completed record succeeded"
    );
    assert_eq!(
        engine.acquire("retried", b"body", None).await.unwrap(),
        Acquired::Duplicate {
            result: Some("7".into()),
            result_omitted: false
        }
    );
    let Ok(Acquired::Started(lease)) = engine.acquire("retried-fail", b"body", None).await else {
        panic!("started");
    };
    assert_eq!(
        engine.fail(&lease, "boom").await.unwrap(),
        Updated::Applied { attempts: Some(1) },
        "a retried failure counts once"
    );
    let r = engine.get("retried-fail").await.unwrap().unwrap();
    assert_eq!((r.status, r.attempts), (Status::Failed, 1));
}

/// Two handlers keyed alike (`o-1`) on one table, each with its own prefix, given one cache: each
/// runs its own work once, and neither is answered with the other's record or cache entry.
pub async fn two_engines_sharing_a_store_and_a_cache_never_answer_for_each_other<
    B: Backend + Clone + 'static,
>(
    s: &Suite<B>,
) {
    let cache = LocalCache::new(NonZeroUsize::new(16).unwrap(), Duration::from_secs(60));
    let engine = |prefix: &str| {
        Idempotency::new(s.engine.backend().clone())
            .with_clock(s.clock.clone())
            .with_key_prefix(prefix)
            .with_local_cache(cache.clone())
    };
    let (orders, refunds) = (engine("orders"), engine("refunds"));
    let ran = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let work = |name: &'static str| {
        let ran = ran.clone();
        move || async move {
            ran.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok::<_, std::io::Error>(name.to_owned())
        }
    };
    let body = b"{\"orderId\":\"o-1\"}";
    assert_eq!(
        orders.run("o-1", body, None, work("order")).await.unwrap(),
        Outcome::Ran("order".to_owned())
    );
    assert_eq!(
        refunds
            .run("o-1", body, None, work("refund"))
            .await
            .unwrap(),
        Outcome::Ran("refund".to_owned()),
        "the other handler's record does not answer for this one"
    );
    assert_eq!(
        orders.run("o-1", body, None, work("order")).await.unwrap(),
        Outcome::Duplicate(Some("order".to_owned()))
    );
    assert_eq!(
        refunds
            .run("o-1", body, None, work("refund"))
            .await
            .unwrap(),
        Outcome::Duplicate(Some("refund".to_owned()))
    );
    assert_eq!(ran.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(cache.hits(), 2, "each replay from its own cache entry");
}
