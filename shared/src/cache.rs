//! A warm-container cache of completed keys: a duplicate seen again by the same execution
//! environment is answered without a request to the store.
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
//! [`Idempotency::with_local_cache`](crate::Idempotency::with_local_cache) where a completed
//! record is never taken back while it lives, as in a consumer whose records only expire.
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

use crate::idempotency::{AcquireError, Acquired, Idempotency};
use crate::payload::PayloadHash;
use crate::record::{Record, Status};

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

/// The engine's use of the cache.
impl<B> Idempotency<B> {
    /// Answers duplicates of keys completed in this process from `cache`, without a request (see
    /// [`crate::cache`] for when an entry can be stale). Entries never outlive their record's
    /// expiry. Off by default.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use lambda_idempotency::{Idempotency, Outcome, cache::LocalCache, store::InMemoryBackend};
    /// use std::num::NonZeroUsize;
    /// use std::time::Duration;
    ///
    /// let cache = LocalCache::new(NonZeroUsize::new(1000).unwrap(), Duration::from_secs(300));
    /// let store = Idempotency::new(InMemoryBackend::default()).with_local_cache(cache.clone());
    /// let work = || async { Ok::<_, std::io::Error>(7) };
    /// assert_eq!(store.run("k", b"body", None, work).await.unwrap(), Outcome::Ran(7));
    /// assert_eq!(store.run("k", b"body", None, work).await.unwrap(), Outcome::Replayed(Some(7)));
    /// assert_eq!(cache.hits(), 1, "the duplicate was answered from the cache");
    /// # });
    /// ```
    pub fn with_local_cache(mut self, cache: LocalCache) -> Self {
        self.cache = Some(cache);
        self
    }

    /// The local cache, when one is set.
    pub fn local_cache(&self) -> Option<&LocalCache> {
        self.cache.as_ref()
    }

    /// The answer of the local cache for `stored` (the stored form of `key`), if it has one.
    pub(crate) fn cached(
        &self,
        key: &str,
        stored: &str,
        payload_hash: &PayloadHash,
        now_ms: i64,
    ) -> Option<Result<Acquired, AcquireError>> {
        let cache = self.cache.as_ref()?;
        let hit = cache.get(&self.cache_key(stored), now_ms)?;
        Some(if payload_hash.matches(&hit.payload_hash) {
            Ok(Acquired::Completed {
                result: hit.result,
                result_omitted: false,
            })
        } else {
            Err(AcquireError::PayloadMismatch {
                key: key.to_owned(),
                stored: Status::Completed,
            })
        })
    }

    /// The cache's key for the record stored under `stored`: the backend's identity and the
    /// full stored key, so that engines over different stores, or with different prefixes, never
    /// answer for each other from one cache.
    pub(crate) fn cache_key(&self, stored: &str) -> String {
        format!("{}\n{stored}", self.cache_scope)
    }

    /// Keeps `record` in the local cache when it is completed and live.
    pub(crate) fn remember(&self, record: &Record, now_ms: i64) {
        if let Some(cache) = &self.cache
            && record.status == Status::Completed
            && !record.result_omitted
            && !record.is_expired(now_ms)
        {
            cache.insert(
                &self.cache_key(&record.key),
                &record.payload_hash,
                record.result.clone(),
                now_ms,
                record.expires_at.saturating_mul(1000),
            );
        }
    }
}
