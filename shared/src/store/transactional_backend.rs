//! The [`TransactionalBackend`] trait: a backend that commits an idempotency record and the
//! handler's own writes in one atomic request.

use std::future::Future;

use super::{Backend, StoreError};
use crate::state::IdempotencyRecord;

/// What [`TransactionalBackend::commit`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Commit {
    /// The record and every write were applied, together.
    Committed,
    /// A record that is not replaceable holds the key; here it is, as stored. Nothing was
    /// applied.
    Exists(IdempotencyRecord),
    /// One of the handler's writes was refused for what it holds: its own condition failed, or
    /// its item is over the store's size limit. Nothing was applied. A write refused for its
    /// table (a key schema it does not match, a table that does not exist) is not a rejection
    /// but [`StoreError::Misconfigured`].
    Rejected {
        /// Its position among the handler's writes, from 0.
        index: usize,
        /// The write, as the backend describes it (operation, table, key).
        write: String,
        /// The store's code (DynamoDB: `ConditionalCheckFailed`, `ValidationError`, ...).
        code: String,
        /// The store's message.
        message: String,
    },
    /// The store refused the request for the size of its data (an item over 400 KB on
    /// DynamoDB, a key over its limit), without saying which write, or for the idempotency
    /// record's own size: nothing was applied, and a retry of the same message cannot succeed.
    /// Any other refusal of the whole request (an expression naming an undefined value, two
    /// actions on one item, a key schema, a missing table) is [`StoreError::Misconfigured`]:
    /// not the message's fault.
    TooLarge {
        /// What the store said.
        message: String,
    },
    /// The transaction could not run now (another transaction on one of its items, throttling,
    /// a try with the same token still running); the same call may be tried again.
    Contended {
        /// What the store said.
        reason: String,
    },
}

/// What [`TransactionalBackend::record_failure`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The failure is recorded; the key's failed attempts, this one included.
    Recorded {
        /// Failed attempts of the key.
        attempts: u32,
    },
    /// A record that is not replaceable holds the key (another attempt committed, or holds it):
    /// here it is; the failure was not recorded.
    Exists(IdempotencyRecord),
}

/// A transaction the backend cannot take, found before any request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// More actions than one transaction holds.
    #[error("a transaction holds at most {max} actions; this one has {actions}")]
    TooManyActions {
        /// Actions of this transaction, the record's own included when it is not carried.
        actions: usize,
        /// The most one transaction holds.
        max: usize,
    },
    /// The items of the transaction are larger than one transaction holds.
    #[error(
        "the items of a transaction hold at most {max} bytes; this one's hold at least {bytes} \
         (the idempotency record and the writes)"
    )]
    TooLarge {
        /// Bytes of the transaction's items, as the store counts them.
        bytes: usize,
        /// The most one transaction holds.
        max: usize,
    },
    /// One write's item is larger than the store's item limit.
    #[error("write {index} ({write}) holds at least {bytes} bytes; an item holds at most {max}")]
    ItemTooLarge {
        /// Its position among the handler's writes, from 0.
        index: usize,
        /// The write, as the backend describes it.
        write: String,
        /// Its bytes.
        bytes: usize,
        /// The item limit.
        max: usize,
    },
}

/// A [`Backend`] that can write an idempotency record and the handler's own writes in one
/// atomic request: either all of them apply or none does.
///
/// The engine above it ([`Idempotency::transact`](crate::Idempotency::transact)) decides what to
/// write and what a refusal means; a backend translates. [`super::DynamoDbBackend`] implements it
/// with `TransactWriteItems`; [`super::InMemoryBackend`] with a lock, for unit tests.
pub trait TransactionalBackend: Backend {
    /// One of the handler's writes, in the store's own terms (DynamoDB:
    /// [`TransactWriteItem`](aws_sdk_dynamodb::types::TransactWriteItem)).
    type Write: Clone + Send + Sync + std::fmt::Debug + 'static;

    /// Checks `record` and `writes` against the store's limits (actions and bytes per
    /// transaction, bytes per item), without a request: the record as an action of its own, or,
    /// `carrier` given, its attributes in the item of `writes[carrier]`
    /// ([`commit_carried`](Self::commit_carried)).
    fn check(
        &self,
        record: &IdempotencyRecord,
        writes: &[Self::Write],
        carrier: Option<usize>,
    ) -> Result<(), LimitError>;

    /// Writes `record` (completed) and `writes` in one atomic request, unless a record that is
    /// not replaceable holds the key ([`state::commit`](crate::state::commit) at `now_ms`); then returns
    /// [`Commit::Exists`] with the stored record, from the same request. A write refused by its
    /// own condition whose item carries a live record of `record`'s payload (a record that rode
    /// on that item: the key completed inline, or carried) is [`Commit::Exists`] with that
    /// record too: the work was done.
    ///
    /// `token` is the same for every try of one attempt, and the request is the same: a store
    /// that keeps request tokens (DynamoDB's `ClientRequestToken`, for 10 minutes) applies a
    /// repeated call once, so a try whose answer was lost is safe to repeat.
    ///
    /// A refusal is an answer ([`Commit::Rejected`], [`Commit::TooLarge`]) only when the
    /// message's own data decides it: a write's own condition, or data over a size limit. A
    /// refusal for the store's configuration or the code (a table that does not exist, a key
    /// schema the request does not match, an invalid expression) is
    /// [`StoreError::Misconfigured`], and a failure to run the request (unreachable, throttled,
    /// denied) another [`StoreError`]: the engine never makes those permanent.
    fn commit(
        &self,
        record: &IdempotencyRecord,
        writes: &[Self::Write],
        token: &str,
        now_ms: i64,
    ) -> impl Future<Output = Result<Commit, StoreError>> + Send;

    /// [`commit`](Self::commit) with the record on `writes[carrier]` instead of beside the
    /// writes ([`Transaction::carry_record`](crate::transaction::Transaction::carry_record)):
    /// the completed record's attributes are added to that write's item, and to its condition
    /// the record's own. A carrier that writes its item whole (DynamoDB's `Put`, every
    /// [`MemoryWrite`](super::MemoryWrite)) never rewrites an item that carries a record,
    /// whatever its expiry ([`state::commit_on_item`](crate::state::commit_on_item)); an `Update`
    /// changes its item, and takes it while the record on it is replaceable (none, or one that
    /// has expired: [`state::commit`](crate::state::commit)). The answer, in [`Commit`]'s terms:
    ///
    /// - [`Commit::Committed`]: the writes, the carrier with the record on it.
    /// - [`Commit::Exists`]: the carrier's item carries a record that answers for the key (its
    ///   key set to `record.key`), from the same request: any record on a whole item; on an
    ///   updated item, a live record, or an expired one of `record`'s payload when the carrier's
    ///   own condition refused it (the work was done). Nothing was applied.
    /// - [`Commit::Rejected`]: a write's own condition failed (the carrier's too, when its item
    ///   carries no record that answers), or its item is over the size limit, as in `commit`.
    /// - [`Commit::TooLarge`], [`Commit::Contended`] and the errors: as in `commit`.
    ///
    /// A carrier the store cannot add a record to (DynamoDB: a `Delete` or a `ConditionCheck`;
    /// an index past the writes) is the code's error: [`StoreError::Misconfigured`].
    ///
    /// A commit of one write alone is the [inline mode](crate::inline): the record rides on the
    /// handler's one new item. A single write is atomic by itself, so a store may send it as
    /// one conditional write instead of a transaction (DynamoDB: one `PutItem` or `UpdateItem`,
    /// billed as the item alone, where a transaction bills each item twice).
    ///
    /// The default writes the record beside the writes, as [`commit`](Self::commit) does: a
    /// backend that cannot carry it is still exactly once, for the record's own action.
    fn commit_carried(
        &self,
        record: &IdempotencyRecord,
        writes: &[Self::Write],
        carrier: usize,
        token: &str,
        now_ms: i64,
    ) -> impl Future<Output = Result<Commit, StoreError>> + Send {
        let _ = carrier;
        self.commit(record, writes, token, now_ms)
    }

    /// Records a failed attempt at `record.key`: the record becomes failed with
    /// `record.last_error`, `record.payload_hash` and `record.expires_at`, and its attempts go
    /// up by one (they start again at 1 when the stored record had expired). Not applied while a
    /// record that is not replaceable holds the key ([`Failure::Exists`]).
    ///
    /// Fenced by `record.owner`, the attempt's token: a stored failed record that carries it is
    /// this failure, recorded by an earlier try whose answer was lost (an SDK retry), and is
    /// answered [`Failure::Recorded`] with its stored count, not counted again
    /// ([`state::record_failure`](crate::state::record_failure)).
    fn record_failure(
        &self,
        record: &IdempotencyRecord,
        now_ms: i64,
    ) -> impl Future<Output = Result<Failure, StoreError>> + Send;

    /// Why `write` is not the write of one new item that the store refuses once its item exists,
    /// or `None` when it is: what an [`InlinePut`](crate::inline::InlinePut) must carry, so that
    /// the work never runs twice whatever its record's expiry (DynamoDB: a `Put` on
    /// `attribute_not_exists` of an attribute it writes, as a [`NewItem`](super::NewItem) is; an
    /// `Update` would apply again once its record expires, and an unconditioned `Put` overwrites
    /// an item that carries no record). The engine asks before any request, and a write that is
    /// not one is refused as the code's error ([`StoreError::Misconfigured`]), never counted.
    ///
    /// The default says that the backend does not tell: implement it to take the inline mode.
    fn new_item_problem(&self, write: &Self::Write) -> Option<String> {
        let _ = write;
        Some("this backend does not say which of its writes refuse a second run".into())
    }

    /// The record that rides on the item `at` names, if that item exists and carries one, its key
    /// set to `key`: one read (DynamoDB: a strongly consistent `GetItem` of the item's key, the
    /// key of an `Update`, `Delete` or `ConditionCheck`, or the item of a `Put` that holds its
    /// key attributes alone). `None` when the item does not exist or carries no record.
    ///
    /// How a failed attempt of a key whose record rides on an item (the
    /// [inline mode](crate::inline), a [carried](crate::transaction::Transaction::carry_record)
    /// record) learns that another delivery did the work: the engine asks on the failure path
    /// only, when the batch wrapper knows where the message's item is
    /// ([`Inline::with_item_lookup`](crate::batch::Inline::with_item_lookup)), and answers a
    /// duplicate instead of counting the failure. The default finds nothing: a backend that
    /// writes every record beside the writes keeps them in the engine's table, where the failure
    /// finds them.
    fn record_on_item(
        &self,
        key: &str,
        at: &Self::Write,
    ) -> impl Future<Output = Result<Option<IdempotencyRecord>, StoreError>> + Send {
        let _ = (key, at);
        async { Ok(None) }
    }
}

impl<B: TransactionalBackend> TransactionalBackend for std::sync::Arc<B> {
    type Write = B::Write;

    fn check(
        &self,
        record: &IdempotencyRecord,
        writes: &[Self::Write],
        carrier: Option<usize>,
    ) -> Result<(), LimitError> {
        (**self).check(record, writes, carrier)
    }

    fn commit(
        &self,
        record: &IdempotencyRecord,
        writes: &[Self::Write],
        token: &str,
        now_ms: i64,
    ) -> impl Future<Output = Result<Commit, StoreError>> + Send {
        (**self).commit(record, writes, token, now_ms)
    }

    fn commit_carried(
        &self,
        record: &IdempotencyRecord,
        writes: &[Self::Write],
        carrier: usize,
        token: &str,
        now_ms: i64,
    ) -> impl Future<Output = Result<Commit, StoreError>> + Send {
        (**self).commit_carried(record, writes, carrier, token, now_ms)
    }

    fn record_failure(
        &self,
        record: &IdempotencyRecord,
        now_ms: i64,
    ) -> impl Future<Output = Result<Failure, StoreError>> + Send {
        (**self).record_failure(record, now_ms)
    }

    fn new_item_problem(&self, write: &Self::Write) -> Option<String> {
        (**self).new_item_problem(write)
    }

    fn record_on_item(
        &self,
        key: &str,
        at: &Self::Write,
    ) -> impl Future<Output = Result<Option<IdempotencyRecord>, StoreError>> + Send {
        (**self).record_on_item(key, at)
    }
}
