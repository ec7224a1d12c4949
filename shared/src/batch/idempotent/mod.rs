//! The [`Idempotent`] wrapper: a handler that runs its inner handler at most once per
//! idempotency key, in effect, in one of three modes (each a child module): the lease
//! ([`LeaseMode`]), the transaction ([`TransactionalMode`]) and the inline item
//! ([`InlineMode`]). What they share is here: keys, attempts, what happens once a record is
//! dead-lettered, and the bounded bookkeeping.

mod inline_mode;
mod lease_mode;
mod transactional_mode;

use std::future::Future;
use std::time::Duration;

pub use inline_mode::{Inline, InlineMode};
pub use lease_mode::LeaseMode;
pub use transactional_mode::{Transactional, TransactionalMode};

use super::handler::HandlerOutput;
use super::{RecordContext, RecordHandler};
use crate::Idempotency;
use crate::error::RecordError;
use crate::key::KeyConfig;
use crate::lease::Acquired;
use crate::payload::PayloadHash;
use crate::record::Record;
use crate::store::Backend;

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
/// - The store unreachable, or its table misconfigured
///   ([`StoreError::Misconfigured`](crate::store::StoreError::Misconfigured), naming the table
///   and what does not match): [`RecordError::Store`]; never a success, never permanent: the
///   record is left for redelivery.
/// - The inner handler fails or panics: the failure is recorded and the record fails with
///   [`RecordError::Attempt`], carrying the key's failed attempts (what the processor's attempt
///   budget and backoff go by).
///
/// The inner handler runs with [`RecordContext::attempt`] set from the store, and is cancelled at
/// [`RecordContext::stop_at`]; marking the record completed or failed is not cancelled with it
/// (it is bounded by [`RecordContext::finish_by`]). Once the inner handler has succeeded, the
/// record is a success even if marking it completed fails after retries (the error is logged):
/// reporting it failed would run its effects again.
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
///
/// The same wrapper, with another [`Mode`], commits the handler's writes with the record
/// ([`Transactional`](super::Transactional)) or writes its one new item with the record on it
/// ([`Inline`](super::Inline)): they share its keys, its attempts and what it does once a record
/// is dead-lettered, and differ in how the record is written.
#[derive(Debug, Clone)]
pub struct Idempotent<H, B, M = LeaseMode> {
    pub(super) inner: H,
    pub(super) engine: Idempotency<B>,
    pub(super) keys: KeyConfig,
    pub(super) mode: M,
}

impl<H, B, M> Idempotent<H, B, M> {
    /// `inner` in `mode` with `engine`, keyed on the message id.
    pub(super) fn new(inner: H, engine: Idempotency<B>, mode: M) -> Self {
        Self {
            inner,
            engine,
            keys: KeyConfig::default(),
            mode,
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

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::LeaseMode {}
    impl<W> Sealed for super::TransactionalMode<W> {}
    impl<W> Sealed for super::InlineMode<W> {}
}

/// How an [`Idempotent`] handler writes its record: [`LeaseMode`], [`TransactionalMode`] or
/// [`InlineMode`]. Only these three.
pub trait Mode<H, B>: sealed::Sealed + Send + Sync + Sized {
    /// What a record gives.
    type Output: Send;

    /// Runs `wrapper`'s inner handler on `record` at most once per key, in effect.
    // Not API: the trait is sealed, and only `Idempotent`'s `RecordHandler::handle` calls it.
    #[doc(hidden)]
    fn handle<R: Record>(
        wrapper: &Idempotent<H, B, Self>,
        record: &R,
        ctx: &RecordContext,
    ) -> impl Future<Output = Result<Self::Output, RecordError>> + Send
    where
        H: RecordHandler<R>;
}

impl<H, B, M> HandlerOutput for Idempotent<H, B, M>
where
    H: HandlerOutput,
    B: Backend,
    M: Mode<H, B>,
{
    type Output = M::Output;
}

impl<R, H, B, M> RecordHandler<R> for Idempotent<H, B, M>
where
    R: Record,
    H: RecordHandler<R>,
    B: Backend,
    M: Mode<H, B>,
{
    fn handle(
        &self,
        record: &R,
        ctx: &RecordContext,
    ) -> impl Future<Output = Result<Self::Output, RecordError>> + Send {
        M::handle(self, record, ctx)
    }

    fn key(&self, record: &R) -> Option<String> {
        self.keys.key(record).ok()
    }

    fn order_key(&self, record: &R) -> Option<String> {
        self.inner.order_key(record)
    }

    fn counts_attempts(&self) -> bool {
        true
    }

    async fn dead_lettered(&self, record: &R, ctx: &RecordContext, error: &RecordError) {
        // The application first: it is told within the time the processor reserved for it.
        self.inner.dead_lettered(record, ctx, error).await;
        if R::redriven() {
            // A redrive from the dead-letter queue starts a new attempt budget.
            if error.attempts().is_some()
                && let Ok(key) = self.keys.key(record)
                && let Some(Err(e)) = bounded(ctx, self.engine.reset_attempts(&key)).await
            {
                tracing::warn!(message_id = ctx.message_id, key, error = %e, "could not reset the attempts of a dead-lettered record");
            }
        } else if let Ok((key, hash)) = self.keys.key_and_payload_hash_of(record, &ctx.message_id) {
            // The stream moves past the record, and replays it when an earlier record of its
            // shard is retried: its key is settled, so that the replay neither runs it nor sends
            // it to the destination again.
            settle_dead_lettered(&self.engine, &key, &hash, ctx, error).await;
        }
    }
}

/// Marks `key` completed with a result saying it was dead-lettered (`{"deadLettered": reason}`),
/// so that a replay of its stream answers it as a duplicate.
async fn settle_dead_lettered<B: Backend>(
    engine: &Idempotency<B>,
    key: &str,
    hash: &PayloadHash,
    ctx: &RecordContext,
    error: &RecordError,
) {
    let result =
        serde_json::json!({ "deadLettered": crate::redact::safe_reason(&error.to_string()) })
            .to_string();
    let settle = async {
        match engine.acquire_hashed(key, hash, ctx.deadline).await {
            Ok(Acquired::Started(lease)) => engine
                .complete(&lease, Some(&result))
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Ok(_) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    };
    match bounded(ctx, settle).await {
        Some(Ok(())) => {}
        Some(Err(e)) => {
            tracing::warn!(
                message_id = ctx.message_id,
                key,
                error = e,
                "could not settle a dead-lettered stream record: a replay of its shard runs it again"
            )
        }
        None => tracing::warn!(
            message_id = ctx.message_id,
            key,
            "could not settle a dead-lettered stream record before the deadline: a replay of its shard runs it again"
        ),
    }
}

/// Time kept between the end of the bookkeeping and [`RecordContext::finish_by`].
const WRITE_SLACK: Duration = Duration::from_millis(50);

/// Runs `write` until `finish_by` (less a little slack); `None` when it did not finish.
async fn bounded<T>(ctx: &RecordContext, write: impl Future<Output = T>) -> Option<T> {
    match ctx.finish_by {
        None => Some(write.await),
        Some(at) => {
            let left = at.remaining(&*ctx.clock).saturating_sub(WRITE_SLACK);
            tokio::time::timeout(left, write).await.ok()
        }
    }
}

/// The record's idempotency key and payload hash, or why there is none.
fn key_and_hash<R: Record>(
    keys: &KeyConfig,
    record: &R,
    ctx: &RecordContext,
) -> Result<(String, PayloadHash), RecordError> {
    keys.key_and_payload_hash_of(record, &ctx.message_id)
        .map_err(|source| RecordError::Key {
            message_id: ctx.message_id.clone(),
            source,
        })
}
