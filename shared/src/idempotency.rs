//! The idempotency engine: expiry, leases, payload hashing and the record state machine, once,
//! above any [`Backend`].

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::FutureExt;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::cache::LocalCache;
use crate::key::stored_key;
use crate::outcome::panic_message;
use crate::payload::PayloadHash;
use crate::record::{Clock, Record, Status, SystemClock, new_owner_token, system_time_ms};
use crate::store::{Backend, Put, StoreError, Update, Updated};

pub use crate::store::MAX_ITEM_BYTES;

/// Default time a completed record blocks duplicates: 18 days, SQS's default retention of a
/// source queue (4 days) plus the longest retention of its dead-letter queue (14 days). A record
/// must outlive every copy of its message, or a copy redriven from the dead-letter queue runs
/// again (see [`redrive_policy`](crate::redrive_policy) for the cold-start check).
pub const DEFAULT_EXPIRY: Duration = Duration::from_secs(18 * 24 * 60 * 60);

/// The environment variable Lambda sets to the function's name: the default key prefix.
pub const FUNCTION_NAME_VARIABLE: &str = "AWS_LAMBDA_FUNCTION_NAME";

/// Default lease when the caller knows no deadline: 60 seconds.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);

/// Tries of [`Idempotency::complete_with_retries`].
pub const COMPLETE_ATTEMPTS: u32 = 4;

/// What [`Idempotency::acquire`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    /// The caller holds the key until the lease ends: do the work, then
    /// [`complete`](Idempotency::complete) or [`fail`](Idempotency::fail).
    Started(Lease),
    /// The work was done already: skip it.
    Completed {
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
/// [`Idempotency::complete`] and [`Idempotency::fail`], which apply only while the record still
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

    /// The owner token this attempt wrote (see [`Record::owner`]).
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// How many attempts at this key failed before this one: this is attempt `attempts() + 1`.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }
}

/// What [`Idempotency::run`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome<T> {
    /// The work ran now; its result is stored.
    Ran(T),
    /// The work had run before; this is the stored result (`None` when none was stored or it was
    /// too large to store).
    Replayed(Option<T>),
    /// The work ran now, but marking its record completed failed, even after retries (the error is
    /// logged). Its effects happened: do not run it again. A duplicate arriving after the lease
    /// ends would run it again, as after a crash.
    RanNotRecorded(T),
}

/// Why [`Idempotency::run`] did not give a result.
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
/// assert_eq!(again, Outcome::Replayed(Some(42)));
/// # });
/// ```
#[derive(Clone)]
pub struct Idempotency<B> {
    backend: B,
    expiry: Duration,
    default_lease: Duration,
    key_prefix: Option<String>,
    clock: Arc<dyn Clock>,
    pub(crate) cache: Option<LocalCache>,
    /// The backend's identity, as the cache keys its entries ([`Backend::identity`]).
    pub(crate) cache_scope: String,
}

impl<B: fmt::Debug> fmt::Debug for Idempotency<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Idempotency")
            .field("backend", &self.backend)
            .field("expiry", &self.expiry)
            .field("default_lease", &self.default_lease)
            .field("key_prefix", &self.key_prefix)
            .field("cache", &self.cache)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Idempotency<B> {
    /// An engine over `backend`: expiry [`DEFAULT_EXPIRY`] (18 days), default lease 60 s, and
    /// keys prefixed with the function's name ([`FUNCTION_NAME_VARIABLE`], which Lambda sets), as
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
        let cache_scope = backend.identity();
        Self {
            backend,
            expiry: DEFAULT_EXPIRY,
            default_lease: DEFAULT_LEASE,
            key_prefix,
            clock: Arc::new(SystemClock),
            cache: None,
            cache_scope,
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
        deadline: Option<SystemTime>,
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
        deadline: Option<SystemTime>,
    ) -> Result<Acquired, AcquireError> {
        let now_ms = self.clock.now_ms();
        let stored = self.stored_key(key);
        if let Some(cached) = self.cached(key, &stored, payload_hash, now_ms) {
            return cached;
        }
        let lease_until_ms = self.lease_end(now_ms, deadline);
        let owner = new_owner_token();
        let record = Record {
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
            Ok(Acquired::Started(Lease {
                key: key.to_owned(),
                stored_key: record.key.clone(),
                lease_until_ms,
                owner: owner.clone(),
                attempts,
                payload_hash: payload_hash.clone(),
            }))
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
                self.remember(&existing, now_ms);
                classify(key, existing, payload_hash, now_ms)
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
        let max = self.backend.max_result_bytes(&lease.stored_key);
        if let (Some(r), Some(max)) = (&result, max)
            && r.len() > max
        {
            tracing::warn!(
                key = lease.key,
                result_bytes = r.len(),
                max_bytes = max,
                "result too large for the idempotency record: not stored; \
                 duplicates will be skipped without it"
            );
            result = None;
            result_omitted = true;
        }
        let expires_at = self.expires_at(now_ms);
        let update = Update::Complete {
            owner: lease.owner.clone(),
            expires_at,
            result: result.clone(),
            result_omitted,
        };
        let updated = self.backend.update(&lease.stored_key, &update).await?;
        // A result too large to store is not cached either: the cache answers as the store would.
        if let (Updated::Applied { .. }, Some(cache), false) =
            (updated, &self.cache, result_omitted)
        {
            cache.insert(
                &self.cache_key(&lease.stored_key),
                lease.payload_hash.as_str(),
                result,
                now_ms,
                expires_at.saturating_mul(1000),
            );
        }
        Ok(updated)
    }

    /// [`complete`](Self::complete), retried with backoff (50 ms doubling, at most
    /// [`COMPLETE_ATTEMPTS`] tries) while the store fails and `until` (if given) leaves time for
    /// another try. The last error is returned when every try failed.
    pub async fn complete_with_retries(
        &self,
        lease: &Lease,
        result: Option<&str>,
        until: Option<SystemTime>,
    ) -> Result<Updated, StoreError> {
        let mut delay = Duration::from_millis(50);
        let mut tries = 1;
        loop {
            match self.complete(lease, result).await {
                Ok(updated) => return Ok(updated),
                Err(e) => {
                    let room = until.is_none_or(|until| {
                        system_time_ms(until) - self.clock.now_ms() > 2 * delay.as_millis() as i64
                    });
                    if tries >= COMPLETE_ATTEMPTS || !room {
                        return Err(e);
                    }
                    tracing::warn!(key = lease.key, error = %e, tries, "completion failed; retrying");
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
        let update = Update::Fail {
            owner: lease.owner.clone(),
            error: error.to_owned(),
        };
        self.backend.update(&lease.stored_key, &update).await
    }

    /// Sets the failed attempts of `key`'s record back to 0, when it is failed: its message went
    /// to the dead-letter queue, and a redrive starts a new attempt budget.
    pub async fn reset_attempts(&self, key: &str) -> Result<Updated, StoreError> {
        self.backend
            .update(&self.stored_key(key), &Update::ResetAttempts)
            .await
    }

    /// Reads the record of `key` (expired or not).
    pub async fn get(&self, key: &str) -> Result<Option<Record>, StoreError> {
        self.backend.get(&self.stored_key(key)).await
    }

    /// Deletes the record of `key`, so the next attempt runs the work again.
    pub async fn forget(&self, key: &str) -> Result<(), StoreError> {
        let stored = self.stored_key(key);
        if let Some(cache) = &self.cache {
            cache.remove(&self.cache_key(&stored));
        }
        self.backend.delete(&stored).await
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
        deadline: Option<SystemTime>,
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
            Acquired::Completed { result, .. } => {
                let value = result
                    .map(|r| serde_json::from_str(&r))
                    .transpose()
                    .map_err(|source| RunError::StoredResult {
                        key: key.to_owned(),
                        source,
                    })?;
                return Ok(Outcome::Replayed(value));
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

    pub(crate) fn expires_at(&self, now_ms: i64) -> i64 {
        now_ms.div_euclid(1000) + i64::try_from(self.expiry.as_secs()).unwrap_or(i64::MAX / 2)
    }

    fn lease_end(&self, now_ms: i64, deadline: Option<SystemTime>) -> i64 {
        match deadline.map(system_time_ms) {
            Some(deadline_ms) if deadline_ms > now_ms => deadline_ms,
            _ => now_ms + i64::try_from(self.default_lease.as_millis()).unwrap_or(60_000),
        }
    }
}

/// Interprets a record that blocked an acquire: a completed record of this payload is a
/// duplicate; a record of another payload that holds an effect (completed, not expired) or a
/// running handler (in progress, its lease live) is a mismatch; anything else was replaced
/// between our clock reading and the write, and is reported held, to be retried.
pub(crate) fn classify(
    key: &str,
    existing: Record,
    payload_hash: &PayloadHash,
    now_ms: i64,
) -> Result<Acquired, AcquireError> {
    let protected = existing.is_held(now_ms)
        || (existing.status == Status::Completed && !existing.is_expired(now_ms));
    if protected && !payload_hash.matches(&existing.payload_hash) {
        return Err(AcquireError::PayloadMismatch {
            key: key.to_owned(),
            stored: existing.status,
        });
    }
    Ok(match existing.status {
        Status::Completed if !existing.is_expired(now_ms) => Acquired::Completed {
            result: existing.result,
            result_omitted: existing.result_omitted,
        },
        _ => Acquired::InProgress {
            lease_until_ms: existing
                .lease_until_ms
                .unwrap_or(existing.expires_at.saturating_mul(1000)),
        },
    })
}
