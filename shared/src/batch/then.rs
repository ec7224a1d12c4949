//! The [`AndThen`] combinator: a follow-up on each successful output of a handler.

use std::future::Future;

use super::handler::HandlerOutput;
use super::{RecordContext, RecordHandler};
use crate::error::RecordError;
use crate::record::Record;
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

impl<H, F, Fut, O, E> HandlerOutput for AndThen<H, F>
where
    H: HandlerOutput,
    F: Fn(H::Output, RecordContext) -> Fut + Send + Sync,
    Fut: Future<Output = Result<O, E>> + Send,
    O: Send,
    E: Into<BoxError>,
{
    type Output = O;
}

impl<R, H, F, Fut, O, E> RecordHandler<R> for AndThen<H, F>
where
    R: Record,
    H: RecordHandler<R>,
    F: Fn(H::Output, RecordContext) -> Fut + Send + Sync,
    Fut: Future<Output = Result<O, E>> + Send,
    O: Send,
    E: Into<BoxError>,
{
    async fn handle(&self, record: &R, ctx: &RecordContext) -> Result<O, RecordError> {
        let output = self.inner.handle(record, ctx).await?;
        let work = (self.f)(output, ctx.clone());
        ctx.cancellable(async { work.await.map_err(RecordError::handler) })
            .await
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

    fn dead_lettered(
        &self,
        record: &R,
        ctx: &RecordContext,
        error: &RecordError,
    ) -> impl Future<Output = ()> + Send {
        self.inner.dead_lettered(record, ctx, error)
    }
}

/// A handler whose records run in order by a key it chooses; see
/// [`RecordHandlerExt::ordered_by`](super::RecordHandlerExt::ordered_by).
#[derive(Debug, Clone)]
pub struct OrderedBy<H, F> {
    inner: H,
    key: F,
}

impl<H, F> OrderedBy<H, F> {
    /// `inner`, its records ordered by `key`.
    pub fn new(inner: H, key: F) -> Self {
        Self { inner, key }
    }
}

impl<H: HandlerOutput, F: Send + Sync> HandlerOutput for OrderedBy<H, F> {
    type Output = H::Output;
}

impl<R, H, F> RecordHandler<R> for OrderedBy<H, F>
where
    R: Record,
    H: RecordHandler<R>,
    F: Fn(&R) -> Option<String> + Send + Sync,
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
        (self.key)(record)
    }

    fn counts_attempts(&self) -> bool {
        self.inner.counts_attempts()
    }

    fn dead_lettered(
        &self,
        record: &R,
        ctx: &RecordContext,
        error: &RecordError,
    ) -> impl Future<Output = ()> + Send {
        self.inner.dead_lettered(record, ctx, error)
    }
}
