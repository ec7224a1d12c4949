//! payment-processor: consumes `payments.fifo` and charges each payment once.
//!
//! Charging is one DynamoDB transaction: a ledger entry with a fresh id, a plain (non-idempotent)
//! increment of the account's balance, and the payment marked `charged`. Then a `PaymentCharged`
//! event goes to the `receipts` queue. Nothing in the charge itself is idempotent, so any double
//! processing would show as a second ledger entry and a wrong balance: the idempotency store is
//! what prevents it.
//!
//! Deduplication is keyed on the `paymentId` of the body rather than the SQS `MessageId`: the
//! payment id is the business key, so it also catches a producer that sends the same payment again
//! after the FIFO deduplication window (5 minutes), which arrives with a new `MessageId`.

use std::time::Duration;

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{BatchProcessor, RecordContext, RecordHandlerExt, json};
use lambda_idempotency::key::KeyConfig;
use lambda_idempotency::metrics::BatchCounts;
use lambda_idempotency::publish::{Message, Publisher};
use lambda_idempotency::record::{Clock, SystemClock};
use lambda_idempotency::store::DynamoDbBackend;
use lambda_runtime::{Error, LambdaEvent};
use payments_model::{
    ConfigError, FailureSwitch, METRICS_NAMESPACE, PaymentCharged, PaymentRequested, PaymentStatus,
    Settings,
};

/// Settings of payment-processor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `IDEMPOTENCY_TABLE`.
    pub idempotency_table: String,
    /// `IDEMPOTENCY_TTL_SECONDS` (default 24 h).
    pub idempotency_ttl: Duration,
    /// `PAYMENTS_TABLE`.
    pub payments_table: String,
    /// `LEDGER_TABLE`.
    pub ledger_table: String,
    /// `BALANCES_TABLE`.
    pub balances_table: String,
    /// `RECEIPTS_QUEUE_URL`.
    pub receipts_queue_url: String,
    /// `MAX_RECEIVE_COUNT`: the queue's redrive threshold; a payment failing on its last receive
    /// is marked `failed`. Unset: never marked.
    pub max_receive_count: Option<u32>,
    /// `FAIL_PAYMENTS`: the failure switch (tests and demos only).
    pub failure_switch: Option<FailureSwitch>,
}

impl Config {
    /// Reads the settings.
    pub fn from_settings(settings: &impl Settings) -> Result<Self, ConfigError> {
        let max_receive_count = match settings.get("MAX_RECEIVE_COUNT") {
            None => None,
            Some(v) => Some(v.parse().map_err(|e| ConfigError::Invalid {
                name: "MAX_RECEIVE_COUNT",
                reason: format!("`{v}`: {e}"),
            })?),
        };
        Ok(Self {
            idempotency_table: settings.required("IDEMPOTENCY_TABLE")?,
            idempotency_ttl: settings
                .seconds("IDEMPOTENCY_TTL_SECONDS", Duration::from_secs(86_400))?,
            payments_table: settings.required("PAYMENTS_TABLE")?,
            ledger_table: settings.required("LEDGER_TABLE")?,
            balances_table: settings.required("BALANCES_TABLE")?,
            receipts_queue_url: settings.required("RECEIPTS_QUEUE_URL")?,
            max_receive_count,
            failure_switch: FailureSwitch::from_settings(settings)?,
        })
    }
}

/// Why a payment was not charged this time (the message is redelivered).
#[derive(Debug, thiserror::Error)]
pub enum ChargeError {
    /// The failure switch fired.
    #[error("injected failure (FAIL_PAYMENTS) on receive {0}")]
    Injected(u32),
    /// The charge transaction failed.
    #[error("charge transaction failed: {0}")]
    Store(String),
    /// The `PaymentCharged` event could not be published.
    #[error("could not publish PaymentCharged: {0}")]
    Publish(String),
}

/// The function's state, built once per execution environment.
#[derive(Debug, Clone)]
pub struct App {
    idempotency: Idempotency<DynamoDbBackend>,
    dynamodb: aws_sdk_dynamodb::Client,
    receipts: Publisher,
    processor: BatchProcessor,
    config: Config,
}

impl App {
    /// An app over these clients, with no visibility backoff (see [`App::with_processor`]).
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
        }
    }

    /// An app from the SDK configuration and the settings, with the visibility backoff they
    /// configure ([`payments_model::backoff`]).
    pub fn from_settings(
        sdk: &aws_config::SdkConfig,
        settings: &impl Settings,
    ) -> Result<Self, ConfigError> {
        let sqs = aws_sdk_sqs::Client::new(sdk);
        let backoff = payments_model::backoff(sqs.clone(), settings)?;
        Ok(Self::new(
            aws_sdk_dynamodb::Client::new(sdk),
            sqs,
            Config::from_settings(settings)?,
        )
        .with_processor(BatchProcessor::new().with_backoff(backoff)))
    }

    /// Uses another batch processor (concurrency, margins).
    pub fn with_processor(mut self, processor: BatchProcessor) -> Self {
        self.processor = processor;
        self
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
    ) -> Result<String, ChargeError> {
        let result = self.charge_once(&payment, &ctx).await;
        if let Err(e) = &result {
            let last = self
                .config
                .max_receive_count
                .is_some_and(|max| ctx.receive_count >= max);
            if last {
                self.mark_failed(&payment, &e.to_string()).await;
            }
        }
        result
    }

    async fn charge_once(
        &self,
        payment: &PaymentRequested,
        ctx: &RecordContext,
    ) -> Result<String, ChargeError> {
        if let Some(switch) = &self.config.failure_switch
            && switch.should_fail(payment.description.as_deref(), ctx.receive_count)
        {
            return Err(ChargeError::Injected(ctx.receive_count));
        }
        let entry_id = uuid::Uuid::new_v4().to_string();
        let now = AttributeValue::N(SystemClock.now_ms().to_string());
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
                "SET #status = :charged, chargedAt = :now, ledgerEntryId = :entry, \
                 accountId = if_not_exists(accountId, :account), amountCents = if_not_exists(amountCents, :amount), \
                 currency = if_not_exists(currency, :currency)",
            )
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":charged", s(PaymentStatus::Charged.as_str()))
            .expression_attribute_values(":now", now)
            .expression_attribute_values(":entry", s(&entry_id))
            .expression_attribute_values(":account", s(&payment.account_id))
            .expression_attribute_values(":amount", amount)
            .expression_attribute_values(":currency", s(&payment.currency))
            .build()
            .expect("table, key and expression are set");
        self.dynamodb
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().put(ledger).build())
            .transact_items(TransactWriteItem::builder().update(balance).build())
            .transact_items(TransactWriteItem::builder().update(status).build())
            .send()
            .await
            .map_err(|e| {
                ChargeError::Store(aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string())
            })?;
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
        Ok(entry_id)
    }

    /// Marks a payment `failed` after its last allowed receive (never one already charged).
    async fn mark_failed(&self, payment: &PaymentRequested, error: &str) {
        let result = self
            .dynamodb
            .update_item()
            .table_name(&self.config.payments_table)
            .key("paymentId", AttributeValue::S(payment.payment_id.clone()))
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
            .expression_attribute_values(
                ":error",
                AttributeValue::S(lambda_idempotency::record::truncate_error(error)),
            )
            .send()
            .await;
        if let Err(e) = result {
            tracing::warn!(payment_id = payment.payment_id, error = %aws_sdk_dynamodb::error::DisplayErrorContext(e), "could not mark the payment failed");
        }
    }
}
