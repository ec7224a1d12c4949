//! Persistence backends for idempotency records.
//!
//! A backend is the small [`Backend`] trait: put (conditionally), get, update, delete. It holds
//! no expiry, hashing or state logic: the [`Idempotency`](crate::Idempotency) engine above it
//! decides what to write, and the [state machine](crate::state) states each transition a
//! backend applies atomically ([`state::acquire`](crate::state::acquire) for [`Backend::put`],
//! [`state::update`](crate::state::update) for [`Backend::update`]), with the
//! [table](crate::state::table::TRANSITIONS) every backend is tested against.
//!
//! A layer is a backend that wraps another: [`CachedBackend`](crate::cache::CachedBackend)
//! answers keys completed in this process from a local cache and delegates the rest. The engine
//! does not know it is there: it asks the layer as it asks any backend.
//!
//! - [`DynamoDbBackend`] (feature `dynamodb`, on by default): the production backend (one
//!   conditional write per acquire, the existing record returned with
//!   `ReturnValuesOnConditionCheckFailure=ALL_OLD`).
// Without the feature `redis` its backend is not compiled: the link goes to docs.rs's page.
#![cfg_attr(
    feature = "redis",
    doc = " - [`RedisBackend`] (feature `redis`): Redis or Valkey, one Lua script per acquire, completion or"
)]
#![cfg_attr(
    not(feature = "redis"),
    doc = " - [`RedisBackend`](https://docs.rs/lambda-idempotency/latest/lambda_idempotency/store/struct.RedisBackend.html) (feature `redis`): Redis or Valkey, one Lua script per acquire, completion or"
)]
//!   failure, the existing record returned in the acquire's reply; records expired by the
//!   server's own TTL. Not transactional.
//! - [`InMemoryBackend`]: for unit tests only.
//!
//! A backend that can also commit the record together with the handler's own writes, in one
//! atomic request, implements [`TransactionalBackend`] (see [`crate::transaction`]). A backend
//! that cannot does not implement it, and the transactional and inline modes do not compile over
//! it (the inline mode, [`crate::inline`], is a commit of one write that carries its record).
#[cfg(feature = "dynamodb")]
mod dynamodb;
mod dynamodb_layout;
#[cfg(any(test, doc, feature = "test-util"))]
pub(crate) mod memory;
#[cfg(feature = "redis")]
mod redis;
mod transactional_backend;

use std::future::Future;

#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use self::redis::{DEFAULT_NAMESPACE, RedisBackend, RedisConnectError};
#[cfg(feature = "dynamodb")]
#[cfg_attr(docsrs, doc(cfg(feature = "dynamodb")))]
pub use dynamodb::{DynamoDbBackend, NewItem, TableCheck};
pub use dynamodb_layout::{
    Attributes, MAX_ITEM_BYTES, MAX_TRANSACTION_ACTIONS, MAX_TRANSACTION_BYTES,
    inline_record_bytes, max_result_bytes,
};
#[cfg(any(test, doc, feature = "test-util"))]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub use memory::{InMemoryBackend, ItemKey, MemoryWrite, Requests};
pub use transactional_backend::{Commit, Failure, LimitError, TransactionalBackend};

use crate::state::IdempotencyRecord;
pub use crate::state::{Put, Update, Updated};

/// A boxed error from a backend's client.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A backend's failure. The engine never treats one as success.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The request to the store failed (unreachable, throttled, denied, ...).
    #[error("idempotency store: {operation} failed: {message}")]
    Request {
        /// The operation (`UpdateItem`, `GetItem`, ...).
        operation: &'static str,
        /// The full error chain, for logs.
        message: String,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
    /// The store could not run the request now (conflicting transactions, throttling), on every
    /// try: nothing was applied; a later delivery may succeed.
    #[error("idempotency store: {operation} could not run after {tries} tries: {reason}")]
    Contended {
        /// The operation (`TransactWriteItems`).
        operation: &'static str,
        /// Tries made.
        tries: u32,
        /// The last reason the store gave.
        reason: String,
    },
    /// A stored item could not be read as a record.
    #[error("idempotency store: the record for key `{key}` is malformed: {reason}")]
    Malformed {
        /// The key of the item.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A table does not fit the request: it does not exist, its key schema is not the one the
    /// request writes (a partition key named or typed otherwise, a sort key), or the store
    /// refused the request as invalid for another reason that is not the size of the message's
    /// data. Found by `DynamoDbBackend::check_table`, or from the store's refusal of a request.
    /// Nothing was applied.
    ///
    /// This is the configuration's fault (or the code's), never the message's: trying again at
    /// once cannot help, but the record is not permanent either. A batch leaves it for
    /// redelivery (reported in `batchItemFailures`, not dead-lettered, not counted as an
    /// attempt), so that no message is lost to the dead-letter queue while the table or the code
    /// is fixed (the queue's own redrive policy, the backstop, still counts its receives).
    #[error("idempotency store: {problem}")]
    Misconfigured {
        /// The table at fault. When the store did not say which of a transaction's tables it
        /// refused, the tables it may be, comma-separated.
        table: String,
        /// What does not match, naming the table (never an item's values).
        problem: String,
    },
}

/// A persistence backend for idempotency records.
///
/// Implementations are thin translations to a database; see the module docs.
pub trait Backend: Send + Sync {
    /// Writes `record` (an in-progress record) unless a record that is not replaceable holds its
    /// key, in one atomic step. A stored record is replaceable when
    /// [`IdempotencyRecord::is_replaceable`]`(now_ms)` is true; the new record keeps the stored record's
    /// `attempts` and `last_error` when
    /// [`IdempotencyRecord::carries_attempts_to`]`(&record.payload_hash, now_ms)` (else both start again),
    /// and clears its result.
    ///
    /// When the key is held, returns [`Put::Exists`] with the stored record (no second request
    /// for a live record; replacing an expired one may take a second, conditional, request).
    fn put(
        &self,
        record: &IdempotencyRecord,
        now_ms: i64,
    ) -> impl Future<Output = Result<Put, StoreError>> + Send;

    /// Reads the record of `key`, expired or not, at `now_ms` (a layer such as the
    /// [local cache](crate::cache)'s reads the time from it; a store does not).
    fn get(
        &self,
        key: &str,
        now_ms: i64,
    ) -> impl Future<Output = Result<Option<IdempotencyRecord>, StoreError>> + Send;

    /// Applies `update` to the record of `key`, in one request, under the update's condition, at
    /// `now_ms` (as for [`get`](Self::get)).
    fn update(
        &self,
        key: &str,
        update: &Update,
        now_ms: i64,
    ) -> impl Future<Output = Result<Updated, StoreError>> + Send;

    /// The largest stored result (bytes of JSON) a record of `key` can carry, with every other
    /// attribute at its largest (a last error of [`MAX_ERROR_LEN`](crate::state::MAX_ERROR_LEN)
    /// bytes included); `None` when the backend has no item size limit.
    fn max_result_bytes(&self, key: &str) -> Option<usize> {
        let _ = key;
        None
    }

    /// Deletes the record of `key`, if there is one.
    fn delete(&self, key: &str) -> impl Future<Output = Result<(), StoreError>> + Send;
}

impl<B: Backend> Backend for std::sync::Arc<B> {
    fn put(
        &self,
        record: &IdempotencyRecord,
        now_ms: i64,
    ) -> impl Future<Output = Result<Put, StoreError>> + Send {
        (**self).put(record, now_ms)
    }
    fn get(
        &self,
        key: &str,
        now_ms: i64,
    ) -> impl Future<Output = Result<Option<IdempotencyRecord>, StoreError>> + Send {
        (**self).get(key, now_ms)
    }
    fn update(
        &self,
        key: &str,
        update: &Update,
        now_ms: i64,
    ) -> impl Future<Output = Result<Updated, StoreError>> + Send {
        (**self).update(key, update, now_ms)
    }
    fn max_result_bytes(&self, key: &str) -> Option<usize> {
        (**self).max_result_bytes(key)
    }
    fn delete(&self, key: &str) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).delete(key)
    }
}
