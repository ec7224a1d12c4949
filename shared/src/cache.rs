//! A warm-container cache of completed keys, as a layer over a backend: a duplicate seen again
//! by the same execution environment is answered without a request to the store.
//!
//! [`CachedBackend`] wraps any [`Backend`] (tower-style: a backend that wraps a backend). It
//! answers [`Backend::completed_locally`] from a [`LocalCache`], which the engine asks before it
//! acquires or commits a key, and delegates every call to the backend it wraps, keeping in the
//! cache each completed record it sees go by: a completion it applied, a commit or an inline
//! write, a record that refused a write, a read.
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
//! engine's backend in a [`CachedBackend`]) where a completed record is never taken back while
//! it lives, as in a consumer whose records only expire.
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
//! assert_eq!(cache.get("b", 1_000).unwrap().result.as_deref(), Some("42"));
//! assert!(cache.get("b", 61_001).is_none(), "past its time to live");
//! assert_eq!(cache.len(), 1);
//! ```

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lru::LruCache;

use crate::state::{IdempotencyRecord, Put, Status, Update, Updated};
use crate::store::{
    Backend, Commit, Failure, InlineBackend, LimitError, StoreError, TransactionalBackend,
};
use crate::time::{Clock, SystemClock};

/// A completed key, as the cache keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cached {
    /// The payload hash the key was completed with.
    pub payload_hash: String,
    /// The stored result (JSON), if one was stored.
    pub result: Option<String>,
    /// When the entry stops counting, epoch milliseconds.
    pub until_ms: i64,
}

/// A bounded in-process LRU of completed keys with a time to live; clones share it.
#[derive(Debug, Clone)]
pub struct LocalCache {
    entries: Arc<Mutex<LruCache<String, Cached>>>,
    ttl_ms: i64,
    hits: Arc<AtomicU64>,
}

impl LocalCache {
    /// A cache of at most `capacity` keys, each kept at most `ttl` (and never past its record's
    /// expiry).
    pub fn new(capacity: NonZeroUsize, ttl: Duration) -> Self {
        Self {
            entries: Arc::new(Mutex::new(LruCache::new(capacity))),
            ttl_ms: i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX),
            hits: Arc::default(),
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
                self.hits.fetch_add(1, Ordering::Relaxed);
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

    /// Lookups answered from the cache so far.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
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
    /// The inner backend's identity: part of every entry's key, so that backends over different
    /// stores never answer for each other from one cache.
    scope: String,
    /// What `get` and `update`, which are not told the time, read it from.
    clock: Arc<dyn Clock>,
}

impl<B: Backend> CachedBackend<B> {
    /// `inner`, with `cache` in front of it.
    pub fn new(inner: B, cache: LocalCache) -> Self {
        let scope = inner.identity();
        Self {
            inner,
            cache,
            scope,
            clock: Arc::new(SystemClock),
        }
    }

    /// Reads the time from `clock` (the engine's: [`Idempotency::with_local_cache`] passes it).
    ///
    /// [`Idempotency::with_local_cache`]: crate::Idempotency::with_local_cache
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
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

    /// The cache's key for the record stored under `key`: the backend's identity and the full
    /// stored key.
    fn entry_key(&self, key: &str) -> String {
        format!("{}\n{key}", self.scope)
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
        let put = self.inner.put(record, now_ms).await?;
        if let Put::Exists(existing) = &put {
            self.remember(existing, now_ms);
        }
        Ok(put)
    }

    async fn get(&self, key: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        let record = self.inner.get(key).await?;
        if let Some(record) = &record {
            self.remember(record, self.clock.now_ms());
        }
        Ok(record)
    }

    async fn update(&self, key: &str, update: &Update) -> Result<Updated, StoreError> {
        let updated = self.inner.update(key, update).await?;
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
            let now_ms = self.clock.now_ms();
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

    fn completed_locally(&self, key: &str, now_ms: i64) -> Option<IdempotencyRecord> {
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

    fn use_clock(&mut self, clock: &Arc<dyn Clock>) {
        self.clock = clock.clone();
        self.inner.use_clock(clock);
    }

    fn identity(&self) -> String {
        self.scope.clone()
    }
}

impl<B: TransactionalBackend> TransactionalBackend for CachedBackend<B> {
    type Write = B::Write;

    fn check(&self, record: &IdempotencyRecord, writes: &[B::Write]) -> Result<(), LimitError> {
        self.inner.check(record, writes)
    }

    async fn commit(
        &self,
        record: &IdempotencyRecord,
        writes: &[B::Write],
        token: &str,
        now_ms: i64,
    ) -> Result<Commit, StoreError> {
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
        let failure = self.inner.record_failure(record, now_ms).await?;
        if let Failure::Exists(existing) = &failure {
            self.remember(existing, now_ms);
        }
        Ok(failure)
    }
}

impl<B: InlineBackend> InlineBackend for CachedBackend<B> {
    type Item = B::Item;

    fn check_item(&self, record: &IdempotencyRecord, item: &B::Item) -> Result<(), LimitError> {
        self.inner.check_item(record, item)
    }

    async fn put_inline(
        &self,
        record: &IdempotencyRecord,
        item: &B::Item,
        now_ms: i64,
    ) -> Result<Commit, StoreError> {
        let commit = self.inner.put_inline(record, item, now_ms).await?;
        // Under the idempotency key (`record.key`): a duplicate is answered before its handler
        // builds the item.
        match &commit {
            Commit::Committed => self.remember(record, now_ms),
            Commit::Exists(existing) => self.remember(existing, now_ms),
            _ => {}
        }
        Ok(commit)
    }
}
