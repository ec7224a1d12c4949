//! A stream shard simulated on a test's clock, and Lambda's event source mapping over it: what a
//! test needs to run a stream consumer (DynamoDB Streams, Kinesis, Kafka) through the deliveries
//! Lambda makes, as [`sim_queue`](super::sim_queue) does for SQS.
//!
//! [`SimShard`] is one shard (one partition) of records, each with its sequence number (offset)
//! and the time it arrived. [`drain`] invokes a function with a batch from the shard's checkpoint,
//! one invocation at a time (Lambda runs one batch of a shard at a time), until every record is
//! done or gone, as Lambda's mapping with [`MappingSettings`] does:
//!
//! - the **checkpoint** moves as the partial batch response says: to the lowest sequence number
//!   it names (the records before it are done), past the batch when it names none;
//! - a **function error** (an error returned, a crash: the invocation lost with no response, or
//!   a response after the deadline) fails the whole batch;
//! - **back-to-back retries**: the next invocation starts [`RETRY_GAP`] after the last ended;
//! - `MaximumRetryAttempts`: a batch whose retries from the same checkpoint pass it is sent to
//!   the **on-failure destination** (its metadata only: the records are lost) and the checkpoint
//!   moves past it; retries count from the last time the checkpoint moved;
//! - `MaximumRecordAgeInSeconds`: a record older than it is sent there before it is delivered;
//! - `BisectBatchOnFunctionError`: after a function error the batch is split in two (the next
//!   batch is half as large), without counting a retry.
//!
//! Each invocation's deadline is [`MappingSettings::function_timeout`] from its start on the
//! clock; the clock moves only as the function's own waits move it (a
//! [`ManualClock`] given to the processor). [`Drained::problems`]
//! says what went wrong for records that are not at fault: not done, sent to the on-failure
//! destination, dead-lettered, or a function error that was not a crash.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use lambda_idempotency::prelude::*;
//! use lambda_idempotency::store::InMemoryBackend;
//! use lambda_idempotency::test_util::InMemorySqs;
//! use lambda_idempotency::test_util::fault::Crash;
//! use lambda_idempotency::test_util::sim_stream::{MappingSettings, SimShard, drain, failed_sequences};
//! use lambda_idempotency::time::{Clock, ManualClock};
//! use aws_lambda_events::kinesis::KinesisEvent;
//! use serde_json::json;
//! use std::sync::Arc;
//!
//! async fn flaky(_body: serde_json::Value, ctx: RecordContext) -> Result<(), Error> {
//!     // Fails its first attempt: retried within the invocation, after the backoff's 2 s.
//!     if ctx.attempt == 1 { Err("the ledger is busy".into()) } else { Ok(()) }
//! }
//!
//! let (clock, sqs) = (Arc::new(ManualClock::starting_now()), InMemorySqs::new());
//! let consumer = Consumer::builder(Arc::new(InMemoryBackend::default()))
//!     .source::<KinesisEvent>()
//!     .with_in_memory_sqs(&sqs)
//!     .map_engine(|engine| engine.with_clock(clock.clone()))
//!     .map_processor(|processor| processor.with_clock(clock.clone()))
//!     .idempotent(json(flaky));
//! let shard = SimShard::new([("acct-1", json!({"id": 1}))], clock.now_ms());
//! let consumer = &consumer;
//! let drained = drain(shard, MappingSettings::default(), &clock, &Crash::default(), &sqs, |batch| async move {
//!     let response = consumer.handle(batch.kinesis()).await.map_err(|e| e.to_string())?;
//!     Ok(failed_sequences(response.batch_item_failures.iter().map(|f| f.item_identifier.as_deref())))
//! })
//! .await;
//! assert!(drained.problems().is_empty(), "{:?}", drained.problems());
//! assert_eq!(drained.invocations, 1);
//! # });
//! ```

use std::future::Future;
use std::time::Duration;

use lambda_runtime::Context;
use serde_json::Value;

use super::InMemorySqs;
use super::StreamEventBuilder;
use super::fault::Crash;
use crate::time::{Clock, ManualClock, millis};

/// Invocations after which a drain counts as never ending.
pub const MAX_INVOCATIONS: u32 = 1_000;
/// The time between the end of an invocation and Lambda's next one of the shard.
pub const RETRY_GAP: Duration = Duration::from_millis(200);

/// The settings of the simulated event source mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MappingSettings {
    /// `BatchSize`.
    pub batch_size: usize,
    /// `MaximumRetryAttempts` (`None`: -1, unbounded).
    pub maximum_retry_attempts: Option<u32>,
    /// `MaximumRecordAgeInSeconds` (`None`: -1, unbounded).
    pub maximum_record_age: Option<Duration>,
    /// `BisectBatchOnFunctionError`.
    pub bisect_on_function_error: bool,
    /// The function's `Timeout`.
    pub function_timeout: Duration,
}

impl Default for MappingSettings {
    /// The examples' mapping (`examples/*/template.yaml`): batches of 100, retries unbounded,
    /// records kept for at most an hour, bisection on, a 30 s function.
    fn default() -> Self {
        Self {
            batch_size: 100,
            maximum_retry_attempts: None,
            maximum_record_age: Some(Duration::from_secs(3600)),
            bisect_on_function_error: true,
            function_timeout: Duration::from_secs(30),
        }
    }
}

#[derive(Debug, Clone)]
struct ShardRecord {
    sequence: u128,
    key: String,
    payload: Value,
    arrived_at: i64,
}

/// One shard of records; see the module docs.
#[derive(Debug, Clone)]
pub struct SimShard {
    records: Vec<ShardRecord>,
    /// The index of the first record not done (the checkpoint).
    checkpoint: usize,
}

impl SimShard {
    /// A shard holding `records` (`(order key, payload)`), sequence numbers from 100, all
    /// arrived at `now_ms`.
    pub fn new<K: Into<String>>(
        records: impl IntoIterator<Item = (K, Value)>,
        now_ms: i64,
    ) -> Self {
        Self {
            records: records
                .into_iter()
                .zip(100..)
                .map(|((key, payload), sequence)| ShardRecord {
                    sequence,
                    key: key.into(),
                    payload,
                    arrived_at: now_ms,
                })
                .collect(),
            checkpoint: 0,
        }
    }

    /// True when every record is done or gone.
    pub fn drained(&self) -> bool {
        self.checkpoint >= self.records.len()
    }

    /// The records from `from`, at most `size`, as an event builder.
    fn batch(&self, size: usize, context: Context) -> (StreamEventBuilder, Vec<u128>) {
        let mut events = StreamEventBuilder::new().context(context);
        let mut sequences = Vec::new();
        for r in self.records.iter().skip(self.checkpoint).take(size) {
            events = events
                .record(r.key.clone(), r.payload.clone())
                .at(r.sequence);
            sequences.push(r.sequence);
        }
        (events, sequences)
    }
}

/// Records sent to the on-failure destination: Lambda sends the batch's metadata (its first and
/// last sequence numbers), never the records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discarded {
    /// The first sequence number of the batch.
    pub first: u128,
    /// The last.
    pub last: u128,
    /// Why: `MaximumRetryAttempts` or `MaximumRecordAgeInSeconds`.
    pub reason: &'static str,
}

/// How a shard's drain went.
#[derive(Debug)]
#[non_exhaustive]
pub struct Drained {
    /// The shard, once drained (or once [`MAX_INVOCATIONS`] were made).
    pub shard: SimShard,
    /// The function's invocations.
    pub invocations: u32,
    /// Those that crashed ([`Crash`] raised): Lambda saw no answer.
    pub crashes: u32,
    /// The request ids of those that crashed (`invocation-<n>`, as the context's `request_id`).
    pub crashed: Vec<String>,
    /// The errors the function returned, and responses after the deadline.
    pub errors: Vec<String>,
    /// What Lambda sent to the on-failure destination.
    pub discarded: Vec<Discarded>,
    /// What the function moved to its dead-letter queue: `id: reason`.
    pub dead_letters: Vec<String>,
    /// When each invocation started, epoch ms on the clock.
    pub started_at: Vec<i64>,
}

impl Drained {
    /// What went wrong: not drained; a batch sent to the on-failure destination; a record the
    /// function dead-lettered; an error the function returned (or a response after its deadline).
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if !self.shard.drained() {
            problems.push(format!(
                "not drained after {} invocations",
                self.invocations
            ));
        }
        for d in &self.discarded {
            problems.push(format!(
                "records {}..={} sent to the on-failure destination ({}): lost",
                d.first, d.last, d.reason
            ));
        }
        for dead in &self.dead_letters {
            problems.push(format!("dead-lettered by the function: {dead}"));
        }
        for error in &self.errors {
            problems.push(format!("function error: {error}"));
        }
        problems
    }
}

/// The sequence numbers a partial batch response names, from its item identifiers: the sequence
/// number itself (Kinesis, DynamoDB Streams) or the offset after the last `@` (Kafka's
/// `topic-partition@offset`). `None` (an identifier missing) or one that is neither stands for
/// the whole batch: Lambda fails a batch whose response it cannot read.
pub fn failed_sequences<'a>(identifiers: impl IntoIterator<Item = Option<&'a str>>) -> Vec<u128> {
    identifiers
        .into_iter()
        .map(|id| {
            id.and_then(|id| id.rsplit('@').next())
                .and_then(|s| s.parse().ok())
                .unwrap_or(0)
        })
        .collect()
}

/// Lambda's event source mapping over `shard` with `settings`: invokes `function` with each batch
/// (its deadline [`MappingSettings::function_timeout`] away on `clock`) until the shard drains or
/// [`MAX_INVOCATIONS`]; see the module docs. `function` answers the sequence numbers its partial
/// batch response names ([`failed_sequences`]), or an error (the whole batch fails). An
/// invocation that crashes (`crash` raised) is dropped and fails whole. `sqs` is the function's
/// in-memory SQS (its dead-letter queue), cleared before each invocation; `crash` is reset
/// before each (a new process).
pub async fn drain<F, Fut>(
    mut shard: SimShard,
    settings: MappingSettings,
    clock: &ManualClock,
    crash: &Crash,
    sqs: &InMemorySqs,
    mut function: F,
) -> Drained
where
    F: FnMut(StreamEventBuilder) -> Fut,
    Fut: Future<Output = Result<Vec<u128>, String>>,
{
    let mut drained = Drained {
        shard: shard.clone(),
        invocations: 0,
        crashes: 0,
        crashed: Vec::new(),
        errors: Vec::new(),
        discarded: Vec::new(),
        dead_letters: Vec::new(),
        started_at: Vec::new(),
    };
    let mut retries = 0;
    let mut size = settings.batch_size.max(1);
    while drained.invocations < MAX_INVOCATIONS && !shard.drained() {
        let now = clock.now_ms();
        // Records past the maximum age are sent to the on-failure destination unread.
        if let Some(age) = settings.maximum_record_age {
            let first = shard.checkpoint;
            while shard
                .records
                .get(shard.checkpoint)
                .is_some_and(|r| now - r.arrived_at > millis(age))
            {
                shard.checkpoint += 1;
            }
            if shard.checkpoint > first {
                drained.discarded.push(Discarded {
                    first: shard.records[first].sequence,
                    last: shard.records[shard.checkpoint - 1].sequence,
                    reason: "MaximumRecordAgeInSeconds",
                });
                retries = 0;
                continue;
            }
        }
        drained.invocations += 1;
        drained.started_at.push(now);
        crash.reset();
        sqs.clear();
        let mut context = Context::default();
        let request_id = format!("invocation-{}", drained.invocations);
        context.request_id = request_id.clone();
        let deadline = now + millis(settings.function_timeout);
        context.deadline = deadline as u64;
        let (events, sequences) = shard.batch(size, context);
        let answered = tokio::select! {
            biased;
            () = crash.raised() => None,
            response = function(events) => Some(response),
        };
        drained.dead_letters.extend(
            sqs.dead_letters()
                .into_iter()
                .map(|d| format!("{}: {}", d.source_message_id, d.reason)),
        );
        let ended = clock.now_ms();
        let failed = match answered {
            Some(_) if ended > deadline => {
                drained.errors.push(format!(
                    "invocation {}: answered {} ms after its deadline",
                    drained.invocations,
                    ended - deadline
                ));
                None
            }
            Some(Ok(failed)) if !crash.is_raised() => Some(failed),
            Some(Err(e)) if !crash.is_raised() => {
                drained
                    .errors
                    .push(format!("invocation {}: {e}", drained.invocations));
                None
            }
            _ => {
                drained.crashes += 1;
                drained.crashed.push(request_id);
                None
            }
        };
        let batch_end = shard.checkpoint + sequences.len();
        match failed {
            Some(failed) => {
                let lowest = failed.iter().min().copied();
                let done = match lowest {
                    None => sequences.len(),
                    // A sequence number not of the batch fails it whole.
                    Some(s) => sequences.iter().position(|&q| q == s).unwrap_or(0),
                };
                size = settings.batch_size.max(1);
                if done > 0 {
                    shard.checkpoint += done;
                    retries = 0;
                } else {
                    retries += 1;
                }
            }
            None if settings.bisect_on_function_error && sequences.len() > 1 => {
                size = sequences.len().div_ceil(2);
            }
            None => retries += 1,
        }
        if retries > 0
            && settings
                .maximum_retry_attempts
                .is_some_and(|max| retries > max)
        {
            drained.discarded.push(Discarded {
                first: shard.records[shard.checkpoint].sequence,
                last: shard.records[batch_end - 1].sequence,
                reason: "MaximumRetryAttempts",
            });
            shard.checkpoint = batch_end;
            retries = 0;
        }
        clock.set(clock.now_ms().max(ended) + millis(RETRY_GAP));
    }
    drained.shard = shard;
    drained
}
