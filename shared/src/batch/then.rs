//! The [`AndThen`] combinator: a follow-up on each successful output of a handler.

use std::future::Future;

use aws_lambda_events::sqs::SqsMessage;

use super::{RecordContext, RecordHandler};
use crate::error::RecordError;
use crate::store::BoxError;

/// A handler that runs a follow-up on each successful output of its inner handler; see
/// [`RecordHandlerExt::and_then`](super::RecordHandlerExt::and_then).
#[derive(Debug, Clone)]
pub struct AndThen<H, F> {
    inner: H,
    f: F,
}

impl<H, F> AndThen<H, F> {
    /// `inner`, followed by `f` on each of its successful outputs.
    pub fn new(inner: H, f: F) -> Self {
        Self { inner, f }
    }
}

impl<H, F, Fut, O, E> RecordHandler for AndThen<H, F>
where
    H: RecordHandler,
    F: Fn(H::Output, RecordContext) -> Fut + Send + Sync,
    Fut: Future<Output = Result<O, E>> + Send,
    O: Send,
    E: Into<BoxError>,
{
    type Output = O;

    async fn handle(&self, message: &SqsMessage, ctx: &RecordContext) -> Result<O, RecordError> {
        let output = self.inner.handle(message, ctx).await?;
        let work = (self.f)(output, ctx.clone());
        ctx.cancellable(async { work.await.map_err(RecordError::handler) })
            .await
    }

    fn key(&self, message: &SqsMessage) -> Option<String> {
        self.inner.key(message)
    }

    fn counts_attempts(&self) -> bool {
        self.inner.counts_attempts()
    }

    fn dead_lettered(
        &self,
        message: &SqsMessage,
        ctx: &RecordContext,
        error: &RecordError,
    ) -> impl Future<Output = ()> + Send {
        self.inner.dead_lettered(message, ctx, error)
    }
}
