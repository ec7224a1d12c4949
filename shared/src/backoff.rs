//! Exponential backoff per message, by visibility timeout.
//!
//! Without it, a failed record comes back after the queue's whole visibility timeout (at least 6x
//! the function's timeout: minutes), however transient the failure. With [`VisibilityBackoff`]
//! on a [`BatchProcessor`](crate::batch::BatchProcessor), each failed record's visibility is set
//! to `min(base * 2^(attempt - 1), max)` plus up to a quarter more of jitter, in
//! `ChangeMessageVisibilityBatch` calls of up to 10 entries (one call for a batch of 10).
//!
//! The attempt is the handler's own count of failures, kept by the idempotency store (see
//! [`BatchProcessor::max_attempts`](crate::batch::BatchProcessor::max_attempts)), never SQS's
//! receive count, which grows for a FIFO record blocked behind a failing one without its running.
//! Only a handler without an idempotency store falls back to the receive count.
//!
//! A failure that is not an attempt of the handler's own (the store or a follow-up service
//! unreachable, a follow-up failed after the effect committed) is not the message's fault, and
//! is never counted against its budget. SQS still counts its receives against the queue's
//! `maxReceiveCount`, so its delay doubles with each receive, past `max` up to 11 hours
//! ([`visibility_not_counted`](VisibilityBackoff::visibility_not_counted)): an outage of minutes
//! costs a few receives, and one of days about two a day: one as long as a queue's retention
//! costs at most [`RetrySchedule::receives_within`] the retention, which the queue's
//! `maxReceiveCount` must leave room for beyond the attempt budget's receives (the
//! [outage cover](crate::redrive_policy::outage_cover), which the consumer's cold-start check
//! applies).
//! A record in progress in another invocation comes back when that invocation's lease ends (up
//! to 11 hours away), and a FIFO record that did not run because an earlier one of its group
//! failed comes back with that one.
//!
//! SQS refuses a visibility that would end more than 12 hours after the message's receive
//! (`InvalidParameterValue`), and a change comes after the receive: after Lambda's batching
//! window (up to 5 minutes) and within the invocation (up to 15). So the backoff sets at most 11
//! hours, and an entry SQS refuses as too long anyway is tried once more at half its timeout.
//!
//! Each call is bounded by a timeout and by the time the processor has left; a call that fails
//! whole (throttled, a connection cut) is sent once more, and an entry SQS reports failed
//! through no fault of the sender is retried once, then logged. Records whose
//! visibility did not change come back after the queue's visibility timeout. The function needs `sqs:ChangeMessageVisibility` and
//! `sqs:GetQueueUrl` on the queue.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::SqsMessage;
use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::{BatchResultErrorEntry, ChangeMessageVisibilityBatchRequestEntry};

use crate::error::RecordError;
use crate::time::{Clock, Deadline};

/// The longest visibility timeout the backoff sets: 11 hours. SQS refuses one that would end more
/// than 12 hours after the message's receive, and the change comes up to 20 minutes after it
/// (Lambda's batching window and the invocation): an hour is left for that.
pub(crate) const MAX_VISIBILITY: Duration = Duration::from_secs(11 * 60 * 60);

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
    sink: Sink,
    schedule: RetrySchedule,
    enabled: bool,
    queue_urls: Mutex<HashMap<String, String>>,
}

impl VisibilityBackoff {
    /// Backoff from 2 s up to 5 minutes.
    pub fn new(client: aws_sdk_sqs::Client) -> Self {
        Self::with_sink(Sink::Sqs(client))
    }

    /// Backoff from 2 s up to 5 minutes, its visibility changes recorded in `sqs` instead of
    /// sent (feature `test-util`).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use lambda_idempotency::backoff::VisibilityBackoff;
    /// use lambda_idempotency::batch::{BatchProcessor, message};
    /// use lambda_idempotency::test_util::{InMemorySqs, sqs_event};
    /// use std::time::Duration;
    ///
    /// let sqs = InMemorySqs::new();
    /// let processor = BatchProcessor::new().with_backoff(VisibilityBackoff::in_memory(&sqs));
    /// let failing = message(|_m, _ctx| async { Err::<(), _>("the ledger is busy") });
    /// processor.process(&sqs_event([("m-1", "{}")]), &failing).await.unwrap();
    /// let change = &sqs.visibility_changes()[0];
    /// assert_eq!(change.message_id, "m-1");
    /// // The first attempt's delay, 2 s, and up to a quarter more of jitter.
    /// assert!((2..=3).contains(&change.visibility_timeout.as_secs()));
    /// # });
    /// ```
    #[cfg(any(test, doc, feature = "test-util"))]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn in_memory(sqs: &crate::dead_letter::in_memory_sqs::InMemorySqs) -> Self {
        Self::with_sink(Sink::InMemory(sqs.clone()))
    }

    fn with_sink(sink: Sink) -> Self {
        Self {
            sink,
            schedule: RetrySchedule::default(),
            enabled: true,
            queue_urls: Mutex::new(HashMap::new()),
        }
    }

    /// The delay after the first failure (whole seconds, at least 1).
    pub fn base(mut self, base: Duration) -> Self {
        self.schedule = RetrySchedule::new(base, self.schedule.max);
        self
    }

    /// The longest delay (at most 11 hours: see the module docs).
    pub fn max(mut self, max: Duration) -> Self {
        self.schedule = RetrySchedule::new(self.schedule.base, max);
        self
    }

    /// Its schedule: on a stream, it spaces the retries within the invocation instead (see
    /// [`BatchProcessor::retry_in_invocation`](crate::batch::BatchProcessor::retry_in_invocation)).
    pub fn schedule(&self) -> RetrySchedule {
        self.schedule
    }

    /// Turns the backoff on or off.
    pub fn enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }

    /// The delay after a record's `attempt`-th failed attempt, without jitter:
    /// `min(base * 2^(attempt - 1), max)`.
    ///
    /// ```
    /// # use lambda_idempotency::backoff::VisibilityBackoff;
    /// # use std::time::Duration;
    /// # let client = aws_sdk_sqs::Client::from_conf(aws_sdk_sqs::Config::builder().behavior_version_latest().build());
    /// let backoff = VisibilityBackoff::new(client).base(Duration::from_secs(2)).max(Duration::from_secs(60));
    /// let delays: Vec<_> = (1..=7).map(|n| backoff.delay(n).as_secs()).collect();
    /// assert_eq!(delays, [2, 4, 8, 16, 32, 60, 60]);
    /// ```
    pub fn delay(&self, attempt: u32) -> Duration {
        self.schedule.delay(attempt)
    }

    /// The delay after a failure that is not an attempt of the handler's own (see
    /// [`visibility_not_counted`](Self::visibility_not_counted)), for a message received
    /// `receives` times, without jitter: `min(base * 2^(receives - 1), 11 h)`.
    ///
    /// ```
    /// # use lambda_idempotency::backoff::VisibilityBackoff;
    /// # use std::time::Duration;
    /// # let client = aws_sdk_sqs::Client::from_conf(aws_sdk_sqs::Config::builder().behavior_version_latest().build());
    /// let backoff = VisibilityBackoff::new(client).max(Duration::from_secs(60));
    /// assert_eq!(backoff.delay_not_counted(3).as_secs(), 8);
    /// // Past the backoff's max, up to 11 hours (SQS's 12-hour limit, less an hour).
    /// assert_eq!(backoff.delay_not_counted(8).as_secs(), 256);
    /// assert_eq!(backoff.delay_not_counted(17).as_secs(), 11 * 60 * 60);
    /// ```
    pub fn delay_not_counted(&self, receives: u32) -> Duration {
        self.schedule.delay_not_counted(receives)
    }

    /// The visibility timeout (whole seconds) for a record that failed with `error` on its
    /// `attempt`-th attempt, at `now_ms`: the end of the lease of an invocation that holds its key
    /// (at most 11 hours away), otherwise the backoff's delay plus jitter (from 0 to a quarter of
    /// the delay, rounded up, so that even a 1 s delay gets some).
    pub fn visibility(&self, error: &RecordError, attempt: u32, now_ms: i64) -> i32 {
        self.visibility_after(error, self.delay(attempt), now_ms)
    }

    /// The visibility timeout (whole seconds) for a record that failed with `error`, a failure
    /// the attempt budget does not count (the store or a follow-up service unreachable, a
    /// follow-up failed after the effect committed), on its `receives`-th receive: as
    /// [`visibility`](Self::visibility), with [`delay_not_counted`](Self::delay_not_counted).
    ///
    /// SQS's `maxReceiveCount` counts every receive, and such a failure is not the message's
    /// fault: its delay grows with the receives, past the backoff's `max` up to 11 hours, so that
    /// however long an outage lasts, the receive count grows by about two a day once the delay
    /// reaches 11 hours (from 2 s: after 16 receives and about 18 hours; the 41st receive comes
    /// after about 12 days). A message held behind it in its FIFO group comes back with it, so the
    /// group's receives grow as slowly.
    pub fn visibility_not_counted(&self, error: &RecordError, receives: u32, now_ms: i64) -> i32 {
        self.visibility_after(error, self.delay_not_counted(receives), now_ms)
    }

    fn visibility_after(&self, error: &RecordError, delay: Duration, now_ms: i64) -> i32 {
        let secs = match error.cause() {
            RecordError::InProgress { lease_until_ms } => {
                ((lease_until_ms - now_ms + 999) / 1000).clamp(1, MAX_VISIBILITY.as_secs() as i64)
            }
            _ => RetrySchedule::jittered(delay).as_secs() as i64,
        };
        secs.min(MAX_VISIBILITY.as_secs() as i64) as i32
    }

    /// Sets the visibility of `records[index]` to `secs` for each `(index, secs)`, in calls of up
    /// to 10 entries, each bounded by `call_timeout` and all by `until`. A call that fails whole
    /// (throttled, a connection cut, its answer lost) is sent once more; an entry SQS reports
    /// failed through no fault of the sender is retried once as it was, one refused as too long
    /// (`InvalidParameterValue`) once at half its timeout, any other not at all. Returns how many
    /// changed.
    pub async fn change(
        &self,
        records: &[SqsMessage],
        visibility: &[(usize, i32)],
        until: Option<Deadline>,
        clock: &dyn Clock,
        call_timeout: Duration,
    ) -> usize {
        if !self.enabled || visibility.is_empty() {
            return 0;
        }
        let Some(arn) = records.first().and_then(|r| r.event_source_arn.as_deref()) else {
            tracing::warn!("no eventSourceARN: visibility backoff skipped");
            return 0;
        };
        let bound = |until: Option<Deadline>| {
            let left = until.map_or(Duration::MAX, |u| u.remaining(clock));
            left.min(call_timeout)
        };
        let target = match &self.sink {
            Sink::Sqs(client) => {
                if bound(until).is_zero() {
                    tracing::warn!(
                        arn,
                        "visibility backoff skipped: no time left for GetQueueUrl"
                    );
                    return 0;
                }
                match tokio::time::timeout(bound(until), self.queue_url(client, arn)).await {
                    Ok(Ok(url)) => Target::Sqs(client, url),
                    Ok(Err(e)) => {
                        tracing::warn!(
                            arn,
                            error = e,
                            "visibility backoff skipped: queue URL unknown"
                        );
                        return 0;
                    }
                    Err(_) => {
                        tracing::warn!(
                            arn,
                            "visibility backoff skipped: no time left for GetQueueUrl"
                        );
                        return 0;
                    }
                }
            }
            #[cfg(any(test, doc, feature = "test-util"))]
            Sink::InMemory(sqs) => Target::InMemory(sqs, arn),
        };
        let entries: Vec<_> = visibility
            .iter()
            .filter_map(|&(index, secs)| {
                let handle = records.get(index)?.receipt_handle.as_deref()?;
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
            let mut pending = chunk.to_vec();
            for round in 0..2 {
                if pending.is_empty() {
                    break;
                }
                let call = target.call(records, &pending);
                match tokio::time::timeout(bound(until), call).await {
                    Ok(Ok((successful, failed))) => {
                        changed += successful;
                        pending = pending
                            .into_iter()
                            .filter_map(|entry| {
                                let f = failed.iter().find(|f| f.id() == entry.id())?;
                                let retry = retried_entry(entry, f);
                                tracing::warn!(
                                    entry = f.id(),
                                    code = f.code(),
                                    message = f.message(),
                                    retry = round == 0 && retry.is_some(),
                                    "visibility not changed"
                                );
                                retry
                            })
                            .collect();
                    }
                    // The whole call again: a change is the same however often it is applied.
                    Ok(Err(error)) => tracing::warn!(
                        error,
                        retry = round == 0,
                        "ChangeMessageVisibilityBatch failed"
                    ),
                    Err(_) => {
                        tracing::warn!("ChangeMessageVisibilityBatch timed out: no time left");
                        return changed;
                    }
                }
            }
        }
        changed
    }

    async fn queue_url(&self, client: &aws_sdk_sqs::Client, arn: &str) -> Result<String, String> {
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
        let url = client
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

/// When a failed record is tried again: `min(base * 2^(attempt - 1), max)` after its
/// `attempt`-th failure, plus up to a quarter more of jitter (whole seconds). One schedule for
/// both ways a retry is spaced: SQS's visibility ([`VisibilityBackoff`]), and on a stream the
/// wait within the invocation
/// ([`BatchProcessor::retry_in_invocation`](crate::batch::BatchProcessor::retry_in_invocation)).
///
/// ```
/// use lambda_idempotency::backoff::RetrySchedule;
/// use std::time::Duration;
///
/// let schedule = RetrySchedule::new(Duration::from_secs(2), Duration::from_secs(60));
/// let delays: Vec<_> = (1..=7).map(|n| schedule.delay(n).as_secs()).collect();
/// assert_eq!(delays, [2, 4, 8, 16, 32, 60, 60]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetrySchedule {
    base: Duration,
    max: Duration,
}

impl Default for RetrySchedule {
    /// From 2 s up to 5 minutes.
    fn default() -> Self {
        Self::new(Duration::from_secs(2), Duration::from_secs(300))
    }
}

impl RetrySchedule {
    /// From `base` (at least 1 s) up to `max` (at most 11 hours).
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base: base.max(Duration::from_secs(1)),
            max: max.min(MAX_VISIBILITY),
        }
    }

    /// The delay after the `attempt`-th failure, without jitter: `min(base * 2^(attempt - 1),
    /// max)`.
    pub fn delay(&self, attempt: u32) -> Duration {
        self.doubled(attempt, self.max)
    }

    /// The delay after a failure the attempt budget does not count (an outage: see
    /// [`VisibilityBackoff::visibility_not_counted`]), on a message's `receives`-th receive,
    /// without jitter: `min(base * 2^(receives - 1), 11 h)`, past `max`.
    pub fn delay_not_counted(&self, receives: u32) -> Duration {
        self.doubled(receives, MAX_VISIBILITY)
    }

    /// The most receives of a message during an outage of `outage`, when each of them fails
    /// through no fault of the message: the first at the outage's start, each next one
    /// [`delay_not_counted`](Self::delay_not_counted) of the previous one's receive count later
    /// (jitter and the time a receive takes only add to that). A message already received before
    /// the outage waits longer after each receive, so it is received no more often in it.
    ///
    /// ```
    /// use lambda_idempotency::backoff::RetrySchedule;
    /// use std::time::Duration;
    ///
    /// const DAY: u64 = 24 * 60 * 60;
    /// let from_2s = RetrySchedule::new(Duration::from_secs(2), Duration::from_secs(300));
    /// // 2 s, 4 s, 8 s... to 11 hours after the 16th receive (about 18 hours in), then about two
    /// // a day: a queue keeping its messages 4 days sees 23 receives, 14 days 44.
    /// assert_eq!(from_2s.receives_within(Duration::from_secs(4 * DAY)), 23);
    /// assert_eq!(from_2s.receives_within(Duration::from_secs(14 * DAY)), 44);
    /// // From 1 s, one more: the slowest backoff the reference template allows.
    /// let from_1s = RetrySchedule::new(Duration::from_secs(1), Duration::from_secs(1));
    /// assert_eq!(from_1s.receives_within(Duration::from_secs(4 * DAY)), 24);
    /// ```
    pub fn receives_within(&self, outage: Duration) -> u32 {
        let mut elapsed = Duration::ZERO;
        let mut receives = 1;
        loop {
            elapsed = elapsed.saturating_add(self.delay_not_counted(receives));
            if elapsed > outage || receives == u32::MAX {
                return receives;
            }
            receives += 1;
        }
    }

    /// `min(base * 2^(n - 1), cap)`.
    fn doubled(&self, n: u32, cap: Duration) -> Duration {
        let exponent = n.saturating_sub(1).min(31);
        self.base.saturating_mul(1 << exponent).min(cap)
    }

    /// `delay` (whole seconds, at least 1) plus from 0 to a quarter of it (rounded up, so that
    /// even a 1 s delay gets some), at random: retries of records that failed together do not
    /// come back in step.
    pub fn jittered(delay: Duration) -> Duration {
        let d = delay.as_secs().max(1);
        let spread = d.div_ceil(4);
        Duration::from_secs(d + jitter_u64() % (spread + 1))
    }
}

/// Where the changes go.
#[derive(Debug)]
enum Sink {
    Sqs(aws_sdk_sqs::Client),
    #[cfg(any(test, doc, feature = "test-util"))]
    InMemory(crate::dead_letter::in_memory_sqs::InMemorySqs),
}

/// Where one backoff's calls go: the queue's URL found.
enum Target<'a> {
    Sqs(&'a aws_sdk_sqs::Client, String),
    #[cfg(any(test, doc, feature = "test-util"))]
    InMemory(&'a crate::dead_letter::in_memory_sqs::InMemorySqs, &'a str),
}

impl Target<'_> {
    /// One `ChangeMessageVisibilityBatch` of `entries` (ids: indices in `records`): how many
    /// changed and the entries that failed, or why the call failed whole.
    #[cfg_attr(
        not(any(test, doc, feature = "test-util")),
        expect(unused_variables, reason = "only the in-memory SQS reads the records")
    )]
    async fn call(
        &self,
        records: &[SqsMessage],
        entries: &[ChangeMessageVisibilityBatchRequestEntry],
    ) -> Result<(usize, Vec<BatchResultErrorEntry>), String> {
        match self {
            Target::Sqs(client, queue_url) => {
                let output = client
                    .change_message_visibility_batch()
                    .queue_url(queue_url)
                    .set_entries(Some(entries.to_vec()))
                    .send()
                    .await
                    .map_err(|e| DisplayErrorContext(&e).to_string())?;
                Ok((output.successful().len(), output.failed().to_vec()))
            }
            #[cfg(any(test, doc, feature = "test-util"))]
            Target::InMemory(sqs, arn) => {
                use crate::dead_letter::in_memory_sqs::VisibilityChange;
                let changes = entries
                    .iter()
                    .filter_map(|entry| {
                        let record = records.get(entry.id().parse::<usize>().ok()?)?;
                        Some(VisibilityChange {
                            queue_arn: (*arn).to_owned(),
                            message_id: record.message_id.clone().unwrap_or_default(),
                            receipt_handle: entry.receipt_handle().to_owned(),
                            visibility_timeout: Duration::from_secs(
                                u64::try_from(entry.visibility_timeout().unwrap_or(0)).unwrap_or(0),
                            ),
                        })
                    })
                    .collect::<Vec<_>>();
                let count = changes.len();
                sqs.record_visibility_changes(changes)?;
                Ok((count, Vec::new()))
            }
        }
    }
}

/// What to send again for an `entry` SQS refused with `failure`: the same entry when the refusal
/// was not the sender's fault; at half its timeout when SQS found the timeout too long (it would
/// end more than 12 hours after the receive); nothing otherwise.
fn retried_entry(
    entry: ChangeMessageVisibilityBatchRequestEntry,
    failure: &BatchResultErrorEntry,
) -> Option<ChangeMessageVisibilityBatchRequestEntry> {
    if !failure.sender_fault() {
        return Some(entry);
    }
    let secs = entry.visibility_timeout().unwrap_or(0);
    if failure.code() != "InvalidParameterValue" || secs < 2 {
        return None;
    }
    ChangeMessageVisibilityBatchRequestEntry::builder()
        .id(entry.id())
        .receipt_handle(entry.receipt_handle())
        .visibility_timeout(secs / 2)
        .build()
        .ok()
}

/// A random number for the jitter.
pub(crate) fn jitter_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    hasher.finish()
}
