//! The [`RecordHandler`] trait, what a handler is told about its record, and the adapters that
//! make handlers from plain async functions.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::SystemTime;

use aws_lambda_events::sqs::SqsMessage;
use futures_util::FutureExt;
use serde::de::DeserializeOwned;

use crate::error::{RecordError, panic_message};
use crate::record::Record;
use crate::store::BoxError;
use crate::time::{Clock, Deadline, SystemClock};

/// What a handler knows about the record it is given.
#[derive(Debug, Clone)]
pub struct RecordContext {
    /// The record's id (never empty; see [`EventSource::record_id`](super::EventSource::record_id)):
    /// the SQS message id, a DynamoDB stream record's `eventID`, a Kinesis record's stream ARN,
    /// shard and sequence number, a Kafka record's cluster, topic, partition and offset. The
    /// default idempotency key.
    pub message_id: String,
    /// The invocation's deadline, if known: when Lambda stops it.
    pub deadline: Option<Deadline>,
    /// `ApproximateReceiveCount` (1 on the first delivery; 0 when absent, and always for stream
    /// and Kafka records, whose retries the source does not count). SQS counts a receive
    /// for every delivery, including those of a FIFO record that did not run because an earlier
    /// one of its group failed: use [`attempt`](Self::attempt) to count the handler's own tries.
    pub receive_count: u32,
    /// This attempt's number, from 1: under [`Idempotent`](super::Idempotent) and
    /// [`Transactional`](super::Transactional), the failed attempts recorded by the idempotency
    /// store plus one; under [`Inline`](super::Inline), the receive count, unless it reads the
    /// store's count ([`Inline::with_attempts_read`](super::Inline::with_attempts_read)); without
    /// a store, the receive count.
    pub attempt: u32,
    /// The key the record runs in order by: its `MessageGroupId` on FIFO queues; on streams and
    /// Kafka, its order key ([`RecordHandler::order_key`]).
    pub group_id: Option<String>,
    /// When the source accepted the record ([`Record::sent_at`]: SQS's `SentTimestamp`, a
    /// stream record's arrival), if the event carries it: the time from a producer's write to
    /// `sent_at` is the relay's lag, from `sent_at` to now the queue's.
    pub sent_at: Option<SystemTime>,
    /// What happened to a DynamoDB stream record's item ([`Record::change`]: an insert, a
    /// modification, a delete, and whether time to live deleted it); `None` for SQS, Kinesis and
    /// Kafka. A `json` handler of a delete decodes the item's keys, never the deleted item.
    pub change: Option<super::Change>,
    /// The Lambda request id.
    pub request_id: String,
    /// When the handler's own work is cancelled (the deadline minus the processor's stop
    /// margin), if there is a deadline. See [`RecordContext::cancellable`].
    pub stop_at: Option<Deadline>,
    /// When the record's bookkeeping (marking it completed or failed) must be done, so that the
    /// processor can still answer Lambda in time.
    pub finish_by: Option<Deadline>,
    /// The clock every check of these instants reads: the processor's
    /// ([`BatchProcessor::with_clock`](super::BatchProcessor::with_clock)).
    pub clock: Arc<dyn Clock>,
}

impl RecordContext {
    /// A context for `message_id` with no deadline (for tests and direct calls).
    pub fn new(message_id: impl Into<String>) -> Self {
        Self {
            message_id: message_id.into(),
            deadline: None,
            receive_count: 1,
            attempt: 1,
            group_id: None,
            sent_at: None,
            change: None,
            request_id: String::new(),
            stop_at: None,
            finish_by: None,
            clock: Arc::new(SystemClock),
        }
    }

    /// Runs `work`, cancelling it at [`stop_at`](Self::stop_at) with
    /// [`RecordError::DeadlineReached`]; when `stop_at` has passed already, `work` never starts
    /// and the answer is [`RecordError::DeadlineNear`], which spends no attempt. The [`json`] and [`message`] adapters and the
    /// [`Idempotent`](super::Idempotent) wrapper call it around the handler's own work; a hand-written
    /// [`RecordHandler`] should too, so that only its work is cancelled and never the bookkeeping
    /// that follows it.
    pub async fn cancellable<T>(
        &self,
        work: impl Future<Output = Result<T, RecordError>>,
    ) -> Result<T, RecordError> {
        let Some(stop_at) = self.stop_at else {
            return work.await;
        };
        // Never started: not an attempt (it spends none of the record's budget).
        if let Some(error) = self.too_late_to_start() {
            return Err(error);
        }
        let left = stop_at.remaining(&*self.clock);
        let margin = self.deadline.map(|d| d.since(stop_at)).unwrap_or_default();
        tokio::time::timeout(left, work)
            .await
            .unwrap_or(Err(RecordError::DeadlineReached { margin }))
    }

    /// [`RecordError::DeadlineNear`] when [`stop_at`](Self::stop_at) has passed: the handler's
    /// work would not start, so neither a key is taken nor an attempt spent.
    pub(crate) fn too_late_to_start(&self) -> Option<RecordError> {
        let stop_at = self.stop_at?;
        let margin = self.deadline.map(|d| d.since(stop_at)).unwrap_or_default();
        too_late_to_start(&*self.clock, stop_at, margin)
    }

    /// `work` cancelled at [`stop_at`](Self::stop_at) (see [`cancellable`](Self::cancellable)),
    /// with a panic caught as [`RecordError::Panicked`].
    // Not an `async fn`: one state machine less around the handler's future, whose copies make
    // the stack frames of a debug build.
    pub(crate) fn guarded<'a, T: 'a>(
        &'a self,
        work: impl Future<Output = Result<T, RecordError>> + 'a,
    ) -> impl Future<Output = Result<T, RecordError>> + 'a {
        caught(self.cancellable(work))
    }
}

/// [`RecordError::DeadlineNear`] (naming `margin`) once `latest` has passed: what no record or
/// handler starts after.
pub(crate) fn too_late_to_start(
    clock: &dyn Clock,
    latest: Deadline,
    margin: std::time::Duration,
) -> Option<RecordError> {
    latest
        .has_passed(clock)
        .then_some(RecordError::DeadlineNear { margin })
}

/// `work`, with a panic caught as [`RecordError::Panicked`]: the one place a handler's panic is
/// caught.
// Not an `async fn`, for the reason `guarded` is not.
pub(crate) fn caught<T>(
    work: impl Future<Output = Result<T, RecordError>>,
) -> impl Future<Output = Result<T, RecordError>> {
    std::panic::AssertUnwindSafe(work)
        .catch_unwind()
        .map(|outcome| {
            outcome.unwrap_or_else(|panic| Err(RecordError::Panicked(panic_message(&panic))))
        })
}

/// What a handler yields, whatever the source of its records: the part of a
/// [`RecordHandler`] that does not depend on the record type, so that composition
/// ([`RecordHandlerExt`](super::RecordHandlerExt)) knows a handler's output before it knows its
/// source.
pub trait HandlerOutput: Send + Sync {
    /// What a successful record yields.
    type Output: Send;
}

/// Processes one record of an event source: an SQS message (the default), a DynamoDB stream
/// record, a Kinesis record or a Kafka record ([`Record`]).
///
/// Build one from a function with [`json`] (typed payload), [`message`] (the raw SQS message) or
/// [`record`] (the raw record of any source), or implement it (with [`HandlerOutput`]). Wrap it
/// with [`RecordHandlerExt::idempotent`](super::RecordHandlerExt::idempotent) to deduplicate, and with
/// [`RecordHandlerExt::on_dead_letter`](super::RecordHandlerExt::on_dead_letter) to hear of records moved to the dead-letter queue.
pub trait RecordHandler<R: Record = SqsMessage>: HandlerOutput {
    /// Processes `record`.
    fn handle(
        &self,
        record: &R,
        ctx: &RecordContext,
    ) -> impl Future<Output = Result<Self::Output, RecordError>> + Send;

    /// The record's idempotency key, if the handler has one: records of one batch with the same
    /// key run one after the other, never at once.
    fn key(&self, record: &R) -> Option<String> {
        let _ = record;
        None
    }

    /// The key the record runs in order by, on an ordered source: records of one key run one
    /// after the other, in the source's order, and a failure holds the later ones of its key.
    /// By default the source's own ([`Record::order_key`]: the FIFO message group, a DynamoDB
    /// item's keys, a Kinesis partition key, a Kafka record's key); on streams and Kafka a
    /// handler may choose another ([`RecordHandlerExt::ordered_by`](super::RecordHandlerExt::ordered_by)).
    /// A FIFO queue's records always run by message group.
    fn order_key(&self, record: &R) -> Option<String> {
        record.order_key().map(Into::into)
    }

    /// True when the handler's failures carry the key's failed attempts from an idempotency
    /// store ([`RecordError::attempts`]); the processor's attempt budget and backoff then go by
    /// them. Otherwise they go by the SQS receive count.
    fn counts_attempts(&self) -> bool {
        false
    }

    /// Called once `record` is in the dead-letter queue, with the failure that sent it there.
    fn dead_lettered(
        &self,
        record: &R,
        ctx: &RecordContext,
        error: &RecordError,
    ) -> impl Future<Output = ()> + Send {
        let _ = (record, ctx, error);
        std::future::ready(())
    }
}

impl<H: HandlerOutput> HandlerOutput for Arc<H> {
    type Output = H::Output;
}

impl<R: Record, H: RecordHandler<R>> RecordHandler<R> for Arc<H> {
    fn handle(
        &self,
        record: &R,
        ctx: &RecordContext,
    ) -> impl Future<Output = Result<Self::Output, RecordError>> + Send {
        (**self).handle(record, ctx)
    }
    fn key(&self, record: &R) -> Option<String> {
        (**self).key(record)
    }
    fn order_key(&self, record: &R) -> Option<String> {
        (**self).order_key(record)
    }
    fn counts_attempts(&self) -> bool {
        (**self).counts_attempts()
    }
    fn dead_lettered(
        &self,
        record: &R,
        ctx: &RecordContext,
        error: &RecordError,
    ) -> impl Future<Output = ()> + Send {
        (**self).dead_lettered(record, ctx, error)
    }
}

/// A handler over a typed payload; see [`json`].
pub struct JsonHandler<T, F> {
    f: F,
    _body: PhantomData<fn() -> T>,
}

impl<T, F> fmt::Debug for JsonHandler<T, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JsonHandler<{}>", std::any::type_name::<T>())
    }
}

/// A handler from an async function of the deserialized payload ([`Record::decode`]: an SQS
/// body, a Kinesis record's data or a Kafka record's value as JSON; a DynamoDB stream record's
/// new image, or its keys where it has none: a `REMOVE`, whose [`RecordContext::change`] says so,
/// or any record under `KEYS_ONLY`). A payload that does not deserialize fails its
/// record with [`RecordError::Body`], naming the record and the cause. A record without a
/// payload (a Kafka tombstone) is read as JSON `null`: take an `Option<T>` to handle it.
///
/// ```
/// use lambda_idempotency::batch::{json, RecordContext};
///
/// #[derive(serde::Deserialize)]
/// struct Payment { amount_cents: i64 }
///
/// let handler = json(|payment: Payment, ctx: RecordContext| async move {
///     tracing::info!(message_id = ctx.message_id, payment.amount_cents, "charging");
///     Ok::<_, std::io::Error>(())
/// });
/// ```
pub fn json<T, F, Fut, O, E>(f: F) -> JsonHandler<T, F>
where
    T: DeserializeOwned,
    F: Fn(T, RecordContext) -> Fut + Send + Sync,
    Fut: Future<Output = Result<O, E>> + Send,
    E: Into<BoxError>,
{
    JsonHandler {
        f,
        _body: PhantomData,
    }
}

impl<T, F, Fut, O, E> HandlerOutput for JsonHandler<T, F>
where
    T: DeserializeOwned,
    F: Fn(T, RecordContext) -> Fut + Send + Sync,
    Fut: Future<Output = Result<O, E>> + Send,
    O: Send,
    E: Into<BoxError>,
{
    type Output = O;
}

impl<R, T, F, Fut, O, E> RecordHandler<R> for JsonHandler<T, F>
where
    R: Record,
    T: DeserializeOwned,
    F: Fn(T, RecordContext) -> Fut + Send + Sync,
    Fut: Future<Output = Result<O, E>> + Send,
    O: Send,
    E: Into<BoxError>,
{
    async fn handle(&self, record: &R, ctx: &RecordContext) -> Result<O, RecordError> {
        refuse_malformed(record)?;
        let value: T = record.decode().map_err(|cause| RecordError::Body {
            message_id: ctx.message_id.clone(),
            type_name: std::any::type_name::<T>(),
            cause,
        })?;
        let work = (self.f)(value, ctx.clone());
        ctx.cancellable(async { work.await.map_err(RecordError::handler) })
            .await
    }
}

/// A permanent failure for a record that can never be processed ([`Record::malformed`]).
fn refuse_malformed<R: Record>(record: &R) -> Result<(), RecordError> {
    record
        .malformed()
        .map_or(Ok(()), |e| Err(RecordError::Permanent(e)))
}

/// A handler over the raw record (an [`SqsMessage`] by default); see [`message`] and [`record`].
pub struct MessageHandler<F, R = SqsMessage> {
    f: F,
    _record: PhantomData<fn(R)>,
}

impl<F: Clone, R> Clone for MessageHandler<F, R> {
    fn clone(&self) -> Self {
        Self {
            f: self.f.clone(),
            _record: PhantomData,
        }
    }
}

impl<F, R> fmt::Debug for MessageHandler<F, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MessageHandler<{}>", std::any::type_name::<R>())
    }
}

/// A handler from an async function of the SQS message (cloned) and its context.
///
/// ```
/// use lambda_idempotency::batch::message;
///
/// let handler = message(|msg, _ctx| async move {
///     let body = msg.body.unwrap_or_default();
///     Ok::<_, std::io::Error>(body.len())
/// });
/// ```
pub fn message<F, Fut, O, E>(f: F) -> MessageHandler<F>
where
    F: Fn(SqsMessage, RecordContext) -> Fut + Send + Sync,
    Fut: Future<Output = Result<O, E>> + Send,
    E: Into<BoxError>,
{
    record(f)
}

/// A handler from an async function of a record of any source (cloned) and its context: name
/// the record's type in the function.
///
/// ```
/// use aws_lambda_events::kinesis::KinesisEventRecord;
/// use lambda_idempotency::batch::record;
///
/// let handler = record(|r: KinesisEventRecord, _ctx| async move {
///     Ok::<_, std::io::Error>(r.kinesis.data.0.len())
/// });
/// ```
pub fn record<R, F, Fut, O, E>(f: F) -> MessageHandler<F, R>
where
    R: Record,
    F: Fn(R, RecordContext) -> Fut + Send + Sync,
    Fut: Future<Output = Result<O, E>> + Send,
    E: Into<BoxError>,
{
    MessageHandler {
        f,
        _record: PhantomData,
    }
}

impl<R, F, Fut, O, E> HandlerOutput for MessageHandler<F, R>
where
    R: Record,
    F: Fn(R, RecordContext) -> Fut + Send + Sync,
    Fut: Future<Output = Result<O, E>> + Send,
    O: Send,
    E: Into<BoxError>,
{
    type Output = O;
}

impl<R, F, Fut, O, E> RecordHandler<R> for MessageHandler<F, R>
where
    R: Record,
    F: Fn(R, RecordContext) -> Fut + Send + Sync,
    Fut: Future<Output = Result<O, E>> + Send,
    O: Send,
    E: Into<BoxError>,
{
    async fn handle(&self, record: &R, ctx: &RecordContext) -> Result<O, RecordError> {
        refuse_malformed(record)?;
        let work = (self.f)(record.clone(), ctx.clone());
        ctx.cancellable(async { work.await.map_err(RecordError::handler) })
            .await
    }
}

/// A record moved to the dead-letter queue, as an [`OnDeadLetter`] hook receives it.
#[derive(Debug, Clone)]
pub struct DeadLettered<R = SqsMessage> {
    /// The record, as it was received.
    pub message: R,
    /// Its context.
    pub ctx: RecordContext,
    /// The failure that sent it there.
    pub reason: String,
    /// True when the failure was permanent; false when the attempt budget was used up.
    pub permanent: bool,
    /// The key's failed attempts, when an idempotency store counted them.
    pub attempts: Option<u32>,
}

/// A handler that calls a hook when one of its records is moved to the dead-letter queue; see
/// [`RecordHandlerExt::on_dead_letter`](super::RecordHandlerExt::on_dead_letter).
pub struct OnDeadLetter<H, F, R = SqsMessage> {
    inner: H,
    hook: F,
    _record: PhantomData<fn(R)>,
}

impl<H: Clone, F: Clone, R> Clone for OnDeadLetter<H, F, R> {
    fn clone(&self) -> Self {
        Self::new(self.inner.clone(), self.hook.clone())
    }
}

impl<H: fmt::Debug, F, R> fmt::Debug for OnDeadLetter<H, F, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OnDeadLetter")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<H, F, R> OnDeadLetter<H, F, R> {
    /// `inner`, with `hook` called once one of its records is in the dead-letter queue.
    pub fn new(inner: H, hook: F) -> Self {
        Self {
            inner,
            hook,
            _record: PhantomData,
        }
    }
}

impl<H: HandlerOutput, F: Send + Sync, R> HandlerOutput for OnDeadLetter<H, F, R> {
    type Output = H::Output;
}

impl<R, H, F, Fut> RecordHandler<R> for OnDeadLetter<H, F, R>
where
    R: Record,
    H: RecordHandler<R>,
    F: Fn(DeadLettered<R>) -> Fut + Send + Sync,
    Fut: Future<Output = ()> + Send,
{
    fn handle(
        &self,
        record: &R,
        ctx: &RecordContext,
    ) -> impl Future<Output = Result<Self::Output, RecordError>> + Send {
        self.inner.handle(record, ctx)
    }
    fn key(&self, record: &R) -> Option<String> {
        self.inner.key(record)
    }
    fn order_key(&self, record: &R) -> Option<String> {
        self.inner.order_key(record)
    }
    fn counts_attempts(&self) -> bool {
        self.inner.counts_attempts()
    }
    async fn dead_lettered(&self, record: &R, ctx: &RecordContext, error: &RecordError) {
        // The application first, within the time the processor reserved for it.
        (self.hook)(DeadLettered {
            message: record.clone(),
            ctx: ctx.clone(),
            reason: error.to_string(),
            permanent: error.is_permanent(),
            attempts: error.attempts(),
        })
        .await;
        self.inner.dead_lettered(record, ctx, error).await;
    }
}
