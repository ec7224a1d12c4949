//! Crashes of payment-processor in the middle of an invocation, through the pipeline's
//! processor hook ([`Pipeline::set_processor_hook`]).
//!
//! An invocation the seed chose to crash runs in an execution environment of its own: the
//! function as deployed (the template's settings, a new `App`), its DynamoDB and SQS clients
//! given the library's fault injector armed with [`Fault::Crash`] at request `n` of one of them.
//! The request is applied, then the process is gone: the handler's future is dropped, and every
//! later request of those clients fails before it is sent (work the handler had started in other
//! tasks reaches no service). An invocation that makes fewer than `n` requests crashes after its
//! work, before the acknowledgement. Either way the runner deletes nothing, and the whole batch
//! comes back: on AWS after the queue's visibility timeout (180 s), here after [`COME_BACK`].
//!
//! A message whose body carries [`FATAL`](crate::FATAL) crashes every invocation that receives
//! it, before the handler runs: it is never acknowledged nor dead-lettered by the function, and
//! SQS moves it to the dead-letter queue once it has been received `maxReceiveCount` times. Its
//! batch comes back at once, so that its receives take seconds, not `maxReceiveCount` visibility
//! timeouts.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use lambda_idempotency::test_util::fault::{Crash, Fault, Faults};
use lambda_idempotency::time::{Clock, SystemClock};
use lambda_runtime::LambdaEvent;
use payments_e2e::Pipeline;
use payments_e2e::pipeline::Hooked;

use crate::FATAL;

/// When a crashed batch comes back, in seconds (the queue's visibility timeout, 180 s,
/// shortened). Not at once: the redelivery sends again the `PaymentCharged` of a charge the
/// crashed invocation committed, and a copy that reaches receipt-sender while it still holds the
/// first waits for its lease (30 s); on AWS the redelivery comes long after the first was sent.
const COME_BACK: i32 = 3;

/// The client whose request `n` is the crash point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    DynamoDb,
    Sqs,
}

/// Where an invocation crashes: right after request `request` of `client` (counted from the
/// invocation's start), or after its work if it makes fewer.
#[derive(Debug, Clone, Copy)]
pub struct Point {
    pub client: Client,
    pub request: u32,
}

impl Point {
    /// A point the seed chooses: either client, one of its first eight requests.
    pub fn random(rng: &mut fastrand::Rng) -> Self {
        Self {
            client: if rng.bool() {
                Client::DynamoDb
            } else {
                Client::Sqs
            },
            request: rng.u32(1..=8),
        }
    }
}

/// An invocation that crashed at a point the seed chose.
#[derive(Debug, Clone)]
pub struct Crashed {
    pub point: Point,
    /// True when it crashed at its request; false when it made fewer requests and crashed after
    /// its work.
    pub at_request: bool,
    /// The payment ids of its batch's bodies (those that have one).
    pub payment_ids: Vec<String>,
    /// Its batch's message ids.
    pub message_ids: Vec<String>,
}

/// The crash points of a run, and what crashed.
pub struct Crashes {
    sdk: aws_config::SdkConfig,
    settings: HashMap<String, String>,
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    armed: Mutex<VecDeque<Point>>,
    crashed: Mutex<Vec<Crashed>>,
    fatal_receives: AtomicU32,
    /// Receives of each message by payment-processor, by message id.
    receives: Mutex<HashMap<String, u32>>,
}

impl Crashes {
    /// Puts the crashes in front of `pipeline`'s payment-processor; none armed yet.
    pub fn install(pipeline: &Pipeline) -> Arc<Self> {
        let crashes = Arc::new(Self {
            sdk: pipeline.sdk().clone(),
            settings: pipeline.function_settings("payment-processor").unwrap(),
            sqs: pipeline.clients.sqs.clone(),
            queue_url: pipeline.resources.queues["PaymentsQueue"].url.clone(),
            armed: Mutex::default(),
            crashed: Mutex::default(),
            fatal_receives: AtomicU32::new(0),
            receives: Mutex::default(),
        });
        let hook = crashes.clone();
        pipeline
            .set_processor_hook(Arc::new(move |event| hook.take_over(event)))
            .unwrap();
        crashes
    }

    /// The next invocation not yet taken crashes at `point`.
    pub fn arm(&self, point: Point) {
        self.armed.lock().unwrap().push_back(point);
    }

    /// Crash points armed that no invocation reached yet.
    pub fn pending(&self) -> usize {
        self.armed.lock().unwrap().len()
    }

    /// The invocations that crashed at the seed's points, so far.
    pub fn crashed(&self) -> Vec<Crashed> {
        self.crashed.lock().unwrap().clone()
    }

    /// Receives of a [`FATAL`] message so far (each crashed its invocation).
    pub fn fatal_receives(&self) -> u32 {
        self.fatal_receives.load(Ordering::SeqCst)
    }

    /// The messages of crashed batches that were not received again after each crash: none,
    /// since the runner deletes nothing of a crashed invocation's batch.
    pub fn not_redelivered(&self) -> Vec<String> {
        let mut crashes: HashMap<&str, u32> = HashMap::new();
        let crashed = self.crashed();
        for id in crashed.iter().flat_map(|c| &c.message_ids) {
            *crashes.entry(id).or_default() += 1;
        }
        let receives = self.receives.lock().unwrap();
        crashes
            .into_iter()
            .filter(|(id, n)| receives.get(*id).copied().unwrap_or(0) <= *n)
            .map(|(id, _)| id.to_owned())
            .collect()
    }

    fn take_over(self: &Arc<Self>, event: &LambdaEvent<SqsEvent>) -> Option<Hooked> {
        {
            let mut receives = self.receives.lock().unwrap();
            for r in &event.payload.records {
                *receives
                    .entry(r.message_id.clone().unwrap_or_default())
                    .or_default() += 1;
            }
        }
        let fatal = event
            .payload
            .records
            .iter()
            .any(|r| r.body.as_deref().is_some_and(|b| b.contains(FATAL)));
        let point = if fatal {
            None
        } else {
            Some(self.armed.lock().unwrap().pop_front()?)
        };
        let (this, event) = (self.clone(), event.clone());
        Some(Box::pin(async move { this.crash(point, event).await }))
    }

    /// Runs `event` to its crash (`None`: the fatal message's, before the handler), then makes
    /// its batch visible again and answers the runner with an error.
    async fn crash(
        &self,
        point: Option<Point>,
        event: LambdaEvent<SqsEvent>,
    ) -> Result<SqsBatchResponse, lambda_runtime::Error> {
        let records = &event.payload.records;
        let handles: Vec<String> = records
            .iter()
            .filter_map(|r| r.receipt_handle.clone())
            .collect();
        let message_ids = records
            .iter()
            .map(|r| r.message_id.clone().unwrap_or_default())
            .collect();
        let payment_ids = records
            .iter()
            .filter_map(|r| serde_json::from_str::<serde_json::Value>(r.body.as_deref()?).ok())
            .filter_map(|v| v["paymentId"].as_str().map(str::to_owned))
            .collect();
        let come_back = match point {
            None => {
                self.fatal_receives.fetch_add(1, Ordering::SeqCst);
                0
            }
            Some(point) => {
                let at_request = self.run_to_crash(point, event).await?;
                self.crashed.lock().unwrap().push(Crashed {
                    point,
                    at_request,
                    payment_ids,
                    message_ids,
                });
                COME_BACK
            }
        };
        // The batch comes back, sooner than after the queue's visibility timeout.
        for handle in handles {
            self.sqs
                .change_message_visibility()
                .queue_url(&self.queue_url)
                .receipt_handle(handle)
                .visibility_timeout(come_back)
                .send()
                .await?;
        }
        Err("the execution environment crashed in the middle of the invocation".into())
    }

    /// Runs `event` in a new execution environment whose clients crash at `point`; true when it
    /// crashed there, false when the handler ended first (the crash comes after its work).
    async fn run_to_crash(
        &self,
        point: Point,
        event: LambdaEvent<SqsEvent>,
    ) -> Result<bool, lambda_runtime::Error> {
        let crash = Arc::new(Crash::default());
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let dynamodb_faults = Faults::new("dynamodb", crash.clone(), clock.clone());
        let sqs_faults = Faults::new("sqs", crash.clone(), clock);
        let dynamodb = aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(&self.sdk)
                .interceptor(lambda_idempotency::runtime::TraceHeader)
                .interceptor(dynamodb_faults.clone())
                .build(),
        );
        let sqs = aws_sdk_sqs::Client::from_conf(
            aws_sdk_sqs::config::Builder::from(&self.sdk)
                .interceptor(lambda_idempotency::runtime::TraceHeader)
                .interceptor(sqs_faults.clone())
                .build(),
        );
        let app = payment_processor::App::new(
            dynamodb,
            sqs.clone(),
            payment_processor::Config::from_settings(&self.settings)?,
        )
        .with_processor(payments_config::consumer_processor(sqs, &self.settings)?);
        match point.client {
            Client::DynamoDb => dynamodb_faults.arm(point.request, Fault::Crash),
            Client::Sqs => sqs_faults.arm(point.request, Fault::Crash),
        }
        tokio::select! {
            biased;
            () = crash.raised() => {}
            _ = app.handle(event) => {}
        }
        Ok(crash.is_raised())
    }
}
