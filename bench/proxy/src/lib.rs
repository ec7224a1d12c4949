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
//! (`cargo run -p latency-proxy --bin proxy -- --upstream http://127.0.0.1:4566 --latency-ms 5`)
//! runs one from the command line.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use std::time::{Duration, Instant};
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//! use latency_proxy::{Proxy, ProxyOptions};
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

mod endpoint;
mod forward;
mod state;

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use endpoint::{InvalidEndpoint, parse_endpoint};
use state::{Availability, Counters, Shared};
pub use state::{ProxyOptions, ProxyStats};

/// A running proxy. Dropping it stops it (connections are cut);
/// [`shutdown`](Self::shutdown) also waits until every connection is closed.
///
/// ```no_run
/// # async fn f() -> std::io::Result<()> {
/// use latency_proxy::{Proxy, ProxyOptions, parse_endpoint};
///
/// let endpoint = std::env::var("AWS_ENDPOINT_URL").expect("AWS_ENDPOINT_URL");
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
    /// use latency_proxy::{Proxy, ProxyOptions};
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
    /// use latency_proxy::{Proxy, ProxyOptions};
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
        let task = tokio::spawn(forward::accept(listener, Arc::clone(&shared)));
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
    /// `local_aws::sdk_config_for`).
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
    /// use latency_proxy::{Proxy, ProxyOptions};
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
    /// use latency_proxy::{Proxy, ProxyOptions, ProxyStats};
    ///
    /// let proxy = Proxy::start("127.0.0.1:4566".parse().unwrap(), ProxyOptions::default()).await.unwrap();
    /// assert_eq!(proxy.stats(), ProxyStats::default());
    /// # });
    /// ```
    pub fn stats(&self) -> ProxyStats {
        self.shared.counters.snapshot()
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

/// A number of milliseconds (fractions allowed, as `2.5`) as a duration: the proxy's
/// `--latency-ms`.
///
/// ```
/// use std::time::Duration;
/// use latency_proxy::parse_millis;
///
/// assert_eq!(parse_millis("2.5").unwrap(), Duration::from_micros(2500));
/// assert_eq!(parse_millis("0").unwrap(), Duration::ZERO);
/// assert!(parse_millis("-1").is_err());
/// assert!(parse_millis("fast").is_err());
/// assert!(parse_millis("inf").is_err());
/// ```
pub fn parse_millis(text: &str) -> Result<Duration, String> {
    let ms: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of milliseconds"))?;
    Duration::try_from_secs_f64(ms / 1000.0)
        .map_err(|_| format!("{text:?} is not a duration: it must be finite and not negative"))
}
