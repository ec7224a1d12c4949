//! [`ConsumerConfig`]: a consumer's settings, from the environment, with the safe defaults.

use std::num::NonZeroUsize;
use std::time::Duration;

use crate::idempotency::DEFAULT_EXPIRY;

/// The attempt budget of a [`Consumer`](super::Consumer) unless `MAX_ATTEMPTS` or code says
/// otherwise: a message whose handler failed 5 times goes to the dead-letter queue.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;

/// The first retry's visibility delay unless `BACKOFF_BASE_SECONDS` says otherwise.
pub const DEFAULT_BACKOFF_BASE: Duration = Duration::from_secs(2);

/// The longest visibility delay unless `BACKOFF_MAX_SECONDS` says otherwise.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(300);

/// How long the warm-container cache of `IDEMPOTENCY_LOCAL_CACHE` keeps a completed key (never
/// past its record's expiry): a bound on how long a record deleted elsewhere still counts here.
pub(super) const LOCAL_CACHE_TTL: Duration = Duration::from_secs(15 * 60);

/// Lambda's default `BatchSize` for an SQS event source: what the redrive check assumes unless
/// `EVENT_SOURCE_BATCH_SIZE` says otherwise.
pub const DEFAULT_BATCH_SIZE: u32 = 10;

/// A setting that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A required variable is not set (or is empty).
    #[error("the environment variable {0} is not set")]
    Missing(&'static str),
    /// A variable's value cannot be used.
    #[error("the environment variable {name} is invalid: {reason}")]
    Invalid {
        /// The variable.
        name: &'static str,
        /// Why, with the value.
        reason: String,
    },
}

/// A consumer's settings. [`from_env`](Self::from_env) reads them from the function's
/// environment, as AWS Lambda Powertools does; code overrides any of them, on this struct or on
/// the [`ConsumerBuilder`](super::ConsumerBuilder). An empty variable counts as unset.
///
/// | variable | setting | default |
/// | --- | --- | --- |
/// | `IDEMPOTENCY_TABLE` | the DynamoDB table of the idempotency records (string key `id`, TTL on `expiration`) | required by [`Consumer::from_env`](super::Consumer::from_env) |
/// | `IDEMPOTENCY_KEY` | a JSON pointer to the key in the message body (`/orderId`) | the SQS message id |
/// | `IDEMPOTENCY_KEY_PREFIX` | the prefix of every stored key | the function's name |
/// | `IDEMPOTENCY_TTL_SECONDS` | how long a completed record blocks duplicates; `0` is refused, and less than the default is a warning at init (and at cold start against the queues' actual retention) | 1,555,200 (18 days: a queue's 4 days of retention and its dead-letter queue's 14) |
/// | `MAX_ATTEMPTS` | the attempt budget: failures before the dead-letter queue; `0` turns it off | 5 |
/// | `BACKOFF_BASE_SECONDS` | the first retry's delay, doubling: the visibility delay on SQS, the wait within the invocation on a stream ([`retry_in_invocation`](crate::batch::BatchProcessor::retry_in_invocation)); `0` turns backoff off (a stream then reports a failure at once; on SQS an outage's receives then come every visibility timeout, and the cold-start check warns that the queue's `maxReceiveCount` cannot cover an outage as long as its retention) | 2 |
/// | `BACKOFF_MAX_SECONDS` | the longest delay of the handler's own failures (an outage's doubles past it up to 11 hours) | 300 |
/// | `DEAD_LETTER_QUEUE_URL` | where permanent failures and used-up budgets go, with their reason | none: a warning at init; such a record stays on the queue until its redrive policy or retention ends it, without its reason |
/// | `SOURCE_QUEUE_URL` | the queue the cold-start check reads | the first event's queue |
/// | `EVENT_SOURCE_BATCH_SIZE` | the event source's `BatchSize`, for the redrive check | 10 |
/// | `IDEMPOTENCY_LOCAL_CACHE` | the warm-container cache ([`crate::cache`]): how many completed keys it keeps, each at most 15 minutes and never past its record's expiry, so that a duplicate seen again by the same execution environment costs no request; `0` turns it off | off |
///
/// ```
/// use lambda_idempotency::consumer::ConsumerConfig;
/// use std::collections::HashMap;
///
/// let env = HashMap::from([("IDEMPOTENCY_TABLE", "idempotency"), ("MAX_ATTEMPTS", "0")]);
/// let config = ConsumerConfig::from_lookup(|name| env.get(name).map(|v| v.to_string())).unwrap();
/// assert_eq!(config.table.as_deref(), Some("idempotency"));
/// assert_eq!(config.max_attempts, None, "0 turns the budget off");
/// assert_eq!(config.backoff_base.as_secs(), 2, "backoff is on by default");
///
/// let bad = HashMap::from([("MAX_ATTEMPTS", "five")]);
/// let error = ConsumerConfig::from_lookup(|name| bad.get(name).map(|v| v.to_string())).unwrap_err();
/// assert_eq!(error.to_string(), "the environment variable MAX_ATTEMPTS is invalid: `five` is not a whole number");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumerConfig {
    /// `IDEMPOTENCY_TABLE`.
    pub table: Option<String>,
    /// `IDEMPOTENCY_KEY`: a JSON pointer into the body; `None` keys on the message id.
    pub key: Option<String>,
    /// `IDEMPOTENCY_KEY_PREFIX`; `None` keeps the engine's default (the function's name).
    pub key_prefix: Option<String>,
    /// `IDEMPOTENCY_TTL_SECONDS`.
    pub expiry: Duration,
    /// `MAX_ATTEMPTS`; `None` when turned off.
    pub max_attempts: Option<u32>,
    /// `BACKOFF_BASE_SECONDS`; zero when turned off.
    pub backoff_base: Duration,
    /// `BACKOFF_MAX_SECONDS`.
    pub backoff_max: Duration,
    /// `DEAD_LETTER_QUEUE_URL`.
    pub dead_letter_queue_url: Option<String>,
    /// `SOURCE_QUEUE_URL`.
    pub source_queue_url: Option<String>,
    /// `EVENT_SOURCE_BATCH_SIZE`.
    pub batch_size: u32,
    /// `IDEMPOTENCY_LOCAL_CACHE`: the most keys of the warm-container cache; `None` when off.
    pub local_cache: Option<NonZeroUsize>,
}

impl Default for ConsumerConfig {
    /// The defaults of the table above, with no table.
    fn default() -> Self {
        Self {
            table: None,
            key: None,
            key_prefix: None,
            expiry: DEFAULT_EXPIRY,
            max_attempts: Some(DEFAULT_MAX_ATTEMPTS),
            backoff_base: DEFAULT_BACKOFF_BASE,
            backoff_max: DEFAULT_BACKOFF_MAX,
            dead_letter_queue_url: None,
            source_queue_url: None,
            batch_size: DEFAULT_BATCH_SIZE,
            local_cache: None,
        }
    }
}

impl ConsumerConfig {
    /// The settings of the process environment (see the table above).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// The settings `lookup` gives for each variable name (see the table above): for tests, or
    /// settings kept elsewhere.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let number = |name: &'static str| -> Result<Option<u64>, ConfigError> {
            get(name)
                .map(|v| {
                    v.trim().parse::<u64>().map_err(|_| ConfigError::Invalid {
                        name,
                        reason: format!("`{v}` is not a whole number"),
                    })
                })
                .transpose()
        };
        let seconds = |name, default| Ok(number(name)?.map_or(default, Duration::from_secs));
        let defaults = Self::default();
        let key = get("IDEMPOTENCY_KEY");
        if let Some(pointer) = &key
            && !pointer.starts_with('/')
        {
            return Err(ConfigError::Invalid {
                name: "IDEMPOTENCY_KEY",
                reason: format!("`{pointer}` is not a JSON pointer (one starts with `/`)"),
            });
        }
        let key_prefix = get("IDEMPOTENCY_KEY_PREFIX");
        if let Some(prefix) = &key_prefix {
            crate::key::validate_prefix(prefix).map_err(|e| ConfigError::Invalid {
                name: "IDEMPOTENCY_KEY_PREFIX",
                reason: e.to_string(),
            })?;
        }
        let max_attempts = match number("MAX_ATTEMPTS")? {
            None => defaults.max_attempts,
            Some(0) => None,
            Some(n) => Some(u32::try_from(n).map_err(|_| ConfigError::Invalid {
                name: "MAX_ATTEMPTS",
                reason: format!("{n} is too large"),
            })?),
        };
        let batch_size = match number("EVENT_SOURCE_BATCH_SIZE")? {
            None => defaults.batch_size,
            Some(n @ 1..=10_000) => n as u32,
            Some(n) => {
                return Err(ConfigError::Invalid {
                    name: "EVENT_SOURCE_BATCH_SIZE",
                    reason: format!("{n} is not a batch size from 1 to 10000"),
                });
            }
        };
        let local_cache = number("IDEMPOTENCY_LOCAL_CACHE")?
            .map(|n| {
                usize::try_from(n).map_err(|_| ConfigError::Invalid {
                    name: "IDEMPOTENCY_LOCAL_CACHE",
                    reason: format!("{n} is too large"),
                })
            })
            .transpose()?
            .and_then(NonZeroUsize::new);
        let expiry = seconds("IDEMPOTENCY_TTL_SECONDS", defaults.expiry)?;
        if expiry.is_zero() {
            return Err(ConfigError::Invalid {
                name: "IDEMPOTENCY_TTL_SECONDS",
                reason: "0 would expire every record at once, so that every redelivery runs \
                         again; the expiry must outlive the queue's retention plus its \
                         dead-letter queue's (the default, 1555200 s, is 4 days plus 14)"
                    .into(),
            });
        }
        Ok(Self {
            table: get("IDEMPOTENCY_TABLE"),
            key,
            key_prefix,
            expiry,
            max_attempts,
            backoff_base: seconds("BACKOFF_BASE_SECONDS", defaults.backoff_base)?,
            backoff_max: seconds("BACKOFF_MAX_SECONDS", defaults.backoff_max)?,
            dead_letter_queue_url: get("DEAD_LETTER_QUEUE_URL"),
            source_queue_url: get("SOURCE_QUEUE_URL"),
            batch_size,
            local_cache,
        })
    }
}
