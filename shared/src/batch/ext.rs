//! [`RecordHandlerExt`]: behaviour by composition, for every [`RecordHandler`].

use std::future::Future;

use super::handler::{DeadLettered, OnDeadLetter, RecordHandler};
use super::idempotent::Idempotent;
use crate::Idempotency;
use crate::store::Backend;

/// Composition helpers for every [`RecordHandler`].
pub trait RecordHandlerExt: RecordHandler + Sized {
    /// Deduplicates this handler with `engine` (keyed on the message id; see
    /// [`Idempotent::with_keys`]).
    fn idempotent<B: Backend>(self, engine: Idempotency<B>) -> Idempotent<Self, B> {
        Idempotent::new(self, engine)
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
}

impl<H: RecordHandler> RecordHandlerExt for H {}
