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

use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::QueueAttributeName;

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
pub const CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// Reads the `RedrivePolicy` of `queue` and compares its `maxReceiveCount` with
/// [`min_max_receive_count`]`(batch_size, max_attempts)`. Needs `sqs:GetQueueAttributes` (and
/// `sqs:GetQueueUrl` for an ARN) on the queue. Gives up after [`CHECK_TIMEOUT`]
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
    let required = min_max_receive_count(batch_size, max_attempts);
    let url = match queue_url(sqs, queue).await {
        Ok(url) => url,
        Err(e) => return RedriveCheck::Unreadable(e),
    };
    let attributes = match sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::RedrivePolicy)
        .send()
        .await
    {
        Ok(out) => out.attributes.unwrap_or_default(),
        Err(e) => {
            return RedriveCheck::Unreadable(format!(
                "GetQueueAttributes {url}: {}",
                DisplayErrorContext(e)
            ));
        }
    };
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
    let queue = queue.to_string();
    match &result {
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
