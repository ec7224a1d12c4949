use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::dynamodb_layout::{carried_record_bytes, record_item_bytes};
use super::{
    Attributes, Backend, Commit, Failure, LimitError, MAX_ITEM_BYTES, MAX_TRANSACTION_ACTIONS,
    MAX_TRANSACTION_BYTES, Put, StoreError, TransactionalBackend, Update, Updated,
};
use crate::state::{self, IdempotencyRecord, Step};

/// A write of [`InMemoryBackend`]'s transactions (unit tests of the transactional mode): a value
/// put under a table and a key, unconditionally or only where there is none. In the
/// [inline mode](crate::inline), the handler's one new item is a [`put_if_absent`](Self::put_if_absent)
/// (a DynamoDB [`NewItem`](crate::store::NewItem) converts to one).
///
/// It is held to DynamoDB's limits: an item of at most [`MAX_ITEM_BYTES`] (its key, sort key and
/// value, and the record it carries), a transaction of at most [`MAX_TRANSACTION_ACTIONS`] and
/// [`MAX_TRANSACTION_BYTES`], a key of at most 2048 bytes and a sort key of at most 1024 (refused
/// by the request, as DynamoDB refuses them). A put without its condition is DynamoDB's `Put` without one: it
/// rewrites an item that carries no record, as DynamoDB's does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryWrite {
    /// The table.
    pub table: String,
    /// The key (DynamoDB: the partition key).
    pub key: String,
    /// The sort key, in a table that has one: items that differ only by it are two items.
    pub sort_key: Option<String>,
    /// The value.
    pub value: String,
    /// True when the put's condition is that the key holds no value yet.
    pub if_absent: bool,
}

/// The key of an item of [`InMemoryBackend`]: its key, and its sort key in a table that has one.
/// A key alone (`"o-1"`) or a key and a sort key (`("o-1", "line-2")`) converts to one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ItemKey {
    /// The key (DynamoDB: the partition key).
    pub key: String,
    /// The sort key, if the table has one.
    pub sort_key: Option<String>,
}

impl From<&str> for ItemKey {
    fn from(key: &str) -> Self {
        Self {
            key: key.to_owned(),
            sort_key: None,
        }
    }
}

impl From<(&str, &str)> for ItemKey {
    fn from((key, sort_key): (&str, &str)) -> Self {
        Self {
            key: key.to_owned(),
            sort_key: Some(sort_key.to_owned()),
        }
    }
}

impl MemoryWrite {
    /// Puts `value` under `table` and `key`.
    pub fn put(table: &str, key: &str, value: &str) -> Self {
        Self {
            table: table.to_owned(),
            key: key.to_owned(),
            sort_key: None,
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

    /// The same put, under `sort_key` too: in a table keyed on a partition key and a sort key.
    pub fn with_sort_key(self, sort_key: &str) -> Self {
        Self {
            sort_key: Some(sort_key.to_owned()),
            ..self
        }
    }

    /// Where it writes: its table and its [`ItemKey`].
    fn at(&self) -> (String, ItemKey) {
        let key = ItemKey {
            key: self.key.clone(),
            sort_key: self.sort_key.clone(),
        };
        (self.table.clone(), key)
    }

    /// Its item's bytes, as DynamoDB counts an item of these attributes (within a few bytes of
    /// the names): its key, sort key and value.
    fn bytes(&self) -> usize {
        self.key.len() + self.sort_key.as_ref().map_or(0, String::len) + self.value.len()
    }

    fn describe(&self) -> String {
        match &self.sort_key {
            Some(sort_key) => format!("Put on table `{}` ({}, {sort_key})", self.table, self.key),
            None => format!("Put on table `{}` ({})", self.table, self.key),
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
/// It answers as DynamoDB does where a test can see it: the same conditions, DynamoDB's size
/// limits ([`TransactionalBackend::check`]), items keyed on a partition key and a sort key
/// ([`MemoryWrite::with_sort_key`]), and [`requests`](Self::requests) counts what each call
/// would have sent.
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
    items: Mutex<HashMap<(String, ItemKey), StoredItem>>,
    requests: Counts,
    /// What refuses its requests ([`with_faults`](Self::with_faults)); nothing by default.
    pub(crate) refuse: Option<Refuse>,
}

/// What refuses an [`InMemoryBackend`]'s requests: of an operation's name, why it is refused.
#[derive(Clone)]
pub(crate) struct Refuse(pub(crate) std::sync::Arc<RefuseFn>);

/// Of an operation's name, why it is refused (`None`: it goes through).
pub(crate) type RefuseFn = dyn Fn(&str) -> Option<String> + Send + Sync;

impl std::fmt::Debug for Refuse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Refuse")
    }
}

/// The requests [`InMemoryBackend`] has answered, by the DynamoDB request each stands for: what
/// [`DynamoDbBackend`](super::DynamoDbBackend) sends for the same call. A refused write is a
/// request too (a duplicate costs one); a limit found before any request
/// ([`TransactionalBackend::check`]) is none.
///
/// One call is one request. Where DynamoDB needs more than one (an acquire that replaces an
/// expired record: two `UpdateItem`s), it is counted once here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Requests {
    /// `GetItem`: a read ([`Backend::get`], the transactional and inline wrappers' peek).
    pub get: u64,
    /// `PutItem`: a commit of one write that carries its record (the inline mode's write).
    pub put: u64,
    /// `UpdateItem`: an acquire, a completion, a failure, a reset of attempts, a failure of the
    /// transactional and inline modes.
    pub update: u64,
    /// `TransactWriteItems`: a commit of the transactional mode.
    pub transact: u64,
    /// `DeleteItem`: [`Idempotency::forget`](crate::Idempotency::forget).
    pub delete: u64,
}

#[derive(Debug, Default)]
struct Counts {
    get: AtomicU64,
    put: AtomicU64,
    update: AtomicU64,
    transact: AtomicU64,
    delete: AtomicU64,
}

impl Counts {
    fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// An item's value, and the idempotency record on it (inline mode).
#[derive(Debug, Clone)]
struct StoredItem {
    value: String,
    record: Option<IdempotencyRecord>,
}

impl InMemoryBackend {
    /// The fault the request `operation` meets, if any, as the store's error.
    fn fault(&self, operation: &'static str) -> Result<(), StoreError> {
        match self
            .refuse
            .as_ref()
            .and_then(|refuse| (refuse.0)(operation))
        {
            None => Ok(()),
            Some(why) => Err(StoreError::Request {
                operation,
                message: why.clone(),
                source: why.into(),
            }),
        }
    }

    /// The value a committed [`MemoryWrite`] (or an inline write) left under `table` and `key`:
    /// a key (`"o-1"`), or a key and a sort key (`("o-1", "line-2")`).
    pub fn item(&self, table: &str, key: impl Into<ItemKey>) -> Option<String> {
        self.items()
            .get(&(table.to_owned(), key.into()))
            .map(|item| item.value.clone())
    }

    /// The idempotency record an inline write left on the item under `table` and `key`.
    pub fn item_record(&self, table: &str, key: impl Into<ItemKey>) -> Option<IdempotencyRecord> {
        self.items()
            .get(&(table.to_owned(), key.into()))
            .and_then(|item| item.record.clone())
    }

    /// The requests answered so far, by kind: a unit test sees what each message costs on
    /// DynamoDB.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use std::sync::Arc;
    /// use lambda_idempotency::Idempotency;
    /// use lambda_idempotency::inline::InlinePut;
    /// use lambda_idempotency::store::{InMemoryBackend, MemoryWrite, Requests};
    ///
    /// let backend = Arc::new(InMemoryBackend::default());
    /// let engine = Idempotency::new(backend.clone());
    /// let order = || async {
    ///     let item = MemoryWrite::put_if_absent("orders", "o-1", "{}");
    ///     Ok::<_, std::io::Error>(InlinePut::new("charged", item))
    /// };
    /// engine.put_inline("o-1", b"{}", order).await.unwrap();
    /// assert_eq!(backend.requests().put, 1, "a new item: one PutItem");
    /// engine.put_inline("o-1", b"{}", order).await.unwrap();
    /// assert_eq!(
    ///     backend.requests(),
    ///     Requests { put: 2, ..Requests::default() },
    ///     "a duplicate: one refused PutItem, and nothing else"
    /// );
    /// # });
    /// ```
    pub fn requests(&self) -> Requests {
        let c = &self.requests;
        let n = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        Requests {
            get: n(&c.get),
            put: n(&c.put),
            update: n(&c.update),
            transact: n(&c.transact),
            delete: n(&c.delete),
        }
    }

    fn items(&self) -> std::sync::MutexGuard<'_, HashMap<(String, ItemKey), StoredItem>> {
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
    items: &HashMap<(String, ItemKey), StoredItem>,
    writes: &[MemoryWrite],
    record: &IdempotencyRecord,
    now_ms: i64,
) -> Option<Commit> {
    let (index, w, item) = writes.iter().enumerate().find_map(|(index, w)| {
        let item = items.get(&w.at())?;
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
        write: w.describe(),
        code: "ConditionalCheckFailed".into(),
        message: "The conditional request failed".into(),
    })
}

/// DynamoDB's largest partition key and sort key, in bytes.
const MAX_PARTITION_KEY_BYTES: usize = 2048;
const MAX_SORT_KEY_BYTES: usize = 1024;

/// The first of `writes` whose key DynamoDB refuses for its size: its index and DynamoDB's
/// message. DynamoDB refuses it in the request (a `ValidationException`), not before.
fn key_too_large(writes: &[MemoryWrite]) -> Option<(usize, String)> {
    writes.iter().enumerate().find_map(|(index, w)| {
        let sort = w.sort_key.as_ref().map_or(0, String::len);
        let message = if w.key.len() > MAX_PARTITION_KEY_BYTES {
            format!("Size of hashkey has exceeded the maximum size limit of {MAX_PARTITION_KEY_BYTES} bytes")
        } else if sort > MAX_SORT_KEY_BYTES {
            format!("Aggregated size of all range keys has exceeded the size limit of {MAX_SORT_KEY_BYTES} bytes")
        } else {
            return None;
        };
        Some((index, format!("One or more parameter values were invalid: {message}")))
    })
}

/// What DynamoDB answers a request with a key over its limit: a single write (`PutItem`) is
/// that write's rejection; a transaction is refused whole, for its size.
fn refused_for_a_key(writes: &[MemoryWrite], single: bool) -> Option<Commit> {
    let (index, message) = key_too_large(writes)?;
    Some(if single {
        Commit::Rejected {
            index,
            write: writes[index].describe(),
            code: "ValidationException".into(),
            message,
        }
    } else {
        Commit::TooLarge {
            message: format!("ValidationException: {message}"),
        }
    })
}

impl Backend for InMemoryBackend {
    async fn put(&self, record: &IdempotencyRecord, now_ms: i64) -> Result<Put, StoreError> {
        self.fault("UpdateItem")?;
        Counts::add(&self.requests.update);
        let mut records = self.lock();
        let t = state::acquire(records.get(&record.key), record, now_ms);
        if let Some(written) = t.write {
            records.insert(written.key.clone(), written);
        }
        Ok(t.answer)
    }

    async fn get(&self, key: &str, _now_ms: i64) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.fault("GetItem")?;
        Counts::add(&self.requests.get);
        Ok(self.lock().get(key).cloned())
    }

    async fn update(
        &self,
        key: &str,
        update: &Update,
        _now_ms: i64,
    ) -> Result<Updated, StoreError> {
        self.fault("UpdateItem")?;
        Counts::add(&self.requests.update);
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
        self.fault("DeleteItem")?;
        Counts::add(&self.requests.delete);
        self.lock().remove(key);
        Ok(())
    }
}

impl TransactionalBackend for InMemoryBackend {
    type Write = MemoryWrite;

    /// DynamoDB's limits, as [`DynamoDbBackend`](super::DynamoDbBackend) checks them with its
    /// default attribute names: the actions, each item's bytes (the carrier's with the record's
    /// attributes), and the bytes of every item together (the record's own item when it is not
    /// carried).
    fn check(
        &self,
        record: &IdempotencyRecord,
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
        let mut bytes = match carrier {
            None => record_item_bytes(&Attributes::default(), record),
            Some(_) => 0,
        };
        for (index, write) in writes.iter().enumerate() {
            let mut item = write.bytes();
            if carrier == Some(index) {
                item += carried_record_bytes(&Attributes::inline(), record);
            }
            if item > MAX_ITEM_BYTES {
                return Err(LimitError::ItemTooLarge {
                    index,
                    write: write.describe(),
                    bytes: item,
                    max: MAX_ITEM_BYTES,
                });
            }
            bytes += item;
        }
        if bytes > MAX_TRANSACTION_BYTES {
            return Err(LimitError::TooLarge {
                bytes,
                max: MAX_TRANSACTION_BYTES,
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
        self.fault("TransactWriteItems")?;
        Counts::add(&self.requests.transact);
        // Refused whole, as DynamoDB refuses a request over its limits.
        if let Err(limit) = self.check(record, writes, None) {
            return Ok(Commit::TooLarge {
                message: format!("ValidationException: {limit}"),
            });
        }
        if let Some(refused) = refused_for_a_key(writes, false) {
            return Ok(refused);
        }
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
            items.insert(w.at(), item);
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
        // One write is one `PutItem` (the inline mode), more a `TransactWriteItems`.
        self.fault(match writes.len() {
            1 => "PutItem",
            _ => "TransactWriteItems",
        })?;
        Counts::add(match writes.len() {
            1 => &self.requests.put,
            _ => &self.requests.transact,
        });
        if let Err(limit) = self.check(record, writes, Some(carrier)) {
            return Ok(Commit::TooLarge {
                message: format!("ValidationException: {limit}"),
            });
        }
        if let Some(refused) = refused_for_a_key(writes, writes.len() == 1) {
            return Ok(refused);
        }
        let mut items = self.items();
        let stored = items
            .get(&carried.at())
            .and_then(|item| item.record.as_ref());
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
            items.insert(w.at(), item);
        }
        Ok(Commit::Committed)
    }

    async fn record_failure(
        &self,
        record: &IdempotencyRecord,
        now_ms: i64,
    ) -> Result<Failure, StoreError> {
        self.fault("UpdateItem")?;
        Counts::add(&self.requests.update);
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
        self.fault("GetItem")?;
        let items = self.items();
        let carried = items.get(&at.at()).and_then(|item| item.record.clone());
        Ok(carried.map(|record| IdempotencyRecord {
            key: key.to_owned(),
            ..record
        }))
    }
}
