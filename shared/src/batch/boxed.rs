//! [`BoxRecordHandler`]: a built handler whose type can be named, so that a struct holds it and a
//! test calls it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use aws_lambda_events::sqs::SqsMessage;

use super::{RecordContext, RecordHandler};
use crate::error::RecordError;

/// A future boxed for [`BoxRecordHandler`].
type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The object-safe form of [`RecordHandler`], which [`BoxRecordHandler`] holds.
trait DynRecordHandler<O>: Send + Sync {
    fn handle<'a>(
        &'a self,
        message: &'a SqsMessage,
        ctx: &'a RecordContext,
    ) -> BoxFuture<'a, Result<O, RecordError>>;
    fn key(&self, message: &SqsMessage) -> Option<String>;
    fn counts_attempts(&self) -> bool;
    fn dead_lettered<'a>(
        &'a self,
        message: &'a SqsMessage,
        ctx: &'a RecordContext,
        error: &'a RecordError,
    ) -> BoxFuture<'a, ()>;
}

impl<H: RecordHandler> DynRecordHandler<H::Output> for H {
    fn handle<'a>(
        &'a self,
        message: &'a SqsMessage,
        ctx: &'a RecordContext,
    ) -> BoxFuture<'a, Result<H::Output, RecordError>> {
        Box::pin(RecordHandler::handle(self, message, ctx))
    }
    fn key(&self, message: &SqsMessage) -> Option<String> {
        RecordHandler::key(self, message)
    }
    fn counts_attempts(&self) -> bool {
        RecordHandler::counts_attempts(self)
    }
    fn dead_lettered<'a>(
        &'a self,
        message: &'a SqsMessage,
        ctx: &'a RecordContext,
        error: &'a RecordError,
    ) -> BoxFuture<'a, ()> {
        Box::pin(RecordHandler::dead_lettered(self, message, ctx, error))
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
pub struct BoxRecordHandler<O> {
    inner: Box<dyn DynRecordHandler<O>>,
}

impl<O> fmt::Debug for BoxRecordHandler<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BoxRecordHandler<{}>", std::any::type_name::<O>())
    }
}

impl<O: Send + 'static> BoxRecordHandler<O> {
    /// `handler`, boxed.
    pub fn new<H>(handler: H) -> Self
    where
        H: RecordHandler<Output = O> + 'static,
    {
        Self {
            inner: Box::new(handler),
        }
    }
}

impl<O: Send> RecordHandler for BoxRecordHandler<O> {
    type Output = O;

    async fn handle(&self, message: &SqsMessage, ctx: &RecordContext) -> Result<O, RecordError> {
        self.inner.handle(message, ctx).await
    }
    fn key(&self, message: &SqsMessage) -> Option<String> {
        self.inner.key(message)
    }
    fn counts_attempts(&self) -> bool {
        self.inner.counts_attempts()
    }
    async fn dead_lettered(&self, message: &SqsMessage, ctx: &RecordContext, error: &RecordError) {
        self.inner.dead_lettered(message, ctx, error).await;
    }
}
