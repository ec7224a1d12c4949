//! payment-processor: consumes `payments.fifo` and charges each payment once.
//!
//! Charging is one DynamoDB transaction: a ledger entry with a fresh id, a plain (non-idempotent)
//! increment of the account's balance, and the payment marked `charged`. Then a `PaymentCharged`
//! event goes to the `receipts` queue.
//!
//! Deduplication is keyed on the `paymentId` of the body rather than the SQS `MessageId`: the
//! payment id is the business key, so it also catches a producer that sends the same payment again
//! after the FIFO deduplication window (5 minutes), which arrives with a new `MessageId`.
//!
//! The idempotency store keeps duplicates away from the charge. What it cannot cover is a crash
//! *inside* the handler, after the transaction and before the record is completed: after the
//! lease ends, the payment runs again. So the charge is also naturally idempotent: the
//! transaction only applies while the payment is not `charged`. When it finds the payment
//! charged, the handler skips to publishing `PaymentCharged` (with the ledger entry already
//! written, so that receipt-sender sees the same event) and counts a recovered charge
//! ([`App::recovered_charges`]); without a crash that count stays zero.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use aws_sdk_dynamodb::error::{DisplayErrorContext, SdkError};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{
    BatchProcessor, DeadLettered, PermanentError, RecordContext, RecordHandlerExt, json,
};
use lambda_idempotency::key::KeyConfig;
use lambda_idempotency::metrics::BatchCounts;
use lambda_idempotency::publish::{Message, MessageGroupId, Publisher};
use lambda_idempotency::record::{Clock, SystemClock, truncate_error};
use lambda_idempotency::store::DynamoDbBackend;
use lambda_runtime::{Error, LambdaEvent};
use payments_model::{
    ConfigError, FailureSwitch, Fault, METRICS_NAMESPACE, PaymentCharged, PaymentRequested,
    PaymentStatus, Settings,
};
use serde::{Deserialize, Serialize};

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
    /// The charge transaction failed.
    #[error("charge transaction failed: {0}")]
    Store(String),
    /// The `PaymentCharged` event could not be published.
    #[error("could not publish PaymentCharged: {0}")]
    Publish(String),
}

/// The stored result of a charge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Charged {
    /// The ledger entry of the charge.
    pub ledger_entry_id: String,
    /// True when this attempt found the payment charged by an earlier one (after a crash).
    pub recovered: bool,
}

/// The function's state, built once per execution environment.
#[derive(Debug, Clone)]
pub struct App {
    idempotency: Idempotency<DynamoDbBackend>,
    dynamodb: aws_sdk_dynamodb::Client,
    receipts: Publisher,
    processor: BatchProcessor,
    config: Config,
    recovered: Arc<AtomicU64>,
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
        .with_expiry(config.idempotency_ttl);
        Self {
            idempotency,
            receipts: Publisher::new(sqs, &config.receipts_queue_url),
            dynamodb,
            processor: BatchProcessor::new(),
            config,
            recovered: Arc::default(),
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

    /// Charges that found their payment already charged by an earlier, interrupted attempt.
    pub fn recovered_charges(&self) -> u64 {
        self.recovered.load(Ordering::Relaxed)
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
                .idempotent(self.idempotency.clone())
                .with_keys(KeyConfig::json_pointer("/paymentId"));
        let report = self.processor.process(&event, &handler).await?;
        let counts = BatchCounts::of(&report);
        counts
            .metrics(METRICS_NAMESPACE, "payment-processor")
            .emit();
        Ok((report.response(), counts))
    }

    async fn charge(
        &self,
        payment: PaymentRequested,
        ctx: RecordContext,
    ) -> Result<Charged, Error> {
        match self.charge_once(&payment, &ctx).await {
            Ok(charged) => Ok(charged),
            Err(e @ ChargeError::Invalid(_)) => Err(PermanentError::new(e).into()),
            Err(e) => Err(e.into()),
        }
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

    async fn charge_once(
        &self,
        payment: &PaymentRequested,
        ctx: &RecordContext,
    ) -> Result<Charged, ChargeError> {
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
        let (entry_id, recovered) = self.record_charge(payment, ctx).await?;
        if recovered {
            self.recovered.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                message_id = ctx.message_id,
                payment_id = payment.payment_id,
                "payment already charged by an interrupted attempt; publishing its event only"
            );
        }
        let event = PaymentCharged {
            payment_id: payment.payment_id.clone(),
            account_id: payment.account_id.clone(),
            amount_cents: payment.amount_cents,
            currency: payment.currency.clone(),
            ledger_entry_id: entry_id.clone(),
        };
        let message = Message::standard(serde_json::to_string(&event).expect("serializable"))
            .map_err(|e| ChargeError::Publish(e.to_string()))?;
        self.receipts
            .send(message)
            .await
            .map_err(|e| ChargeError::Publish(e.to_string()))?;
        tracing::info!(
            message_id = ctx.message_id,
            payment_id = payment.payment_id,
            "payment charged"
        );
        Ok(Charged {
            ledger_entry_id: entry_id,
            recovered,
        })
    }

    /// The charge transaction; `(ledger entry id, recovered)`.
    async fn record_charge(
        &self,
        payment: &PaymentRequested,
        ctx: &RecordContext,
    ) -> Result<(String, bool), ChargeError> {
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
            // The charge applies once per payment, whatever happens around it.
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
        let result = self
            .dynamodb
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().put(ledger).build())
            .transact_items(TransactWriteItem::builder().update(balance).build())
            .transact_items(TransactWriteItem::builder().update(status).build())
            .send()
            .await;
        match result {
            Ok(_) => Ok((entry_id, false)),
            Err(SdkError::ServiceError(e)) if already_charged(e.err()) => {
                let existing = self
                    .dynamodb
                    .get_item()
                    .table_name(&self.config.payments_table)
                    .key("paymentId", s(&payment.payment_id))
                    .consistent_read(true)
                    .send()
                    .await
                    .map_err(|e| ChargeError::Store(DisplayErrorContext(e).to_string()))?;
                let entry = existing
                    .item()
                    .and_then(|i| i.get("ledgerEntryId"))
                    .and_then(|v| v.as_s().ok())
                    .cloned()
                    .ok_or_else(|| {
                        ChargeError::Store("charged payment without a ledger entry id".into())
                    })?;
                Ok((entry, true))
            }
            Err(e) => Err(ChargeError::Store(DisplayErrorContext(e).to_string())),
        }
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

/// True when the transaction was cancelled because the payment is already charged (the third
/// action's condition).
fn already_charged(error: &TransactWriteItemsError) -> bool {
    match error {
        TransactWriteItemsError::TransactionCanceledException(e) => e
            .cancellation_reasons()
            .get(2)
            .and_then(|r| r.code())
            .is_some_and(|code| code == "ConditionalCheckFailed"),
        _ => false,
    }
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
