use std::collections::HashMap;
use std::sync::Mutex;

use super::{
    Backend, Commit, Failure, LimitError, MAX_TRANSACTION_ACTIONS, Put, StoreError,
    TransactionalBackend, Update, Updated,
};
use crate::state::{self, IdempotencyRecord, Step};

/// A write of [`InMemoryBackend`]'s transactions (unit tests of the transactional mode): a value
/// put under a table and a key, unconditionally or only where there is none. In the
/// [inline mode](crate::inline), the handler's one new item is a [`put_if_absent`](Self::put_if_absent)
/// (a DynamoDB [`NewItem`](crate::store::NewItem) converts to one).
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
/// assert!(matches!(store.acquire("k", b"body", None).await, Ok(Acquired::Duplicate { .. })));
/// # });
/// # fn tokio_test_block_on(f: impl std::future::Future) { tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f); }
/// ```
#[derive(Debug, Default)]
pub struct InMemoryBackend {
    records: Mutex<HashMap<String, IdempotencyRecord>>,
    /// Each item's value, and the record it carries when the inline mode wrote it.
    items: Mutex<HashMap<(String, String), StoredItem>>,
}

/// An item's value, and the idempotency record on it (inline mode).
#[derive(Debug, Clone)]
struct StoredItem {
    value: String,
    record: Option<IdempotencyRecord>,
}

impl InMemoryBackend {
    /// The value a committed [`MemoryWrite`] (or an inline write) left under `table` and `key`.
    pub fn item(&self, table: &str, key: &str) -> Option<String> {
        self.items()
            .get(&(table.to_owned(), key.to_owned()))
            .map(|item| item.value.clone())
    }

    /// The idempotency record an inline write left on the item under `table` and `key`.
    pub fn item_record(&self, table: &str, key: &str) -> Option<IdempotencyRecord> {
        self.items()
            .get(&(table.to_owned(), key.to_owned()))
            .and_then(|item| item.record.clone())
    }

    fn items(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), StoredItem>> {
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

/// The first of `writes` whose condition (`if_absent`) fails on `items`: a rejection, or
/// [`Commit::Exists`] when the refused item carries a live record of `record`'s payload (the
/// work was done, by a write whose record rode on that item: the inline mode, a carried record).
fn refused(
    items: &HashMap<(String, String), StoredItem>,
    writes: &[MemoryWrite],
    record: &IdempotencyRecord,
    now_ms: i64,
) -> Option<Commit> {
    let (index, w, item) = writes.iter().enumerate().find_map(|(index, w)| {
        let item = items.get(&(w.table.clone(), w.key.clone()))?;
        w.if_absent.then_some((index, w, item))
    })?;
    if let Some(done) = item
        .record
        .as_ref()
        .filter(|r| !r.is_expired(now_ms) && r.payload_hash == record.payload_hash)
    {
        return Some(Commit::Exists(IdempotencyRecord {
            key: record.key.clone(),
            ..done.clone()
        }));
    }
    Some(Commit::Rejected {
        index,
        write: format!("Put on table `{}` ({})", w.table, w.key),
        code: "ConditionalCheckFailed".into(),
        message: "The conditional request failed".into(),
    })
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

    async fn get(&self, key: &str, _now_ms: i64) -> Result<Option<IdempotencyRecord>, StoreError> {
        Ok(self.lock().get(key).cloned())
    }

    async fn update(
        &self,
        key: &str,
        update: &Update,
        _now_ms: i64,
    ) -> Result<Updated, StoreError> {
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
}

impl TransactionalBackend for InMemoryBackend {
    type Write = MemoryWrite;

    fn check(
        &self,
        _record: &IdempotencyRecord,
        writes: &[MemoryWrite],
        carrier: Option<usize>,
    ) -> Result<(), LimitError> {
        let actions = writes.len() + usize::from(carrier.is_none());
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
        if let Some(rejected) = refused(&items, writes, record, now_ms) {
            return Ok(rejected);
        }
        for w in writes {
            let item = StoredItem {
                value: w.value.clone(),
                record: None,
            };
            items.insert((w.table.clone(), w.key.clone()), item);
        }
        records.insert(record.key.clone(), record.clone());
        Ok(Commit::Committed)
    }

    /// The record on `writes[carrier]`'s item, a put that writes the item whole: refused
    /// ([`Commit::Exists`]) when the item carries a record, whatever its expiry
    /// ([`state::commit_on_item`]: the item is never rewritten); else the writes' own conditions
    /// (`if_absent`) as in [`commit`](TransactionalBackend::commit); else every write, the
    /// carrier's item with the record on it (and nothing in the engine's records).
    async fn commit_carried(
        &self,
        record: &IdempotencyRecord,
        writes: &[MemoryWrite],
        carrier: usize,
        _token: &str,
        now_ms: i64,
    ) -> Result<Commit, StoreError> {
        let Some(carried) = writes.get(carrier) else {
            return Err(StoreError::Misconfigured {
                problem: format!(
                    "the record is to ride on write {carrier}, but there are {} writes",
                    writes.len()
                ),
                table: String::new(),
            });
        };
        let mut items = self.items();
        let at = (carried.table.clone(), carried.key.clone());
        let stored = items.get(&at).and_then(|item| item.record.as_ref());
        let completed = match state::commit_on_item(stored, record) {
            Step::Held(held) => {
                return Ok(Commit::Exists(IdempotencyRecord {
                    key: record.key.clone(),
                    ..held
                }));
            }
            Step::Write(completed) => completed,
        };
        if let Some(rejected) = refused(&items, writes, record, now_ms) {
            return Ok(rejected);
        }
        for (index, w) in writes.iter().enumerate() {
            let item = StoredItem {
                value: w.value.clone(),
                record: (index == carrier).then(|| completed.clone()),
            };
            items.insert((w.table.clone(), w.key.clone()), item);
        }
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

    /// Only a [`put_if_absent`](MemoryWrite::put_if_absent) refuses a second run.
    fn new_item_problem(&self, write: &MemoryWrite) -> Option<String> {
        (!write.if_absent).then(|| {
            format!(
                "an inline item must be a new item (`MemoryWrite::put_if_absent`, or a \
                 `NewItem`), not an unconditional put of `{}` in `{}`: it overwrites an item \
                 that carries no record",
                write.key, write.table
            )
        })
    }

    async fn record_on_item(
        &self,
        key: &str,
        at: &MemoryWrite,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let items = self.items();
        let carried = items
            .get(&(at.table.clone(), at.key.clone()))
            .and_then(|item| item.record.clone());
        Ok(carried.map(|record| IdempotencyRecord {
            key: key.to_owned(),
            ..record
        }))
    }
}
