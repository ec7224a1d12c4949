//! Persistence backends for idempotency records.
//!
//! A backend is the small [`Backend`] trait: put (conditionally), get, update, delete. It holds
//! no expiry, hashing or state logic: the [`Idempotency`](crate::Idempotency) engine above it
//! decides what to write, and [`Record::is_replaceable_by`] states the one rule a backend must
//! apply atomically in [`Backend::put`].
//!
//! - [`DynamoDbBackend`]: the production backend (one conditional write per acquire, the existing
//!   record returned with `ReturnValuesOnConditionCheckFailure=ALL_OLD`).
//! - [`InMemoryBackend`]: for unit tests only.

mod dynamodb;
mod memory;

use std::future::Future;

pub use dynamodb::{Attributes, DynamoDbBackend};
pub use memory::InMemoryBackend;

use crate::record::Record;

/// A boxed error from a backend's client.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What [`Backend::put`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Put {
    /// The record was written: the caller holds the key.
    Written,
    /// A record that is not replaceable holds the key; here it is, as stored.
    Exists(Record),
}

/// A change to a stored record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Update {
    /// Marks the record completed, with a new expiry and the result, if one is stored.
    Complete {
        /// New expiry, epoch seconds.
        expires_at: i64,
        /// The result to store (JSON), if any.
        result: Option<String>,
        /// True when a result existed but was too large to store.
        result_omitted: bool,
    },
    /// Marks the record failed, adds one to its attempts and stores the (truncated) error.
    /// A completed record is left as it is.
    Fail {
        /// The error message.
        error: String,
    },
}

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
    /// A stored item could not be read as a record.
    #[error("idempotency store: the record for key `{key}` is malformed: {reason}")]
    Malformed {
        /// The key of the item.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// A persistence backend for idempotency records.
///
/// Implementations are thin translations to a database; see the module docs.
pub trait Backend: Send + Sync {
    /// Writes `record` (an in-progress record) unless a record that is not replaceable holds its
    /// key, in one atomic step. A stored record is replaceable when
    /// [`Record::is_replaceable_by`]`(&record.payload_hash, now_ms)` is true; the new record keeps
    /// the stored record's `attempts` and `last_error`, and clears its result.
    ///
    /// When the key is held, returns [`Put::Exists`] with the stored record (no second request).
    fn put(
        &self,
        record: &Record,
        now_ms: i64,
    ) -> impl Future<Output = Result<Put, StoreError>> + Send;

    /// Reads the record of `key`, expired or not.
    fn get(&self, key: &str) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send;

    /// Applies `update` to the record of `key`, in one request.
    fn update(
        &self,
        key: &str,
        update: &Update,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Deletes the record of `key`, if there is one.
    fn delete(&self, key: &str) -> impl Future<Output = Result<(), StoreError>> + Send;
}

impl<B: Backend> Backend for std::sync::Arc<B> {
    fn put(
        &self,
        record: &Record,
        now_ms: i64,
    ) -> impl Future<Output = Result<Put, StoreError>> + Send {
        (**self).put(record, now_ms)
    }
    fn get(&self, key: &str) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send {
        (**self).get(key)
    }
    fn update(
        &self,
        key: &str,
        update: &Update,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).update(key, update)
    }
    fn delete(&self, key: &str) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).delete(key)
    }
}
