//! Lambda's SQS event source mapping: the mapping's settings, its pollers, and waiting for
//! queues to drain.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, Message, MessageSystemAttributeName, QueueAttributeName,
};
use serde::Serialize;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::{Counters, Invocation, Invoker, RunnerError, failed_message_ids, sqs_event};
use crate::provision::{Provisioned, ProvisionedQueue};
use crate::template::Function;

/// One SQS event source mapping, resolved: which queue feeds which function, how.
///
/// ```
/// use std::time::Duration;
/// use local_aws::provision::ProvisionedQueue;
/// use local_aws::runner::EventSourceMapping;
///
/// let queue = ProvisionedQueue {
///     name: "jobs".into(),
///     url: "http://127.0.0.1:4566/123456789012/jobs".into(),
///     arn: "arn:aws:sqs:us-east-1:123456789012:jobs".into(),
///     fifo: false,
/// };
/// let mapping = EventSourceMapping::new("worker", &queue, Duration::from_secs(5))
///     .batch_size(3)
///     .maximum_concurrency(1);
/// assert!(mapping.report_batch_item_failures);
/// assert_eq!(mapping.function_arn, "arn:aws:lambda:us-east-1:123456789012:function:worker");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventSourceMapping {
    /// `FunctionName`: what the invoker is told to run, and the key of the [`Stats`](super::Stats).
    pub function_name: String,
    /// The cargo binary of the function (`Metadata.BuildProperties.Binary`), if known.
    pub binary: Option<String>,
    /// The function's ARN (for the context).
    pub function_arn: String,
    /// `MemorySize` (for the context).
    pub memory_size: u32,
    /// The function `Timeout`: the deadline of each invocation.
    pub timeout: Duration,
    /// The queue URL.
    pub queue_url: String,
    /// The queue ARN (`eventSourceARN`).
    pub queue_arn: String,
    /// Whether the queue is FIFO (no batching window then).
    pub fifo: bool,
    /// `BatchSize`.
    pub batch_size: u32,
    /// `MaximumBatchingWindowInSeconds`.
    pub maximum_batching_window: Duration,
    /// `FunctionResponseTypes: [ReportBatchItemFailures]`.
    pub report_batch_item_failures: bool,
    /// `ScalingConfig.MaximumConcurrency`: pollers, hence concurrent invocations.
    pub maximum_concurrency: u32,
    /// The function's `ReservedConcurrentExecutions`: the invocations in progress at once
    /// across every mapping of the function, whatever their pollers (`None`: no limit).
    pub reserved_concurrency: Option<u32>,
}

/// Pollers when the template sets no `MaximumConcurrency` (Lambda starts with 5).
pub const DEFAULT_CONCURRENCY: u32 = 5;

impl EventSourceMapping {
    /// A mapping with Lambda's defaults: batch size 10, no batching window,
    /// `ReportBatchItemFailures` on, [`DEFAULT_CONCURRENCY`] pollers, 128 MB.
    pub fn new(function_name: &str, queue: &ProvisionedQueue, timeout: Duration) -> Self {
        Self {
            function_name: function_name.to_owned(),
            binary: None,
            function_arn: crate::arn::function_beside(&queue.arn, function_name),
            memory_size: 128,
            timeout,
            queue_url: queue.url.clone(),
            queue_arn: queue.arn.clone(),
            fifo: queue.fifo,
            batch_size: 10,
            maximum_batching_window: Duration::ZERO,
            report_batch_item_failures: true,
            maximum_concurrency: DEFAULT_CONCURRENCY,
            reserved_concurrency: None,
        }
    }

    /// The enabled SQS event sources of `function`, resolved against `provisioned`.
    pub fn for_function(
        function: &Function,
        provisioned: &Provisioned,
    ) -> Result<Vec<Self>, RunnerError> {
        function
            .sqs_events
            .iter()
            .filter(|e| e.enabled)
            .map(|e| {
                let queue = provisioned
                    .queues
                    .get(&e.queue)
                    .ok_or_else(|| RunnerError::QueueNotProvisioned(e.queue.clone()))?;
                let mut mapping = Self::new(&function.name, queue, function.timeout())
                    .batch_size(e.batch_size)
                    .maximum_batching_window(Duration::from_secs(
                        e.maximum_batching_window_in_seconds.into(),
                    ))
                    .report_batch_item_failures(e.reports_batch_item_failures())
                    .maximum_concurrency(e.maximum_concurrency.unwrap_or(DEFAULT_CONCURRENCY));
                mapping.memory_size = function.memory_size;
                mapping.reserved_concurrency = function.reserved_concurrent_executions;
                mapping.binary = function.binary.clone();
                mapping.function_arn = provisioned.function_arn(&function.name);
                Ok(mapping)
            })
            .collect()
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

    /// Sets the number of pollers (at least 1).
    pub fn maximum_concurrency(mut self, n: u32) -> Self {
        self.maximum_concurrency = n.max(1);
        self
    }

    /// Sets the function timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// Starts the mapping's `MaximumConcurrency` pollers; they run until `shutdown` is cancelled.
/// With `reserved`, the function's units of reserved concurrency (shared by its mappings), a
/// poller receives only while it holds one.
pub(super) fn spawn_pollers(
    sqs: aws_sdk_sqs::Client,
    wait_time_seconds: i32,
    mapping: EventSourceMapping,
    invoker: Arc<dyn Invoker>,
    counters: Arc<Counters>,
    reserved: Option<Arc<Semaphore>>,
    shutdown: &CancellationToken,
) -> Vec<tokio::task::JoinHandle<()>> {
    let poller = Arc::new(Poller {
        sqs,
        wait_time_seconds,
        mapping,
        invoker,
        counters,
        reserved,
    });
    (0..poller.mapping.maximum_concurrency)
        .map(|_| {
            let (poller, shutdown) = (Arc::clone(&poller), shutdown.clone());
            tokio::spawn(async move { poller.run(shutdown).await })
        })
        .collect()
}

struct Poller {
    sqs: aws_sdk_sqs::Client,
    wait_time_seconds: i32,
    mapping: EventSourceMapping,
    invoker: Arc<dyn Invoker>,
    counters: Arc<Counters>,
    reserved: Option<Arc<Semaphore>>,
}

impl Poller {
    async fn receive(&self, max: u32, wait_seconds: i32) -> Result<Vec<Message>, String> {
        let call = self
            .sqs
            .receive_message()
            .queue_url(&self.mapping.queue_url)
            .max_number_of_messages(max.clamp(1, 10) as i32)
            .wait_time_seconds(wait_seconds)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send();
        let limit = Duration::from_secs(wait_seconds.max(0) as u64 + 15);
        match tokio::time::timeout(limit, call).await {
            Ok(Ok(out)) => Ok(out.messages.unwrap_or_default()),
            Ok(Err(e)) => Err(aws_sdk_sqs::error::DisplayErrorContext(&e).to_string()),
            Err(_) => Err(format!("no answer within {limit:?}")),
        }
    }

    async fn run(&self, shutdown: CancellationToken) {
        let m = &self.mapping;
        while !shutdown.is_cancelled() {
            // At its reserved concurrency the function gets no more invocations: the poller
            // waits for a unit before it receives, so it never holds a batch it could not
            // invoke (Lambda's pollers scale down to the function's concurrency).
            let _unit = match &self.reserved {
                None => None,
                Some(units) => tokio::select! {
                    _ = shutdown.cancelled() => break,
                    unit = Arc::clone(units).acquire_owned() => match unit {
                        Ok(unit) => Some(unit),
                        Err(_) => break,
                    },
                },
            };
            // Not abandoned on shutdown: messages a dropped call had received would stay
            // invisible for the whole visibility timeout. It returns within WaitTimeSeconds.
            let received = self.receive(m.batch_size, self.wait_time_seconds).await;
            let mut batch = match received {
                Ok(batch) => batch,
                Err(e) => {
                    Counters::add(&self.counters.receive_errors, 1);
                    tracing::warn!(function = %m.function_name, queue = %m.queue_url, "ReceiveMessage failed: {e}");
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    }
                }
            };
            if batch.is_empty() {
                continue;
            }
            // Standard queues: fill the batch within the batching window (FIFO has none).
            if !m.fifo && !m.maximum_batching_window.is_zero() {
                let end = Instant::now() + m.maximum_batching_window;
                while (batch.len() as u32) < m.batch_size
                    && Instant::now() < end
                    && !shutdown.is_cancelled()
                {
                    let want = m.batch_size - batch.len() as u32;
                    let more = self.receive(want, 0).await;
                    match more {
                        Ok(more) if !more.is_empty() => batch.extend(more),
                        Ok(_) => {
                            let left = end.saturating_duration_since(Instant::now());
                            tokio::time::sleep(left.min(Duration::from_millis(100))).await;
                        }
                        Err(e) => {
                            Counters::add(&self.counters.receive_errors, 1);
                            tracing::warn!(function = %m.function_name, "ReceiveMessage failed: {e}");
                            break;
                        }
                    }
                }
            }
            self.process(batch).await;
        }
    }

    async fn process(&self, batch: Vec<Message>) {
        let m = &self.mapping;
        let c = &self.counters;
        Counters::add(&c.batches, 1);
        Counters::add(&c.records_received, batch.len());
        let invocation = Invocation {
            function_name: m.function_name.clone(),
            binary: m.binary.clone(),
            function_arn: m.function_arn.clone(),
            memory_size: m.memory_size,
            request_id: uuid::Uuid::new_v4().to_string(),
            deadline: SystemTime::now() + m.timeout,
            payload: sqs_event(&batch, &m.queue_arn),
        };
        let request_id = invocation.request_id.clone();
        let ids: Vec<&str> = batch
            .iter()
            .map(|msg| msg.message_id.as_deref().unwrap_or_default())
            .collect();
        tracing::debug!(function = %m.function_name, %request_id, records = batch.len(), "invoking");
        let outcome = tokio::time::timeout(m.timeout, self.invoker.invoke(invocation)).await;
        let delete: Vec<&Message> = match outcome {
            Err(_) => {
                Counters::add(&c.timeouts, 1);
                tracing::warn!(function = %m.function_name, %request_id, timeout = ?m.timeout,
                    "invocation timed out; the whole batch will be retried");
                return;
            }
            Ok(Err(e)) => {
                Counters::add(&c.invocation_errors, 1);
                tracing::warn!(function = %m.function_name, %request_id,
                    "invocation failed, the whole batch will be retried: {e}");
                return;
            }
            Ok(Ok(_)) if !m.report_batch_item_failures => batch.iter().collect(),
            Ok(Ok(response)) => match failed_message_ids(&response, &ids) {
                Ok(failed) => {
                    Counters::add(&c.records_reported_failed, failed.len());
                    batch
                        .iter()
                        .filter(|msg| {
                            !failed.contains(msg.message_id.as_deref().unwrap_or_default())
                        })
                        .collect()
                }
                Err(e) => {
                    Counters::add(&c.invalid_responses, 1);
                    tracing::warn!(function = %m.function_name, %request_id,
                        "invalid partial batch response, the whole batch will be retried: {e}");
                    return;
                }
            },
        };
        self.delete(&delete).await;
    }

    async fn delete(&self, messages: &[&Message]) {
        let c = &self.counters;
        for chunk in messages.chunks(10) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, msg)| {
                    DeleteMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(msg.receipt_handle.as_deref().unwrap_or_default())
                        .build()
                        .expect("id and receipt handle are set")
                })
                .collect();
            match self
                .sqs
                .delete_message_batch()
                .queue_url(&self.mapping.queue_url)
                .set_entries(Some(entries))
                .send()
                .await
            {
                Ok(out) => {
                    Counters::add(&c.records_deleted, out.successful.len());
                    if !out.failed.is_empty() {
                        Counters::add(&c.delete_errors, out.failed.len());
                        tracing::warn!(function = %self.mapping.function_name,
                            "DeleteMessageBatch: {} entries failed: {:?}", out.failed.len(), out.failed);
                    }
                }
                Err(e) => {
                    Counters::add(&c.delete_errors, chunk.len());
                    tracing::warn!(function = %self.mapping.function_name,
                        "DeleteMessageBatch failed: {}", aws_sdk_sqs::error::DisplayErrorContext(&e));
                }
            }
        }
    }
}

/// A queue's approximate counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct QueueDepth {
    /// `ApproximateNumberOfMessages` (visible).
    pub visible: u64,
    /// `ApproximateNumberOfMessagesNotVisible` (in flight).
    pub not_visible: u64,
    /// `ApproximateNumberOfMessagesDelayed`.
    pub delayed: u64,
}

impl QueueDepth {
    /// Nothing visible, in flight or delayed.
    pub fn is_empty(&self) -> bool {
        self.visible + self.not_visible + self.delayed == 0
    }
}

/// Why [`wait_drained`] gave up.
#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    /// A queue still had messages at the timeout.
    #[error("queues not drained after {timeout:?}: {remaining:?}")]
    Timeout {
        /// The timeout.
        timeout: Duration,
        /// The queues that were not empty, with their last counts.
        remaining: BTreeMap<String, QueueDepth>,
    },
    /// GetQueueAttributes failed.
    #[error("GetQueueAttributes {queue}: {message}")]
    Aws {
        /// The queue URL.
        queue: String,
        /// The error.
        message: String,
    },
}

/// The approximate counts of the queue at `queue_url`.
pub async fn queue_depth(
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
) -> Result<QueueDepth, DrainError> {
    let attributes: HashMap<QueueAttributeName, String> = sqs
        .get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
        .send()
        .await
        .map_err(|e| DrainError::Aws {
            queue: queue_url.to_owned(),
            message: aws_sdk_sqs::error::DisplayErrorContext(&e).to_string(),
        })?
        .attributes
        .unwrap_or_default();
    let get = |n| attributes.get(&n).and_then(|v| v.parse().ok()).unwrap_or(0);
    Ok(QueueDepth {
        visible: get(QueueAttributeName::ApproximateNumberOfMessages),
        not_visible: get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        delayed: get(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
    })
}

/// Waits until every queue in `queue_urls` is empty (nothing visible, in flight or delayed) on
/// two reads in a row 100 ms apart, or fails with the counts at `timeout`. A record that keeps
/// failing is "drained" only once it reached the dead-letter queue.
///
/// ```no_run
/// # async fn f(sqs: aws_sdk_sqs::Client, url: String) -> Result<(), local_aws::runner::DrainError> {
/// local_aws::runner::wait_drained(&sqs, &[url.as_str()], std::time::Duration::from_secs(10)).await?;
/// # Ok(()) }
/// ```
pub async fn wait_drained(
    sqs: &aws_sdk_sqs::Client,
    queue_urls: &[&str],
    timeout: Duration,
) -> Result<(), DrainError> {
    let end = Instant::now() + timeout;
    let mut empty_reads = 0;
    loop {
        let mut remaining = BTreeMap::new();
        for url in queue_urls {
            let depth = queue_depth(sqs, url).await?;
            if !depth.is_empty() {
                remaining.insert((*url).to_owned(), depth);
            }
        }
        if remaining.is_empty() {
            empty_reads += 1;
            if empty_reads >= 2 {
                return Ok(());
            }
        } else {
            empty_reads = 0;
            if Instant::now() >= end {
                return Err(DrainError::Timeout { timeout, remaining });
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
