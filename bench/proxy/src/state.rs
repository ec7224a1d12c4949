//! What a proxy is set up with ([`ProxyOptions`]), what it shares with its connections
//! (availability, counters) and what it has counted ([`ProxyStats`]).

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How the proxy treats the traffic.
///
/// ```
/// use std::time::Duration;
/// use latency_proxy::ProxyOptions;
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

/// What a proxy has done so far (see [`Proxy::stats`](crate::Proxy::stats)).
///
/// ```
/// let stats = latency_proxy::ProxyStats::default();
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
    /// Open connections cut by [`Proxy::set_available(false)`](crate::Proxy::set_available).
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
pub(super) struct Counters {
    pub accepted: AtomicU64,
    pub refused: AtomicU64,
    pub cut: AtomicU64,
    pub open: AtomicU64,
    pub upstream_failures: AtomicU64,
    pub bytes_to_upstream: AtomicU64,
    pub bytes_to_client: AtomicU64,
}

impl Counters {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// The counts so far.
    pub fn snapshot(&self) -> ProxyStats {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        ProxyStats {
            accepted: get(&self.accepted),
            refused: get(&self.refused),
            cut: get(&self.cut),
            open: get(&self.open),
            upstream_failures: get(&self.upstream_failures),
            bytes_to_upstream: get(&self.bytes_to_upstream),
            bytes_to_client: get(&self.bytes_to_client),
        }
    }
}

/// Counts a connection as open until dropped.
pub(super) struct Open(pub Arc<Shared>);

impl Open {
    pub fn new(shared: &Arc<Shared>) -> Self {
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
pub(super) struct Availability {
    pub available: bool,
    pub epoch: CancellationToken,
}

pub(super) struct Shared {
    pub upstream: SocketAddr,
    pub options: ProxyOptions,
    pub counters: Counters,
    pub availability: Mutex<Availability>,
    pub shutdown: CancellationToken,
}

impl Shared {
    pub fn availability(&self) -> MutexGuard<'_, Availability> {
        // Nothing panics while holding the lock; recover anyway rather than cascade.
        self.availability
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
