//! The payments pipeline's functions' configuration: settings from the environment, the SDK's
//! set-up, the consumers' batch processor, warm-container cache and cold-start checks, and the
//! failure switch used by tests and the demo. The messages they exchange are `payments-model`.

// The batch processor fails a panicking record alone only when panics unwind. Built with
// `panic = "abort"` (what `cargo lambda build --release`, and so `sam build`, sets when the
// release profile leaves it out), a handler's panic would end the invocation and bring back every
// record of its batch. Every payments function depends on this crate.
#[cfg(panic = "abort")]
compile_error!(
    "the payments functions need panic = \"unwind\": see [profile.release] in the workspace Cargo.toml"
);

use std::collections::HashMap;
use std::time::Duration;

pub mod failure_switch;

pub use failure_switch::{FailureSwitch, Fault};

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
    let (base, max) = backoff_settings(settings)?;
    Ok(lambda_idempotency::backoff::VisibilityBackoff::new(sqs)
        .base(base)
        .max(max)
        .enabled(!base.is_zero()))
}

/// The schedule of [`backoff`]; `None` when it is off.
pub fn backoff_schedule(
    settings: &impl Settings,
) -> Result<Option<lambda_idempotency::backoff::RetrySchedule>, ConfigError> {
    let (base, max) = backoff_settings(settings)?;
    Ok((!base.is_zero()).then(|| lambda_idempotency::backoff::RetrySchedule::new(base, max)))
}

/// `BACKOFF_BASE_SECONDS` and `BACKOFF_MAX_SECONDS`, with their defaults.
fn backoff_settings(settings: &impl Settings) -> Result<(Duration, Duration), ConfigError> {
    Ok((
        settings.seconds("BACKOFF_BASE_SECONDS", Duration::from_secs(2))?,
        settings.seconds("BACKOFF_MAX_SECONDS", Duration::from_secs(300))?,
    ))
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
/// assert_eq!(payments_config::max_attempts(&settings("5")), Ok(Some(5)));
/// assert_eq!(payments_config::max_attempts(&settings("")), Ok(None));
/// assert!(payments_config::max_attempts(&settings("0")).is_err());
/// assert_eq!(payments_config::event_source_batch_size(&settings("5")), Ok(10));
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

/// The cold-start checks of a function with an idempotency table, started in the background
/// at once ([`ColdStartChecks`]): the table of `backend` (an error names the table and what does
/// not fit; each invocation awaits it until it passes, so that nothing runs against a table that
/// cannot hold its record, and nothing is dead-lettered for it), and, with `sqs`, the consumer's
/// queue ([`warn_if_unsafe`]): the `RedrivePolicy`, `MessageRetentionPeriod` and
/// `MaximumMessageSize` of `SOURCE_QUEUE_URL` (else the first event's queue) and of the
/// dead-letter queue its policy names, logging a warning with the values and the fix when
///
/// - its `maxReceiveCount` is below [`min_max_receive_count`] of `EVENT_SOURCE_BATCH_SIZE` and
///   `MAX_ATTEMPTS` (then SQS could dead-letter messages that never failed, blocked behind a
///   failing one of their FIFO group), or below that plus the receives of an outage as long as
///   the queue's retention under the backoff of [`backoff_schedule`] ([`outage_cover`]);
/// - the dead-letter queue's `MaximumMessageSize` is smaller than the queue's (a large message
///   cannot be moved there whole);
/// - `idempotency_ttl`, the consumer's configured expiry (`IDEMPOTENCY_TTL_SECONDS`), is shorter
///   than the queue's retention plus the dead-letter queue's (a copy redriven late would run
///   again).
///
/// Nothing waits for them at init: the init costs what the same function's does without them.
/// Only an invalid setting is an error here.
///
/// [`ColdStartChecks`]: lambda_idempotency::consumer::ColdStartChecks
/// [`min_max_receive_count`]: lambda_idempotency::redrive_policy::min_max_receive_count
/// [`outage_cover`]: lambda_idempotency::redrive_policy::outage_cover
/// [`warn_if_unsafe`]: lambda_idempotency::redrive_policy::warn_if_unsafe
pub fn cold_start_checks(
    backend: &lambda_idempotency::store::DynamoDbBackend,
    sqs: Option<aws_sdk_sqs::Client>,
    settings: &impl Settings,
    idempotency_ttl: Duration,
) -> Result<lambda_idempotency::consumer::ColdStartChecks, ConfigError> {
    use lambda_idempotency::consumer::{ColdStartChecks, QueueToCheck};
    use lambda_idempotency::redrive_policy::QueueRef;
    let queue = match sqs {
        Some(sqs) => Some(QueueToCheck {
            sqs,
            source: settings.get("SOURCE_QUEUE_URL").map(QueueRef::Url),
            batch_size: event_source_batch_size(settings)?,
            max_attempts: max_attempts(settings)?,
            expiry: idempotency_ttl,
            backoff: backoff_schedule(settings)?,
        }),
        None => None,
    };
    Ok(ColdStartChecks::start(Some(backend), queue))
}

/// Runs a consumer's runtime loop ([`lambda_idempotency::runtime::run`]: several batches at
/// once on Lambda Managed Instances, one after another elsewhere): each batch first waits for
/// `checks` to have passed (the table's check, awaited at the first batch, and again after a
/// failure, which fails the batch whole), then goes to `handle`, with `app`.
pub async fn run_consumer<A, F, Fut>(
    checks: lambda_idempotency::consumer::ColdStartChecks,
    app: A,
    handle: F,
) -> Result<(), lambda_runtime::Error>
where
    A: Send + Sync + 'static,
    F: Fn(&'static A, lambda_runtime::LambdaEvent<aws_lambda_events::sqs::SqsEvent>) -> Fut
        + Clone
        + Send
        + 'static,
    Fut: std::future::Future<
            Output = Result<aws_lambda_events::sqs::SqsBatchResponse, lambda_runtime::Error>,
        > + Send
        + 'static,
{
    lambda_idempotency::runtime::run(
        (checks, app),
        move |(checks, app),
              event: lambda_runtime::LambdaEvent<aws_lambda_events::sqs::SqsEvent>| {
            let handle = handle.clone();
            async move {
                let queue = event
                    .payload
                    .records
                    .first()
                    .and_then(|r| r.event_source_arn.clone());
                checks.ready(queue.as_deref()).await?;
                // Boxed: the handler's future is deep, and this one would nest it further.
                Box::pin(handle(app, event)).await
            }
        },
    )
    .await
}

/// Each AWS SDK operation's time limit, its retries included: below every function's `Timeout`
/// in template.yaml (payments-api's 20 s is the shortest), so that a call that hangs fails its
/// request or record with an error the function handles, never the whole invocation.
pub const SDK_OPERATION_TIMEOUT: Duration = Duration::from_secs(6);

/// Each attempt's time limit within [`SDK_OPERATION_TIMEOUT`]: a stalled attempt is retried.
pub const SDK_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(3);

/// The SDK timeouts of every function's clients ([`sdk_config`]).
pub fn sdk_timeouts() -> aws_config::timeout::TimeoutConfig {
    aws_config::timeout::TimeoutConfig::builder()
        .operation_timeout(SDK_OPERATION_TIMEOUT)
        .operation_attempt_timeout(SDK_ATTEMPT_TIMEOUT)
        .build()
}

/// A function's DynamoDB client: `sdk`'s, each request with the X-Ray trace id of the
/// invocation that sends it ([`TraceHeader`](lambda_idempotency::runtime::TraceHeader)), even
/// when several invocations share the process (Lambda Managed Instances).
pub fn dynamodb(sdk: &aws_config::SdkConfig) -> aws_sdk_dynamodb::Client {
    let config = aws_sdk_dynamodb::config::Builder::from(sdk)
        .interceptor(lambda_idempotency::runtime::TraceHeader)
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

/// A function's SQS client, as [`dynamodb`]'s.
pub fn sqs(sdk: &aws_config::SdkConfig) -> aws_sdk_sqs::Client {
    let config = aws_sdk_sqs::config::Builder::from(sdk)
        .interceptor(lambda_idempotency::runtime::TraceHeader)
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}

/// Loads the AWS SDK configuration (region, credentials, and `AWS_ENDPOINT_URL` for a local
/// endpoint), with [`sdk_timeouts`].
pub async fn sdk_config() -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .timeout_config(sdk_timeouts())
        .load()
        .await
}
