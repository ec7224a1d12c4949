//! One shard of a stream mapping: read in order, batch, invoke, retry, bisect, give up.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio_util::sync::CancellationToken;

use super::event::{
    Condition, GivenUp, LastInvocation, ShardRecord, invocation_record, stream_event,
};
use super::source::Position;
use super::{MappingContext, ShardProgress};
use crate::runner::event::failed_items;
use crate::runner::{Counters, Invocation};
use crate::template::StartingPosition;

/// How one invocation of a batch ended.
enum Outcome {
    /// Every record processed.
    Success,
    /// The records before this position processed; this one (the lowest reported failure)
    /// and the rest to retry.
    FailedFrom(usize),
    /// The whole batch failed (an error, a panic, a timeout, an invalid response).
    Failure,
}

/// A shard being processed.
pub(super) struct Shard {
    pub(super) ctx: Arc<MappingContext>,
    pub(super) shard_id: String,
    pub(super) progress: Arc<ShardProgress>,
    pub(super) start: StartingPosition,
}

impl Shard {
    fn counters(&self) -> &Counters {
        &self.ctx.counters
    }

    async fn pause(&self, shutdown: &CancellationToken, delay: Duration) {
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = tokio::time::sleep(delay) => {}
        }
    }

    /// A shard iterator at `position`. A position the stream no longer has (trimmed after its
    /// retention) restarts at the oldest record there is, as Lambda does; the records in
    /// between are lost, and said so.
    async fn iterator(&self, position: &mut Position) -> Result<Option<String>, String> {
        let m = &self.ctx.mapping;
        match self
            .ctx
            .source
            .iterator(&m.stream_arn, &self.shard_id, position)
            .await
        {
            Ok(it) => Ok(it),
            Err(e) if e.trimmed => {
                tracing::error!(function = %m.function_name, shard = %self.shard_id,
                    "{position:?} is past the stream's retention: records lost, reading from TRIM_HORIZON");
                *position = Position::Start(StartingPosition::TrimHorizon);
                Err(e.message)
            }
            Err(e) => Err(e.message),
        }
    }

    /// Reads the shard in order until it is closed and done, or until `shutdown`. One batch at a
    /// time: the next is not read into a batch before the last one is done with.
    pub(super) async fn run(self, shutdown: CancellationToken) {
        let m = &self.ctx.mapping;
        let options = &self.ctx.options;
        let mut position = Position::Start(self.start);
        let mut iterator: Option<String> = None;
        let mut ended = false;
        let mut buffer: VecDeque<ShardRecord> = VecDeque::new();
        let mut gathering_since: Option<Instant> = None;
        while !shutdown.is_cancelled() {
            let mut read_nothing = false;
            if !ended && buffer.len() < m.batch_size as usize {
                if iterator.is_none() {
                    match self.iterator(&mut position).await {
                        Ok(Some(it)) => iterator = Some(it),
                        Ok(None) => ended = true,
                        Err(e) => {
                            Counters::add(&self.counters().receive_errors, 1);
                            tracing::warn!(function = %m.function_name, shard = %self.shard_id,
                                "GetShardIterator failed: {e}");
                            self.pause(&shutdown, options.poll_interval).await;
                            continue;
                        }
                    }
                }
                if let Some(it) = iterator.take() {
                    let started = Instant::now();
                    match self.ctx.source.records(m, &self.shard_id, it).await {
                        Ok(page) => {
                            iterator = page.next;
                            ended = iterator.is_none();
                            let read = page.records.len() + page.skipped;
                            read_nothing = read == 0;
                            Counters::add(&self.counters().records_read, read);
                            if page.skipped > 0 {
                                tracing::warn!(function = %m.function_name, shard = %self.shard_id,
                                    skipped = page.skipped, "records without a sequence number were skipped");
                            }
                            for r in page.records {
                                position = Position::After(r.sequence_number.clone());
                                if m.matches(&r.event) {
                                    gathering_since.get_or_insert_with(Instant::now);
                                    buffer.push_back(r);
                                } else {
                                    Counters::add(&self.counters().records_filtered, 1);
                                }
                            }
                            if read_nothing && buffer.is_empty() {
                                self.progress.at_tip(started);
                            }
                        }
                        Err(e) => {
                            // An expired or trimmed iterator is fetched again from the position.
                            Counters::add(&self.counters().receive_errors, 1);
                            tracing::warn!(function = %m.function_name, shard = %self.shard_id,
                                "GetRecords failed: {e}");
                            self.pause(&shutdown, options.poll_interval).await;
                            continue;
                        }
                    }
                }
            }
            if buffer.is_empty() {
                if ended {
                    self.progress.finish();
                    tracing::debug!(function = %m.function_name, shard = %self.shard_id, "shard done");
                    return;
                }
                if read_nothing {
                    self.pause(&shutdown, options.poll_interval).await;
                }
                continue;
            }
            // Gather a full batch within the batching window (a closed shard has no more).
            let full = buffer.len() >= m.batch_size as usize;
            let window_left = gathering_since
                .map(|since| m.maximum_batching_window.saturating_sub(since.elapsed()))
                .unwrap_or_default();
            if !full && !ended && !window_left.is_zero() {
                if read_nothing {
                    self.pause(&shutdown, window_left.min(options.poll_interval))
                        .await;
                }
                continue;
            }
            let take = buffer.len().min(m.batch_size as usize);
            let batch: Vec<ShardRecord> = buffer.drain(..take).collect();
            gathering_since = (!buffer.is_empty()).then(Instant::now);
            self.process(batch, &shutdown).await;
        }
    }

    /// Processes one batch until it is done with: every record processed or given up on. A
    /// failed batch is retried (after a short delay) from its first failed record; with
    /// `BisectBatchOnFunctionError`, a batch that failed as a whole is split in two first, which
    /// uses no retry.
    async fn process(&self, batch: Vec<ShardRecord>, shutdown: &CancellationToken) {
        let m = &self.ctx.mapping;
        let c = self.counters();
        let mut pending = VecDeque::from([batch]);
        while let Some(mut records) = pending.pop_front() {
            let (mut retries, mut invocations) = (0u32, 0u32);
            let mut last: Option<LastInvocation> = None;
            loop {
                if shutdown.is_cancelled() {
                    return;
                }
                if let Some(max_age) = m.maximum_record_age {
                    let now = SystemTime::now();
                    let expired = records.iter().take_while(|r| r.age(now) > max_age).count();
                    if expired > 0 {
                        let old: Vec<_> = records.drain(..expired).collect();
                        self.give_up(
                            &old,
                            Condition::RecordAgeExceeded,
                            invocations,
                            last.as_ref(),
                        )
                        .await;
                        if records.is_empty() {
                            break;
                        }
                    }
                }
                if invocations > 0 {
                    Counters::add(&c.retries, 1);
                }
                let (outcome, invocation) = self.invoke(&records).await;
                invocations += 1;
                last = Some(invocation);
                match outcome {
                    Outcome::Success => {
                        Counters::add(&c.records_processed, records.len());
                        break;
                    }
                    Outcome::FailedFrom(first_failed) => {
                        Counters::add(&c.records_processed, first_failed);
                        records.drain(..first_failed);
                    }
                    Outcome::Failure if m.bisect_batch_on_function_error && records.len() > 1 => {
                        Counters::add(&c.bisections, 1);
                        let second = records.split_off(records.len() / 2);
                        pending.push_front(second);
                        pending.push_front(records);
                        break;
                    }
                    Outcome::Failure => {}
                }
                retries += 1;
                if m.maximum_retry_attempts.is_some_and(|max| retries > max) {
                    self.give_up(
                        &records,
                        Condition::RetryAttemptsExhausted,
                        invocations,
                        last.as_ref(),
                    )
                    .await;
                    break;
                }
                self.pause(shutdown, self.ctx.options.retry_delay(retries))
                    .await;
            }
        }
    }

    /// Invokes the function with `records`; also returns what the invocation record needs.
    async fn invoke(&self, records: &[ShardRecord]) -> (Outcome, LastInvocation) {
        let m = &self.ctx.mapping;
        let c = self.counters();
        Counters::add(&c.batches, 1);
        Counters::add(&c.records_received, records.len());
        let request_id = uuid::Uuid::new_v4().to_string();
        let invocation = Invocation {
            function_name: m.function_name.clone(),
            binary: m.binary.clone(),
            function_arn: m.function_arn.clone(),
            memory_size: m.memory_size,
            request_id: request_id.clone(),
            deadline: SystemTime::now() + m.timeout,
            payload: stream_event(records),
        };
        let last = |function_error| LastInvocation {
            request_id: request_id.clone(),
            function_error,
        };
        tracing::debug!(function = %m.function_name, shard = %self.shard_id, %request_id,
            records = records.len(), "invoking");
        match tokio::time::timeout(m.timeout, self.ctx.invoker.invoke(invocation)).await {
            Err(_) => {
                Counters::add(&c.timeouts, 1);
                tracing::warn!(function = %m.function_name, %request_id, timeout = ?m.timeout,
                    "invocation timed out; the batch will be retried");
                (Outcome::Failure, last(true))
            }
            Ok(Err(e)) => {
                Counters::add(&c.invocation_errors, 1);
                tracing::warn!(function = %m.function_name, %request_id,
                    "invocation failed, the batch will be retried: {e}");
                (Outcome::Failure, last(true))
            }
            Ok(Ok(_)) if !m.report_batch_item_failures => (Outcome::Success, last(false)),
            Ok(Ok(response)) => {
                let ids: Vec<&str> = records.iter().map(|r| r.sequence_number.as_str()).collect();
                match failed_items(&response, &ids) {
                    Ok(failed) => match failed.first() {
                        None => (Outcome::Success, last(false)),
                        Some(&first) => {
                            Counters::add(&c.records_reported_failed, failed.len());
                            (Outcome::FailedFrom(first), last(false))
                        }
                    },
                    Err(e) => {
                        Counters::add(&c.invalid_responses, 1);
                        tracing::warn!(function = %m.function_name, %request_id,
                            "invalid partial batch response, the batch will be retried: {e}");
                        (Outcome::Failure, last(false))
                    }
                }
            }
        }
    }

    /// Sends the invocation record of `records` to the on-failure queue (or discards them
    /// without one); the shard then moves on.
    async fn give_up(
        &self,
        records: &[ShardRecord],
        condition: Condition,
        invocations: u32,
        last: Option<&LastInvocation>,
    ) {
        let m = &self.ctx.mapping;
        let c = self.counters();
        Counters::add(&c.batches_given_up, 1);
        Counters::add(&c.records_given_up, records.len());
        let record = invocation_record(&GivenUp {
            records,
            shard_id: &self.shard_id,
            stream_arn: &m.stream_arn,
            function_arn: &m.function_arn,
            condition,
            approximate_invoke_count: invocations,
            last,
        });
        let Some(queue) = &m.on_failure else {
            tracing::error!(function = %m.function_name, shard = %self.shard_id,
                condition = condition.as_str(), records = records.len(),
                "records discarded (no on-failure destination): {record}");
            return;
        };
        tracing::warn!(function = %m.function_name, shard = %self.shard_id,
            condition = condition.as_str(), records = records.len(), queue = %queue.name,
            "records given up on; invocation record sent to the on-failure destination");
        let body = record.to_string();
        for attempt in 1..=ON_FAILURE_SEND_ATTEMPTS {
            match self
                .ctx
                .sqs
                .send_message()
                .queue_url(&queue.url)
                .message_body(&body)
                .send()
                .await
            {
                Ok(_) => {
                    Counters::add(&c.sent_to_on_failure, 1);
                    return;
                }
                Err(e) => {
                    tracing::warn!(function = %m.function_name, queue = %queue.name, attempt,
                        "SendMessage to the on-failure destination failed: {}",
                        aws_sdk_sqs::error::DisplayErrorContext(&e));
                    tokio::time::sleep(self.ctx.options.retry_delay(attempt)).await;
                }
            }
        }
        Counters::add(&c.on_failure_errors, 1);
        tracing::error!(function = %m.function_name, "invocation record lost: {body}");
    }
}

/// Sends of an invocation record before it is counted lost.
const ON_FAILURE_SEND_ATTEMPTS: u32 = 5;
