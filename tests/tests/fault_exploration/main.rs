//! The fault exploration of payment-processor: the function as deployed (its verification,
//! catch-up, transactional charge and receipt send; the template's settings), in process, over
//! every request its DynamoDB and its SQS clients make and every fault of the injector.
//!
//! Each case accepts three payments of a new account (as payments-api does), puts their messages
//! on a simulated `payments.fifo` (one message group, `maxReceiveCount` 41: the attempt bound
//! alone, stricter than the template's 65, which adds an outage's room; SQS's redrive as SQS
//! applies it), arms one fault at request `n` of one client, and invokes the function with each
//! batch until the queue drains, each invocation in a new execution environment (a crash loses
//! the process, its cache included). The clients are the function's own, without the SDK's
//! retries (each fault reaches the function, as when the SDK's retries are used up), against the
//! local AWS: the payments, ledger, balances, accounts and idempotency tables and the receipts
//! queue are real. The dead-letter queue and the visibility changes are in memory, so that the
//! simulated queue follows them, their requests going through the SQS client's injector (one
//! service: SQS). A clean run makes none of them: [`own_sqs`] explores them, on a batch with a
//! poison payment and a flaky one.
//!
//! Each case checks: the queue drained; no message moved to a dead-letter queue, by the function
//! or by SQS; each payment charged (none failed: every failure is an injected fault, never the
//! payment's). Once every case ran: each payment charged exactly once with its balance, each with
//! a receipt event on the receipts queue, and the invariant checker's verdict, no payment failed.
//!
//! The faults, and the simulated queue and its drain, are the library's test utilities, which its
//! own exploration uses too (`lambda_idempotency::test_util::{fault, sim_queue}`). The exploration
//! of payments-publisher, on a simulated stream shard, is [`publisher`]; that of receipt-sender,
//! on a simulated receipts queue, is [`receipts`]; that of payments-api, under a client that
//! retries as the API's docs say, with these payments charged afterwards, is [`api`]; that of
//! payments-reader, reading charged, accepted, foreign and missing payments under that client,
//! is [`reader`]; that of payments-reconciler, run on its schedule over the state each of its duties starts from, is
//! [`reconciler`]. The faulty clients they give their functions are [`clients`]'.
//!
//! Each exploration runs on a local AWS of its own ([`own_stack`]), not on the suite's.

mod api;
mod clients;
mod own_sqs;
mod publisher;
mod reader;
mod receipts;
mod reconciler;

use clients::Client;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lambda_events::sqs::SqsEvent;
use futures_util::StreamExt;
use lambda_idempotency::backoff::VisibilityBackoff;
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::dead_letter::DeadLetter;
use lambda_idempotency::publish::Publisher;
use lambda_idempotency::test_util::InMemorySqs;
use lambda_idempotency::test_util::fault::{Crash, Fault, Faults};
use lambda_idempotency::test_util::sim_queue::{self, SimQueue};
use lambda_idempotency::time::{Clock, ManualClock};
use lambda_runtime::LambdaEvent;
use local_aws::template::Naming;
use payment_processor::{App, Config};
use payments_e2e::invariants::Scope;
use payments_e2e::stack;
use payments_e2e::{OwnServer, Stack};
use payments_model::stored::StoredPayment;
use payments_model::{PaymentCharged, PaymentRequested, PaymentStatus};

/// The faults every request is explored with: those of the library's exploration. The long
/// outage (ten minutes) outlasts `maxReceiveCount` receives at the backoff's first delays: a
/// receipts queue down that long after a charge, the first scenario of the issue this
/// exploration came with.
const FAULTS: [Fault; 5] = [
    Fault::Fail,
    Fault::LoseAnswer,
    Fault::Crash,
    Fault::Outage(Duration::from_secs(30)),
    Fault::Outage(Duration::from_secs(600)),
];

/// Payments per case, of one account.
const PAYMENTS: usize = 3;

/// The order of the payments' messages on the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    /// As accepted: each charged from its own message.
    Accepted,
    /// The last first: its message charges the earlier ones from the payments table first
    /// (catch-up), and theirs are duplicates, their receipts sent again.
    Reversed,
}

/// What a case did.
struct Case {
    /// Its payments, accepted.
    payments: Vec<PaymentRequested>,
    /// What went wrong.
    problems: Vec<String>,
    /// The requests of the DynamoDB client, then of the SQS client.
    requests: [u32; 2],
}

/// What the cases share: the stack, the clock, the crash and each client's injector.
struct Harness {
    stack: Stack,
    clock: Arc<ManualClock>,
    crash: Arc<Crash>,
    dynamodb_faults: Faults,
    sqs_faults: Faults,
    dynamodb: aws_sdk_dynamodb::Client,
    sqs: aws_sdk_sqs::Client,
    config: Config,
    /// The function's dead-letter queue and visibility changes.
    memory: InMemorySqs,
}

impl Harness {
    async fn new() -> Self {
        let stack = own_stack().await;
        let clock = Arc::new(ManualClock::starting_now());
        let crash = Arc::new(Crash::default());
        let dynamodb_faults =
            Faults::new("dynamodb", crash.clone(), clock.clone() as Arc<dyn Clock>);
        let sqs_faults = Faults::new("sqs", crash.clone(), clock.clone() as Arc<dyn Clock>);
        let dynamodb = faulty_dynamodb(&stack.sdk, &dynamodb_faults);
        let sqs = faulty_sqs(&stack.sdk, &sqs_faults);
        let config = Config::from_settings(&stack.settings("payment-processor").unwrap()).unwrap();
        let memory = InMemorySqs::new().with_faults(sqs_faults.clone());
        Self {
            stack,
            clock,
            crash,
            dynamodb_faults,
            sqs_faults,
            dynamodb,
            sqs,
            config,
            memory,
        }
    }

    fn faults(&self, client: Client) -> &Faults {
        match client {
            Client::DynamoDb => &self.dynamodb_faults,
            Client::Sqs => &self.sqs_faults,
        }
    }

    fn disarm(&self) {
        self.dynamodb_faults.disarm();
        self.sqs_faults.disarm();
        self.crash.reset();
    }

    /// payment-processor in a new execution environment: the template's settings, the faulty
    /// clients, and a batch processor on the test's clock, one record at a time (so that request
    /// `n` is the same request in every run), its dead-letter queue and backoff in memory.
    fn function(&self) -> App {
        let processor = BatchProcessor::new()
            .with_clock(self.clock.clone() as Arc<dyn Clock>)
            .max_attempts(self.config.max_attempts.unwrap_or(5))
            .with_dead_letter(DeadLetter::in_memory(
                &self.memory,
                "https://sqs.us-east-1.amazonaws.com/123456789012/payments-dlq.fifo",
            ))
            .with_backoff(VisibilityBackoff::in_memory(&self.memory))
            .concurrency(1);
        // The receipts publisher's retries as deployed, without their waits: the test's clock
        // does not drive them.
        let receipts = Publisher::new(self.sqs.clone(), &self.config.receipts_queue_url)
            .backoff(Duration::ZERO, Duration::ZERO);
        App::new(self.dynamodb.clone(), self.sqs.clone(), self.config.clone())
            .with_processor(processor)
            .with_receipts_publisher(receipts)
    }

    /// [`PAYMENTS`] payments of each of `accounts` new accounts, accepted.
    async fn accepted(&self, accounts: usize) -> Vec<Vec<PaymentRequested>> {
        accepted(&self.stack, accounts, PAYMENTS).await
    }

    /// What is wrong with `payment` now: anything but charged.
    async fn not_charged(&self, payment: &PaymentRequested) -> Option<String> {
        let stored = StoredPayment::read(
            &self.stack.clients.dynamodb,
            self.stack.table("PaymentsTable"),
            &payment.payment_id,
        )
        .await
        .unwrap()
        .unwrap();
        (!stored.is(PaymentStatus::Charged)).then(|| {
            format!(
                "{} is {:?} ({:?}), not charged",
                payment.payment_id, stored.status, stored.last_error
            )
        })
    }

    /// Runs a case on `accepted` (one account's payments) with `fault` armed (none: a clean
    /// run). Whether each payment was charged is checked once all cases ran.
    async fn case(
        &self,
        order: Order,
        fault: Option<(Client, u32, Fault)>,
        accepted: Vec<PaymentRequested>,
    ) -> Case {
        let mut in_queue = accepted.clone();
        if order == Order::Reversed {
            in_queue.reverse();
        }
        let messages: Vec<(String, String)> = in_queue
            .iter()
            .map(|p| {
                (
                    format!("m-{}", p.payment_id),
                    serde_json::to_string(p).unwrap(),
                )
            })
            .collect();
        self.disarm();
        if let Some((client, n, fault)) = fault {
            self.faults(client).arm(n, fault);
        }
        let queue = SimQueue::grouped(
            true,
            &messages,
            &accepted[0].account_id,
            self.clock.now_ms(),
        );
        let drained = sim_queue::drain(queue, &self.clock, &self.crash, &self.memory, |event| {
            self.invoke(event)
        })
        .await;
        let fired = fault.is_some_and(|(client, ..)| self.faults(client).fired());
        let log = format!(
            "dynamodb: {}; sqs: {}",
            self.dynamodb_faults.runs(),
            self.sqs_faults.runs()
        );
        let requests = [self.dynamodb_faults.sent(), self.sqs_faults.sent()];
        self.disarm();
        let problems = drained.case_problems(fault.is_some() && !fired, &log, []);
        Case {
            payments: accepted,
            problems,
            requests,
        }
    }

    async fn invoke(
        &self,
        event: LambdaEvent<SqsEvent>,
    ) -> Result<aws_lambda_events::sqs::SqsBatchResponse, String> {
        self.function()
            .handle(event)
            .await
            .map_err(|e| e.to_string())
    }

    /// The payments with a `PaymentCharged` event on the receipts queue, and their amounts.
    async fn receipts(&self) -> HashMap<String, i64> {
        let messages = self.stack.receive_all("ReceiptsQueue").await.unwrap();
        messages
            .iter()
            .map(|m| {
                let event: PaymentCharged =
                    serde_json::from_str(m.body.as_deref().unwrap_or_default()).unwrap();
                (event.payment_id, event.amount_cents)
            })
            .collect()
    }
}

/// A DynamoDB client of `sdk`'s endpoint with `faults` on its requests, without the SDK's
/// retries: each fault reaches the function, as when the SDK's retries are used up.
fn faulty_dynamodb(sdk: &aws_config::SdkConfig, faults: &Faults) -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(sdk)
            .interceptor(faults.clone())
            .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
            .build(),
    )
}

/// An SQS client of `sdk`'s endpoint with `faults` on its requests, without the SDK's
/// retries.
fn faulty_sqs(sdk: &aws_config::SdkConfig, faults: &Faults) -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::config::Builder::from(sdk)
            .interceptor(faults.clone())
            .retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled())
            .build(),
    )
}

/// Prints an exploration's summary line (`clean`: the function and the requests of its clean
/// run; then the cases, the time since `started` and how many failed), and fails listing each
/// failed case.
fn summarize(clean: &str, cases: usize, started: Instant, failures: &[String]) {
    println!(
        "{clean}; {cases} cases in {:.1} s, {} failed",
        started.elapsed().as_secs_f64(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {cases} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The template provisioned on this test process's own local AWS ([`OwnServer`], started by the
/// first call): thousands of requests, none of them waiting for or holding up the rest of the
/// suite's, which the suite's server applies one DynamoDB request at a time.
async fn own_stack() -> Stack {
    static SERVER: tokio::sync::OnceCell<OwnServer> = tokio::sync::OnceCell::const_new();
    let server = SERVER
        .get_or_init(|| async { OwnServer::start().await.unwrap() })
        .await;
    Stack::provision_on(server.sdk_config().await, Naming::unique("e2e"), &[])
        .await
        .unwrap()
}

/// `payments` payments of each of `accounts` new accounts, accepted as payments-api accepts them
/// (concurrently, the accounts' in one call), by account.
async fn accepted(stack: &Stack, accounts: usize, payments: usize) -> Vec<Vec<PaymentRequested>> {
    described(stack, accounts, payments, |_| String::new()).await
}

/// As [`accepted`], payment `i` of each account's description ending in `suffix(i)`.
async fn described(
    stack: &Stack,
    accounts: usize,
    payments: usize,
    suffix: impl Fn(usize) -> String,
) -> Vec<Vec<PaymentRequested>> {
    let run = uuid::Uuid::new_v4().simple().to_string();
    let batch = (0..accounts)
        .flat_map(|a| {
            let account = format!("acct-explore-{}-{a}", &run[..8]);
            stack::payments(payments, 1, "explore", &suffix)
                .into_iter()
                .map(move |p| PaymentRequested {
                    account_id: account.clone(),
                    ..p
                })
        })
        .collect();
    let accepted = stack.accept(batch).await.unwrap();
    accepted.chunks(payments).map(<[_]>::to_vec).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_exploration_payment_processor() {
    let started = Instant::now();
    let harness = Harness::new().await;
    let mut failures = Vec::new();
    let mut counts = Vec::new();
    let mut cases = 0;
    // Each case's label and payments, for the check of their statuses at the end.
    let mut labelled: Vec<(String, Vec<PaymentRequested>)> = Vec::new();
    for order in [Order::Accepted, Order::Reversed] {
        let accounts = harness.accepted(1).await;
        let clean = harness.case(order, None, accounts[0].clone()).await;
        cases += 1;
        labelled.push((format!("{order:?} clean run"), clean.payments));
        if !clean.problems.is_empty() {
            failures.push(format!(
                "{order:?} clean run: {}",
                clean.problems.join("; ")
            ));
        }
        counts.push(format!(
            "{order:?}: {} DynamoDB and {} SQS requests",
            clean.requests[0], clean.requests[1]
        ));
        let planned = clients::FaultyClients::planned(clean.requests, &FAULTS);
        let accounts = harness.accepted(planned.len()).await;
        for ((client, n, fault), accepted) in planned.into_iter().zip(accounts) {
            cases += 1;
            let label = format!("{order:?} {client:?} request {n} {}", fault.label());
            let case = harness
                .case(order, Some((client, n, fault)), accepted)
                .await;
            if !case.problems.is_empty() {
                failures.push(format!("{label}: {}", case.problems.join("; ")));
            }
            labelled.push((label, case.payments));
        }
    }
    let harness = &harness;
    let checks = labelled.iter().flat_map(|(label, payments)| {
        payments.iter().map(move |p| async move {
            harness
                .not_charged(p)
                .await
                .map(|why| format!("{label}: {why}"))
        })
    });
    failures.extend(
        futures_util::stream::iter(checks)
            .buffer_unordered(16)
            .filter_map(|why| async move { why })
            .collect::<Vec<_>>()
            .await,
    );
    let all: Vec<PaymentRequested> = labelled.into_iter().flat_map(|(_, p)| p).collect();
    summarize(
        &format!(
            "payment-processor: in a clean run of {PAYMENTS} payments, {}",
            counts.join(", ")
        ),
        cases,
        started,
        &failures,
    );

    let offenders = harness.stack.charged_exactly_once(&all).await.unwrap();
    assert!(offenders.is_empty(), "{offenders:?}");
    let receipts = harness.receipts().await;
    let missing: Vec<&str> = all
        .iter()
        .filter(|p| receipts.get(&p.payment_id) != Some(&p.amount_cents))
        .map(|p| p.payment_id.as_str())
        .collect();
    assert!(
        missing.is_empty(),
        "no receipt event with its amount: {missing:?}"
    );
    harness
        .stack
        .assert_invariants(&Scope::through_charging(), &[])
        .await;
}
