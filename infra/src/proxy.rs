//! A TCP proxy on 127.0.0.1 in front of the local AWS endpoint, for fault injection and
//! benchmarks.
//!
//! - **Latency**: [`ProxyOptions::latency_each_way`] delays every chunk of bytes, in each
//!   direction, by a fixed time, the way a network's propagation delay does: each chunk read
//!   from one side is timestamped and written to the other side at `read time + latency`,
//!   through a queue per direction. Chunks are not delayed one after the other, so the
//!   connection's throughput is not throttled: a request/response round trip costs about twice
//!   the latency, a stream of chunks costs the latency once, and concurrent connections each pay
//!   it in parallel. End of stream (a half-close) is delayed like data. Connection set-up is not
//!   delayed (the client's handshake is with the proxy); SDK clients pool their connections, so
//!   the round trips of requests are what the latency shows.
//! - **Outage**: [`Proxy::set_available(false)`](Proxy::set_available) cuts every open
//!   connection at once (both sides are reset, data still on its way is dropped) and refuses
//!   new ones (accepted and reset at once) until `set_available(true)`. The endpoint behind
//!   keeps running, so an outage of moto (which loses its state when restarted) can be played
//!   without losing the data.
//! - **Counters**: [`Proxy::stats`] (connections forwarded, refused, cut, open; bytes each way).
//!
//! Only 127.0.0.1 is ever bound. The binary `proxy`
//! (`cargo run -p local-aws --bin proxy -- --upstream http://127.0.0.1:4566 --latency-ms 5`)
//! runs one from the command line.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use std::time::{Duration, Instant};
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//! use local_aws::proxy::{Proxy, ProxyOptions};
//!
//! // An echo server standing in for the endpoint.
//! let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
//! let upstream = echo.local_addr().unwrap();
//! tokio::spawn(async move {
//!     while let Ok((mut socket, _)) = echo.accept().await {
//!         tokio::spawn(async move {
//!             let (mut r, mut w) = socket.split();
//!             let _ = tokio::io::copy(&mut r, &mut w).await;
//!         });
//!     }
//! });
//!
//! let proxy = Proxy::start(upstream, ProxyOptions::with_latency(Duration::from_millis(10)))
//!     .await
//!     .unwrap();
//! let mut client = tokio::net::TcpStream::connect(proxy.addr()).await.unwrap();
//! let started = Instant::now();
//! client.write_all(b"ping").await.unwrap();
//! let mut answer = [0; 4];
//! client.read_exact(&mut answer).await.unwrap();
//! assert_eq!(&answer, b"ping");
//! assert!(started.elapsed() >= Duration::from_millis(20)); // 10 ms there, 10 ms back
//!
//! proxy.set_available(false); // the connection above is cut, new ones are refused
//! assert!(matches!(client.read(&mut answer).await, Ok(0) | Err(_)));
//! proxy.set_available(true);
//! assert_eq!(proxy.stats().cut, 1);
//! proxy.shutdown().await;
//! # });
//! ```

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The size of one read; a chunk is at most this long.
const CHUNK: usize = 16 * 1024;
/// Chunks on their way in one direction of one connection before reading waits. With 16 KiB
/// chunks this allows 16 MiB per latency period, far more than the endpoint needs.
const CHUNKS_IN_FLIGHT: usize = 1024;

/// How the proxy treats the traffic.
///
/// ```
/// use std::time::Duration;
/// use local_aws::proxy::ProxyOptions;
///
/// assert_eq!(ProxyOptions::default().latency_each_way, Duration::ZERO);
/// let bench = ProxyOptions::with_latency(Duration::from_millis(5));
/// assert_eq!(bench, ProxyOptions { latency_each_way: Duration::from_millis(5) });
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyOptions {
    /// Added to every chunk of bytes in each direction (a round trip pays it twice); zero
    /// forwards at once.
    pub latency_each_way: Duration,
}

impl ProxyOptions {
    /// Options with `latency` each way.
    pub fn with_latency(latency: Duration) -> Self {
        Self {
            latency_each_way: latency,
        }
    }
}

/// What a proxy has done so far (see [`Proxy::stats`]).
///
/// ```
/// let stats = local_aws::proxy::ProxyStats::default();
/// assert_eq!(stats.to_string(), "0 connections (0 open, 0 refused, 0 cut, 0 upstream failures), \
///     0 bytes to upstream, 0 bytes to client");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Connections accepted while available and forwarded (or attempted: see
    /// `upstream_failures`).
    pub accepted: u64,
    /// Connections accepted during an outage and closed at once.
    pub refused: u64,
    /// Open connections cut by [`Proxy::set_available(false)`](Proxy::set_available).
    pub cut: u64,
    /// Connections open now.
    pub open: u64,
    /// Accepted connections whose connection to the upstream failed (the client's is reset).
    pub upstream_failures: u64,
    /// Bytes written to the upstream.
    pub bytes_to_upstream: u64,
    /// Bytes written back to clients.
    pub bytes_to_client: u64,
}

impl fmt::Display for ProxyStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} connections ({} open, {} refused, {} cut, {} upstream failures), \
             {} bytes to upstream, {} bytes to client",
            self.accepted,
            self.open,
            self.refused,
            self.cut,
            self.upstream_failures,
            self.bytes_to_upstream,
            self.bytes_to_client
        )
    }
}

#[derive(Default)]
struct Counters {
    accepted: AtomicU64,
    refused: AtomicU64,
    cut: AtomicU64,
    open: AtomicU64,
    upstream_failures: AtomicU64,
    bytes_to_upstream: AtomicU64,
    bytes_to_client: AtomicU64,
}

impl Counters {
    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// Counts a connection as open until dropped.
struct Open(Arc<Shared>);

impl Open {
    fn new(shared: &Arc<Shared>) -> Self {
        Counters::add(&shared.counters.open, 1);
        Self(Arc::clone(shared))
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.counters.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Availability: while available, each connection holds a child of `epoch`, which an outage
/// cancels (and replaces).
struct Availability {
    available: bool,
    epoch: CancellationToken,
}

struct Shared {
    upstream: SocketAddr,
    options: ProxyOptions,
    counters: Counters,
    availability: Mutex<Availability>,
    shutdown: CancellationToken,
}

impl Shared {
    fn availability(&self) -> MutexGuard<'_, Availability> {
        // Nothing panics while holding the lock; recover anyway rather than cascade.
        self.availability
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A running proxy. Dropping it stops it (connections are cut);
/// [`shutdown`](Self::shutdown) also waits until every connection is closed.
///
/// ```no_run
/// # async fn f() -> std::io::Result<()> {
/// use local_aws::proxy::{Proxy, ProxyOptions, parse_endpoint};
///
/// let endpoint = std::env::var(local_aws::ENDPOINT_VAR).expect("AWS_ENDPOINT_URL");
/// let proxy = Proxy::start(parse_endpoint(&endpoint)?, ProxyOptions::default()).await?;
/// let config = local_aws::sdk_config_for(&proxy.url()).await;
/// let dynamodb = aws_sdk_dynamodb::Client::new(&config);
/// proxy.set_available(false); // the endpoint is "down"
/// assert!(dynamodb.list_tables().send().await.is_err());
/// proxy.set_available(true); // and back, with all its data
/// dynamodb.list_tables().send().await.expect("ListTables");
/// proxy.shutdown().await;
/// # Ok(()) }
/// ```
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Proxy")
            .field("addr", &self.addr)
            .field("upstream", &self.shared.upstream)
            .field("options", &self.shared.options)
            .field("available", &self.available())
            .finish()
    }
}

impl Proxy {
    /// Binds a free port on 127.0.0.1 and forwards every connection to `upstream`.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use local_aws::proxy::{Proxy, ProxyOptions};
    ///
    /// let proxy = Proxy::start("127.0.0.1:4566".parse().unwrap(), ProxyOptions::default())
    ///     .await
    ///     .unwrap();
    /// assert!(proxy.url().starts_with("http://127.0.0.1:"));
    /// assert_eq!(proxy.upstream().port(), 4566);
    /// # });
    /// ```
    pub async fn start(upstream: SocketAddr, options: ProxyOptions) -> std::io::Result<Self> {
        Self::start_on_port(0, upstream, options).await
    }

    /// Like [`start`](Self::start), on 127.0.0.1:`port` (0: any free port).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use local_aws::proxy::{Proxy, ProxyOptions};
    ///
    /// let upstream = "127.0.0.1:4566".parse().unwrap();
    /// let first = Proxy::start(upstream, ProxyOptions::default()).await.unwrap();
    /// // The port is taken: binding it again fails.
    /// assert!(Proxy::start_on_port(first.addr().port(), upstream, ProxyOptions::default()).await.is_err());
    /// # });
    /// ```
    pub async fn start_on_port(
        port: u16,
        upstream: SocketAddr,
        options: ProxyOptions,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).await?;
        let addr = listener.local_addr()?;
        let shutdown = CancellationToken::new();
        let shared = Arc::new(Shared {
            upstream,
            options,
            counters: Counters::default(),
            availability: Mutex::new(Availability {
                available: true,
                epoch: shutdown.child_token(),
            }),
            shutdown,
        });
        let task = tokio::spawn(accept(listener, Arc::clone(&shared)));
        tracing::debug!(%addr, %upstream, ?options, "proxy listening");
        Ok(Self {
            addr,
            shared,
            task: Some(task),
        })
    }

    /// The address the proxy listens on (127.0.0.1).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`: the endpoint URL to give clients (e.g. to
    /// [`sdk_config_for`](crate::sdk_config_for)).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Where connections are forwarded.
    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream
    }

    /// The options the proxy runs with.
    pub fn options(&self) -> ProxyOptions {
        self.shared.options
    }

    /// Starts (`false`) or ends (`true`) an outage.
    ///
    /// Going unavailable cuts every open connection at once (both sides are reset; bytes still
    /// on their way are dropped, so a request may have reached the endpoint while its response
    /// never comes back, or not) and from then on resets each new connection as soon as it is
    /// accepted. Going available again forwards new connections; cut ones stay closed. Setting
    /// the current state again does nothing.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use tokio::io::AsyncReadExt;
    /// use local_aws::proxy::{Proxy, ProxyOptions};
    ///
    /// let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    /// let proxy = Proxy::start(upstream.local_addr().unwrap(), ProxyOptions::default()).await.unwrap();
    /// proxy.set_available(false);
    /// assert!(!proxy.available());
    /// // Reset as soon as accepted: `connect` itself may already fail.
    /// if let Ok(mut refused) = tokio::net::TcpStream::connect(proxy.addr()).await {
    ///     assert!(matches!(refused.read(&mut [0; 1]).await, Ok(0) | Err(_)));
    /// }
    /// assert_eq!(proxy.stats().refused, 1);
    /// proxy.set_available(true);
    /// # });
    /// ```
    pub fn set_available(&self, available: bool) {
        let mut state = self.shared.availability();
        if state.available == available {
            return;
        }
        state.available = available;
        if !available {
            let fresh = self.shared.shutdown.child_token();
            std::mem::replace(&mut state.epoch, fresh).cancel();
        }
        drop(state);
        tracing::debug!(addr = %self.addr, available, "proxy availability");
    }

    /// Whether connections are forwarded (no outage).
    pub fn available(&self) -> bool {
        self.shared.availability().available
    }

    /// The counters so far.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use local_aws::proxy::{Proxy, ProxyOptions, ProxyStats};
    ///
    /// let proxy = Proxy::start("127.0.0.1:4566".parse().unwrap(), ProxyOptions::default()).await.unwrap();
    /// assert_eq!(proxy.stats(), ProxyStats::default());
    /// # });
    /// ```
    pub fn stats(&self) -> ProxyStats {
        let c = &self.shared.counters;
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        ProxyStats {
            accepted: get(&c.accepted),
            refused: get(&c.refused),
            cut: get(&c.cut),
            open: get(&c.open),
            upstream_failures: get(&c.upstream_failures),
            bytes_to_upstream: get(&c.bytes_to_upstream),
            bytes_to_client: get(&c.bytes_to_client),
        }
    }

    /// Stops accepting, closes every connection (reset, not counted as cut) and waits until
    /// they are closed.
    pub async fn shutdown(mut self) {
        self.shared.shutdown.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.shutdown.cancel();
    }
}

async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        let stream = tokio::select! {
            _ = shared.shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: wait rather than spin.
                    tracing::warn!("proxy accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
        };
        let cut = {
            let state = shared.availability();
            state.available.then(|| state.epoch.child_token())
        };
        match cut {
            Some(cut) => {
                Counters::add(&shared.counters.accepted, 1);
                connections.spawn(connection(stream, Open::new(&shared), cut));
            }
            None => {
                Counters::add(&shared.counters.refused, 1);
                reset(&stream);
            }
        }
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

/// Makes the coming close a reset (RST) rather than an orderly end of stream.
fn reset(stream: &TcpStream) {
    let _ = stream.set_zero_linger();
}

enum End {
    /// Both directions ended with an end of stream.
    Closed,
    /// A read or write failed (a side reset or went away).
    Failed,
    /// An outage or the shutdown.
    Cut,
}

async fn connection(mut client: TcpStream, open: Open, cut: CancellationToken) {
    let shared = &open.0;
    let _ = client.set_nodelay(true);
    let upstream = tokio::select! {
        biased;
        _ = cut.cancelled() => None,
        connected = TcpStream::connect(shared.upstream) => match connected {
            Ok(upstream) => Some(upstream),
            Err(e) => {
                tracing::debug!(upstream = %shared.upstream, "proxy cannot connect upstream: {e}");
                Counters::add(&shared.counters.upstream_failures, 1);
                reset(&client);
                return;
            }
        },
    };
    let end = match upstream {
        None => {
            reset(&client);
            End::Cut
        }
        Some(mut upstream) => {
            let _ = upstream.set_nodelay(true);
            let latency = shared.options.latency_each_way;
            let counters = &shared.counters;
            let end = {
                let (mut client_read, mut client_write) = client.split();
                let (mut upstream_read, mut upstream_write) = upstream.split();
                let forward = async {
                    tokio::try_join!(
                        pipe(
                            &mut client_read,
                            &mut upstream_write,
                            latency,
                            &cut,
                            &counters.bytes_to_upstream
                        ),
                        pipe(
                            &mut upstream_read,
                            &mut client_write,
                            latency,
                            &cut,
                            &counters.bytes_to_client
                        ),
                    )
                };
                tokio::select! {
                    biased;
                    _ = cut.cancelled() => End::Cut,
                    forwarded = forward => match forwarded {
                        Ok(_) if !cut.is_cancelled() => End::Closed,
                        Ok(_) => End::Cut,
                        Err(_) if cut.is_cancelled() => End::Cut,
                        Err(_) => End::Failed,
                    },
                }
            };
            if !matches!(end, End::Closed) {
                reset(&client);
                reset(&upstream);
            }
            end
        }
    };
    if matches!(end, End::Cut) && !shared.shutdown.is_cancelled() {
        Counters::add(&shared.counters.cut, 1);
    }
}

/// Copies `from` to `to`, each chunk `latency` after it was read, then forwards the end of
/// stream (also delayed). Fails when either side fails, or when `cut` is cancelled before a
/// write.
async fn pipe<R, W>(
    from: &mut R,
    to: &mut W,
    latency: Duration,
    cut: &CancellationToken,
    bytes: &AtomicU64,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let cut_error = || std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "outage");
    if latency.is_zero() {
        let mut buf = vec![0; CHUNK];
        loop {
            let n = from.read(&mut buf).await?;
            if cut.is_cancelled() {
                return Err(cut_error());
            }
            if n == 0 {
                return to.shutdown().await;
            }
            to.write_all(&buf[..n]).await?;
            Counters::add(bytes, n as u64);
        }
    }
    // A chunk, or the end of stream (`None`), and when to deliver it.
    let (tx, mut rx) = mpsc::channel::<(Instant, Option<Bytes>)>(CHUNKS_IN_FLIGHT);
    let read = async move {
        let mut buf = vec![0; CHUNK];
        loop {
            let n = from.read(&mut buf).await?;
            let due = Instant::now() + latency;
            let chunk = (n > 0).then(|| Bytes::copy_from_slice(&buf[..n]));
            if tx.send((due, chunk)).await.is_err() || n == 0 {
                // Delivered the end of stream, or the writing side is gone (its error is the
                // one reported).
                return Ok::<_, std::io::Error>(());
            }
        }
    };
    let write = async move {
        while let Some((due, chunk)) = rx.recv().await {
            if due > Instant::now() {
                tokio::time::sleep_until(due).await;
            }
            if cut.is_cancelled() {
                return Err(cut_error());
            }
            match chunk {
                Some(chunk) => {
                    to.write_all(&chunk).await?;
                    Counters::add(bytes, chunk.len() as u64);
                }
                None => return to.shutdown().await,
            }
        }
        Ok(())
    };
    tokio::try_join!(read, write).map(|_| ())
}

/// An endpoint URL that is not an address to connect to (see [`parse_endpoint`]).
#[derive(Debug, thiserror::Error)]
#[error("invalid endpoint {url:?}: {reason}")]
pub struct InvalidEndpoint {
    /// The URL given.
    pub url: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl From<InvalidEndpoint> for std::io::Error {
    fn from(e: InvalidEndpoint) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, e)
    }
}

/// The socket address of an endpoint URL such as `http://127.0.0.1:4566`.
///
/// The scheme (`http://`, `https://`) is optional and gives the default port (80, 443); without
/// it the port is required. The host must be an IP address or `localhost` (127.0.0.1): names
/// are never resolved. A path after the authority is ignored.
///
/// ```
/// use local_aws::proxy::parse_endpoint;
///
/// assert_eq!(parse_endpoint("http://127.0.0.1:4566").unwrap(), "127.0.0.1:4566".parse().unwrap());
/// assert_eq!(parse_endpoint("http://localhost:5000/").unwrap(), "127.0.0.1:5000".parse().unwrap());
/// assert_eq!(parse_endpoint("http://[::1]").unwrap(), "[::1]:80".parse().unwrap());
/// assert_eq!(parse_endpoint("127.0.0.1:4566").unwrap().port(), 4566);
/// assert!(parse_endpoint("http://moto.example:4566").is_err());
/// assert!(parse_endpoint("ftp://127.0.0.1:21").is_err());
/// ```
pub fn parse_endpoint(url: &str) -> Result<SocketAddr, InvalidEndpoint> {
    let invalid = |reason| InvalidEndpoint {
        url: url.to_owned(),
        reason,
    };
    let trimmed = url.trim();
    let (rest, default_port) = match trimmed.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => (rest, Some(80)),
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("https") => (rest, Some(443)),
        Some(_) => return Err(invalid("the scheme must be http or https")),
        None => (trimmed, None),
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err(invalid("user information is not supported"));
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6
            .split_once(']')
            .ok_or_else(|| invalid("unclosed [ in the host"))?;
        match after {
            "" => (host, None),
            _ => (
                host,
                Some(
                    after
                        .strip_prefix(':')
                        .ok_or_else(|| invalid("expected :PORT after the IPv6 address"))?,
                ),
            ),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(port) => port
            .parse()
            .map_err(|_| invalid("the port is not a number"))?,
        None => default_port.ok_or_else(|| invalid("no port (and no scheme to default it)"))?,
    };
    let ip: IpAddr = if host.eq_ignore_ascii_case("localhost") {
        Ipv4Addr::LOCALHOST.into()
    } else {
        host.parse()
            .map_err(|_| invalid("the host must be an IP address or localhost"))?
    };
    Ok(SocketAddr::new(ip, port))
}
