//! SQS batch processing with partial batch responses.
//!
//! [`BatchProcessor::process`] runs a [`RecordHandler`] over every record of an SQS event and
//! reports only the failed records in `batchItemFailures`, so that SQS redelivers those alone
//! (the event source mapping needs `FunctionResponseTypes: [ReportBatchItemFailures]`).
//!
//! - Standard queues: records run concurrently, up to a limit.
//! - FIFO queues (source ARN ending in `.fifo`): each message group runs in order, one record at
//!   a time, groups concurrently; after a failure the rest of that group is reported failed
//!   without running, and other groups go on. [`BatchProcessor::strict_order`] stops the whole
//!   batch at the first failure instead.
//! - A panic, a body that does not deserialize or an approaching deadline fails that record
//!   only.
//! - Every reported `itemIdentifier` is a non-empty message id of the batch; a record without a
//!   message id fails the whole invocation (see [`BatchError`]).

use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use futures_util::{FutureExt, StreamExt, stream};
use lambda_runtime::LambdaEvent;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::Instrument;

use crate::backoff::VisibilityBackoff;
use crate::dead_letter::DeadLetter;
use crate::idempotency::{AcquireError, Acquired, Idempotency};
use crate::key::{KeyConfig, KeyError};
use crate::record::{Clock, SystemClock};
use crate::store::{Backend, BoxError, StoreError};

/// What a handler knows about the record it is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordContext {
    /// The record's SQS message id (never empty).
    pub message_id: String,
    /// The invocation's deadline, if known: when Lambda stops it.
    pub deadline: Option<SystemTime>,
    /// `ApproximateReceiveCount` (1 on the first delivery; 0 when absent).
    pub receive_count: u32,
    /// `MessageGroupId`, on FIFO queues.
    pub group_id: Option<String>,
    /// The Lambda request id.
    pub request_id: String,
}

/// Why one record failed. Every variant fails that record only.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The body is missing or does not deserialize to the handler's type.
    #[error("message {message_id}: body is not a valid {type_name}: {cause}")]
    Body {
        /// The message id.
        message_id: String,
        /// The expected type.
        type_name: &'static str,
        /// Why it does not deserialize.
        cause: String,
    },
    /// No idempotency key could be taken from the message.
    #[error("message {message_id}: no idempotency key: {source}")]
    Key {
        /// The message id.
        message_id: String,
        /// Why.
        source: KeyError,
    },
    /// The handler returned an error; the record is retried.
    #[error("handler failed: {0}")]
    Handler(BoxError),
    /// The handler said the error is permanent (a retry cannot succeed): with a
    /// [`DeadLetter`] on the processor, the message goes straight to the dead-letter queue.
    #[error("permanent failure: {0}")]
    Permanent(BoxError),
    /// The handler panicked.
    #[error("handler panicked: {0}")]
    Panicked(String),
    /// Not started: too little time was left before the deadline.
    #[error("not started: less than {margin:?} left before the invocation's deadline")]
    DeadlineNear {
        /// The configured start margin.
        margin: Duration,
    },
    /// Started but not finished before the deadline; cancelled so that the response can still be
    /// sent.
    #[error("cancelled: still running {margin:?} before the invocation's deadline")]
    DeadlineReached {
        /// The configured stop margin.
        margin: Duration,
    },
    /// Not run: an earlier message of the same FIFO message group failed.
    #[error("not run: message {failed} of message group `{group_id}` failed before it")]
    GroupBlocked {
        /// The message group.
        group_id: String,
        /// The message that failed first.
        failed: String,
    },
    /// Not run: an earlier message failed and the batch runs in strict order.
    #[error("not run: message {failed} failed before it (strict order)")]
    BatchStopped {
        /// The message that failed first.
        failed: String,
    },
    /// Another invocation holds the message's idempotency key; retry after its lease.
    #[error("in progress in another invocation until {lease_until_ms} (epoch ms)")]
    InProgress {
        /// When the other invocation's lease ends, epoch milliseconds.
        lease_until_ms: i64,
    },
    /// The idempotency key was first used with another payload.
    #[error("idempotency key `{key}` was already used with a different payload")]
    PayloadMismatch {
        /// The key.
        key: String,
    },
    /// The idempotency store failed: the record is not treated as processed.
    #[error(transparent)]
    Store(StoreError),
}

impl RecordError {
    /// Wraps any error as a handler failure. A [`PermanentError`] becomes
    /// [`RecordError::Permanent`], and a boxed `RecordError` is kept as it is.
    pub fn handler(error: impl Into<BoxError>) -> Self {
        let error = error.into();
        let error = match error.downcast::<PermanentError>() {
            Ok(permanent) => return RecordError::Permanent(permanent.0),
            Err(other) => other,
        };
        match error.downcast::<RecordError>() {
            Ok(record) => *record,
            Err(other) => RecordError::Handler(other),
        }
    }

    /// A permanent failure.
    pub fn permanent(error: impl Into<BoxError>) -> Self {
        RecordError::Permanent(error.into())
    }

    /// True when retrying cannot help: the handler said so ([`RecordError::Permanent`]), the
    /// body does not deserialize, no key can be taken from it, or its key was used with another
    /// payload.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            RecordError::Permanent(_)
                | RecordError::Body { .. }
                | RecordError::Key { .. }
                | RecordError::PayloadMismatch { .. }
        )
    }
}

/// An error a handler marks as permanent: a retry cannot succeed (a body that fails
/// validation, say). Return it from a [`json`] or [`message`] handler (it converts into the
/// handler's error type through `Box<dyn Error>`).
///
/// ```
/// use lambda_idempotency::batch::{PermanentError, RecordError};
///
/// let error = RecordError::handler(PermanentError::new("amount must be positive"));
/// assert!(error.is_permanent());
/// assert!(!RecordError::handler("timeout").is_permanent());
/// ```
#[derive(Debug)]
pub struct PermanentError(BoxError);

impl PermanentError {
    /// Marks `error` permanent.
    pub fn new(error: impl Into<BoxError>) -> Self {
        Self(error.into())
    }
}

impl fmt::Display for PermanentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for PermanentError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.0.as_ref())
    }
}

/// Processes one SQS record.
///
/// Build one from a function with [`json`] (typed body) or [`message`] (the raw message), or
/// implement it. Wrap it with [`RecordHandlerExt::idempotent`] to deduplicate.
pub trait RecordHandler: Send + Sync {
    /// What a successful record yields.
    type Output: Send;

    /// Processes `message`.
    fn handle(
        &self,
        message: &SqsMessage,
        ctx: &RecordContext,
    ) -> impl Future<Output = Result<Self::Output, RecordError>> + Send;
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
        (self.f)(value, ctx.clone())
            .await
            .map_err(RecordError::handler)
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
        (self.0)(message.clone(), ctx.clone())
            .await
            .map_err(RecordError::handler)
    }
}

/// What an [`Idempotent`] handler did with a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deduplicated<T> {
    /// The inner handler ran; its output is stored as the record's result.
    Processed(T),
    /// The record's key was completed before: the inner handler did not run.
    Duplicate {
        /// The stored result (JSON), if any.
        stored: Option<String>,
    },
}

impl<T> Deduplicated<T> {
    /// True for a skipped duplicate.
    pub fn is_duplicate(&self) -> bool {
        matches!(self, Deduplicated::Duplicate { .. })
    }
}

/// A handler that runs its inner handler at most once per idempotency key (in effect).
///
/// - A key completed before: success, without running the inner handler
///   ([`Deduplicated::Duplicate`]).
/// - A key in progress in another invocation: [`RecordError::InProgress`] (retried later).
/// - The same key with another payload: [`RecordError::PayloadMismatch`].
/// - The store unreachable: [`RecordError::Store`]; never a success.
/// - The inner handler fails or panics: the failure is recorded and the record fails.
///
/// Once the inner handler has succeeded, the record is a success even if marking it completed
/// fails (the error is logged): reporting it failed would run its effects again after the lease.
///
/// ```
/// use lambda_idempotency::{Idempotency, batch::{json, RecordContext, RecordHandlerExt}, key::KeyConfig};
/// use lambda_idempotency::store::InMemoryBackend;
///
/// #[derive(serde::Deserialize)]
/// struct Payment { payment_id: String }
///
/// let handler = json(|p: Payment, _ctx: RecordContext| async move { Ok::<_, std::io::Error>(p.payment_id) })
///     .idempotent(Idempotency::new(InMemoryBackend::default()))
///     .with_keys(KeyConfig::json_pointer("/payment_id"));
/// ```
#[derive(Debug, Clone)]
pub struct Idempotent<H, B> {
    inner: H,
    engine: Idempotency<B>,
    keys: KeyConfig,
}

impl<H, B> Idempotent<H, B> {
    /// Deduplicates `inner` with `engine`, keyed on the message id.
    pub fn new(inner: H, engine: Idempotency<B>) -> Self {
        Self {
            inner,
            engine,
            keys: KeyConfig::default(),
        }
    }

    /// Takes keys and payload hashes from elsewhere (a business key in the body, say).
    pub fn with_keys(mut self, keys: KeyConfig) -> Self {
        self.keys = keys;
        self
    }

    /// The engine.
    pub fn engine(&self) -> &Idempotency<B> {
        &self.engine
    }
}

impl<H, B> RecordHandler for Idempotent<H, B>
where
    H: RecordHandler,
    H::Output: Serialize,
    B: Backend,
{
    type Output = Deduplicated<H::Output>;

    async fn handle(
        &self,
        message: &SqsMessage,
        ctx: &RecordContext,
    ) -> Result<Self::Output, RecordError> {
        let key_error = |source| RecordError::Key {
            message_id: ctx.message_id.clone(),
            source,
        };
        let key = self.keys.key(message).map_err(key_error)?;
        let hash = self.keys.payload_hash(message).map_err(key_error)?;
        let lease = match self.engine.acquire_hashed(&key, &hash, ctx.deadline).await {
            Ok(Acquired::Started(lease)) => lease,
            Ok(Acquired::Completed { result, .. }) => {
                tracing::info!(message_id = ctx.message_id, key, "duplicate skipped");
                return Ok(Deduplicated::Duplicate { stored: result });
            }
            Ok(Acquired::InProgress { lease_until_ms }) => {
                return Err(RecordError::InProgress { lease_until_ms });
            }
            Err(AcquireError::PayloadMismatch { key }) => {
                return Err(RecordError::PayloadMismatch { key });
            }
            Err(AcquireError::Store(e)) => return Err(RecordError::Store(e)),
        };
        match AssertUnwindSafe(self.inner.handle(message, ctx))
            .catch_unwind()
            .await
        {
            Ok(Ok(output)) => {
                let json = serde_json::to_string(&output).ok().filter(|j| j != "null");
                if let Err(e) = self.engine.complete(&lease, json.as_deref()).await {
                    tracing::error!(
                        message_id = ctx.message_id,
                        key,
                        error = %e,
                        "processed, but the record could not be marked completed; \
                         a redelivery after the lease ends would run again"
                    );
                }
                Ok(Deduplicated::Processed(output))
            }
            Ok(Err(error)) => {
                if let Err(e) = self.engine.fail(&lease, &error.to_string()).await {
                    tracing::warn!(message_id = ctx.message_id, key, error = %e, "could not record the failure");
                }
                Err(error)
            }
            Err(panic) => {
                let text = format!("panicked: {}", panic_message(&panic));
                if let Err(e) = self.engine.fail(&lease, &text).await {
                    tracing::warn!(message_id = ctx.message_id, key, error = %e, "could not record the panic");
                }
                std::panic::resume_unwind(panic)
            }
        }
    }
}

/// Composition helpers for every [`RecordHandler`].
pub trait RecordHandlerExt: RecordHandler + Sized {
    /// Deduplicates this handler with `engine` (keyed on the message id; see
    /// [`Idempotent::with_keys`]).
    fn idempotent<B: Backend>(self, engine: Idempotency<B>) -> Idempotent<Self, B> {
        Idempotent::new(self, engine)
    }
}

impl<H: RecordHandler> RecordHandlerExt for H {}

/// Why a whole invocation fails (every record is redelivered).
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// A record has no message id, so no partial response can name it.
    #[error(
        "record {index} of the batch has no messageId: a partial batch response cannot name it, \
         so the whole batch fails and is redelivered"
    )]
    MissingMessageId {
        /// Its position in the batch.
        index: usize,
    },
}

/// One record's result.
#[derive(Debug)]
pub struct RecordReport<T> {
    /// Position in the event's `Records`.
    pub index: usize,
    /// The message id.
    pub message_id: String,
    /// What the handler gave.
    pub result: Result<T, RecordError>,
    /// The record failed permanently and was moved to the dead-letter queue: it is
    /// acknowledged, not reported.
    pub dead_lettered: bool,
}

/// The result of every record of a batch, in batch order.
#[derive(Debug)]
pub struct BatchReport<T> {
    /// One per record, in batch order.
    pub records: Vec<RecordReport<T>>,
}

impl<T> BatchReport<T> {
    /// The partial batch response: exactly the failed records' message ids.
    pub fn response(&self) -> SqsBatchResponse {
        let mut response = SqsBatchResponse::default();
        response.batch_item_failures = self
            .failures()
            .map(|r| {
                let mut failure = BatchItemFailure::default();
                failure.item_identifier = r.message_id.clone();
                failure
            })
            .collect();
        response
    }

    /// The failed records reported for redelivery (not those moved to the dead-letter queue).
    pub fn failures(&self) -> impl Iterator<Item = &RecordReport<T>> {
        self.records
            .iter()
            .filter(|r| r.result.is_err() && !r.dead_lettered)
    }

    /// The records moved to the dead-letter queue.
    pub fn dead_lettered(&self) -> impl Iterator<Item = &RecordReport<T>> {
        self.records.iter().filter(|r| r.dead_lettered)
    }

    /// The successful records' outputs.
    pub fn successes(&self) -> impl Iterator<Item = (&str, &T)> {
        self.records
            .iter()
            .filter_map(|r| r.result.as_ref().ok().map(|t| (r.message_id.as_str(), t)))
    }
}

/// Runs a [`RecordHandler`] over SQS batches.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
/// use lambda_idempotency::batch::{BatchProcessor, message};
/// use lambda_runtime::{Context, LambdaEvent};
///
/// let mut event = SqsEvent::default();
/// for (id, body) in [("a", "ok"), ("b", "bad")] {
///     let mut m = SqsMessage::default();
///     m.message_id = Some(id.into());
///     m.body = Some(body.into());
///     event.records.push(m);
/// }
/// let handler = message(|m, _ctx| async move {
///     if m.body.as_deref() == Some("bad") { Err("refused") } else { Ok(()) }
/// });
/// let report = BatchProcessor::new()
///     .process(&LambdaEvent::new(event, Context::default()), &handler)
///     .await
///     .unwrap();
/// let failed: Vec<_> = report.response().batch_item_failures.into_iter().map(|f| f.item_identifier).collect();
/// assert_eq!(failed, ["b"]);
/// # });
/// ```
///
/// In a function:
///
/// ```no_run
/// use lambda_idempotency::batch::{BatchProcessor, message};
/// use lambda_runtime::{service_fn, LambdaEvent, Error};
/// use aws_lambda_events::sqs::SqsEvent;
///
/// # async fn main_() -> Result<(), Error> {
/// let processor = BatchProcessor::new();
/// let handler = message(|_m, _ctx| async { Ok::<_, Error>(()) });
/// lambda_runtime::run(service_fn(|event: LambdaEvent<SqsEvent>| {
///     let (processor, handler) = (&processor, &handler);
///     async move { Ok::<_, Error>(processor.process(&event, handler).await?.response()) }
/// }))
/// .await
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct BatchProcessor {
    concurrency: usize,
    start_margin: Duration,
    stop_margin: Duration,
    strict_order: bool,
    clock: Arc<dyn Clock>,
    backoff: Option<Arc<VisibilityBackoff>>,
    dead_letter: Option<Arc<DeadLetter>>,
}

impl Default for BatchProcessor {
    fn default() -> Self {
        Self::new()
    }
}

/// Default number of records (or FIFO groups) in flight at once.
pub const DEFAULT_CONCURRENCY: usize = 10;
/// Default time before the deadline after which no record starts.
pub const DEFAULT_START_MARGIN: Duration = Duration::from_millis(1000);
/// Default time before the deadline at which running records are cancelled and reported failed.
pub const DEFAULT_STOP_MARGIN: Duration = Duration::from_millis(250);

impl BatchProcessor {
    /// A processor with the defaults: 10 in flight, start margin 1 s, stop margin 250 ms,
    /// FIFO failures blocking their message group only.
    pub fn new() -> Self {
        Self {
            concurrency: DEFAULT_CONCURRENCY,
            start_margin: DEFAULT_START_MARGIN,
            stop_margin: DEFAULT_STOP_MARGIN,
            strict_order: false,
            clock: Arc::new(SystemClock),
            backoff: None,
            dead_letter: None,
        }
    }

    /// Moves permanently failed records ([`RecordError::is_permanent`]) to a dead-letter queue
    /// and acknowledges them, instead of burning every retry (see [`DeadLetter`]).
    pub fn with_dead_letter(mut self, dead_letter: DeadLetter) -> Self {
        self.dead_letter = Some(Arc::new(dead_letter));
        self
    }

    /// Spaces out the retries of failed records by setting their visibility timeout (see
    /// [`VisibilityBackoff`]).
    pub fn with_backoff(mut self, backoff: VisibilityBackoff) -> Self {
        self.backoff = Some(Arc::new(backoff));
        self
    }

    /// How many records (standard queues) or message groups (FIFO) run at once (at least 1).
    pub fn concurrency(mut self, limit: usize) -> Self {
        self.concurrency = limit.max(1);
        self
    }

    /// A record does not start when less than `margin` is left before the deadline; it is
    /// reported failed and redelivered.
    pub fn start_margin(mut self, margin: Duration) -> Self {
        self.start_margin = margin;
        self
    }

    /// Records still running `margin` before the deadline are cancelled and reported failed, so
    /// that the response reaches Lambda before it stops the invocation (which would redeliver
    /// the whole batch).
    pub fn stop_margin(mut self, margin: Duration) -> Self {
        self.stop_margin = margin;
        self
    }

    /// FIFO queues: stop the whole batch at the first failure (every later record is reported
    /// failed), instead of only the failed record's message group.
    pub fn strict_order(mut self, strict: bool) -> Self {
        self.strict_order = strict;
        self
    }

    /// Uses another clock for the deadline checks.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Runs `handler` over every record of `event`.
    pub async fn process<H: RecordHandler>(
        &self,
        event: &LambdaEvent<SqsEvent>,
        handler: &H,
    ) -> Result<BatchReport<H::Output>, BatchError> {
        let records = &event.payload.records;
        let mut ids = Vec::with_capacity(records.len());
        for (index, record) in records.iter().enumerate() {
            match record.message_id.as_deref() {
                Some(id) if !id.is_empty() => ids.push(id),
                _ => return Err(BatchError::MissingMessageId { index }),
            }
        }
        let deadline_ms = i64::try_from(event.context.deadline).unwrap_or(i64::MAX);
        let run = Run {
            processor: self,
            handler,
            records,
            ids: &ids,
            deadline_ms: (deadline_ms > 0).then_some(deadline_ms),
            request_id: &event.context.request_id,
        };
        let is_fifo = records
            .first()
            .and_then(|r| r.event_source_arn.as_deref())
            .is_some_and(|arn| arn.ends_with(".fifo"));
        let mut results: Vec<Option<Result<H::Output, RecordError>>> =
            (0..records.len()).map(|_| None).collect();
        if !is_fifo {
            let outcomes: Vec<_> = stream::iter(0..records.len())
                .map(|i| run.one(i).map(move |r| (i, r)))
                .buffer_unordered(self.concurrency)
                .collect()
                .await;
            for (i, r) in outcomes {
                results[i] = Some(r);
            }
        } else if self.strict_order {
            for (i, r) in run.in_order((0..records.len()).collect(), None).await {
                results[i] = Some(r);
            }
        } else {
            let outcomes: Vec<_> = stream::iter(fifo_groups(records))
                .map(|(group, indices)| run.in_order(indices, Some(group)))
                .buffer_unordered(self.concurrency)
                .collect()
                .await;
            for (i, r) in outcomes.into_iter().flatten() {
                results[i] = Some(r);
            }
        }
        let records = results
            .into_iter()
            .enumerate()
            .map(|(index, result)| RecordReport {
                index,
                message_id: ids[index].to_owned(),
                result: result.expect("every record has a result"),
                dead_lettered: false,
            })
            .collect::<Vec<_>>();
        for r in &records {
            if let Err(e) = &r.result {
                tracing::warn!(message_id = r.message_id, error = %e, "record failed");
            }
        }
        let mut report = BatchReport { records };
        if let Some(dead_letter) = &self.dead_letter {
            dead_letter.apply(&event.payload.records, &mut report).await;
        }
        if let Some(backoff) = &self.backoff {
            backoff.apply(&event.payload.records, &report).await;
        }
        Ok(report)
    }
}

/// One batch being processed.
struct Run<'a, H> {
    processor: &'a BatchProcessor,
    handler: &'a H,
    records: &'a [SqsMessage],
    ids: &'a [&'a str],
    deadline_ms: Option<i64>,
    request_id: &'a str,
}

impl<H: RecordHandler> Run<'_, H> {
    /// Runs records one after another; after a failure the rest are not run.
    async fn in_order(
        &self,
        indices: Vec<usize>,
        group: Option<String>,
    ) -> Vec<(usize, Result<H::Output, RecordError>)> {
        let mut out = Vec::with_capacity(indices.len());
        let mut failed: Option<String> = None;
        for i in indices {
            let result = match &failed {
                None => self.one(i).await,
                Some(first) => Err(match &group {
                    Some(group_id) => RecordError::GroupBlocked {
                        group_id: group_id.clone(),
                        failed: first.clone(),
                    },
                    None => RecordError::BatchStopped {
                        failed: first.clone(),
                    },
                }),
            };
            if result.is_err() && failed.is_none() {
                failed = Some(self.ids[i].to_owned());
            }
            out.push((i, result));
        }
        out
    }

    /// Runs one record: deadline checks, panic isolation.
    async fn one(&self, i: usize) -> Result<H::Output, RecordError> {
        let message = &self.records[i];
        let ctx = RecordContext {
            message_id: self.ids[i].to_owned(),
            deadline: self
                .deadline_ms
                .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)),
            receive_count: message
                .attributes
                .get("ApproximateReceiveCount")
                .and_then(|c| c.parse().ok())
                .unwrap_or(0),
            group_id: message.attributes.get("MessageGroupId").cloned(),
            request_id: self.request_id.to_owned(),
        };
        let span = tracing::info_span!("record", message_id = ctx.message_id);
        // Boxed: keeps the future types of deeply composed handlers shallow enough for rustc's
        // layout recursion limit, for one allocation per record.
        let work = AssertUnwindSafe(Box::pin(self.handler.handle(message, &ctx))).catch_unwind();
        let outcome = match self.deadline_ms {
            None => work.instrument(span).await,
            Some(deadline_ms) => {
                let p = self.processor;
                let left = deadline_ms - p.clock.now_ms();
                if left < millis(p.start_margin) {
                    return Err(RecordError::DeadlineNear {
                        margin: p.start_margin,
                    });
                }
                let budget = Duration::from_millis((left - millis(p.stop_margin)).max(0) as u64);
                match tokio::time::timeout(budget, work.instrument(span)).await {
                    Ok(outcome) => outcome,
                    Err(_) => {
                        return Err(RecordError::DeadlineReached {
                            margin: p.stop_margin,
                        });
                    }
                }
            }
        };
        outcome.unwrap_or_else(|panic| Err(RecordError::Panicked(panic_message(&panic))))
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The records of a FIFO batch by message group, each group in batch order, groups in order of
/// first appearance. Records without a group id form one group.
pub fn fifo_groups(records: &[SqsMessage]) -> Vec<(String, Vec<usize>)> {
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    let mut position: HashMap<&str, usize> = HashMap::new();
    for (i, record) in records.iter().enumerate() {
        let group = record
            .attributes
            .get("MessageGroupId")
            .map_or("", String::as_str);
        match position.get(group) {
            Some(&g) => groups[g].1.push(i),
            None => {
                position.insert(group, groups.len());
                groups.push((group.to_owned(), vec![i]));
            }
        }
    }
    groups
}

/// The text of a panic payload.
pub fn panic_message(panic: &Box<dyn Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}
