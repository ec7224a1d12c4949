//! What the lease mode's engine answers: a [`Lease`] on a key ([`Acquired::Started`]), a
//! duplicate, another attempt's lease, or why the key could not be taken ([`AcquireError`]);
//! and what [`Idempotency::run`](crate::Idempotency::run) made of it ([`Outcome`], [`RunError`]).

use crate::payload::PayloadHash;
use crate::state::{Blocked, Status};
use crate::store::StoreError;

/// What [`Idempotency::acquire`](crate::Idempotency::acquire) found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    /// The caller holds the key until the lease ends: do the work, then
    /// [`complete`](crate::Idempotency::complete) or [`fail`](crate::Idempotency::fail).
    Started(Lease),
    /// The work was done already: skip it.
    Duplicate {
        /// The stored result (JSON), if one was stored.
        result: Option<String>,
        /// True when there was a result but it was too large to store.
        result_omitted: bool,
    },
    /// Another attempt holds the key; retry after its lease ends.
    InProgress {
        /// When the other attempt's lease ends, epoch milliseconds.
        lease_until_ms: i64,
    },
}

/// Why a key could not be acquired.
#[derive(Debug, thiserror::Error)]
pub enum AcquireError {
    /// A record of another payload holds the key: a different piece of work reuses it. This is
    /// an error, never a silent skip. Against a completed record it is final until the record
    /// expires; against a running attempt ([`Status::InProgress`]) it may pass once that attempt
    /// fails.
    #[error("idempotency key `{key}` was already used with a different payload")]
    PayloadMismatch {
        /// The key as the caller gave it.
        key: String,
        /// The state of the record that holds the key.
        stored: Status,
    },
    /// The store failed; the work must not be treated as done.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Proof that the caller holds a key: given by [`Acquired::Started`], taken by
/// [`Idempotency::complete`](crate::Idempotency::complete) and [`Idempotency::fail`](crate::Idempotency::fail), which apply only while the record still
/// carries this lease's owner token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    key: String,
    stored_key: String,
    lease_until_ms: i64,
    owner: String,
    attempts: u32,
    payload_hash: PayloadHash,
}

impl Lease {
    /// The key as the caller gave it.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The key as stored (prefixed, hashed when too long).
    pub fn stored_key(&self) -> &str {
        &self.stored_key
    }

    /// When the lease ends, epoch milliseconds.
    pub fn lease_until_ms(&self) -> i64 {
        self.lease_until_ms
    }

    /// The owner token this attempt wrote (see [`IdempotencyRecord::owner`](crate::state::IdempotencyRecord::owner)).
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// How many attempts at this key failed before this one: this is attempt `attempts() + 1`.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }
}

/// What [`Idempotency::run`](crate::Idempotency::run) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome<T> {
    /// The work ran now; its result is stored.
    Ran(T),
    /// The work had run before; this is the stored result (`None` when none was stored or it was
    /// too large to store).
    Duplicate(Option<T>),
    /// The work ran now, but marking its record completed failed, even after retries (the error is
    /// logged). Its effects happened: do not run it again. The engine remembers the completion:
    /// the next acquire of the key in this process writes it first and answers a duplicate (see
    /// [`Idempotency::unrecorded_completions`](crate::Idempotency::unrecorded_completions)). A
    /// duplicate that another process receives after the lease ends, before the store took the
    /// write, runs it again, as after a crash.
    RanNotRecorded(T),
}

/// Why [`Idempotency::run`](crate::Idempotency::run) did not give a result.
#[derive(Debug, thiserror::Error)]
pub enum RunError<E> {
    /// The work ran and failed; the failure is recorded and the key may be acquired again.
    #[error("{0}")]
    Failed(E),
    /// Another attempt holds the key.
    #[error("another attempt is in progress until {lease_until_ms} (epoch ms)")]
    InProgress {
        /// When the other attempt's lease ends, epoch milliseconds.
        lease_until_ms: i64,
    },
    /// A record of another payload holds the key ([`AcquireError::PayloadMismatch`]).
    #[error("idempotency key `{key}` was already used with a different payload")]
    PayloadMismatch {
        /// The key.
        key: String,
        /// The state of the record that holds the key.
        stored: Status,
    },
    /// The store failed.
    #[error(transparent)]
    Store(StoreError),
    /// The stored result could not be read back as the expected type.
    #[error("the stored result for key `{key}` is not a valid result: {source}")]
    StoredResult {
        /// The key.
        key: String,
        /// The parse error.
        source: serde_json::Error,
    },
}

impl<E> From<AcquireError> for RunError<E> {
    fn from(e: AcquireError) -> Self {
        match e {
            AcquireError::PayloadMismatch { key, stored } => {
                RunError::PayloadMismatch { key, stored }
            }
            AcquireError::Store(e) => RunError::Store(e),
        }
    }
}

impl Lease {
    /// A lease on `key` (stored as `stored_key`) until `lease_until_ms`, held by `owner`.
    pub(crate) fn new(
        key: &str,
        stored_key: &str,
        lease_until_ms: i64,
        owner: &str,
        attempts: u32,
        payload_hash: &PayloadHash,
    ) -> Self {
        Self {
            key: key.to_owned(),
            stored_key: stored_key.to_owned(),
            lease_until_ms,
            owner: owner.to_owned(),
            attempts,
            payload_hash: payload_hash.clone(),
        }
    }

    /// The payload hash the key was acquired with.
    pub fn payload_hash(&self) -> &PayloadHash {
        &self.payload_hash
    }
}

impl Acquired {
    /// What a record that refused a write means for an attempt on `key`: a duplicate, another
    /// attempt's lease, or a [`AcquireError::PayloadMismatch`].
    pub(crate) fn blocked(key: &str, blocked: Blocked) -> Result<Self, AcquireError> {
        match blocked {
            Blocked::Duplicate {
                result,
                result_omitted,
            } => Ok(Acquired::Duplicate {
                result,
                result_omitted,
            }),
            Blocked::Held { lease_until_ms } => Ok(Acquired::InProgress { lease_until_ms }),
            Blocked::Mismatch { stored } => Err(AcquireError::PayloadMismatch {
                key: key.to_owned(),
                stored,
            }),
        }
    }
}
