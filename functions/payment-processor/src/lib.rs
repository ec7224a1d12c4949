//! payment-processor: consumes `payments.fifo` and charges each payment once.
//!
//! A charge is one DynamoDB transaction of four writes: a ledger entry with a fresh id, a plain
//! (non-idempotent) increment of the account's balance, the payment marked `charged`, and the
//! idempotency record, written completed (the library's transactional mode,
//! [`lambda_idempotency::transaction`]). Either all four commit or none does, so there is no
//! interrupted state: a crash before the commit leaves nothing, and a redelivery after it finds
//! the record and is a duplicate. Deduplication is keyed on the `paymentId` of the body rather
//! than the SQS `MessageId`, so it also catches a producer that sends the same payment again after
//! the FIFO deduplication window (5 minutes), with a new `MessageId`.
//!
//! After the commit a `PaymentCharged` event goes to the `receipts` queue. That send is outside the
//! transaction, so it happens at least once: a duplicate sends the stored event again (the same
//! event, ledger entry id included), which covers a crash between the commit and the send, and
//! receipt-sender deduplicates on the payment id. [`App::receipts_resent`] counts those sends.
//!
//! The payment's status update keeps its own condition (not `charged` yet): should a payment come
//! back after its idempotency record expired, the transaction is refused, naming the payment, and
//! nothing is charged twice.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{
    BatchProcessor, DeadLettered, Deduplicated, PermanentError, RecordContext, RecordHandlerExt,
    json,
};
use lambda_idempotency::key::KeyConfig;
use lambda_idempotency::metrics::BatchCounts;
use lambda_idempotency::publish::{Message, MessageGroupId, Publisher};
use lambda_idempotency::record::{Clock, SystemClock, truncate_error};
use lambda_idempotency::store::{DynamoDbBackend, StoreError, TableCheck};
use lambda_idempotency::transaction::Transaction;
use lambda_runtime::{Error, LambdaEvent};
use payments_model::{
    ConfigError, FailureSwitch, Fault, METRICS_NAMESPACE, PaymentCharged, PaymentRequested,
    PaymentStatus, Settings,
};

/// Settings of payment-processor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `IDEMPOTENCY_TABLE`.
    pub idempotency_table: String,
    /// `IDEMPOTENCY_TTL_SECONDS` (default [`payments_model::DEFAULT_IDEMPOTENCY_TTL`], 18 days).
    pub idempotency_ttl: Duration,
    /// `PAYMENTS_TABLE`.
    pub payments_table: String,
    /// `LEDGER_TABLE`.
    pub ledger_table: String,
    /// `BALANCES_TABLE`.
    pub balances_table: String,
    /// `RECEIPTS_QUEUE_URL`.
    pub receipts_queue_url: String,
    /// `FAIL_PAYMENTS`: the failure switch (tests and demos only).
    pub failure_switch: Option<FailureSwitch>,
}

impl Config {
    /// Reads the settings.
    pub fn from_settings(settings: &impl Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            idempotency_table: settings.required("IDEMPOTENCY_TABLE")?,
            idempotency_ttl: settings.seconds(
                "IDEMPOTENCY_TTL_SECONDS",
                payments_model::DEFAULT_IDEMPOTENCY_TTL,
            )?,
            payments_table: settings.required("PAYMENTS_TABLE")?,
            ledger_table: settings.required("LEDGER_TABLE")?,
            balances_table: settings.required("BALANCES_TABLE")?,
            receipts_queue_url: settings.required("RECEIPTS_QUEUE_URL")?,
            failure_switch: FailureSwitch::from_settings(settings)?,
        })
    }
}

/// Why a payment was not charged this time.
#[derive(Debug, thiserror::Error)]
pub enum ChargeError {
    /// The failure switch fired.
    #[error("injected failure (FAIL_PAYMENTS) on attempt {0}")]
    Injected(u32),
    /// The payment can never be charged (permanent: dead-lettered at once).
    #[error("invalid payment: {0}")]
    Invalid(String),
    /// The `PaymentCharged` event could not be published.
    #[error("could not publish PaymentCharged: {0}")]
    Publish(String),
}

/// A charge: the event it publishes is its stored result, so that a duplicate publishes the
/// same one.
pub type Charge = Transaction<PaymentCharged, TransactWriteItem>;

/// The function's state, built once per execution environment.
#[derive(Debug, Clone)]
pub struct App {
    idempotency: Idempotency<DynamoDbBackend>,
    dynamodb: aws_sdk_dynamodb::Client,
    receipts: Publisher,
    processor: BatchProcessor,
    config: Config,
    resent: Arc<AtomicU64>,
}

impl App {
    /// An app over these clients, with a plain batch processor (see [`App::with_processor`]).
    pub fn new(
        dynamodb: aws_sdk_dynamodb::Client,
        sqs: aws_sdk_sqs::Client,
        config: Config,
    ) -> Self {
        let idempotency = Idempotency::new(DynamoDbBackend::new(
            dynamodb.clone(),
            &config.idempotency_table,
        ))
        .with_key_prefix("payment-processor")
        .with_expiry(config.idempotency_ttl)
        .with_local_cache(payments_model::warm_cache());
        Self {
            idempotency,
            receipts: Publisher::new(sqs, &config.receipts_queue_url),
            dynamodb,
            processor: BatchProcessor::new(),
            config,
            resent: Arc::default(),
        }
    }

    /// An app from the SDK configuration and the settings, with the visibility backoff and the
    /// dead-letter queue they configure ([`payments_model::consumer_processor`]).
    pub fn from_settings(
        sdk: &aws_config::SdkConfig,
        settings: &impl Settings,
    ) -> Result<Self, ConfigError> {
        let sqs = aws_sdk_sqs::Client::new(sdk);
        let processor = payments_model::consumer_processor(sqs.clone(), settings)?;
        Ok(Self::new(
            aws_sdk_dynamodb::Client::new(sdk),
            sqs,
            Config::from_settings(settings)?,
        )
        .with_processor(processor))
    }

    /// Uses another batch processor (concurrency, margins, backoff, dead letters).
    pub fn with_processor(mut self, processor: BatchProcessor) -> Self {
        self.processor = processor;
        self
    }

    /// `PaymentCharged` events sent again for duplicates of charged payments (at least once:
    /// see the crate docs).
    pub fn receipts_resent(&self) -> u64 {
        self.resent.load(Ordering::Relaxed)
    }

    /// The idempotency engine.
    pub fn idempotency(&self) -> &Idempotency<DynamoDbBackend> {
        &self.idempotency
    }

    /// The cold-start check of the idempotency table ([`DynamoDbBackend::check_table`]): an
    /// error names the table and what does not match it (a partition key named or typed
    /// otherwise, a sort key, no such table). `main` stops the init on it: Lambda retries a
    /// failed init and counts it in the function's errors, and no message is dead-lettered
    /// meanwhile. What does not stop the table from working (its TTL) is only logged.
    pub async fn check_idempotency_table(&self) -> Result<TableCheck, StoreError> {
        self.idempotency.backend().check_table().await
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
        let handler =
            json(|payment: PaymentRequested, ctx: RecordContext| self.charge(payment, ctx))
                .on_dead_letter(|dead| self.dead_lettered(dead))
                .transactional(self.idempotency.clone())
                .with_keys(KeyConfig::json_pointer("/paymentId"))
                .and_then(|charged, ctx| self.publish(charged, ctx));
        let report = self.processor.process(&event, &handler).await?;
        let counts = BatchCounts::of(&report);
        counts
            .metrics(METRICS_NAMESPACE, "payment-processor")
            .emit();
        Ok((report.response(), counts))
    }

    async fn charge(&self, payment: PaymentRequested, ctx: RecordContext) -> Result<Charge, Error> {
        match self.prepare_charge(&payment, &ctx).await {
            Ok(charge) => Ok(charge),
            Err(e @ ChargeError::Invalid(_)) => Err(PermanentError::new(e).into()),
            Err(e) => Err(e.into()),
        }
    }

    /// Publishes the `PaymentCharged` event of a charge, or again for a duplicate.
    async fn publish(
        &self,
        charged: Deduplicated<PaymentCharged>,
        ctx: RecordContext,
    ) -> Result<Deduplicated<PaymentCharged>, ChargeError> {
        let event = match &charged {
            Deduplicated::Processed(event) => event.clone(),
            Deduplicated::Duplicate {
                stored: Some(stored),
            } if is_lease_mode_result(stored) => {
                tracing::info!(
                    message_id = ctx.message_id,
                    "duplicate of a payment charged before the transactional mode: its \
                     PaymentCharged was sent before its record was completed"
                );
                return Ok(charged);
            }
            Deduplicated::Duplicate {
                stored: Some(stored),
            } => {
                let event: PaymentCharged = serde_json::from_str(stored).map_err(|e| {
                    ChargeError::Publish(format!("the stored PaymentCharged is not valid: {e}"))
                })?;
                self.resent.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    message_id = ctx.message_id,
                    payment_id = event.payment_id,
                    "duplicate of a charged payment: its PaymentCharged is sent again"
                );
                event
            }
            Deduplicated::Duplicate { stored: None } => {
                tracing::warn!(
                    message_id = ctx.message_id,
                    "duplicate of a charged payment without a stored event: nothing to send"
                );
                return Ok(charged);
            }
        };
        let message = Message::standard(serde_json::to_string(&event).expect("serializable"))
            .map_err(|e| ChargeError::Publish(e.to_string()))?;
        self.receipts
            .send(message)
            .await
            .map_err(|e| ChargeError::Publish(e.to_string()))?;
        if !charged.is_duplicate() {
            tracing::info!(
                message_id = ctx.message_id,
                payment_id = event.payment_id,
                "payment charged"
            );
        }
        Ok(charged)
    }

    /// A payment's message went to the dead-letter queue (its error was permanent, or its
    /// attempts are used up): the payment is marked `failed`.
    async fn dead_lettered(&self, dead: DeadLettered) {
        let payment_id = serde_json::from_str::<serde_json::Value>(
            dead.message.body.as_deref().unwrap_or_default(),
        )
        .ok()
        .and_then(|body| body.get("paymentId")?.as_str().map(str::to_owned));
        match payment_id {
            Some(payment_id) => self.mark_failed(&payment_id, &dead.reason).await,
            None => tracing::error!(
                message_id = dead.ctx.message_id,
                reason = dead.reason,
                "dead-lettered message without a paymentId: no payment to mark failed"
            ),
        }
    }

    /// The charge of a valid payment, as its writes: nothing is written here.
    async fn prepare_charge(
        &self,
        payment: &PaymentRequested,
        ctx: &RecordContext,
    ) -> Result<Charge, ChargeError> {
        match self
            .config
            .failure_switch
            .as_ref()
            .and_then(|s| s.fault(payment.description.as_deref(), ctx.attempt))
        {
            None => {}
            Some(Fault::Fail) => return Err(ChargeError::Injected(ctx.attempt)),
            Some(Fault::Permanent) => {
                return Err(ChargeError::Invalid(
                    "injected permanent failure (FAIL_PAYMENTS)".into(),
                ));
            }
            Some(Fault::Panic) => panic!(
                "injected panic (FAIL_PAYMENTS) for payment {}",
                payment.payment_id
            ),
            Some(Fault::Sleep(pause)) => tokio::time::sleep(pause).await,
        }
        validate(payment)?;
        let entry_id = uuid::Uuid::new_v4().to_string();
        let now_ms = SystemClock.now_ms();
        let now = AttributeValue::N(now_ms.to_string());
        // When payments-publisher's send reached SQS: the relay's lag is queuedAt - createdAt.
        let queued_at = ctx
            .sent_at
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(now_ms, |d| d.as_millis() as i64);
        let s = |v: &str| AttributeValue::S(v.to_owned());
        let amount = AttributeValue::N(payment.amount_cents.to_string());
        let ledger = Put::builder()
            .table_name(&self.config.ledger_table)
            .item("entryId", s(&entry_id))
            .item("paymentId", s(&payment.payment_id))
            .item("accountId", s(&payment.account_id))
            .item("amountCents", amount.clone())
            .item("currency", s(&payment.currency))
            .item("messageId", s(&ctx.message_id))
            .item("createdAt", now.clone())
            .build()
            .expect("table and item are set");
        let balance = Update::builder()
            .table_name(&self.config.balances_table)
            .key("accountId", s(&payment.account_id))
            .update_expression("ADD balanceCents :amount, charges :one")
            .expression_attribute_values(":amount", amount.clone())
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .build()
            .expect("table, key and expression are set");
        let status = Update::builder()
            .table_name(&self.config.payments_table)
            .key("paymentId", s(&payment.payment_id))
            .update_expression(
                "SET #status = :charged, chargedAt = :now, queuedAt = :queued, ledgerEntryId = :entry, \
                 accountId = if_not_exists(accountId, :account), amountCents = if_not_exists(amountCents, :amount), \
                 currency = if_not_exists(currency, :currency)",
            )
            // Never charged twice, even once the idempotency record has expired.
            .condition_expression("attribute_not_exists(#status) OR #status <> :charged")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":charged", s(PaymentStatus::Charged.as_str()))
            .expression_attribute_values(":now", now)
            .expression_attribute_values(":queued", AttributeValue::N(queued_at.to_string()))
            .expression_attribute_values(":entry", s(&entry_id))
            .expression_attribute_values(":account", s(&payment.account_id))
            .expression_attribute_values(":amount", amount)
            .expression_attribute_values(":currency", s(&payment.currency))
            .build()
            .expect("table, key and expression are set");
        let event = PaymentCharged {
            payment_id: payment.payment_id.clone(),
            account_id: payment.account_id.clone(),
            amount_cents: payment.amount_cents,
            currency: payment.currency.clone(),
            ledger_entry_id: entry_id,
        };
        Ok(Charge::new(event)
            .put(ledger)
            .update(balance)
            .update(status))
    }

    /// Marks a payment `failed` (never one already charged).
    async fn mark_failed(&self, payment_id: &str, error: &str) {
        let result = self
            .dynamodb
            .update_item()
            .table_name(&self.config.payments_table)
            .key("paymentId", AttributeValue::S(payment_id.to_owned()))
            .update_expression("SET #status = :failed, lastError = :error")
            .condition_expression("attribute_not_exists(#status) OR #status <> :charged")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(
                ":failed",
                AttributeValue::S(PaymentStatus::Failed.as_str().into()),
            )
            .expression_attribute_values(
                ":charged",
                AttributeValue::S(PaymentStatus::Charged.as_str().into()),
            )
            .expression_attribute_values(":error", AttributeValue::S(truncate_error(error)))
            .send()
            .await;
        if let Err(e) = result {
            tracing::warn!(payment_id, error = %DisplayErrorContext(e), "could not mark the payment failed");
        }
    }
}

/// True for the result the lease mode stored (`{"ledgerEntryId": .., "recovered": ..}`): that
/// version completed a record only after its `PaymentCharged` was sent, so a duplicate of it has
/// nothing to send.
fn is_lease_mode_result(stored: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(stored).is_ok_and(|v| {
        v.get("recovered").is_some()
            && v.get("ledgerEntryId").is_some()
            && v.get("paymentId").is_none()
    })
}

/// A payment that can never be charged.
fn validate(payment: &PaymentRequested) -> Result<(), ChargeError> {
    if payment.payment_id.is_empty() || payment.payment_id.len() > 128 {
        return Err(ChargeError::Invalid(format!(
            "paymentId must be 1 to 128 characters; it has {}",
            payment.payment_id.len()
        )));
    }
    if payment.amount_cents <= 0 {
        return Err(ChargeError::Invalid(format!(
            "amountCents {} is not positive",
            payment.amount_cents
        )));
    }
    if payment.currency.len() != 3 || !payment.currency.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(ChargeError::Invalid(format!(
            "currency `{}` is not an ISO 4217 code",
            payment.currency
        )));
    }
    MessageGroupId::new(payment.account_id.as_str())
        .map_err(|e| ChargeError::Invalid(format!("accountId: {e}")))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_mode_result_is_told_from_a_stored_event() {
        assert!(is_lease_mode_result(
            r#"{"ledgerEntryId":"e-1","recovered":false}"#
        ));
        let event = PaymentCharged {
            payment_id: "p-1".into(),
            account_id: "a-1".into(),
            amount_cents: 5,
            currency: "EUR".into(),
            ledger_entry_id: "e-1".into(),
        };
        assert!(!is_lease_mode_result(
            &serde_json::to_string(&event).unwrap()
        ));
        assert!(!is_lease_mode_result("not json"));
    }
}
