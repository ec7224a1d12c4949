//! Time, once: the [`Clock`] every check reads, and the invocation's [`Deadline`].
//!
//! The library reads the time in one place, a [`Clock`]: the engine's expiry and leases, the
//! processor's start, stop and finish margins, the cancellation of a handler at
//! [`RecordContext::stop_at`](crate::batch::RecordContext::stop_at), the bounded retries of a
//! completion or a commit, and the visibility backoff's calls. A test gives the engine and the
//! processor one [`ManualClock`] and moves every one of those checks with it.
//!
//! A [`Deadline`] is an instant in epoch milliseconds, as Lambda gives it, carried unchanged from
//! the context ([`Deadline::of`]) to the lease that ends at it. The instants derived from it are
//! named for what they are for: `deadline` (Lambda stops the invocation), `stop_at` (the
//! handler's own work is cancelled), `finish_by` (a record's bookkeeping must be done).
//!
//! ```
//! use lambda_idempotency::time::{Clock, Deadline, ManualClock};
//! use lambda_runtime::Context;
//! use std::time::Duration;
//!
//! let mut context = Context::default();
//! assert_eq!(Deadline::of(&context), None, "a default context carries no deadline");
//! context.deadline = 600_000; // what `cargo lambda watch` sends: no deadline either
//! assert_eq!(Deadline::of(&context), None);
//! context.deadline = 1_795_461_947_250;
//! let deadline = Deadline::of(&context).unwrap();
//!
//! let clock = ManualClock::new(1_795_461_937_250);
//! assert_eq!(deadline.remaining(&clock), Duration::from_secs(10));
//! let stop_at = deadline.earlier_by(Duration::from_secs(2));
//! clock.advance(Duration::from_secs(8));
//! assert!(stop_at.has_passed(&clock) && !deadline.has_passed(&clock));
//! ```

use std::future::Future;
use std::pin::Pin;
#[cfg(any(test, doc, feature = "test-util"))]
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lambda_runtime::Context;

/// A source of the current time, so that expiry, leases and deadlines can be tested without
/// waiting.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;

    /// Waits until the clock reads `at_ms` (at once when it does already): the processor's
    /// waits between a stream record's retries. By default tokio's timer sleeps the difference;
    /// a [`ManualClock`] jumps to `at_ms` at once, as a simulation's time does.
    fn sleep_until(&self, at_ms: i64) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        let wait = u64::try_from(at_ms.saturating_sub(self.now_ms())).unwrap_or(0);
        Box::pin(tokio::time::sleep(Duration::from_millis(wait)))
    }
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        system_time_ms(SystemTime::now())
    }
}

/// Milliseconds since the Unix epoch of `time` (negative before it).
pub(crate) fn system_time_ms(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

/// Milliseconds of `duration`, saturating.
pub(crate) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// A clock that only moves when told to: for tests of expiry, leases and deadlines.
///
/// ```
/// use lambda_idempotency::time::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new(1_000);
/// clock.advance(Duration::from_secs(2));
/// assert_eq!(clock.now_ms(), 3_000);
/// ```
#[cfg(any(test, doc, feature = "test-util"))]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
#[derive(Debug)]
pub struct ManualClock(AtomicI64);

#[cfg(any(test, doc, feature = "test-util"))]
impl ManualClock {
    /// A clock standing at `now_ms`.
    pub fn new(now_ms: i64) -> Self {
        Self(AtomicI64::new(now_ms))
    }

    /// A clock standing at the current system time.
    pub fn starting_now() -> Self {
        Self::new(SystemClock.now_ms())
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(millis(by), Ordering::SeqCst);
    }

    /// Sets the clock.
    pub fn set(&self, now_ms: i64) {
        self.0.store(now_ms, Ordering::SeqCst);
    }
}

#[cfg(any(test, doc, feature = "test-util"))]
impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }

    /// Moves the clock to `at_ms` (never back), then yields once to the other tasks.
    fn sleep_until(&self, at_ms: i64) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        self.0.fetch_max(at_ms, Ordering::SeqCst);
        Box::pin(tokio::task::yield_now())
    }
}

/// The smallest value read as a deadline: 2001-09-09 in epoch milliseconds.
///
/// Lambda's runtime API gives the deadline as epoch milliseconds (`Lambda-Runtime-Deadline-Ms`).
/// A context without one carries `0` (`Context::default()`, in tests), and `cargo lambda watch`
/// sends a fixed `600000` (ten minutes after 1970). Neither is a deadline: taken as one, every
/// record would count as too late to start. So a value below this is no deadline, and the batch
/// runs as with none (no start, stop or finish margins; leases of the default length).
pub(crate) const MIN_EPOCH_MS: u64 = 1_000_000_000_000;

/// An instant, in epoch milliseconds: the invocation's deadline, or one derived from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Deadline(i64);

impl Deadline {
    /// The invocation's deadline, or `None` when the context carries none: a value below 10^12
    /// ms (2001-09-09), as `Context::default()` (0) and `cargo lambda watch` (a fixed 600000)
    /// give, is no deadline, and the batch runs as with none (no start, stop or finish margins;
    /// leases of the default length).
    pub fn of(context: &Context) -> Option<Self> {
        (context.deadline >= MIN_EPOCH_MS)
            .then(|| Self(i64::try_from(context.deadline).unwrap_or(i64::MAX)))
    }

    /// The instant `epoch_ms` milliseconds after the Unix epoch.
    pub const fn at_epoch_ms(epoch_ms: i64) -> Self {
        Self(epoch_ms)
    }

    /// Milliseconds since the Unix epoch.
    pub const fn epoch_ms(self) -> i64 {
        self.0
    }

    /// The instant `margin` earlier.
    pub fn earlier_by(self, margin: Duration) -> Self {
        Self(self.0.saturating_sub(millis(margin)))
    }

    /// Time left until this instant by `clock` (zero once it has passed).
    pub fn remaining(self, clock: &dyn Clock) -> Duration {
        Duration::from_millis(u64::try_from(self.0 - clock.now_ms()).unwrap_or(0))
    }

    /// True once `clock` has reached this instant.
    pub fn has_passed(self, clock: &dyn Clock) -> bool {
        clock.now_ms() >= self.0
    }

    /// How much later than `earlier` this instant is (zero when it is not later).
    pub fn since(self, earlier: Deadline) -> Duration {
        Duration::from_millis(u64::try_from(self.0 - earlier.0).unwrap_or(0))
    }

    /// The instant as a [`SystemTime`].
    pub fn system_time(self) -> SystemTime {
        match u64::try_from(self.0) {
            Ok(ms) => UNIX_EPOCH + Duration::from_millis(ms),
            Err(_) => UNIX_EPOCH - Duration::from_millis(self.0.unsigned_abs()),
        }
    }
}

impl From<SystemTime> for Deadline {
    fn from(time: SystemTime) -> Self {
        Self(system_time_ms(time))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_round_trips_through_system_time() {
        let d = Deadline::at_epoch_ms(1_795_461_947_250);
        assert_eq!(Deadline::from(d.system_time()), d);
        let before = Deadline::at_epoch_ms(-5);
        assert_eq!(Deadline::from(before.system_time()), before);
    }

    #[test]
    fn remaining_is_never_negative() {
        let clock = ManualClock::new(10_000);
        assert_eq!(
            Deadline::at_epoch_ms(9_000).remaining(&clock),
            Duration::ZERO
        );
        assert!(Deadline::at_epoch_ms(10_000).has_passed(&clock));
        assert_eq!(
            Deadline::at_epoch_ms(12_000).since(Deadline::at_epoch_ms(10_500)),
            Duration::from_millis(1_500)
        );
    }
}
