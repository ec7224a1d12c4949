//! Why a charge was refused, from the payments table, and what follows: a dead letter naming the
//! mismatch, a duplicate, or the account's earlier payments settled first ([`crate::catch_up`]).
//!
//! The charge's transaction carries every check as a condition ([`crate::charge::charge`]), so a
//! charge that goes through costs no read. Only a refused one reads: the payment, and for an
//! early message its account ([`payments_model::order`]).

use aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::batch::{
    Deduplicated, HandlerOutput, RecordContext, RecordError, RecordHandler,
};
use lambda_idempotency::state::Status;
use lambda_idempotency::transaction::Rejection;
use payments_model::{PaymentCharged, PaymentRequested, PaymentStatus};

use crate::App;
use crate::charge::write;

/// payment-processor's handler: the transactional charge ([`App`]), and on a refusal the reason
/// read from the payments table.
#[derive(Debug, Clone, Copy)]
pub struct Verified<'a> {
    app: &'a App,
}

impl<'a> Verified<'a> {
    /// The handler of `app`.
    pub fn new(app: &'a App) -> Self {
        Self { app }
    }
}

impl HandlerOutput for Verified<'_> {
    type Output = Deduplicated<PaymentCharged>;
}

impl RecordHandler for Verified<'_> {
    async fn handle(
        &self,
        message: &SqsMessage,
        ctx: &RecordContext,
    ) -> Result<Self::Output, RecordError> {
        let refused = match self.app.charging().handle(message, ctx).await {
            Ok(charged) => return Ok(charged),
            Err(error) if Refusal::of(&error).is_some() => error,
            Err(error) => return Err(error),
        };
        self.app.after_refusal(message, ctx, refused).await
    }

    fn key(&self, message: &SqsMessage) -> Option<String> {
        App::keys().key(message).ok()
    }

    fn counts_attempts(&self) -> bool {
        true
    }

    async fn dead_lettered(&self, message: &SqsMessage, ctx: &RecordContext, error: &RecordError) {
        self.app.charging().dead_lettered(message, ctx, error).await;
    }
}

/// A failure that the payments table explains.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// The condition on the payment or on the account refused the charge.
    Condition,
    /// The payment's record is completed with another payload (written by a producer that
    /// hashed otherwise, or a message that disagrees with the charged payment).
    CompletedWithOtherPayload,
}

impl Refusal {
    fn of(error: &RecordError) -> Option<Self> {
        match error {
            RecordError::Attempt { error, .. } => Self::of(error),
            RecordError::Handler(e) => e
                .downcast_ref::<Rejection>()
                .filter(|r| {
                    r.is_condition() && (r.index == write::PAYMENT || r.index == write::ACCOUNT)
                })
                .map(|_| Refusal::Condition),
            RecordError::PayloadMismatch {
                stored: Status::Completed,
                ..
            } => Some(Refusal::CompletedWithOtherPayload),
            _ => None,
        }
    }
}

/// A payment as the payments table holds it, read for a refused charge.
pub use payments_model::stored::StoredPayment;

/// What the payments table says of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// No such payment: payments-api never accepted it.
    Unknown,
    /// The message disagrees with the payment on these fields.
    Disagrees(Vec<&'static str>),
    /// The payment failed (with its reason): final until an operator reopens it.
    Failed(Option<String>),
    /// The payment is charged already.
    Charged,
    /// The payment is accepted, and the message agrees with it.
    Accepted,
}

/// Compares a message with its stored payment.
///
/// ```
/// use payment_processor::verify::{StoredPayment, Verdict, verdict};
/// use payments_model::PaymentRequested;
///
/// let message: PaymentRequested = serde_json::from_str(
///     r#"{"paymentId":"p-1","accountId":"a-1","amountCents":900,"currency":"EUR"}"#,
/// ).unwrap();
/// let stored = StoredPayment {
///     payment_id: "p-1".into(),
///     account_id: Some("a-1".into()),
///     amount_cents: Some(100),
///     currency: Some("EUR".into()),
///     description: None,
///     status: Some("accepted".into()),
///     sequence: Some(1),
///     last_error: None,
///     ledger_entry_id: None,
/// };
/// assert_eq!(verdict(&message, Some(&stored)), Verdict::Disagrees(vec!["amountCents"]));
/// assert_eq!(verdict(&message, None), Verdict::Unknown);
/// ```
pub fn verdict(message: &PaymentRequested, stored: Option<&StoredPayment>) -> Verdict {
    let Some(stored) = stored else {
        return Verdict::Unknown;
    };
    let mut differ = Vec::new();
    if stored.account_id.as_deref() != Some(message.account_id.as_str()) {
        differ.push("accountId");
    }
    if stored.amount_cents != Some(message.amount_cents) {
        differ.push("amountCents");
    }
    if stored.currency.as_deref() != Some(message.currency.as_str()) {
        differ.push("currency");
    }
    if message.sequence.is_some() && message.sequence != stored.sequence {
        differ.push("sequence");
    }
    if !differ.is_empty() {
        Verdict::Disagrees(differ)
    } else if stored.is(PaymentStatus::Charged) {
        Verdict::Charged
    } else if stored.is(PaymentStatus::Failed) {
        Verdict::Failed(stored.last_error.clone())
    } else {
        Verdict::Accepted
    }
}

/// A permanent refusal, carrying the failed attempts the refused charge recorded (so that the
/// key's attempts are reset once the message is dead-lettered: a reopened payment starts afresh).
fn permanent(reason: String, attempts: Option<u32>) -> RecordError {
    let error = RecordError::Permanent(reason.into());
    match attempts {
        Some(attempts) => RecordError::Attempt {
            attempts,
            error: Box::new(error),
        },
        None => error,
    }
}

/// A read or write of the payments or accounts table that failed: retried by redelivery.
pub(crate) fn store_error(operation: &'static str, e: aws_sdk_dynamodb::Error) -> RecordError {
    RecordError::Handler(
        format!(
            "{operation} of the payment's table failed: {}",
            lambda_idempotency::redact::safe_reason(&e.to_string())
        )
        .into(),
    )
}

/// The message `message` would have been had its producer written `payment`: the same message,
/// another body.
pub(crate) fn message_of(message: &SqsMessage, payment: &PaymentRequested) -> SqsMessage {
    let mut message = message.clone();
    message.body = Some(serde_json::to_string(payment).expect("a payment serializes"));
    message
}

impl App {
    /// Reads a payment, strongly consistent.
    pub async fn read_payment(
        &self,
        payment_id: &str,
    ) -> Result<Option<StoredPayment>, aws_sdk_dynamodb::Error> {
        StoredPayment::read(&self.dynamodb, &self.config.payments_table, payment_id).await
    }

    /// Waiting for an account's earlier payments is no attempt of the payment that waits: the
    /// refusals its charge recorded meanwhile are taken back (its attempts reset), so that its
    /// budget is whole once it may be charged. Until then each of its charges is refused by its
    /// account's order, so the count holds little else (a fault the failure switch injected
    /// before the charge is taken back with them).
    async fn take_back_refusals(&self, message: &SqsMessage, ctx: &RecordContext) {
        let Ok(key) = App::keys().key(message) else {
            return;
        };
        if let Err(e) = self.idempotency.reset_attempts(&key).await {
            tracing::warn!(
                message_id = ctx.message_id,
                key,
                error = %e,
                "could not take back the refusals of a payment waiting for an earlier one"
            );
        }
    }

    /// A refused charge: the payments table says why, and what follows.
    async fn after_refusal(
        &self,
        message: &SqsMessage,
        ctx: &RecordContext,
        refused: RecordError,
    ) -> Result<Deduplicated<PaymentCharged>, RecordError> {
        let body = message.body.as_deref().unwrap_or_default();
        let Ok(payment) = serde_json::from_str::<PaymentRequested>(body) else {
            return Err(refused);
        };
        let id = &payment.payment_id;
        let attempts = refused.attempts();
        let stored = self
            .read_payment(id)
            .await
            .map_err(|e| store_error("GetItem", e))?;
        match verdict(&payment, stored.as_ref()) {
            Verdict::Unknown => Err(permanent(
                format!(
                    "payment {id} was never accepted: the payments table has no such payment; \
                 nothing was charged"
                ),
                attempts,
            )),
            Verdict::Disagrees(fields) => Err(permanent(
                format!(
                    "the message disagrees with payment {id} on {}: nothing was charged and the \
                 payment is left as it was",
                    fields.join(", ")
                ),
                attempts,
            )),
            Verdict::Failed(reason) => Err(permanent(
                format!(
                    "payment {id} failed ({}): a failed payment is charged again only once an \
                 operator reopens it",
                    reason.as_deref().unwrap_or("no reason recorded")
                ),
                attempts,
            )),
            Verdict::Charged => {
                tracing::info!(
                    message_id = ctx.message_id,
                    payment_id = id,
                    "payment charged already: a duplicate"
                );
                Ok(Deduplicated::Duplicate { stored: None })
            }
            Verdict::Accepted => {
                let stored = stored.expect("a verdict of accepted has a payment");
                let Some(sequence) = stored.sequence else {
                    // Not the order and not the payment: the refusal stands (retried).
                    return Err(refused);
                };
                if Refusal::of(&refused) == Some(Refusal::CompletedWithOtherPayload) {
                    return Err(refused);
                }
                if let Err(waiting) = self.catch_up(&stored, sequence, ctx).await {
                    if attempts.is_some() {
                        self.take_back_refusals(message, ctx).await;
                    }
                    return Err(waiting);
                }
                // Charged as stored: a message of the previous version (no number) gets the
                // payment's, and one without the description gets it back (the failure switch
                // reads it).
                self.charging()
                    .handle(&message_of(message, &stored.requested()), ctx)
                    .await
            }
        }
    }
}
