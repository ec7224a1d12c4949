//! Messages SQS moved to the dead-letter queue itself: sent back, not failed.
//!
//! SQS moves a message to `payments-dlq.fifo` once it has been received `maxReceiveCount` times
//! without being deleted. payment-processor never lets that happen to a message for its own
//! failures (it sends such a message there itself, with its reason, and marks the payment
//! failed); what is left is a message received while the function crashed or timed out. That
//! is not known to be the message's fault: a bad deployment, a failing init, memory exhaustion
//! or `panic = "abort"` crash every invocation, and about two hours of that (41 receives of a
//! 180 s visibility timeout, the template's settings) moves every message received meanwhile.
//! So the reconciler never fails a payment for one move: a payment still `accepted` whose
//! message SQS moved gets it **sent back** to `payments.fifo`:
//!
//! - the same body, so the same idempotency key (the payment id): a payment charged meanwhile
//!   is a duplicate payment-processor answers without charging, and its `PaymentCharged` is sent
//!   again as for any duplicate;
//! - in its message group (its account), with a deduplication id of its own,
//!   `sent-back#<the dead letter's message id>`: not the relay's (the payment id), which SQS
//!   would drop within 5 minutes of a resend; the same for a send repeated by a run that stopped
//!   before deleting the copy;
//! - with [`SENT_BACK_ATTRIBUTE`] one more than the copy carried: the count goes with the
//!   message, and SQS keeps message attributes when it moves a message again.
//!
//! The copy is then deleted from the dead-letter queue (it is on `payments.fifo` again), the
//! payment is stamped as sent again (`resentAt`: no resend through the relay within the resend
//! interval), and the run counts it (`sentBack`, an alarm: an operator must notice a crash loop).
//!
//! **The limit** ([`Config::send_back_limit`](super::Config), `SEND_BACK_LIMIT`, 3 by default)
//! tells a message that crashes payment-processor on every delivery from a crash loop that
//! moved everything: a copy moved again after it was sent back `limit` times marks its payment
//! failed with [`FATAL_ON_EVERY_DELIVERY`] and the count. A crash loop fails an innocent payment
//! only if it lasts through `limit + 1` rounds of `maxReceiveCount` receives (about eight hours
//! with the template's settings and the default limit, the `sentBack` alarm firing from the
//! first round on).
//!
//! **Its own reason first**: a copy payment-processor sent with its reason (`DeadLetterReason`)
//! marks the payment failed with that reason, as before. A real poison message whose own
//! dead-letter send failed (the send is reported failed, the message comes back, and may reach
//! `maxReceiveCount` that way) carries no reason when SQS moves it: sent back, payment-processor
//! decides again (its idempotency record still holds the used-up attempts and the last error:
//! the attempts are reset only once a copy is in the dead-letter queue), and its dead-letter
//! step marks the payment failed with its own reason.
//!
//! Several moved copies of one payment (the original and a resend): the one with the highest
//! count is sent back once, and every one is deleted.

use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, MessageAttributeValue};
use lambda_idempotency::publish::{DeduplicationId, Message, MessageGroupId, Publisher};
use payments_model::PaymentItem;

use super::Reconciler;
use super::dead_letters::DeadLetter;

/// The message attribute (`Number`) that counts how many times the reconciler sent a message
/// back from the dead-letter queue.
pub const SENT_BACK_ATTRIBUTE: &str = "SentBack";

/// What a payment's reason starts with when its message was moved by SQS once more after it
/// was sent back as many times as the limit allows.
pub const FATAL_ON_EVERY_DELIVERY: &str = "fatal to payment-processor on every delivery";

/// The reason of a payment whose message SQS moved again after `sent_back` sends back.
pub fn fatal_reason(sent_back: u32) -> String {
    format!(
        "{FATAL_ON_EVERY_DELIVERY}: SQS moved its message to the dead-letter queue at its receive \
         limit {} times (crashes or timeouts on every delivery), sent back {sent_back} times",
        sent_back + 1
    )
}

/// Whether the dead letter is `payment`'s message: the same payment, account, amount,
/// currency (and number, when it carries one).
pub(super) fn agrees(dead: &DeadLetter, payment: &PaymentItem) -> bool {
    let m = &dead.message;
    m.payment_id == payment.payment_id
        && m.account_id == payment.account_id
        && m.amount_cents == payment.amount_cents
        && m.currency == payment.currency
        && (m.sequence.is_none() || m.sequence == payment.sequence)
}

/// The message that sends `dead` back, with `count` in [`SENT_BACK_ATTRIBUTE`].
pub(super) fn message(dead: &DeadLetter, count: u32) -> Result<Message, String> {
    let group = dead
        .group
        .clone()
        .unwrap_or_else(|| dead.message.account_id.clone());
    let group = MessageGroupId::new(group).map_err(|e| e.to_string())?;
    let count = MessageAttributeValue::builder()
        .data_type("Number")
        .string_value(count.to_string())
        .build()
        .map_err(|e| e.to_string())?;
    Message::fifo(
        group,
        DeduplicationId::from_key(&format!("sent-back#{}", dead.message_id)),
        dead.body.clone(),
    )
    .and_then(|m| m.with_attribute_value(SENT_BACK_ATTRIBUTE, count))
    .map_err(|e| e.to_string())
}

impl Reconciler {
    /// Sends back the copy of `moved` (a payment's copies SQS moved, agreeing with it) with
    /// the highest count, then deletes them all from the dead-letter queue; the count sent.
    /// An error when the send failed: nothing is deleted.
    pub(super) async fn send_back(&self, moved: &[&DeadLetter]) -> Result<u32, String> {
        let Some(highest) = moved.iter().max_by_key(|d| d.sent_back) else {
            return Err("no copy to send back".to_owned());
        };
        let count = highest.sent_back + 1;
        let publisher = Publisher::new(self.sqs.clone(), &self.config.payments_queue_url);
        publisher
            .send(message(highest, count)?)
            .await
            .map_err(|e| e.to_string())?;
        self.delete_dead_letters(moved).await;
        Ok(count)
    }

    /// Deletes `copies` from the dead-letter queue with the look's receipt handles. A copy not
    /// deleted is logged: a later run finds it again, and sends it back again (a duplicate
    /// payment-processor answers) or, past the limit, marks the payment failed.
    async fn delete_dead_letters(&self, copies: &[&DeadLetter]) {
        let queue = &self.config.dead_letter_queue_url;
        let entries: Vec<_> = copies
            .iter()
            .filter_map(|d| d.handle.as_ref())
            .enumerate()
            .map(|(i, handle)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(handle)
                    .build()
                    .expect("id and receipt handle are set")
            })
            .collect();
        for chunk in entries.chunks(10) {
            match self
                .sqs
                .delete_message_batch()
                .queue_url(queue)
                .set_entries(Some(chunk.to_vec()))
                .send()
                .await
            {
                Ok(out) if out.failed.is_empty() => {}
                Ok(out) => tracing::warn!(
                    failed = ?out.failed,
                    "dead letters sent back but not deleted"
                ),
                Err(e) => tracing::warn!(
                    error = %aws_sdk_sqs::Error::from(e),
                    "dead letters sent back but not deleted"
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dead(sequence: Option<u64>, sent_back: u32) -> DeadLetter {
        let body = serde_json::json!({
            "paymentId": "p", "accountId": "a", "amountCents": 5, "currency": "EUR",
            "sequence": sequence,
        })
        .to_string();
        DeadLetter::for_test(&body, "m-1", Some("a"), sent_back)
    }

    fn payment() -> PaymentItem {
        serde_json::from_value(serde_json::json!({
            "paymentId": "p", "accountId": "a", "amountCents": 5, "currency": "EUR",
            "status": "accepted", "createdAt": 0, "callerId": "c", "requestHash": "h",
            "sequence": 3
        }))
        .unwrap()
    }

    #[test]
    fn a_copy_agrees_only_with_its_own_payment() {
        assert!(agrees(&dead(Some(3), 0), &payment()));
        assert!(agrees(&dead(None, 0), &payment()), "the previous version");
        assert!(!agrees(&dead(Some(4), 0), &payment()), "another number");
        let mut other = payment();
        other.amount_cents += 1;
        assert!(!agrees(&dead(Some(3), 0), &other));
    }

    #[test]
    fn the_message_sent_back_keeps_body_and_group_and_counts_one_more() {
        let copy = dead(Some(3), 1);
        let m = message(&copy, 2).unwrap();
        assert_eq!(m.body(), copy.body);
        assert_eq!(m.group_id().unwrap().as_str(), "a");
        assert_eq!(
            m.attributes()[SENT_BACK_ATTRIBUTE].string_value(),
            Some("2")
        );
        // Its own deduplication id: not the relay's (the payment id), the same for the same copy.
        let dedup = m.dedup_id().unwrap().as_str().to_owned();
        assert_ne!(dedup, DeduplicationId::from_key("p").as_str());
        assert_eq!(
            message(&copy, 2).unwrap().dedup_id().unwrap().as_str(),
            dedup
        );
    }

    #[test]
    fn the_fatal_reason_counts_the_moves_and_is_not_an_innocent_one() {
        let reason = fatal_reason(3);
        assert!(reason.starts_with(FATAL_ON_EVERY_DELIVERY), "{reason}");
        assert!(reason.contains("4 times") && reason.contains("sent back 3 times"));
        // Not the words of a failure that is not the payment's own (an outage, a timeout).
        assert!(!reason.contains("timed out") && !reason.contains("unavailable"));
    }
}
