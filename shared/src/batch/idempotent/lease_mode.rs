//! The lease mode of the [`Idempotent`] wrapper: an in-progress record with a lease to the
//! deadline, then the handler, then the record completed or failed.

use serde::Serialize;

use super::{Deduplicated, Idempotent, Mode, bounded, key_and_hash};
use crate::batch::handler::HandlerOutput;
use crate::batch::{RecordContext, RecordHandler};
use crate::error::RecordError;
use crate::lease::{AcquireError, Acquired, Lease};
use crate::record::Record;
use crate::store::{Backend, Updated};

/// The lease mode (see [`Idempotent`]): an in-progress record with a lease to the deadline,
/// then the handler, then the record completed or failed.
#[derive(Debug, Clone, Copy, Default)]
pub struct LeaseMode;

impl<H, B> Idempotent<H, B, LeaseMode>
where
    H: HandlerOutput,
    B: Backend,
{
    /// Records the failure; the error carries the key's failed attempts when the store gave them.
    /// A [`RecordError::Transient`] is recorded without counting an attempt, and stays as it is.
    async fn record_failure(
        &self,
        lease: &Lease,
        ctx: &RecordContext,
        error: RecordError,
    ) -> RecordError {
        let text = error.to_string();
        let counted = !matches!(error.cause(), RecordError::Transient(_));
        let fail = async {
            if counted {
                self.engine.fail(lease, &text).await
            } else {
                self.engine.fail_not_counted(lease, &text).await
            }
        };
        match bounded(ctx, fail).await {
            // Recorded without counting: not an attempt.
            Some(Ok(Updated::Applied { .. })) if !counted => error,
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

impl<H, B> Mode<H, B> for LeaseMode
where
    H: HandlerOutput,
    H::Output: Serialize,
    B: Backend,
{
    type Output = Deduplicated<H::Output>;

    async fn handle<R: Record>(
        this: &Idempotent<H, B, Self>,
        record: &R,
        ctx: &RecordContext,
    ) -> Result<Self::Output, RecordError>
    where
        H: RecordHandler<R>,
    {
        let (key, hash) = key_and_hash(&this.keys, record, ctx)?;
        if let Some(error) = ctx.too_late_to_start() {
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
        match ctx.guarded(this.inner.handle(record, &inner_ctx)).await {
            Ok(output) => {
                let json = serde_json::to_string(&output).ok().filter(|j| j != "null");
                let write =
                    this.engine
                        .complete_with_retries(&lease, json.as_deref(), ctx.finish_by);
                let problem = match bounded(ctx, write).await {
                    Some(Ok(Updated::Applied { .. })) => None,
                    Some(Ok(Updated::NotApplied)) => Some((
                        "another attempt took the key over after this one's lease ended".into(),
                        false,
                    )),
                    Some(Err(e)) => Some((e.to_string(), true)),
                    None => Some(("no time left before the deadline".to_owned(), true)),
                };
                if let Some((problem, remember)) = problem {
                    tracing::error!(
                        message_id = ctx.message_id,
                        key,
                        problem,
                        remembered = remember,
                        "processed, but the record could not be marked completed; when \
                         remembered, this process writes it on the key's next delivery and \
                         answers that delivery as a duplicate"
                    );
                    if remember {
                        this.engine.remember_unrecorded(&lease, json.as_deref());
                    }
                }
                Ok(Deduplicated::Processed(output))
            }
            // Cut by the deadline before it started: no attempt to record. The lease ends at the
            // deadline, and the next delivery takes the key over with its attempts as they were.
            Err(error @ RecordError::DeadlineNear { .. }) => Err(error),
            Err(error) => Err(this.record_failure(&lease, ctx, error).await),
        }
    }
}
