//! [`RecordHandlerExt`]: behaviour by composition, for every [`RecordHandler`].

use std::future::Future;

use super::boxed::BoxRecordHandler;
use super::handler::{DeadLettered, HandlerOutput, OnDeadLetter, RecordContext, RecordHandler};
use super::idempotent::{Idempotent, Inline, Transactional};
use super::then::{AndThen, OrderedBy};
use crate::Idempotency;
use crate::record::Record;
use crate::store::{Backend, BoxError, TransactionalBackend};

/// Composition helpers for every [`RecordHandler`], whatever its source.
pub trait RecordHandlerExt: HandlerOutput + Sized {
    /// Deduplicates this handler with `engine` (keyed on the message id; see
    /// [`Idempotent::with_keys`]).
    fn idempotent<B: Backend>(self, engine: Idempotency<B>) -> Idempotent<Self, B> {
        Idempotent::new(self, engine, super::LeaseMode)
    }

    /// Commits this handler's writes with its idempotency record in one transaction (see
    /// [`crate::transaction`]): the handler returns a
    /// [`Transaction`](crate::transaction::Transaction) instead of making its writes. Keyed on
    /// the message id; see [`Transactional::with_keys`]. Only over a
    /// [`TransactionalBackend`].
    fn transactional<B: TransactionalBackend>(
        self,
        engine: Idempotency<B>,
    ) -> Transactional<Self, B> {
        Idempotent::new(self, engine, super::TransactionalMode::default())
    }

    /// Writes this handler's one new item with its idempotency record on it, in one conditional
    /// write (see [`crate::inline`]): the handler returns an
    /// [`InlinePut`](crate::inline::InlinePut) instead of writing its item. Keyed on the message
    /// id; see [`Inline::with_keys`]. Only over a [`TransactionalBackend`]; for several writes or
    /// updates of existing items, use [`transactional`](Self::transactional).
    fn inline<B: TransactionalBackend>(self, engine: Idempotency<B>) -> Inline<Self, B> {
        Idempotent::new(self, engine, super::InlineMode::default())
    }

    /// Runs `f` on each successful output of this handler: for effects that come after a
    /// commit, such as an event to send once a payment is charged.
    ///
    /// Over an [`idempotent`](Self::idempotent), [`transactional`](Self::transactional) or
    /// [`inline`](Self::inline) handler, `f` sees duplicates too ([`Deduplicated::Duplicate`](super::Deduplicated), with
    /// the stored result): when `f` fails, or the process stops before it ends, the record is
    /// redelivered, its commit is found done, and `f` runs again. Its effect happens at least
    /// once; make it one its receiver can deduplicate. Its failures are retried by redelivery,
    /// not counted against the attempt budget (the store's count is of the handler's own
    /// failures).
    ///
    /// ```
    /// use lambda_idempotency::batch::{Deduplicated, RecordContext, RecordHandlerExt, json};
    /// use lambda_idempotency::{Idempotency, store::InMemoryBackend};
    ///
    /// let handler = json(|n: u32, _ctx: RecordContext| async move { Ok::<_, std::io::Error>(n * 2) })
    ///     .idempotent(Idempotency::new(InMemoryBackend::default()))
    ///     .and_then(|done: Deduplicated<u32>, _ctx: RecordContext| async move {
    ///         // Send an event for `done`, whether it ran now or before.
    ///         Ok::<_, std::io::Error>(done.is_duplicate())
    ///     });
    /// ```
    fn and_then<F, Fut, O, E>(self, f: F) -> AndThen<Self, F>
    where
        F: Fn(Self::Output, RecordContext) -> Fut + Send + Sync,
        Fut: Future<Output = Result<O, E>> + Send,
        E: Into<BoxError>,
    {
        AndThen::new(self, f)
    }

    /// Calls `hook` once a record of this handler is in the dead-letter queue (its error was
    /// permanent, or its attempt budget is used up), so that the application can record it.
    ///
    /// ```
    /// use lambda_idempotency::batch::{DeadLettered, RecordContext, RecordHandlerExt, json};
    ///
    /// #[derive(serde::Deserialize)]
    /// struct Payment { payment_id: String }
    ///
    /// let handler = json(|p: Payment, _ctx: RecordContext| async move { Ok::<_, std::io::Error>(p.payment_id) })
    ///     .on_dead_letter(|dead: DeadLettered| async move {
    ///         tracing::error!(message_id = dead.ctx.message_id, reason = dead.reason, "gave up");
    ///     });
    /// ```
    ///
    /// The hook takes a [`DeadLettered`](super::DeadLettered) of the handler's record type
    /// (`DeadLettered` is of an SQS message; `DeadLettered<KinesisEventRecord>` of a Kinesis
    /// record).
    fn on_dead_letter<R, F, Fut>(self, hook: F) -> OnDeadLetter<Self, F, R>
    where
        R: Record,
        F: Fn(DeadLettered<R>) -> Fut + Send + Sync,
        Fut: Future<Output = ()> + Send,
    {
        OnDeadLetter::new(self, hook)
    }

    /// Runs this handler's records in order by `key` instead of the source's own order key
    /// ([`RecordHandler::order_key`]), on streams and Kafka: records of one key run one after
    /// the other, a failure holds the later records of its key, and other keys run on. For a
    /// relay, the key whose order its receiver needs (an account, from a DynamoDB stream's new
    /// image), rather than the item's keys. On a FIFO queue the message group decides.
    ///
    /// ```
    /// use aws_lambda_events::kinesis::KinesisEventRecord;
    /// use lambda_idempotency::batch::{RecordContext, RecordHandlerExt, json};
    ///
    /// #[derive(serde::Deserialize)]
    /// struct Payment { account_id: String }
    ///
    /// let handler = json(|p: Payment, _ctx: RecordContext| async move { Ok::<_, std::io::Error>(p.account_id) })
    ///     .ordered_by(|r: &KinesisEventRecord| {
    ///         let payment: Payment = serde_json::from_slice(&r.kinesis.data.0).ok()?;
    ///         Some(payment.account_id)
    ///     });
    /// ```
    fn ordered_by<F>(self, key: F) -> OrderedBy<Self, F> {
        OrderedBy::new(self, key)
    }

    /// This handler, boxed: a [`BoxRecordHandler`] of the same output, whose type can be named
    /// (a field of an application's state, a test's fixture), for one allocation per record.
    fn boxed<R: Record>(self) -> BoxRecordHandler<Self::Output, R>
    where
        Self: RecordHandler<R> + 'static,
        Self::Output: 'static,
    {
        BoxRecordHandler::new(self)
    }
}

impl<H: HandlerOutput> RecordHandlerExt for H {}
