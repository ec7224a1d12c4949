//! The idempotency engine against a real DynamoDB endpoint (moto), and the same scenarios on the
//! in-memory backend: both backends must behave alike.

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::batch::{BatchProcessor, RecordHandlerExt, message};
use lambda_idempotency::count::RequestCounter;
use lambda_idempotency::record::{Clock, ManualClock, Status};
use lambda_idempotency::store::{Attributes, Backend, DynamoDbBackend, InMemoryBackend, Updated};
use lambda_idempotency::{AcquireError, Acquired, Idempotency};
use lambda_runtime::{Context, LambdaEvent};

struct Fixture {
    clock: Arc<ManualClock>,
    counter: RequestCounter,
    dynamodb: Idempotency<DynamoDbBackend>,
    memory: Idempotency<InMemoryBackend>,
}

async fn fixture() -> Fixture {
    let counter = RequestCounter::default();
    let client = common::dynamodb(&counter).await;
    let table = common::create_table(&client, "id", "expiration").await;
    let clock = Arc::new(ManualClock::starting_now());
    fn engine<B: Backend>(backend: B, clock: &Arc<ManualClock>) -> Idempotency<B> {
        Idempotency::new(backend)
            .with_clock(clock.clone())
            .with_expiry(Duration::from_secs(3600))
            .with_key_prefix("fn")
    }
    let dynamodb = engine(DynamoDbBackend::new(client, table), &clock);
    let memory = engine(InMemoryBackend::default(), &clock);
    counter.reset();
    Fixture {
        clock,
        counter,
        dynamodb,
        memory,
    }
}

fn deadline_in(clock: &ManualClock, ms: i64) -> Option<SystemTime> {
    Some(SystemTime::UNIX_EPOCH + Duration::from_millis((clock.now_ms() + ms) as u64))
}

async fn started<B: Backend>(
    e: &Idempotency<B>,
    key: &str,
    payload: &[u8],
    deadline: Option<SystemTime>,
) -> lambda_idempotency::Lease {
    match e.acquire(key, payload, deadline).await {
        Ok(Acquired::Started(lease)) => lease,
        other => panic!("expected Started for {key}, got {other:?}"),
    }
}

/// Runs a scenario on both backends.
macro_rules! on_both_backends {
    ($name:ident, $scenario:ident) => {
        #[tokio::test]
        async fn $name() {
            let f = fixture().await;
            $scenario(&f.memory, &f.clock).await;
            $scenario(&f.dynamodb, &f.clock).await;
        }
    };
}

async fn fresh_key<B: Backend>(e: &Idempotency<B>, clock: &ManualClock) {
    let deadline = deadline_in(clock, 5_000);
    let lease = started(e, "fresh", b"body", deadline).await;
    assert_eq!(
        lease.lease_until_ms(),
        clock.now_ms() + 5_000,
        "lease ends at the deadline"
    );
    let r = e.get("fresh").await.unwrap().expect("record written");
    assert_eq!(r.key, "fn#fresh");
    assert_eq!(r.status, Status::InProgress);
    assert_eq!(r.lease_until_ms, Some(clock.now_ms() + 5_000));
    assert_eq!(r.expires_at, clock.now_ms() / 1000 + 3600);
    assert_eq!(r.payload_hash, lambda_idempotency::key::sha256_hex(b"body"));
    assert_eq!(r.attempts, 0);
}
on_both_backends!(
    acquire_on_a_fresh_key_writes_an_in_progress_record,
    fresh_key
);

async fn duplicate_after_completion<B: Backend>(e: &Idempotency<B>, _clock: &ManualClock) {
    let lease = started(e, "done", b"body", None).await;
    e.complete(&lease, Some(r#"{"charged":true}"#))
        .await
        .unwrap();
    assert_eq!(
        e.acquire("done", b"body", None).await.unwrap(),
        Acquired::Completed {
            result: Some(r#"{"charged":true}"#.into()),
            result_omitted: false
        }
    );
}
on_both_backends!(
    a_duplicate_after_completion_gets_the_stored_result,
    duplicate_after_completion
);

async fn expired_record<B: Backend>(e: &Idempotency<B>, clock: &ManualClock) {
    let lease = started(e, "old", b"body", None).await;
    e.complete(&lease, None).await.unwrap();
    assert!(matches!(
        e.acquire("old", b"body", None).await,
        Ok(Acquired::Completed { .. })
    ));
    // The TTL sweeper has not deleted it (moto never does): the condition itself must see expiry.
    clock.advance(Duration::from_secs(3601));
    assert!(e.get("old").await.unwrap().is_some(), "still stored");
    started(e, "old", b"another body", None).await;
    clock.set(clock.now_ms() - 3_601_000);
}
on_both_backends!(
    an_expired_record_is_reclaimed_before_the_ttl_sweeper_runs,
    expired_record
);

async fn lease_ended<B: Backend>(e: &Idempotency<B>, clock: &ManualClock) {
    let deadline = deadline_in(clock, 2_000);
    let lease = started(e, "crashed", b"body", deadline).await;
    // The holder crashed: never completes. Until the lease ends, others are told to wait.
    assert_eq!(
        e.acquire("crashed", b"body", None).await.unwrap(),
        Acquired::InProgress {
            lease_until_ms: lease.lease_until_ms()
        }
    );
    clock.advance(Duration::from_millis(2_001));
    started(e, "crashed", b"body", None).await;
    clock.set(clock.now_ms() - 2_001);
}
on_both_backends!(a_record_whose_lease_ended_is_reclaimed, lease_ended);

async fn payload_mismatch<B: Backend>(e: &Idempotency<B>, _clock: &ManualClock) {
    let lease = started(e, "reused", b"first", None).await;
    // In progress, then completed: the ALL_OLD path sees the other hash either way.
    assert!(matches!(
        e.acquire("reused", b"second", None).await,
        Err(AcquireError::PayloadMismatch { key }) if key == "reused"
    ));
    e.complete(&lease, None).await.unwrap();
    assert!(matches!(
        e.acquire("reused", b"second", None).await,
        Err(AcquireError::PayloadMismatch { .. })
    ));
    // A failed record is not taken over by another payload either.
    let lease = started(e, "reused-failed", b"first", None).await;
    e.fail(&lease, "boom").await.unwrap();
    assert!(matches!(
        e.acquire("reused-failed", b"second", None).await,
        Err(AcquireError::PayloadMismatch { .. })
    ));
}
on_both_backends!(
    the_same_key_with_another_payload_is_a_mismatch,
    payload_mismatch
);

async fn failed_reacquired<B: Backend>(e: &Idempotency<B>, _clock: &ManualClock) {
    for attempt in 1..=3 {
        let lease = started(e, "flaky", b"body", None).await;
        e.fail(&lease, &format!("attempt {attempt} failed"))
            .await
            .unwrap();
        let r = e.get("flaky").await.unwrap().unwrap();
        assert_eq!((r.status, r.attempts), (Status::Failed, attempt));
        assert_eq!(r.last_error, Some(format!("attempt {attempt} failed")));
    }
    let lease = started(e, "flaky", b"body", None).await;
    e.complete(&lease, None).await.unwrap();
    let r = e.get("flaky").await.unwrap().unwrap();
    assert_eq!((r.status, r.attempts), (Status::Completed, 3));
    // A late failure report never overwrites a completion.
    e.fail(&lease, "late").await.unwrap();
    assert_eq!(
        e.get("flaky").await.unwrap().unwrap().status,
        Status::Completed
    );
}
on_both_backends!(
    a_failed_record_is_reacquired_and_attempts_counted,
    failed_reacquired
);

async fn long_key<B: Backend>(e: &Idempotency<B>, _clock: &ManualClock) {
    let key = "k".repeat(5_000);
    let lease = started(e, &key, b"body", None).await;
    assert!(lease.stored_key().starts_with("fn#sha256:"));
    e.complete(&lease, None).await.unwrap();
    assert!(matches!(
        e.acquire(&key, b"body", None).await,
        Ok(Acquired::Completed { .. })
    ));
    let mut other = key.clone();
    other.push('!');
    started(e, &other, b"body", None).await;
}
on_both_backends!(keys_over_the_dynamodb_limit_are_hashed, long_key);

async fn oversized_result<B: Backend>(e: &Idempotency<B>, _clock: &ManualClock) {
    let lease = started(e, "big", b"body", None).await;
    let result = format!("\"{}\"", "x".repeat(500 * 1024));
    e.complete(&lease, Some(&result))
        .await
        .expect("a too-large result never fails the completion");
    assert_eq!(
        e.acquire("big", b"body", None).await.unwrap(),
        Acquired::Completed {
            result: None,
            result_omitted: true
        }
    );
}
on_both_backends!(
    a_result_too_large_for_an_item_is_not_stored,
    oversized_result
);

async fn concurrent_acquires<B: Backend>(e: &Idempotency<B>, _clock: &ManualClock) {
    let attempts = (0..10).map(|_| e.acquire("race", b"body", None));
    let results = futures_util::future::join_all(attempts).await;
    let started = results
        .iter()
        .filter(|r| matches!(r, Ok(Acquired::Started(_))))
        .count();
    let waiting = results
        .iter()
        .filter(|r| matches!(r, Ok(Acquired::InProgress { .. })))
        .count();
    assert_eq!((started, waiting), (1, 9), "{results:?}");
}

async fn late_writes_after_a_takeover<B: Backend>(e: &Idempotency<B>, clock: &ManualClock) {
    let first = started(e, "fenced", b"body", deadline_in(clock, 1_000)).await;
    clock.advance(Duration::from_millis(1_500));
    let second = started(e, "fenced", b"body", deadline_in(clock, 5_000)).await;
    assert_ne!(first.owner(), second.owner());
    assert_eq!(
        e.complete(&first, Some("\"late\"")).await.unwrap(),
        Updated::NotApplied,
        "a writer that lost its lease cannot complete the record of the one that took it over"
    );
    assert_eq!(e.fail(&first, "late").await.unwrap(), Updated::NotApplied);
    let record = e.get("fenced").await.unwrap().unwrap();
    assert_eq!((record.status, record.attempts), (Status::InProgress, 0));
    assert_eq!(record.owner.as_deref(), Some(second.owner()));
    assert!(matches!(
        e.complete(&second, Some("1")).await.unwrap(),
        Updated::Applied { .. }
    ));
    assert_eq!(
        e.fail(&second, "after completion").await.unwrap(),
        Updated::NotApplied,
        "a completed record is never failed"
    );
    assert_eq!(
        e.get("fenced").await.unwrap().unwrap().status,
        Status::Completed
    );
}
on_both_backends!(
    a_late_complete_or_fail_after_a_takeover_changes_nothing,
    late_writes_after_a_takeover
);

async fn attempts_counted_by_the_store<B: Backend>(e: &Idempotency<B>, clock: &ManualClock) {
    for n in 1..=3 {
        let lease = started(e, "counted", b"body", None).await;
        assert_eq!(lease.attempts(), n - 1, "failed attempts before this one");
        assert_eq!(
            e.fail(&lease, &format!("failure {n}")).await.unwrap(),
            Updated::Applied { attempts: Some(n) },
            "the fail update returns the new count"
        );
    }
    assert!(matches!(
        e.reset_attempts("counted").await.unwrap(),
        Updated::Applied { .. }
    ));
    let lease = started(e, "counted", b"body", None).await;
    assert_eq!(lease.attempts(), 0, "reset after a dead letter");
    e.fail(&lease, "again").await.unwrap();
    // Past the expiry, the record is replaced: attempts and last error start again.
    clock.advance(Duration::from_secs(3_601));
    let lease = started(e, "counted", b"body", None).await;
    assert_eq!(lease.attempts(), 0);
    let record = e.get("counted").await.unwrap().unwrap();
    assert_eq!((record.attempts, record.last_error), (0, None));
}
on_both_backends!(
    the_store_counts_attempts_and_an_expired_record_starts_again,
    attempts_counted_by_the_store
);

async fn lease_outlives_expiry<B: Backend>(e: &Idempotency<B>, clock: &ManualClock) {
    // The expiry is 1 hour; this lease 2 hours.
    let lease = started(e, "long", b"body", deadline_in(clock, 7_200_000)).await;
    clock.advance(Duration::from_secs(5_400));
    assert!(
        matches!(
            e.acquire("long", b"body", None).await,
            Ok(Acquired::InProgress { .. })
        ),
        "an in-progress record never expires before its lease ends"
    );
    clock.advance(Duration::from_secs(1_900));
    assert!(matches!(
        e.acquire("long", b"other", None).await,
        Ok(Acquired::Started(_))
    ));
    assert_eq!(e.complete(&lease, None).await.unwrap(), Updated::NotApplied);
}
on_both_backends!(
    an_in_progress_record_never_expires_before_its_lease_ends,
    lease_outlives_expiry
);

#[tokio::test]
async fn a_record_without_a_lease_attribute_is_held_until_it_expires() {
    let f = fixture().await;
    let now_s = f.clock.now_ms() / 1000;
    let client = common::dynamodb(&f.counter).await;
    let table = f.dynamodb.backend().table().to_owned();
    let s = |v: &str| aws_sdk_dynamodb::types::AttributeValue::S(v.into());
    let hash = lambda_idempotency::key::sha256_hex(b"body");
    client
        .put_item()
        .table_name(&table)
        .item("id", s("fn#foreign"))
        .item("status", s("IN_PROGRESS"))
        .item("payload_hash", s(&hash))
        .item(
            "expiration",
            aws_sdk_dynamodb::types::AttributeValue::N((now_s + 100).to_string()),
        )
        .send()
        .await
        .unwrap();
    let mut record = f.dynamodb.get("foreign").await.unwrap().unwrap();
    assert_eq!(record.lease_until_ms, None);
    record.key = "fn#foreign".into();
    f.memory
        .backend()
        .put(&record, f.clock.now_ms())
        .await
        .unwrap();
    for e in [&f.dynamodb as &dyn AcquireProbe, &f.memory] {
        assert!(
            matches!(e.probe("foreign").await, Ok(Acquired::InProgress { .. })),
            "the condition and the code agree: held until the record expires"
        );
    }
    f.clock.advance(Duration::from_secs(101));
    for e in [&f.dynamodb as &dyn AcquireProbe, &f.memory] {
        assert!(matches!(e.probe("foreign").await, Ok(Acquired::Started(_))));
    }
}

/// `acquire` on either backend, behind one type.
trait AcquireProbe {
    fn probe<'a>(
        &'a self,
        key: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Acquired, AcquireError>> + 'a>>;
}

impl<B: Backend> AcquireProbe for Idempotency<B> {
    fn probe<'a>(
        &'a self,
        key: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Acquired, AcquireError>> + 'a>>
    {
        Box::pin(self.acquire(key, b"body", None))
    }
}

#[tokio::test]
async fn a_result_at_the_size_limit_is_stored_beside_the_longest_last_error() {
    let f = fixture().await;
    let e = &f.dynamodb;
    let lease = started(e, "boundary", b"body", None).await;
    e.fail(&lease, &"e".repeat(5_000)).await.unwrap();
    let stored = e.get("boundary").await.unwrap().unwrap();
    assert_eq!(
        stored.last_error.as_ref().map(String::len),
        Some(lambda_idempotency::record::MAX_ERROR_LEN)
    );
    let lease = started(e, "boundary", b"body", None).await;
    let max = e.backend().max_result_bytes(lease.stored_key()).unwrap();
    let result = format!("\"{}\"", "x".repeat(max - 2));
    assert!(matches!(
        e.complete(&lease, Some(&result)).await,
        Ok(Updated::Applied { .. })
    ));
    assert_eq!(
        e.acquire("boundary", b"body", None).await.unwrap(),
        Acquired::Completed {
            result: Some(result),
            result_omitted: false
        },
        "a result of exactly the limit is stored"
    );
    let lease = started(e, "boundary-2", b"body", None).await;
    let over = format!("\"{}\"", "x".repeat(max - 1));
    e.complete(&lease, Some(&over)).await.unwrap();
    assert_eq!(
        e.acquire("boundary-2", b"body", None).await.unwrap(),
        Acquired::Completed {
            result: None,
            result_omitted: true
        },
        "one byte more is not stored, and the completion still succeeds"
    );
}

#[tokio::test]
async fn ten_concurrent_acquires_of_one_key_start_exactly_once() {
    let f = fixture().await;
    concurrent_acquires(&f.memory, &f.clock).await;
    // Ten separate tasks (and connections) against DynamoDB, on 20 keys: a store whose
    // conditional write is not atomic lets two in on some key.
    let e = Arc::new(f.dynamodb.clone());
    for round in 0..20 {
        let key = format!("race-{round}");
        let tasks: Vec<_> = (0..10)
            .map(|_| {
                let (e, key) = (e.clone(), key.clone());
                tokio::spawn(async move { e.acquire(&key, b"body", None).await })
            })
            .collect();
        let mut started = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(Acquired::Started(_)) => started += 1,
                Ok(Acquired::InProgress { .. }) => {}
                other => panic!("{key}: unexpected {other:?}"),
            }
        }
        assert_eq!(started, 1, "{key}");
    }
}

#[tokio::test]
async fn one_dynamodb_request_per_duplicate_and_two_per_fresh_record() {
    let f = fixture().await;
    let counter = f.counter.clone();
    let handler = message(|m, _| async move { Ok::<_, std::io::Error>(m.body.map(|b| b.len())) })
        .idempotent(f.dynamodb.clone());
    let records: Vec<SqsMessage> = (0..5)
        .map(|i| {
            let mut m = SqsMessage::default();
            m.message_id = Some(format!("msg-{i}"));
            m.body = Some(format!("{{\"n\":{i}}}"));
            m
        })
        .collect();
    let mut event = SqsEvent::default();
    event.records = records;
    let event = LambdaEvent::new(event, Context::default());
    let processor = BatchProcessor::new();

    counter.reset();
    let report = processor.process(&event, &handler).await.unwrap();
    assert!(report.response().batch_item_failures.is_empty());
    assert_eq!(
        counter.count("UpdateItem"),
        10,
        "acquire + complete per fresh record: {:?}",
        counter.snapshot()
    );
    assert_eq!(counter.total(), 10, "{:?}", counter.snapshot());

    counter.reset();
    let report = processor.process(&event, &handler).await.unwrap();
    assert!(
        report
            .records
            .iter()
            .all(|r| matches!(&r.result, Ok(d) if d.is_duplicate()))
    );
    assert_eq!(
        counter.total(),
        5,
        "one request per completed duplicate: {:?}",
        counter.snapshot()
    );
}

#[tokio::test]
async fn attribute_names_are_configurable() {
    let counter = RequestCounter::default();
    let client = common::dynamodb(&counter).await;
    let table = common::create_table(&client, "pk", "ttl").await;
    let attributes = Attributes {
        key: "pk".into(),
        expiry: "ttl".into(),
        status: "state".into(),
        ..Attributes::default()
    };
    let e =
        Idempotency::new(DynamoDbBackend::new(client.clone(), &table).with_attributes(attributes));
    let lease = started(&e, "k", b"body", None).await;
    e.complete(&lease, Some("1")).await.unwrap();
    let item = client
        .get_item()
        .table_name(&table)
        .key("pk", aws_sdk_dynamodb::types::AttributeValue::S("k".into()))
        .send()
        .await
        .unwrap()
        .item
        .expect("stored under the configured key attribute");
    assert_eq!(item["state"].as_s().unwrap(), "COMPLETED");
    let ttl: i64 = item["ttl"].as_n().unwrap().parse().unwrap();
    let now = lambda_idempotency::record::SystemClock.now_ms() / 1000;
    assert!(
        (now + 86_399..=now + 86_401).contains(&ttl),
        "default expiry is 24 h: {ttl} vs {now}"
    );
}
