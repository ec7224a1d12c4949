//! Exponential backoff per message, by visibility timeout.
//!
//! Without it, a failed record comes back after the queue's whole visibility timeout (at least 6x
//! the function's timeout: minutes), however transient the failure. With [`VisibilityBackoff`]
//! on a [`BatchProcessor`](crate::batch::BatchProcessor), each failed record's visibility is set
//! to `min(base * 2^(ApproximateReceiveCount - 1), max)` plus up to a quarter more of jitter, in
//! `ChangeMessageVisibilityBatch` calls of up to 10 entries (one call for a batch of 10). A record
//! in progress in another invocation comes back when that invocation's lease ends instead, and a
//! FIFO record that did not run because an earlier one of its group failed comes back with that
//! one.
//!
//! A failure of the call is logged; the records stay failed and come back after the queue's
//! visibility timeout. The function needs `sqs:ChangeMessageVisibility` and `sqs:GetQueueUrl` on
//! the queue.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use aws_lambda_events::sqs::SqsMessage;
use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::ChangeMessageVisibilityBatchRequestEntry;

use crate::batch::{BatchReport, RecordError};
use crate::record::{Clock, SystemClock};

/// Longest visibility timeout SQS accepts: 12 hours.
pub const MAX_VISIBILITY: Duration = Duration::from_secs(12 * 60 * 60);

/// Sets failed records' visibility so that retries space out; see the module docs.
///
/// ```no_run
/// # async fn example() {
/// use lambda_idempotency::backoff::VisibilityBackoff;
/// use lambda_idempotency::batch::BatchProcessor;
/// use std::time::Duration;
///
/// let config = aws_config::load_from_env().await;
/// let processor = BatchProcessor::new().with_backoff(
///     VisibilityBackoff::new(aws_sdk_sqs::Client::new(&config))
///         .base(Duration::from_secs(1))
///         .max(Duration::from_secs(120)),
/// );
/// # }
/// ```
#[derive(Debug)]
pub struct VisibilityBackoff {
    client: aws_sdk_sqs::Client,
    base: Duration,
    max: Duration,
    enabled: bool,
    queue_urls: Mutex<HashMap<String, String>>,
}

impl VisibilityBackoff {
    /// Backoff from 2 s up to 5 minutes.
    pub fn new(client: aws_sdk_sqs::Client) -> Self {
        Self {
            client,
            base: Duration::from_secs(2),
            max: Duration::from_secs(300),
            enabled: true,
            queue_urls: Mutex::new(HashMap::new()),
        }
    }

    /// The delay after the first failure (whole seconds, at least 1).
    pub fn base(mut self, base: Duration) -> Self {
        self.base = base.max(Duration::from_secs(1));
        self
    }

    /// The longest delay (at most 12 hours).
    pub fn max(mut self, max: Duration) -> Self {
        self.max = max.min(MAX_VISIBILITY);
        self
    }

    /// Turns the backoff on or off.
    pub fn enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }

    /// The delay before the next receive of a record received `receive_count` times, without
    /// jitter: `min(base * 2^(receive_count - 1), max)`.
    ///
    /// ```
    /// # use lambda_idempotency::backoff::VisibilityBackoff;
    /// # use std::time::Duration;
    /// # let client = aws_sdk_sqs::Client::from_conf(aws_sdk_sqs::Config::builder().behavior_version_latest().build());
    /// let backoff = VisibilityBackoff::new(client).base(Duration::from_secs(2)).max(Duration::from_secs(60));
    /// let delays: Vec<_> = (1..=7).map(|n| backoff.delay(n).as_secs()).collect();
    /// assert_eq!(delays, [2, 4, 8, 16, 32, 60, 60]);
    /// ```
    pub fn delay(&self, receive_count: u32) -> Duration {
        let exponent = receive_count.saturating_sub(1).min(31);
        self.base.saturating_mul(1 << exponent).min(self.max)
    }

    /// The visibility timeout (whole seconds) for each failed record of `report`, by index.
    pub fn timeouts<T>(
        &self,
        records: &[SqsMessage],
        report: &BatchReport<T>,
    ) -> Vec<(usize, i32)> {
        let now_ms = SystemClock.now_ms();
        let max_secs = self.max.as_secs().max(1) as i64;
        let mut by_id: HashMap<&str, i32> = HashMap::new();
        let mut out = Vec::new();
        let mut blocked = Vec::new();
        for r in report.failures() {
            let Err(error) = &r.result else { continue };
            let secs = match error {
                RecordError::InProgress { lease_until_ms } => {
                    ((lease_until_ms - now_ms + 999) / 1000).clamp(1, max_secs)
                }
                RecordError::GroupBlocked { failed, .. } | RecordError::BatchStopped { failed } => {
                    blocked.push((r.index, failed.as_str()));
                    continue;
                }
                _ => {
                    // Visibility is in whole seconds: the jitter is too, from 0 to a quarter of
                    // the delay rounded up (so that even a 1 s delay gets some).
                    let d = self
                        .delay(receive_count(&records[r.index]))
                        .as_secs()
                        .max(1) as i64;
                    let spread = (d + 3) / 4;
                    d + (crate::publish::random_u64() % (spread as u64 + 1)) as i64
                }
            };
            let secs = secs as i32;
            by_id.insert(r.message_id.as_str(), secs);
            out.push((r.index, secs));
        }
        for (index, failed) in blocked {
            let secs = by_id.get(failed).copied().unwrap_or_else(|| {
                self.delay(receive_count(&records[index])).as_secs().max(1) as i32
            });
            out.push((index, secs));
        }
        out.sort_unstable();
        out
    }

    /// Applies the backoff to the failed records of `report`; returns how many were changed.
    pub async fn apply<T>(&self, records: &[SqsMessage], report: &BatchReport<T>) -> usize {
        if !self.enabled {
            return 0;
        }
        let timeouts = self.timeouts(records, report);
        if timeouts.is_empty() {
            return 0;
        }
        let Some(arn) = records.first().and_then(|r| r.event_source_arn.as_deref()) else {
            tracing::warn!("no eventSourceARN: visibility backoff skipped");
            return 0;
        };
        let queue_url = match self.queue_url(arn).await {
            Ok(url) => url,
            Err(e) => {
                tracing::warn!(
                    arn,
                    error = e,
                    "visibility backoff skipped: queue URL unknown"
                );
                return 0;
            }
        };
        let entries: Vec<_> = timeouts
            .iter()
            .filter_map(|&(index, secs)| {
                let handle = records[index].receipt_handle.as_deref()?;
                ChangeMessageVisibilityBatchRequestEntry::builder()
                    .id(index.to_string())
                    .receipt_handle(handle)
                    .visibility_timeout(secs)
                    .build()
                    .ok()
            })
            .collect();
        let mut changed = 0;
        for chunk in entries.chunks(10) {
            match self
                .client
                .change_message_visibility_batch()
                .queue_url(&queue_url)
                .set_entries(Some(chunk.to_vec()))
                .send()
                .await
            {
                Ok(output) => {
                    changed += output.successful().len();
                    for failed in output.failed() {
                        tracing::warn!(
                            entry = failed.id(),
                            code = failed.code(),
                            "visibility not changed"
                        );
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %DisplayErrorContext(&e), "ChangeMessageVisibilityBatch failed")
                }
            }
        }
        changed
    }

    async fn queue_url(&self, arn: &str) -> Result<String, String> {
        if let Some(url) = self
            .queue_urls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(arn)
        {
            return Ok(url.clone());
        }
        // arn:aws:sqs:REGION:ACCOUNT:NAME
        let parts: Vec<&str> = arn.splitn(6, ':').collect();
        let [_, _, _, _, account, name] = parts[..] else {
            return Err(format!("`{arn}` is not an SQS queue ARN"));
        };
        let url = self
            .client
            .get_queue_url()
            .queue_name(name)
            .queue_owner_aws_account_id(account)
            .send()
            .await
            .map_err(|e| DisplayErrorContext(&e).to_string())?
            .queue_url
            .ok_or_else(|| "GetQueueUrl returned no URL".to_owned())?;
        self.queue_urls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(arn.to_owned(), url.clone());
        Ok(url)
    }
}

fn receive_count(record: &SqsMessage) -> u32 {
    record
        .attributes
        .get("ApproximateReceiveCount")
        .and_then(|c| c.parse().ok())
        .unwrap_or(1)
}
