//! receipt-sender: consumes the `receipts` queue and sends one receipt per `PaymentCharged`
//! event.
//!
//! Deduplication is keyed on the event's `paymentId`, which catches both a redelivery of one
//! message and a second `PaymentCharged` for the same charge: payment-processor publishes the
//! event again (with the same ledger entry) when a crash interrupted it between the charge and
//! its completion.
//!
//! "Sending" appends an item with a fresh random id to the receipts table, so a duplicate would
//! show as a second item for the same payment.

use std::time::Duration;

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use aws_sdk_dynamodb::types::AttributeValue;
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{BatchProcessor, RecordContext, RecordHandlerExt, json};
use lambda_idempotency::key::KeyConfig;
use lambda_idempotency::metrics::BatchCounts;
use lambda_idempotency::record::{Clock, SystemClock};
use lambda_idempotency::store::{DynamoDbBackend, StoreError, TableCheck};
use lambda_runtime::{Error, LambdaEvent};
use payments_model::{ConfigError, METRICS_NAMESPACE, PaymentCharged, Settings};

/// Settings of receipt-sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `IDEMPOTENCY_TABLE`.
    pub idempotency_table: String,
    /// `IDEMPOTENCY_TTL_SECONDS` (default [`payments_model::DEFAULT_IDEMPOTENCY_TTL`], 18 days).
    pub idempotency_ttl: Duration,
    /// `RECEIPTS_TABLE`.
    pub receipts_table: String,
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
            receipts_table: settings.required("RECEIPTS_TABLE")?,
        })
    }
}

/// The function's state, built once per execution environment.
#[derive(Debug, Clone)]
pub struct App {
    idempotency: Idempotency<DynamoDbBackend>,
    dynamodb: aws_sdk_dynamodb::Client,
    processor: BatchProcessor,
    receipts_table: String,
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
            .with_local_cache(payments_model::warm_cache())
            .with_expiry(config.idempotency_ttl),
            dynamodb,
            processor: BatchProcessor::new(),
            receipts_table: config.receipts_table,
        }
    }

    /// An app from the SDK configuration and the settings, with the visibility backoff and the
    /// dead-letter queue they configure ([`payments_model::consumer_processor`]).
    pub fn from_settings(
        sdk: &aws_config::SdkConfig,
        settings: &impl Settings,
    ) -> Result<Self, ConfigError> {
        let processor =
            payments_model::consumer_processor(aws_sdk_sqs::Client::new(sdk), settings)?;
        Ok(Self::new(
            aws_sdk_dynamodb::Client::new(sdk),
            Config::from_settings(settings)?,
        )
        .with_processor(processor))
    }

    /// Uses another batch processor (concurrency, margins).
    pub fn with_processor(mut self, processor: BatchProcessor) -> Self {
        self.processor = processor;
        self
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
            json(|charged: PaymentCharged, ctx: RecordContext| self.send_receipt(charged, ctx))
                .idempotent(self.idempotency.clone())
                .with_keys(KeyConfig::json_pointer("/paymentId"));
        let report = self.processor.process(&event, &handler).await?;
        let counts = BatchCounts::of(&report);
        counts.metrics(METRICS_NAMESPACE, "receipt-sender").emit();
        Ok((report.response(), counts))
    }

    async fn send_receipt(
        &self,
        charged: PaymentCharged,
        ctx: RecordContext,
    ) -> Result<String, Error> {
        let receipt_id = uuid::Uuid::new_v4().to_string();
        let s = |v: &str| AttributeValue::S(v.to_owned());
        self.dynamodb
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
            .item("messageId", s(&ctx.message_id))
            .item(
                "sentAt",
                AttributeValue::N(SystemClock.now_ms().to_string()),
            )
            .send()
            .await
            .map_err(aws_sdk_dynamodb::error::DisplayErrorContext)
            .map_err(|e| e.to_string())?;
        tracing::info!(
            message_id = ctx.message_id,
            payment_id = charged.payment_id,
            receipt_id,
            "receipt sent"
        );
        Ok(receipt_id)
    }
}
