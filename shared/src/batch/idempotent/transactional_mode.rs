//! The transactional mode of the [`Idempotent`] wrapper ([`Transactional`]): a handler whose DynamoDB writes commit with its idempotency
//! record, in one request (see [`crate::transaction`]).

use serde::Serialize;

use super::{Deduplicated, Idempotent, Mode, key_and_hash};
use crate::Idempotency;
use crate::batch::handler::HandlerOutput;
use crate::batch::lookup::ItemLookup;
use crate::batch::{RecordContext, RecordHandler};
use crate::error::RecordError;
use crate::lease::AcquireError;
use crate::payload::PayloadHash;
use crate::record::Record;
use crate::store::{StoreError, TransactionalBackend};
use crate::transaction::{Peeked, TransactError, Transacted, Transaction};

/// A handler whose writes commit with its idempotency record in one transaction: the inner
/// handler returns a [`Transaction`] (its output and its writes) instead of making the writes.
///
/// - A fresh key: the record (completed) and the writes commit together, in one request
///   ([`Deduplicated::Processed`]).
/// - A key completed before: nothing is written ([`Deduplicated::Duplicate`], with the stored
///   result), in one request, or none when the engine's [local cache](crate::cache) knows it.
/// - One of the writes refused by its own condition: [`RecordError::Handler`] naming the write;
///   a transaction over the store's limits, found before the request
///   ([`TransactError::Limit`]) or by the store (an item or a key over its size limit:
///   [`TransactError::TooLarge`], or a write rejected for its size): [`RecordError::Permanent`],
///   the message's own fault. Nothing is applied. The failure is recorded as for any failure of
///   the inner handler: the key's record becomes failed, with the error and the failed attempts
///   ([`RecordError::Attempt`]), and stays replaceable by the same payload (the next delivery
///   runs again); a limit is found before any request and not recorded.
/// - A request the store refuses for a table or the code, never the message (the idempotency
///   table or a write's table missing, or with another key schema; an invalid expression; two
///   actions on one item): [`RecordError::Store`] with [`StoreError::Misconfigured`], naming the
///   table and what does not match. Not permanent, not recorded as an attempt: the record is left
///   for redelivery and comes back once the configuration is fixed.
/// - The store unable to run the transaction on every try (conflicts, throttling):
///   [`RecordError::Store`] with [`StoreError::Contended`], retried by redelivery.
/// - Another payload under the key, the store unreachable, a key held by a lease of the other
///   mode: as with [`Idempotent`](super::Idempotent).
///
/// The inner handler runs before the commit and must make no effects of its own (a duplicate's
/// writes are dropped). A first delivery (receive count 1) goes straight to the commit, its
/// handler told [`attempt`](RecordContext::attempt) 1; a redelivery first reads the record
/// ([`Idempotency::peek`]): a duplicate is answered by that read (a record
/// [carried](crate::transaction::Transaction::carry_record) by one of the writes is not in the
/// engine's table: the cancelled commit answers it), and a retried record's handler
/// is told the store's count of failed attempts plus one, never a count that includes receives
/// it spent blocked behind another message of its FIFO group.
///
/// On DynamoDB (feature `dynamodb`):
///
/// ```
/// # #[cfg(feature = "dynamodb")] {
/// use lambda_idempotency::{Idempotency, batch::{json, RecordContext, RecordHandlerExt}, key::KeyConfig};
/// use lambda_idempotency::store::DynamoDbBackend;
/// use lambda_idempotency::transaction::Transaction;
/// use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
///
/// #[derive(serde::Deserialize)]
/// struct Payment { payment_id: String, amount_cents: i64 }
///
/// # fn handler(client: aws_sdk_dynamodb::Client) {
/// let handler = json(|p: Payment, _ctx: RecordContext| async move {
///     let entry = Put::builder()
///         .table_name("ledger")
///         .item("paymentId", AttributeValue::S(p.payment_id.clone()))
///         .item("amountCents", AttributeValue::N(p.amount_cents.to_string()))
///         .build()?;
///     Ok::<_, aws_sdk_dynamodb::error::BuildError>(
///         Transaction::<_, TransactWriteItem>::new(p.payment_id).put(entry),
///     )
/// })
/// .transactional(Idempotency::new(DynamoDbBackend::new(client, "idempotency")))
/// .with_keys(KeyConfig::json_pointer("/payment_id"));
/// # }
/// # }
/// ```
pub type Transactional<H, B> =
    Idempotent<H, B, TransactionalMode<<B as TransactionalBackend>::Write>>;

/// The transactional mode (see [`Transactional`]): the handler's writes commit with the record
/// in one transaction; a redelivery reads the record first. `W` is the backend's write.
#[derive(Debug, Clone)]
pub struct TransactionalMode<W> {
    lookup: ItemLookup<W>,
}

impl<W> Default for TransactionalMode<W> {
    fn default() -> Self {
        Self {
            lookup: ItemLookup::default(),
        }
    }
}

impl<H, B: TransactionalBackend> Transactional<H, B> {
    /// Where a message's carried item is, for a handler whose record rides on one of its writes
    /// ([`Transaction::carry_record`](crate::transaction::Transaction::carry_record)): as
    /// [`Inline::with_item_lookup`](super::Inline::with_item_lookup), a failed attempt reads
    /// that item before it is counted, and a record on it answers for the key. A record written
    /// beside the writes is in the engine's table, where the failure finds it without a lookup.
    pub fn with_item_lookup<R, I, F>(mut self, locate: F) -> Self
    where
        R: crate::record::Record,
        F: Fn(&str, &R) -> Option<I> + Send + Sync + 'static,
        I: Into<B::Write>,
    {
        self.mode.lookup = ItemLookup::new(locate);
        self
    }

    /// With `lookup` (the consumer builder's).
    pub(crate) fn with_lookup(mut self, lookup: ItemLookup<B::Write>) -> Self {
        self.mode.lookup = lookup;
        self
    }
}

/// Where a record that commits with its idempotency record starts.
pub(super) enum Start<T> {
    /// Run the inner handler with this context (its attempt set from the store).
    Run(RecordContext),
    /// A redelivered duplicate, answered by the read.
    Done(Deduplicated<T>),
}

/// Before the inner handler of a record that writes its idempotency record with its effect
/// (the transactional mode, and the inline one with its attempts read). Only a first delivery
/// (a receive count of exactly 1, [`RecordContext::receive_count`]) goes straight on, told
/// attempt 1. Any other record reads first (an SQS redelivery; a stream or Kafka record, whose
/// replay from a checkpoint looks like a first delivery; a message without a count; a record a
/// handler runs again with a count above 1): a duplicate is answered by the read, and a retried
/// record's handler is told its attempt. Cut by the deadline before the handler would start: no
/// attempt to record.
pub(super) async fn start<B: TransactionalBackend, T>(
    engine: &Idempotency<B>,
    key: &str,
    hash: &PayloadHash,
    ctx: &RecordContext,
) -> Result<Start<T>, RecordError> {
    let mut inner_ctx = ctx.clone();
    inner_ctx.attempt = 1;
    if ctx.receive_count != 1 {
        match engine.peek(key, hash).await {
            Ok(Peeked::Duplicate { result }) => {
                tracing::info!(message_id = ctx.message_id, key, "duplicate skipped");
                return Ok(Start::Done(Deduplicated::Duplicate { stored: result }));
            }
            Ok(Peeked::InProgress { lease_until_ms }) => {
                return Err(RecordError::InProgress { lease_until_ms });
            }
            Ok(Peeked::Attempts(attempts)) => inner_ctx.attempt = attempts + 1,
            Err(AcquireError::PayloadMismatch { key, stored }) => {
                return Err(RecordError::PayloadMismatch { key, stored });
            }
            Err(AcquireError::Store(e)) => return Err(RecordError::Store(e)),
        }
    }
    if let Some(error) = ctx.too_late_to_start() {
        return Err(error);
    }
    Ok(Start::Run(inner_ctx))
}

/// True when a failure of the inner handler is recorded as an attempt: any but a
/// [`RecordError::Transient`] (not the message's fault).
pub(super) fn counted(error: &RecordError) -> bool {
    !matches!(error.cause(), RecordError::Transient(_))
}

/// The record's answer for what the engine did.
pub(super) fn finish<T>(
    result: Result<Transacted<T>, TransactError<RecordError>>,
    ctx: &RecordContext,
    key: &str,
) -> Result<Deduplicated<T>, RecordError> {
    match result {
        Ok(Transacted::Committed(output)) => Ok(Deduplicated::Processed(output)),
        Ok(Transacted::Duplicate { stored }) => {
            tracing::info!(message_id = ctx.message_id, key, "duplicate skipped");
            Ok(Deduplicated::Duplicate { stored })
        }
        Err(e) => Err(record_error(e)),
    }
}

/// The record's error for a transaction that committed nothing.
fn record_error(error: TransactError<RecordError>) -> RecordError {
    let with_attempts = |error: RecordError, attempts: Option<u32>| match attempts {
        Some(attempts) => RecordError::Attempt {
            attempts,
            error: Box::new(error),
        },
        None => error,
    };
    match error {
        TransactError::Failed { error, attempts } => with_attempts(error, attempts),
        TransactError::Rejected {
            rejection,
            attempts,
        } => {
            // A rejection is the write's own condition (retried under the attempt budget) or its
            // size (permanent); a write refused for its table is `TransactError::Store`.
            let error = if rejection.is_condition() {
                RecordError::Handler(Box::new(rejection))
            } else {
                RecordError::Permanent(Box::new(rejection))
            };
            with_attempts(error, attempts)
        }
        TransactError::Limit { error, attempts } => {
            with_attempts(RecordError::Permanent(Box::new(error)), attempts)
        }
        TransactError::InProgress { lease_until_ms } => RecordError::InProgress { lease_until_ms },
        TransactError::PayloadMismatch { key, stored } => {
            RecordError::PayloadMismatch { key, stored }
        }
        TransactError::Contended { tries, reason } => RecordError::Store(StoreError::Contended {
            operation: "TransactWriteItems",
            tries,
            reason,
        }),
        // The store found the message's data over a size limit.
        TransactError::TooLarge { message, attempts } => {
            with_attempts(RecordError::Permanent(message.into()), attempts)
        }
        TransactError::Store(e) => RecordError::Store(e),
    }
}

impl<H, B, T> Mode<H, B> for TransactionalMode<B::Write>
where
    H: HandlerOutput<Output = Transaction<T, B::Write>>,
    T: Serialize + Send,
    B: TransactionalBackend,
{
    type Output = Deduplicated<T>;

    async fn handle<R: Record>(
        this: &Transactional<H, B>,
        record: &R,
        ctx: &RecordContext,
    ) -> Result<Self::Output, RecordError>
    where
        H: RecordHandler<R>,
    {
        let (key, hash) = key_and_hash(&this.keys, record, ctx)?;
        let inner_ctx = match start(&this.engine, &key, &hash, ctx).await? {
            Start::Run(inner_ctx) => inner_ctx,
            Start::Done(duplicate) => return Ok(duplicate),
        };
        let item = this.mode.lookup.item(&key, record);
        let work = || ctx.guarded(this.inner.handle(record, &inner_ctx));
        let result = this
            .engine
            .transact_at(&key, &hash, ctx.finish_by, item.as_ref(), work, counted)
            .await;
        finish(result, ctx, &key)
    }
}
