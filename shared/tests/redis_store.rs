//! The Redis backend against a real server (valkey-server, started by `make test` and
//! `infra/local-aws/local-aws run`, found through `REDIS_URL`): the shared backend suite
//! (`backend_suite/`, which DynamoDB runs too), and what is Redis's own: expiry by the server's
//! TTL, namespaces, the script cache, connections, errors, memory per record.

#[macro_use]
mod backend_suite;
mod common;

use std::sync::Arc;
use std::time::Duration;

use backend_suite::{Operations, Suite};
use lambda_idempotency::count::RequestCounter;
use lambda_idempotency::payload::PayloadHash;
use lambda_idempotency::store::{Backend, RedisBackend, RedisConnectError, StoreError, Updated};
use lambda_idempotency::time::Clock;
use lambda_idempotency::{AcquireError, Acquired, Idempotency, Lease};

/// What each engine operation costs on Redis: one script per acquire (an expired record
/// included), completion, failure or reset; one command per read or delete.
const REDIS: Operations = Operations {
    acquire: "acquire",
    complete: "complete",
    fail: "fail",
    reset_attempts: "reset_attempts",
    get: "HGETALL",
    delete: "DEL",
    replace: 1,
};

/// A backend on `REDIS_URL`, in a namespace of its own.
async fn backend() -> RedisBackend {
    RedisBackend::connect(&common::redis_url())
        .await
        .expect("connect to the Redis server at REDIS_URL")
        .with_namespace(format!("{}:", common::unique("test")))
}

async fn suite() -> Suite<RedisBackend> {
    let counter = RequestCounter::default();
    Suite::new(
        backend().await.with_counter(counter.clone()),
        counter,
        REDIS,
    )
}

backend_suite!(suite());

async fn started<B: Backend>(e: &Idempotency<B>, key: &str) -> Lease {
    match e.acquire(key, b"body", None).await {
        Ok(Acquired::Started(lease)) => lease,
        other => panic!("expected Started for {key}, got {other:?}"),
    }
}

async fn query<T: ::redis::FromRedisValue>(backend: &RedisBackend, cmd: &mut ::redis::Cmd) -> T {
    cmd.query_async(&mut backend.connection())
        .await
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

async fn pttl(backend: &RedisBackend, key: &str) -> i64 {
    query(backend, ::redis::cmd("PTTL").arg(key)).await
}

#[tokio::test]
async fn the_server_deletes_a_record_when_it_expires() {
    let backend = backend().await;
    let e = Idempotency::new(backend.clone())
        .with_expiry(Duration::from_secs(1))
        .with_default_lease(Duration::from_secs(1));
    let lease = started(&e, "short").await;
    let key = backend.redis_key(lease.stored_key());
    let ttl = pttl(&backend, &key).await;
    assert!(
        (1..=3_000).contains(&ttl),
        "held for its lease, then expired: {ttl} ms"
    );
    e.complete(&lease, Some("1")).await.unwrap();
    let ttl = pttl(&backend, &key).await;
    assert!(
        (1..=2_000).contains(&ttl),
        "the end of the expiry second: {ttl} ms"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while e.get("short").await.unwrap().is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "still stored after 5 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(pttl(&backend, &key).await, -2, "the key is gone");
    assert_eq!(started(&e, "short").await.attempts(), 0, "a new record");

    // A lease longer than the expiry keeps the record on the server until it ends.
    let deadline = std::time::SystemTime::now() + Duration::from_secs(30);
    let lease = match e
        .acquire("long-lease", b"body", Some(deadline.into()))
        .await
    {
        Ok(Acquired::Started(lease)) => lease,
        other => panic!("{other:?}"),
    };
    let ttl = pttl(&backend, &backend.redis_key(lease.stored_key())).await;
    assert!(
        (29_000..=32_001).contains(&ttl),
        "the lease, then the expiry second: {ttl} ms"
    );
}

#[tokio::test]
async fn keys_live_under_the_namespace() {
    let a = backend().await;
    let b = a.clone().with_namespace("other-namespace:");
    let bare = a.clone().with_namespace("");
    assert_eq!(a.redis_key("fn#k"), format!("{}fn#k", a.namespace()));
    let (ea, eb) = (
        Idempotency::new(a.clone()).with_key_prefix("fn"),
        Idempotency::new(b.clone()).with_key_prefix("fn"),
    );
    let key = common::unique("k");
    let lease = started(&ea, &key).await;
    ea.complete(&lease, None).await.unwrap();
    let exists: i64 = query(
        &a,
        ::redis::cmd("EXISTS").arg(a.redis_key(&format!("fn#{key}"))),
    )
    .await;
    assert_eq!(exists, 1);
    assert!(
        bare.get(&format!("fn#{key}"), 0).await.unwrap().is_none(),
        "not outside the namespace"
    );
    let lease = started(&eb, &key).await;
    assert_eq!(lease.attempts(), 0, "another namespace, another record");
    eb.forget(&key).await.unwrap();
    assert!(matches!(
        ea.acquire(&key, b"body", None).await,
        Ok(Acquired::Duplicate { .. })
    ));
}

#[tokio::test]
async fn a_script_the_server_forgot_is_sent_again_whole() {
    let counter = RequestCounter::default();
    let backend = backend().await.with_counter(counter.clone());
    let e = Idempotency::new(backend.clone());
    let _: () = query(&backend, ::redis::cmd("SCRIPT").arg("FLUSH")).await;
    let lease = started(&e, "flushed").await;
    assert_eq!(
        counter.count("acquire"),
        2,
        "EVALSHA refused, then EVAL: {:?}",
        counter.snapshot()
    );
    e.complete(&lease, None).await.unwrap();
    counter.reset();
    assert!(matches!(
        e.acquire("flushed", b"body", None).await,
        Ok(Acquired::Duplicate { .. })
    ));
    assert_eq!(
        counter.snapshot(),
        [("acquire".to_owned(), 1)].into(),
        "cached again by the EVAL"
    );
    counter.reset();
    backend.load_scripts().await.unwrap();
    assert_eq!(counter.snapshot(), [("SCRIPT LOAD".to_owned(), 1)].into());
}

#[tokio::test]
async fn works_on_a_multiplexed_connection() {
    let client = ::redis::Client::open(common::redis_url()).unwrap();
    let connection = client.get_multiplexed_async_connection().await.unwrap();
    let counter = RequestCounter::default();
    let backend = RedisBackend::new(connection)
        .with_namespace(format!("{}:", common::unique("multiplexed")))
        .with_counter(counter.clone());
    let e = Idempotency::new(backend);
    let key = "k";
    let lease = started(&e, key).await;
    assert!(matches!(
        e.complete(&lease, Some("7")).await,
        Ok(Updated::Applied { attempts: Some(0) })
    ));
    assert_eq!(
        e.acquire(key, b"body", None).await.unwrap(),
        Acquired::Duplicate {
            result: Some("7".into()),
            result_omitted: false
        }
    );
    assert_eq!(counter.count("complete"), 1);
}

#[tokio::test]
async fn ten_acquires_on_ten_connections_start_exactly_once() {
    let mut engines = Vec::new();
    let namespace = format!("{}:", common::unique("ten-connections"));
    for _ in 0..10 {
        let backend = backend().await.with_namespace(namespace.clone());
        engines.push(Arc::new(Idempotency::new(backend)));
    }
    for round in 0..20 {
        let key = format!("race-{round}");
        let tasks: Vec<_> = engines
            .iter()
            .map(|e| {
                let (e, key) = (e.clone(), key.clone());
                tokio::spawn(async move { e.acquire(&key, b"body", None).await })
            })
            .collect();
        let mut started = 0;
        for task in tasks {
            match task.await.unwrap() {
                Ok(Acquired::Started(_)) => started += 1,
                Ok(Acquired::InProgress { .. }) => {}
                other => panic!("{key}: unexpected {other:?}"),
            }
        }
        assert_eq!(started, 1, "{key}");
    }
}

#[tokio::test]
async fn connect_errors_name_what_is_wrong() {
    let err = RedisBackend::connect("http://127.0.0.1:6379")
        .await
        .unwrap_err();
    assert!(
        matches!(err, RedisConnectError::InvalidUrl { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("`http://127.0.0.1:6379`"), "{err}");

    // A port nobody listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("redis://:secret@127.0.0.1:{port}");
    let err = RedisBackend::connect(&url).await.unwrap_err();
    assert!(matches!(err, RedisConnectError::Connect { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
    assert!(
        !message.contains("secret"),
        "the password is hidden: {message}"
    );
}

/// A record written by another tool, without a lease: held until it expires, as on DynamoDB.
#[tokio::test]
async fn a_record_without_a_lease_field_is_held_until_it_expires() {
    let f = suite().await;
    let backend = f.engine.backend();
    let now_s = f.clock.now_ms() / 1000;
    let _: () = query(
        backend,
        ::redis::cmd("HSET")
            .arg(backend.redis_key("fn#foreign"))
            .arg("status")
            .arg("IN_PROGRESS")
            .arg("payload_hash")
            .arg(PayloadHash::raw(b"body").as_str())
            .arg("expiration")
            .arg(now_s + 100),
    )
    .await;
    assert_eq!(
        f.engine
            .get("foreign")
            .await
            .unwrap()
            .unwrap()
            .lease_until_ms,
        None
    );
    assert!(matches!(
        f.engine.acquire("foreign", b"body", None).await,
        Ok(Acquired::InProgress { .. })
    ));
    f.clock.advance(Duration::from_secs(101));
    assert!(matches!(
        f.engine.acquire("foreign", b"body", None).await,
        Ok(Acquired::Started(_))
    ));
}

#[tokio::test]
async fn a_malformed_record_is_reported_not_replaced() {
    let f = suite().await;
    let backend = f.engine.backend();
    let key = backend.redis_key("fn#bad");
    let _: () = query(
        backend,
        ::redis::cmd("HSET")
            .arg(&key)
            .arg("status")
            .arg("DONE")
            .arg("expiration")
            .arg(f.clock.now_ms() / 1000 + 100),
    )
    .await;
    let err = f.engine.acquire("bad", b"body", None).await.unwrap_err();
    assert!(
        matches!(&err, AcquireError::Store(StoreError::Malformed { key, reason })
            if key == "fn#bad" && reason.contains("unknown status `DONE`")),
        "{err:?}"
    );
    let _: () = query(
        backend,
        ::redis::cmd("HSET")
            .arg(&key)
            .arg("status")
            .arg("FAILED")
            .arg("expiration")
            .arg("soon"),
    )
    .await;
    let err = f.engine.get("bad").await.unwrap_err();
    assert!(
        err.to_string().contains("`expiration` is not an integer"),
        "{err}"
    );
    let err = f.engine.acquire("bad", b"body", None).await.unwrap_err();
    assert!(
        matches!(err, AcquireError::Store(StoreError::Malformed { .. })),
        "{err:?}"
    );
    let expiry: String = query(backend, ::redis::cmd("HGET").arg(&key).arg("expiration")).await;
    assert_eq!(expiry, "soon", "left as it was");
}

#[tokio::test]
async fn results_over_the_configured_limit_are_omitted() {
    let backend = backend().await.with_max_result_bytes(100);
    let e = Idempotency::new(backend);
    let lease = started(&e, "limited").await;
    e.complete(&lease, Some(&format!("\"{}\"", "x".repeat(98))))
        .await
        .unwrap();
    assert!(matches!(
        e.acquire("limited", b"body", None).await,
        Ok(Acquired::Duplicate { result: Some(r), result_omitted: false }) if r.len() == 100
    ));
    let lease = started(&e, "over").await;
    e.complete(&lease, Some(&format!("\"{}\"", "x".repeat(99))))
        .await
        .unwrap();
    assert_eq!(
        e.acquire("over", b"body", None).await.unwrap(),
        Acquired::Duplicate {
            result: None,
            result_omitted: true
        }
    );
}

/// What a record costs in the server's memory (`MEMORY USAGE`, key and hash included), with an
/// engine key prefix and a key of the length of an SQS message id. docs/costs.md quotes these.
#[tokio::test]
async fn memory_per_record() {
    let backend = backend().await.with_namespace("idempotency:");
    let e = Idempotency::new(backend.clone()).with_key_prefix("payment-processor");
    let key = uuid_like();
    let usage = |lease: &Lease| {
        let (backend, key) = (backend.clone(), backend.redis_key(lease.stored_key()));
        async move {
            let bytes: i64 = query(&backend, ::redis::cmd("MEMORY").arg("USAGE").arg(key)).await;
            bytes
        }
    };
    let lease = started(&e, &key).await;
    let in_progress = usage(&lease).await;
    e.complete(&lease, None).await.unwrap();
    let completed = usage(&lease).await;
    let lease = started(&e, &format!("{key}-r")).await;
    e.complete(
        &lease,
        Some(r#"{"charge_id":"ch_0123456789","amount_cents":500}"#),
    )
    .await
    .unwrap();
    let with_result = usage(&lease).await;
    println!(
        "MEMORY USAGE per record: in progress {in_progress} B, completed {completed} B, \
         completed with a 48-byte result {with_result} B"
    );
    for bytes in [in_progress, completed, with_result] {
        assert!((100..=600).contains(&bytes), "{bytes} bytes");
    }
    assert!(with_result > completed);
    e.forget(&key).await.unwrap();
    e.forget(&format!("{key}-r")).await.unwrap();
}

/// 36 characters, like an SQS message id.
fn uuid_like() -> String {
    let clock = lambda_idempotency::time::SystemClock.now_ms();
    format!("{:08x}-0000-4000-8000-{:012x}", std::process::id(), clock)
}
