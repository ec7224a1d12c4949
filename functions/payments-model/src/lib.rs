//! What the payments pipeline's functions share: the messages on its queues, configuration from
//! the environment, and the failure switch used by tests and the demo.

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub mod failure_switch;
pub mod lifecycle;
pub mod metrics;
pub mod order;

pub use failure_switch::{FailureSwitch, Fault};

/// Metric namespace of the pipeline ([`metrics::NAMESPACE`]).
pub const METRICS_NAMESPACE: &str = metrics::NAMESPACE;

/// The default idempotency expiry (`IDEMPOTENCY_TTL_SECONDS`) of the pipeline's functions: the
/// queues' retention (4 days) plus the dead-letter queues' (14 days), so that a message redriven
/// on the last day of its dead-letter retention still finds its record. `template.yaml`'s
/// `IdempotencyTtlSeconds` has the same default and refuses less (MinValue).
pub const DEFAULT_IDEMPOTENCY_TTL: Duration = Duration::from_secs(345_600 + 1_209_600);

/// Completed keys a warm execution environment of a consumer remembers (see
/// [`lambda_idempotency::cache`]): a redelivery to the environment that processed it costs no
/// request.
pub const WARM_CACHE_CAPACITY: usize = 10_000;

/// How long a consumer's warm-container cache keeps a completed key.
pub const WARM_CACHE_TTL: Duration = Duration::from_secs(15 * 60);

/// The consumers' warm-container cache. Their records are never deleted or taken back while they
/// live (the records only expire), so an entry cannot go stale.
pub fn warm_cache() -> lambda_idempotency::cache::LocalCache {
    lambda_idempotency::cache::LocalCache::new(
        std::num::NonZeroUsize::new(WARM_CACHE_CAPACITY).expect("not zero"),
        WARM_CACHE_TTL,
    )
}

/// A payment's state, as stored in the payments table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PaymentStatus {
    /// Stored (and relayed to `payments.fifo` by payments-publisher); not charged yet.
    Accepted,
    /// Charged.
    Charged,
    /// Processing gave up (the message went to the dead-letter queue).
    Failed,
}

impl PaymentStatus {
    /// The stored value.
    pub fn as_str(self) -> &'static str {
        match self {
            PaymentStatus::Accepted => "accepted",
            PaymentStatus::Charged => "charged",
            PaymentStatus::Failed => "failed",
        }
    }
}

/// A payment as the payments table stores it: written once by payments-api (the outbox record),
/// relayed by payments-publisher from the table's stream, then updated by payment-processor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentItem {
    /// The payment: derived from the caller and its Idempotency-Key.
    pub payment_id: String,
    /// The account charged (the caller's, from its identity).
    pub account_id: String,
    /// Amount in minor units (> 0).
    pub amount_cents: i64,
    /// ISO 4217 code.
    pub currency: String,
    /// Optional free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// [`PaymentStatus`], as stored.
    pub status: String,
    /// When payments-api stored it (epoch ms).
    pub created_at: i64,
    /// The caller (`sub` of its token) that created it.
    pub caller_id: String,
    /// SHA-256 of the canonical request body: the same key with another body is refused even
    /// after the idempotency record expired.
    pub request_hash: String,
    /// Its place in its account's order ([`order`]): 1 for the account's first payment. Absent
    /// on payments accepted before accounts were ordered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence: Option<u64>,
    /// How many times an operator reopened it after it failed (absent: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reopens: Option<u32>,
}

impl PaymentItem {
    /// The message payments-publisher sends for it.
    pub fn requested(&self) -> PaymentRequested {
        PaymentRequested {
            payment_id: self.payment_id.clone(),
            account_id: self.account_id.clone(),
            amount_cents: self.amount_cents,
            currency: self.currency.clone(),
            description: self.description.clone(),
            sequence: self.sequence,
            unknown: serde_json::Map::new(),
        }
    }
}

/// Body of a message on `payments.fifo`: a payment to charge.
///
/// A tolerant reader: fields it does not know (a newer producer's) are kept in
/// [`unknown`](Self::unknown), never refused, and the optional fields may be missing (an older
/// producer's). What defines the payment (id, account, amount, currency) is required, and
/// payment-processor checks it against the stored payment before charging.
///
/// ```
/// use payments_model::PaymentRequested;
///
/// // The previous version: no sequence.
/// let old: PaymentRequested = serde_json::from_str(
///     r#"{"paymentId":"p-1","accountId":"a-1","amountCents":5,"currency":"EUR"}"#,
/// ).unwrap();
/// assert_eq!(old.sequence, None);
/// // A next version: new fields are read past.
/// let next: PaymentRequested = serde_json::from_str(
///     r#"{"version":3,"paymentId":"p-1","accountId":"a-1","amountCents":5,"currency":"EUR","sequence":2,"channel":{"kind":"web"}}"#,
/// ).unwrap();
/// assert_eq!(next.sequence, Some(2));
/// assert_eq!(next.unknown_fields(), vec!["channel", "version"]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequested {
    /// The payment (derived from the client's Idempotency-Key).
    pub payment_id: String,
    /// The account charged; also the FIFO message group.
    pub account_id: String,
    /// Amount in minor units, > 0.
    pub amount_cents: i64,
    /// ISO 4217 code.
    pub currency: String,
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The payment's place in its account's order ([`order`]); absent in messages of the
    /// previous version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence: Option<u64>,
    /// Fields this version does not know, as sent. Never written back.
    #[serde(flatten, skip_serializing)]
    pub unknown: serde_json::Map<String, serde_json::Value>,
}

impl PaymentRequested {
    /// The names of the fields this version does not know, sorted.
    pub fn unknown_fields(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.unknown.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }
}

/// Body of a message on the `receipts` queue: a payment was charged. Read tolerantly: fields a
/// newer payment-processor adds are ignored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentCharged {
    /// The payment.
    pub payment_id: String,
    /// The account.
    pub account_id: String,
    /// Amount in minor units.
    pub amount_cents: i64,
    /// ISO 4217 code.
    pub currency: String,
    /// The ledger entry written by the charge.
    pub ledger_entry_id: String,
}

/// A missing or invalid setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A required variable is not set.
    #[error("environment variable {0} is not set")]
    Missing(&'static str),
    /// A variable has an invalid value.
    #[error("environment variable {name} is invalid: {reason}")]
    Invalid {
        /// The variable.
        name: &'static str,
        /// Why.
        reason: String,
    },
    /// The failure switch (`FAIL_PAYMENTS`) is set where `STAGE` says production.
    #[error(
        "FAIL_PAYMENTS is set ({rules:?}) but STAGE is {stage}: the failure switch is for tests and demos and is refused in production; unset FAIL_PAYMENTS (or deploy with Stage dev or test)"
    )]
    FailureSwitchInProduction {
        /// `STAGE`.
        stage: String,
        /// The rules `FAIL_PAYMENTS` holds.
        rules: String,
    },
}

/// Where settings come from: the process environment in Lambda, a map in tests and the local
/// runner.
pub trait Settings {
    /// The value of `name`, if set (an empty value counts as unset).
    fn get(&self, name: &str) -> Option<String>;

    /// A required value.
    fn required(&self, name: &'static str) -> Result<String, ConfigError> {
        self.get(name).ok_or(ConfigError::Missing(name))
    }

    /// An optional number of seconds, with a default.
    fn seconds(&self, name: &'static str, default: Duration) -> Result<Duration, ConfigError> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => {
                v.parse::<u64>()
                    .map(Duration::from_secs)
                    .map_err(|e| ConfigError::Invalid {
                        name,
                        reason: format!("`{v}` is not a number of seconds: {e}"),
                    })
            }
        }
    }
}

/// The process environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Env;

impl Settings for Env {
    fn get(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
}

impl Settings for HashMap<String, String> {
    fn get(&self, name: &str) -> Option<String> {
        HashMap::get(self, name).filter(|v| !v.is_empty()).cloned()
    }
}

/// The visibility backoff of a consumer: `BACKOFF_BASE_SECONDS` (default 2), `BACKOFF_MAX_SECONDS`
/// (default 300), off when `BACKOFF_BASE_SECONDS` is `0`.
pub fn backoff(
    sqs: aws_sdk_sqs::Client,
    settings: &impl Settings,
) -> Result<lambda_idempotency::backoff::VisibilityBackoff, ConfigError> {
    let base = settings.seconds("BACKOFF_BASE_SECONDS", Duration::from_secs(2))?;
    let max = settings.seconds("BACKOFF_MAX_SECONDS", Duration::from_secs(300))?;
    Ok(lambda_idempotency::backoff::VisibilityBackoff::new(sqs)
        .base(base)
        .max(max)
        .enabled(!base.is_zero()))
}

/// The batch processor of a consumer: the visibility backoff of [`backoff`], the attempts of
/// [`max_attempts`] when set, and the dead-letter queue `DEAD_LETTER_QUEUE_URL` for permanent
/// failures and used-up attempts, when set.
pub fn consumer_processor(
    sqs: aws_sdk_sqs::Client,
    settings: &impl Settings,
) -> Result<lambda_idempotency::batch::BatchProcessor, ConfigError> {
    let mut processor = lambda_idempotency::batch::BatchProcessor::new()
        .with_backoff(backoff(sqs.clone(), settings)?);
    if let Some(n) = max_attempts(settings)? {
        processor = processor.max_attempts(n);
    }
    if let Some(url) = settings.get("DEAD_LETTER_QUEUE_URL") {
        processor =
            processor.with_dead_letter(lambda_idempotency::dead_letter::DeadLetter::new(sqs, url));
    }
    Ok(processor)
}

/// `MAX_ATTEMPTS`: attempts of a message before the consumer dead-letters it (at least 1); `None`
/// when unset (the batch processor's default).
///
/// ```
/// use std::collections::HashMap;
///
/// let settings = |v: &str| HashMap::from([("MAX_ATTEMPTS".to_owned(), v.to_owned())]);
/// assert_eq!(payments_model::max_attempts(&settings("5")), Ok(Some(5)));
/// assert_eq!(payments_model::max_attempts(&settings("")), Ok(None));
/// assert!(payments_model::max_attempts(&settings("0")).is_err());
/// assert_eq!(payments_model::event_source_batch_size(&settings("5")), Ok(10));
/// ```
pub fn max_attempts(settings: &impl Settings) -> Result<Option<u32>, ConfigError> {
    positive(settings, "MAX_ATTEMPTS")
}

/// `EVENT_SOURCE_BATCH_SIZE`: the `BatchSize` of the consumer's event source (default 10, Lambda's).
pub fn event_source_batch_size(settings: &impl Settings) -> Result<u32, ConfigError> {
    Ok(positive(settings, "EVENT_SOURCE_BATCH_SIZE")?.unwrap_or(10))
}

fn positive(settings: &impl Settings, name: &'static str) -> Result<Option<u32>, ConfigError> {
    settings
        .get(name)
        .map(|v| match v.trim().parse::<u32>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(ConfigError::Invalid {
                name,
                reason: format!("`{v}` is not a whole number of at least 1"),
            }),
        })
        .transpose()
}

/// The cold-start checks of a consumer's queue ([`warn_if_unsafe`]): reads the `RedrivePolicy`,
/// `MessageRetentionPeriod` and `MaximumMessageSize` of `SOURCE_QUEUE_URL`, and the retention and
/// size of the dead-letter queue its policy names, and logs a warning with the values and the
/// fix when
///
/// - its `maxReceiveCount` is below [`min_max_receive_count`] of `EVENT_SOURCE_BATCH_SIZE` and
///   `MAX_ATTEMPTS` (then SQS could dead-letter messages that never failed, blocked behind a
///   failing one of their FIFO group);
/// - the dead-letter queue's `MaximumMessageSize` is smaller than the queue's (a large message
///   cannot be moved there whole);
/// - `idempotency_ttl`, the consumer's configured expiry (`IDEMPOTENCY_TTL_SECONDS`), is shorter
///   than the queue's retention plus the dead-letter queue's (a copy redriven late would run
///   again).
///
/// `None` when `SOURCE_QUEUE_URL` or `MAX_ATTEMPTS` is unset. Never fails the cold start on what
/// it finds: only an invalid setting is an error.
///
/// [`min_max_receive_count`]: lambda_idempotency::redrive_policy::min_max_receive_count
/// [`warn_if_unsafe`]: lambda_idempotency::redrive_policy::warn_if_unsafe
pub async fn check_redrive_backstop(
    sqs: &aws_sdk_sqs::Client,
    settings: &impl Settings,
    idempotency_ttl: Duration,
) -> Result<Option<lambda_idempotency::redrive_policy::QueueCheck>, ConfigError> {
    use lambda_idempotency::redrive_policy::{QueueRef, warn_if_unsafe};
    let batch_size = event_source_batch_size(settings)?;
    let (Some(url), Some(attempts)) = (settings.get("SOURCE_QUEUE_URL"), max_attempts(settings)?)
    else {
        return Ok(None);
    };
    Ok(Some(
        warn_if_unsafe(
            sqs,
            &QueueRef::Url(url),
            batch_size,
            attempts,
            idempotency_ttl,
        )
        .await,
    ))
}

/// Loads the AWS SDK configuration (region, credentials, and `AWS_ENDPOINT_URL` for a local
/// endpoint).
pub async fn sdk_config() -> aws_config::SdkConfig {
    aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await
}
