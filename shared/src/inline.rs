//! Inline mode: the idempotency record rides on the handler's one new item, in one conditional
//! write.
//!
//! When a handler's whole effect is the write of **one new item** (a ledger entry, a receipt, an
//! order line), the item itself can carry the proof that the work was done: the handler returns
//! the item in an [`InlinePut`] instead of writing it, and
//! [`Idempotency::put_inline`](crate::Idempotency::put_inline) writes it with the completed
//! record's attributes on it (status, expiry, payload hash, owner token, and the result when there
//! is one), on the condition that the item does not exist yet: the transition
//! [`state::commit_on_item`](crate::state::commit_on_item). On DynamoDB that is one `PutItem` of a
//! [`NewItem`](crate::store::NewItem) with `attribute_not_exists(key)` and
//! `ReturnValuesOnConditionCheckFailure=ALL_OLD`.
//!
//! It is not a mechanism of its own: an [`InlinePut`] is the
//! [`Transaction`] of its one write, which [carries](Transaction::carry_record) the record, and
//! the engine commits it as the transactional mode commits any transaction
//! ([`TransactionalBackend::commit_carried`](crate::store::TransactionalBackend::commit_carried)).
//! A commit of one write is atomic by itself, so the backend sends it as one conditional write
//! instead of a transaction:
//!
//! - **One request per fresh record**, and the write units of the item alone plus its record's
//!   attributes (at most [`inline_record_bytes`](crate::store::inline_record_bytes), 184 bytes,
//!   and the result): 1 WCU while the item stays within 1 KB, the floor of a handler with no
//!   idempotency at all, where the lease mode adds 2 WCU of its own and a transaction bills 2
//!   per item, its record one of them.
//! - **One refused write per duplicate**, without a read: the refusal returns the stored item,
//!   whose record answers ([`classify_on_item`](crate::state::classify_on_item)): the same
//!   payload is a duplicate (its stored result given back), another payload a mismatch
//!   (permanent). None for a duplicate the [local cache](crate::cache) knows. DynamoDB bills a
//!   refused write as a write: 1 WCU.
//! - **No in-progress state and no lease**: the item and its record are one write, so a crash at
//!   any point leaves both or neither.
//! - **An item is never rewritten.** The item is the work's effect and the user's data: a later
//!   delivery never replaces it, whatever its record's expiry. Once the record has expired, the
//!   same payload is still a duplicate and another payload still a mismatch, each for one refused
//!   write; the expiry bounds only what the [local cache](crate::cache) keeps. The expiry is an
//!   attribute of the item: point the table's TTL at it only if the items may be deleted when
//!   their records expire (a deleted item is written again by the next delivery of its key).
//!
//! # Failures, attempts and fencing
//!
//! A failed attempt has no item to carry its record. It is recorded as in the transactional
//! mode, in the engine's own table: a small *failed* record under the idempotency key, with the
//! error and the attempt count ([`TransactionalBackend::record_failure`](crate::store::TransactionalBackend::record_failure)),
//! on the failure path only. On DynamoDB that costs one `UpdateItem` when the key has no record
//! there or a live failed record of the same payload; two when the record there must be
//! replaced (expired, or failed with another payload: the first, conditional, update is refused
//! and a second one writes); three at most, when that record is deleted between the two. A
//! failure found by the write (an item without a record) costs that refused write first; a
//! failure that finds the key completed there instead answers a duplicate. So the attempt
//! budget, the backoff and the dead-letter queue work as in the other modes, and a failed record
//! never blocks anything: the
//! next delivery of the same payload runs again with its attempts counted; a corrected payload
//! after a failed one runs, its attempts starting again at 1 should it fail too (the failed
//! record is replaceable by another payload, as everywhere). A handler whose item is refused
//! because the item exists *without* a record (written by something else) fails the same way
//! ([`TransactError::Rejected`](crate::transaction::TransactError::Rejected)): retried under the attempt budget. An item over DynamoDB's size
//! limit is permanent ([`TransactError::Limit`](crate::transaction::TransactError::Limit) found before the request, or a rejection for its
//! size from the store).
//!
//! A success ends nothing: it costs its one write, whatever failed before it. The failed record
//! it leaves in the engine's table blocks nothing, and a failure that comes after the key's work
//! is done is told by the item itself. With the batch wrapper's item lookup
//! ([`Inline::with_item_lookup`](crate::batch::Inline::with_item_lookup), or
//! [`ConsumerBuilder::with_item_lookup`](crate::consumer::ConsumerBuilder::with_item_lookup)):
//! where the message's item is, from its key and the message), a failed attempt reads that item
//! before it is counted ([`TransactionalBackend::record_on_item`](crate::store::TransactionalBackend::record_on_item),
//! one `GetItem` on the failure path only): an item that carries the key's record means another
//! delivery did the work, and the message is a duplicate (another payload: a mismatch), never a
//! failure towards the attempt budget. So a key whose work is done is never dead-lettered for a
//! later failure, whatever the order of deliveries: message A failing four times, message B of
//! the same body succeeding, then message C failing once is a duplicate for C, not a fifth
//! attempt; the same when the invocation that wrote the item ended before its message was
//! deleted. Without a lookup, the engine's table does not know the item: such a failure
//! continues the count the earlier ones left. [`Idempotency::put_inline`](crate::Idempotency::put_inline)
//! called directly knows no item to read. A redelivery
//! (receive count above 1) goes straight to the write, as a first delivery does, so a redelivered
//! duplicate costs one refused write: the batch wrapper ([`Inline`](crate::batch::Inline)) tells
//! its handler the receive count as its attempt, and the store counts the failed attempts that
//! decide the budget. With [`Inline::with_attempts_read`](crate::batch::Inline::with_attempts_read)
//! a redelivery reads the failed record first, as the transactional mode does, so its handler is
//! told the store's attempt; that read cannot see the item, so a redelivered duplicate then costs
//! the read and the refused write.
//!
//! Fencing is the write's own condition: with no lease there is no late completion to fence
//! off. An SDK retry of this attempt's own write, whose first answer was lost, finds the item
//! carrying this attempt's owner token and answers as written; an SDK retry of its failure's
//! update finds the failed record carrying that token, and the failure is counted once.
//!
//! # Modes on one key
//!
//! A handler moved here from the transactional mode, or from the lease mode, finds its earlier
//! records where that mode wrote them, in the engine's table: the item written then carries no
//! record and refuses the write, and the failure the engine would record finds the key's completed
//! record in its table instead, and answers a duplicate with its stored result (two requests),
//! until that record expires. Where the earlier mode's handler left no such item, nothing refuses
//! the write: the inline write reads nothing else, so it writes the item (with
//! [`Inline::with_attempts_read`](crate::batch::Inline::with_attempts_read), a redelivery's read
//! finds the completed record first). A lease that another mode's attempt holds is not seen either.
//!
//! The other way (a rollback, or a deployment where both run): the transactional mode's write of
//! the item, refused by its own condition (`attribute_not_exists` of its key), returns the item,
//! and a live record of the same payload on it is a duplicate, for the one cancelled transaction;
//! an expired record, or another payload's, leaves the refusal to the write's own condition. The
//! lease mode reads only the engine's table: it cannot see a record on an item, and takes the key
//! again; its handler's own write must refuse the item.
//!
//! # What the inline mode cannot carry
//!
//! Only the write of one **new** item carries its record. A handler whose effect is several
//! items, or an update of an item that exists (a balance, a status), keeps the
//! [transactional mode](crate::transaction): its writes and the record in one transaction. The
//! item's key must follow from the idempotency key (one key, one item): a second key that writes
//! the same item is answered by the record the item carries (the record on an item does not name
//! its key).
//!
//! The handler runs before the store is asked (the write needs its item), so it must make no
//! effects of its own, as in the transactional mode; effects that are not the item (a message to
//! send) go in [`and_then`](crate::batch::RecordHandlerExt::and_then), at least once. A
//! duplicate whose handler fails before it gives its item is a failed attempt: the engine's table
//! does not know the item exists.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use lambda_idempotency::inline::InlinePut;
//! use lambda_idempotency::store::{InMemoryBackend, MemoryWrite};
//! use lambda_idempotency::transaction::Transacted;
//! use lambda_idempotency::Idempotency;
//! use std::sync::Arc;
//!
//! let backend = Arc::new(InMemoryBackend::default());
//! let engine = Idempotency::new(backend.clone());
//! let receipt = || async {
//!     Ok::<_, std::io::Error>(InlinePut::new("r-1", MemoryWrite::put_if_absent("receipts", "r-1", "500")))
//! };
//! let first = engine.put_inline("payment-1", b"{\"amount\":500}", receipt).await.unwrap();
//! let again = engine.put_inline("payment-1", b"{\"amount\":500}", receipt).await.unwrap();
//! assert_eq!(first, Transacted::Committed("r-1"));
//! assert_eq!(again, Transacted::Duplicate { stored: Some("\"r-1\"".into()) });
//! assert_eq!(backend.item("receipts", "r-1").as_deref(), Some("500"));
//! assert!(backend.records().is_empty(), "the record is on the item, not beside it");
//! # });
//! ```

use crate::transaction::Transaction;

/// What a handler returns in inline mode: its output (stored as the record's result, on the
/// item) and its one new item.
#[derive(Debug, Clone, PartialEq)]
pub struct InlinePut<T, I> {
    output: T,
    item: I,
}

impl<T, I> InlinePut<T, I> {
    /// `item`, written with the record, and `output`. The item is the write of one new item,
    /// which the store refuses once the item exists, so that the work never runs twice whatever
    /// its record's expiry: a DynamoDB [`NewItem`](crate::store::NewItem) (a `Put` on
    /// `attribute_not_exists` of its key, which the in-memory backend writes too, so that a
    /// handler's unit test runs it unchanged), or the in-memory
    /// [`MemoryWrite::put_if_absent`](crate::store::MemoryWrite::put_if_absent). Any other write
    /// of the backend ([`TransactionalBackend::Write`](crate::store::TransactionalBackend::Write):
    /// an `Update`, a `Put` without that condition) is refused before any request, as the code's
    /// error ([`StoreError::Misconfigured`](crate::store::StoreError::Misconfigured), naming
    /// the write: [`TransactionalBackend::new_item_problem`](crate::store::TransactionalBackend::new_item_problem)),
    /// never counted as an attempt and never dead-lettered.
    pub fn new(output: T, item: I) -> Self {
        Self { output, item }
    }

    /// The output.
    pub fn output(&self) -> &T {
        &self.output
    }

    /// The item.
    pub fn item(&self) -> &I {
        &self.item
    }

    /// The output and the item.
    pub fn into_parts(self) -> (T, I) {
        (self.output, self.item)
    }
}

/// The inline mode is the one-write case of a commit that carries its record: the item, its
/// record on it ([`Transaction::carry_record`]).
impl<T, I, W> From<InlinePut<T, I>> for Transaction<T, W>
where
    I: Into<W>,
{
    fn from(put: InlinePut<T, I>) -> Self {
        Transaction::new(put.output)
            .write(put.item)
            .carry_record()
            .of_new_item()
    }
}
