//! [`BatchProcessor`]: its settings, and `process`, which runs a handler over one event of any
//! [`EventSource`].

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::sqs::SqsEvent;
use futures_util::{FutureExt, StreamExt, stream};
use lambda_runtime::LambdaEvent;

use super::lanes::{Limits, Run, Settled, attempt_of, is_counted};
use super::source::EventSource;
use super::{BatchError, BatchReport, RecordHandler, RecordReport};
use crate::backoff::{RetrySchedule, VisibilityBackoff};
use crate::dead_letter::DeadLetter;
use crate::error::RecordError;
use crate::record::Record;
use crate::time::{Clock, Deadline, SystemClock};

/// Runs a [`RecordHandler`] over batches of SQS messages, DynamoDB stream records, Kinesis
/// records or Kafka records ([`EventSource`]).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
/// use lambda_idempotency::batch::{BatchProcessor, message};
/// use lambda_runtime::{Context, LambdaEvent};
///
/// let mut event = SqsEvent::default();
/// for (id, body) in [("a", "ok"), ("b", "bad")] {
///     let mut m = SqsMessage::default();
///     m.message_id = Some(id.into());
///     m.body = Some(body.into());
///     event.records.push(m);
/// }
/// let handler = message(|m, _ctx| async move {
///     if m.body.as_deref() == Some("bad") { Err("refused") } else { Ok(()) }
/// });
/// let report = BatchProcessor::new()
///     .process(&LambdaEvent::new(event, Context::default()), &handler)
///     .await
///     .unwrap();
/// let failed: Vec<_> = report.response().batch_item_failures.into_iter().map(|f| f.item_identifier).collect();
/// assert_eq!(failed, ["b"]);
/// # });
/// ```
///
/// In a function:
///
/// ```no_run
/// use lambda_idempotency::batch::{BatchProcessor, message};
/// use lambda_runtime::{service_fn, LambdaEvent, Error};
/// use aws_lambda_events::sqs::SqsEvent;
///
/// # async fn main_() -> Result<(), Error> {
/// let processor = BatchProcessor::new();
/// let handler = message(|_m, _ctx| async { Ok::<_, Error>(()) });
/// lambda_runtime::run(service_fn(|event: LambdaEvent<SqsEvent>| {
///     let (processor, handler) = (&processor, &handler);
///     async move { Ok::<_, Error>(processor.process(&event, handler).await?.response()) }
/// }))
/// .await
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct BatchProcessor {
    pub(super) concurrency: usize,
    pub(super) start_margin: Duration,
    pub(super) stop_margin: Duration,
    pub(super) finish_margin: Duration,
    pub(super) call_timeout: Duration,
    pub(super) strict_order: bool,
    pub(super) max_attempts: Option<u32>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(super) backoff: Option<Arc<VisibilityBackoff>>,
    pub(super) retry: Option<RetrySchedule>,
    pub(super) dead_letter: Option<Arc<DeadLetter>>,
}

impl Default for BatchProcessor {
    fn default() -> Self {
        Self::new()
    }
}

/// Default number of records (or FIFO groups) in flight at once.
pub const DEFAULT_CONCURRENCY: usize = 10;
/// Default time before the deadline after which no record starts.
pub(crate) const DEFAULT_START_MARGIN: Duration = Duration::from_millis(2000);
/// Default time before the deadline at which running handlers are cancelled.
pub(crate) const DEFAULT_STOP_MARGIN: Duration = Duration::from_millis(1500);
/// Default time before the deadline by which every record's own writes and dead-letter sends are
/// done; what is left is for the visibility changes and the response.
pub(crate) const DEFAULT_FINISH_MARGIN: Duration = Duration::from_millis(500);
/// Default bound on each SQS call the processor makes (dead-letter sends, visibility changes).
pub(crate) const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// Time kept before the deadline for the response to reach Lambda.
pub(crate) const RESPONSE_MARGIN: Duration = Duration::from_millis(50);

impl BatchProcessor {
    /// A processor with the defaults: 10 in flight, start margin 2 s, stop margin 1.5 s, finish
    /// margin 500 ms, FIFO failures blocking their message group only, no attempt budget.
    ///
    /// Built with `panic = "abort"`, the first processor of the process logs a warning naming the
    /// fix (`panic = "unwind"` in the release profile): a handler's panic would then end the
    /// invocation and bring back every record of its batch.
    pub fn new() -> Self {
        static WARNED: std::sync::Once = std::sync::Once::new();
        if let Some(warning) = panic_strategy_warning(cfg!(panic = "abort")) {
            WARNED.call_once(|| tracing::warn!("{warning}"));
        }
        Self {
            concurrency: DEFAULT_CONCURRENCY,
            start_margin: DEFAULT_START_MARGIN,
            stop_margin: DEFAULT_STOP_MARGIN,
            finish_margin: DEFAULT_FINISH_MARGIN,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            strict_order: false,
            max_attempts: None,
            clock: Arc::new(SystemClock),
            backoff: None,
            retry: None,
            dead_letter: None,
        }
    }

    /// Sends records to a dead-letter queue and acknowledges them, right where they fail, when
    /// their error is permanent ([`RecordError::is_permanent`]) or their attempt budget
    /// ([`max_attempts`](Self::max_attempts)) is used up. On a FIFO queue the rest of the group
    /// then runs on in the same invocation. If the send fails, the record fails (and blocks its
    /// group) as any other.
    pub fn with_dead_letter(mut self, dead_letter: DeadLetter) -> Self {
        self.dead_letter = Some(Arc::new(dead_letter));
        self
    }

    /// The attempt budget: a record whose handler has failed `attempts` times goes to the
    /// dead-letter queue (see [`with_dead_letter`](Self::with_dead_letter)).
    ///
    /// Attempts are the handler's own failures, counted by the idempotency store under
    /// [`Idempotent`](super::Idempotent); receives of a FIFO record that did not run because an
    /// earlier record of its group failed never count. Without a store the budget falls back to
    /// SQS's `ApproximateReceiveCount`, which does count those receives.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = Some(attempts.max(1));
        self
    }

    /// Spaces out the retries of failed records by setting their visibility timeout (see
    /// [`VisibilityBackoff`]). On a stream, where a record has no visibility, its
    /// [schedule](VisibilityBackoff::schedule) spaces the retries within the invocation instead,
    /// unless [`retry_in_invocation`](Self::retry_in_invocation) sets another.
    pub fn with_backoff(mut self, backoff: VisibilityBackoff) -> Self {
        self.backoff = Some(Arc::new(backoff));
        self
    }

    /// Streams and Kafka (DynamoDB Streams, Kinesis, Kafka; SQS is spaced by
    /// [`with_backoff`](Self::with_backoff)): a record that fails with an error a wait can help
    /// runs again within the invocation, instead of being reported at once, where Lambda would
    /// retry the batch back to back and spend its `MaximumRetryAttempts` and the attempt budget
    /// in seconds:
    ///
    /// - found in progress ([`RecordError::InProgress`]: a crashed invocation's lease, or a live
    ///   one on another shard that shares the key): after that lease ends (and a second more);
    /// - any other failure that is not permanent and not the deadline's (a handler's error, a
    ///   [`TransientError`](crate::error::TransientError), the store unreachable, a failed
    ///   dead-letter send): after `schedule`'s delay for its attempt (the store's count of
    ///   failed attempts, else this invocation's runs of it), with jitter.
    ///
    /// A retry starts only if it can start before the [start margin](Self::start_margin). When
    /// the wait would end later, the record is reported failed (the shard's checkpoint) at that
    /// latest start, not at once, so that Lambda's back-to-back retries come one per invocation.
    /// The rest of its lane (its key, or its shard under
    /// [`strict_order`](Self::strict_order)) waits behind it; other lanes run on. The waits use
    /// the processor's [clock](Self::with_clock). Without a deadline (a context without one)
    /// nothing is retried within the invocation.
    pub fn retry_in_invocation(mut self, schedule: RetrySchedule) -> Self {
        self.retry = Some(schedule);
        self
    }

    /// How many records (standard queues) or message groups (FIFO) run at once (at least 1).
    pub fn concurrency(mut self, limit: usize) -> Self {
        self.concurrency = limit.max(1);
        self
    }

    /// A record does not start when less than `margin` is left before the deadline; it is
    /// reported failed and redelivered.
    pub fn start_margin(mut self, margin: Duration) -> Self {
        self.start_margin = margin;
        self
    }

    /// Handlers still running `margin` before the deadline are cancelled and their records
    /// reported failed. Only the handler's work is cancelled: recording its completion or failure
    /// goes on until the [`finish_margin`](Self::finish_margin).
    pub fn stop_margin(mut self, margin: Duration) -> Self {
        self.stop_margin = margin;
        self
    }

    /// By `margin` before the deadline every record's own writes and dead-letter sends are done
    /// (anything still running is reported failed); the rest is for the visibility changes and
    /// the response, so that the response reaches Lambda before it stops the invocation (which
    /// would redeliver the whole batch).
    pub fn finish_margin(mut self, margin: Duration) -> Self {
        self.finish_margin = margin;
        self
    }

    /// Bounds each SQS call the processor makes itself (dead-letter sends, visibility changes).
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// FIFO queues: stop the whole batch at the first failure (every later record is reported
    /// failed), instead of only the failed record's message group. Streams and Kafka: stop each
    /// shard (partition) at its first failure, its records run one at a time in order, instead
    /// of holding only the failed record's key while other keys run on (Powertools .NET's
    /// `StopOnFirstBatchItemFailure`).
    pub fn strict_order(mut self, strict: bool) -> Self {
        self.strict_order = strict;
        self
    }

    /// Uses another clock for the deadline checks.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Runs `handler` over every record of `event`: an SQS event, a DynamoDB stream event, a
    /// Kinesis event or a Kafka event. The records are those of the event's
    /// [`expand`](EventSource::expand) when it gives one: each user record of a Kinesis
    /// aggregate (KPL) runs, and has its report entry, as a record of its own.
    pub async fn process<E, H>(
        &self,
        event: &LambdaEvent<E>,
        handler: &H,
    ) -> Result<BatchReport<H::Output, E>, BatchError>
    where
        E: EventSource,
        H: RecordHandler<E::Record>,
    {
        // A Kinesis event with KPL aggregates: each user record a record of its own.
        let expanded = event.payload.expand();
        let payload = expanded.as_ref().unwrap_or(&event.payload);
        let records = payload.records();
        let mut owned_ids = Vec::with_capacity(records.len());
        for (index, record) in records.iter().enumerate() {
            if E::is_stream() && record.position().is_none() {
                return Err(BatchError::MissingSequenceNumber {
                    index,
                    kind: <E::Record as Record>::KIND,
                });
            }
            match event.payload.record_id(record) {
                Some(id) if !id.is_empty() => owned_ids.push(id),
                _ => return Err(BatchError::MissingMessageId { index }),
            }
        }
        // Borrowed where the record holds its id (an SQS message): no copy per record.
        let ids: Vec<&str> = owned_ids.iter().map(|id| id.as_ref()).collect();
        let limits = Limits {
            start_margin: self.start_margin,
            stop_margin: self.stop_margin,
            finish_margin: self.finish_margin,
            call_timeout: self.call_timeout,
            max_attempts: self.max_attempts,
            retry: if E::is_stream() {
                self.retry
                    .or_else(|| self.backoff.as_ref().map(|b| b.schedule()))
            } else {
                None
            },
            clock: &self.clock,
            dead_letter: self.dead_letter.as_deref(),
        };
        let run = Run::new(
            limits,
            handler,
            &records,
            &ids,
            Deadline::of(&event.context),
            &event.context.request_id,
        );
        let mut outcomes: Vec<Option<Settled<H::Output>>> =
            (0..records.len()).map(|_| None).collect();
        let lanes = self.lanes::<E, H>(&records, handler, payload.ordered());
        let done: Vec<_> = stream::iter(lanes)
            .map(|(group, indices)| run.lane(indices, group).boxed())
            .buffer_unordered(self.concurrency)
            .collect()
            .await;
        for (i, outcome) in done.into_iter().flatten() {
            outcomes[i] = Some(outcome);
        }
        let reports = outcomes
            .into_iter()
            .enumerate()
            .map(|(index, outcome)| {
                let outcome = outcome.expect("every record has an outcome");
                RecordReport {
                    index,
                    message_id: ids[index].to_owned(),
                    result: outcome.result,
                    dead_lettered: outcome.dead_lettered,
                }
            })
            .collect::<Vec<_>>();
        for r in reports.iter().filter(|r| r.is_reported()) {
            if let Err(e) = &r.result {
                tracing::warn!(message_id = r.message_id, error = %e, "record failed");
            }
        }
        // Never one whose id went to the dead-letter queue (a repeated id).
        let dead: HashSet<&str> = reports
            .iter()
            .filter(|r| r.dead_lettered)
            .map(|r| r.message_id.as_str())
            .collect();
        let failed: Vec<&E::Record> = reports
            .iter()
            .filter(|r| r.is_reported() && !dead.contains(r.message_id.as_str()))
            .map(|r| records[r.index])
            .collect();
        let response = E::response(&failed);
        let report = BatchReport {
            records: reports,
            response,
        };
        if let Some(backoff) = &self.backoff
            && let Some(sqs) = (&event.payload as &dyn Any).downcast_ref::<SqsEvent>()
        {
            let until = run.deadline().map(|d| d.earlier_by(RESPONSE_MARGIN));
            let visibility = self.visibility(backoff, handler, &records, &report);
            backoff
                .change(
                    &sqs.records,
                    &visibility,
                    until,
                    &*self.clock,
                    self.call_timeout,
                )
                .await;
        }
        Ok(report)
    }

    /// The lanes of a batch: each record alone (a standard queue), or, on an ordered source,
    /// the records of each key in order (a FIFO message group; a stream shard's order key),
    /// or the whole batch (each stream shard) under [`strict_order`](Self::strict_order).
    fn lanes<E: EventSource, H: RecordHandler<E::Record>>(
        &self,
        records: &[&E::Record],
        handler: &H,
        ordered: bool,
    ) -> Vec<(Option<String>, Vec<usize>)> {
        if !ordered {
            return (0..records.len()).map(|i| (None, vec![i])).collect();
        }
        let shard = |r: &E::Record| r.position().map(|p| p.shard).unwrap_or_default();
        if self.strict_order {
            return in_order_by(records, |r| (shard(r), String::new()))
                .into_iter()
                .map(|(_, indices)| (None, indices))
                .collect();
        }
        let key = |r: &E::Record| {
            if E::is_stream() {
                handler.order_key(r)
            } else {
                r.order_key().map(Into::into)
            }
            .unwrap_or_default()
        };
        in_order_by(records, |r| (shard(r), key(r)))
            .into_iter()
            .map(|((_, key), indices)| (Some(key), indices))
            .collect()
    }

    /// The visibility timeout (whole seconds) for each reported failure, by index: the backoff
    /// of its attempt (by its receives, for a failure that is not counted), the end of another
    /// invocation's lease, or, for a FIFO record that did not run, that of the record that
    /// blocked it.
    fn visibility<R: Record, H: RecordHandler<R>, T, E: EventSource>(
        &self,
        backoff: &VisibilityBackoff,
        handler: &H,
        records: &[&R],
        report: &BatchReport<T, E>,
    ) -> Vec<(usize, i32)> {
        let now_ms = self.clock.now_ms();
        let mut by_id: HashMap<&str, i32> = HashMap::new();
        let mut out = Vec::new();
        let mut blocked = Vec::new();
        for r in report.failures() {
            let Err(error) = &r.result else { continue };
            match error.cause() {
                RecordError::GroupBlocked { failed, .. } | RecordError::BatchStopped { failed } => {
                    blocked.push((r.index, failed.as_str()));
                }
                _ => {
                    let record = records[r.index];
                    let secs = if is_counted(handler, error) {
                        backoff.visibility(error, attempt_of(handler, error, record), now_ms)
                    } else {
                        let receives = record.receive_count().unwrap_or(1);
                        backoff.visibility_not_counted(error, receives, now_ms)
                    };
                    by_id.insert(r.message_id.as_str(), secs);
                    out.push((r.index, secs));
                }
            }
        }
        for (index, failed) in blocked {
            let secs = by_id.get(failed).copied().unwrap_or_else(|| {
                backoff.visibility(&RecordError::Panicked(String::new()), 1, now_ms)
            });
            out.push((index, secs));
        }
        out.sort_unstable();
        out
    }
}

/// The warning for a function built with `panic = "abort"` (`aborts`), which
/// `cargo lambda build --release`, and so `sam build`, sets when the release profile leaves
/// `panic` out; `None` for one whose panics unwind.
pub(crate) fn panic_strategy_warning(aborts: bool) -> Option<&'static str> {
    aborts.then_some(
        "this function is built with panic = \"abort\": a handler's panic ends the invocation \
         and every record of its batch comes back, instead of that record alone failing. Fix: \
         set panic = \"unwind\" in [profile.release] of the workspace's Cargo.toml \
         (cargo lambda build --release sets abort when the profile leaves it out)",
    )
}

/// The records by `key`, each key's in batch order, keys in order of first appearance.
fn in_order_by<R, K: std::hash::Hash + Eq + Clone>(
    records: &[&R],
    key: impl Fn(&R) -> K,
) -> Vec<(K, Vec<usize>)> {
    let mut groups: Vec<(K, Vec<usize>)> = Vec::new();
    let mut position: HashMap<K, usize> = HashMap::new();
    for (i, record) in records.iter().enumerate() {
        let k = key(record);
        match position.get(&k) {
            Some(&g) => groups[g].1.push(i),
            None => {
                position.insert(k.clone(), groups.len());
                groups.push((k, vec![i]));
            }
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::panic_strategy_warning;

    #[test]
    fn only_an_aborting_build_is_warned_and_the_warning_names_the_fix() {
        assert!(panic_strategy_warning(false).is_none());
        let warning = panic_strategy_warning(true).unwrap();
        assert!(warning.contains("panic = \"abort\""), "{warning}");
        assert!(
            warning.contains("set panic = \"unwind\" in [profile.release]"),
            "{warning}"
        );
    }
}
