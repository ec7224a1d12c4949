//! [`BoxRecordHandler`]: a built handler whose type can be named, so that a struct holds it and a
//! test calls it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use aws_lambda_events::sqs::SqsMessage;

use super::handler::HandlerOutput;
use super::{RecordContext, RecordHandler};
use crate::error::RecordError;
use crate::record::Record;

/// A future boxed for [`BoxRecordHandler`].
type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The object-safe form of [`RecordHandler`], which [`BoxRecordHandler`] holds.
trait DynRecordHandler<O, R>: Send + Sync {
    fn handle<'a>(
        &'a self,
        record: &'a R,
        ctx: &'a RecordContext,
    ) -> BoxFuture<'a, Result<O, RecordError>>;
    fn key(&self, record: &R) -> Option<String>;
    fn order_key(&self, record: &R) -> Option<String>;
    fn counts_attempts(&self) -> bool;
    fn dead_lettered<'a>(
        &'a self,
        record: &'a R,
        ctx: &'a RecordContext,
        error: &'a RecordError,
    ) -> BoxFuture<'a, ()>;
}

impl<R: Record, H: RecordHandler<R>> DynRecordHandler<H::Output, R> for H {
    fn handle<'a>(
        &'a self,
        record: &'a R,
        ctx: &'a RecordContext,
    ) -> BoxFuture<'a, Result<H::Output, RecordError>> {
        Box::pin(RecordHandler::handle(self, record, ctx))
    }
    fn key(&self, record: &R) -> Option<String> {
        RecordHandler::key(self, record)
    }
    fn order_key(&self, record: &R) -> Option<String> {
        RecordHandler::order_key(self, record)
    }
    fn counts_attempts(&self) -> bool {
        RecordHandler::counts_attempts(self)
    }
    fn dead_lettered<'a>(
        &'a self,
        record: &'a R,
        ctx: &'a RecordContext,
        error: &'a RecordError,
    ) -> BoxFuture<'a, ()> {
        Box::pin(RecordHandler::dead_lettered(self, record, ctx, error))
    }
}

/// Any [`RecordHandler`] of output `O`, boxed: a type an application names where the composed
/// handler's own type (closures, wrappers) cannot be written, such as a field of its state.
/// Made by [`RecordHandlerExt::boxed`](super::RecordHandlerExt::boxed); it is a
/// [`RecordHandler`] itself, at the cost of one allocation per record.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use lambda_idempotency::batch::{BoxRecordHandler, Deduplicated, RecordContext, RecordHandler, RecordHandlerExt, json};
/// use lambda_idempotency::{Idempotency, store::InMemoryBackend};
/// use aws_lambda_events::sqs::SqsMessage;
///
/// struct App {
///     handler: BoxRecordHandler<Deduplicated<u32>>,
/// }
///
/// let app = App {
///     handler: json(|n: u32, _ctx: RecordContext| async move { Ok::<_, std::io::Error>(n + 1) })
///         .idempotent(Idempotency::new(InMemoryBackend::default()))
///         .boxed(),
/// };
/// let mut message = SqsMessage::default();
/// message.message_id = Some("m-1".into());
/// message.body = Some("41".into());
/// let done = app.handler.handle(&message, &RecordContext::new("m-1")).await.unwrap();
/// assert_eq!(done, Deduplicated::Processed(42));
/// # });
/// ```
pub struct BoxRecordHandler<O, R = SqsMessage> {
    inner: Box<dyn DynRecordHandler<O, R>>,
}

impl<O, R> fmt::Debug for BoxRecordHandler<O, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BoxRecordHandler<{}>", std::any::type_name::<O>())
    }
}

impl<O: Send + 'static, R: Record> BoxRecordHandler<O, R> {
    /// `handler`, boxed.
    pub fn new<H>(handler: H) -> Self
    where
        H: RecordHandler<R, Output = O> + 'static,
    {
        Self {
            inner: Box::new(handler),
        }
    }
}

impl<O: Send, R: Record> HandlerOutput for BoxRecordHandler<O, R> {
    type Output = O;
}

impl<O: Send, R: Record> RecordHandler<R> for BoxRecordHandler<O, R> {
    async fn handle(&self, record: &R, ctx: &RecordContext) -> Result<O, RecordError> {
        self.inner.handle(record, ctx).await
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
        self.inner.dead_lettered(record, ctx, error).await;
    }
}
