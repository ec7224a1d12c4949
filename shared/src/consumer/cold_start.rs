//! A consumer's cold-start checks, run off the init path: started when the consumer is built,
//! awaited where they matter.
//!
//! - **The idempotency table** (DynamoDB: `DescribeTable`, `DescribeTimeToLive`): a table that
//!   is missing or does not fit the backend fails every invocation, naming the table and the
//!   mismatch, until a check passes (each failed invocation checks again), so that no message is
//!   processed, and none dead-lettered, against a table that cannot hold its record. Lambda's
//!   retries bring the batch back. A check that cannot run (`dynamodb:DescribeTable` denied,
//!   throttled, the endpoint unreachable) never stops the consumer: it is a warning naming the
//!   action, the table and the fix, and the records are processed (the check is not tried
//!   again in that container). Its warnings (no TTL, say) are logged.
//! - **The source queue** (SQS: `GetQueueAttributes` of the queue and of its dead-letter queue,
//!   `GetQueueUrl` for a queue known by its ARN): its redrive `maxReceiveCount` against the
//!   attempt budget and an outage as long as its retention under the backoff, its dead-letter queue's message size and the records' expiry against both
//!   queues' retention ([`redrive_policy::warn_if_unsafe`]). What it finds is logged, never an
//!   error, and nothing waits for it. The queue is `SOURCE_QUEUE_URL`, or the first event's.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::backoff::RetrySchedule;
use crate::redrive_policy::{self, QueueCheck, QueueRef};
use crate::store::StoreError;

/// The warning, logged and returned, for a table check that could not run (`error` is not the
/// table's fault: the request was denied, throttled, or did not reach DynamoDB).
#[cfg(feature = "dynamodb")]
fn check_not_run(table: &str, error: &StoreError) -> String {
    let warning = format!(
        "cold-start check: could not check the idempotency table `{table}` \
         (dynamodb:DescribeTable): {error}. Records are processed without the check (a table \
         that does not fit is then found by its first refused request). To check it at cold \
         start, grant dynamodb:DescribeTable on the table \
         (arn:aws:dynamodb:<region>:<account>:table/{table}); processing does not need it"
    );
    tracing::warn!(action = "dynamodb:DescribeTable", table, "{warning}");
    warning
}

/// A check's future, boxed.
type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// What the table's check answers: its warnings, or why the table cannot serve.
type TableFound = Result<Vec<String>, StoreError>;

/// What makes the table's check: its warnings, or why the table cannot serve.
pub(super) type TableCheckFn =
    Arc<dyn Fn() -> BoxFuture<Result<Vec<String>, StoreError>> + Send + Sync>;

/// What the cold-start checks found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ColdStartReport {
    /// The idempotency table's warnings, each naming the table (empty when it fits as it
    /// should); `None` when the backend has no table check.
    pub table_warnings: Option<Vec<String>>,
    /// What the source queue's check found; `None` when it did not run (no SQS client, or no
    /// queue known yet).
    pub queue: Option<QueueCheck>,
}

/// What the source queue's check reads and compares.
#[derive(Debug, Clone)]
pub struct QueueToCheck {
    /// The client it reads with.
    pub sqs: aws_sdk_sqs::Client,
    /// The queue; `None` checks the first event's (its event source ARN).
    pub source: Option<QueueRef>,
    /// The event source's `BatchSize`.
    pub batch_size: u32,
    /// The attempt budget; `None` when there is none.
    pub max_attempts: Option<u32>,
    /// The records' expiry.
    pub expiry: Duration,
    /// The visibility backoff's schedule; `None` when it is off. The redrive policy must cover
    /// the receives of an outage as long as the queue's retention under it.
    pub backoff: Option<RetrySchedule>,
}

/// A function's cold-start checks, started in the background at init and awaited where they
/// matter: what a [`Consumer`](super::Consumer) runs (its [module](super) says what each
/// check does), and what any
/// other function with an idempotency table (an HTTP API, say) holds beside its handler, calling
/// [`ready`](Self::ready) before each request or batch.
///
/// ```no_run
/// # async fn example(backend: lambda_idempotency::store::DynamoDbBackend) -> Result<(), lambda_runtime::Error> {
/// use lambda_idempotency::consumer::ColdStartChecks;
///
/// // At init: nothing waits.
/// let checks = ColdStartChecks::start(Some(&backend), None);
/// // Before each invocation's work: the table's check, awaited the first time.
/// checks.ready(None).await?;
/// # Ok(())
/// # }
/// ```
pub struct ColdStartChecks {
    table: Option<TableCheckFn>,
    table_passed: AtomicBool,
    table_task: tokio::sync::Mutex<Option<JoinHandle<TableFound>>>,
    table_warnings: Mutex<Option<Vec<String>>>,
    queue: Option<QueueToCheck>,
    queue_task: Mutex<Option<JoinHandle<QueueCheck>>>,
    queue_result: Mutex<Option<QueueCheck>>,
    queue_started: AtomicBool,
}

impl std::fmt::Debug for ColdStartChecks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColdStartChecks")
            .field("table", &self.table.is_some())
            .field("table_passed", &self.table_passed)
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}

impl ColdStartChecks {
    /// The check of `table` (DynamoDB: `DescribeTable`, `DescribeTimeToLive`) and of `queue`,
    /// started at once in the background when a Tokio runtime is running (else at the first
    /// [`ready`](Self::ready)).
    #[cfg(feature = "dynamodb")]
    pub fn start(
        table: Option<&crate::store::DynamoDbBackend>,
        queue: Option<QueueToCheck>,
    ) -> Self {
        Self::start_with(table.map(Self::table_check), queue)
    }

    /// The check of `backend`'s table, as a function that starts it.
    #[cfg(feature = "dynamodb")]
    pub(super) fn table_check(backend: &crate::store::DynamoDbBackend) -> TableCheckFn {
        let backend = backend.clone();
        Arc::new(move || {
            let backend = backend.clone();
            Box::pin(async move {
                match backend.check_table().await {
                    Ok(check) => Ok(check.warnings),
                    Err(e @ StoreError::Misconfigured { .. }) => Err(e),
                    Err(e) => Ok(vec![check_not_run(backend.table(), &e)]),
                }
            })
        })
    }

    /// The checks, started at once in the background when a Tokio runtime is running (else at
    /// the first invocation).
    pub(super) fn start_with(table: Option<TableCheckFn>, queue: Option<QueueToCheck>) -> Self {
        let runtime = tokio::runtime::Handle::try_current().ok();
        let table_task = match (&table, &runtime) {
            (Some(check), Some(runtime)) => Some(runtime.spawn(check())),
            _ => None,
        };
        let cold_start = Self {
            table_passed: AtomicBool::new(table.is_none()),
            table,
            table_task: tokio::sync::Mutex::new(table_task),
            table_warnings: Mutex::new(None),
            queue,
            queue_task: Mutex::new(None),
            queue_result: Mutex::new(None),
            queue_started: AtomicBool::new(false),
        };
        if runtime.is_some() {
            cold_start.start_queue_check(None);
        }
        cold_start
    }

    /// Before a batch (or a request): the table's check has passed (awaited the first time, run
    /// again after a failure: the error names the table and what does not fit), and the queue's
    /// check is started (on `event_source_arn` when no queue was given).
    pub async fn ready(&self, event_source_arn: Option<&str>) -> Result<(), StoreError> {
        self.start_queue_check(event_source_arn);
        if self.table_passed.load(Ordering::Acquire) {
            return Ok(());
        }
        let Some(check) = &self.table else {
            return Ok(());
        };
        let mut task = self.table_task.lock().await;
        if self.table_passed.load(Ordering::Acquire) {
            return Ok(());
        }
        let result = match task.take() {
            Some(running) => running.await.unwrap_or_else(|e| {
                let warning = format!(
                    "cold-start check: the idempotency table's check did not finish ({e}); \
                     records are processed without it"
                );
                tracing::warn!("{warning}");
                Ok(vec![warning])
            }),
            None => check().await,
        };
        match result {
            Ok(warnings) => {
                tracing::info!(
                    warnings = warnings.len(),
                    "cold-start check: the idempotency table fits"
                );
                *self
                    .table_warnings
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(warnings);
                self.table_passed.store(true, Ordering::Release);
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, "cold-start check: the idempotency table cannot serve; no record of this batch runs");
                Err(e)
            }
        }
    }

    /// Starts the queue's check once, on the configured queue or else on `event_source_arn`.
    fn start_queue_check(&self, event_source_arn: Option<&str>) {
        let Some(spec) = &self.queue else { return };
        if self.queue_started.load(Ordering::Acquire) {
            return;
        }
        let queue = match (&spec.source, event_source_arn) {
            (Some(queue), _) => queue.clone(),
            (None, Some(arn)) => QueueRef::Arn(arn.to_owned()),
            (None, None) => return,
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.queue_started.swap(true, Ordering::AcqRel) {
            return;
        }
        let spec = spec.clone();
        // Without a budget the queue's redrive policy is the only bound of the handler's own
        // failures: they need one receive (one attempt in batches of one), and an outage's
        // receives come on top.
        let (batch_size, attempts) = spec.max_attempts.map_or((1, 1), |n| (spec.batch_size, n));
        let task = runtime.spawn(async move {
            redrive_policy::warn_if_unsafe(
                &spec.sqs,
                &queue,
                batch_size,
                attempts,
                spec.expiry,
                spec.backoff,
            )
            .await
        });
        *self
            .queue_task
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(task);
    }

    /// What the checks found, once both have finished (the table's is awaited, or run, here).
    pub async fn report(
        &self,
        event_source_arn: Option<&str>,
    ) -> Result<ColdStartReport, StoreError> {
        self.ready(event_source_arn).await?;
        let task = self
            .queue_task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(task) = task
            && let Ok(found) = task.await
        {
            *self
                .queue_result
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(found);
        }
        Ok(ColdStartReport {
            table_warnings: self
                .table_warnings
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
            queue: self
                .queue_result
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        })
    }
}
