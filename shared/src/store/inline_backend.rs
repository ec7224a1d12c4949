//! The [`InlineBackend`] trait: a backend that writes an idempotency record *on* the handler's
//! one new item, in one conditional write (see [`crate::inline`]).

use std::future::Future;

use super::{Commit, LimitError, StoreError, TransactionalBackend};
use crate::state::IdempotencyRecord;

/// A [`TransactionalBackend`] that can also write a completed idempotency record as attributes
/// of the handler's one new item, in one conditional write, instead of beside it.
///
/// The write is the transition [`state::commit_on_item`](crate::state::commit_on_item): the item
/// (record included) is written only where it does not exist. An item that exists is never
/// rewritten: the record it carries, whatever its expiry, is returned from the same request (and
/// answers as [`state::classify_on_item`](crate::state::classify_on_item) says), and one without
/// a record refuses the write as the handler's failure. The failure path is the transactional mode's
/// ([`TransactionalBackend::record_failure`], in the idempotency table): a failed attempt has no
/// item to carry its record.
///
/// [`super::DynamoDbBackend`] implements it with one `PutItem`
/// ([`NewItem`](super::NewItem)); [`super::InMemoryBackend`] with a lock, for unit tests.
pub trait InlineBackend: TransactionalBackend {
    /// The handler's new item, in the store's own terms (DynamoDB: [`NewItem`](super::NewItem)).
    type Item: Clone + Send + Sync + std::fmt::Debug;

    /// Checks `item` with `record` on it against the store's item size limit, without a request:
    /// [`LimitError::ItemTooLarge`] (index 0) when they do not fit in one item.
    fn check_item(&self, record: &IdempotencyRecord, item: &Self::Item) -> Result<(), LimitError>;

    /// Writes `item` with `record` (completed) on it, unless the item exists. The answer, in
    /// [`Commit`]'s terms:
    ///
    /// - [`Commit::Committed`] when it was written.
    /// - [`Commit::Exists`]: the item's stored record (its key set to `record.key`, the
    ///   idempotency key), whatever its expiry at `now_ms`, from the same request. Nothing was
    ///   written.
    /// - [`Commit::Rejected`] (index 0, code `ConditionalCheckFailed`): the item exists and
    ///   carries no record (it was written by something else); or (a code about size) the item
    ///   is over the store's limit.
    /// - [`Commit::TooLarge`]: the store refused the request for the size of its data without
    ///   naming the item.
    /// - [`Commit::Contended`]: the item is in a transaction that is running; nothing was
    ///   written, and a later try may succeed.
    ///
    /// A refusal for the store's configuration (the item's table missing, a key schema the item
    /// does not match) is [`StoreError::Misconfigured`]; a failure to run the request another
    /// [`StoreError`].
    fn put_inline(
        &self,
        record: &IdempotencyRecord,
        item: &Self::Item,
        now_ms: i64,
    ) -> impl Future<Output = Result<Commit, StoreError>> + Send;
}

impl<B: InlineBackend> InlineBackend for std::sync::Arc<B> {
    type Item = B::Item;

    fn check_item(&self, record: &IdempotencyRecord, item: &Self::Item) -> Result<(), LimitError> {
        (**self).check_item(record, item)
    }

    fn put_inline(
        &self,
        record: &IdempotencyRecord,
        item: &Self::Item,
        now_ms: i64,
    ) -> impl Future<Output = Result<Commit, StoreError>> + Send {
        (**self).put_inline(record, item, now_ms)
    }
}
