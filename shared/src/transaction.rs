//! Transactional mode: the idempotency record and the handler's own writes in one atomic request.
//!
//! When a handler's effects are writes to the store's database (a ledger entry, a balance, a
//! status), they and the idempotency record can commit together: the handler *returns* its
//! writes in a [`Transaction`] instead of making them, and
//! [`Idempotency::transact`](crate::Idempotency::transact) adds the record, written completed at once, with the condition that
//! no live record holds the key. On DynamoDB that is one `TransactWriteItems`:
//!
//! - **one request** per fresh record, the handler's writes included, and one per duplicate (the
//!   cancelled transaction returns the stored record, with its result); none for a duplicate the
//!   [local cache](crate::cache) knows;
//! - **no in-progress state and no lease**: nothing is written until everything is, so a crash at
//!   any point leaves either all of it or none of it, and a redelivery after a crash cannot apply
//!   the writes a second time;
//! - the handler's own conditions are its business: a write refused by its condition fails the
//!   record with [`TransactError::Rejected`], naming the write, and nothing is applied; unless
//!   the refused item carries a live record of the same payload (the key was completed on that
//!   item by the [inline mode](crate::inline), or carried): then it is a duplicate, answered by
//!   the same cancelled transaction (on DynamoDB every write asks for its item on a refusal,
//!   `ALL_OLD`, which costs nothing);
//! - only the message's own faults are permanent: an item over the store's size limit
//!   ([`TransactError::Limit`] before the request, [`TransactError::TooLarge`] or a
//!   [`Rejection`] for its size from the store). A request refused for a table (a key schema it
//!   does not match, a table that does not exist) or for the code is
//!   [`StoreError::Misconfigured`], and a failure to run it (throttling, an outage, access
//!   denied) another [`StoreError`]: retried by redelivery, never dead-lettered.
//!
//! The handler runs before the store is asked (the transaction needs its writes), so it must make
//! no effects of its own: a duplicate's writes are built and dropped. Effects that cannot be
//! writes of the transaction (a message to send) belong after it, and happen at least once: see
//! [`RecordHandlerExt::and_then`](crate::batch::RecordHandlerExt::and_then).
//!
//! A failed attempt is recorded as before (a failed record with the error and the attempt
//! count, on the failure path only: on DynamoDB one `UpdateItem`, two when the key's record must
//! be replaced, expired or failed with another payload, three at most when it is deleted between
//! them), so the attempt budget and the backoff work the same in both modes. The update is
//! fenced by the attempt's owner token: an SDK retry of it, whose first answer was lost, counts
//! the failure once.
//!
//! Only a [`TransactionalBackend`] offers this mode: [`DynamoDbBackend`](crate::store::DynamoDbBackend)
//! (feature `dynamodb`), and [`InMemoryBackend`](crate::store::InMemoryBackend) for unit tests
//! (always there, so the mode can be tried and tested without DynamoDB). Over a backend that
//! cannot commit transactions, `transact` does not compile (`run` does):
//!
//! ```compile_fail,E0599
//! use lambda_idempotency::state::IdempotencyRecord;
//! use lambda_idempotency::store::{Backend, Put, StoreError, Update, Updated};
//! use lambda_idempotency::transaction::Transaction;
//! use lambda_idempotency::Idempotency;
//!
//! struct LeaseOnly;
//!
//! impl Backend for LeaseOnly {
//!     async fn put(&self, _: &IdempotencyRecord, _: i64) -> Result<Put, StoreError> { unimplemented!() }
//!     async fn get(&self, _: &str, _: i64) -> Result<Option<IdempotencyRecord>, StoreError> { unimplemented!() }
//!     async fn update(&self, _: &str, _: &Update, _: i64) -> Result<Updated, StoreError> { unimplemented!() }
//!     async fn delete(&self, _: &str) -> Result<(), StoreError> { unimplemented!() }
//! }
//!
//! async fn charge() {
//!     let engine = Idempotency::new(LeaseOnly);
//!     let work = || async { Ok::<_, std::io::Error>(Transaction::<(), ()>::new(())) };
//!     let _ = engine.transact("k", b"", None, work).await; // LeaseOnly: !TransactionalBackend
//! }
//! ```
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use lambda_idempotency::{Idempotency, store::{InMemoryBackend, MemoryWrite}};
//! use lambda_idempotency::transaction::{Transacted, Transaction};
//! use std::sync::Arc;
//!
//! let backend = Arc::new(InMemoryBackend::default());
//! let engine = Idempotency::new(backend.clone());
//! let charge = || async {
//!     Ok::<_, std::io::Error>(
//!         Transaction::new("entry-1").write(MemoryWrite::put("ledger", "entry-1", "500")),
//!     )
//! };
//! let first = engine.transact("payment-1", b"{\"amount\":500}", None, charge).await.unwrap();
//! let again = engine.transact("payment-1", b"{\"amount\":500}", None, charge).await.unwrap();
//! assert_eq!(first, Transacted::Committed("entry-1"));
//! assert_eq!(again, Transacted::Duplicate { stored: Some("\"entry-1\"".into()) });
//! assert_eq!(backend.item("ledger", "entry-1").as_deref(), Some("500"));
//! # });
//! ```

use std::fmt;
use std::time::Duration;

#[cfg(feature = "dynamodb")]
use aws_sdk_dynamodb::types::{ConditionCheck, Delete, Put, TransactWriteItem, Update};

use crate::lease::{AcquireError, Acquired};
use crate::payload::{PayloadHash, sha256_hex};
use crate::state::{IdempotencyRecord, Status, classify, classify_on_item};
use crate::store::{Commit, Failure, LimitError, StoreError, TransactionalBackend};
use crate::time::{Clock, Deadline, millis};

/// Tries of one commit while the store answers that it cannot run it now, or fails.
pub const COMMIT_TRIES: u32 = 5;

/// First pause between two tries of a commit; it doubles after each.
pub(crate) const COMMIT_BACKOFF: Duration = Duration::from_millis(25);

/// What a handler returns in transactional mode: its output (stored as the record's result) and
/// the writes to commit with the record.
#[derive(Debug, Clone, PartialEq)]
pub struct Transaction<T, W> {
    output: T,
    writes: Vec<W>,
    carrier: Option<usize>,
    /// An [`InlinePut`](crate::inline::InlinePut)'s: its one write must be a new item's.
    new_item: bool,
}

impl<T, W> Transaction<T, W> {
    /// A transaction with `output` and no writes yet.
    pub fn new(output: T) -> Self {
        Self {
            output,
            writes: Vec::new(),
            carrier: None,
            new_item: false,
        }
    }

    /// The idempotency record rides on the last write added instead of being an action of its
    /// own: its attributes are added to that write's item, and its condition (no live record on
    /// the item) to that write's own condition. The item that refuses a second run of the
    /// work (a payment marked charged, an order marked shipped) then carries the proof, and
    /// the transaction is the writes the work needs and nothing more: one action fewer, 2 write
    /// units less on DynamoDB. See [`TransactionalBackend::commit_carried`] for what a refusal
    /// means. Without a write yet, nothing changes.
    ///
    /// The record's attributes are the inline mode's
    /// ([`DynamoDbBackend::inline_attributes`](crate::store::DynamoDbBackend::inline_attributes):
    /// `idem_status`, `idem_expiration`, ... on DynamoDB), at most 184 bytes and the result.
    /// What follows from the record living on the item, as in the [inline mode](crate::inline):
    ///
    /// - **One key, one item.** The carrier's item must follow from the idempotency key: a
    ///   record another key left on it would answer for this key.
    /// - **A `Put` carrier never rewrites an item that carries a record**, whatever its expiry:
    ///   the item is the work's effect, and its record answers (the same payload a duplicate,
    ///   another a mismatch), as in the inline mode. An item without a record is for the put's
    ///   own condition (`attribute_not_exists` of its key, for a new item).
    /// - **An `Update` carrier's own condition refuses a second run.** The record covers the item
    ///   while it lives; the engine's table does not know it. After a handler moves to a carried
    ///   record (its earlier records are in the engine's table), and once a carried record
    ///   expires, the carrier's condition is what stops the work running again (a payment that is
    ///   no longer `accepted`); when it refuses and the item carries this payload's expired
    ///   record, the answer is a duplicate.
    /// - **Failures are counted in the engine's table**: a failed attempt has no write to ride
    ///   on, and the commit does not overwrite its failed record. A success ends the count all
    ///   the same: when the batch wrapper's read found failed attempts, the commit is followed by
    ///   one conditional update that sets them back to 0 (best effort), so that a duplicate whose
    ///   handler fails before it gives its writes (a failed attempt, since the engine's table
    ///   does not know the key completed) starts a count of its own. A direct call of
    ///   [`transact`](crate::Idempotency::transact) knows no attempt and leaves the count.
    /// - **Limits**: the store's checks before the request count the record as an action of its
    ///   own, and not in the carrier's item size.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use lambda_idempotency::{Idempotency, store::{InMemoryBackend, MemoryWrite}};
    /// use lambda_idempotency::transaction::{Transacted, Transaction};
    /// use std::sync::Arc;
    ///
    /// let backend = Arc::new(InMemoryBackend::default());
    /// let engine = Idempotency::new(backend.clone());
    /// let ship = || async {
    ///     Ok::<_, std::io::Error>(
    ///         Transaction::new("parcel-1")
    ///             .write(MemoryWrite::put("parcels", "parcel-1", "1 box"))
    ///             .write(MemoryWrite::put("orders", "order-1", "shipped"))
    ///             .carry_record(),
    ///     )
    /// };
    /// let first = engine.transact("order-1", b"{}", None, ship).await.unwrap();
    /// let again = engine.transact("order-1", b"{}", None, ship).await.unwrap();
    /// assert_eq!(first, Transacted::Committed("parcel-1"));
    /// assert_eq!(again, Transacted::Duplicate { stored: Some("\"parcel-1\"".into()) });
    /// assert!(backend.records().is_empty(), "nothing beside the writes");
    /// assert!(backend.item_record("orders", "order-1").is_some(), "the order carries it");
    /// # });
    /// ```
    pub fn carry_record(mut self) -> Self {
        self.carrier = self.writes.len().checked_sub(1);
        self
    }

    /// The write the record rides on ([`carry_record`](Self::carry_record)), if any.
    pub fn carrier(&self) -> Option<usize> {
        self.carrier
    }

    /// Adds a write.
    pub fn write(mut self, write: impl Into<W>) -> Self {
        self.writes.push(write.into());
        self
    }

    /// Adds a write in place.
    pub fn push(&mut self, write: impl Into<W>) {
        self.writes.push(write.into());
    }

    /// The output.
    pub fn output(&self) -> &T {
        &self.output
    }

    /// The writes, in order.
    pub fn writes(&self) -> &[W] {
        &self.writes
    }

    /// The output and the writes.
    pub fn into_parts(self) -> (T, Vec<W>) {
        (self.output, self.writes)
    }

    /// The output, the writes and the carrier.
    /// An [`InlinePut`](crate::inline::InlinePut)'s transaction: its one write must be the write
    /// of a new item ([`TransactionalBackend::new_item_problem`](crate::store::TransactionalBackend::new_item_problem)).
    pub(crate) fn of_new_item(mut self) -> Self {
        self.new_item = true;
        self
    }

    /// True for an [`InlinePut`](crate::inline::InlinePut)'s transaction.
    pub(crate) fn is_new_item(&self) -> bool {
        self.new_item
    }

    pub(crate) fn into_carried_parts(self) -> (T, Vec<W>, Option<usize>) {
        (self.output, self.writes, self.carrier)
    }
}

/// The DynamoDB actions, as [`TransactWriteItem`]s.
#[cfg(feature = "dynamodb")]
#[cfg_attr(docsrs, doc(cfg(feature = "dynamodb")))]
impl<T> Transaction<T, TransactWriteItem> {
    /// Adds a `Put`.
    pub fn put(self, put: Put) -> Self {
        self.write(TransactWriteItem::builder().put(put).build())
    }

    /// Adds an `Update` (with its condition, if it has one).
    pub fn update(self, update: Update) -> Self {
        self.write(TransactWriteItem::builder().update(update).build())
    }

    /// Adds an `Update` of an existing item that carries the idempotency record
    /// ([`carry_record`](Self::carry_record)).
    pub fn update_carrying_record(self, update: Update) -> Self {
        self.update(update).carry_record()
    }

    /// Adds a `Delete`.
    pub fn delete(self, delete: Delete) -> Self {
        self.write(TransactWriteItem::builder().delete(delete).build())
    }

    /// Adds a `ConditionCheck`: a condition on another item that must hold for the commit.
    pub fn condition_check(self, check: ConditionCheck) -> Self {
        self.write(TransactWriteItem::builder().condition_check(check).build())
    }
}

/// What [`Idempotency::transact`](crate::Idempotency::transact) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transacted<T> {
    /// The record and the handler's writes were committed together; here is the output.
    Committed(T),
    /// The key was completed before: nothing was written.
    Duplicate {
        /// The stored result (JSON), if one was stored.
        stored: Option<String>,
    },
}

/// What [`Idempotency::peek`](crate::Idempotency::peek) found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peeked {
    /// The key is completed: a duplicate, with the stored result (JSON), if one was stored.
    Duplicate {
        /// The stored result.
        result: Option<String>,
    },
    /// An attempt of the lease mode holds the key until then (epoch milliseconds).
    InProgress {
        /// When its lease ends.
        lease_until_ms: i64,
    },
    /// The key may be taken: its failed attempts so far (0 without a record, or after expiry).
    Attempts(u32),
}

/// One of the handler's writes, refused by the store for what it holds: its own condition
/// failed, or its item is over the store's size limit. (A write refused for its table is
/// [`StoreError::Misconfigured`], never a rejection.)
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("write {index} of the transaction ({write}) was refused: {code}: {message}")]
pub struct Rejection {
    /// Its position among the handler's writes, from 0.
    pub index: usize,
    /// The write: operation, table and key.
    pub write: String,
    /// The store's code (DynamoDB: `ConditionalCheckFailed`, or `ValidationError` for an item
    /// over the size limit).
    pub code: String,
    /// The store's message.
    pub message: String,
}

impl Rejection {
    /// True when the write's own condition failed; false when its data is over the store's
    /// size limit (a retry cannot succeed).
    pub fn is_condition(&self) -> bool {
        self.code == "ConditionalCheckFailed"
    }
}

/// Why [`Idempotency::transact`](crate::Idempotency::transact) committed nothing. `attempts` are the key's failed attempts
/// after this one, when the failure could be recorded.
#[derive(Debug, thiserror::Error)]
pub enum TransactError<E> {
    /// The handler failed before giving its writes.
    #[error("{error}")]
    Failed {
        /// Its error.
        error: E,
        /// Failed attempts of the key, this one included.
        attempts: Option<u32>,
    },
    /// One of the handler's writes was refused by its own condition or for its size; nothing
    /// was applied.
    #[error("{rejection}")]
    Rejected {
        /// Which write, and why.
        rejection: Rejection,
        /// Failed attempts of the key, this one included.
        attempts: Option<u32>,
    },
    /// The transaction is over the store's limits: found before any request, and not recorded
    /// (a retry cannot succeed).
    #[error("{error}")]
    Limit {
        /// Which limit.
        error: LimitError,
        /// Always `None`: the failure is not recorded.
        attempts: Option<u32>,
    },
    /// Another attempt holds the key (an attempt of the lease mode, on the same key).
    #[error("another attempt is in progress until {lease_until_ms} (epoch ms)")]
    InProgress {
        /// When its lease ends, epoch milliseconds.
        lease_until_ms: i64,
    },
    /// The key was first used with another payload.
    #[error("idempotency key `{key}` was already used with a different payload")]
    PayloadMismatch {
        /// The key.
        key: String,
        /// The state of the record that holds the key.
        stored: crate::state::Status,
    },
    /// The store refused the request for the size of its data (DynamoDB's `ValidationException`
    /// saying an item, or a key, is over its limit): nothing was applied, and a retry of the same
    /// message cannot succeed. Found by the store; [`TransactError::Limit`] is found before the
    /// request. Any other refusal is the store's configuration or the code, never the
    /// message's: [`TransactError::Store`] with [`StoreError::Misconfigured`].
    #[error("the transaction is too large for the store: {message}")]
    TooLarge {
        /// What the store said.
        message: String,
        /// Failed attempts of the key, this one included.
        attempts: Option<u32>,
    },
    /// The store could not run the transaction now (conflicts, throttling), on every try.
    #[error("the transaction could not run after {tries} tries: {reason}")]
    Contended {
        /// Tries made.
        tries: u32,
        /// The last reason the store gave.
        reason: String,
    },
    /// The store failed, or refused the request for its configuration
    /// ([`StoreError::Misconfigured`]: returned at once, without another try). Never the
    /// message's fault.
    #[error(transparent)]
    Store(StoreError),
}

impl<E> TransactError<E> {
    /// The key's failed attempts after this one, when a failure was recorded.
    pub fn attempts(&self) -> Option<u32> {
        match self {
            TransactError::Failed { attempts, .. }
            | TransactError::Rejected { attempts, .. }
            | TransactError::TooLarge { attempts, .. }
            | TransactError::Limit { attempts, .. } => *attempts,
            _ => None,
        }
    }
}

/// What recording a failure found.
pub(crate) enum Noted {
    /// Recorded, or not (then logged): the key's failed attempts when known.
    Attempts(Option<u32>),
    /// The key was completed meanwhile, or holds another payload, or is held.
    Answer(Result<Acquired, AcquireError>),
}

/// The `ClientRequestToken` of one try: the same for every try of one attempt with the same
/// request, different for every attempt and after a definite cancellation.
pub(crate) fn request_token(stored_key: &str, owner: &str, round: u32) -> String {
    // The attempt's owner token (32 random hex digits) names the attempt alone, and the round
    // follows it; a token that would not fit DynamoDB's 36 characters is hashed instead.
    let token = format!("{owner}-{round}");
    if !owner.is_empty() && token.len() <= 36 {
        return token;
    }
    sha256_hex(format!("{stored_key}\n{owner}\n{round}").as_bytes())[..32].to_owned()
}

/// One attempt at a key in transactional mode, as it commits or records its failure.
pub(crate) struct Attempt<'a, B> {
    pub(crate) backend: &'a B,
    pub(crate) clock: &'a dyn Clock,
    pub(crate) key: &'a str,
    pub(crate) payload_hash: &'a PayloadHash,
}

impl<B: TransactionalBackend> Attempt<'_, B> {
    /// Commits `record` with `writes`, trying again while the store cannot run the transaction
    /// now or fails, at most [`COMMIT_TRIES`] times and while `finish_by` leaves room.
    pub(crate) async fn commit<T, E: fmt::Display>(
        &self,
        record: &IdempotencyRecord,
        output: T,
        writes: &[B::Write],
        carrier: Option<usize>,
        finish_by: Option<Deadline>,
        now_ms: i64,
    ) -> Result<Transacted<T>, TransactError<E>> {
        let mut delay = COMMIT_BACKOFF;
        let mut round = 0;
        let mut tries = 0;
        loop {
            tries += 1;
            let token = request_token(&record.key, record.owner.as_deref().unwrap_or(""), round);
            let committed = match carrier {
                Some(carrier) => {
                    self.backend
                        .commit_carried(record, writes, carrier, &token, now_ms)
                        .await
                }
                None => self.backend.commit(record, writes, &token, now_ms).await,
            };
            let last = match committed {
                Ok(Commit::Contended { reason }) => {
                    // Not applied, or (a try with this token still running) applied by that try:
                    // the next try is a new request with a new token, and should the earlier
                    // one have committed, it finds this attempt's own record (above).
                    round += 1;
                    TransactError::Contended { tries, reason }
                }
                // Refused for a table or the code: nothing was applied, and no try can succeed
                // before the configuration is fixed. Not recorded as a failed attempt: the
                // message is not at fault, and its budget stays whole for after the fix.
                Err(e @ StoreError::Misconfigured { .. }) => {
                    return Err(TransactError::Store(e));
                }
                // The answer may be lost after a commit: the next try repeats the token.
                Err(e) => TransactError::Store(e),
                Ok(answer) => {
                    let on_item = carrier.is_some();
                    return self.conclude(record, output, answer, on_item, now_ms).await;
                }
            };
            let room =
                finish_by.is_none_or(|f| f.epoch_ms() - self.clock.now_ms() > 2 * millis(delay));
            if tries >= COMMIT_TRIES || !room {
                return Err(last);
            }
            tracing::warn!(key = self.key, error = %last, tries, "transaction not committed; trying again");
            // Up to a half more, at random: writers contending for one item do not retry in step.
            let spread = delay.as_millis() as u64 / 2;
            let jitter = Duration::from_millis(crate::backoff::jitter_u64() % (spread + 1));
            tokio::time::sleep(delay + jitter).await;
            delay *= 2;
        }
    }

    /// What the store's answer to a write of `record` means: the output when it was written
    /// (or found written by this attempt's own earlier try, whose answer was lost), the stored
    /// record's answer when it held the key, and a recorded failure when a write was refused.
    /// `on_item` when the record rides on an item (inline, carried): a record found there is
    /// [`classify_on_item`]'s, whatever its expiry. [`Commit::Contended`] is an error after one
    /// try: [`commit`](Self::commit) tries again before it comes here.
    pub(crate) async fn conclude<T, E>(
        &self,
        record: &IdempotencyRecord,
        output: T,
        answer: Commit,
        on_item: bool,
        now_ms: i64,
    ) -> Result<Transacted<T>, TransactError<E>> {
        match answer {
            Commit::Committed => Ok(Transacted::Committed(output)),
            // This attempt's own record: an earlier try committed, and its answer was lost.
            Commit::Exists(existing) if existing.owner == record.owner => {
                Ok(Transacted::Committed(output))
            }
            Commit::Exists(existing) => {
                let blocked = if on_item {
                    classify_on_item(existing, self.payload_hash, now_ms)
                } else {
                    classify(existing, self.payload_hash, now_ms)
                };
                self::answer(Acquired::blocked(self.key, blocked))
            }
            Commit::Rejected {
                index,
                write,
                code,
                message,
            } => {
                let rejection = Rejection {
                    index,
                    write,
                    code,
                    message,
                };
                let noted = self.note_failure(record, &rejection.to_string()).await;
                settle(noted, |attempts| TransactError::Rejected {
                    rejection,
                    attempts,
                })
            }
            Commit::TooLarge { message } => {
                let noted = self.note_failure(record, &message).await;
                settle(noted, |attempts| TransactError::TooLarge {
                    message,
                    attempts,
                })
            }
            Commit::Contended { reason } => Err(TransactError::Contended { tries: 1, reason }),
        }
    }

    /// Records a failed attempt of `record`'s key with `error`.
    pub(crate) async fn note_failure(&self, record: &IdempotencyRecord, error: &str) -> Noted {
        let now_ms = self.clock.now_ms();
        let failed = IdempotencyRecord {
            status: Status::Failed,
            last_error: Some(error.to_owned()),
            result: None,
            result_omitted: false,
            ..record.clone()
        };
        match self.backend.record_failure(&failed, now_ms).await {
            Ok(Failure::Recorded { attempts }) => Noted::Attempts(Some(attempts)),
            Ok(Failure::Exists(existing)) => Noted::Answer(Acquired::blocked(
                self.key,
                classify(existing, self.payload_hash, now_ms),
            )),
            Err(e) => {
                tracing::warn!(key = self.key, error = %e, "could not record the failure");
                Noted::Attempts(None)
            }
        }
    }
}

/// The answer for a key found completed, held or of another payload.
pub(crate) fn answer<T, E>(
    found: Result<Acquired, AcquireError>,
) -> Result<Transacted<T>, TransactError<E>> {
    match found {
        Ok(Acquired::Duplicate { result, .. }) => Ok(Transacted::Duplicate { stored: result }),
        Ok(Acquired::InProgress { lease_until_ms }) => {
            Err(TransactError::InProgress { lease_until_ms })
        }
        // `classify` never starts an attempt.
        Ok(Acquired::Started(_)) => unreachable!("a stored record never starts an attempt"),
        Err(AcquireError::PayloadMismatch { key, stored }) => {
            Err(TransactError::PayloadMismatch { key, stored })
        }
        Err(AcquireError::Store(e)) => Err(TransactError::Store(e)),
    }
}

/// The result of a failed attempt: its error with the attempts, or the answer the store gave
/// instead (a duplicate stays a duplicate even when its handler now fails).
pub(crate) fn settle<T, E>(
    noted: Noted,
    error: impl FnOnce(Option<u32>) -> TransactError<E>,
) -> Result<Transacted<T>, TransactError<E>> {
    match noted {
        Noted::Attempts(attempts) => Err(error(attempts)),
        // A failed record of the same payload is what this attempt would have written.
        Noted::Answer(Ok(Acquired::InProgress { .. })) => Err(error(None)),
        Noted::Answer(found) => answer(found),
    }
}

#[cfg(test)]
mod tests;
