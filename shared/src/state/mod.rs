//! The idempotency record's state machine, once: its states, the rules that decide whether a new
//! attempt may take a key over, and each transition as a pure function.
//!
//! Every backend stores the same [`IdempotencyRecord`] and applies the same transitions, each in
//! one atomic step: the in-memory backend calls the functions below under a lock; the DynamoDB
//! backend states them as condition expressions and the Redis one as Lua scripts, each citing the
//! function it mirrors. The [table of transitions](table::TRANSITIONS) lists what every
//! transition does from every state; the unit tests check these functions against it, and the
//! backend suite checks every backend against it.
//!
//! ```text
//!            acquire                complete (own lease)
//!   (none) ----------> IN_PROGRESS ---------------------> COMPLETED --- expires ---> (replaceable)
//!      ^                 |   ^  lease ends: replaceable      ^
//!      |      fail (own) v   |  acquire                      | commit (transactional mode:
//!      +------------- FAILED +-------------------------------+  written completed at once)
//! ```
//!
//! - [`acquire`]: write an in-progress record unless one that is not
//!   [replaceable](IdempotencyRecord::is_replaceable) holds the key; keep its failed attempts
//!   when [`carries_attempts_to`](IdempotencyRecord::carries_attempts_to).
//! - [`update`]: complete, fail or reset attempts, fenced by the attempt's owner token
//!   ([`Update`]); an update already applied by an earlier try answers as applied
//!   ([`shows_applied`](IdempotencyRecord::shows_applied)).
//! - [`commit`] and [`record_failure`]: the transactional mode's two writes ([`Step`]).
//! - [`commit_on_item`]: a write that carries its record on an item it writes whole (the inline
//!   mode, a carried `Put`): an item that carries a record is never rewritten.
//! - [`classify`]: what a record that refused a write means for the caller ([`Blocked`]);
//!   [`classify_on_item`] for a record found on an item, whatever its expiry.

#[cfg(any(test, doc, feature = "test-util"))]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod table;

use crate::payload::PayloadHash;
use crate::redact::truncate;
use crate::time::{Clock, SystemClock};

/// The state of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// An attempt holds the key until [`IdempotencyRecord::lease_until_ms`].
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

/// One key's record, as every backend stores it. (An SQS *record* is the message a batch
/// carries; this is the store's record of its idempotency key.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyRecord {
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

impl IdempotencyRecord {
    /// True when a new attempt may take this key over at `now_ms`, whatever its payload: no lease
    /// holds it ([`is_held`](Self::is_held)), and it has expired or is not completed.
    ///
    /// The payload check protects only what holds an effect or a running handler: a completed
    /// record (until it expires) and an in-progress one (while its lease lasts). A failed record,
    /// or one whose lease ended, never blocks another payload under its key: a corrected message
    /// after a malformed one runs. Whether the failed attempts carry over is
    /// [`carries_attempts_to`](Self::carries_attempts_to).
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
    pub fn shows_applied(&self, update: &Update) -> bool {
        let (owner, status) = match update {
            Update::Complete { owner, .. } => (owner, Status::Completed),
            Update::Fail { owner, .. } => (owner, Status::Failed),
            Update::ResetAttempts => return false,
        };
        self.status == status && self.owner.as_deref() == Some(owner.as_str())
    }

    /// True when this stored record is the failure of the attempt whose token is `owner`,
    /// recorded already: an earlier try of the same [`record_failure`] whose answer was lost (an
    /// SDK retry), which must not be counted twice.
    pub fn shows_failure_of(&self, owner: Option<&str>) -> bool {
        self.status == Status::Failed && owner.is_some() && self.owner.as_deref() == owner
    }

    /// True while an in-progress attempt's lease holds the record at `now_ms`: until
    /// [`lease_until_ms`](Self::lease_until_ms), or, for a record without a lease, until it
    /// expires.
    pub fn is_held(&self, now_ms: i64) -> bool {
        self.status == Status::InProgress
            && match self.lease_until_ms {
                Some(lease) => lease >= now_ms,
                None => !self.is_expired(now_ms),
            }
    }

    /// True when the record is in progress and carries `owner`'s token: what a fenced update
    /// requires.
    pub fn is_owned_by(&self, owner: &str) -> bool {
        self.status == Status::InProgress && self.owner.as_deref() == Some(owner)
    }

    /// True when the record's expiry (epoch seconds) has passed at `now_ms`.
    pub fn is_expired(&self, now_ms: i64) -> bool {
        self.expires_at < now_ms.div_euclid(1000)
    }
}

/// What [`Backend::put`](crate::store::Backend::put) found: the answer of [`acquire`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Put {
    /// The record was written: the caller holds the key.
    Written {
        /// Failed attempts the record carries: kept from the record it replaced when that one
        /// carried the same payload and had not expired
        /// ([`IdempotencyRecord::carries_attempts_to`]), else 0.
        attempts: u32,
        /// The payload hash of a live record of another payload that this write replaced (a
        /// failed record, or one whose lease ended): a corrected message took over its key.
        replaced: Option<String>,
    },
    /// A record that is not replaceable holds the key; here it is, as stored.
    Exists(IdempotencyRecord),
}

/// A change to a stored record: the input of [`update`].
///
/// [`Update::Complete`] and [`Update::Fail`] are fenced: they apply only while the record is in
/// progress and carries the caller's `owner` token ([`IdempotencyRecord::is_owned_by`]), so an
/// attempt whose lease ended and was taken over by another cannot overwrite that one's record.
/// A backend answers [`Updated::Applied`] too when the stored record shows the update applied by
/// an earlier try of the same call ([`IdempotencyRecord::shows_applied`]: an SDK retry whose
/// first answer was lost).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Update {
    /// Marks the record completed, with a new expiry and the result, if one is stored.
    Complete {
        /// The token of the attempt that holds the record.
        owner: String,
        /// The payload hash the attempt acquired the key with (the record holds it already: a
        /// backend does not write it; a layer such as the [local cache](crate::cache) reads it).
        payload_hash: String,
        /// New expiry, epoch seconds.
        expires_at: i64,
        /// The result to store (JSON), if any.
        result: Option<String>,
        /// True when a result existed but was too large to store.
        result_omitted: bool,
    },
    /// Marks the record failed, adds one to its attempts when `counted` and stores the
    /// (truncated) error.
    Fail {
        /// The token of the attempt that holds the record.
        owner: String,
        /// The error message.
        error: String,
        /// True when the failure counts as an attempt; false for one that is not the record's
        /// fault ([`TransientError`](crate::error::TransientError)), which leaves the attempts as
        /// they are.
        counted: bool,
    },
    /// Sets a failed record's attempts back to 0 (its message went to the dead-letter queue, so
    /// a redrive starts a new budget); the last error stays. Applies only to a failed record.
    ResetAttempts,
}

/// What [`Backend::update`](crate::store::Backend::update) did: the answer of [`update`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Updated {
    /// The update applied.
    Applied {
        /// The record's failed attempts after the update, when the backend returns them (every
        /// backend does for [`Update::Fail`]).
        attempts: Option<u32>,
    },
    /// Nothing changed: the record is gone, or no longer in the state the update requires (for a
    /// fenced update: another attempt holds it now, or it is completed).
    NotApplied,
}

/// A transition's result: the record to store (`None`: the stored one stays as it is) and the
/// backend's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition<A> {
    /// The record to store, when the transition writes one.
    pub write: Option<IdempotencyRecord>,
    /// What the backend answers.
    pub answer: A,
}

/// Acquiring a key: `new` (an in-progress record) is written unless `stored` is not
/// [replaceable](IdempotencyRecord::is_replaceable) at `now_ms`. The written record keeps the
/// stored one's attempts and last error when it
/// [carries them](IdempotencyRecord::carries_attempts_to) (else both start again), and has no
/// result.
///
/// DynamoDB: the condition of `PutItem` in `store/dynamodb`; Redis: `acquire.lua`.
pub fn acquire(
    stored: Option<&IdempotencyRecord>,
    new: &IdempotencyRecord,
    now_ms: i64,
) -> Transition<Put> {
    let mut written = IdempotencyRecord {
        attempts: 0,
        last_error: None,
        result: None,
        result_omitted: false,
        ..new.clone()
    };
    let mut replaced = None;
    if let Some(old) = stored {
        if !old.is_replaceable(now_ms) {
            return Transition {
                write: None,
                answer: Put::Exists(old.clone()),
            };
        }
        if old.carries_attempts_to(&new.payload_hash, now_ms) {
            written.attempts = old.attempts;
            written.last_error = old.last_error.clone();
        } else if !old.is_expired(now_ms) {
            replaced = Some(old.payload_hash.clone());
        }
    }
    let attempts = written.attempts;
    Transition {
        write: Some(written),
        answer: Put::Written { attempts, replaced },
    }
}

/// Applying `update` to `stored`: a fenced completion or failure applies only to the record its
/// owner holds; a reset only to a failed record. An update that `stored` shows applied already
/// answers [`Updated::Applied`] and writes nothing.
///
/// DynamoDB: the conditions of `UpdateItem` in `store/dynamodb`; Redis: `fenced.lua`,
/// `complete.lua`, `fail.lua`, `reset_attempts.lua`.
pub fn update(stored: Option<&IdempotencyRecord>, update: &Update) -> Transition<Updated> {
    let unchanged = |answer| Transition {
        write: None,
        answer,
    };
    let Some(stored) = stored else {
        return unchanged(Updated::NotApplied);
    };
    if stored.shows_applied(update) {
        return unchanged(Updated::Applied {
            attempts: Some(stored.attempts),
        });
    }
    let mut record = stored.clone();
    match update {
        Update::Complete {
            owner,
            expires_at,
            result,
            result_omitted,
            ..
        } => {
            if !stored.is_owned_by(owner) {
                return unchanged(Updated::NotApplied);
            }
            record.status = Status::Completed;
            record.expires_at = *expires_at;
            record.result = result.clone();
            record.result_omitted = *result_omitted;
        }
        Update::Fail {
            owner,
            error,
            counted,
        } => {
            if !stored.is_owned_by(owner) {
                return unchanged(Updated::NotApplied);
            }
            record.status = Status::Failed;
            record.attempts += u32::from(*counted);
            record.last_error = Some(truncate_error(error));
        }
        Update::ResetAttempts => {
            if stored.status != Status::Failed {
                return unchanged(Updated::NotApplied);
            }
            record.attempts = 0;
        }
    }
    let attempts = Some(record.attempts);
    Transition {
        write: Some(record),
        answer: Updated::Applied { attempts },
    }
}

/// A write of the transactional mode, decided: the record to store, or the stored record that
/// holds the key (nothing is written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Store this record.
    Write(IdempotencyRecord),
    /// A record that is not replaceable holds the key: here it is.
    Held(IdempotencyRecord),
}

/// The transactional mode's commit: `completed` (with the handler's writes) is written unless
/// `stored` is not [replaceable](IdempotencyRecord::is_replaceable).
///
/// DynamoDB: the record's `Put` condition in `store/dynamodb/transact_write_items.rs`; for a
/// record carried by one of the writes (only completed records ride on items, so replaceable is
/// expired), `NO_LIVE_RECORD` in `store/dynamodb/carried.rs`.
pub fn commit(
    stored: Option<&IdempotencyRecord>,
    completed: &IdempotencyRecord,
    now_ms: i64,
) -> Step {
    match stored {
        Some(old) if !old.is_replaceable(now_ms) => Step::Held(old.clone()),
        _ => Step::Write(completed.clone()),
    }
}

/// A write whose record rides on one of the handler's items, where the item is written whole: the
/// inline mode's new item, and a record carried by a `Put`. `stored` is the record the item
/// carries, if any. The item is the work's effect and the user's data: a later delivery never
/// rewrites it, so any record on it holds the key, whatever its expiry (and its answer is
/// [`classify_on_item`]'s); `completed` is written only where the item carries none.
///
/// DynamoDB: `attribute_not_exists` of the item's key in `store/dynamodb/new_item.rs` (an item
/// without a record is refused too, as the handler's rejection), and of the record's status on
/// a carried `Put` in `store/dynamodb/carried.rs`. A record carried by an `Update` is the
/// transition [`commit`] instead: the update changes the item, it does not replace it.
pub fn commit_on_item(stored: Option<&IdempotencyRecord>, completed: &IdempotencyRecord) -> Step {
    match stored {
        Some(old) => Step::Held(old.clone()),
        None => Step::Write(completed.clone()),
    }
}

/// The transactional mode's failed attempt: `failed` is written as a failed record, with one
/// more attempt than `stored` when it [carries them](IdempotencyRecord::carries_attempts_to),
/// else 1, unless `stored` is not replaceable. Fenced by the attempt's owner token: when `stored`
/// is this very attempt's failure ([`IdempotencyRecord::shows_failure_of`]: an earlier try whose
/// answer was lost), it stays as it is and its count is the answer.
///
/// DynamoDB: the `UpdateItem` of `record_failure` in `store/dynamodb/transact_write_items.rs`.
pub fn record_failure(
    stored: Option<&IdempotencyRecord>,
    failed: &IdempotencyRecord,
    now_ms: i64,
) -> Step {
    let mut record = IdempotencyRecord {
        status: Status::Failed,
        lease_until_ms: None,
        last_error: failed.last_error.as_deref().map(truncate_error),
        attempts: 1,
        ..failed.clone()
    };
    if let Some(old) = stored {
        if old.shows_failure_of(failed.owner.as_deref()) {
            return Step::Write(old.clone());
        }
        if !old.is_replaceable(now_ms) {
            return Step::Held(old.clone());
        }
        if old.carries_attempts_to(&failed.payload_hash, now_ms) {
            record.attempts = old.attempts + 1;
        }
    }
    Step::Write(record)
}

/// What a record that holds a key means for an attempt that carries `payload_hash`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocked {
    /// The work was done already with this payload: a duplicate.
    Duplicate {
        /// The stored result (JSON), if one was stored.
        result: Option<String>,
        /// True when there was a result but it was too large to store.
        result_omitted: bool,
    },
    /// A record of another payload holds an effect (completed, not expired) or a running handler
    /// (in progress, its lease live): the key is reused for other work.
    Mismatch {
        /// The state of the record that holds the key.
        stored: Status,
    },
    /// An attempt holds the key (or held it between our clock reading and the write): retry
    /// after its lease ends.
    Held {
        /// When its lease ends, epoch milliseconds.
        lease_until_ms: i64,
    },
}

/// Interprets a record that refused a write: a completed record of this payload is a duplicate;
/// a record of another payload that holds an effect or a running handler is a mismatch; anything
/// else was replaced between our clock reading and the write, and is reported held, to be
/// retried.
pub fn classify(existing: IdempotencyRecord, payload_hash: &PayloadHash, now_ms: i64) -> Blocked {
    let live_completed = existing.status == Status::Completed && !existing.is_expired(now_ms);
    if (existing.is_held(now_ms) || live_completed) && !payload_hash.matches(&existing.payload_hash)
    {
        return Blocked::Mismatch {
            stored: existing.status,
        };
    }
    if live_completed {
        return Blocked::Duplicate {
            result: existing.result,
            result_omitted: existing.result_omitted,
        };
    }
    Blocked::Held {
        lease_until_ms: existing
            .lease_until_ms
            .unwrap_or(existing.expires_at.saturating_mul(1000)),
    }
}

/// Interprets a record found on one of the handler's items (inline, or carried by a write of a
/// transaction) for an attempt that carries `payload_hash`. The item is the work's effect and
/// stays whatever the record's expiry, so a completed record on it answers whatever its expiry:
/// the same payload is a duplicate (its stored result), another payload a mismatch. Anything
/// else (a record no engine writes on an item) is [`classify`]'s.
pub fn classify_on_item(
    existing: IdempotencyRecord,
    payload_hash: &PayloadHash,
    now_ms: i64,
) -> Blocked {
    if existing.status != Status::Completed {
        return classify(existing, payload_hash, now_ms);
    }
    if payload_hash.matches(&existing.payload_hash) {
        Blocked::Duplicate {
            result: existing.result,
            result_omitted: existing.result_omitted,
        }
    } else {
        Blocked::Mismatch {
            stored: existing.status,
        }
    }
}

/// A new random owner token (32 hex characters) for one attempt: see
/// [`IdempotencyRecord::owner`].
pub(crate) fn new_owner_token() -> String {
    use std::hash::{BuildHasher, Hasher};
    let random = || {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_i64(SystemClock.now_ms());
        hasher.finish()
    };
    format!("{:016x}{:016x}", random(), random())
}

/// Length of the tokens made by [`new_owner_token`].
pub(crate) const OWNER_TOKEN_LEN: usize = 32;

/// Truncates an error message to at most [`MAX_ERROR_LEN`] bytes, on a character boundary.
pub fn truncate_error(message: &str) -> String {
    truncate(message, MAX_ERROR_LEN)
}

#[cfg(test)]
mod tests;
