//! Republishing: the way back for payments the stream can no longer relay.
//!
//! The relay gives up on a stream batch after its retries (`MaximumRetryAttempts`,
//! `MaximumRecordAgeInSeconds`), and the stream itself keeps records for 24 hours. Lambda then
//! puts the batch's shard and sequence numbers on `payments-outbox-dlq` (its alarm fires), and
//! the batch's payments stay `accepted` in the table with no message on `payments.fifo`. Once
//! the cause is fixed, [`unqueued`] finds them (status `accepted`, written before a moment) and
//! [`App::republish`] sends them, oldest first, with the relay's own message: group = account,
//! deduplication id = payment id. The `republish` binary wraps both.
//!
//! Sending a payment that is in fact still queued, or already on its way, is harmless: within
//! SQS's 5-minute deduplication window the send is dropped, and after it payment-processor skips
//! the payment as a duplicate (its idempotency records outlive the queues). So the cut-off only
//! spares work; it does not guard correctness.
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use payments_publisher::{App, Config, now_ms, republish};
//!
//! let sdk = aws_config::load_from_env().await;
//! let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
//! let app = App::new(
//!     aws_sdk_sqs::Client::new(&sdk),
//!     Config {
//!         payments_queue_url: "https://sqs.us-east-1.amazonaws.com/123456789012/payments.fifo".into(),
//!         dead_letter_queue_url: None,
//!     },
//! );
//! let an_hour_ago = now_ms() - 3_600_000;
//! let found = republish::unqueued(&dynamodb, "payments", an_hour_ago).await?;
//! let republished = app.republish(found.payments).await;
//! println!("{} sent, {} failed", republished.sent.len(), republished.failed.len());
//! # Ok(()) }
//! ```

use aws_sdk_dynamodb::types::AttributeValue;
use payments_model::{PaymentItem, PaymentStatus};

use crate::{App, Unrelayable, payment_message};

/// Why the payments could not be listed.
#[derive(Debug, thiserror::Error)]
#[error("scanning {table} failed: {source}")]
pub struct ScanError {
    /// The table.
    pub table: String,
    /// The SDK's error.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// The payments left unqueued, and the `accepted` items that are not payment items.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unqueued {
    /// Oldest first (ties by payment id).
    pub payments: Vec<PaymentItem>,
    /// Items that cannot be sent as they are (their `paymentId`, or `?`, and what is wrong):
    /// fix them by hand, then run again. They hold back nothing else.
    pub malformed: Vec<(String, String)>,
}

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

/// The payments still `accepted` that were written before `written_before_ms` (epoch ms). A full
/// scan of the table, filtered: run it when the outbox's alarm asks for it, not on a schedule.
pub async fn unqueued(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
    written_before_ms: i64,
) -> Result<Unqueued, ScanError> {
    let items = dynamodb
        .scan()
        .table_name(table)
        .filter_expression("#status = :accepted AND createdAt < :before")
        .expression_attribute_names("#status", "status")
        .expression_attribute_values(
            ":accepted",
            AttributeValue::S(PaymentStatus::Accepted.as_str().to_owned()),
        )
        .expression_attribute_values(":before", AttributeValue::N(written_before_ms.to_string()))
        .into_paginator()
        .items()
        .send()
        .collect::<Result<Vec<_>, _>>()
        .await
        .map_err(|e| ScanError {
            table: table.to_owned(),
            source: Box::new(aws_sdk_dynamodb::Error::from(e)),
        })?;
    let mut found = Unqueued::default();
    for item in items {
        let id = match item.get("paymentId") {
            Some(AttributeValue::S(id)) => id.clone(),
            _ => "?".to_owned(),
        };
        match serde_dynamo::aws_sdk_dynamodb_1::from_item::<PaymentItem>(item) {
            Ok(payment) => found.payments.push(payment),
            Err(e) => found
                .malformed
                .push((id, format!("not a payment item: {e}"))),
        }
    }
    found
        .payments
        .sort_by(|a, b| (a.created_at, &a.payment_id).cmp(&(b.created_at, &b.payment_id)));
    Ok(found)
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
        let results = self.payments.send_all(messages).await;
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
