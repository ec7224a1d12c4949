//! The warm-container cache against a real DynamoDB endpoint (moto): every request counted.

mod common;

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use lambda_idempotency::cache::{CachedBackend, LocalCache};
use lambda_idempotency::count::RequestCounter;
use lambda_idempotency::store::{Backend, DynamoDbBackend};
use lambda_idempotency::time::ManualClock;
use lambda_idempotency::transaction::{Transacted, Transaction};
use lambda_idempotency::{AcquireError, Acquired, Idempotency, Outcome};

struct Fixture {
    counter: RequestCounter,
    clock: Arc<ManualClock>,
    cache: LocalCache,
    engine: Idempotency<CachedBackend<DynamoDbBackend>>,
    /// The same table without a cache: another execution environment.
    other: Idempotency<DynamoDbBackend>,
    effects: String,
}

/// Records expire after an hour; the cache keeps `capacity` keys for `ttl`.
async fn fixture(capacity: usize, ttl: Duration) -> Fixture {
    let counter = RequestCounter::default();
    let client = common::dynamodb(&counter).await;
    let table = common::create_table(&client, "id", "expiration").await;
    let effects = common::create_table(&client, "pk", "ttl").await;
    let clock = Arc::new(ManualClock::starting_now());
    let cache = LocalCache::new(NonZeroUsize::new(capacity).unwrap(), ttl);
    let engine = || {
        Idempotency::new(DynamoDbBackend::new(client.clone(), &table))
            .with_clock(clock.clone())
            .with_expiry(Duration::from_secs(3600))
    };
    let fixture = Fixture {
        engine: engine().with_local_cache(cache.clone()),
        other: engine(),
        counter: counter.clone(),
        clock,
        cache,
        effects,
    };
    counter.reset();
    fixture
}

async fn run<B: Backend>(e: &Idempotency<B>, key: &str, payload: &[u8]) -> Outcome<u32> {
    e.run(key, payload, None, || async { Ok::<_, std::io::Error>(7) })
        .await
        .unwrap()
}

#[tokio::test]
async fn a_duplicate_after_completion_in_the_same_process_makes_no_request() {
    let f = fixture(100, Duration::from_secs(300)).await;
    assert_eq!(run(&f.engine, "k", b"body").await, Outcome::Ran(7));
    assert_eq!(f.counter.total(), 2, "acquire and complete");
    f.counter.reset();

    assert_eq!(
        run(&f.engine, "k", b"body").await,
        Outcome::Duplicate(Some(7))
    );
    assert_eq!(f.counter.total(), 0, "{:?}", f.counter.snapshot());
    // The same key with another payload is still a mismatch, from the cache too.
    assert!(matches!(
        f.engine.acquire("k", b"other", None).await,
        Err(AcquireError::PayloadMismatch { .. })
    ));
    assert_eq!(f.counter.total(), 0);
    assert_eq!(f.cache.hits(), 2);

    // Without the cache (another environment), the duplicate costs its request.
    assert_eq!(
        run(&f.other, "k", b"body").await,
        Outcome::Duplicate(Some(7))
    );
    assert_eq!(f.counter.total(), 1);
}

#[tokio::test]
async fn a_key_completed_elsewhere_is_cached_once_seen() {
    let f = fixture(100, Duration::from_secs(300)).await;
    run(&f.other, "k", b"body").await;
    f.counter.reset();
    assert_eq!(
        run(&f.engine, "k", b"body").await,
        Outcome::Duplicate(Some(7))
    );
    assert_eq!(f.counter.total(), 1, "the first duplicate asks the store");
    assert_eq!(
        run(&f.engine, "k", b"body").await,
        Outcome::Duplicate(Some(7))
    );
    assert_eq!(f.counter.total(), 1, "the second does not");
}

#[tokio::test]
async fn a_transactional_duplicate_after_its_commit_makes_no_request() {
    let f = fixture(100, Duration::from_secs(300)).await;
    let effects = f.effects.clone();
    let work = move || {
        let put = Put::builder()
            .table_name(&effects)
            .item("pk", AttributeValue::S("entry-1".into()))
            .build()
            .unwrap();
        async move { Ok::<_, std::io::Error>(Transaction::<_, TransactWriteItem>::new(5).put(put)) }
    };
    assert_eq!(
        f.engine
            .transact("k", b"body", None, work.clone())
            .await
            .unwrap(),
        Transacted::Committed(5)
    );
    assert_eq!(f.counter.total(), 1);
    f.counter.reset();
    assert_eq!(
        f.engine.transact("k", b"body", None, work).await.unwrap(),
        Transacted::Duplicate {
            stored: Some("5".into())
        }
    );
    assert_eq!(f.counter.total(), 0, "{:?}", f.counter.snapshot());
}

#[tokio::test]
async fn an_entry_past_its_ttl_asks_the_store_again() {
    let f = fixture(100, Duration::from_secs(60)).await;
    run(&f.engine, "k", b"body").await;
    f.clock.advance(Duration::from_secs(59));
    f.counter.reset();
    run(&f.engine, "k", b"body").await;
    assert_eq!(f.counter.total(), 0, "within the TTL");

    f.clock.advance(Duration::from_secs(2));
    assert_eq!(
        run(&f.engine, "k", b"body").await,
        Outcome::Duplicate(Some(7))
    );
    assert_eq!(f.counter.total(), 1, "past the TTL: the store answers");
}

#[tokio::test]
async fn an_entry_never_outlives_its_record() {
    // The cache would keep entries for a day; the records expire after an hour.
    let f = fixture(100, Duration::from_secs(24 * 3600)).await;
    run(&f.engine, "k", b"body").await;
    f.clock.advance(Duration::from_secs(3601));
    f.counter.reset();
    assert_eq!(
        run(&f.engine, "k", b"body").await,
        Outcome::Ran(7),
        "the record expired"
    );
    // The acquire meets the expired record, replaces it (a second conditional write), completes.
    assert_eq!(f.counter.total(), 3, "{:?}", f.counter.snapshot());
}

#[tokio::test]
async fn the_cache_is_bounded() {
    let f = fixture(2, Duration::from_secs(300)).await;
    for key in ["a", "b", "c"] {
        run(&f.engine, key, b"body").await;
    }
    assert_eq!(f.cache.len(), 2);
    assert_eq!(f.cache.capacity(), 2);
    f.counter.reset();
    run(&f.engine, "c", b"body").await;
    run(&f.engine, "b", b"body").await;
    assert_eq!(f.counter.total(), 0, "the two most recent keys are cached");
    run(&f.engine, "a", b"body").await;
    assert_eq!(
        f.counter.total(),
        1,
        "the least recently used key was dropped"
    );
}

#[tokio::test]
async fn forgetting_a_key_drops_its_entry() {
    let f = fixture(100, Duration::from_secs(300)).await;
    run(&f.engine, "k", b"body").await;
    f.engine.forget("k").await.unwrap();
    f.counter.reset();
    assert!(matches!(
        f.engine.acquire("k", b"body", None).await,
        Ok(Acquired::Started(_))
    ));
    assert_eq!(f.counter.total(), 1);
}

/// Two engines on two tables, the same key prefix, one cache: an entry of one table never answers
/// for the other (the cache is keyed by the backend's identity and the full stored key).
#[tokio::test]
async fn engines_over_two_tables_share_a_cache_without_answering_for_each_other() {
    let f = fixture(16, Duration::from_secs(60)).await;
    let client = f.engine.backend().inner().client().clone();
    let second_table = common::create_table(&client, "id", "expiration").await;
    let second = Idempotency::new(DynamoDbBackend::new(client, &second_table))
        .with_clock(f.clock.clone())
        .with_local_cache(f.cache.clone());
    assert_eq!(run(&f.engine, "k", b"{}").await, Outcome::Ran(7));
    assert_eq!(
        run(&second, "k", b"{}").await,
        Outcome::Ran(7),
        "the first table's entry does not answer for the second table"
    );
    assert_eq!(run(&second, "k", b"{}").await, Outcome::Duplicate(Some(7)));
    assert_eq!(f.cache.hits(), 1);
}
