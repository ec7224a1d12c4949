//! A producer outside the pipeline: a script writing to `payments.fifo` directly, as other
//! services, older and newer producers, and people fixing a message by hand do. It sends
//! re-serialized resends of accepted payments (another key order, white space, no `sequence`:
//! the previous version), next-version messages (fields this version does not know), a tampered
//! amount for an accepted payment, an accepted payment with a forged `sequence` (another number of
//! its account), and a payment payments-api never accepted (with a `sequence` of its own). The
//! checks then show each handled as it must be: the resends and next versions are duplicates, the
//! tampered, the renumbered and the unknown payments are refused with their reasons and change
//! nothing: the payments whose messages were tampered with are charged from their own.

use std::collections::HashSet;

use lambda_idempotency::publish::{DeduplicationId, Message, MessageGroupId, Publisher};

use crate::checks::{Check, Stored};
use crate::stack::BoxError;
use crate::workload::Accepted;

/// What the outside producer sent.
#[derive(Debug, Clone, Default)]
pub struct OutsideSent {
    /// Payments sent again in another serialization of the previous version.
    pub reserialized: Vec<String>,
    /// Payments sent again as the next version.
    pub next_version: Vec<String>,
    /// The payment whose message was sent with another amount.
    pub tampered: Option<String>,
    /// The payment whose message was sent with another `sequence` than payments-api gave it.
    pub renumbered: Option<String>,
    /// The payment that was never accepted.
    pub never_accepted: String,
}

/// The messages of the outside producer for `accepted` payments (all of them charged in the
/// end): up to `n` re-serialized, `n` next-version, one tampered, one renumbered, and one unknown
/// payment.
pub fn messages(accepted: &[&Accepted], n: usize) -> Result<(OutsideSent, Vec<Message>), BoxError> {
    let mut sent = OutsideSent {
        never_accepted: format!("pay_outside_{}", uuid::Uuid::new_v4().simple()),
        ..OutsideSent::default()
    };
    let mut messages = Vec::new();
    let mut fifo = |account: &str, tag: &str, body: String| -> Result<(), BoxError> {
        messages.push(Message::fifo(
            MessageGroupId::new(account)?,
            DeduplicationId::from_key(&format!("outside-{tag}-{}", uuid::Uuid::new_v4())),
            body,
        )?);
        Ok(())
    };
    for a in accepted.iter().take(n) {
        let p = &a.planned;
        let body = format!(
            "{{ \"currency\": \"{}\",  \"amountCents\": {},\n  \"paymentId\": \"{}\", \"accountId\": \"{}\" }}",
            p.currency, p.amount_cents, a.payment_id, p.account
        );
        fifo(&p.account, "reserialized", body)?;
        sent.reserialized.push(a.payment_id.clone());
    }
    for a in accepted.iter().skip(n).take(n) {
        let p = &a.planned;
        let body = serde_json::json!({
            "version": 3,
            "paymentId": a.payment_id,
            "accountId": p.account,
            "amountCents": p.amount_cents,
            "currency": p.currency,
            "channel": {"kind": "batch-import", "operator": "ops"},
            "requestedAt": "2026-11-25T10:00:00Z",
        })
        .to_string();
        fifo(&p.account, "next", body)?;
        sent.next_version.push(a.payment_id.clone());
    }
    if let Some(a) = accepted.get(2 * n) {
        let p = &a.planned;
        let body = serde_json::json!({
            "paymentId": a.payment_id,
            "accountId": p.account,
            "amountCents": p.amount_cents + 100_000,
            "currency": p.currency,
        })
        .to_string();
        fifo(&p.account, "tampered", body)?;
        sent.tampered = Some(a.payment_id.clone());
    }
    if let Some(a) = accepted.get(2 * n + 1) {
        // No account takes a million numbers in a test: another number than its own.
        let p = &a.planned;
        let body = serde_json::json!({
            "paymentId": a.payment_id,
            "accountId": p.account,
            "amountCents": p.amount_cents,
            "currency": p.currency,
            "sequence": 1_000_000,
        })
        .to_string();
        fifo(&p.account, "renumbered", body)?;
        sent.renumbered = Some(a.payment_id.clone());
    }
    let account = accepted
        .first()
        .map_or("acct-outside", |a| a.planned.account.as_str());
    let body = serde_json::json!({
        "paymentId": sent.never_accepted,
        "accountId": account,
        "amountCents": 4_200,
        "currency": "EUR",
        "sequence": 1,
    })
    .to_string();
    fifo(account, "never", body)?;
    Ok((sent, messages))
}

/// Sends the outside producer's messages to the payments queue.
pub async fn send(publisher: &Publisher, messages: Vec<Message>) -> Result<usize, BoxError> {
    let mut n = 0;
    for result in publisher.send_all(messages).await {
        result?;
        n += 1;
    }
    Ok(n)
}

impl OutsideSent {
    /// The checks of the outside producer's messages. The refused ones are taken out of the
    /// dead-letter queue's contents in `stored`, so that the pipeline's own checks see only
    /// its failing payments there.
    pub fn checks(&self, stored: &mut Stored) -> Vec<Check> {
        let mut refused = |id: &str, why: &str| {
            let at = stored
                .dead_letters
                .iter()
                .position(|(i, reason)| i == id && reason.contains(why));
            at.map(|at| {
                stored.dead_lettered_payments -= 1;
                stored.dead_letters.remove(at).1
            })
        };
        let never = refused(&self.never_accepted, "never accepted");
        let tampered = self
            .tampered
            .as_ref()
            .map(|id| (id, refused(id, "disagrees")));
        // A forged number is refused while its payment waits to be charged (the account's order
        // refuses the charge, and the table says why); once the payment is charged it is a
        // duplicate like any resend (the number is not part of the payload), with no effect.
        let renumbered = self
            .renumbered
            .as_ref()
            .map(|id| (id, refused(id, "disagrees with payment")));
        let ledger = |id: &str| stored.ledger_entries.get(id).copied().unwrap_or(0);
        let status = |id: &str| stored.payment_status.get(id).map(String::as_str);
        let in_dead_letters: HashSet<&str> = stored
            .dead_letters
            .iter()
            .map(|(id, _)| id.as_str())
            .collect();
        let duplicates: Vec<String> = self
            .reserialized
            .iter()
            .chain(&self.next_version)
            .filter(|id| ledger(id) != 1 || in_dead_letters.contains(id.as_str()))
            .map(|id| {
                format!(
                    "{id}: {} ledger entries, status {:?}",
                    ledger(id),
                    status(id)
                )
            })
            .collect();
        let mut out = vec![Check {
            name: "an outside producer's re-serialized and next-version resends are duplicates",
            passed: duplicates.is_empty(),
            detail: if duplicates.is_empty() {
                format!(
                    "{} re-serialized (previous version), {} next version: each charged once, none dead-lettered",
                    self.reserialized.len(),
                    self.next_version.len()
                )
            } else {
                duplicates.join("; ")
            },
        }];
        if let Some((id, reason)) = tampered {
            let passed = reason.is_some() && ledger(id) == 1 && status(id) == Some("charged");
            out.push(Check {
                name: "a tampered amount is refused with its reason; its payment charged as accepted",
                passed,
                detail: match reason {
                    Some(reason) => format!(
                        "{id}: dead-lettered ({reason}); the payment {} with {} ledger entry (the balances check holds the amount)",
                        status(id).unwrap_or("missing"),
                        ledger(id)
                    ),
                    None => format!("{id}: no dead letter naming the mismatch"),
                },
            });
        }
        if let Some((id, reason)) = renumbered {
            let dead_lettered = in_dead_letters.contains(id.as_str());
            out.push(Check {
                name: "a forged sequence number changes nothing: refused while its payment waits, \
                       a duplicate once it is charged",
                passed: !dead_lettered && ledger(id) == 1 && status(id) == Some("charged"),
                detail: format!(
                    "{id}: {}; the payment {} with {} ledger entry",
                    match (reason, dead_lettered) {
                        (Some(reason), _) => format!("dead-lettered ({reason})"),
                        (None, false) => "a duplicate of its charge".to_owned(),
                        (None, true) => "dead-lettered without naming the mismatch".to_owned(),
                    },
                    status(id).unwrap_or("missing"),
                    ledger(id)
                ),
            });
        }
        let id = self.never_accepted.as_str();
        out.push(Check {
            name: "a payment never accepted is refused with its reason and creates no row",
            passed: never.is_some() && ledger(id) == 0 && status(id).is_none(),
            detail: match never {
                Some(reason) => {
                    format!("{id}: dead-lettered ({reason}); no payment row, no ledger entry")
                }
                None => format!("{id}: no dead letter saying it was never accepted"),
            },
        });
        out
    }
}
