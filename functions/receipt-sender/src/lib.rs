//! receipt-sender: consumes the `receipts` queue and sends one receipt per charged payment.
//!
//! The queue is not the source of truth: any principal allowed to send to it could write a
//! `PaymentCharged` event. Each event is verified against its payment in the payments table,
//! read strongly consistent ([`verify`]), before anything is written:
//!
//! - no such payment: a permanent failure ([`verify::Refusal::Unknown`]), so the event goes to the
//!   dead-letter queue with its reason, and no receipt is sent;
//! - the payment is not `charged` (accepted, failed): permanent too
//!   ([`verify::Refusal::NotCharged`]). payment-processor sends the event only once the charge's
//!   transaction is committed, and the read is consistent, so the payment's own event never finds
//!   it uncharged: the event is someone else's, and waiting for the charge would only keep it;
//! - the event disagrees with the charged payment on its account, amount, currency or ledger
//!   entry: permanent ([`verify::Refusal::Disagrees`]), naming the fields that differ;
//! - it agrees: the receipt is written with the payment's values, never the event's.
//!
//! A refused event writes nothing, not even an idempotency record, so it never keeps the
//! payment's own event from sending the receipt, whichever comes first. An event that passes
//! reaches its idempotency record rebuilt from the table: every event of one payment has the
//! same payload there, so no event can hold the payment's key with another payload, and one that
//! passes writes exactly the true receipt.
//!
//! Deduplication is keyed on the event's `paymentId`, which catches both a redelivery of one
//! message and a second `PaymentCharged` for the same charge: payment-processor publishes the
//! event again (with the same ledger entry) when a crash interrupted it between the charge and
//! its completion.
//!
//! The idempotency record runs in the lease mode, so it cannot cover a crash (or a deadline
//! cancellation) after the receipt's write and before the record is completed: the next delivery
//! after the lease runs the handler again. The receipt itself makes that harmless. "Sending" puts
//! an item in the receipts table whose id is derived from the payment ([`receipt_id`]:
//! `rcpt_<paymentId>`), on the condition `attribute_not_exists(receiptId)`:
//!
//! - the write succeeds: the receipt is sent (logged "receipt sent");
//! - the condition fails and the stored receipt is for the same account, amount and currency:
//!   it was sent before, by an attempt that did not complete its record. A success, logged at
//!   info as "receipt already sent", with the same receipt id;
//! - the condition fails and the stored receipt is for another account, amount or currency (the
//!   write returns it: `ReturnValuesOnConditionCheckFailure=ALL_OLD`; a version that did not
//!   verify its events could have written it from a forged one): a permanent failure
//!   ([`PermanentError`]) naming the attributes that differ, so the event goes to the
//!   dead-letter queue and the stored receipt is left as it was.
//!
//! An event whose `paymentId` is not 1 to [`MAX_PAYMENT_ID_CHARS`] characters (payment-processor
//! charges no other) is a permanent failure too, refused before the payment is read: its receipt
//! id would not be a valid key.
//!
//! So a payment has at most one receipt, with its charged values, whatever the deliveries,
//! crashes, resends and forged events; a second item for the same payment would be a bug.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use aws_sdk_dynamodb::error::{DisplayErrorContext, SdkError};
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{
    BatchProcessor, PermanentError, RecordContext, RecordHandlerExt, json,
};
use lambda_idempotency::cache::CachedBackend;
use lambda_idempotency::key::KeyConfig;
use lambda_idempotency::metrics::{BatchCounts, Metrics};
use lambda_idempotency::redact::safe_reason;
use lambda_idempotency::store::{DynamoDbBackend, StoreError, TableCheck};
use lambda_idempotency::time::{Clock, SystemClock};
use lambda_runtime::{Error, LambdaEvent};
use payments_config::{ConfigError, Settings};
use payments_model::stored::StoredPayment;
use payments_model::{METRICS_NAMESPACE, PaymentCharged};

pub mod verify;

/// Settings of receipt-sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `IDEMPOTENCY_TABLE`.
    pub idempotency_table: String,
    /// `IDEMPOTENCY_TTL_SECONDS` (default [`payments_config::DEFAULT_IDEMPOTENCY_TTL`], 18 days).
    pub idempotency_ttl: Duration,
    /// `RECEIPTS_TABLE`.
    pub receipts_table: String,
    /// `PAYMENTS_TABLE`: each event is verified against its payment there.
    pub payments_table: String,
}

impl Config {
    /// Reads the settings.
    pub fn from_settings(settings: &impl Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            idempotency_table: settings.required("IDEMPOTENCY_TABLE")?,
            idempotency_ttl: settings.seconds(
                "IDEMPOTENCY_TTL_SECONDS",
                payments_config::DEFAULT_IDEMPOTENCY_TTL,
            )?,
            receipts_table: settings.required("RECEIPTS_TABLE")?,
            payments_table: settings.required("PAYMENTS_TABLE")?,
        })
    }
}

/// The function's state, built once per execution environment.
#[derive(Debug, Clone)]
pub struct App {
    idempotency: Idempotency<CachedBackend<DynamoDbBackend>>,
    dynamodb: aws_sdk_dynamodb::Client,
    processor: BatchProcessor,
    receipts_table: String,
    payments_table: String,
}

impl App {
    /// An app over this client, with no visibility backoff (see [`App::with_processor`]).
    pub fn new(dynamodb: aws_sdk_dynamodb::Client, config: Config) -> Self {
        Self {
            idempotency: Idempotency::new(DynamoDbBackend::new(
                dynamodb.clone(),
                config.idempotency_table,
            ))
            .with_key_prefix("receipt-sender")
            .with_local_cache(payments_config::warm_cache())
            .with_expiry(config.idempotency_ttl),
            dynamodb,
            processor: BatchProcessor::new(),
            receipts_table: config.receipts_table,
            payments_table: config.payments_table,
        }
    }

    /// An app from the SDK configuration and the settings, with the visibility backoff and the
    /// dead-letter queue they configure ([`payments_config::consumer_processor`]).
    pub fn from_settings(
        sdk: &aws_config::SdkConfig,
        settings: &impl Settings,
    ) -> Result<Self, ConfigError> {
        let processor = payments_config::consumer_processor(payments_config::sqs(sdk), settings)?;
        Ok(Self::new(
            payments_config::dynamodb(sdk),
            Config::from_settings(settings)?,
        )
        .with_processor(processor))
    }

    /// Uses another batch processor (concurrency, margins).
    pub fn with_processor(mut self, processor: BatchProcessor) -> Self {
        self.processor = processor;
        self
    }

    /// Keeps the idempotency records (leases, expiry) on another clock: a test's, whose time
    /// moves by hand. The deadline checks keep the batch processor's
    /// ([`BatchProcessor::with_clock`]).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.idempotency = self.idempotency.with_clock(clock);
        self
    }

    /// The idempotency engine.
    pub fn idempotency(&self) -> &Idempotency<CachedBackend<DynamoDbBackend>> {
        &self.idempotency
    }

    /// The cold-start check of the idempotency table ([`DynamoDbBackend::check_table`]): an
    /// error names the table and what does not match it (a partition key named or typed
    /// otherwise, a sort key, no such table). `main` runs it in the background from the init
    /// (`payments_config::cold_start_checks`) and fails each batch on it until it passes: no
    /// message runs, and none is dead-lettered meanwhile. What does not stop the table from
    /// working (its TTL) is only logged.
    pub async fn check_idempotency_table(&self) -> Result<TableCheck, StoreError> {
        self.idempotency.backend().inner().check_table().await
    }

    /// Handles one SQS batch; reports the failed records.
    pub async fn handle(&self, event: LambdaEvent<SqsEvent>) -> Result<SqsBatchResponse, Error> {
        Ok(self.handle_counted(event).await?.0)
    }

    /// [`handle`](Self::handle), also giving the batch's counts.
    pub async fn handle_counted(
        &self,
        event: LambdaEvent<SqsEvent>,
    ) -> Result<(SqsBatchResponse, BatchCounts), Error> {
        let receipt =
            json(|charged: PaymentCharged, ctx: RecordContext| self.send_receipt(charged, ctx))
                .idempotent(self.idempotency.clone())
                .with_keys(KeyConfig::json_pointer("/paymentId"));
        let handler = verify::Verified::new(self, receipt);
        let report = self.processor.process(&event, &handler).await?;
        let counts = BatchCounts::of(&report);
        metrics(&counts).emit();
        Ok((report.response(), counts))
    }

    /// The receipt `event` may send, from its payment as the payments table holds it
    /// ([`verify::verify`]): a refusal is permanent, a failed read is retried.
    pub(crate) async fn verified(
        &self,
        event: &PaymentCharged,
    ) -> Result<PaymentCharged, lambda_idempotency::batch::RecordError> {
        use lambda_idempotency::batch::RecordError;
        let id_len = event.payment_id.chars().count();
        if !(1..=MAX_PAYMENT_ID_CHARS).contains(&id_len) {
            return Err(RecordError::permanent(ReceiptError::InvalidPaymentId(
                id_len,
            )));
        }
        let stored = StoredPayment::read(&self.dynamodb, &self.payments_table, &event.payment_id)
            .await
            .map_err(|e| {
                RecordError::Handler(
                    ReceiptError::Verify(safe_reason(&DisplayErrorContext(&e).to_string())).into(),
                )
            })?;
        verify::verify(event, stored.as_ref()).map_err(RecordError::permanent)
    }

    /// Sends the receipt of a verified event (its values are the payment's).
    async fn send_receipt(
        &self,
        charged: PaymentCharged,
        ctx: RecordContext,
    ) -> Result<String, Error> {
        match self.put_receipt(&charged, &ctx).await {
            Ok(receipt_id) => Ok(receipt_id),
            Err(e @ ReceiptError::Mismatch { .. }) => Err(PermanentError::new(e).into()),
            Err(e) => Err(e.into()),
        }
    }

    /// The receipt's one conditional write; on a conflict, the stored receipt (returned by the
    /// same request) tells a receipt sent before from one of another payment.
    async fn put_receipt(
        &self,
        charged: &PaymentCharged,
        ctx: &RecordContext,
    ) -> Result<String, ReceiptError> {
        let receipt_id = receipt_id(&charged.payment_id);
        let s = |v: &str| AttributeValue::S(v.to_owned());
        let put = self
            .dynamodb
            .put_item()
            .table_name(&self.receipts_table)
            .item("receiptId", s(&receipt_id))
            .item("paymentId", s(&charged.payment_id))
            .item("accountId", s(&charged.account_id))
            .item(
                "amountCents",
                AttributeValue::N(charged.amount_cents.to_string()),
            )
            .item("currency", s(&charged.currency))
            .item("ledgerEntryId", s(&charged.ledger_entry_id))
            .item("messageId", s(&ctx.message_id))
            .item(
                "sentAt",
                AttributeValue::N(SystemClock.now_ms().to_string()),
            )
            .condition_expression("attribute_not_exists(receiptId)")
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let sent_before = match put {
            Ok(_) => false,
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), PutItemError::ConditionalCheckFailedException(_)) =>
            {
                let PutItemError::ConditionalCheckFailedException(conflict) = e.err() else {
                    unreachable!("matched above")
                };
                let Some(stored) = conflict.item() else {
                    return Err(ReceiptError::Store(format!(
                        "the receipt `{receipt_id}` exists, but its conditional write returned \
                         no item (ReturnValuesOnConditionCheckFailure unsupported?)"
                    )));
                };
                let differing = differing_attributes(charged, stored);
                if !differing.is_empty() {
                    return Err(ReceiptError::Mismatch {
                        receipt_id,
                        payment_id: charged.payment_id.clone(),
                        differing,
                    });
                }
                true
            }
            Err(e) => {
                return Err(ReceiptError::Store(safe_reason(
                    &DisplayErrorContext(&e).to_string(),
                )));
            }
        };
        tracing::info!(
            message_id = ctx.message_id,
            payment_id = charged.payment_id,
            receipt_id,
            "{}",
            if sent_before {
                "receipt already sent"
            } else {
                "receipt sent"
            }
        );
        Ok(receipt_id)
    }
}

/// A batch's EMF line, which [`App::handle_counted`] prints: its counts
/// ([`BatchCounts::metrics`]) under receipt-sender's name.
pub fn metrics(counts: &BatchCounts) -> Metrics {
    counts.metrics(
        METRICS_NAMESPACE,
        payments_model::metrics::function::RECEIPT_SENDER,
    )
}

/// The longest payment id a receipt is sent for, in characters (payment-processor charges no
/// longer one), so that a receipt id always fits DynamoDB's 2,048-byte partition key.
pub const MAX_PAYMENT_ID_CHARS: usize = 128;

/// The receipt id of a payment: `rcpt_<paymentId>`. One payment, one receipt id, whichever
/// delivery writes it.
///
/// ```
/// assert_eq!(receipt_sender::receipt_id("pay_42"), "rcpt_pay_42");
/// ```
pub fn receipt_id(payment_id: &str) -> String {
    payments_model::receipt_id(payment_id)
}

/// Why a receipt was not sent.
#[derive(Debug, thiserror::Error)]
pub enum ReceiptError {
    /// The event's payment id cannot make a receipt id (permanent).
    #[error("paymentId must be 1 to {MAX_PAYMENT_ID_CHARS} characters; it has {0}")]
    InvalidPaymentId(usize),
    /// The payment's receipt exists for another account, amount or currency (permanent).
    #[error(
        "receipt `{receipt_id}` of payment `{payment_id}` was sent for another payment: {}",
        differ(differing)
    )]
    Mismatch {
        /// The stored receipt.
        receipt_id: String,
        /// The event's payment.
        payment_id: String,
        /// The attributes whose stored value is not the event's.
        differing: Vec<&'static str>,
    },
    /// The receipts table did not answer, or refused the write (retried).
    #[error("could not write the receipt: {0}")]
    Store(String),
    /// The payments table did not answer the event's verification (retried).
    #[error("could not read the payment to verify the event: {0}")]
    Verify(String),
}

/// `amountCents differs`, `accountId and amountCents differ`, `accountId, amountCents and
/// currency differ`.
fn differ(names: &[&str]) -> String {
    match names {
        [] => "nothing differs".to_owned(),
        [one] => format!("{one} differs"),
        [rest @ .., last] => format!("{} and {last} differ", rest.join(", ")),
    }
}

/// The attributes of a stored receipt that do not match the verified event: `accountId`,
/// `amountCents`, `currency` (and `paymentId`, which the receipt id already fixes). Not
/// `ledgerEntryId`, which receipts written by earlier versions lack.
fn differing_attributes(
    charged: &PaymentCharged,
    stored: &HashMap<String, AttributeValue>,
) -> Vec<&'static str> {
    let s = |name: &str| {
        stored
            .get(name)
            .and_then(|v| v.as_s().ok())
            .map(String::as_str)
    };
    let amount = stored
        .get("amountCents")
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse::<i64>().ok());
    [
        (
            "paymentId",
            s("paymentId") == Some(charged.payment_id.as_str()),
        ),
        (
            "accountId",
            s("accountId") == Some(charged.account_id.as_str()),
        ),
        ("amountCents", amount == Some(charged.amount_cents)),
        ("currency", s("currency") == Some(charged.currency.as_str())),
    ]
    .into_iter()
    .filter(|(_, same)| !same)
    .map(|(name, _)| name)
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An event of payment `pay_1` (500 EUR, account `acct-1`, entry `entry-1`).
    pub(crate) fn charged() -> PaymentCharged {
        PaymentCharged {
            payment_id: "pay_1".into(),
            account_id: "acct-1".into(),
            amount_cents: 500,
            currency: "EUR".into(),
            ledger_entry_id: "entry-1".into(),
        }
    }

    fn stored(account: &str, amount: &str, currency: &str) -> HashMap<String, AttributeValue> {
        let s = |v: &str| AttributeValue::S(v.to_owned());
        HashMap::from([
            ("receiptId".to_owned(), s("rcpt_pay_1")),
            ("paymentId".to_owned(), s("pay_1")),
            ("accountId".to_owned(), s(account)),
            ("amountCents".to_owned(), AttributeValue::N(amount.into())),
            ("currency".to_owned(), s(currency)),
            ("messageId".to_owned(), s("another message")),
        ])
    }

    #[test]
    fn the_same_payment_matches_whatever_message_sent_it() {
        assert!(differing_attributes(&charged(), &stored("acct-1", "500", "EUR")).is_empty());
    }

    #[test]
    fn a_mismatch_names_the_attributes_not_their_values() {
        let differing = differing_attributes(&charged(), &stored("acct-2", "900", "EUR"));
        assert_eq!(differing, ["accountId", "amountCents"]);
        let error = ReceiptError::Mismatch {
            receipt_id: receipt_id("pay_1"),
            payment_id: "pay_1".into(),
            differing,
        };
        assert_eq!(
            error.to_string(),
            "receipt `rcpt_pay_1` of payment `pay_1` was sent for another payment: \
             accountId and amountCents differ"
        );
        assert_eq!(
            differ(&differing_attributes(
                &charged(),
                &stored("acct-1", "500", "JPY")
            )),
            "currency differs"
        );
        let missing = HashMap::from([("receiptId".to_owned(), AttributeValue::S("x".into()))]);
        assert_eq!(
            differing_attributes(&charged(), &missing),
            ["paymentId", "accountId", "amountCents", "currency"]
        );
    }
}
