//! A started [`Runner`](super::Runner): its stats, waiting for queues and streams, shutdown.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::stream::StreamProgress;
use super::{Counters, DrainError, Stats, queue_depth, wait_drained};

/// Why [`RunningRunner::wait_stream_caught_up`] gave up.
#[derive(Debug, thiserror::Error)]
pub enum StreamWaitError {
    /// The runner has no stream mapping for the function.
    #[error("function {0} has no stream mapping (DynamoDB or Kinesis) in this runner")]
    NoStreamMapping(String),
    /// Records written before the wait began were still not processed at the timeout.
    #[error(
        "{function}: the stream mapping has not caught up after {timeout:?}; behind: {lagging:?}"
    )]
    Timeout {
        /// The function.
        function: String,
        /// The timeout.
        timeout: Duration,
        /// The shards still behind (`(shards)` while the shards are being looked up).
        lagging: Vec<String>,
    },
}

/// Why [`RunningRunner::wait_idle`] gave up.
#[derive(Debug, thiserror::Error)]
pub enum IdleError {
    /// A stream mapping did not catch up in time.
    #[error(transparent)]
    Stream(#[from] StreamWaitError),
    /// A queue did not drain in time, or could not be read.
    #[error(transparent)]
    Drain(#[from] DrainError),
    /// Work kept arriving: streams and queues were never quiet together within the timeout.
    #[error("the pipeline was never idle within {0:?}")]
    Timeout(Duration),
}

/// Running pollers: their [`Stats`], waiting for queues and streams, shutdown.
pub struct RunningRunner {
    sqs: aws_sdk_sqs::Client,
    shutdown: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    stats: BTreeMap<String, Arc<Counters>>,
    streams: BTreeMap<String, Vec<Arc<StreamProgress>>>,
}

impl RunningRunner {
    pub(super) fn new(sqs: aws_sdk_sqs::Client, shutdown: CancellationToken) -> Self {
        Self {
            sqs,
            shutdown,
            tasks: Vec::new(),
            stats: BTreeMap::new(),
            streams: BTreeMap::new(),
        }
    }

    pub(super) fn counters(&mut self, function_name: &str) -> Arc<Counters> {
        Arc::clone(self.stats.entry(function_name.to_owned()).or_default())
    }

    pub(super) fn stream_progress(&mut self, function_name: &str) -> Arc<StreamProgress> {
        let progress = Arc::new(StreamProgress::default());
        self.streams
            .entry(function_name.to_owned())
            .or_default()
            .push(Arc::clone(&progress));
        progress
    }

    pub(super) fn add_tasks(
        &mut self,
        tasks: impl IntoIterator<Item = tokio::task::JoinHandle<()>>,
    ) {
        self.tasks.extend(tasks);
    }

    /// What the mappings of `function_name` did so far (zeros for an unknown name).
    pub fn stats(&self, function_name: &str) -> Stats {
        self.stats
            .get(function_name)
            .map(|c| c.snapshot())
            .unwrap_or_default()
    }

    /// [`Stats`] of every function, by `FunctionName`.
    pub fn all_stats(&self) -> BTreeMap<String, Stats> {
        self.stats
            .iter()
            .map(|(k, c)| (k.clone(), c.snapshot()))
            .collect()
    }

    /// The token that stops the pollers.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Waits until `done(stats of function_name)` holds, polling every 20 ms; `false` on timeout.
    ///
    /// ```no_run
    /// # async fn f(running: local_aws::runner::RunningRunner) {
    /// use std::time::Duration;
    /// assert!(running.wait_for("worker", |s| s.records_deleted >= 3, Duration::from_secs(5)).await);
    /// # }
    /// ```
    pub async fn wait_for(
        &self,
        function_name: &str,
        done: impl Fn(&Stats) -> bool,
        timeout: Duration,
    ) -> bool {
        let end = Instant::now() + timeout;
        loop {
            if done(&self.stats(function_name)) {
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// [`wait_drained`] with this runner's client.
    pub async fn wait_drained(
        &self,
        queue_urls: &[&str],
        timeout: Duration,
    ) -> Result<(), DrainError> {
        wait_drained(&self.sqs, queue_urls, timeout).await
    }

    /// Waits until the stream mappings of `function_name` have processed every record written
    /// before the call: each shard was read to its end after the call began, with every record
    /// done with (processed, filtered out, or given up on to the on-failure destination), and
    /// the stream was looked at again for new shards.
    ///
    /// ```no_run
    /// # async fn f(running: local_aws::runner::RunningRunner) -> Result<(), local_aws::runner::StreamWaitError> {
    /// // ... payments written to the table: the publisher has relayed all of them after this.
    /// running.wait_stream_caught_up("payments-publisher", std::time::Duration::from_secs(30)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn wait_stream_caught_up(
        &self,
        function_name: &str,
        timeout: Duration,
    ) -> Result<(), StreamWaitError> {
        let progress = self
            .streams
            .get(function_name)
            .ok_or_else(|| StreamWaitError::NoStreamMapping(function_name.to_owned()))?;
        self.caught_up(function_name, progress, Instant::now(), timeout)
            .await
    }

    /// [`wait_stream_caught_up`](Self::wait_stream_caught_up) for every function with a stream
    /// mapping (nothing to wait for without one).
    pub async fn wait_streams_caught_up(&self, timeout: Duration) -> Result<(), StreamWaitError> {
        let since = Instant::now();
        let end = since + timeout;
        for (function, progress) in &self.streams {
            let left = end.saturating_duration_since(Instant::now());
            self.caught_up(function, progress, since, left).await?;
        }
        Ok(())
    }

    async fn caught_up(
        &self,
        function: &str,
        progress: &[Arc<StreamProgress>],
        since: Instant,
        timeout: Duration,
    ) -> Result<(), StreamWaitError> {
        for p in progress {
            p.look_for_shards();
        }
        let end = Instant::now() + timeout;
        loop {
            let lagging: Vec<String> = progress
                .iter()
                .flat_map(|p| p.lagging_since(since))
                .collect();
            if lagging.is_empty() {
                return Ok(());
            }
            if Instant::now() >= end {
                return Err(StreamWaitError::Timeout {
                    function: function.to_owned(),
                    timeout,
                    lagging,
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Everything the pollers did so far, as one number that only grows.
    fn activity(&self) -> u64 {
        self.stats
            .values()
            .map(|c| {
                let s = c.snapshot();
                s.batches + s.records_received + s.stream.records_read
            })
            .sum()
    }

    /// Waits until the whole pipeline is idle: every stream mapping caught up with what was
    /// written and every queue in `queue_urls` drained, together, with no record read or
    /// invoked in between (a relay that queues what a stream carries, and consumers that write
    /// what a stream carries, are both done). Use it to drain a pipeline of stream and queue
    /// mappings before checking its results.
    ///
    /// ```no_run
    /// # async fn f(running: local_aws::runner::RunningRunner, queues: &[&str]) -> Result<(), local_aws::runner::IdleError> {
    /// running.wait_idle(queues, std::time::Duration::from_secs(120)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn wait_idle(&self, queue_urls: &[&str], timeout: Duration) -> Result<(), IdleError> {
        let end = Instant::now() + timeout;
        let left = || end.saturating_duration_since(Instant::now());
        loop {
            let before = self.activity();
            self.wait_streams_caught_up(left()).await?;
            wait_drained(&self.sqs, queue_urls, left()).await?;
            self.wait_streams_caught_up(left()).await?;
            let mut empty = true;
            for url in queue_urls {
                empty &= queue_depth(&self.sqs, url).await?.is_empty();
            }
            if empty && self.activity() == before {
                return Ok(());
            }
            if left().is_zero() {
                return Err(IdleError::Timeout(timeout));
            }
        }
    }

    /// Stops the pollers and waits for them; returns the final [`Stats`].
    pub async fn stop(self) -> BTreeMap<String, Stats> {
        self.shutdown.cancel();
        self.join().await
    }

    /// Waits until the shutdown token is cancelled (by someone else) and the pollers ended.
    pub async fn join(self) -> BTreeMap<String, Stats> {
        for task in self.tasks {
            if let Err(e) = task.await
                && e.is_panic()
            {
                tracing::error!("a poller panicked: {e}");
            }
        }
        self.stats
            .iter()
            .map(|(k, c)| (k.clone(), c.snapshot()))
            .collect()
    }
}
