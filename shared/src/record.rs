//! The idempotency record: what the store keeps for each key, and the rules that decide
//! whether a new attempt may take the key over.
//!
//! Every backend stores the same [`Record`]; the rules live here once, in
//! [`Record::is_replaceable`] and [`Record::carries_attempts_to`], and each backend evaluates
//! them atomically (the DynamoDB backend as a condition expression, the Redis one in a Lua
//! script, the in-memory one under a lock).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The state of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// An attempt holds the key until [`Record::lease_until_ms`].
    InProgress,
    /// The work is done; a duplicate is skipped (and gets the stored result, if any).
    Completed,
    /// The last attempt failed; the next delivery may acquire the key again.
    Failed,
}

impl Status {
    /// The value stored in the status attribute.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::InProgress => "IN_PROGRESS",
            Status::Completed => "COMPLETED",
            Status::Failed => "FAILED",
        }
    }

    /// Parses a stored status value.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "IN_PROGRESS" => Some(Status::InProgress),
            "COMPLETED" => Some(Status::Completed),
            "FAILED" => Some(Status::Failed),
            _ => None,
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One key's record, as every backend stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The full key (prefix included, hashed when too long).
    pub key: String,
    /// Where the key stands.
    pub status: Status,
    /// When the record stops counting, in epoch **seconds** (the table's TTL attribute). An
    /// expired record is replaceable even while the TTL sweeper has not deleted it yet.
    pub expires_at: i64,
    /// When the in-progress attempt's lease ends, in epoch milliseconds: the Lambda deadline of
    /// the invocation that holds it. `None` for a record written without one (by another tool):
    /// such a lease lasts until the record expires.
    pub lease_until_ms: Option<i64>,
    /// The token of the attempt that wrote the record last. Completing or failing a record is
    /// conditional on it (fencing): an attempt whose lease was taken over changes nothing.
    pub owner: Option<String>,
    /// The hash of the payload of the attempt that wrote the record last, with its scheme
    /// ([`crate::payload`]).
    pub payload_hash: String,
    /// How many attempts have failed.
    pub attempts: u32,
    /// The last failure's message, truncated to [`MAX_ERROR_LEN`] bytes.
    pub last_error: Option<String>,
    /// The stored result (JSON) of a completed attempt, if one was stored.
    pub result: Option<String>,
    /// True when a result existed but was too large to store in the record.
    pub result_omitted: bool,
}

/// Longest stored error message, in bytes.
pub const MAX_ERROR_LEN: usize = 1024;

impl Record {
    /// True when a new attempt may take this key over at `now_ms`, whatever its payload: no lease
    /// holds it ([`Record::is_held`]), and it has expired or is not completed.
    ///
    /// The payload check protects only what holds an effect or a running handler: a completed
    /// record (until it expires) and an in-progress one (while its lease lasts). A failed record,
    /// or one whose lease ended, never blocks another payload under its key: a corrected message
    /// after a malformed one runs. Whether the failed attempts carry over is
    /// [`Record::carries_attempts_to`].
    pub fn is_replaceable(&self, now_ms: i64) -> bool {
        !self.is_held(now_ms) && (self.is_expired(now_ms) || self.status != Status::Completed)
    }

    /// True when a new attempt carrying `payload_hash` that replaces this record keeps its failed
    /// attempts and last error: the same payload (the same stored hash), not expired. A different
    /// payload, or an expired record, starts its attempts again.
    pub fn carries_attempts_to(&self, payload_hash: &str, now_ms: i64) -> bool {
        !self.is_expired(now_ms) && self.payload_hash == payload_hash
    }

    /// True when this stored record shows that `update`, sent by the attempt whose token the
    /// update carries, was applied already: an earlier try of the same request whose answer was
    /// lost (an SDK retry). A completion finds its own completed record; a failure its own failed
    /// record.
    pub fn shows_applied(&self, update: &crate::store::Update) -> bool {
        use crate::store::Update;
        let (owner, status) = match update {
            Update::Complete { owner, .. } => (owner, Status::Completed),
            Update::Fail { owner, .. } => (owner, Status::Failed),
            Update::ResetAttempts => return false,
        };
        self.status == status && self.owner.as_deref() == Some(owner.as_str())
    }

    /// True while an in-progress attempt's lease holds the record at `now_ms`: until
    /// [`lease_until_ms`](Record::lease_until_ms), or, for a record without a lease, until it
    /// expires.
    pub fn is_held(&self, now_ms: i64) -> bool {
        self.status == Status::InProgress
            && match self.lease_until_ms {
                Some(lease) => lease >= now_ms,
                None => !self.is_expired(now_ms),
            }
    }

    /// True when the record's expiry (epoch seconds) has passed at `now_ms`.
    pub fn is_expired(&self, now_ms: i64) -> bool {
        self.expires_at < now_ms.div_euclid(1000)
    }
}

/// A new random owner token (32 hex characters) for one attempt: see [`Record::owner`].
pub fn new_owner_token() -> String {
    use std::hash::{BuildHasher, Hasher};
    let random = || {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_i64(SystemClock.now_ms());
        hasher.finish()
    };
    format!("{:016x}{:016x}", random(), random())
}

/// Length of the tokens made by [`new_owner_token`].
pub const OWNER_TOKEN_LEN: usize = 32;

/// Truncates an error message to at most [`MAX_ERROR_LEN`] bytes, on a character boundary.
pub fn truncate_error(message: &str) -> String {
    truncate(message, MAX_ERROR_LEN)
}

/// `text` cut to at most `max` bytes on a character boundary, ending in `...` when cut.
pub fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max.saturating_sub(3);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// A source of the current time, so that expiry and leases can be tested without waiting.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
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
pub fn system_time_ms(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

/// A clock that only moves when told to: for tests of expiry and leases.
///
/// ```
/// use lambda_idempotency::record::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new(1_000);
/// clock.advance(Duration::from_secs(2));
/// assert_eq!(clock.now_ms(), 3_000);
/// ```
#[derive(Debug)]
pub struct ManualClock(std::sync::atomic::AtomicI64);

impl ManualClock {
    /// A clock standing at `now_ms`.
    pub fn new(now_ms: i64) -> Self {
        Self(std::sync::atomic::AtomicI64::new(now_ms))
    }

    /// A clock standing at the current system time.
    pub fn starting_now() -> Self {
        Self::new(SystemClock.now_ms())
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.0.fetch_add(ms, std::sync::atomic::Ordering::SeqCst);
    }

    /// Sets the clock.
    pub fn set(&self, now_ms: i64) {
        self.0.store(now_ms, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(status: Status) -> Record {
        Record {
            key: "k".into(),
            status,
            expires_at: 100,
            lease_until_ms: Some(50_000),
            owner: Some("t".into()),
            payload_hash: "h".into(),
            attempts: 0,
            last_error: None,
            result: None,
            result_omitted: false,
        }
    }

    #[test]
    fn completed_blocks_until_expiry() {
        let r = record(Status::Completed);
        assert!(!r.is_replaceable(99_999));
        assert!(!r.is_replaceable(100_999), "expiry is in whole seconds");
        assert!(r.is_replaceable(101_000));
    }

    #[test]
    fn in_progress_blocks_until_lease_end() {
        let r = record(Status::InProgress);
        assert!(!r.is_replaceable(50_000));
        assert!(r.is_replaceable(50_001));
    }

    #[test]
    fn a_failed_record_is_replaceable_by_any_payload_and_carries_attempts_to_its_own() {
        let r = record(Status::Failed);
        assert!(r.is_replaceable(0));
        assert!(r.carries_attempts_to("h", 0));
        assert!(
            !r.carries_attempts_to("other", 0),
            "a corrected payload starts again"
        );
        assert!(
            !r.carries_attempts_to("h", 101_000),
            "expired: starts again"
        );
    }

    #[test]
    fn in_progress_never_expires_before_its_lease_ends() {
        let mut r = record(Status::InProgress);
        r.lease_until_ms = Some(200_000);
        assert!(!r.is_replaceable(150_000), "expired, but leased");
        assert!(r.is_replaceable(200_001));
    }

    #[test]
    fn a_record_without_a_lease_is_held_until_it_expires() {
        let mut r = record(Status::InProgress);
        r.lease_until_ms = None;
        assert!(r.is_held(100_999));
        assert!(!r.is_replaceable(100_999));
        assert!(r.is_replaceable(101_000));
        r.status = Status::Failed;
        assert!(!r.is_held(0), "only an in-progress record is held");
        assert!(r.is_replaceable(0));
    }

    #[test]
    fn an_update_finds_its_own_earlier_try() {
        use crate::store::Update;
        let complete = Update::Complete {
            owner: "t".into(),
            expires_at: 1,
            result: None,
            result_omitted: false,
        };
        let fail = Update::Fail {
            owner: "t".into(),
            error: "e".into(),
        };
        assert!(record(Status::Completed).shows_applied(&complete));
        assert!(!record(Status::Failed).shows_applied(&complete));
        assert!(record(Status::Failed).shows_applied(&fail));
        let mut other = record(Status::Completed);
        other.owner = Some("someone else".into());
        assert!(!other.shows_applied(&complete));
        assert!(!record(Status::Failed).shows_applied(&Update::ResetAttempts));
    }

    #[test]
    fn truncates_on_char_boundary() {
        let long = "é".repeat(MAX_ERROR_LEN);
        let t = truncate_error(&long);
        assert!(t.len() <= MAX_ERROR_LEN);
        assert!(t.ends_with("..."));
        assert_eq!(truncate_error("short"), "short");
    }

    #[test]
    fn status_round_trips() {
        for s in [Status::InProgress, Status::Completed, Status::Failed] {
            assert_eq!(Status::parse(s.as_str()), Some(s));
        }
        assert_eq!(Status::parse("nope"), None);
    }
}
