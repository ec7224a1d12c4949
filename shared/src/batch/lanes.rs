//! One batch being processed: records run in lanes (a FIFO message group, the whole batch in
//! strict order, or a single record of a standard queue), and a record that fails for good goes
//! to the dead-letter queue right where it fails, so that the rest of its lane runs on (as a
//! reduced copy when the whole one does not fit the queue: see [`DeadLetter::send`]). The reason
//! it is sent and logged with has what looks like an item's value cut
//! ([`safe_reason`](crate::redact::safe_reason)).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use super::handler::{caught, too_late_to_start};
use super::{RecordContext, RecordHandler};
use crate::backoff::RetrySchedule;
use crate::dead_letter::DeadLetter;
use crate::error::RecordError;
use crate::record::Record;
use crate::time::{Clock, Deadline};

/// How long after another invocation's lease ends a record it held is tried again: room for
/// the clocks of two invocations to differ.
const LEASE_SLACK_MS: i64 = 1_000;

/// How one record settled: its result, and whether it went to the dead-letter queue.
pub(super) struct Settled<T> {
    pub(super) result: Result<T, RecordError>,
    pub(super) dead_lettered: bool,
}

/// What a run needs of its processor's settings.
pub(super) struct Limits<'a> {
    pub(super) start_margin: Duration,
    pub(super) stop_margin: Duration,
    pub(super) finish_margin: Duration,
    pub(super) call_timeout: Duration,
    pub(super) max_attempts: Option<u32>,
    /// On a stream: the schedule of retries within the invocation.
    pub(super) retry: Option<RetrySchedule>,
    pub(super) clock: &'a Arc<dyn Clock>,
    pub(super) dead_letter: Option<&'a DeadLetter>,
}

/// One batch being processed.
pub(super) struct Run<'a, H, R> {
    limits: Limits<'a>,
    handler: &'a H,
    records: &'a [&'a R],
    ids: &'a [&'a str],
    deadline: Option<Deadline>,
    request_id: &'a str,
    /// For a message id that came earlier in the batch: that first record's index.
    repeats: HashMap<usize, usize>,
    /// Records sharing an idempotency key run one at a time.
    key_locks: HashMap<usize, Arc<tokio::sync::Mutex<()>>>,
}

impl<'a, R: Record, H: RecordHandler<R>> Run<'a, H, R> {
    pub(super) fn new(
        limits: Limits<'a>,
        handler: &'a H,
        records: &'a [&'a R],
        ids: &'a [&'a str],
        deadline: Option<Deadline>,
        request_id: &'a str,
    ) -> Self {
        let mut first: HashMap<&str, usize> = HashMap::new();
        let mut repeats = HashMap::new();
        for (i, id) in ids.iter().enumerate() {
            if let Some(&f) = first.get(id) {
                repeats.insert(i, f);
            } else {
                first.insert(id, i);
            }
        }
        let mut by_key: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, record) in records.iter().enumerate() {
            if let Some(key) = handler.key(*record) {
                by_key.entry(key).or_default().push(i);
            }
        }
        let mut key_locks = HashMap::new();
        for indices in by_key.into_values().filter(|v| v.len() > 1) {
            let lock = Arc::new(tokio::sync::Mutex::new(()));
            for i in indices {
                key_locks.insert(i, lock.clone());
            }
        }
        Self {
            limits,
            handler,
            records,
            ids,
            deadline,
            request_id,
            repeats,
            key_locks,
        }
    }

    /// The invocation's deadline.
    pub(super) fn deadline(&self) -> Option<Deadline> {
        self.deadline
    }

    /// Runs the records of one lane one after another. A record that fails and is not moved to
    /// the dead-letter queue blocks the rest of the lane: they are reported failed without
    /// running. A record moved there does not.
    pub(super) async fn lane(
        &self,
        indices: Vec<usize>,
        group: Option<String>,
    ) -> Vec<(usize, Settled<H::Output>)> {
        let mut out = Vec::with_capacity(indices.len());
        let mut failed: Option<&str> = None;
        for i in indices {
            if let Some(&first_index) = self.repeats.get(&i) {
                let result = Err(RecordError::Repeated { first_index });
                out.push((
                    i,
                    Settled {
                        result,
                        dead_lettered: false,
                    },
                ));
                continue;
            }
            if let Some(first) = failed {
                let error = match &group {
                    Some(group_id) => RecordError::GroupBlocked {
                        group_id: group_id.clone(),
                        failed: first.to_owned(),
                    },
                    None => RecordError::BatchStopped {
                        failed: first.to_owned(),
                    },
                };
                out.push((
                    i,
                    Settled {
                        result: Err(error),
                        dead_lettered: false,
                    },
                ));
                continue;
            }
            let (result, dead_lettered) = self.settle(i).await;
            if result.is_err() && !dead_lettered {
                failed = Some(self.ids[i]);
            }
            out.push((
                i,
                Settled {
                    result,
                    dead_lettered,
                },
            ));
        }
        out
    }

    /// Runs record `i` and moves it to the dead-letter queue when its error sends it there; on a
    /// stream with retries in the invocation ([`Limits::retry`]), runs it again after each
    /// failure that a wait can help, as long as the retry can start before the start margin.
    /// Returns its result and whether it went to the dead-letter queue.
    async fn settle(&self, i: usize) -> (Result<H::Output, RecordError>, bool) {
        let mut tries = 1;
        loop {
            let (ctx, result) = self.one(i).await;
            let Err(error) = &result else {
                return (result, false);
            };
            let bound = self.goes_to_dead_letter(error, self.records[i]);
            if bound && self.dead_letter(i, &ctx, error).await {
                return (result, true);
            }
            let Some(at_ms) = self.retry_at(error, tries, bound) else {
                return (result, false);
            };
            let clock = &**self.limits.clock;
            let latest_start = self
                .deadline
                .map(|d| d.earlier_by(self.limits.start_margin).epoch_ms())
                .unwrap_or(i64::MAX);
            if at_ms > latest_start {
                // Too late for a retry here: the record is reported once the retry could no
                // longer start anyway, so that Lambda's back-to-back retries of the stream come
                // one per invocation, never in a burst.
                tracing::info!(
                    message_id = ctx.message_id,
                    error = %error,
                    "failed; its retry cannot start before the start margin: reported then"
                );
                clock.sleep_until(latest_start).await;
                return (result, false);
            }
            tracing::info!(
                message_id = ctx.message_id,
                error = %error,
                wait_ms = at_ms - clock.now_ms(),
                "failed; retried within the invocation"
            );
            clock.sleep_until(at_ms).await;
            tries += 1;
        }
    }

    /// When to run a stream record again within the invocation after its `tries`-th run failed
    /// with `error` (`bound`: the error sent it to the dead-letter queue, and the send failed):
    /// when the lease of the invocation that holds its key ends, else after the retry
    /// schedule's delay for its attempt (the store's count, else this invocation's runs).
    /// `None` without retries in the invocation, without a deadline, or for an error a wait
    /// cannot help (the deadline's, a permanent one that was not sent to the dead-letter queue).
    fn retry_at(&self, error: &RecordError, tries: u32, bound: bool) -> Option<i64> {
        let schedule = self.limits.retry?;
        self.deadline?;
        let waits = match error.cause() {
            RecordError::DeadlineNear { .. } | RecordError::DeadlineReached { .. } => false,
            _ => bound || !error.is_permanent(),
        };
        if !waits {
            return None;
        }
        Some(match error.cause() {
            RecordError::InProgress { lease_until_ms } => lease_until_ms + LEASE_SLACK_MS,
            _ => {
                let attempt = error.attempts().unwrap_or(tries);
                let delay = RetrySchedule::jittered(schedule.delay(attempt));
                self.limits.clock.now_ms() + crate::time::millis(delay)
            }
        })
    }

    /// True when `error` sends its record to the dead-letter queue: one is configured, and the
    /// error is permanent or the attempt budget is used up.
    fn goes_to_dead_letter(&self, error: &RecordError, record: &R) -> bool {
        let p = &self.limits;
        if p.dead_letter.is_none() {
            return false;
        }
        if error.is_permanent() {
            return true;
        }
        let Some(max) = p.max_attempts else {
            return false;
        };
        if !error.is_attempt() || !is_counted(self.handler, error) {
            return false;
        }
        attempt_of(self.handler, error, record) >= max
    }

    /// Sends record `i` to the dead-letter queue within the time left, then tells the handler.
    /// True when it was sent. The send starts only when, after it, one call's time
    /// (`call_timeout`) is left for the handler's hook: a record moved without its application
    /// being told would be lost to it, so under time pressure the record is reported failed
    /// instead and moved on its next delivery.
    async fn dead_letter(&self, i: usize, ctx: &RecordContext, error: &RecordError) -> bool {
        let p = &self.limits;
        let Some(dead_letter) = &p.dead_letter else {
            return false;
        };
        let message_id = self.ids[i];
        let left = self.time_left_until(ctx.finish_by).unwrap_or_default();
        let Some(budget) = left
            .checked_sub(p.call_timeout)
            .filter(|b| !b.is_zero())
            .map(|b| b.min(p.call_timeout))
        else {
            tracing::warn!(
                message_id,
                ?left,
                "not enough time left to move to the dead-letter queue and run the hook; reported failed"
            );
            return false;
        };
        // Without what looks like an item's value: the reason is logged and sent.
        let reason = crate::redact::safe_reason(&if error.is_permanent() {
            error.to_string()
        } else {
            format!("attempt budget used up: {error}")
        });
        let mut copy = self.records[i].dead_letter_copy();
        // Named as the processor names the record (a Kafka record with its cluster).
        copy.message_id = Some(message_id.to_owned());
        match tokio::time::timeout(budget, dead_letter.send(&copy, &reason)).await {
            Ok(Ok(copied)) => {
                tracing::warn!(
                    message_id,
                    queue = dead_letter.queue_url(),
                    reason,
                    ?copied,
                    "moved to the dead-letter queue"
                );
                // The hook sees the attempt the store counted, when it counted one.
                let mut ctx = ctx.clone();
                if let Some(attempts) = error.attempts() {
                    ctx.attempt = attempts;
                }
                let hook = self.handler.dead_lettered(self.records[i], &ctx, error);
                let left = self.time_left_until(ctx.finish_by).unwrap_or_default();
                if tokio::time::timeout(left, hook).await.is_err() {
                    tracing::error!(
                        message_id,
                        "the dead-letter hook did not finish before the deadline"
                    );
                }
                true
            }
            Ok(Err(e)) => {
                tracing::warn!(
                    message_id,
                    error = e,
                    "could not move to the dead-letter queue; reported failed"
                );
                false
            }
            Err(_) => {
                tracing::warn!(
                    message_id,
                    ?budget,
                    "moving to the dead-letter queue timed out; reported failed"
                );
                false
            }
        }
    }

    /// Time from now until `at` (`None` when there is none left); unbounded without a deadline.
    fn time_left_until(&self, at: Option<Deadline>) -> Option<Duration> {
        let Some(at) = at else {
            return Some(Duration::MAX);
        };
        Some(at.remaining(&**self.limits.clock)).filter(|left| !left.is_zero())
    }

    /// `DeadlineNear` when less than the start margin is left before the deadline.
    fn too_late_to_start(&self) -> Option<RecordError> {
        let p = &self.limits;
        let latest_start = self.deadline?.earlier_by(p.start_margin);
        too_late_to_start(&**p.clock, latest_start, p.start_margin)
    }

    /// Runs one record: deadline checks, the key's lock, panic isolation.
    async fn one(&self, i: usize) -> (RecordContext, Result<H::Output, RecordError>) {
        let p = &self.limits;
        let record = self.records[i];
        let receive_count = record.receive_count().unwrap_or(0);
        let deadline = self.deadline();
        let ctx = RecordContext {
            message_id: self.ids[i].to_owned(),
            deadline,
            receive_count,
            attempt: receive_count.max(1),
            group_id: self.handler.order_key(record),
            sent_at: record.sent_at(),
            change: record.change(),
            request_id: self.request_id.to_owned(),
            stop_at: deadline.map(|d| d.earlier_by(p.stop_margin)),
            finish_by: deadline.map(|d| d.earlier_by(p.finish_margin)),
            clock: p.clock.clone(),
        };
        if let Some(error) = self.too_late_to_start() {
            return (ctx, Err(error));
        }
        let _key = match self.key_locks.get(&i) {
            Some(lock) => Some(lock.lock().await),
            None => None,
        };
        // Waiting for the key's lock took time: the start margin is checked again.
        if _key.is_some()
            && let Some(error) = self.too_late_to_start()
        {
            return (ctx, Err(error));
        }
        let span = tracing::info_span!("record", message_id = ctx.message_id);
        // Boxed: keeps the future types of deeply composed handlers shallow enough for rustc's
        // layout recursion limit, for one allocation per record.
        let reached = || RecordError::DeadlineReached {
            margin: p.finish_margin,
        };
        let result = match self.time_left_until(ctx.finish_by) {
            None => Err(reached()),
            Some(left) => {
                let work = caught(Box::pin(self.handler.handle(record, &ctx))).instrument(span);
                tokio::time::timeout(left, work)
                    .await
                    .unwrap_or_else(|_| Err(reached()))
            }
        };
        (ctx, result)
    }
}

/// True when a failure is an attempt of the handler's own: the store counted it, or the handler
/// keeps no count (its attempts are then the receive count). A failure the store did not count
/// (an outage, a failed follow-up after a committed effect) is not the message's fault.
/// A [`RecordError::Transient`] never is.
pub(super) fn is_counted<R: Record, H: RecordHandler<R>>(handler: &H, error: &RecordError) -> bool {
    !matches!(error.cause(), RecordError::Transient(_))
        && (error.attempts().is_some() || !handler.counts_attempts())
}

/// The attempt a failure counts as: the store's count when the handler keeps one, else the
/// receive count.
pub(super) fn attempt_of<R: Record, H: RecordHandler<R>>(
    handler: &H,
    error: &RecordError,
    record: &R,
) -> u32 {
    match error.attempts() {
        Some(attempts) => attempts,
        None if handler.counts_attempts() => 1,
        None => record.receive_count().unwrap_or(0).max(1),
    }
}
