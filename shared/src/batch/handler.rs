//! The [`RecordHandler`] trait, what a handler is told about its record, and the adapters that
//! make handlers from plain async functions.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::SystemTime;

use aws_lambda_events::sqs::SqsMessage;
use serde::de::DeserializeOwned;

use crate::error::RecordError;
use crate::store::BoxError;
use crate::time::{Clock, Deadline, SystemClock};

/// What a handler knows about the record it is given.
#[derive(Debug, Clone)]
pub struct RecordContext {
    /// The record's SQS message id (never empty).
    pub message_id: String,
    /// The invocation's deadline, if known: when Lambda stops it.
    pub deadline: Option<Deadline>,
    /// `ApproximateReceiveCount` (1 on the first delivery; 0 when absent). SQS counts a receive
    /// for every delivery, including those of a FIFO record that did not run because an earlier
    /// one of its group failed: use [`attempt`](Self::attempt) to count the handler's own tries.
    pub receive_count: u32,
    /// This attempt's number, from 1: under [`Idempotent`](super::Idempotent) and
    /// [`Transactional`](super::Transactional), the failed attempts recorded by the idempotency
    /// store plus one; under [`Inline`](super::Inline), the receive count, unless it reads the
    /// store's count ([`Inline::with_attempts_read`](super::Inline::with_attempts_read)); without
    /// a store, the receive count.
    pub attempt: u32,
    /// `MessageGroupId`, on FIFO queues.
    pub group_id: Option<String>,
    /// When SQS accepted the message (`SentTimestamp`), if the event carries it: the time from
    /// a producer's write to `sent_at` is the relay's lag, from `sent_at` to now the queue's.
    pub sent_at: Option<SystemTime>,
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
        let left = stop_at.remaining(&*self.clock);
        let margin = self.deadline.map(|d| d.since(stop_at)).unwrap_or_default();
        if left.is_zero() {
            // Never started: not an attempt (it spends none of the record's budget).
            return Err(RecordError::DeadlineNear { margin });
        }
        tokio::time::timeout(left, work)
            .await
            .unwrap_or(Err(RecordError::DeadlineReached { margin }))
    }
}

/// Processes one SQS record.
///
/// Build one from a function with [`json`] (typed body) or [`message`] (the raw message), or
/// implement it. Wrap it with [`RecordHandlerExt::idempotent`](super::RecordHandlerExt::idempotent) to deduplicate, and with
/// [`RecordHandlerExt::on_dead_letter`](super::RecordHandlerExt::on_dead_letter) to hear of records moved to the dead-letter queue.
pub trait RecordHandler: Send + Sync {
    /// What a successful record yields.
    type Output: Send;

    /// Processes `message`.
    fn handle(
        &self,
        message: &SqsMessage,
        ctx: &RecordContext,
    ) -> impl Future<Output = Result<Self::Output, RecordError>> + Send;

    /// The record's idempotency key, if the handler has one: records of one batch with the same
    /// key run one after the other, never at once.
    fn key(&self, message: &SqsMessage) -> Option<String> {
        let _ = message;
        None
    }

    /// True when the handler's failures carry the key's failed attempts from an idempotency
    /// store ([`RecordError::attempts`]); the processor's attempt budget and backoff then go by
    /// them. Otherwise they go by the SQS receive count.
    fn counts_attempts(&self) -> bool {
        false
    }

    /// Called once `message` is in the dead-letter queue, with the failure that sent it there.
    fn dead_lettered(
        &self,
        message: &SqsMessage,
        ctx: &RecordContext,
        error: &RecordError,
    ) -> impl Future<Output = ()> + Send {
        let _ = (message, ctx, error);
        std::future::ready(())
    }
}

impl<H: RecordHandler> RecordHandler for Arc<H> {
    type Output = H::Output;
    fn handle(
        &self,
        message: &SqsMessage,
        ctx: &RecordContext,
    ) -> impl Future<Output = Result<Self::Output, RecordError>> + Send {
        (**self).handle(message, ctx)
    }
    fn key(&self, message: &SqsMessage) -> Option<String> {
        (**self).key(message)
    }
    fn counts_attempts(&self) -> bool {
        (**self).counts_attempts()
    }
    fn dead_lettered(
        &self,
        message: &SqsMessage,
        ctx: &RecordContext,
        error: &RecordError,
    ) -> impl Future<Output = ()> + Send {
        (**self).dead_lettered(message, ctx, error)
    }
}

/// A handler over a typed JSON body; see [`json`].
pub struct JsonHandler<T, F> {
    f: F,
    _body: PhantomData<fn() -> T>,
}

impl<T, F> fmt::Debug for JsonHandler<T, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JsonHandler<{}>", std::any::type_name::<T>())
    }
}

/// A handler from an async function of the deserialized body. A body that does not deserialize
/// fails its record with [`RecordError::Body`], naming the message id and the cause.
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

impl<T, F, Fut, O, E> RecordHandler for JsonHandler<T, F>
where
    T: DeserializeOwned,
    F: Fn(T, RecordContext) -> Fut + Send + Sync,
    Fut: Future<Output = Result<O, E>> + Send,
    O: Send,
    E: Into<BoxError>,
{
    type Output = O;

    async fn handle(&self, message: &SqsMessage, ctx: &RecordContext) -> Result<O, RecordError> {
        let body_error = |cause: String| RecordError::Body {
            message_id: ctx.message_id.clone(),
            type_name: std::any::type_name::<T>(),
            cause,
        };
        let body = message
            .body
            .as_deref()
            .ok_or_else(|| body_error("the message has no body".into()))?;
        let value: T = serde_json::from_str(body).map_err(|e| body_error(e.to_string()))?;
        let work = (self.f)(value, ctx.clone());
        ctx.cancellable(async { work.await.map_err(RecordError::handler) })
            .await
    }
}

/// A handler over the raw message; see [`message`].
#[derive(Debug, Clone)]
pub struct MessageHandler<F>(F);

/// A handler from an async function of the message (cloned) and its context.
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
    MessageHandler(f)
}

impl<F, Fut, O, E> RecordHandler for MessageHandler<F>
where
    F: Fn(SqsMessage, RecordContext) -> Fut + Send + Sync,
    Fut: Future<Output = Result<O, E>> + Send,
    O: Send,
    E: Into<BoxError>,
{
    type Output = O;

    async fn handle(&self, message: &SqsMessage, ctx: &RecordContext) -> Result<O, RecordError> {
        let work = (self.0)(message.clone(), ctx.clone());
        ctx.cancellable(async { work.await.map_err(RecordError::handler) })
            .await
    }
}

/// A record moved to the dead-letter queue, as an [`OnDeadLetter`] hook receives it.
#[derive(Debug, Clone)]
pub struct DeadLettered {
    /// The message, as it was received.
    pub message: SqsMessage,
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
#[derive(Debug, Clone)]
pub struct OnDeadLetter<H, F> {
    inner: H,
    hook: F,
}

impl<H, F> OnDeadLetter<H, F> {
    /// `inner`, with `hook` called once one of its records is in the dead-letter queue.
    pub fn new(inner: H, hook: F) -> Self {
        Self { inner, hook }
    }
}

impl<H, F, Fut> RecordHandler for OnDeadLetter<H, F>
where
    H: RecordHandler,
    F: Fn(DeadLettered) -> Fut + Send + Sync,
    Fut: Future<Output = ()> + Send,
{
    type Output = H::Output;

    fn handle(
        &self,
        message: &SqsMessage,
        ctx: &RecordContext,
    ) -> impl Future<Output = Result<Self::Output, RecordError>> + Send {
        self.inner.handle(message, ctx)
    }
    fn key(&self, message: &SqsMessage) -> Option<String> {
        self.inner.key(message)
    }
    fn counts_attempts(&self) -> bool {
        self.inner.counts_attempts()
    }
    async fn dead_lettered(&self, message: &SqsMessage, ctx: &RecordContext, error: &RecordError) {
        // The application first, within the time the processor reserved for it.
        (self.hook)(DeadLettered {
            message: message.clone(),
            ctx: ctx.clone(),
            reason: error.to_string(),
            permanent: error.is_permanent(),
            attempts: error.attempts(),
        })
        .await;
        self.inner.dead_lettered(message, ctx, error).await;
    }
}
