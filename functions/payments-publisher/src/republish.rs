//! Sending payments again: the way back for payments the stream can no longer relay.
//!
//! The relay gives up on a stream batch once its records are older than
//! `MaximumRecordAgeInSeconds` (12 hours), and the stream itself keeps records for 24 hours; a payment's
//! message can also be lost to a crash at the wrong moment. Such payments stay `accepted` in the
//! table with no message on `payments.fifo`. payments-reconciler (crate `payments-operations`)
//! finds them through the table's sparse `accepted` index and hands them to
//! [`App::republish`], which sends them with the relay's own message: group = account,
//! deduplication id = payment id (or its reopen's).
//!
//! Sending a payment that is in fact still queued, or already on its way, is harmless: within
//! SQS's 5-minute deduplication window the send is dropped, and after it payment-processor skips
//! the payment as a duplicate (its idempotency records outlive the queues).

use payments_model::PaymentItem;

use crate::{App, Unrelayable, payment_message};

/// What a republish came to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Republished {
    /// Payments sent, in the order sent.
    pub sent: Vec<String>,
    /// Payments whose send failed (payment id, why); a failure holds back the later payments of
    /// its account, which are here too. Run again once the cause is fixed.
    pub failed: Vec<(String, String)>,
    /// Payments SQS would refuse on every send (payment id, why).
    pub invalid: Vec<(String, String)>,
}

impl App {
    /// Sends `payments` to the payments queue in the order given (each account's payments in
    /// order: a failed send holds back the later ones of its account).
    pub async fn republish(&self, payments: Vec<PaymentItem>) -> Republished {
        let mut republished = Republished::default();
        let mut to_send = Vec::new();
        for item in payments {
            match payment_message(&item) {
                Ok(message) => to_send.push((item.payment_id, message)),
                Err(Unrelayable::InvalidMessage { payment_id, reason }) => {
                    republished.invalid.push((payment_id, reason))
                }
                Err(other) => republished
                    .invalid
                    .push((item.payment_id, other.to_string())),
            }
        }
        let messages = to_send.iter().map(|(_, m)| m.clone()).collect();
        let results = self.payments.publisher().send_all(messages).await;
        for ((payment_id, _), result) in to_send.into_iter().zip(results) {
            match result {
                Ok(_) => {
                    tracing::info!(payment_id, "payment republished");
                    republished.sent.push(payment_id);
                }
                Err(e) => {
                    tracing::warn!(payment_id, error = %e, "payment not republished");
                    republished.failed.push((payment_id, e.to_string()));
                }
            }
        }
        republished
    }
}
