//! payment-processor: consumes `payments.fifo` and charges each payment once, as the payments
//! table accepted it, in its account's order.
//!
//! A charge is one DynamoDB transaction ([`charge::charge`]): a ledger entry, the balance of the
//! account in the payment's currency, the payment marked `charged`, and the account's order
//! moved on ([`payments_model::order`]). The idempotency record, written completed, rides on the
//! payment's update (the library's transactional mode with the record carried,
//! [`Transaction::carry_record`](lambda_idempotency::transaction::Transaction::carry_record)): the
//! payment is the item that refuses a second charge, and it carries the proof, so the
//! transaction is the domain's four writes (8 write units; 6 for a payment without a number)
//! and nothing more. Either all commit or none does. A failed attempt is counted in the
//! idempotency table.
//!
//! **The queue is not trusted; the payments table is.** The condition on the payment requires it
//! to exist, to be `accepted` and to have the message's account, amount, currency and number.
//! When the transaction is refused, one read of the payment (and of its account) tells why
//! ([`verify`]):
//!
//! - no such payment (never accepted by payments-api), or a message that disagrees with it:
//!   nothing is charged, no row is created, the payment is left as it was, and the message goes
//!   to the dead-letter queue with a reason naming the mismatch;
//! - a payment that `failed`: final until an operator reopens it; a later delivery or a redrive
//!   is dead-lettered again, never charged;
//! - a payment charged already (its idempotency record expired, or a message of an older
//!   producer hashed otherwise): a duplicate;
//! - an earlier payment of the account not settled yet (the message came early): those are
//!   charged first, from the table, then this one ([`catch_up`]); one that cannot be charged is
//!   failed with its reason once its own attempts are used up, and the account goes on.
//!
//! **Readers are tolerant** ([`PaymentRequested`]): unknown fields are logged at debug and read
//! past, a message without the optional `sequence` (the previous version) is charged with the
//! number stored with its payment, and the idempotency payload is the payment's defining fields
//! (`paymentId`, `accountId`, `amountCents`, `currency`), so a resend in another envelope is a
//! duplicate, not a conflict.
//!
//! After the commit a `PaymentCharged` event goes to the `receipts` queue. That send is outside the
//! transaction, so it happens at least once: a duplicate sends the stored event again (the same
//! event, ledger entry id included), which covers a crash between the commit and the send, and
//! receipt-sender writes one receipt per payment. [`App::receipts_resent`] counts those sends.

pub mod catch_up;
pub mod charge;
pub mod tally;
pub mod verify;

pub use tally::{Event, Tally};

use std::time::Duration;

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::types::AttributeValue;
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{
    BatchProcessor, DeadLettered, Deduplicated, PermanentError, RecordContext, RecordHandler,
    RecordHandlerExt, json,
};
use lambda_idempotency::cache::{CachedBackend, HitCounter};
use lambda_idempotency::key::KeyConfig;
use lambda_idempotency::metrics::{BatchCounts, Metrics};
use lambda_idempotency::publish::{Message, Publisher};
use lambda_idempotency::state::truncate_error;
use lambda_idempotency::store::{DynamoDbBackend, NewItem, StoreError, TableCheck};
use lambda_idempotency::time::{Clock, SystemClock};
use lambda_runtime::{Error, LambdaEvent};
use payments_config::{ConfigError, FailureSwitch, Fault, Settings};
use payments_model::lifecycle::MarkedFailed;
use payments_model::{METRICS_NAMESPACE, PaymentCharged, PaymentRequested, lifecycle};

pub use crate::charge::Charge;

/// Settings of payment-processor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `IDEMPOTENCY_TABLE`.
    pub idempotency_table: String,
    /// `IDEMPOTENCY_TTL_SECONDS` (default [`payments_config::DEFAULT_IDEMPOTENCY_TTL`], 18 days).
    pub idempotency_ttl: Duration,
    /// `PAYMENTS_TABLE`.
    pub payments_table: String,
    /// `LEDGER_TABLE`.
    pub ledger_table: String,
    /// `BALANCES_TABLE`: balances per account and currency.
    pub balances_table: String,
    /// `ACCOUNTS_TABLE`: each account's order ([`payments_model::order`]).
    pub accounts_table: String,
    /// `RECEIPTS_QUEUE_URL`.
    pub receipts_queue_url: String,
    /// `FAIL_PAYMENTS`: the failure switch (tests and demos only; refused where `STAGE` is
    /// `prod`, see [`FailureSwitch::from_settings`]).
    pub failure_switch: Option<FailureSwitch>,
    /// `MAX_ATTEMPTS` ([`payments_config::max_attempts`]): the attempts of a payment, also when
    /// it is charged ahead of its message ([`catch_up`]); unset, only a permanent failure ends
    /// it.
    pub max_attempts: Option<u32>,
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
            payments_table: settings.required("PAYMENTS_TABLE")?,
            ledger_table: settings.required("LEDGER_TABLE")?,
            balances_table: settings.required("BALANCES_TABLE")?,
            accounts_table: settings.required("ACCOUNTS_TABLE")?,
            receipts_queue_url: settings.required("RECEIPTS_QUEUE_URL")?,
            failure_switch: FailureSwitch::from_settings(settings)?,
            max_attempts: payments_config::max_attempts(settings)?,
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

/// What one invocation gave, and what it counted: its own alone, when several run at once in the
/// process (Lambda Managed Instances). The counts are the invocation's metrics.
#[derive(Debug)]
pub struct Handled {
    /// The partial batch response.
    pub response: SqsBatchResponse,
    /// Its records' outcomes.
    pub counts: BatchCounts,
    /// Duplicates answered from the warm-container cache (`cacheHits`).
    pub cache_hits: u64,
    /// `PaymentCharged` events sent again for duplicates (`receiptsResent`).
    pub receipts_resent: u64,
    /// Payments marked failed ahead of their message (`failedAhead`).
    pub failed_ahead: u64,
}

impl Handled {
    /// The invocation's EMF line, which [`App::handle_counted`] prints: the batch's counts
    /// ([`BatchCounts::metrics`]) and the processor's own.
    pub fn metrics(&self) -> Metrics {
        self.counts
            .metrics(
                METRICS_NAMESPACE,
                payments_model::metrics::function::PAYMENT_PROCESSOR,
            )
            .count(
                payments_model::metrics::processor::CACHE_HITS,
                self.cache_hits,
            )
            .count(
                payments_model::metrics::processor::RECEIPTS_RESENT,
                self.receipts_resent,
            )
            .count(
                payments_model::metrics::processor::FAILED_AHEAD,
                self.failed_ahead,
            )
    }
}

/// The function's state, built once per execution environment.
#[derive(Debug, Clone)]
pub struct App {
    idempotency: Idempotency<CachedBackend<DynamoDbBackend>>,
    dynamodb: aws_sdk_dynamodb::Client,
    receipts: Publisher,
    processor: BatchProcessor,
    config: Config,
    tally: Tally,
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
        .with_local_cache(payments_config::warm_cache());
        Self {
            idempotency,
            receipts: Publisher::new(sqs, &config.receipts_queue_url),
            dynamodb,
            processor: BatchProcessor::new(),
            config,
            tally: Tally::default(),
        }
    }

    /// An app from the SDK configuration and the settings, with the visibility backoff and the
    /// dead-letter queue they configure ([`payments_config::consumer_processor`]).
    pub fn from_settings(
        sdk: &aws_config::SdkConfig,
        settings: &impl Settings,
    ) -> Result<Self, ConfigError> {
        let sqs = payments_config::sqs(sdk);
        let processor = payments_config::consumer_processor(sqs.clone(), settings)?;
        Ok(Self::new(
            payments_config::dynamodb(sdk),
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

    /// Sends the `PaymentCharged` events with another publisher (its retries and their backoff;
    /// the queue stays the configured `RECEIPTS_QUEUE_URL`).
    pub fn with_receipts_publisher(mut self, receipts: Publisher) -> Self {
        self.receipts = receipts;
        self
    }

    /// `PaymentCharged` events sent again for duplicates of charged payments (at least once:
    /// see the crate docs).
    pub fn receipts_resent(&self) -> u64 {
        self.tally.get(Event::ReceiptResent)
    }

    /// Payments marked `failed` while charged ahead of their message ([`catch_up`]): an
    /// account's earlier payment that could not be charged, passed over so that the later ones go
    /// on.
    pub fn failed_ahead(&self) -> u64 {
        self.tally.get(Event::FailedAhead)
    }

    /// Duplicates answered from the warm-container cache, without a request.
    pub fn cache_hits(&self) -> u64 {
        self.idempotency.backend().cache().hits()
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
        Ok(self.handle_counted(event).await?.response)
    }

    /// [`handle`](Self::handle), also giving what the invocation counted (its metrics).
    pub async fn handle_counted(&self, event: LambdaEvent<SqsEvent>) -> Result<Handled, Error> {
        // This invocation's own counts, whatever else runs in the process at the same time.
        let handler = verify::Verified::new(self);
        let process = self.processor.process(&event, &handler);
        let (tally, hits) = (Tally::default(), HitCounter::default());
        let report = tally.scope(hits.scope(process)).await?;
        let handled = Handled {
            response: report.response(),
            counts: BatchCounts::of(&report),
            cache_hits: hits.count(),
            receipts_resent: tally.get(Event::ReceiptResent),
            failed_ahead: tally.get(Event::FailedAhead),
        };
        handled.metrics().emit();
        Ok(handled)
    }

    /// The idempotency keys and payloads of `payments.fifo`: the key is the payment, the payload
    /// its defining fields.
    pub fn keys() -> KeyConfig {
        KeyConfig::json_pointer("/paymentId").with_payload_pointers([
            "/paymentId",
            "/accountId",
            "/amountCents",
            "/currency",
        ])
    }

    /// The charge of one message, in the transactional mode, then its `PaymentCharged` sent.
    /// The failure switch applies to every charge: of a payment's own message, and of a payment
    /// charged from the table ahead of it ([`catch_up`]).
    fn charging(&self) -> impl RecordHandler<Output = Deduplicated<PaymentCharged>> + '_ {
        json(move |payment: PaymentRequested, ctx: RecordContext| self.charge(payment, ctx))
            .on_dead_letter(|dead| self.dead_lettered(dead))
            .transactional(self.idempotency.clone())
            .with_keys(Self::keys())
            .with_item_lookup(payment_item(self.config.payments_table.clone()))
            .and_then(|charged, ctx| self.publish(charged, ctx))
    }

    async fn charge(&self, payment: PaymentRequested, ctx: RecordContext) -> Result<Charge, Error> {
        if !payment.unknown.is_empty() {
            tracing::debug!(
                message_id = ctx.message_id,
                fields = ?payment.unknown_fields(),
                "fields this version does not know, read past"
            );
        }
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
                self.tally.count(Event::ReceiptResent);
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
    /// attempts are used up): the payment is marked `failed`, if the message is the payment's
    /// (see [`App::mark_failed`]), of either version.
    async fn dead_lettered(&self, dead: DeadLettered) {
        match serde_json::from_str::<PaymentRequested>(
            dead.message.body.as_deref().unwrap_or_default(),
        ) {
            Ok(payment) => self.mark_failed(&payment, &dead.reason).await,
            Err(e) => tracing::error!(
                message_id = dead.ctx.message_id,
                reason = dead.reason,
                error = %e,
                "dead-lettered message that is not a payment: no payment to mark failed"
            ),
        }
    }

    /// The charge of a valid payment, as its writes: nothing is written here.
    async fn prepare_charge(
        &self,
        payment: &PaymentRequested,
        ctx: &RecordContext,
    ) -> Result<Charge, ChargeError> {
        let fault = self
            .config
            .failure_switch
            .as_ref()
            .and_then(|switch| switch.fault(payment.description.as_deref(), ctx.attempt));
        match fault {
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
        let now_ms = SystemClock.now_ms();
        // When payments-publisher's send reached SQS: the relay's lag is queuedAt - createdAt.
        let queued_at = ctx
            .sent_at
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(now_ms, |d| d.as_millis() as i64);
        charge::charge(&self.config, payment, &ctx.message_id, now_ms, queued_at)
    }

    /// Marks a payment `failed`, with the reason and the time, only if the message is the
    /// payment's: it exists, is still `accepted`, and has the message's account, amount,
    /// currency (and number, when the message has one: [`lifecycle::may_fail`]). A message that
    /// was refused for disagreeing with its payment, or for a payment never accepted, leaves the
    /// table as it was; a payment already failed keeps its first reason.
    pub async fn mark_failed(&self, payment: &PaymentRequested, reason: &str) {
        let marked = lifecycle::mark_failed(
            &self.dynamodb,
            &self.config.payments_table,
            payment,
            &truncate_error(reason),
            SystemClock.now_ms(),
        )
        .await;
        match marked {
            Ok(MarkedFailed::Marked) => {
                tracing::info!(payment_id = payment.payment_id, "payment marked failed");
            }
            Ok(MarkedFailed::NotAccepted) => {
                tracing::info!(
                    payment_id = payment.payment_id,
                    "payment not marked failed: the message is not an accepted payment's (never \
                     accepted, disagreeing with it, or settled already)"
                );
            }
            Err(e) => {
                tracing::warn!(payment_id = payment.payment_id, error = %DisplayErrorContext(e), "could not mark the payment failed");
            }
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

/// Where a payment's item is, in `table`: it carries its charge's record, so a failed charge reads
/// it first, and a payment another delivery charged is a duplicate, never an attempt towards the
/// budget.
fn payment_item(table: String) -> impl Fn(&str, &SqsMessage) -> Option<NewItem> + Send + Sync {
    move |payment_id, _| {
        Some(NewItem::new(
            &table,
            "paymentId",
            AttributeValue::S(payment_id.to_owned()),
        ))
    }
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

    #[test]
    fn the_failure_switch_is_refused_where_stage_is_prod() {
        let settings = |stage: Option<&str>, rules: &str| {
            let mut s: std::collections::HashMap<String, String> = [
                ("IDEMPOTENCY_TABLE", "idem"),
                ("PAYMENTS_TABLE", "payments"),
                ("LEDGER_TABLE", "ledger"),
                ("BALANCES_TABLE", "balances"),
                ("ACCOUNTS_TABLE", "accounts"),
                ("RECEIPTS_QUEUE_URL", "http://q/receipts"),
                ("FAIL_PAYMENTS", rules),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
            if let Some(stage) = stage {
                s.insert("STAGE".into(), stage.into());
            }
            s
        };
        let refused = Config::from_settings(&settings(Some("prod"), "flaky:2")).unwrap_err();
        assert_eq!(
            refused,
            ConfigError::FailureSwitchInProduction {
                stage: "prod".into(),
                rules: "flaky:2".into(),
            }
        );
        let message = refused.to_string();
        assert!(
            message.contains("FAIL_PAYMENTS") && message.contains("STAGE is prod"),
            "{message}"
        );
        // Without a switch, production starts; elsewhere, the switch is read.
        let config = Config::from_settings(&settings(Some("prod"), "")).unwrap();
        assert_eq!(config.failure_switch, None);
        for stage in [Some("dev"), Some("test"), None] {
            let config = Config::from_settings(&settings(stage, "flaky:2")).unwrap();
            assert!(config.failure_switch.is_some(), "{stage:?}");
        }
    }
}
