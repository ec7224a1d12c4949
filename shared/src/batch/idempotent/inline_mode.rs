//! The inline mode of the [`Idempotent`] wrapper ([`Inline`]): a handler whose one new item carries its idempotency record, written
//! in one conditional request (see [`crate::inline`]).

use serde::Serialize;

use super::transactional_mode::{Start, counted, finish, start};
use super::{Deduplicated, Idempotent, Mode, key_and_hash};
use crate::Idempotency;
use crate::batch::handler::HandlerOutput;
use crate::batch::lookup::ItemLookup;
use crate::batch::{RecordContext, RecordHandler};
use crate::error::RecordError;
use crate::inline::InlinePut;
use crate::payload::PayloadHash;
use crate::record::Record;
use crate::store::TransactionalBackend;
use crate::transaction::{Peeked, Transaction};

/// A handler whose effect is one new item, written with its idempotency record on it: the inner
/// handler returns an [`InlinePut`] (its output and its item) instead of writing the item.
///
/// It answers as [`Transactional`](super::Transactional) does:
///
/// - A fresh key: the item and its record are written together, in one request
///   ([`Deduplicated::Processed`]).
/// - A key completed before: nothing is written ([`Deduplicated::Duplicate`], with the stored
///   result), for one refused write, or none when the engine's [local cache](crate::cache)
///   knows it.
/// - The same key with another payload, the item completed: [`RecordError::PayloadMismatch`],
///   permanent.
/// - The inner handler fails or panics, or its item exists without a record: the failure is
///   recorded in the engine's table (a failed record with the error and the failed attempts,
///   [`RecordError::Attempt`]), and the next delivery runs again. An item over the store's size
///   limit: [`RecordError::Permanent`].
/// - A request the store refuses for a table or the code (the item's table missing, a key
///   schema the item does not match): [`RecordError::Store`] with
///   [`StoreError::Misconfigured`](crate::store::StoreError::Misconfigured), left for
///   redelivery, never dead-lettered; the store unreachable, or the item in a running
///   transaction: [`RecordError::Store`].
///
/// Every delivery, a redelivery too, goes straight to the write: a redelivered duplicate costs
/// the one refused write, as a first one does. The handler is told the receive count as its
/// [`attempt`](RecordContext::attempt): the message's deliveries, which is not the key's
/// attempts (a FIFO record held behind a failed one of its group is received without running;
/// with a key from the body, another message of the same key has its own receive count). The
/// attempt budget is counted by the store all the same, from the failure it records, and a
/// handler that needs the key's count uses [`with_attempts_read`](Inline::with_attempts_read),
/// which makes a redelivery read the engine's table first ([`Idempotency::peek`](crate::Idempotency::peek)), as the
/// transactional mode does, so that its handler is told the store's failed attempts plus one,
/// for one more request. See [`crate::inline`] for where failures are counted and what the mode
/// cannot carry.
///
/// On a stream (DynamoDB Streams, Kinesis, Kafka) every record goes straight to its write too:
/// a first delivery costs its one conditional write, and a replay from a checkpoint of a record
/// that succeeded costs the refused write. A replay of a record dead-lettered before (its key
/// settled in the engine's table, see [`Idempotent`]; its item never written) is not read for
/// first, so its handler runs again:
///
/// - If it fails again, as a poison record does, the conditional write that records the failure
///   in the engine's table finds the key settled and answers a duplicate: the record is neither
///   counted nor dead-lettered a second time. A failure no request tells the store of (an item
///   over the store's size limit, found before the write) reads the engine's table before it
///   would be dead-lettered, for the same answer.
/// - If it now succeeds (a record dead-lettered once its attempts ran out, whose cause has
///   gone), its item is written, with its record: the record's effect happens once, late (after
///   the records of its key that the shard ran past it), and the copy in the dead-letter queue is
///   of a record that is done; a redrive of that copy through this handler is a refused write, a
///   duplicate. The effect being one new item written only if absent, the late write can neither
///   double it nor overwrite a later record's item.
///
/// A handler for which a dead-lettered record must never run again uses
/// [`with_attempts_read`](Inline::with_attempts_read): every stream record then reads the
/// engine's table first, and a dead-lettered record's replay is answered by that read, for one
/// more request per record.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
/// use lambda_idempotency::batch::{BatchProcessor, RecordContext, RecordHandlerExt, json};
/// use lambda_idempotency::inline::InlinePut;
/// use lambda_idempotency::key::KeyConfig;
/// use lambda_idempotency::store::{InMemoryBackend, MemoryWrite};
/// use lambda_idempotency::Idempotency;
/// use lambda_runtime::{Context, LambdaEvent};
/// use std::sync::Arc;
///
/// #[derive(serde::Deserialize)]
/// struct Payment { payment_id: String, amount_cents: i64 }
///
/// // On DynamoDB the item is a `store::NewItem` and the backend a `DynamoDbBackend`.
/// let backend = Arc::new(InMemoryBackend::default());
/// let handler = json(|p: Payment, _ctx: RecordContext| async move {
///     let receipt = MemoryWrite::put_if_absent("receipts", &p.payment_id, &p.amount_cents.to_string());
///     Ok::<_, std::io::Error>(InlinePut::new(p.payment_id, receipt))
/// })
/// .inline(Idempotency::new(backend.clone()))
/// .with_keys(KeyConfig::json_pointer("/payment_id"));
///
/// let message = |id: &str| {
///     let mut m = SqsMessage::default();
///     m.message_id = Some(id.into());
///     m.body = Some(r#"{"payment_id": "p-1", "amount_cents": 500}"#.into());
///     m
/// };
/// let mut event = SqsEvent::default();
/// event.records = vec![message("m-1"), message("m-2")];
/// let report = BatchProcessor::new()
///     .process(&LambdaEvent::new(event, Context::default()), &handler)
///     .await
///     .unwrap();
/// assert!(report.response().batch_item_failures.is_empty());
/// assert_eq!(report.successes().filter(|(_, d)| d.is_duplicate()).count(), 1);
/// assert_eq!(backend.item("receipts", "p-1").as_deref(), Some("500"));
/// # });
/// ```
pub type Inline<H, B> = Idempotent<H, B, InlineMode<<B as TransactionalBackend>::Write>>;

/// The inline mode (see [`Inline`]): the handler's one new item carries the record, in one
/// conditional write. `W` is the backend's write.
#[derive(Debug, Clone)]
pub struct InlineMode<W> {
    read_attempts: bool,
    lookup: ItemLookup<W>,
}

impl<W> Default for InlineMode<W> {
    fn default() -> Self {
        Self {
            read_attempts: false,
            lookup: ItemLookup::default(),
        }
    }
}

impl<H, B: TransactionalBackend> Inline<H, B> {
    /// Where a message's item is: `locate` gives, from the message's idempotency key and the
    /// message, the item its work writes (its key, as a write: a
    /// [`NewItem`](crate::store::NewItem) of its key attributes alone on DynamoDB), or `None`.
    /// A failed attempt reads that item before it is counted
    /// ([`TransactionalBackend::record_on_item`]): when the item carries the key's record,
    /// another delivery did the work, and the message is a duplicate (or, with another payload,
    /// a mismatch), never a failure towards the attempt budget and the dead-letter queue. On the
    /// failure path only: a success costs its one write, as without it.
    ///
    /// Without it, the failure is counted in the engine's table, which does not know the item:
    /// a later message of the key whose handler fails before giving its item continues the
    /// count that earlier failures left, even when another message completed the key in
    /// between.
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

    /// A redelivery (receive count above 1) reads the engine's table before the handler runs,
    /// so that the handler is told its attempt as the store counts it: one more request per
    /// redelivery. A stream record has no receive count: every one reads (two requests for a
    /// first delivery), and a replay of a dead-lettered record is answered by the read without
    /// running. The read cannot see the item, so a redelivered duplicate then costs the read
    /// and the refused write (the read answers it alone only for a key completed earlier by the
    /// transactional mode, whose record is in the engine's table).
    pub fn with_attempts_read(mut self) -> Self {
        self.mode.read_attempts = true;
        self
    }
}

impl<H, B, T, I> Mode<H, B> for InlineMode<B::Write>
where
    H: HandlerOutput<Output = InlinePut<T, I>>,
    T: Serialize + Send,
    I: Into<B::Write> + Send,
    B: TransactionalBackend,
{
    type Output = Deduplicated<T>;

    async fn handle<R: Record>(
        this: &Inline<H, B>,
        record: &R,
        ctx: &RecordContext,
    ) -> Result<Self::Output, RecordError>
    where
        H: RecordHandler<R>,
    {
        let (key, hash) = key_and_hash(&this.keys, record, ctx)?;
        let inner_ctx = if this.mode.read_attempts {
            match start(&this.engine, &key, &hash, ctx).await? {
                Start::Run(inner_ctx) => inner_ctx,
                Start::Done(duplicate) => return Ok(duplicate),
            }
        } else {
            if let Some(error) = ctx.too_late_to_start() {
                return Err(error);
            }
            let mut inner_ctx = ctx.clone();
            inner_ctx.attempt = ctx.receive_count.max(1);
            inner_ctx
        };
        let item = this.mode.lookup.item(&key, record);
        let work = || async {
            let put = ctx.guarded(this.inner.handle(record, &inner_ctx)).await?;
            Ok(Transaction::from(put))
        };
        let result = this
            .engine
            .transact_at(&key, &hash, ctx.finish_by, item.as_ref(), work, counted)
            .await;
        match finish(result, ctx, &key) {
            Err(error) if !R::redriven() && unseen_dead_letter(&error) => {
                settled(&this.engine, &key, &hash, ctx, error).await
            }
            answered => answered,
        }
    }
}

/// True for a failure the processor dead-letters that no request told the store of: a limit of
/// the item found before the write ([`TransactError::Limit`](crate::transaction::TransactError::Limit)),
/// permanent and not counted. Every other failure of the handler or the write is noted in the
/// engine's table by a conditional write, which finds a key settled there and answers it.
fn unseen_dead_letter(error: &RecordError) -> bool {
    error.is_permanent() && error.attempts().is_none()
}

/// `error`, or the duplicate the engine's table answers for `key`: a stream record whose
/// failure the store has not seen may be the replay of one dead-lettered before, settled there
/// ([`settle_dead_lettered`](super::settle_dead_lettered)); it is read before the record is
/// dead-lettered again. A read that fails, or finds anything else, leaves `error`.
async fn settled<B: TransactionalBackend, T>(
    engine: &Idempotency<B>,
    key: &str,
    hash: &PayloadHash,
    ctx: &RecordContext,
    error: RecordError,
) -> Result<Deduplicated<T>, RecordError> {
    match engine.peek(key, hash).await {
        Ok(Peeked::Duplicate { result }) => {
            tracing::info!(message_id = ctx.message_id, key, "duplicate skipped");
            Ok(Deduplicated::Duplicate { stored: result })
        }
        _ => Err(error),
    }
}
