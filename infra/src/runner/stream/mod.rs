//! Lambda's stream event source mappings, DynamoDB Streams and Kinesis Data Streams: what
//! Lambda does between a table's stream or a Kinesis data stream and a function.
//!
//! Both are streams of shards read in order with shard iterators, so one machinery serves both
//! (a [`StreamEventSourceMapping`] whose `stream_arn` names a DynamoDB stream or a Kinesis
//! stream, see [`StreamKind`]); only the calls and the record shape differ:
//!
//! | | DynamoDB Streams | Kinesis Data Streams |
//! | --- | --- | --- |
//! | shards | `DescribeStream`; a child waits for its parent | `ListShards`; a child waits for its parent and, after a merge, its adjacent parent |
//! | a record | [`stream_record`] (`aws_lambda_events::dynamodb::EventRecord`) | [`kinesis_record`] (`aws_lambda_events::kinesis::KinesisEventRecord`): `kinesis.{partitionKey, sequenceNumber, data (base64), approximateArrivalTimestamp, kinesisSchemaVersion}`, `eventID` `<shard id>:<sequence number>`, `invokeIdentityArn` (locally the role named after the function) |
//! | `itemIdentifier` of a partial batch response | the record's `dynamodb.SequenceNumber` | the record's `kinesis.sequenceNumber` (not its `eventID`) |
//! | on-failure invocation record | `DDBStreamBatchInfo` | `KinesisBatchInfo` (same fields: `shardId`, `startSequenceNumber`, `endSequenceNumber`, `approximateArrivalOfFirstRecord`, `approximateArrivalOfLastRecord`, `batchSize`, `streamArn`) |
//!
//! At start the mapping lists the stream's shards and then looks for new shards every
//! [`StreamOptions::shard_refresh_interval`]; a child shard waits until its parents are done
//! (read to their end: a closed shard's last `GetRecords` has no next iterator). Each shard is
//! read in order, one batch at a time (`ParallelizationFactor` 1): from `TRIM_HORIZON` or
//! `LATEST` (shards found later from their start), polled every
//! [`StreamOptions::poll_interval`]. Records no filter pattern matches are consumed without an
//! invocation; the others are gathered into batches of up to `BatchSize` within
//! `MaximumBatchingWindowInSeconds`, sent as the Lambda event (`{"Records": [...]}`), and then:
//!
//! | outcome | next |
//! | --- | --- |
//! | success (no `ReportBatchItemFailures`, or no failure reported) | the next batch |
//! | `batchItemFailures` naming records of the batch | checkpoint before the lowest reported sequence number; retry from it |
//! | function error or panic, timeout, an invalid partial response (an identifier empty or not in the batch) | retry the whole batch, or with `BisectBatchOnFunctionError` split it in two and run each half (no retry used) |
//!
//! Retries wait [`StreamOptions::retry_delay`] (short, so tests run fast). After
//! `MaximumRetryAttempts` retries, or once records are older than `MaximumRecordAgeInSeconds`,
//! the batch is given up on: its invocation record ([`invocation_record`]) goes to the
//! `OnFailure` SQS queue (or the records are discarded without one) and the shard moves on.
//! Checkpoints live in memory: a new runner starts from the starting position again.
//!
//! A Kinesis mapping in a test:
//!
//! ```no_run
//! # async fn f(clients: local_aws::Clients, stream_arn: &str) -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use aws_lambda_events::kinesis::KinesisEvent;
//! use aws_lambda_events::streams::KinesisEventResponse;
//! use lambda_runtime::{Error, LambdaEvent};
//! use local_aws::runner::{InProcess, Runner, StreamEventSourceMapping};
//!
//! let mapping = StreamEventSourceMapping::new("consumer", stream_arn, Duration::from_secs(5))
//!     .batch_size(10)
//!     .report_batch_item_failures(true);
//! let running = Runner::from_clients(&clients)
//!     .stream_mapping(mapping, InProcess::new(|event: LambdaEvent<KinesisEvent>| async move {
//!         let _ = event.payload.records; // ... process; report failures by sequence number
//!         Ok::<_, Error>(KinesisEventResponse::default())
//!     }))?
//!     .start(tokio_util::sync::CancellationToken::new());
//! // ... PutRecord(s); then wait until every record written so far is done with:
//! running.wait_stream_caught_up("consumer", Duration::from_secs(20)).await?;
//! let stats = running.stop().await["consumer"];
//! println!("{} processed, {} retries", stats.stream.records_processed, stats.stream.retries);
//! # Ok(()) }
//! ```

mod event;
mod kinesis;
mod shard;
mod source;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

pub use event::{
    Condition, EVENT_VERSION, GivenUp, LastInvocation, ShardRecord, invocation_record,
    stream_event, stream_record,
};
pub use kinesis::{KINESIS_SCHEMA_VERSION, kinesis_record};
pub(crate) use source::Source;
pub use source::StreamKind;

use super::{Counters, Invoker, RunnerError};
use crate::provision::{Provisioned, ProvisionedQueue};
use crate::template::{FilterPattern, Function, StartingPosition};

/// One stream event source mapping (a DynamoDB stream or a Kinesis stream, as `stream_arn`
/// says), resolved: which stream feeds which function, how.
///
/// ```
/// use std::time::Duration;
/// use local_aws::runner::StreamEventSourceMapping;
/// use local_aws::template::StartingPosition;
///
/// let stream = "arn:aws:dynamodb:us-east-1:123456789012:table/jobs/stream/2024-01-01T00:00:00.000";
/// let mapping = StreamEventSourceMapping::new("worker", stream, Duration::from_secs(5))
///     .batch_size(10)
///     .starting_position(StartingPosition::Latest)
///     .maximum_retry_attempts(Some(2))
///     .bisect_batch_on_function_error(true);
/// assert_eq!(mapping.table_name(), Some("jobs"));
/// assert_eq!(mapping.function_arn, "arn:aws:lambda:us-east-1:123456789012:function:worker");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamEventSourceMapping {
    /// `FunctionName`: what the invoker is told to run, and the key of the
    /// [`Stats`](super::Stats).
    pub function_name: String,
    /// The cargo binary of the function (`Metadata.BuildProperties.Binary`), if known.
    pub binary: Option<String>,
    /// The function's ARN (for the context and the invocation record).
    pub function_arn: String,
    /// `MemorySize` (for the context).
    pub memory_size: u32,
    /// The function `Timeout`: the deadline of each invocation.
    pub timeout: Duration,
    /// The stream's ARN (`eventSourceARN`): a DynamoDB stream's or a Kinesis stream's.
    pub stream_arn: String,
    /// `StartingPosition`.
    pub starting_position: StartingPosition,
    /// `BatchSize`.
    pub batch_size: u32,
    /// `MaximumBatchingWindowInSeconds`.
    pub maximum_batching_window: Duration,
    /// `FunctionResponseTypes: [ReportBatchItemFailures]`.
    pub report_batch_item_failures: bool,
    /// `BisectBatchOnFunctionError`.
    pub bisect_batch_on_function_error: bool,
    /// `MaximumRetryAttempts` (`None`: without limit).
    pub maximum_retry_attempts: Option<u32>,
    /// `MaximumRecordAgeInSeconds` (`None`: without limit).
    pub maximum_record_age: Option<Duration>,
    /// `FilterCriteria` (no pattern: every record).
    pub filters: Vec<FilterPattern>,
    /// The `OnFailure` destination.
    pub on_failure: Option<ProvisionedQueue>,
}

impl StreamEventSourceMapping {
    /// A mapping with Lambda's defaults: batch size 100, no batching window, no partial batch
    /// responses, no bisection, retries and record age without limit, no filter, no on-failure
    /// destination; from `TRIM_HORIZON`; 128 MB.
    pub fn new(function_name: &str, stream_arn: &str, timeout: Duration) -> Self {
        Self {
            function_name: function_name.to_owned(),
            binary: None,
            function_arn: crate::arn::function_beside(stream_arn, function_name),
            memory_size: 128,
            timeout,
            stream_arn: stream_arn.to_owned(),
            starting_position: StartingPosition::TrimHorizon,
            batch_size: 100,
            maximum_batching_window: Duration::ZERO,
            report_batch_item_failures: false,
            bisect_batch_on_function_error: false,
            maximum_retry_attempts: None,
            maximum_record_age: None,
            filters: Vec::new(),
            on_failure: None,
        }
    }

    /// The enabled DynamoDB and Kinesis stream event sources of `function`, resolved against
    /// `provisioned`.
    pub fn for_function(
        function: &Function,
        provisioned: &Provisioned,
    ) -> Result<Vec<Self>, RunnerError> {
        let on_failure = |queue: &Option<String>| {
            queue
                .as_ref()
                .map(|q| {
                    provisioned
                        .queues
                        .get(q)
                        .cloned()
                        .ok_or_else(|| RunnerError::QueueNotProvisioned(q.clone()))
                })
                .transpose()
        };
        let mut out = Vec::new();
        for e in function.dynamodb_events.iter().filter(|e| e.enabled) {
            let table = provisioned
                .tables
                .get(&e.table)
                .ok_or_else(|| RunnerError::TableNotProvisioned(e.table.clone()))?;
            let stream_arn = table
                .stream_arn
                .as_deref()
                .ok_or_else(|| RunnerError::NoStream(e.table.clone()))?;
            let mapping = Self::new(&function.name, stream_arn, function.timeout())
                .starting_position(e.starting_position)
                .batch_size(e.batch_size)
                .maximum_batching_window(Duration::from_secs(
                    e.maximum_batching_window_in_seconds.into(),
                ))
                .report_batch_item_failures(e.reports_batch_item_failures())
                .bisect_batch_on_function_error(e.bisect_batch_on_function_error)
                .maximum_retry_attempts(e.maximum_retry_attempts())
                .maximum_record_age(e.maximum_record_age())
                .filters(e.filters.clone())
                .on_failure(on_failure(&e.on_failure_queue)?);
            out.push(mapping.of_function(function, provisioned));
        }
        for e in function.kinesis_events.iter().filter(|e| e.enabled) {
            let stream = provisioned
                .kinesis_streams
                .get(&e.stream)
                .ok_or_else(|| RunnerError::KinesisStreamNotProvisioned(e.stream.clone()))?;
            let mapping = Self::new(&function.name, &stream.arn, function.timeout())
                .starting_position(e.starting_position)
                .batch_size(e.batch_size)
                .maximum_batching_window(Duration::from_secs(
                    e.maximum_batching_window_in_seconds.into(),
                ))
                .report_batch_item_failures(e.reports_batch_item_failures())
                .bisect_batch_on_function_error(e.bisect_batch_on_function_error)
                .maximum_retry_attempts(e.maximum_retry_attempts())
                .maximum_record_age(e.maximum_record_age())
                .filters(e.filters.clone())
                .on_failure(on_failure(&e.on_failure_queue)?);
            out.push(mapping.of_function(function, provisioned));
        }
        Ok(out)
    }

    /// The function's memory, binary and ARN.
    fn of_function(mut self, function: &Function, provisioned: &Provisioned) -> Self {
        self.memory_size = function.memory_size;
        self.binary = function.binary.clone();
        self.function_arn = provisioned.function_arn(&function.name);
        self
    }

    /// Which service the stream belongs to (`None`: the ARN names neither).
    pub fn kind(&self) -> Option<StreamKind> {
        StreamKind::of_arn(&self.stream_arn)
    }

    /// The table of the stream (from its ARN, `...:table/NAME/stream/LABEL`).
    pub fn table_name(&self) -> Option<&str> {
        crate::arn::Arn::parse(&self.stream_arn).ok()?.table_name()
    }

    /// Whether a record (as the event carries it) passes the filters.
    pub fn matches(&self, record: &serde_json::Value) -> bool {
        self.filters.is_empty() || self.filters.iter().any(|f| f.matches(record))
    }

    /// Sets `StartingPosition`.
    pub fn starting_position(mut self, position: StartingPosition) -> Self {
        self.starting_position = position;
        self
    }

    /// Sets `BatchSize` (at least 1).
    pub fn batch_size(mut self, n: u32) -> Self {
        self.batch_size = n.max(1);
        self
    }

    /// Sets the batching window.
    pub fn maximum_batching_window(mut self, window: Duration) -> Self {
        self.maximum_batching_window = window;
        self
    }

    /// Sets `ReportBatchItemFailures`.
    pub fn report_batch_item_failures(mut self, on: bool) -> Self {
        self.report_batch_item_failures = on;
        self
    }

    /// Sets `BisectBatchOnFunctionError`.
    pub fn bisect_batch_on_function_error(mut self, on: bool) -> Self {
        self.bisect_batch_on_function_error = on;
        self
    }

    /// Sets `MaximumRetryAttempts` (`None`: without limit).
    pub fn maximum_retry_attempts(mut self, n: Option<u32>) -> Self {
        self.maximum_retry_attempts = n;
        self
    }

    /// Sets `MaximumRecordAgeInSeconds` (`None`: without limit; any duration locally, so
    /// tests need not wait a minute).
    pub fn maximum_record_age(mut self, age: Option<Duration>) -> Self {
        self.maximum_record_age = age;
        self
    }

    /// Sets the filter patterns.
    pub fn filters(mut self, filters: Vec<FilterPattern>) -> Self {
        self.filters = filters;
        self
    }

    /// Sets the `OnFailure` destination.
    pub fn on_failure(mut self, queue: Option<ProvisionedQueue>) -> Self {
        self.on_failure = queue;
        self
    }

    /// Sets the function timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// How the local stream pollers pace themselves (no Lambda setting has these).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamOptions {
    /// Between reads of a shard that had nothing new (Lambda: 4 reads a second).
    pub poll_interval: Duration,
    /// Between looks for new shards.
    pub shard_refresh_interval: Duration,
    /// The delay before the first retry of a failed batch; it doubles per retry.
    pub retry_base_delay: Duration,
    /// The longest delay between retries.
    pub retry_max_delay: Duration,
}

impl Default for StreamOptions {
    fn default() -> Self {
        Self {
            poll_interval: Duration::from_millis(250),
            shard_refresh_interval: Duration::from_secs(5),
            retry_base_delay: Duration::from_millis(100),
            retry_max_delay: Duration::from_secs(2),
        }
    }
}

impl StreamOptions {
    /// The delay before retry number `retry` (1 = the first): `base * 2^(retry - 1)`, at most
    /// the maximum.
    ///
    /// ```
    /// use std::time::Duration;
    /// use local_aws::runner::StreamOptions;
    /// let o = StreamOptions::default();
    /// assert_eq!(o.retry_delay(1), Duration::from_millis(100));
    /// assert_eq!(o.retry_delay(3), Duration::from_millis(400));
    /// assert_eq!(o.retry_delay(60), Duration::from_secs(2));
    /// ```
    pub fn retry_delay(&self, retry: u32) -> Duration {
        let factor = 1u32 << retry.saturating_sub(1).min(20);
        self.retry_base_delay
            .saturating_mul(factor)
            .min(self.retry_max_delay)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How far a shard got.
#[derive(Default)]
pub(super) struct ShardProgress {
    /// When the last read that found nothing new, with nothing left to process, started.
    at_tip_since: Mutex<Option<Instant>>,
    /// The shard is closed and every record of it done with.
    finished: AtomicBool,
    done: Notify,
}

impl ShardProgress {
    fn at_tip(&self, read_started: Instant) {
        *lock(&self.at_tip_since) = Some(read_started);
    }

    fn finish(&self) {
        self.finished.store(true, Ordering::SeqCst);
        self.done.notify_waiters();
    }

    fn is_finished(&self) -> bool {
        self.finished.load(Ordering::SeqCst)
    }

    async fn wait_finished(&self) {
        loop {
            let notified = self.done.notified();
            if self.is_finished() {
                return;
            }
            notified.await;
        }
    }

    fn caught_up_since(&self, t: Instant) -> bool {
        self.is_finished() || lock(&self.at_tip_since).is_some_and(|at| at >= t)
    }
}

/// How far a stream mapping got: what [`RunningRunner::wait_stream_caught_up`] reads.
///
/// [`RunningRunner::wait_stream_caught_up`]: super::RunningRunner::wait_stream_caught_up
#[derive(Default)]
pub(super) struct StreamProgress {
    /// When the last complete look for shards started.
    described_at: Mutex<Option<Instant>>,
    shards: Mutex<BTreeMap<String, Arc<ShardProgress>>>,
    /// Wakes the mapping to look for shards now.
    look_now: Notify,
}

impl StreamProgress {
    /// Asks the mapping to look for new shards now rather than at its next refresh.
    pub(super) fn look_for_shards(&self) {
        self.look_now.notify_one();
    }

    /// The shards that have not read and processed everything written before `t` (an unknown
    /// list of shards counts as `"(shards)"`); empty when the mapping caught up.
    pub(super) fn lagging_since(&self, t: Instant) -> Vec<String> {
        if !lock(&self.described_at).is_some_and(|at| at >= t) {
            return vec!["(shards)".to_owned()];
        }
        lock(&self.shards)
            .iter()
            .filter(|(_, p)| !p.caught_up_since(t))
            .map(|(id, _)| id.clone())
            .collect()
    }
}

/// Everything the pollers of one stream mapping share.
pub(super) struct MappingContext {
    pub(super) mapping: StreamEventSourceMapping,
    pub(super) invoker: Arc<dyn Invoker>,
    pub(super) source: Source,
    pub(super) sqs: aws_sdk_sqs::Client,
    pub(super) counters: Arc<Counters>,
    pub(super) options: StreamOptions,
    pub(super) progress: Arc<StreamProgress>,
}

impl MappingContext {
    /// Whether the stream's table lists it (a warning when it does not: the table's stream was
    /// replaced, or the ARN is wrong). DynamoDB streams only.
    async fn check_listed(&self) {
        let m = &self.mapping;
        match self.source.listed(&m.stream_arn).await {
            Ok(Some(false)) => {
                tracing::warn!(function = %m.function_name, stream = %m.stream_arn,
                    "ListStreams does not list the stream of the mapping for its table");
            }
            Ok(_) => {}
            Err(e) => {
                Counters::add(&self.counters.receive_errors, 1);
                tracing::warn!(function = %m.function_name, "ListStreams failed: {e}");
            }
        }
    }
}

/// Starts a stream mapping: it finds the shards and runs one poller per shard until `shutdown`.
/// The task ends after its shards' pollers.
pub(super) fn spawn_mapping(
    ctx: MappingContext,
    shutdown: &CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let ctx = Arc::new(ctx);
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        ctx.check_listed().await;
        let mut shard_tasks = Vec::new();
        let mut first_look = true;
        while !shutdown.is_cancelled() {
            let started = Instant::now();
            match ctx.source.shards(&ctx.mapping.stream_arn).await {
                Ok(shards) => {
                    let known: HashMap<String, Arc<ShardProgress>> = lock(&ctx.progress.shards)
                        .iter()
                        .map(|(k, v)| (k.clone(), Arc::clone(v)))
                        .collect();
                    for s in shards {
                        let id = s.id;
                        if known.contains_key(&id) {
                            continue;
                        }
                        let progress = Arc::new(ShardProgress::default());
                        lock(&ctx.progress.shards).insert(id.clone(), Arc::clone(&progress));
                        Counters::add(&ctx.counters.shards, 1);
                        // A child waits for its parents (those the mapping knows): the shard
                        // split (or the two merged) into it.
                        let parents: Vec<Arc<ShardProgress>> = s
                            .parents
                            .iter()
                            .filter_map(|p| lock(&ctx.progress.shards).get(p).cloned())
                            .collect();
                        let start = match (first_look, ctx.mapping.starting_position) {
                            (true, StartingPosition::Latest) => StartingPosition::Latest,
                            _ => StartingPosition::TrimHorizon,
                        };
                        let shard = shard::Shard {
                            ctx: Arc::clone(&ctx),
                            shard_id: id,
                            progress,
                            start,
                        };
                        let shutdown = shutdown.clone();
                        shard_tasks.push(tokio::spawn(async move {
                            for parent in parents {
                                tokio::select! {
                                    _ = shutdown.cancelled() => return,
                                    _ = parent.wait_finished() => {}
                                }
                            }
                            shard.run(shutdown).await;
                        }));
                    }
                    first_look = false;
                    *lock(&ctx.progress.described_at) = Some(started);
                }
                Err(e) => {
                    Counters::add(&ctx.counters.receive_errors, 1);
                    tracing::warn!(function = %ctx.mapping.function_name,
                        stream = %ctx.mapping.stream_arn, "listing the shards ({}) failed: {e}",
                        ctx.source.name());
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(ctx.options.shard_refresh_interval) => {}
                _ = ctx.progress.look_now.notified() => {}
            }
        }
        for task in shard_tasks {
            if let Err(e) = task.await
                && e.is_panic()
            {
                tracing::error!("a shard poller panicked: {e}");
            }
        }
    })
}
