use std::collections::HashMap;
use std::sync::Mutex;

use super::{
    Backend, Commit, Failure, LimitError, MAX_TRANSACTION_ACTIONS, Put, StoreError,
    TransactionalBackend, Update, Updated,
};
use crate::state::{self, IdempotencyRecord, Step};

/// A write of [`InMemoryBackend`]'s transactions (unit tests of the transactional mode): a value
/// put under a table and a key, unconditionally or only where there is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryWrite {
    /// The table.
    pub table: String,
    /// The key.
    pub key: String,
    /// The value.
    pub value: String,
    /// True when the put's condition is that the key holds no value yet.
    pub if_absent: bool,
}

impl MemoryWrite {
    /// Puts `value` under `table` and `key`.
    pub fn put(table: &str, key: &str, value: &str) -> Self {
        Self {
            table: table.to_owned(),
            key: key.to_owned(),
            value: value.to_owned(),
            if_absent: false,
        }
    }

    /// Puts `value` under `table` and `key` only where there is no value yet.
    pub fn put_if_absent(table: &str, key: &str, value: &str) -> Self {
        Self {
            if_absent: true,
            ..Self::put(table, key, value)
        }
    }
}

/// A backend that keeps records in this process's memory. **For unit tests only.**
///
/// It is not durable: a Lambda execution environment is recycled at any time and several run at
/// once, so records kept here are lost on a cold start and invisible to concurrent invocations,
/// and every message they should have caught is processed again. Use [`super::DynamoDbBackend`]
/// in functions.
///
/// ```
/// # tokio_test_block_on(async {
/// use lambda_idempotency::{Idempotency, Acquired, store::InMemoryBackend};
///
/// let store = Idempotency::new(InMemoryBackend::default());
/// let Acquired::Started(lease) = store.acquire("k", b"body", None).await.unwrap() else { panic!() };
/// store.complete(&lease, None).await.unwrap();
/// assert!(matches!(store.acquire("k", b"body", None).await, Ok(Acquired::Completed { .. })));
/// # });
/// # fn tokio_test_block_on(f: impl std::future::Future) { tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f); }
/// ```
#[derive(Debug)]
pub struct InMemoryBackend {
    records: Mutex<HashMap<String, IdempotencyRecord>>,
    items: Mutex<HashMap<(String, String), String>>,
    /// Distinguishes this backend from every other in the process ([`Backend::identity`]).
    instance: u64,
}

impl Default for InMemoryBackend {
    fn default() -> Self {
        static INSTANCES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        Self {
            records: Mutex::default(),
            items: Mutex::default(),
            instance: INSTANCES.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }
}

impl InMemoryBackend {
    /// The value a committed [`MemoryWrite`] left under `table` and `key`.
    pub fn item(&self, table: &str, key: &str) -> Option<String> {
        self.items()
            .get(&(table.to_owned(), key.to_owned()))
            .cloned()
    }

    fn items(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), String>> {
        self.items.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every record held, for assertions in tests.
    pub fn records(&self) -> Vec<IdempotencyRecord> {
        self.lock().values().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, IdempotencyRecord>> {
        // A panic while holding the lock cannot leave a half-written record: every write is a
        // single insert or field assignment.
        self.records.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Backend for InMemoryBackend {
    async fn put(&self, record: &IdempotencyRecord, now_ms: i64) -> Result<Put, StoreError> {
        let mut records = self.lock();
        let t = state::acquire(records.get(&record.key), record, now_ms);
        if let Some(written) = t.write {
            records.insert(written.key.clone(), written);
        }
        Ok(t.answer)
    }

    async fn get(&self, key: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        Ok(self.lock().get(key).cloned())
    }

    async fn update(&self, key: &str, update: &Update) -> Result<Updated, StoreError> {
        let mut records = self.lock();
        let t = state::update(records.get(key), update);
        if let Some(written) = t.write {
            records.insert(written.key.clone(), written);
        }
        Ok(t.answer)
    }

    /// The same limit as [`super::DynamoDbBackend`] with its default attribute names, so that
    /// unit tests see what a function would.
    fn max_result_bytes(&self, key: &str) -> Option<usize> {
        Some(super::max_result_bytes(&super::Attributes::default(), key))
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.lock().remove(key);
        Ok(())
    }

    fn identity(&self) -> String {
        format!("memory:{}", self.instance)
    }
}

impl TransactionalBackend for InMemoryBackend {
    type Write = MemoryWrite;

    fn check(&self, _record: &IdempotencyRecord, writes: &[MemoryWrite]) -> Result<(), LimitError> {
        let actions = writes.len() + 1;
        if actions > MAX_TRANSACTION_ACTIONS {
            return Err(LimitError::TooManyActions {
                actions,
                max: MAX_TRANSACTION_ACTIONS,
            });
        }
        Ok(())
    }

    async fn commit(
        &self,
        record: &IdempotencyRecord,
        writes: &[MemoryWrite],
        _token: &str,
        now_ms: i64,
    ) -> Result<Commit, StoreError> {
        // Records first, then items: the one order every method takes the two locks in.
        let mut records = self.lock();
        if let Step::Held(held) = state::commit(records.get(&record.key), record, now_ms) {
            return Ok(Commit::Exists(held));
        }
        let mut items = self.items();
        let refused = writes
            .iter()
            .enumerate()
            .find(|(_, w)| w.if_absent && items.contains_key(&(w.table.clone(), w.key.clone())));
        if let Some((index, w)) = refused {
            return Ok(Commit::Rejected {
                index,
                write: format!("Put on table `{}` ({})", w.table, w.key),
                code: "ConditionalCheckFailed".into(),
                message: "The conditional request failed".into(),
            });
        }
        for w in writes {
            items.insert((w.table.clone(), w.key.clone()), w.value.clone());
        }
        records.insert(record.key.clone(), record.clone());
        Ok(Commit::Committed)
    }

    async fn record_failure(
        &self,
        record: &IdempotencyRecord,
        now_ms: i64,
    ) -> Result<Failure, StoreError> {
        let mut records = self.lock();
        match state::record_failure(records.get(&record.key), record, now_ms) {
            Step::Write(failed) => {
                let attempts = failed.attempts;
                records.insert(failed.key.clone(), failed);
                Ok(Failure::Recorded { attempts })
            }
            Step::Held(held) => Ok(Failure::Exists(held)),
        }
    }
}
