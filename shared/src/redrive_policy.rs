//! The queue's redrive policy as a backstop: is `maxReceiveCount` high enough?
//!
//! The batch processor counts attempts in the idempotency store and sends a message to the
//! dead-letter queue itself once its attempts are used up. SQS counts something else: receives.
//! On a FIFO queue, a message behind a failing one of its group is received and reported failed
//! without being attempted, and SQS counts that receive too. So the queue's `maxReceiveCount`
//! must stay out of reach of a message that still has attempts left, or SQS moves innocent
//! messages to the dead-letter queue together with the one that fails.
//!
//! With batches of `B` records and a budget of `N` attempts, a message is received at most
//! `(B - 1) * (N - 1) + N` times: its own `N` attempts, plus `N - 1` blocked receives behind each
//! of the at most `B - 1` messages ahead of it in its batches (each of them is dead-lettered on
//! its `N`-th failed attempt, in the same loop, and no longer blocks). [`min_max_receive_count`]
//! is that bound; [`check`] compares a queue's policy with it and [`warn_if_too_low`] logs what to
//! fix, for a consumer's cold start.
//!
//! A failure that is not an attempt of the handler's own (the store or a follow-up service
//! unreachable: an outage) is not in that bound, because it has no end the consumer can count.
//! The [visibility backoff](crate::backoff) delays such a record, and the records held behind it,
//! by its receive count instead, doubling up to 11 hours (SQS refuses a visibility ending more
//! than 12 hours after the receive): with the default 2 s base, an outage of 4 days costs a
//! message at most 23 receives, one of 14 days (SQS's longest retention) 44. Those come on top
//! of the attempt bound's (a message may have used its attempts, or waited behind others', before
//! the outage): the [outage cover](outage_cover) is their sum, and a `maxReceiveCount` at least
//! that moves nothing during an outage as long as the queue's retention. Without the backoff
//! (`BACKOFF_BASE_SECONDS` `0`) an outage's receives come a visibility timeout apart (480 a day
//! at 180 s), which no `maxReceiveCount` of a queue keeping its messages days can cover.
//!
//! [`check_queue`] (and [`warn_if_unsafe`], which logs what it finds) does the same and three
//! more checks, with one `GetQueueAttributes` of the queue (`RedrivePolicy`,
//! `MessageRetentionPeriod`, `MaximumMessageSize`, `VisibilityTimeout`) and one of the
//! dead-letter queue its policy names (`MessageRetentionPeriod`, `MaximumMessageSize`):
//!
//! - the redrive policy's `maxReceiveCount` must cover an outage as long as the queue's
//!   retention, under the consumer's backoff, on top of the attempt bound
//!   ([`Finding::OutageCanMove`]);
//! - the dead-letter queue must take messages as large as its source queue does: if its
//!   `MaximumMessageSize` is smaller, a large message cannot be moved there whole
//!   ([`Finding::DeadLetterTakesSmallerMessages`]; the consumer's own dead-lettering then sends a
//!   reduced copy, see [`dead_letter`](crate::dead_letter), and cannot move a body over the limit
//!   at all);
//! - an idempotency record must outlive every copy of its message, or a copy redriven from the
//!   dead-letter queue runs again: the engine's expiry must be at least the queue's
//!   `MessageRetentionPeriod` plus the dead-letter queue's ([`Finding::ExpiryTooShort`]).
//!
//! What they find is logged and returned, never an error: a cold start does not fail on it.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::QueueAttributeName;

use crate::backoff::RetrySchedule;

mod outage;

pub use outage::{OutageCover, outage_cover, outage_receives};

/// The smallest safe `maxReceiveCount` for batches of `batch_size` records and `max_attempts`
/// attempts per message: `(batch_size - 1) * (max_attempts - 1) + max_attempts`.
///
/// ```
/// use lambda_idempotency::redrive_policy::min_max_receive_count;
///
/// // Lambda's default batch of 10 and 5 attempts: 9 * 4 + 5.
/// assert_eq!(min_max_receive_count(10, 5), 41);
/// // One attempt: a failure is dead-lettered at once and never blocks a follower.
/// assert_eq!(min_max_receive_count(10, 1), 1);
/// // Batches of one: no follower is ever received with the message it waits for.
/// assert_eq!(min_max_receive_count(1, 5), 5);
/// ```
pub fn min_max_receive_count(batch_size: u32, max_attempts: u32) -> u32 {
    let (b, n) = (batch_size.max(1), max_attempts.max(1));
    (b - 1).saturating_mul(n - 1).saturating_add(n)
}

/// Which queue: by URL, or by ARN (an event source ARN; its URL is looked up with GetQueueUrl).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueRef {
    /// `https://sqs.REGION.amazonaws.com/ACCOUNT/NAME`.
    Url(String),
    /// `arn:aws:sqs:REGION:ACCOUNT:NAME`.
    Arn(String),
}

impl std::fmt::Display for QueueRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QueueRef::Url(s) | QueueRef::Arn(s) => f.write_str(s),
        }
    }
}

/// What [`check`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedriveCheck {
    /// The policy's `maxReceiveCount` is at least the required one.
    Ok {
        /// The policy's `maxReceiveCount`.
        max_receive_count: u32,
        /// [`min_max_receive_count`] of the batch size and attempts.
        required: u32,
    },
    /// SQS can dead-letter a message that still has attempts left.
    TooLow {
        /// The policy's `maxReceiveCount`.
        max_receive_count: u32,
        /// [`min_max_receive_count`] of the batch size and attempts.
        required: u32,
    },
    /// The queue has no redrive policy: nothing moves a message the consumer cannot process to
    /// a dead-letter queue except the consumer itself.
    NoRedrivePolicy,
    /// The policy could not be read (no permission, no such queue, not JSON).
    Unreadable(String),
}

/// How long [`check`] may take: a cold start never waits longer on an unreachable endpoint.
pub(crate) const CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// Reads the `RedrivePolicy` of `queue` and compares its `maxReceiveCount` with
/// [`min_max_receive_count`]`(batch_size, max_attempts)`. Needs `sqs:GetQueueAttributes` (and
/// `sqs:GetQueueUrl` for an ARN) on the queue. Gives up after 3 seconds
/// ([`RedriveCheck::Unreadable`]).
pub async fn check(
    sqs: &aws_sdk_sqs::Client,
    queue: &QueueRef,
    batch_size: u32,
    max_attempts: u32,
) -> RedriveCheck {
    tokio::time::timeout(CHECK_TIMEOUT, read(sqs, queue, batch_size, max_attempts))
        .await
        .unwrap_or_else(|_| {
            RedriveCheck::Unreadable(format!("no answer from SQS within {CHECK_TIMEOUT:?}"))
        })
}

async fn read(
    sqs: &aws_sdk_sqs::Client,
    queue: &QueueRef,
    batch_size: u32,
    max_attempts: u32,
) -> RedriveCheck {
    let url = match queue_url(sqs, queue).await {
        Ok(url) => url,
        Err(e) => return RedriveCheck::Unreadable(e),
    };
    match attributes(sqs, &url, &[QueueAttributeName::RedrivePolicy]).await {
        Ok(attributes) => backstop(&attributes, batch_size, max_attempts),
        Err(e) => RedriveCheck::Unreadable(e),
    }
}

/// The queue's attributes `names`, by one `GetQueueAttributes`.
async fn attributes(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    names: &[QueueAttributeName],
) -> Result<HashMap<QueueAttributeName, String>, String> {
    sqs.get_queue_attributes()
        .queue_url(url)
        .set_attribute_names(Some(names.to_vec()))
        .send()
        .await
        .map(|out| out.attributes.unwrap_or_default())
        .map_err(|e| format!("GetQueueAttributes {url}: {}", DisplayErrorContext(e)))
}

/// The backstop check of a queue's attributes (its `RedrivePolicy`).
fn backstop(
    attributes: &HashMap<QueueAttributeName, String>,
    batch_size: u32,
    max_attempts: u32,
) -> RedriveCheck {
    let required = min_max_receive_count(batch_size, max_attempts);
    let Some(policy) = attributes
        .get(&QueueAttributeName::RedrivePolicy)
        .filter(|p| !p.is_empty())
    else {
        return RedriveCheck::NoRedrivePolicy;
    };
    match max_receive_count(policy) {
        Ok(max_receive_count) if max_receive_count >= required => RedriveCheck::Ok {
            max_receive_count,
            required,
        },
        Ok(max_receive_count) => RedriveCheck::TooLow {
            max_receive_count,
            required,
        },
        Err(e) => RedriveCheck::Unreadable(e),
    }
}

/// [`check`], and a log line for the outcome: a `warn` naming the queue, the values and the fix
/// when the backstop is too low or unreadable, an `info` otherwise. For a consumer's cold start.
pub async fn warn_if_too_low(
    sqs: &aws_sdk_sqs::Client,
    queue: &QueueRef,
    batch_size: u32,
    max_attempts: u32,
) -> RedriveCheck {
    let result = check(sqs, queue, batch_size, max_attempts).await;
    log_backstop(queue, batch_size, max_attempts, &result);
    result
}

fn log_backstop(queue: &QueueRef, batch_size: u32, max_attempts: u32, result: &RedriveCheck) {
    let queue = queue.to_string();
    match result {
        RedriveCheck::Ok {
            max_receive_count,
            required,
        } => tracing::info!(
            queue,
            max_receive_count,
            required,
            batch_size,
            max_attempts,
            "redrive backstop: maxReceiveCount is out of reach of messages with attempts left"
        ),
        RedriveCheck::TooLow {
            max_receive_count,
            required,
        } => tracing::warn!(
            queue,
            max_receive_count,
            required,
            batch_size,
            max_attempts,
            "redrive backstop too low: queue {queue} has maxReceiveCount {max_receive_count}, but \
             with batches of {batch_size} and {max_attempts} attempts a message blocked behind \
             others of its FIFO group can be received {required} times before its attempts are \
             used up, so SQS may move messages that never failed to the dead-letter queue. Fix: \
             set the queue's RedrivePolicy maxReceiveCount to at least {required} \
             ((batch size - 1) x (attempts - 1) + attempts), or lower the batch size or the attempts"
        ),
        RedriveCheck::NoRedrivePolicy => tracing::info!(
            queue,
            "no redrive policy: only the consumer moves messages to a dead-letter queue"
        ),
        RedriveCheck::Unreadable(error) => tracing::warn!(
            queue,
            error,
            "could not read the queue's redrive policy to check its maxReceiveCount (needs \
             sqs:GetQueueAttributes on the queue); with batches of {batch_size} and \
             {max_attempts} attempts it must be at least {}",
            min_max_receive_count(batch_size, max_attempts)
        ),
    }
}

/// A queue's `MessageRetentionPeriod` and `MaximumMessageSize`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLimits {
    /// `MessageRetentionPeriod`: how long SQS keeps a message.
    pub retention: Duration,
    /// `MaximumMessageSize`, in bytes.
    pub max_message_size: u32,
}

impl QueueLimits {
    fn read(attributes: &HashMap<QueueAttributeName, String>) -> Result<Self, String> {
        let number = |name: QueueAttributeName| {
            let value = attributes
                .get(&name)
                .ok_or_else(|| format!("no {} in the answer", name.as_str()))?;
            value
                .trim()
                .parse::<u32>()
                .map_err(|e| format!("{} is `{value}`: {e}", name.as_str()))
        };
        Ok(Self {
            retention: Duration::from_secs(
                number(QueueAttributeName::MessageRetentionPeriod)?.into(),
            ),
            max_message_size: number(QueueAttributeName::MaximumMessageSize)?,
        })
    }
}

/// What [`check_queue`] found: the redrive backstop as [`check`] answers it, the limits it read,
/// and what needs fixing beyond the backstop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueCheck {
    /// The redrive backstop, as [`check`] answers.
    pub redrive: RedriveCheck,
    /// The queue's retention and largest message, when they could be read.
    pub source: Option<QueueLimits>,
    /// The dead-letter queue its redrive policy names (`deadLetterTargetArn`), if any.
    pub dead_letter_arn: Option<String>,
    /// The dead-letter queue's retention and largest message, when they could be read.
    pub dead_letter: Option<QueueLimits>,
    /// What needs fixing besides the backstop; empty when nothing does.
    pub findings: Vec<Finding>,
}

/// Something [`check_queue`] found to fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// The redrive policy's `maxReceiveCount` does not cover an outage as long as the queue's
    /// retention on top of the attempt bound: SQS can move messages that are not at fault.
    OutageCanMove(OutageCover),
    /// The dead-letter queue takes smaller messages than its source queue: a large message
    /// cannot be moved there whole.
    DeadLetterTakesSmallerMessages {
        /// The source queue's `MaximumMessageSize`, bytes.
        source: u32,
        /// The dead-letter queue's `MaximumMessageSize`, bytes.
        dead_letter: u32,
    },
    /// The idempotency records expire before every copy of their message is gone: a copy
    /// redriven late from the dead-letter queue finds no record and runs again.
    ExpiryTooShort {
        /// The engine's expiry.
        expiry: Duration,
        /// The source queue's `MessageRetentionPeriod`.
        source_retention: Duration,
        /// The dead-letter queue's `MessageRetentionPeriod` (zero without a dead-letter queue).
        dead_letter_retention: Duration,
        /// Their sum: the shortest safe expiry.
        required: Duration,
    },
    /// A queue's `MaximumMessageSize`, `MessageRetentionPeriod` or `VisibilityTimeout` could not
    /// be read (the dead-letter queue's need `sqs:GetQueueUrl` and `sqs:GetQueueAttributes` on
    /// it): what depends on them was not checked.
    Unreadable(String),
}

/// [`check`], and three more checks of the queue and of the dead-letter queue its redrive policy
/// names (see the module docs): the policy's `maxReceiveCount` covers an outage as long as the
/// queue's `MessageRetentionPeriod` under `backoff` (`None`: the backoff is off) on top of the
/// attempt bound ([`outage_cover`]), the dead-letter queue's `MaximumMessageSize` is at least the
/// queue's, and `expiry`, the idempotency engine's (the records' lifetime), is at least the
/// queue's `MessageRetentionPeriod` plus the dead-letter queue's (the queue's alone when it has no
/// redrive policy). Two `GetQueueAttributes` (and a `GetQueueUrl` for the dead-letter queue, and
/// for `queue` when given by ARN), all within 3 seconds.
pub async fn check_queue(
    sqs: &aws_sdk_sqs::Client,
    queue: &QueueRef,
    batch_size: u32,
    max_attempts: u32,
    expiry: Duration,
    backoff: Option<RetrySchedule>,
) -> QueueCheck {
    let read = read_all(sqs, queue, batch_size, max_attempts, expiry, backoff);
    tokio::time::timeout(CHECK_TIMEOUT, read)
        .await
        .unwrap_or_else(|_| unreadable(format!("no answer from SQS within {CHECK_TIMEOUT:?}")))
}

fn unreadable(error: String) -> QueueCheck {
    QueueCheck {
        redrive: RedriveCheck::Unreadable(error),
        source: None,
        dead_letter_arn: None,
        dead_letter: None,
        findings: Vec::new(),
    }
}

async fn read_all(
    sqs: &aws_sdk_sqs::Client,
    queue: &QueueRef,
    batch_size: u32,
    max_attempts: u32,
    expiry: Duration,
    backoff: Option<RetrySchedule>,
) -> QueueCheck {
    let url = match queue_url(sqs, queue).await {
        Ok(url) => url,
        Err(e) => return unreadable(e),
    };
    let names = [
        QueueAttributeName::RedrivePolicy,
        QueueAttributeName::MessageRetentionPeriod,
        QueueAttributeName::MaximumMessageSize,
        QueueAttributeName::VisibilityTimeout,
    ];
    let source_attributes = match attributes(sqs, &url, &names).await {
        Ok(attributes) => attributes,
        Err(e) => return unreadable(e),
    };
    let mut result = QueueCheck {
        redrive: backstop(&source_attributes, batch_size, max_attempts),
        source: None,
        dead_letter_arn: None,
        dead_letter: None,
        findings: Vec::new(),
    };
    let source = match QueueLimits::read(&source_attributes) {
        Ok(limits) => limits,
        Err(e) => {
            result
                .findings
                .push(Finding::Unreadable(format!("{url}: {e}")));
            return result;
        }
    };
    result.source = Some(source);
    if let RedriveCheck::Ok {
        max_receive_count, ..
    }
    | RedriveCheck::TooLow {
        max_receive_count, ..
    } = result.redrive
    {
        let visibility_timeout = source_attributes
            .get(&QueueAttributeName::VisibilityTimeout)
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        match (visibility_timeout, backoff) {
            (None, None) => result.findings.push(Finding::Unreadable(format!(
                "{url}: no VisibilityTimeout in the answer, and the backoff is off: the \
                 redrive policy's cover of an outage was not checked"
            ))),
            (visibility_timeout, backoff) => {
                let cover = outage_cover(
                    max_receive_count,
                    batch_size,
                    max_attempts,
                    source.retention,
                    backoff,
                    visibility_timeout.unwrap_or_default(),
                );
                if !cover.holds() {
                    result.findings.push(Finding::OutageCanMove(cover));
                }
            }
        }
    }
    result.dead_letter_arn = source_attributes
        .get(&QueueAttributeName::RedrivePolicy)
        .and_then(|p| serde_json::from_str::<serde_json::Value>(p).ok())
        .and_then(|doc| doc["deadLetterTargetArn"].as_str().map(str::to_owned));
    if let Some(arn) = &result.dead_letter_arn {
        let names = [
            QueueAttributeName::MessageRetentionPeriod,
            QueueAttributeName::MaximumMessageSize,
        ];
        let read = match queue_url(sqs, &QueueRef::Arn(arn.clone())).await {
            Ok(url) => attributes(sqs, &url, &names)
                .await
                .and_then(|a| QueueLimits::read(&a)),
            Err(e) => Err(e),
        };
        match read {
            Ok(limits) => result.dead_letter = Some(limits),
            Err(e) => result.findings.push(Finding::Unreadable(e)),
        }
    }
    if let Some(dead_letter) = result.dead_letter
        && dead_letter.max_message_size < source.max_message_size
    {
        result
            .findings
            .push(Finding::DeadLetterTakesSmallerMessages {
                source: source.max_message_size,
                dead_letter: dead_letter.max_message_size,
            });
    }
    let dead_letter_retention = result.dead_letter.map_or(Duration::ZERO, |d| d.retention);
    let required = source.retention + dead_letter_retention;
    if expiry < required {
        result.findings.push(Finding::ExpiryTooShort {
            expiry,
            source_retention: source.retention,
            dead_letter_retention,
            required,
        });
    }
    result
}

/// [`check_queue`], and a log line for each outcome: the backstop's as [`warn_if_too_low`]
/// logs it, and a `warn` with the numbers and the fix for each [`Finding`]. For a consumer's cold
/// start: nothing it finds is an error.
pub async fn warn_if_unsafe(
    sqs: &aws_sdk_sqs::Client,
    queue: &QueueRef,
    batch_size: u32,
    max_attempts: u32,
    expiry: Duration,
    backoff: Option<RetrySchedule>,
) -> QueueCheck {
    let result = check_queue(sqs, queue, batch_size, max_attempts, expiry, backoff).await;
    log_backstop(queue, batch_size, max_attempts, &result.redrive);
    let queue = queue.to_string();
    let dead_letter_queue = result.dead_letter_arn.as_deref().unwrap_or("none");
    for finding in &result.findings {
        match finding {
            Finding::OutageCanMove(cover) => tracing::warn!(
                queue,
                dead_letter_queue,
                max_receive_count = cover.max_receive_count,
                attempt_bound = cover.attempt_bound,
                outage_receives = cover.outage_receives,
                required = cover.required,
                retention_seconds = cover.retention.as_secs(),
                longest_outage_seconds = cover.longest_outage.as_secs(),
                backoff_base_seconds = cover
                    .backoff
                    .map_or(0, |b| b.delay_not_counted(1).as_secs()),
                "redrive backstop too low for an outage: queue {queue} (batches of {batch_size}, \
                 {max_attempts} attempts): {cover}"
            ),
            Finding::DeadLetterTakesSmallerMessages {
                source,
                dead_letter,
            } => tracing::warn!(
                queue,
                dead_letter_queue,
                source_max_message_size = source,
                dead_letter_max_message_size = dead_letter,
                "dead-letter queue takes smaller messages: queue {queue} takes messages of up to \
                 {source} bytes but its dead-letter queue {dead_letter_queue} only {dead_letter} \
                 bytes, so a large message cannot be moved there whole (the consumer sends a \
                 reduced copy, and cannot move a body over {dead_letter} bytes at all). Fix: set \
                 the dead-letter queue's MaximumMessageSize to {source}"
            ),
            Finding::ExpiryTooShort {
                expiry,
                source_retention,
                dead_letter_retention,
                required,
            } => tracing::warn!(
                queue,
                dead_letter_queue,
                expiry_seconds = expiry.as_secs(),
                source_retention_seconds = source_retention.as_secs(),
                dead_letter_retention_seconds = dead_letter_retention.as_secs(),
                required_seconds = required.as_secs(),
                "idempotency expiry too short: records expire after {} s, but a message can live \
                 {} s on queue {queue} and {} s more on its dead-letter queue \
                 {dead_letter_queue}, so a copy redriven late finds no record and runs again. \
                 Fix: set the expiry (IDEMPOTENCY_TTL_SECONDS) to at least {} s, or shorten the \
                 queues' MessageRetentionPeriod",
                expiry.as_secs(),
                source_retention.as_secs(),
                dead_letter_retention.as_secs(),
                required.as_secs()
            ),
            Finding::Unreadable(error) => tracing::warn!(
                queue,
                dead_letter_queue,
                error,
                "could not read a queue's attributes (the dead-letter queue's need \
                 sqs:GetQueueUrl and sqs:GetQueueAttributes on it): what depends on them was not \
                 checked: {error}"
            ),
        }
    }
    if result.findings.is_empty() && result.source.is_some() {
        tracing::info!(
            queue,
            dead_letter_queue,
            expiry_seconds = expiry.as_secs(),
            "queue limits: the redrive policy covers an outage as long as the retention, the \
             dead-letter queue takes the queue's messages, and records outlive every copy of \
             their message"
        );
    }
    result
}

async fn queue_url(sqs: &aws_sdk_sqs::Client, queue: &QueueRef) -> Result<String, String> {
    let arn = match queue {
        QueueRef::Url(url) => return Ok(url.clone()),
        QueueRef::Arn(arn) => arn,
    };
    // arn:PARTITION:sqs:REGION:ACCOUNT:NAME
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    let [_, _, "sqs", _, account, name] = parts.as_slice() else {
        return Err(format!("`{arn}` is not an SQS queue ARN"));
    };
    sqs.get_queue_url()
        .queue_name(*name)
        .queue_owner_aws_account_id(*account)
        .send()
        .await
        .map_err(|e| format!("GetQueueUrl {name}: {}", DisplayErrorContext(e)))?
        .queue_url
        .ok_or_else(|| format!("GetQueueUrl {name}: no URL in the answer"))
}

/// `maxReceiveCount` of a `RedrivePolicy` document (a number, or a number in a string).
fn max_receive_count(policy: &str) -> Result<u32, String> {
    let doc: serde_json::Value = serde_json::from_str(policy)
        .map_err(|e| format!("RedrivePolicy is not JSON ({e}): {policy}"))?;
    let count = match &doc["maxReceiveCount"] {
        serde_json::Value::Number(n) => n.as_u64(),
        serde_json::Value::String(s) => s.trim().parse().ok(),
        _ => None,
    };
    count
        .and_then(|c| u32::try_from(c).ok())
        .ok_or_else(|| format!("RedrivePolicy has no whole maxReceiveCount: {policy}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_counts_blocked_receives_behind_every_message_ahead() {
        for b in 1..=10 {
            for n in 1..=10 {
                assert_eq!(min_max_receive_count(b, n), (b - 1) * (n - 1) + n);
            }
        }
        assert_eq!(min_max_receive_count(0, 0), 1, "zero is read as one");
        assert_eq!(min_max_receive_count(u32::MAX, u32::MAX), u32::MAX);
    }

    #[test]
    fn max_receive_count_is_a_number_or_a_numeric_string() {
        assert_eq!(max_receive_count(r#"{"maxReceiveCount":41}"#), Ok(41));
        assert_eq!(max_receive_count(r#"{"maxReceiveCount":"5"}"#), Ok(5));
        assert!(max_receive_count(r#"{"maxReceiveCount":-1}"#).is_err());
        assert!(max_receive_count("{").is_err());
    }
}
