//! Building blocks of the fault-injection suite: payment-processor run by the local event
//! source mapping with a recorder of every delivery, and an injector of crashes after the work
//! (the invocation fails after the handler ran, so the whole batch comes back: redeliveries).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use lambda_runtime::{Context, Error, LambdaEvent};
use local_aws::runner::{EventSourceMapping, InProcess, Runner, RunningRunner};
use tokio_util::sync::CancellationToken;

use crate::invariants::{Scope, Sources, Violation, settle};
use crate::pipeline::SETTLE_TIMEOUT;
use crate::stack::{BoxError, Stack};

/// One delivery of a message to the function.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The SQS message id.
    pub message_id: String,
    /// `ApproximateReceiveCount`.
    pub receive_count: u32,
    /// `MessageGroupId`, on FIFO queues.
    pub group: Option<String>,
    /// The payment id in the body, if any.
    pub payment_id: Option<String>,
    /// When it was delivered.
    pub at: Instant,
}

/// Every delivery, in order.
pub type Deliveries = Arc<Mutex<Vec<Delivery>>>;

/// How payment-processor is run.
#[derive(Debug, Clone)]
pub struct Consumer {
    /// Concurrent invocations.
    pub concurrency: u32,
    /// The function timeout: each invocation's deadline, hence each lease.
    pub timeout: Duration,
    /// Every how many invocations one fails after its handler ran (0: never): a crash before
    /// the acknowledgement. The batch is made visible again at once, so it is redelivered now.
    pub crash_after_work_every: u64,
}

impl Default for Consumer {
    fn default() -> Self {
        Self {
            concurrency: 5,
            timeout: Duration::from_secs(30),
            crash_after_work_every: 0,
        }
    }
}

/// A running payment-processor.
pub struct Running {
    /// The event source mapping.
    pub runner: RunningRunner,
    /// Every delivery.
    pub deliveries: Deliveries,
    /// Invocations that crashed after their work.
    pub crashes: Arc<AtomicU64>,
    /// The function.
    pub app: Arc<payment_processor::App>,
    /// The stack's tables and queues, for the invariant check at the end.
    pub sources: Sources,
}

impl Running {
    /// Deliveries of the message with this payment id.
    pub fn deliveries_of(&self, payment_id: &str) -> Vec<Delivery> {
        self.deliveries
            .lock()
            .unwrap()
            .iter()
            .filter(|d| d.payment_id.as_deref() == Some(payment_id))
            .cloned()
            .collect()
    }

    /// Checks the invariants of a run through charging once the payments queue drains (no
    /// receipt-sender runs here), then stops the pollers; panics when any invariant is
    /// violated or any payment failed.
    pub async fn stop(self) -> local_aws::runner::Stats {
        self.stop_checking(&Scope::through_charging(), &[]).await
    }

    /// [`stop`](Self::stop) with the invariants of `scope`, and the failures it declares (a run
    /// that makes payments fail on purpose): panics unless the violations found are exactly
    /// `expected`.
    pub async fn stop_checking(
        self,
        scope: &Scope,
        expected: &[Violation],
    ) -> local_aws::runner::Stats {
        let checked = settle(&self.sources, scope, expected, SETTLE_TIMEOUT).await;
        let stats = self.stop_unchecked().await;
        match checked {
            Ok(checked) => checked.assert_passed(),
            Err(e) => panic!("the invariants could not be checked: {e}"),
        }
        stats
    }

    /// Stops the pollers, checking nothing: a consumer stopped while others go on.
    pub async fn stop_unchecked(self) -> local_aws::runner::Stats {
        let stats = self.runner.stop().await;
        stats.get("payment-processor").copied().unwrap_or_default()
    }
}

/// Runs `app` as payment-processor over `stack`'s payments queue.
pub fn run_processor(
    stack: &Stack,
    app: payment_processor::App,
    consumer: Consumer,
) -> Result<Running, BoxError> {
    let function = stack
        .template
        .function_by_name("payment-processor")
        .ok_or("no payment-processor")?;
    let mut mapping: EventSourceMapping =
        EventSourceMapping::for_function(function, &stack.resources)?
            .into_iter()
            .next()
            .ok_or("payment-processor has no event source")?;
    mapping = mapping
        .maximum_concurrency(consumer.concurrency)
        .timeout(consumer.timeout);
    let app = Arc::new(app);
    let deliveries = Deliveries::default();
    let crashes = Arc::new(AtomicU64::new(0));
    let invocations = Arc::new(AtomicU64::new(0));
    let (a, d, c) = (app.clone(), deliveries.clone(), crashes.clone());
    let sqs = stack.clients.sqs.clone();
    let queue_url = stack.queue_url("PaymentsQueue").to_owned();
    let every = consumer.crash_after_work_every;
    let invoker = InProcess::new(move |event: LambdaEvent<SqsEvent>| {
        let (app, deliveries, crashes, invocations) =
            (a.clone(), d.clone(), c.clone(), invocations.clone());
        let (sqs, queue_url) = (sqs.clone(), queue_url.clone());
        async move {
            let now = Instant::now();
            {
                let mut log = deliveries.lock().unwrap();
                for r in &event.payload.records {
                    log.push(Delivery {
                        message_id: r.message_id.clone().unwrap_or_default(),
                        receive_count: r
                            .attributes
                            .get("ApproximateReceiveCount")
                            .and_then(|c| c.parse().ok())
                            .unwrap_or(0),
                        group: r.attributes.get("MessageGroupId").cloned(),
                        payment_id: r
                            .body
                            .as_deref()
                            .and_then(|b| serde_json::from_str::<serde_json::Value>(b).ok())
                            .and_then(|v| v["paymentId"].as_str().map(str::to_owned)),
                        at: now,
                    });
                }
            }
            let handles: Vec<String> = event
                .payload
                .records
                .iter()
                .filter_map(|r| r.receipt_handle.clone())
                .collect();
            let response = app.handle(event).await?;
            let n = invocations.fetch_add(1, Ordering::SeqCst) + 1;
            if every > 0 && n % every == 0 {
                // The work is done; the acknowledgement never happens.
                for handle in handles {
                    let _ = sqs
                        .change_message_visibility()
                        .queue_url(&queue_url)
                        .receipt_handle(handle)
                        .visibility_timeout(0)
                        .send()
                        .await;
                }
                crashes.fetch_add(1, Ordering::SeqCst);
                return Err::<aws_lambda_events::sqs::SqsBatchResponse, Error>(
                    "crashed before the acknowledgement".into(),
                );
            }
            Ok(response)
        }
    });
    let runner = Runner::new(stack.clients.sqs.clone())
        .wait_time_seconds(1)
        .mapping(mapping, invoker)
        .start(CancellationToken::new());
    Ok(Running {
        runner,
        deliveries,
        crashes,
        app,
        sources: stack.sources(),
    })
}

/// Waits until `done` holds, polling every 200 ms.
pub async fn wait_until<F, Fut>(timeout: Duration, mut done: F) -> Result<(), BoxError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool, BoxError>>,
{
    let end = tokio::time::Instant::now() + timeout;
    loop {
        if done().await? {
            return Ok(());
        }
        if tokio::time::Instant::now() >= end {
            return Err(format!("condition not met within {timeout:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// An invocation's event: `records`, with the Lambda deadline `deadline_in` from now.
pub fn event(records: Vec<SqsMessage>, deadline_in: Duration) -> LambdaEvent<SqsEvent> {
    let mut e = SqsEvent::default();
    e.records = records;
    let mut context = Context::default();
    context.deadline = (SystemTime::now() + deadline_in)
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    LambdaEvent::new(e, context)
}

/// Runs one batch of `records` through payment-processor, a minute before its deadline; returns
/// the ids it reported failed.
pub async fn failed_in_batch(
    app: &payment_processor::App,
    records: Vec<SqsMessage>,
) -> Vec<String> {
    let response = app
        .handle(event(records, Duration::from_secs(60)))
        .await
        .expect("a batch's failures are reported, not returned");
    failed_ids(&response)
}

/// The message ids a batch response reports failed.
pub fn failed_ids(response: &SqsBatchResponse) -> Vec<String> {
    response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect()
}

/// Receive counts by message id, the highest seen.
pub fn receive_counts(deliveries: &Deliveries) -> HashMap<String, u32> {
    let mut out: HashMap<String, u32> = HashMap::new();
    for d in deliveries.lock().unwrap().iter() {
        let e = out.entry(d.message_id.clone()).or_default();
        *e = (*e).max(d.receive_count);
    }
    out
}
