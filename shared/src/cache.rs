//! A warm-container cache of completed keys, as a layer over a backend: a duplicate seen again
//! by the same execution environment is answered without a request to the store.
//!
//! [`CachedBackend`] wraps any [`Backend`] (tower-style: a backend that wraps a backend), and
//! the engine above it does not know it is there. A write or a read of a key its [`LocalCache`]
//! holds as completed is answered from the cache, as the store would answer it (the completed
//! record: [`Put::Exists`], [`Commit::Exists`], [`Failure::Exists`], or the record read), with
//! no request; every other call goes to the backend it wraps, and each completed record it sees
//! go by is kept: a completion it applied, a commit (an inline write included), a record that
//! refused a write, a read.
//!
//! A Lambda execution environment handles invocation after invocation, and a redelivered message
//! often comes back to the one that processed it. [`LocalCache`] keeps the last completed keys of
//! this process (their payload hash and stored result) in a bounded LRU, each for at most its
//! time to live and never past the record's own expiry. AWS Lambda Powertools calls this
//! `use_local_cache`.
//!
//! **Off by default**, because an entry can be stale: a record deleted in the store
//! ([`Idempotency::forget`](crate::Idempotency::forget) in another process, an operator's
//! delete) still counts as completed here until the entry's time to live ends. Turn it on with
//! [`Idempotency::with_local_cache`](crate::Idempotency::with_local_cache) (which wraps the
//! engine's backend in a [`CachedBackend`]), or for a [`Consumer`](crate::consumer::Consumer)
//! with `IDEMPOTENCY_LOCAL_CACHE` (how many keys; see
//! [`ConsumerConfig`](crate::consumer::ConsumerConfig)) or
//! [`ConsumerBuilder::with_local_cache`](crate::consumer::ConsumerBuilder::with_local_cache),
//! where a completed record is never taken back while it lives, as in a consumer whose records
//! only expire.
//!
//! ```
//! use lambda_idempotency::cache::LocalCache;
//! use std::num::NonZeroUsize;
//! use std::time::Duration;
//!
//! let cache = LocalCache::new(NonZeroUsize::new(2).unwrap(), Duration::from_secs(60));
//! cache.insert("a", "hash-a", None, 1_000, i64::MAX);
//! cache.insert("b", "hash-b", Some("42".into()), 1_000, i64::MAX);
//! cache.insert("c", "hash-c", None, 1_000, i64::MAX); // "a" was the least recently used
//! assert!(cache.get("a", 1_000).is_none());
//! assert_eq!(cache.get("b", 1_000).unwrap().result(), Some("42"));
//! assert!(cache.get("b", 61_001).is_none(), "past its time to live");
//! assert_eq!(cache.len(), 1);
//! ```

use std::future::Future;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lru::LruCache;

use crate::state::{IdempotencyRecord, Put, Status, Update, Updated};
use crate::store::{Backend, Commit, Failure, LimitError, StoreError, TransactionalBackend};

/// A completed key, as the cache keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cached {
    payload_hash: String,
    result: Option<String>,
    until_ms: i64,
}

impl Cached {
    /// The payload hash the key was completed with.
    pub fn payload_hash(&self) -> &str {
        &self.payload_hash
    }

    /// The stored result (JSON), if one was stored.
    pub fn result(&self) -> Option<&str> {
        self.result.as_deref()
    }

    /// When the entry stops counting, epoch milliseconds.
    pub fn until_ms(&self) -> i64 {
        self.until_ms
    }
}

/// Counts the lookups a [`LocalCache`] answered. Clones share their count.
///
/// A cache's own counter ([`LocalCache::hits`]) counts every invocation's hits; one
/// [scoped](Self::scope) around an invocation counts its own alone, as
/// [`RequestCounter::scope`](crate::count::RequestCounter::scope) counts its requests.
#[derive(Debug, Clone, Default)]
pub struct HitCounter {
    hits: Arc<AtomicU64>,
}

tokio::task_local! {
    /// The counter of the work this task runs ([`HitCounter::scope`]).
    static SCOPE: HitCounter;
}

impl HitCounter {
    /// Hits counted so far.
    pub fn count(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// Counts one hit, here and in the [`scope`](Self::scope) it happens within, if any.
    fn add(&self) {
        self.hits.fetch_add(1, Ordering::Relaxed);
        let _outside_any_scope = SCOPE.try_with(|scope| {
            if !Arc::ptr_eq(&scope.hits, &self.hits) {
                scope.hits.fetch_add(1, Ordering::Relaxed);
            }
        });
    }

    /// Runs `work` (an invocation, say) with this counter as its own: every lookup any cache
    /// answers within it is counted here too, and none that other work running at the same time
    /// in the process made (Lambda Managed Instances run several invocations at once). A task
    /// `work` spawns is outside it.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use lambda_idempotency::cache::{HitCounter, LocalCache};
    /// use std::num::NonZeroUsize;
    /// use std::time::Duration;
    ///
    /// let cache = LocalCache::new(NonZeroUsize::new(10).unwrap(), Duration::from_secs(60));
    /// cache.insert("k", "hash", None, 0, i64::MAX);
    /// // Two invocations at once: their lookups interleave.
    /// let lookups = |n| {
    ///     let cache = cache.clone();
    ///     async move {
    ///         for _ in 0..n {
    ///             assert!(cache.get("k", 1).is_some());
    ///             tokio::task::yield_now().await;
    ///         }
    ///     }
    /// };
    /// let (a, b) = (HitCounter::default(), HitCounter::default());
    /// futures_util::join!(a.scope(lookups(2)), b.scope(lookups(3)));
    /// assert_eq!((a.count(), b.count(), cache.hits()), (2, 3, 5));
    /// # });
    /// ```
    pub async fn scope<F: Future>(&self, work: F) -> F::Output {
        SCOPE.scope(self.clone(), work).await
    }
}

/// A bounded in-process LRU of completed keys with a time to live; clones share it.
#[derive(Debug, Clone)]
pub struct LocalCache {
    entries: Arc<Mutex<LruCache<String, Cached>>>,
    ttl_ms: i64,
    hits: HitCounter,
}

impl LocalCache {
    /// A cache of at most `capacity` keys, each kept at most `ttl` (and never past its record's
    /// expiry).
    pub fn new(capacity: NonZeroUsize, ttl: Duration) -> Self {
        Self {
            entries: Arc::new(Mutex::new(LruCache::new(capacity))),
            ttl_ms: i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX),
            hits: HitCounter::default(),
        }
    }

    /// Keeps `key` as completed with `payload_hash` and `result`, from `now_ms` for the time to
    /// live, but not past `expires_at_ms` (the record's expiry).
    pub fn insert(
        &self,
        key: &str,
        payload_hash: &str,
        result: Option<String>,
        now_ms: i64,
        expires_at_ms: i64,
    ) {
        let until_ms = now_ms.saturating_add(self.ttl_ms).min(expires_at_ms);
        if until_ms <= now_ms {
            return;
        }
        self.lock().put(
            key.to_owned(),
            Cached {
                payload_hash: payload_hash.to_owned(),
                result,
                until_ms,
            },
        );
    }

    /// The entry of `key` at `now_ms`, if it is there and still counts (an entry past its time
    /// is dropped).
    pub fn get(&self, key: &str, now_ms: i64) -> Option<Cached> {
        let mut entries = self.lock();
        match entries.get(key) {
            Some(entry) if entry.until_ms > now_ms => {
                self.hits.add();
                Some(entry.clone())
            }
            Some(_) => {
                entries.pop(key);
                None
            }
            None => None,
        }
    }

    /// Drops the entry of `key`.
    pub fn remove(&self, key: &str) {
        self.lock().pop(key);
    }

    /// Entries held (some may be past their time until they are next looked up).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most entries held.
    pub fn capacity(&self) -> usize {
        self.lock().cap().get()
    }

    /// Lookups answered from the cache so far, by every invocation of the process (one
    /// invocation's alone: [`HitCounter::scope`]).
    pub fn hits(&self) -> u64 {
        self.hits.count()
    }

    fn lock(&self) -> MutexGuard<'_, LruCache<String, Cached>> {
        // Every change is one call on the LRU: a panic cannot leave it half changed.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A backend with a [`LocalCache`] of its completed keys in front of it; see the
/// [module](self).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use lambda_idempotency::cache::{CachedBackend, LocalCache};
/// use lambda_idempotency::{Idempotency, Outcome, store::InMemoryBackend};
/// use std::num::NonZeroUsize;
/// use std::time::Duration;
///
/// let cache = LocalCache::new(NonZeroUsize::new(1000).unwrap(), Duration::from_secs(300));
/// let backend = CachedBackend::new(InMemoryBackend::default(), cache.clone());
/// let engine = Idempotency::new(backend);
/// let work = || async { Ok::<_, std::io::Error>(7) };
/// assert_eq!(engine.run("k", b"body", None, work).await.unwrap(), Outcome::Ran(7));
/// assert_eq!(engine.run("k", b"body", None, work).await.unwrap(), Outcome::Duplicate(Some(7)));
/// assert_eq!(cache.hits(), 1, "the duplicate was answered from the cache");
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct CachedBackend<B> {
    inner: B,
    cache: LocalCache,
    /// This layer's part of every entry's key (clones share it): layers over different stores
    /// never answer for each other from one cache.
    scope: u64,
}

impl<B: Backend> CachedBackend<B> {
    /// `inner`, with `cache` in front of it.
    pub fn new(inner: B, cache: LocalCache) -> Self {
        static SCOPES: AtomicU64 = AtomicU64::new(0);
        Self {
            inner,
            cache,
            scope: SCOPES.fetch_add(1, Ordering::Relaxed),
        }
    }
}

impl<B> CachedBackend<B> {
    /// The backend it wraps.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// The cache.
    pub fn cache(&self) -> &LocalCache {
        &self.cache
    }

    /// The cache's key for the record stored under `key`: this layer's scope and the full
    /// stored key.
    fn entry_key(&self, key: &str) -> String {
        format!("{}\n{key}", self.scope)
    }

    /// The completed record of `key` the cache holds, live at `now_ms`: what the store would
    /// answer for it, with no request.
    fn cached(&self, key: &str, now_ms: i64) -> Option<IdempotencyRecord> {
        let hit = self.cache.get(&self.entry_key(key), now_ms)?;
        Some(IdempotencyRecord {
            key: key.to_owned(),
            status: Status::Completed,
            // Never past the entry's own end (itself never past the record's expiry).
            expires_at: hit.until_ms.div_euclid(1000),
            lease_until_ms: None,
            owner: None,
            payload_hash: hit.payload_hash,
            attempts: 0,
            last_error: None,
            result: hit.result,
            result_omitted: false,
        })
    }

    /// Keeps `record` when it is completed, live, and carries its result.
    fn remember(&self, record: &IdempotencyRecord, now_ms: i64) {
        if record.status == Status::Completed
            && !record.result_omitted
            && !record.is_expired(now_ms)
        {
            self.cache.insert(
                &self.entry_key(&record.key),
                &record.payload_hash,
                record.result.clone(),
                now_ms,
                record.expires_at.saturating_mul(1000),
            );
        }
    }

    /// Keeps what a commit wrote, or the record it found.
    fn remember_commit(&self, record: &IdempotencyRecord, commit: &Commit, now_ms: i64) {
        match commit {
            Commit::Committed => self.remember(record, now_ms),
            Commit::Exists(existing) => self.remember(existing, now_ms),
            _ => {}
        }
    }
}

impl<B: Backend> Backend for CachedBackend<B> {
    async fn put(&self, record: &IdempotencyRecord, now_ms: i64) -> Result<Put, StoreError> {
        if let Some(completed) = self.cached(&record.key, now_ms) {
            return Ok(Put::Exists(completed));
        }
        let put = self.inner.put(record, now_ms).await?;
        if let Put::Exists(existing) = &put {
            self.remember(existing, now_ms);
        }
        Ok(put)
    }

    async fn get(&self, key: &str, now_ms: i64) -> Result<Option<IdempotencyRecord>, StoreError> {
        if let Some(completed) = self.cached(key, now_ms) {
            return Ok(Some(completed));
        }
        let record = self.inner.get(key, now_ms).await?;
        if let Some(record) = &record {
            self.remember(record, now_ms);
        }
        Ok(record)
    }

    async fn update(&self, key: &str, update: &Update, now_ms: i64) -> Result<Updated, StoreError> {
        let updated = self.inner.update(key, update, now_ms).await?;
        if let (
            Updated::Applied { .. },
            Update::Complete {
                payload_hash,
                expires_at,
                result,
                result_omitted: false,
                ..
            },
        ) = (updated, update)
        {
            // A result too large to store is not cached either: the cache answers as the store
            // would.
            self.cache.insert(
                &self.entry_key(key),
                payload_hash,
                result.clone(),
                now_ms,
                expires_at.saturating_mul(1000),
            );
        }
        Ok(updated)
    }

    fn max_result_bytes(&self, key: &str) -> Option<usize> {
        self.inner.max_result_bytes(key)
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.cache.remove(&self.entry_key(key));
        self.inner.delete(key).await
    }
}

impl<B: TransactionalBackend> TransactionalBackend for CachedBackend<B> {
    type Write = B::Write;

    fn check(
        &self,
        record: &IdempotencyRecord,
        writes: &[B::Write],
        carrier: Option<usize>,
    ) -> Result<(), LimitError> {
        self.inner.check(record, writes, carrier)
    }

    async fn commit(
        &self,
        record: &IdempotencyRecord,
        writes: &[B::Write],
        token: &str,
        now_ms: i64,
    ) -> Result<Commit, StoreError> {
        if let Some(completed) = self.cached(&record.key, now_ms) {
            return Ok(Commit::Exists(completed));
        }
        let commit = self.inner.commit(record, writes, token, now_ms).await?;
        self.remember_commit(record, &commit, now_ms);
        Ok(commit)
    }

    async fn commit_carried(
        &self,
        record: &IdempotencyRecord,
        writes: &[B::Write],
        carrier: usize,
        token: &str,
        now_ms: i64,
    ) -> Result<Commit, StoreError> {
        if let Some(completed) = self.cached(&record.key, now_ms) {
            return Ok(Commit::Exists(completed));
        }
        let commit = self
            .inner
            .commit_carried(record, writes, carrier, token, now_ms)
            .await?;
        self.remember_commit(record, &commit, now_ms);
        Ok(commit)
    }

    async fn record_failure(
        &self,
        record: &IdempotencyRecord,
        now_ms: i64,
    ) -> Result<Failure, StoreError> {
        if let Some(completed) = self.cached(&record.key, now_ms) {
            return Ok(Failure::Exists(completed));
        }
        let failure = self.inner.record_failure(record, now_ms).await?;
        if let Failure::Exists(existing) = &failure {
            self.remember(existing, now_ms);
        }
        Ok(failure)
    }

    fn new_item_problem(&self, write: &B::Write) -> Option<String> {
        self.inner.new_item_problem(write)
    }

    async fn record_on_item(
        &self,
        key: &str,
        at: &B::Write,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.inner.record_on_item(key, at).await
    }
}
