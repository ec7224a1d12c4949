//! What the payments table says of a `PaymentCharged` event, before anything is written: the
//! queue is not the source of truth, the payment is.

use std::fmt;

use aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::batch::{HandlerOutput, RecordContext, RecordError, RecordHandler};
use payments_model::stored::StoredPayment;
use payments_model::{PaymentCharged, PaymentStatus};

use crate::App;

/// Why an event sends no receipt: each is permanent (the event is dead-lettered with it), and
/// none writes anything, so none keeps the payment's own event from sending its receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The payments table has no such payment.
    Unknown {
        /// The event's payment.
        payment_id: String,
    },
    /// The payment is not charged (accepted, failed): payment-processor sends `PaymentCharged`
    /// only once the charge is committed, and the payment is read strongly consistent, so the
    /// event is not the payment's own.
    NotCharged {
        /// The event's payment.
        payment_id: String,
        /// Its stored status (absent on an item without one).
        status: Option<String>,
        /// The fields on which the event disagrees with the payment as well.
        differing: Vec<&'static str>,
    },
    /// The payment is charged, and the event disagrees with it on these fields.
    Disagrees {
        /// The event's payment.
        payment_id: String,
        /// `accountId`, `amountCents`, `currency`, `ledgerEntryId`: the fields that differ.
        differing: Vec<&'static str>,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Unknown { payment_id } => write!(
                f,
                "payment `{payment_id}` does not exist: the payments table has no such payment; \
                 no receipt was sent"
            ),
            Refusal::NotCharged {
                payment_id,
                status,
                differing,
            } => {
                write!(
                    f,
                    "payment `{payment_id}` is not charged (status `{}`)",
                    status.as_deref().unwrap_or("none")
                )?;
                if !differing.is_empty() {
                    write!(
                        f,
                        " and the event disagrees with it on {}",
                        differing.join(", ")
                    )?;
                }
                write!(
                    f,
                    ": PaymentCharged is sent only once the charge is committed, so the event is \
                     not the payment's own; no receipt was sent"
                )
            }
            Refusal::Disagrees {
                payment_id,
                differing,
            } => write!(
                f,
                "the event disagrees with charged payment `{payment_id}` on {}: no receipt was \
                 sent (the payment's receipt has its charged values)",
                differing.join(", ")
            ),
        }
    }
}

impl std::error::Error for Refusal {}

/// The receipt an event may send, from its payment as the payments table holds it (`stored`,
/// `None` when there is no such payment): the payment must be `charged`, and the event must
/// agree with it on account, amount, currency and ledger entry. The receipt's values are the
/// table's, never the event's.
///
/// ```
/// use payments_model::PaymentCharged;
/// use payments_model::stored::StoredPayment;
/// use receipt_sender::verify::{Refusal, verify};
///
/// let event = PaymentCharged {
///     payment_id: "p-1".into(),
///     account_id: "a-1".into(),
///     amount_cents: 4242,
///     currency: "EUR".into(),
///     ledger_entry_id: "e-1".into(),
/// };
/// let stored = StoredPayment {
///     payment_id: "p-1".into(),
///     account_id: Some("a-1".into()),
///     amount_cents: Some(500),
///     currency: Some("EUR".into()),
///     description: None,
///     status: Some("charged".into()),
///     sequence: Some(1),
///     last_error: None,
///     ledger_entry_id: Some("e-1".into()),
/// };
/// assert_eq!(
///     verify(&event, Some(&stored)),
///     Err(Refusal::Disagrees { payment_id: "p-1".into(), differing: vec!["amountCents"] })
/// );
/// assert_eq!(verify(&event, None), Err(Refusal::Unknown { payment_id: "p-1".into() }));
/// ```
pub fn verify(
    event: &PaymentCharged,
    stored: Option<&StoredPayment>,
) -> Result<PaymentCharged, Refusal> {
    let payment_id = event.payment_id.clone();
    let Some(stored) = stored else {
        return Err(Refusal::Unknown { payment_id });
    };
    let charged = stored.is(PaymentStatus::Charged);
    let mut differing = Vec::new();
    if stored.account_id.as_deref() != Some(event.account_id.as_str()) {
        differing.push("accountId");
    }
    if stored.amount_cents != Some(event.amount_cents) {
        differing.push("amountCents");
    }
    if stored.currency.as_deref() != Some(event.currency.as_str()) {
        differing.push("currency");
    }
    // Only a charged payment has a ledger entry.
    if charged && stored.ledger_entry_id.as_deref() != Some(event.ledger_entry_id.as_str()) {
        differing.push("ledgerEntryId");
    }
    if !charged {
        return Err(Refusal::NotCharged {
            payment_id,
            status: stored.status.clone(),
            differing,
        });
    }
    match (
        &stored.account_id,
        stored.amount_cents,
        &stored.currency,
        &stored.ledger_entry_id,
    ) {
        (Some(account_id), Some(amount_cents), Some(currency), Some(ledger_entry_id))
            if differing.is_empty() =>
        {
            Ok(PaymentCharged {
                payment_id: stored.payment_id.clone(),
                account_id: account_id.clone(),
                amount_cents,
                currency: currency.clone(),
                ledger_entry_id: ledger_entry_id.clone(),
            })
        }
        _ => Err(Refusal::Disagrees {
            payment_id,
            differing,
        }),
    }
}

/// receipt-sender's handler: each event verified against its payment ([`verify`]) before
/// `inner` (the idempotent receipt) runs, on the event rebuilt from the table. A refused event
/// is a permanent failure that touched nothing: no idempotency record, no receipt. One that
/// passes reaches the idempotency record with the table's values as its payload, the same for
/// every event of the payment: a forged event can never hold the payment's key with another
/// payload, and one that passes writes exactly the true receipt.
#[derive(Debug, Clone, Copy)]
pub struct Verified<'a, H> {
    app: &'a App,
    inner: H,
}

impl<'a, H> Verified<'a, H> {
    /// `inner`, run on the events `app` verifies.
    pub fn new(app: &'a App, inner: H) -> Self {
        Self { app, inner }
    }
}

impl<H: HandlerOutput> HandlerOutput for Verified<'_, H> {
    type Output = H::Output;
}

impl<H: RecordHandler> RecordHandler for Verified<'_, H> {
    async fn handle(
        &self,
        message: &SqsMessage,
        ctx: &RecordContext,
    ) -> Result<Self::Output, RecordError> {
        let Some(event) = message
            .body
            .as_deref()
            .and_then(|body| serde_json::from_str::<PaymentCharged>(body).ok())
        else {
            // Not an event: the inner handler refuses it, naming why.
            return self.inner.handle(message, ctx).await;
        };
        let verified = ctx.cancellable(self.app.verified(&event)).await?;
        let mut message = message.clone();
        message.body = Some(serde_json::to_string(&verified).expect("an event serializes"));
        self.inner.handle(&message, ctx).await
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::charged as event;

    fn stored(status: &str) -> StoredPayment {
        StoredPayment {
            payment_id: "pay_1".into(),
            account_id: Some("acct-1".into()),
            amount_cents: Some(500),
            currency: Some("EUR".into()),
            description: None,
            status: Some(status.into()),
            sequence: Some(1),
            last_error: None,
            ledger_entry_id: (status == "charged").then(|| "entry-1".into()),
        }
    }

    #[test]
    fn a_charged_payment_that_agrees_gives_the_tables_receipt() {
        assert_eq!(verify(&event(), Some(&stored("charged"))), Ok(event()));
    }

    #[test]
    fn a_payment_that_does_not_exist_sends_nothing() {
        let refused = verify(&event(), None).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "payment `pay_1` does not exist: the payments table has no such payment; no receipt \
             was sent"
        );
    }

    #[test]
    fn a_payment_not_charged_sends_nothing_whatever_the_event_says() {
        for status in ["accepted", "failed"] {
            assert_eq!(
                verify(&event(), Some(&stored(status))),
                Err(Refusal::NotCharged {
                    payment_id: "pay_1".into(),
                    status: Some(status.into()),
                    differing: vec![],
                })
            );
        }
        let forged = PaymentCharged {
            amount_cents: 4242,
            ..event()
        };
        let refused = verify(&forged, Some(&stored("accepted"))).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "payment `pay_1` is not charged (status `accepted`) and the event disagrees with it \
             on amountCents: PaymentCharged is sent only once the charge is committed, so the \
             event is not the payment's own; no receipt was sent"
        );
        let no_status = StoredPayment {
            status: None,
            ..stored("accepted")
        };
        assert!(matches!(
            verify(&event(), Some(&no_status)),
            Err(Refusal::NotCharged { status: None, .. })
        ));
    }

    #[test]
    fn an_event_that_disagrees_with_the_charged_payment_names_each_field() {
        let forged = PaymentCharged {
            account_id: "acct-2".into(),
            amount_cents: 4242,
            currency: "JPY".into(),
            ledger_entry_id: "entry-2".into(),
            ..event()
        };
        let refused = verify(&forged, Some(&stored("charged"))).unwrap_err();
        assert_eq!(
            refused,
            Refusal::Disagrees {
                payment_id: "pay_1".into(),
                differing: vec!["accountId", "amountCents", "currency", "ledgerEntryId"],
            }
        );
        assert_eq!(
            refused.to_string(),
            "the event disagrees with charged payment `pay_1` on accountId, amountCents, \
             currency, ledgerEntryId: no receipt was sent (the payment's receipt has its charged \
             values)"
        );
        // A charged item missing a value never lends the event's.
        let partial = StoredPayment {
            amount_cents: None,
            ..stored("charged")
        };
        assert_eq!(
            verify(&event(), Some(&partial)),
            Err(Refusal::Disagrees {
                payment_id: "pay_1".into(),
                differing: vec!["amountCents"],
            })
        );
    }
}
