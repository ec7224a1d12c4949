//! The [`Idempotent`] wrapper: a handler that runs its inner handler at most once per
//! idempotency key, in effect.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use aws_lambda_events::sqs::SqsMessage;
use futures_util::FutureExt;
use serde::Serialize;

use super::{RecordContext, RecordHandler};
use crate::Idempotency;
use crate::error::{RecordError, panic_message};
use crate::key::KeyConfig;
use crate::lease::{AcquireError, Acquired, Lease};
use crate::payload::PayloadHash;
use crate::store::{Backend, Updated};

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
    impl<W> Sealed for super::super::transactional::TransactionalMode<W> {}
    impl<W> Sealed for super::super::inline::InlineMode<W> {}
}

/// How an [`Idempotent`] handler writes its record: [`LeaseMode`],
/// [`TransactionalMode`](super::TransactionalMode) or [`InlineMode`](super::InlineMode). Only
/// these three.
pub trait Mode<H, B>: sealed::Sealed + Send + Sync + Sized {
    /// What a record gives.
    type Output: Send;

    /// Runs `wrapper`'s inner handler on `message` at most once per key, in effect.
    // Not API: the trait is sealed, and only `Idempotent`'s `RecordHandler::handle` calls it.
    #[doc(hidden)]
    fn handle(
        wrapper: &Idempotent<H, B, Self>,
        message: &SqsMessage,
        ctx: &RecordContext,
    ) -> impl Future<Output = Result<Self::Output, RecordError>> + Send;
}

impl<H, B, M> RecordHandler for Idempotent<H, B, M>
where
    H: RecordHandler,
    B: Backend,
    M: Mode<H, B>,
{
    type Output = M::Output;

    fn handle(
        &self,
        message: &SqsMessage,
        ctx: &RecordContext,
    ) -> impl Future<Output = Result<Self::Output, RecordError>> + Send {
        M::handle(self, message, ctx)
    }

    fn key(&self, message: &SqsMessage) -> Option<String> {
        self.keys.key(message).ok()
    }

    fn counts_attempts(&self) -> bool {
        true
    }

    async fn dead_lettered(&self, message: &SqsMessage, ctx: &RecordContext, error: &RecordError) {
        // The application first: it is told within the time the processor reserved for it.
        self.inner.dead_lettered(message, ctx, error).await;
        if error.attempts().is_some()
            && let Ok(key) = self.keys.key(message)
            && let Some(Err(e)) = bounded(ctx, self.engine.reset_attempts(&key)).await
        {
            tracing::warn!(message_id = ctx.message_id, key, error = %e, "could not reset the attempts of a dead-lettered record");
        }
    }
}

/// The lease mode (see [`Idempotent`]): an in-progress record with a lease to the deadline,
/// then the handler, then the record completed or failed.
#[derive(Debug, Clone, Copy, Default)]
pub struct LeaseMode;

/// Time kept between the end of the bookkeeping and [`RecordContext::finish_by`].
const WRITE_SLACK: Duration = Duration::from_millis(50);

impl<H, B> Idempotent<H, B, LeaseMode>
where
    H: RecordHandler,
    B: Backend,
{
    /// Records the failure; the error carries the key's failed attempts when the store gave them.
    async fn record_failure(
        &self,
        lease: &Lease,
        ctx: &RecordContext,
        error: RecordError,
    ) -> RecordError {
        let text = error.to_string();
        match bounded(ctx, self.engine.fail(lease, &text)).await {
            Some(Ok(Updated::Applied {
                attempts: Some(attempts),
            })) => RecordError::Attempt {
                attempts,
                error: Box::new(error),
            },
            Some(Ok(Updated::Applied { attempts: None })) => RecordError::Attempt {
                attempts: lease.attempts() + 1,
                error: Box::new(error),
            },
            Some(Ok(Updated::NotApplied)) => {
                tracing::warn!(
                    message_id = ctx.message_id,
                    key = lease.key(),
                    "failure not recorded: another attempt holds the key now"
                );
                error
            }
            Some(Err(e)) => {
                tracing::warn!(message_id = ctx.message_id, key = lease.key(), error = %e, "could not record the failure");
                error
            }
            None => {
                tracing::warn!(
                    message_id = ctx.message_id,
                    key = lease.key(),
                    "could not record the failure before the deadline"
                );
                error
            }
        }
    }
}

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

impl<H, B> Mode<H, B> for LeaseMode
where
    H: RecordHandler,
    H::Output: Serialize,
    B: Backend,
{
    type Output = Deduplicated<H::Output>;

    async fn handle(
        this: &Idempotent<H, B, Self>,
        message: &SqsMessage,
        ctx: &RecordContext,
    ) -> Result<Self::Output, RecordError> {
        let (key, hash) = key_and_hash(&this.keys, message, ctx)?;
        if let Some(error) = too_late_to_start(ctx) {
            return Err(error);
        }
        let lease = match this.engine.acquire_hashed(&key, &hash, ctx.deadline).await {
            Ok(Acquired::Started(lease)) => lease,
            Ok(Acquired::Duplicate { result, .. }) => {
                tracing::info!(message_id = ctx.message_id, key, "duplicate skipped");
                return Ok(Deduplicated::Duplicate { stored: result });
            }
            Ok(Acquired::InProgress { lease_until_ms }) => {
                return Err(RecordError::InProgress { lease_until_ms });
            }
            Err(AcquireError::PayloadMismatch { key, stored }) => {
                return Err(RecordError::PayloadMismatch { key, stored });
            }
            Err(AcquireError::Store(e)) => return Err(RecordError::Store(e)),
        };
        let mut inner_ctx = ctx.clone();
        inner_ctx.attempt = lease.attempts() + 1;
        let work = ctx.cancellable(this.inner.handle(message, &inner_ctx));
        match AssertUnwindSafe(work).catch_unwind().await {
            Ok(Ok(output)) => {
                let json = serde_json::to_string(&output).ok().filter(|j| j != "null");
                let write =
                    this.engine
                        .complete_with_retries(&lease, json.as_deref(), ctx.finish_by);
                let problem = match bounded(ctx, write).await {
                    Some(Ok(Updated::Applied { .. })) => None,
                    Some(Ok(Updated::NotApplied)) => Some(
                        "another attempt took the key over after this one's lease ended".into(),
                    ),
                    Some(Err(e)) => Some(e.to_string()),
                    None => Some("no time left before the deadline".to_owned()),
                };
                if let Some(problem) = problem {
                    tracing::error!(
                        message_id = ctx.message_id,
                        key,
                        problem,
                        "processed, but the record could not be marked completed; \
                         a redelivery after the lease ends would run again"
                    );
                }
                Ok(Deduplicated::Processed(output))
            }
            // Cut by the deadline before it started: no attempt to record. The lease ends at the
            // deadline, and the next delivery takes the key over with its attempts as they were.
            Ok(Err(error @ RecordError::DeadlineNear { .. })) => Err(error),
            Ok(Err(error)) => Err(this.record_failure(&lease, ctx, error).await),
            Err(panic) => {
                let error = RecordError::Panicked(panic_message(&panic));
                Err(this.record_failure(&lease, ctx, error).await)
            }
        }
    }
}

/// [`RecordError::DeadlineNear`] when the record's [`stop_at`](RecordContext::stop_at) has passed:
/// its handler would not start, so neither the key is taken nor an attempt spent.
pub(super) fn too_late_to_start(ctx: &RecordContext) -> Option<RecordError> {
    let stop_at = ctx.stop_at?;
    stop_at
        .has_passed(&*ctx.clock)
        .then(|| RecordError::DeadlineNear {
            margin: ctx.deadline.map(|d| d.since(stop_at)).unwrap_or_default(),
        })
}

/// The record's idempotency key and payload hash, or why there is none.
pub(super) fn key_and_hash(
    keys: &KeyConfig,
    message: &SqsMessage,
    ctx: &RecordContext,
) -> Result<(String, PayloadHash), RecordError> {
    keys.key_and_payload_hash(message)
        .map_err(|source| RecordError::Key {
            message_id: ctx.message_id.clone(),
            source,
        })
}
