//! The whole pipeline running locally: queues and tables provisioned from template.yaml on the
//! local endpoint, payments-api behind a local HTTP gateway (with the template's JWT
//! authorizer), payments-publisher fed by the payments table's stream, and payment-processor and
//! receipt-sender fed by the local SQS event source mapping, all four in this process.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::dynamodb::Event as StreamEvent;
use aws_lambda_events::sqs::SqsEvent;
use lambda_idempotency::metrics::BatchCounts;
use lambda_runtime::{Error, LambdaEvent};
use local_aws::Clients;
use local_aws::gateway::{Gateway, GatewayOptions, JwtAuthorizer};
use local_aws::provision::{Provisioned, provision};
use local_aws::runner::{InProcess, Invoker, Runner, RunningRunner, Stats, queue_depth};
use local_aws::template::{Naming, Template, TemplateOptions};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::checks::{Stored, Tables};
use crate::http::HttpClient;
use crate::logs::function_span;

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
    counts: Counts,
    processor: Arc<payment_processor::App>,
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
        let counts = Counts::default();

        let api = payments_api::App::from_settings(
            &sdk,
            &settings(&resources, &template, "payments-api")?,
        )?;
        // Each function's init, as its main runs it: an idempotency table that does not fit
        // stops it.
        api.check_idempotency_table().await?;
        let api_function = template
            .function_by_name("payments-api")
            .ok_or("no payments-api")?;
        let gateway = Gateway::serve(
            options.api_addr,
            GatewayOptions::for_function(api_function).with_jwt_authorizer(
                JwtAuthorizer::from_parameters(&template, "JwtIssuer", "JwtAudience")
                    .ok_or("template.yaml has no JwtIssuer/JwtAudience parameters")?,
            ),
            move |request| {
                let api = api.clone();
                async move { api.handle(request).await }
                    .instrument(function_span("payments-api", None))
            },
        )
        .await?;

        let processor = Arc::new(payment_processor::App::from_settings(
            &sdk,
            &settings(&resources, &template, "payment-processor")?,
        )?);
        let sender = Arc::new(receipt_sender::App::from_settings(
            &sdk,
            &settings(&resources, &template, "receipt-sender")?,
        )?);
        processor.check_idempotency_table().await?;
        sender.check_idempotency_table().await?;
        let (c1, c2) = (counts.clone(), counts.clone());
        let processor_app = processor.clone();
        let mut runner = Runner::from_clients(&clients).wait_time_seconds(1);
        if options.start_processor {
            runner = runner.function(
                &template,
                &resources,
                "payment-processor",
                InProcess::new(move |event: LambdaEvent<SqsEvent>| {
                    let (app, counts) = (processor.clone(), c1.clone());
                    let span = function_span("payment-processor", Some(&event.context.request_id));
                    async move {
                        let (response, batch) = app.as_ref().handle_counted(event).await?;
                        add(&counts, "payment-processor", batch);
                        Ok::<_, Error>(response)
                    }
                    .instrument(span)
                }),
            )?;
        }
        let runner = runner
            .function(
                &template,
                &resources,
                "receipt-sender",
                InProcess::new(move |event: LambdaEvent<SqsEvent>| {
                    let (app, counts) = (sender.clone(), c2.clone());
                    let span = function_span("receipt-sender", Some(&event.context.request_id));
                    async move {
                        let (response, batch) = app.as_ref().handle_counted(event).await?;
                        add(&counts, "receipt-sender", batch);
                        Ok::<_, Error>(response)
                    }
                    .instrument(span)
                }),
            )?
            .start(CancellationToken::new());
        let mut pipeline = Self {
            clients,
            template,
            resources,
            gateway,
            runner,
            publisher: None,
            sdk,
            counts,
            processor: processor_app,
        };
        if options.start_publisher {
            pipeline.start_publisher()?;
        }
        Ok(pipeline)
    }

    /// Starts payments-publisher on the payments table's stream (from its oldest record, as
    /// the template's `StartingPosition: TRIM_HORIZON`).
    pub fn start_publisher(&mut self) -> Result<(), BoxError> {
        let app = Arc::new(payments_publisher::App::from_settings(
            &self.sdk,
            &settings(&self.resources, &self.template, "payments-publisher")?,
        )?);
        let counts = self.counts.clone();
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
        Ok(stored)
    }

    /// Batch counts by function so far.
    pub fn counts(&self) -> BTreeMap<String, BatchCounts> {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// `PaymentCharged` events payment-processor sent again for duplicates.
    pub fn receipts_resent(&self) -> u64 {
        self.processor.receipts_resent()
    }

    /// Duplicates payment-processor answered from its warm-container cache.
    pub fn cache_hits(&self) -> u64 {
        self.processor.idempotency().backend().cache().hits()
    }

    /// Event source statistics by function so far.
    pub fn stats(&self) -> BTreeMap<String, Stats> {
        let mut stats = self.runner.all_stats();
        if let Some(publisher) = &self.publisher {
            stats.extend(publisher.all_stats());
        }
        stats
    }

    /// Stops the runner and the gateway; returns the final event source statistics.
    pub async fn stop(self) -> BTreeMap<String, Stats> {
        let mut stats = self.runner.stop().await;
        if let Some(publisher) = self.publisher {
            stats.extend(publisher.stop().await);
        }
        self.gateway.shutdown().await;
        stats
    }
}
