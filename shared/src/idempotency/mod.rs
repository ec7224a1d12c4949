//! The idempotency engine, [`Idempotency`]: keys, expiry, leases and payload hashes, once, above
//! any [`Backend`], in its three modes.
//!
//! - **Lease mode** ([`Idempotency::run`], or [`acquire`](Idempotency::acquire) then
//!   [`complete`](Idempotency::complete) or [`fail`](Idempotency::fail)): an in-progress record
//!   with a lease that ends at the invocation's [`Deadline`], the work, then the record
//!   completed with its result.
//! - **Transactional mode** ([`Idempotency::transact`], over a
//!   [`TransactionalBackend`](crate::store::TransactionalBackend)): the work returns its writes,
//!   and they commit with the record, written completed at once (see [`crate::transaction`]; the
//!   engine's side is in `transact.rs`).
//! - **Inline mode** ([`Idempotency::put_inline`], over the same backends): the work returns one
//!   new item, and the record rides on it, in one conditional write: a transactional commit of
//!   one write that [carries](crate::transaction::Transaction::carry_record) the record (see
//!   [`crate::inline`]).
//!
//! What each write does to a record is the [state machine](crate::state)'s; the engine builds
//! the records, asks the backend, and reads its answers ([`crate::lease`]).

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use serde::Serialize;
use serde::de::DeserializeOwned;

mod transact;
mod unrecorded;

pub use unrecorded::MAX_UNRECORDED;
use unrecorded::UnrecordedCompletions;

use crate::cache::{CachedBackend, LocalCache};
use crate::error::panic_message;
use crate::key::stored_key;
use crate::lease::{AcquireError, Acquired, Lease, Outcome, RunError};
use crate::payload::PayloadHash;
use crate::state::{IdempotencyRecord, Status, classify, new_owner_token};
use crate::store::{Backend, Put, StoreError, Update, Updated};
use crate::time::{Clock, Deadline, SystemClock, millis};

pub use crate::store::MAX_ITEM_BYTES;

/// Default time a completed record blocks duplicates: 18 days, SQS's default retention of a
/// source queue (4 days) plus the longest retention of its dead-letter queue (14 days). A record
/// must outlive every copy of its message, or a copy redriven from the dead-letter queue runs
/// again (see [`redrive_policy`](crate::redrive_policy) for the cold-start check).
pub const DEFAULT_EXPIRY: Duration = Duration::from_secs(18 * 24 * 60 * 60);

/// The environment variable Lambda sets to the function's name: the default key prefix.
pub(crate) const FUNCTION_NAME_VARIABLE: &str = "AWS_LAMBDA_FUNCTION_NAME";

/// Default lease when the caller knows no deadline: 60 seconds.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);

/// Tries of [`Idempotency::complete_with_retries`].
pub const COMPLETE_ATTEMPTS: u32 = 4;

/// The idempotency engine over a [`Backend`].
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use lambda_idempotency::{Idempotency, Outcome, store::InMemoryBackend};
/// use std::time::Duration;
///
/// let store = Idempotency::new(InMemoryBackend::default())
///     .with_key_prefix("charges")
///     .with_expiry(Duration::from_secs(3600));
///
/// let charge = || async { Ok::<_, std::io::Error>(42_u64) };
/// let first = store.run("payment-1", b"{\"amount\":42}", None, charge).await.unwrap();
/// // The same JSON written otherwise is the same payload.
/// let again = store.run("payment-1", b"{ \"amount\": 42 }", None, charge).await.unwrap();
/// assert_eq!(first, Outcome::Ran(42));
/// assert_eq!(again, Outcome::Duplicate(Some(42)));
/// # });
/// ```
#[derive(Clone)]
pub struct Idempotency<B> {
    backend: B,
    expiry: Duration,
    default_lease: Duration,
    key_prefix: Option<String>,
    clock: Arc<dyn Clock>,
    /// Completions the store refused after the work ran, shared by the engine's clones.
    unrecorded: UnrecordedCompletions,
}

impl<B: fmt::Debug> fmt::Debug for Idempotency<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Idempotency")
            .field("backend", &self.backend)
            .field("expiry", &self.expiry)
            .field("default_lease", &self.default_lease)
            .field("key_prefix", &self.key_prefix)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Idempotency<B> {
    /// An engine over `backend`: expiry [`DEFAULT_EXPIRY`] (18 days), default lease 60 s, and
    /// keys prefixed with the function's name (`AWS_LAMBDA_FUNCTION_NAME`, which Lambda sets), as
    /// Powertools does, so that two functions sharing a table never answer for each other. Outside
    /// Lambda (the variable unset) there is no prefix. [`with_key_prefix`](Self::with_key_prefix)
    /// sets another, [`without_key_prefix`](Self::without_key_prefix) none.
    pub fn new(backend: B) -> Self {
        let key_prefix = std::env::var(FUNCTION_NAME_VARIABLE)
            .ok()
            .filter(|name| match crate::key::validate_prefix(name) {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!(error = %e, "{FUNCTION_NAME_VARIABLE} cannot be the key prefix; keys are not prefixed");
                    false
                }
            });
        Self {
            backend,
            expiry: DEFAULT_EXPIRY,
            default_lease: DEFAULT_LEASE,
            key_prefix,
            clock: Arc::new(SystemClock),
            unrecorded: UnrecordedCompletions::default(),
        }
    }

    /// Answers duplicates of keys completed in this process from `cache`, without a request:
    /// the backend, wrapped in a [`CachedBackend`]. See [`crate::cache`] for when an entry can be
    /// stale, and an example. Off by default.
    pub fn with_local_cache(self, cache: LocalCache) -> Idempotency<CachedBackend<B>> {
        let backend = CachedBackend::new(self.backend, cache);
        Idempotency {
            backend,
            expiry: self.expiry,
            default_lease: self.default_lease,
            key_prefix: self.key_prefix,
            clock: self.clock,
            unrecorded: self.unrecorded,
        }
    }

    /// Stores keys as they are, without the default prefix (the function's name): for a table
    /// shared on purpose by functions that must see each other's keys, or records written
    /// without a prefix before. See [`with_key_prefix`](Self::with_key_prefix) on what changing
    /// a prefix does to existing records.
    pub fn without_key_prefix(mut self) -> Self {
        self.key_prefix = None;
        self
    }

    /// The key prefix, if any.
    pub fn key_prefix(&self) -> Option<&str> {
        self.key_prefix.as_deref()
    }

    /// How long a completed record blocks duplicates.
    pub fn expiry(&self) -> Duration {
        self.expiry
    }

    /// How long a completed record blocks duplicates (and the TTL of every record).
    pub fn with_expiry(mut self, expiry: Duration) -> Self {
        self.expiry = expiry;
        self
    }

    /// The lease used when the caller gives no deadline (a Lambda invocation always has one).
    /// Zero is raised to one second: a lease is never zero.
    pub fn with_default_lease(mut self, lease: Duration) -> Self {
        self.default_lease = lease.max(Duration::from_secs(1));
        self
    }

    /// Prefixes every key (`prefix#key`), so that one table serves several functions.
    ///
    /// A prefix is part of every stored key: changing it (or the function's name, the default)
    /// makes the records stored under the old one invisible, so a message delivered again within
    /// its record's expiry runs again. Set the prefix explicitly where a function may be renamed.
    ///
    /// # Panics
    ///
    /// If `prefix` is invalid (empty, containing `#`, or longer than
    /// [`MAX_PREFIX_BYTES`](crate::key::MAX_PREFIX_BYTES)): see
    /// [`validate_prefix`](crate::key::validate_prefix). The message is the
    /// [`PrefixError`](crate::key::PrefixError)'s. For a prefix that comes from configuration, use
    /// [`try_with_key_prefix`](Self::try_with_key_prefix).
    pub fn with_key_prefix(self, prefix: impl Into<String>) -> Self {
        self.try_with_key_prefix(prefix)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Prefixes every key (`prefix#key`), or says why `prefix` cannot be a prefix.
    ///
    /// ```
    /// use lambda_idempotency::{Idempotency, key::PrefixError, store::InMemoryBackend};
    ///
    /// assert!(matches!(
    ///     Idempotency::new(InMemoryBackend::default()).try_with_key_prefix("a#b"),
    ///     Err(PrefixError::ContainsSeparator { .. })
    /// ));
    /// let engine = Idempotency::new(InMemoryBackend::default())
    ///     .try_with_key_prefix("payments")
    ///     .unwrap();
    /// assert_eq!(engine.stored_key("p-1"), "payments#p-1");
    /// ```
    pub fn try_with_key_prefix(
        mut self,
        prefix: impl Into<String>,
    ) -> Result<Self, crate::key::PrefixError> {
        let prefix = prefix.into();
        crate::key::validate_prefix(&prefix)?;
        self.key_prefix = Some(prefix);
        Ok(self)
    }

    /// Uses another clock (for tests of expiry and leases).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The key as stored: prefixed, and hashed when longer than DynamoDB allows.
    pub fn stored_key(&self, key: &str) -> String {
        stored_key(self.key_prefix.as_deref(), key)
    }

    /// Tries to take `key` for work on `payload`, until `deadline` (the Lambda deadline; without
    /// one, the default lease). One conditional write; a duplicate costs no further request.
    /// The payload's identity is [`PayloadHash::of_bytes`]: canonical JSON for a JSON body.
    pub async fn acquire(
        &self,
        key: &str,
        payload: &[u8],
        deadline: Option<Deadline>,
    ) -> Result<Acquired, AcquireError> {
        self.acquire_hashed(key, &PayloadHash::of_bytes(payload), deadline)
            .await
    }

    /// [`acquire`](Self::acquire) with a payload hash computed by the caller
    /// (see [`KeyConfig::payload_hash`](crate::key::KeyConfig::payload_hash)).
    pub async fn acquire_hashed(
        &self,
        key: &str,
        payload_hash: &PayloadHash,
        deadline: Option<Deadline>,
    ) -> Result<Acquired, AcquireError> {
        let stored = self.stored_key(key);
        if let Some(done) = self.complete_remembered(&stored, payload_hash).await {
            return Ok(done);
        }
        let now_ms = self.clock.now_ms();
        let lease_until_ms = self.lease_end(now_ms, deadline);
        let owner = new_owner_token();
        let record = IdempotencyRecord {
            key: stored,
            status: Status::InProgress,
            // An in-progress record never expires before its lease ends.
            expires_at: self
                .expires_at(now_ms)
                .max(lease_until_ms.div_euclid(1000) + 1),
            lease_until_ms: Some(lease_until_ms),
            owner: Some(owner.clone()),
            payload_hash: payload_hash.as_str().to_owned(),
            attempts: 0,
            last_error: None,
            result: None,
            result_omitted: false,
        };
        let started = |attempts| {
            Ok(Acquired::Started(Lease::new(
                key,
                &record.key,
                lease_until_ms,
                &owner,
                attempts,
                payload_hash,
            )))
        };
        match self.backend.put(&record, now_ms).await? {
            Put::Written { attempts, replaced } => {
                if let Some(replaced) = replaced {
                    tracing::info!(
                        key,
                        replaced_payload_hash = replaced,
                        payload_hash = payload_hash.as_str(),
                        "a record of another payload that had failed was replaced; its attempts start again"
                    );
                }
                started(attempts)
            }
            // This attempt's own record: an earlier try of this write was applied and its answer
            // lost (an SDK retry found it).
            Put::Exists(existing)
                if existing.status == Status::InProgress && existing.owner == record.owner =>
            {
                started(existing.attempts)
            }
            Put::Exists(existing) => {
                Acquired::blocked(key, classify(existing, payload_hash, now_ms))
            }
        }
    }

    /// Marks the work done, storing `result` (JSON) when given. A result too large for the
    /// backend's item limit (with every other attribute at its largest) is not stored: the record
    /// says so and a warning is logged, and the call still succeeds.
    ///
    /// Fenced: [`Updated::NotApplied`] when the record no longer carries this lease (another
    /// attempt took it over after the lease ended); nothing is changed then.
    pub async fn complete(
        &self,
        lease: &Lease,
        result: Option<&str>,
    ) -> Result<Updated, StoreError> {
        let now_ms = self.clock.now_ms();
        let mut result = result.map(str::to_owned);
        let mut result_omitted = false;
        let max = self.backend.max_result_bytes(lease.stored_key());
        if let (Some(r), Some(max)) = (&result, max)
            && r.len() > max
        {
            tracing::warn!(
                key = lease.key(),
                result_bytes = r.len(),
                max_bytes = max,
                "result too large for the idempotency record: not stored; \
                 duplicates will be skipped without it"
            );
            result = None;
            result_omitted = true;
        }
        let update = Update::Complete {
            owner: lease.owner().to_owned(),
            payload_hash: lease.payload_hash().as_str().to_owned(),
            expires_at: self.expires_at(now_ms),
            result,
            result_omitted,
        };
        self.backend
            .update(lease.stored_key(), &update, self.clock.now_ms())
            .await
    }

    /// [`complete`](Self::complete), retried with backoff (50 ms doubling, at most
    /// [`COMPLETE_ATTEMPTS`] tries) while the store fails and `finish_by` (if given) leaves time
    /// for another try. The last error is returned when every try failed.
    pub async fn complete_with_retries(
        &self,
        lease: &Lease,
        result: Option<&str>,
        finish_by: Option<Deadline>,
    ) -> Result<Updated, StoreError> {
        let mut delay = Duration::from_millis(50);
        let mut tries = 1;
        loop {
            match self.complete(lease, result).await {
                Ok(updated) => return Ok(updated),
                Err(e) => {
                    if tries >= COMPLETE_ATTEMPTS || !self.room_for(finish_by, delay) {
                        return Err(e);
                    }
                    tracing::warn!(key = lease.key(), error = %e, tries, "completion failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                    tries += 1;
                }
            }
        }
    }

    /// Marks the attempt failed: one more failed attempt, the error stored (truncated). The next
    /// delivery may acquire the key again. [`Updated::Applied`] carries the record's failed
    /// attempts after this one (the backend returns them in the same request).
    ///
    /// Fenced like [`complete`](Self::complete).
    pub async fn fail(&self, lease: &Lease, error: &str) -> Result<Updated, StoreError> {
        self.fail_counted(lease, error, true).await
    }

    /// Marks the attempt failed without counting an attempt (its failed attempts stay as they
    /// were), the error stored (truncated): a failure that is not the message's fault (a
    /// [`TransientError`](crate::error::TransientError)). Fenced like [`fail`](Self::fail).
    pub async fn fail_not_counted(
        &self,
        lease: &Lease,
        error: &str,
    ) -> Result<Updated, StoreError> {
        self.fail_counted(lease, error, false).await
    }

    async fn fail_counted(
        &self,
        lease: &Lease,
        error: &str,
        counted: bool,
    ) -> Result<Updated, StoreError> {
        let update = Update::Fail {
            owner: lease.owner().to_owned(),
            error: error.to_owned(),
            counted,
        };
        self.backend
            .update(lease.stored_key(), &update, self.clock.now_ms())
            .await
    }

    /// Sets the failed attempts of `key`'s record back to 0, when it is failed: its message went
    /// to the dead-letter queue, and a redrive starts a new attempt budget.
    pub async fn reset_attempts(&self, key: &str) -> Result<Updated, StoreError> {
        self.backend
            .update(
                &self.stored_key(key),
                &Update::ResetAttempts,
                self.clock.now_ms(),
            )
            .await
    }

    /// Reads the record of `key` (expired or not). With a [local cache](crate::cache), a key it
    /// holds as completed is answered from it: the completed record as the cache keeps it (its
    /// payload hash, result and expiry).
    pub async fn get(&self, key: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.backend
            .get(&self.stored_key(key), self.clock.now_ms())
            .await
    }

    /// Deletes the record of `key` in the engine's table (and its entry in the
    /// [local cache](crate::cache), when the engine has one), so that the next attempt of the
    /// lease or the transactional mode runs the work again. One request (`DeleteItem`).
    ///
    /// A record that lives on an item (the [inline mode](crate::inline), or
    /// [carried](crate::transaction::Transaction::carry_record) by a write) is not in that table:
    /// `forget` deletes only what the table holds for the key (a failed record, if any), and the
    /// item and its record stay. The next attempt is answered by the item as before (a duplicate
    /// of the same payload, a mismatch of another), and is never run again by `forget`: to run
    /// such work again, delete the item, or (for an updated item) remove its record's attributes
    /// ([`DynamoDbBackend::inline_attributes`](crate::store::DynamoDbBackend::inline_attributes)).
    pub async fn forget(&self, key: &str) -> Result<(), StoreError> {
        self.backend.delete(&self.stored_key(key)).await
    }

    /// Runs `work` at most once per `key` (in effect): acquires the key, runs `work`, stores its
    /// result (JSON) and returns it; a duplicate gets the stored result without running `work`.
    ///
    /// A failure is recorded and returned, and the key may be acquired again. A panic in `work` is
    /// recorded as a failure and then resumed. When `work` succeeded but its completion could not
    /// be recorded (after retries until `deadline`), the result is
    /// [`Outcome::RanNotRecorded`], never an error that would invite running it again.
    pub async fn run<T, E, F, Fut>(
        &self,
        key: &str,
        payload: &[u8],
        deadline: Option<Deadline>,
        work: F,
    ) -> Result<Outcome<T>, RunError<E>>
    where
        T: Serialize + DeserializeOwned,
        E: fmt::Display,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let lease = match self.acquire(key, payload, deadline).await? {
            Acquired::Started(lease) => lease,
            Acquired::Duplicate { result, .. } => {
                let value = result
                    .map(|r| serde_json::from_str(&r))
                    .transpose()
                    .map_err(|source| RunError::StoredResult {
                        key: key.to_owned(),
                        source,
                    })?;
                return Ok(Outcome::Duplicate(value));
            }
            Acquired::InProgress { lease_until_ms } => {
                return Err(RunError::InProgress { lease_until_ms });
            }
        };
        match AssertUnwindSafe(work()).catch_unwind().await {
            Ok(Ok(value)) => {
                let json = serde_json::to_string(&value).ok().filter(|j| j != "null");
                match self
                    .complete_with_retries(&lease, json.as_deref(), deadline)
                    .await
                {
                    Ok(Updated::Applied { .. }) => Ok(Outcome::Ran(value)),
                    Ok(Updated::NotApplied) => {
                        tracing::warn!(
                            key,
                            "ran, but another attempt took the key over after this one's lease \
                             ended: its record was left as it is"
                        );
                        Ok(Outcome::RanNotRecorded(value))
                    }
                    Err(e) => {
                        tracing::error!(key, error = %e, "ran, but the completion could not be recorded");
                        self.remember_unrecorded(&lease, json.as_deref());
                        Ok(Outcome::RanNotRecorded(value))
                    }
                }
            }
            Ok(Err(e)) => {
                if let Err(store) = self.fail(&lease, &e.to_string()).await {
                    tracing::warn!(key, error = %store, "could not record the failure");
                }
                Err(RunError::Failed(e))
            }
            Err(panic) => {
                let message = panic_message(&panic);
                if let Err(store) = self.fail(&lease, &format!("panicked: {message}")).await {
                    tracing::warn!(key, error = %store, "could not record the panic");
                }
                std::panic::resume_unwind(panic)
            }
        }
    }

    /// Remembers, in this process, a completion the store refused after `lease`'s work ran:
    /// the next acquire of its key writes it first and answers a duplicate for the same payload
    /// (see `unrecorded.rs`).
    pub(crate) fn remember_unrecorded(&self, lease: &Lease, result: Option<&str>) {
        self.unrecorded.remember(lease, result);
    }

    /// How many completions the store refused after the work ran this engine (and its clones)
    /// remembers: each is written on the next acquire of its key, whose duplicates are answered
    /// from here until then. At most [`MAX_UNRECORDED`].
    pub fn unrecorded_completions(&self) -> usize {
        self.unrecorded.len()
    }

    /// Writes the completion remembered for `stored`, if any, before the key is acquired again.
    /// For the same payload the answer is a duplicate with its result (the work ran in this
    /// process), even when the store refuses the write again; `None` goes on to acquire the key
    /// (no completion remembered, another payload, or another attempt took the key over).
    async fn complete_remembered(
        &self,
        stored: &str,
        payload_hash: &PayloadHash,
    ) -> Option<Acquired> {
        let pending = self.unrecorded.get(stored)?;
        let key = pending.lease.key();
        match self
            .complete(&pending.lease, pending.result.as_deref())
            .await
        {
            Ok(Updated::Applied { .. }) => {
                self.unrecorded.forget(stored);
                tracing::info!(key, "completion the store refused earlier is recorded now");
            }
            Ok(Updated::NotApplied) => {
                self.unrecorded.forget(stored);
                tracing::warn!(
                    key,
                    "completion the store refused earlier not recorded: another attempt took \
                     the key over after the lease ended"
                );
                return None;
            }
            Err(e) => {
                tracing::warn!(key, error = %e, "the store still refuses a completion; the work ran in this process");
            }
        }
        (pending.lease.payload_hash() == payload_hash).then(|| Acquired::Duplicate {
            result: pending.result.clone(),
            result_omitted: false,
        })
    }

    pub(crate) fn expires_at(&self, now_ms: i64) -> i64 {
        now_ms.div_euclid(1000) + i64::try_from(self.expiry.as_secs()).unwrap_or(i64::MAX / 2)
    }

    fn lease_end(&self, now_ms: i64, deadline: Option<Deadline>) -> i64 {
        match deadline {
            Some(deadline) if deadline.epoch_ms() > now_ms => deadline.epoch_ms(),
            _ => now_ms + millis(self.default_lease),
        }
    }

    /// True when `finish_by` (if any) leaves time for a pause of `delay` and another try.
    fn room_for(&self, finish_by: Option<Deadline>, delay: Duration) -> bool {
        finish_by.is_none_or(|f| f.epoch_ms() - self.clock.now_ms() > 2 * millis(delay))
    }
}
