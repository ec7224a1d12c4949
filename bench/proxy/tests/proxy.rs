//! The latency and outage proxy: timing semantics against a plain TCP echo server, and the
//! AWS SDK through it to the local endpoint (moto).
//!
//! The timing checks are semantic, not benchmarks: a lower bound (the latency is paid) and a
//! generous upper bound (delays are not serialized), robust on a loaded 2-core machine.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::config::retry::RetryConfig;
use latency_proxy::{Proxy, ProxyOptions, ProxyStats, parse_endpoint};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const MS: Duration = Duration::from_millis(1);

/// A TCP echo server on 127.0.0.1: echoes each connection until its end of stream, then
/// closes its side.
async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = socket.split();
                if tokio::io::copy(&mut r, &mut w).await.is_ok() {
                    let _ = w.shutdown().await;
                }
            });
        }
    });
    addr
}

async fn proxy(upstream: SocketAddr, latency: Duration) -> Proxy {
    Proxy::start(upstream, ProxyOptions::with_latency(latency))
        .await
        .expect("start the proxy")
}

/// Writes `message` and reads it back.
async fn round_trip(stream: &mut TcpStream, message: &[u8]) {
    stream.write_all(message).await.unwrap();
    let mut back = vec![0; message.len()];
    stream.read_exact(&mut back).await.unwrap();
    assert_eq!(back, message);
}

/// Whether the connection was closed or reset by the other side, waiting at most 5 s.
async fn closed(stream: &mut TcpStream) -> bool {
    let mut buf = [0; 64];
    match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await {
        Ok(Ok(0) | Err(_)) => true,
        Ok(Ok(_)) | Err(_) => false,
    }
}

/// Whether a new connection to `addr` is refused: reset (even before `connect` returns) or
/// closed at once.
async fn refused(addr: SocketAddr) -> bool {
    match TcpStream::connect(addr).await {
        Err(_) => true,
        Ok(mut stream) => {
            let _ = stream.write_all(b"during").await; // may fail: the connection is reset
            closed(&mut stream).await
        }
    }
}

/// Waits until `check` holds on the proxy's counters (they move when connection tasks end).
async fn eventually(proxy: &Proxy, check: impl Fn(&ProxyStats) -> bool) -> ProxyStats {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let stats = proxy.stats();
        if check(&stats) || Instant::now() > until {
            return stats;
        }
        tokio::time::sleep(5 * MS).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_trip_costs_twice_the_latency() {
    let echo = echo_server().await;
    let latency = 50 * MS;
    let proxy = proxy(echo, latency).await;
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    stream.set_nodelay(true).unwrap();
    for _ in 0..3 {
        let started = Instant::now();
        round_trip(&mut stream, b"ping").await;
        let took = started.elapsed();
        assert!(took >= 2 * latency, "a round trip took {took:?}");
        eprintln!("round trip with {latency:?} each way: {took:?}");
    }

    // Without latency, bytes go straight through.
    let direct = self::proxy(echo, Duration::ZERO).await;
    let mut stream = TcpStream::connect(direct.addr()).await.unwrap();
    let started = Instant::now();
    round_trip(&mut stream, b"ping").await;
    eprintln!("round trip without latency: {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_round_trips_pay_the_latency_in_parallel() {
    let echo = echo_server().await;
    let latency = 100 * MS;
    let proxy = proxy(echo, latency).await;
    let mut streams = Vec::new();
    for _ in 0..10 {
        let stream = TcpStream::connect(proxy.addr()).await.unwrap();
        stream.set_nodelay(true).unwrap();
        streams.push(stream);
    }
    let started = Instant::now();
    let trips: Vec<_> = streams
        .into_iter()
        .enumerate()
        .map(|(i, mut stream)| {
            tokio::spawn(async move {
                round_trip(&mut stream, format!("ping {i}").as_bytes()).await;
                started.elapsed()
            })
        })
        .collect();
    let mut each = Vec::new();
    for trip in trips {
        each.push(trip.await.unwrap());
    }
    let took = started.elapsed();
    eprintln!("10 concurrent round trips with {latency:?} each way: {took:?} (each: {each:?})");
    assert!(each.iter().all(|t| *t >= 2 * latency), "{each:?}");
    // Serialized delays would take 10 x 2 x latency = 2 s; in parallel about 2 x latency.
    assert!(
        took < 10 * latency,
        "10 concurrent round trips took {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_of_chunks_is_delayed_not_throttled() {
    let echo = echo_server().await;
    let latency = 100 * MS;
    let proxy = proxy(echo, latency).await;
    let stream = TcpStream::connect(proxy.addr()).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (mut read, mut write) = stream.into_split();
    let started = Instant::now();
    // Ten chunks, 10 ms apart: each arrives back 2 x latency after it left. Delaying each chunk
    // after the previous one instead would take over 10 x latency.
    let writer = tokio::spawn(async move {
        for i in 0..10u8 {
            write.write_all(&[i; 100]).await.unwrap();
            tokio::time::sleep(10 * MS).await;
        }
        write
    });
    let mut back = vec![0; 1000];
    read.read_exact(&mut back).await.unwrap();
    let took = started.elapsed();
    let _write = writer.await.unwrap();
    eprintln!("10 chunks 10 ms apart, {latency:?} each way: all back in {took:?}");
    assert_eq!(back, (0..10u8).flat_map(|i| [i; 100]).collect::<Vec<_>>());
    assert!(took >= 2 * latency, "{took:?}");
    assert!(took < 10 * latency, "10 chunks took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_of_stream_is_forwarded_and_bytes_are_counted() {
    let echo = echo_server().await;
    let proxy = proxy(echo, 20 * MS).await;
    let stream = TcpStream::connect(proxy.addr()).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let sent = data.clone();
    let writer = tokio::spawn(async move {
        write.write_all(&sent).await.unwrap();
        write.shutdown().await.unwrap(); // the echo server closes after it
    });
    let mut back = Vec::new();
    read.read_to_end(&mut back).await.unwrap(); // ends: the end of stream came back
    writer.await.unwrap();
    assert!(back == data, "the bytes came back altered");

    let stats = eventually(&proxy, |s| s.open == 0).await;
    assert_eq!(
        stats,
        ProxyStats {
            accepted: 1,
            bytes_to_upstream: 1_000_000,
            bytes_to_client: 1_000_000,
            ..ProxyStats::default()
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_cuts_open_connections_and_refuses_new_ones() {
    let echo = echo_server().await;
    let proxy = proxy(echo, 5 * MS).await;
    let mut open = TcpStream::connect(proxy.addr()).await.unwrap();
    round_trip(&mut open, b"before").await;

    proxy.set_available(false);
    assert!(!proxy.available());
    let started = Instant::now();
    assert!(closed(&mut open).await, "the open connection was not cut");
    assert!(
        refused(proxy.addr()).await,
        "a new connection was forwarded"
    );
    eprintln!("outage: cut and refused in {:?}", started.elapsed());
    let stats = eventually(&proxy, |s| s.open == 0).await;
    assert_eq!((stats.accepted, stats.cut, stats.refused), (1, 1, 1));
    assert_eq!(
        stats.bytes_to_upstream, 6,
        "only `before` reached the upstream"
    );

    proxy.set_available(true);
    let mut after = TcpStream::connect(proxy.addr()).await.unwrap();
    round_trip(&mut after, b"after").await;
    assert!(closed(&mut open).await, "a cut connection stays closed");
    let stats = proxy.stats();
    assert_eq!((stats.accepted, stats.cut, stats.refused), (2, 1, 1));
    assert_eq!(stats.bytes_to_client, 11);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_on_their_way_are_dropped_by_an_outage() {
    let echo = echo_server().await;
    let proxy = proxy(echo, 300 * MS).await;
    let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
    stream.write_all(b"lost").await.unwrap();
    tokio::time::sleep(50 * MS).await; // read by the proxy, not yet delivered
    proxy.set_available(false);
    assert!(closed(&mut stream).await);
    tokio::time::sleep(400 * MS).await; // past the time it would have been delivered
    let stats = eventually(&proxy, |s| s.open == 0).await;
    assert_eq!(stats.cut, 1);
    assert_eq!(stats.bytes_to_upstream, 0, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_is_down_resets_the_client() {
    let down = {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap() // closed when dropped here
    };
    let proxy = proxy(down, Duration::ZERO).await;
    assert!(refused(proxy.addr()).await);
    let stats = eventually(&proxy, |s| s.open == 0).await;
    assert_eq!((stats.accepted, stats.upstream_failures), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_connections_and_stops_listening() {
    let echo = echo_server().await;
    let proxy = proxy(echo, Duration::ZERO).await;
    let addr = proxy.addr();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    round_trip(&mut stream, b"x").await;
    proxy.shutdown().await;
    assert!(closed(&mut stream).await);
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "still listening after shutdown"
    );
}

// --- through the proxy to the local endpoint (moto) ----------------------------------------

/// The local endpoint's address; these tests never skip without one.
fn endpoint() -> SocketAddr {
    let url = std::env::var(local_aws::ENDPOINT_VAR)
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| {
            panic!(
                "{} is not set: these tests need a local AWS endpoint. Run them with \
                 `infra/local-aws/local-aws run -- cargo nextest run -p latency-proxy --test proxy` \
                 or `make test`.",
                local_aws::ENDPOINT_VAR
            )
        });
    parse_endpoint(&url).unwrap_or_else(|e| panic!("{e}"))
}

/// A DynamoDB client through `proxy` that tries each request once (no retries hide an error).
async fn dynamodb(proxy: &Proxy) -> aws_sdk_dynamodb::Client {
    let config = local_aws::sdk_config_for(&proxy.url()).await;
    aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&config)
            .retry_config(RetryConfig::standard().with_max_attempts(1))
            .build(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_works_through_the_proxy_and_pays_the_latency() {
    let upstream = endpoint();
    let direct = proxy(upstream, Duration::ZERO).await;
    dynamodb(&direct)
        .await
        .list_tables()
        .send()
        .await
        .expect("ListTables through the proxy");
    let stats = direct.stats();
    assert!(stats.accepted >= 1 && stats.bytes_to_upstream > 0 && stats.bytes_to_client > 0);

    let latency = 20 * MS;
    let slow = proxy(upstream, latency).await;
    let client = dynamodb(&slow).await;
    for _ in 0..3 {
        let started = Instant::now();
        client.list_tables().send().await.expect("ListTables");
        let took = started.elapsed();
        eprintln!("ListTables with {latency:?} each way: {took:?}");
        assert!(took >= 2 * latency, "ListTables took {took:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_fails_sdk_calls_fast_and_they_work_again_after_it() {
    let proxy = proxy(endpoint(), 200 * MS).await;
    let client = dynamodb(&proxy).await;
    client
        .list_tables()
        .send()
        .await
        .expect("ListTables before");

    // A call in flight (its request held by the latency) is cut.
    let in_flight = tokio::spawn({
        let client = client.clone();
        async move {
            let started = Instant::now();
            (client.list_tables().send().await, started.elapsed())
        }
    });
    tokio::time::sleep(50 * MS).await;
    proxy.set_available(false);
    let (result, took) = in_flight.await.unwrap();
    let error = result.expect_err("a call in flight during the outage succeeded");
    eprintln!("in flight, cut after 50 ms: failed in {took:?}: {error:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");

    // New calls fail fast.
    let started = Instant::now();
    let error = client
        .list_tables()
        .send()
        .await
        .expect_err("a call during the outage succeeded");
    let took = started.elapsed();
    eprintln!("during the outage: failed in {took:?}: {error:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    let during = eventually(&proxy, |s| s.open == 0).await;
    assert!(during.cut >= 1, "{during:?}");
    assert!(during.refused >= 1, "{during:?}");

    proxy.set_available(true);
    client.list_tables().send().await.expect("ListTables after");
    let after = proxy.stats();
    assert!(after.accepted > during.accepted, "{during:?} -> {after:?}");
    assert!(after.bytes_to_client > during.bytes_to_client);
    eprintln!("{after}");
}
