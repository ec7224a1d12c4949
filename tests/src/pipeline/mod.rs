//! The whole pipeline running locally: queues and tables provisioned from template.yaml on the
//! local endpoint, payments-api behind a local HTTP gateway (with the template's JWT
//! authorizer), payments-publisher fed by the payments table's stream, and payment-processor and
//! receipt-sender fed by the local SQS event source mapping. The four functions run in this
//! process ([`Functions::InProcess`], for tests that reach into them) or each as its own process
//! under a Lambda Runtime API ([`Functions::Processes`]: the demo, `make up WATCH=1`).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod hook;
mod start;
mod teardown;

pub use hook::{Hooked, ProcessorHook};
pub use teardown::SETTLE_TIMEOUT;

use aws_lambda_events::dynamodb::Event as StreamEvent;
use lambda_idempotency::metrics::BatchCounts;
use lambda_runtime::LambdaEvent;
use local_aws::Clients;
use local_aws::gateway::Gateway;
use local_aws::provision::{Provisioned, provision};
use local_aws::runner::{InProcess, Invoker, Runner, RunningRunner, Stats, queue_depth};
use local_aws::template::{Naming, Template, TemplateOptions};
use payments_model::metrics::function::{PAYMENT_PROCESSOR, PAYMENTS_PUBLISHER};
use payments_model::metrics::processor as processor_metrics;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::checks::{Stored, Tables};
use crate::http::HttpClient;
use crate::logs::function_span;
use crate::processes::{FUNCTIONS, Observed, ProcessOptions, Processes};
use start::Start;

/// How the functions run.
#[derive(Debug, Clone, Default)]
pub enum Functions {
    /// In this process: their handlers called directly (tests can reach into them).
    #[default]
    InProcess,
    /// Each as its own process, its binary from the workspace build, under a Lambda Runtime
    /// API: what runs is each function's `main`.
    Processes(ProcessOptions),
}

/// How to start the pipeline.
#[derive(Debug, Clone)]
pub struct Options {
    /// Prefix of every queue and table name, so that runs do not share resources.
    pub naming: Naming,
    /// `FailPayments` (the failure switch).
    pub fail_payments: String,
    /// `Stage` ([`TEST_STAGE`](crate::stack::TEST_STAGE) by default: the failure switch is
    /// dropped in `prod`).
    pub stage: String,
    /// `BackoffBaseSeconds`: the first retry of a failed record comes after this long.
    pub backoff_base_seconds: u32,
    /// Start payments-publisher with the rest (else: [`Pipeline::start_publisher`]).
    pub start_publisher: bool,
    /// Run payment-processor on `payments.fifo` (else: payments stay `accepted`, their messages
    /// in the queue).
    pub start_processor: bool,
    /// Where the API listens (port 0: any free port).
    pub api_addr: SocketAddr,
    /// Other template parameters, by name (`MaxPaymentAmount`, ...).
    pub parameters: Vec<(String, String)>,
    /// How the functions run.
    pub functions: Functions,
    /// Apply AWS's limits at the local gateway as the template sets them: each route's
    /// throttling (`429` past `ApiThrottlingBurstLimit` at once, then `ApiThrottlingRateLimit`
    /// a second) and each function's reserved concurrency (`500` past
    /// `ApiReservedConcurrency` POSTs in progress). Off: every request reaches its function,
    /// however many at once (tests that count every answer). The event source mappings apply
    /// the functions' reserved concurrency either way.
    pub aws_limits: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            naming: Naming::unique("e2e"),
            fail_payments: String::new(),
            stage: crate::stack::TEST_STAGE.to_owned(),
            backoff_base_seconds: 1,
            start_publisher: true,
            start_processor: true,
            api_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            parameters: Vec::new(),
            functions: Functions::InProcess,
            aws_limits: false,
        }
    }
}

/// Batch counts by function, as the functions reported them.
pub type Counts = Arc<Mutex<BTreeMap<String, BatchCounts>>>;

/// A running pipeline.
pub struct Pipeline {
    /// SDK clients for the endpoint.
    pub clients: Clients,
    /// The template, as resolved for this run.
    pub template: Template,
    /// What was provisioned.
    pub resources: Provisioned,
    gateway: Gateway,
    runner: RunningRunner,
    publisher: Option<RunningRunner>,
    sdk: aws_config::SdkConfig,
    running: Running,
}

/// The functions, as they run.
enum Running {
    InProcess {
        counts: Counts,
        processor: Arc<payment_processor::App>,
        /// What takes payment-processor's invocations over ([`Pipeline::set_processor_hook`]).
        hook: hook::HookSlot,
    },
    Processes(Box<Processes>),
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn settings(
    resources: &Provisioned,
    template: &Template,
    function: &str,
) -> Result<HashMap<String, String>, BoxError> {
    let f = template
        .function_by_name(function)
        .ok_or_else(|| format!("template.yaml has no function {function}"))?;
    Ok(resources.function_env(f)?.into_iter().collect())
}

fn add(counts: &Counts, function: &str, batch: BatchCounts) {
    let mut all = counts.lock().unwrap_or_else(|e| e.into_inner());
    let c = all.entry(function.to_owned()).or_default();
    c.processed += batch.processed;
    c.duplicates += batch.duplicates;
    c.failed += batch.failed;
}

impl Pipeline {
    /// Provisions and starts everything against the endpoint in `AWS_ENDPOINT_URL`.
    pub async fn start(options: Options) -> Result<Self, BoxError> {
        lambda_idempotency::metrics::set_enabled(false);
        let sdk = local_aws::local_sdk_config().await?;
        let clients = Clients::new(&sdk);
        let mut template_options = TemplateOptions::default()
            .naming(options.naming)
            .parameter("FailPayments", options.fail_payments)
            .parameter("Stage", options.stage)
            .parameter(
                "BackoffBaseSeconds",
                options.backoff_base_seconds.to_string(),
            );
        for (name, value) in options.parameters {
            template_options = template_options.parameter(name, value);
        }
        let template = Template::load_project(&template_options)?;
        let resources = provision(&clients, &template).await?;
        let start = Start {
            sdk,
            clients,
            template,
            resources,
            api_addr: options.api_addr,
            start_processor: options.start_processor,
            aws_limits: options.aws_limits,
        };
        let mut pipeline = match options.functions {
            Functions::InProcess => start.in_process().await?,
            Functions::Processes(process_options) => start.processes(&process_options).await?,
        };
        if options.start_publisher {
            pipeline.start_publisher()?;
        }
        Ok(pipeline)
    }

    /// Starts payments-publisher on the payments table's stream (from its oldest record, as
    /// the template's `StartingPosition: TRIM_HORIZON`).
    pub fn start_publisher(&mut self) -> Result<(), BoxError> {
        if let Running::Processes(processes) = &self.running {
            let invoker = processes.invoker("payments-publisher")?;
            return self.start_publisher_with(invoker);
        }
        let Running::InProcess { counts, .. } = &self.running else {
            unreachable!("the functions run in process or as processes")
        };
        let counts = counts.clone();
        let app = Arc::new(payments_publisher::App::from_settings(
            &self.sdk,
            &settings(&self.resources, &self.template, "payments-publisher")?,
        )?);
        self.start_publisher_with(InProcess::new(move |event: LambdaEvent<StreamEvent>| {
            let (app, counts) = (app.clone(), counts.clone());
            let span = function_span("payments-publisher", Some(&event.context.request_id));
            async move {
                let records = event.payload.records.len() as u64;
                let response = app.handle(event).await?;
                // Processed: the records not reported for a retry (sent, or dead-lettered).
                let failed = response.batch_item_failures.len() as u64;
                let batch = BatchCounts {
                    processed: records - failed,
                    failed,
                    ..BatchCounts::default()
                };
                add(&counts, "payments-publisher", batch);
                Ok::<_, lambda_runtime::Error>(response)
            }
            .instrument(span)
        }))
    }

    /// Starts payments-publisher's stream mapping with another handler (fault injection).
    pub fn start_publisher_with(&mut self, invoker: impl Invoker) -> Result<(), BoxError> {
        if self.publisher.is_some() {
            return Err("payments-publisher is running already".into());
        }
        let runner = Runner::from_clients(&self.clients)
            .function(
                &self.template,
                &self.resources,
                "payments-publisher",
                invoker,
            )?
            .start(CancellationToken::new());
        self.publisher = Some(runner);
        Ok(())
    }

    /// Stops payments-publisher (what it has not relayed stays in the stream).
    pub async fn stop_publisher(&mut self) -> Option<Stats> {
        let runner = self.publisher.take()?;
        runner.stop().await.remove("payments-publisher")
    }

    /// A client of the local API, minting test tokens that the local gateway's JWT authorizer
    /// accepts (the template's `JwtIssuer` and first `JwtAudience`, both scopes); call
    /// [`as_caller`](HttpClient::as_caller) to pick the caller.
    pub fn http(&self) -> HttpClient {
        HttpClient::new(self.gateway.url())
            .with_issuer(crate::http::TokenIssuer::from_template(&self.template))
    }

    /// The API's base URL.
    pub fn api_url(&self) -> String {
        self.gateway.url()
    }

    fn queue_url(&self, logical_id: &str) -> &str {
        &self.resources.queues[logical_id].url
    }

    /// Messages still in the pipeline's two work queues (visible + in flight).
    pub async fn in_flight(&self) -> Result<u64, BoxError> {
        let mut total = 0;
        for q in ["PaymentsQueue", "ReceiptsQueue"] {
            let d = queue_depth(&self.clients.sqs, self.queue_url(q)).await?;
            total += d.visible + d.not_visible + d.delayed;
        }
        Ok(total)
    }

    /// Waits until payments-publisher has relayed every payment written so far (when it runs)
    /// and both work queues are empty; calls `progress` with what is left, every second.
    pub async fn drain(&self, timeout: Duration, progress: impl Fn(u64)) -> Result<(), BoxError> {
        let end = tokio::time::Instant::now() + timeout;
        if let Some(publisher) = &self.publisher {
            publisher.wait_streams_caught_up(timeout).await?;
        }
        let mut empty_polls = 0;
        loop {
            let left = self.in_flight().await?;
            progress(left);
            // Empty twice in a row: a message between receive and delete is counted in flight.
            empty_polls = if left == 0 { empty_polls + 1 } else { 0 };
            if empty_polls >= 2 {
                return Ok(());
            }
            if tokio::time::Instant::now() >= end {
                return Err(format!(
                    "the pipeline did not drain within {timeout:?}: {left} messages left"
                )
                .into());
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Sends `payments` to the payments queue again, each as a new message with the body
    /// payments-api sent: what a producer resending after the FIFO deduplication window (5
    /// minutes) does. Such a resend comes after the payment's first send, so this first waits
    /// (up to `relay_timeout`) until payments-publisher has relayed every payment written so far:
    /// sent earlier, a resend would overtake earlier payments of its account still in the outbox,
    /// and the queue would hold the account's payments in another order than they were sent.
    /// Returns how many were sent.
    pub async fn resend(
        &self,
        payments: &[&crate::workload::Accepted],
        relay_timeout: Duration,
    ) -> Result<usize, BoxError> {
        use lambda_idempotency::publish::{DeduplicationId, Message, MessageGroupId, Publisher};
        if let Some(publisher) = &self.publisher {
            publisher.wait_streams_caught_up(relay_timeout).await?;
        }
        let publisher = Publisher::new(self.clients.sqs.clone(), self.queue_url("PaymentsQueue"));
        let mut messages = Vec::new();
        for a in payments {
            let body = payments_model::PaymentRequested {
                payment_id: a.payment_id.clone(),
                account_id: a.planned.account.clone(),
                amount_cents: a.planned.amount_cents,
                currency: a.planned.currency.into(),
                description: Some(a.planned.description.clone()),
                sequence: None,
                unknown: Default::default(),
            };
            messages.push(Message::fifo(
                MessageGroupId::new(a.planned.account.as_str())?,
                DeduplicationId::from_key(&format!("{}-resend", a.payment_id)),
                serde_json::to_string(&body)?,
            )?);
        }
        let mut sent = 0;
        for result in publisher.send_all(messages).await {
            result?;
            sent += 1;
        }
        Ok(sent)
    }

    /// A publisher to the payments queue that is not the pipeline's relay: an outside
    /// producer's.
    pub fn payments_publisher(&self) -> lambda_idempotency::publish::Publisher {
        lambda_idempotency::publish::Publisher::new(
            self.clients.sqs.clone(),
            self.queue_url("PaymentsQueue"),
        )
    }

    /// payments-reconciler as configured by the template, with `overrides` of its settings
    /// (e.g. `RESEND_AFTER_SECONDS`).
    pub fn reconciler(
        &self,
        overrides: &[(&str, &str)],
    ) -> Result<payments_operations::reconcile::Reconciler, BoxError> {
        let f = self
            .template
            .function_by_name("payments-reconciler")
            .ok_or("template.yaml has no function payments-reconciler")?;
        let settings = self.resources.function_env(f)?.into_iter().collect();
        crate::stack::reconciler_with(&self.sdk, settings, overrides)
    }

    /// The tables to check.
    pub fn tables(&self) -> Tables {
        let t = |id: &str| self.resources.tables[id].name.clone();
        Tables {
            payments: t("PaymentsTable"),
            ledger: t("LedgerTable"),
            balances: t("BalancesTable"),
            receipts: t("ReceiptsTable"),
        }
    }

    /// Reads the stored outcome.
    pub async fn stored(&self) -> Result<Stored, BoxError> {
        let mut stored = Stored::read(&self.clients.dynamodb, &self.tables()).await?;
        self.count_dead_letters(&mut stored).await?;
        Ok(stored)
    }

    /// Adds the dead-letter queues' contents to `stored`.
    pub async fn count_dead_letters(&self, stored: &mut Stored) -> Result<(), BoxError> {
        let depth = |id: &str| queue_depth(&self.clients.sqs, self.queue_url(id));
        let d = depth("PaymentsDeadLetterQueue").await?;
        stored.dead_lettered_payments = (d.visible + d.not_visible) as usize;
        stored.dead_letters = crate::stack::dead_letters_in_queue(
            &self.clients.sqs,
            self.queue_url("PaymentsDeadLetterQueue"),
            Duration::from_secs(300),
        )
        .await?;
        let d = depth("ReceiptsDeadLetterQueue").await?;
        stored.dead_lettered_receipts = (d.visible + d.not_visible) as usize;
        Ok(())
    }

    /// Batch counts by function so far: as the functions counted them in this process, or as
    /// their processes printed them (their metrics).
    pub fn counts(&self) -> BTreeMap<String, BatchCounts> {
        match &self.running {
            Running::InProcess { counts, .. } => {
                counts.lock().unwrap_or_else(|e| e.into_inner()).clone()
            }
            Running::Processes(processes) => counts_printed(&processes.observed()),
        }
    }

    /// `PaymentCharged` events payment-processor sent again for duplicates.
    pub fn receipts_resent(&self) -> u64 {
        match &self.running {
            Running::InProcess { processor, .. } => processor.receipts_resent(),
            Running::Processes(processes) => processes
                .observed()
                .metric(PAYMENT_PROCESSOR, processor_metrics::RECEIPTS_RESENT),
        }
    }

    /// Duplicates payment-processor answered from its warm-container cache.
    pub fn cache_hits(&self) -> u64 {
        match &self.running {
            Running::InProcess { processor, .. } => processor.cache_hits(),
            Running::Processes(processes) => processes
                .observed()
                .metric(PAYMENT_PROCESSOR, processor_metrics::CACHE_HITS),
        }
    }

    /// The functions' processes, when they run as processes.
    pub fn processes(&self) -> Option<&Processes> {
        match &self.running {
            Running::InProcess { .. } => None,
            Running::Processes(processes) => Some(processes.as_ref()),
        }
    }

    /// How the functions run, and (as processes) what replaced their processes so far.
    pub fn observed(&self) -> Option<Observed> {
        match &self.running {
            Running::InProcess { .. } => None,
            Running::Processes(processes) => Some(processes.observed()),
        }
    }

    /// Event source statistics by function so far.
    pub fn stats(&self) -> BTreeMap<String, Stats> {
        let mut stats = self.runner.all_stats();
        if let Some(publisher) = &self.publisher {
            stats.extend(publisher.all_stats());
        }
        stats
    }

    /// Stops the runner and the gateway without checking anything (`make up` on Ctrl-C, and a
    /// run that checked the invariants itself); returns the final event source statistics.
    pub async fn stop_unchecked(self) -> BTreeMap<String, Stats> {
        let mut stats = self.runner.stop().await;
        if let Some(publisher) = self.publisher {
            stats.extend(publisher.stop().await);
        }
        self.gateway.shutdown().await;
        if let Running::Processes(processes) = self.running {
            processes.stop().await;
        }
        stats
    }
}

/// Batch counts by function from the metrics the functions printed (payments-publisher counts
/// its relayed and dead-lettered records as processed).
fn counts_printed(observed: &Observed) -> BTreeMap<String, BatchCounts> {
    use lambda_idempotency::metrics::{DEAD_LETTERED, DUPLICATE, FAILED, PROCESSED};
    use payments_model::metrics::publisher;
    let mut counts = BTreeMap::new();
    for function in FUNCTIONS {
        let metric = |name: &str| observed.metric(function, name);
        let c = if function == PAYMENTS_PUBLISHER {
            BatchCounts {
                processed: metric(publisher::RELAYED) + metric(publisher::DEAD_LETTERED),
                failed: metric(publisher::FAILED),
                dead_lettered: metric(publisher::DEAD_LETTERED),
                ..BatchCounts::default()
            }
        } else {
            BatchCounts {
                processed: metric(PROCESSED),
                duplicates: metric(DUPLICATE),
                failed: metric(FAILED),
                dead_lettered: metric(DEAD_LETTERED),
            }
        };
        if observed.metrics.contains_key(function) {
            counts.insert(function.to_owned(), c);
        }
    }
    counts
}
