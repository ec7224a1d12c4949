//! [`RecordHandlerExt`]: behaviour by composition, for every [`RecordHandler`].

use std::future::Future;

use super::boxed::BoxRecordHandler;
use super::handler::{DeadLettered, OnDeadLetter, RecordContext, RecordHandler};
use super::idempotent::Idempotent;
use super::inline::Inline;
use super::then::AndThen;
use super::transactional::Transactional;
use crate::Idempotency;
use crate::store::{Backend, BoxError, TransactionalBackend};

/// Composition helpers for every [`RecordHandler`].
pub trait RecordHandlerExt: RecordHandler + Sized {
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
    fn on_dead_letter<F, Fut>(self, hook: F) -> OnDeadLetter<Self, F>
    where
        F: Fn(DeadLettered) -> Fut + Send + Sync,
        Fut: Future<Output = ()> + Send,
    {
        OnDeadLetter::new(self, hook)
    }

    /// This handler, boxed: a [`BoxRecordHandler`] of the same output, whose type can be named
    /// (a field of an application's state, a test's fixture), for one allocation per record.
    fn boxed(self) -> BoxRecordHandler<Self::Output>
    where
        Self: 'static,
        Self::Output: 'static,
    {
        BoxRecordHandler::new(self)
    }
}

impl<H: RecordHandler> RecordHandlerExt for H {}
