//! The fault exploration of receipt-sender: the function as deployed (each event verified against
//! its payment, then the idempotent receipt write; the template's settings), in process, over
//! every request its DynamoDB client makes and every fault of the injector.
//!
//! Each case takes three payments of a new account, charged by payment-processor (without
//! faults), and puts the `PaymentCharged` events payment-processor sent to the receipts queue on
//! a simulated `ReceiptsQueue` (standard, as the template declares it, with its
//! `maxReceiveCount` and visibility timeout; SQS's redrive as SQS applies it), with a second copy
//! of the first payment's event, as payment-processor sends it again after a crash between its
//! charge and its completion. It arms one fault at request `n` of the DynamoDB client, and
//! invokes the function with each batch until the queue drains, each invocation in a new
//! execution environment (a crash loses the process, its cache included). The client is the
//! function's own, without the SDK's retries (each fault reaches the function, as when the SDK's
//! retries are used up), against the local AWS: the payments, receipts and idempotency tables
//! are real. The idempotency records' leases and the deadlines run on the test's clock. The
//! dead-letter queue and the visibility changes are in memory, so that the simulated queue
//! follows them; they are the only requests of the function's SQS client, so no fault is armed
//! on it.
//!
//! The same runs again on batches of duplicates ([`Batch::Duplicates`]): one charged payment's
//! event twice under one message id (a standard queue can deliver a message twice, in one batch)
//! and its second event twice under another id, all in one batch, with the batch processor at
//! its default concurrency as receipt-sender deploys it (10 records at once): the repeated id
//! runs once, and the records of the payment's key one after another.
//!
//! Each case checks: the queue drained; no message moved to a dead-letter queue, by the function
//! or by SQS; the fault fired. Once every case ran: each payment has exactly one receipt, with
//! its payment's account, amount and currency, and the invariant checker's verdict on the whole
//! pipeline, no payment failed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use lambda_idempotency::backoff::VisibilityBackoff;
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::dead_letter::DeadLetter;
use lambda_idempotency::test_util::InMemorySqs;
use lambda_idempotency::test_util::fault::{Crash, Fault, Faults};
use lambda_idempotency::test_util::sim_queue::{self, SimQueue};
use lambda_idempotency::time::{Clock, ManualClock};
use lambda_runtime::LambdaEvent;
use payments_e2e::Stack;
use payments_e2e::faults::failed_in_batch;
use payments_e2e::invariants::Scope;
use payments_e2e::sqs_records::fifo_record;
use payments_model::PaymentRequested;
use receipt_sender::{App, Config};

use crate::{FAULTS, faulty_dynamodb, summarize};

/// Payments per case, of one account.
const PAYMENTS: usize = 3;

/// What a case's queue holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Batch {
    /// Each payment's event, and a second event of the first payment under another message id
    /// (payment-processor's after a crash), run one record at a time: request `n` is the same
    /// request in every run.
    Copy,
    /// One payment's event twice under its message id (a standard queue delivering one message
    /// twice in a batch) and its second event twice under another id, run by the processor as
    /// deployed (its default concurrency, 10 records at once): the records of one key wait for
    /// each other, so request `n` is still the same request in every run.
    Duplicates,
}

impl Batch {
    /// Payments per case.
    fn payments(self) -> usize {
        match self {
            Batch::Copy => PAYMENTS,
            Batch::Duplicates => 1,
        }
    }

    /// The queue's messages for `charged`: `(id, body)`.
    fn messages(self, charged: &[Charged]) -> Vec<(String, String)> {
        let (first, body) = &charged[0];
        let own = (format!("m-{}", first.payment_id), body.clone());
        // payment-processor's second event of the first payment.
        let again = (format!("m-{}-again", first.payment_id), body.clone());
        match self {
            Batch::Copy => {
                let mut messages: Vec<(String, String)> = charged
                    .iter()
                    .map(|(p, body)| (format!("m-{}", p.payment_id), body.clone()))
                    .collect();
                messages.push(again);
                messages
            }
            Batch::Duplicates => vec![own.clone(), own, again.clone(), again],
        }
    }
}

/// A payment charged by payment-processor, and the body of the `PaymentCharged` event it sent.
type Charged = (PaymentRequested, String);

/// What the cases share: the stack, the clock, the crash and the DynamoDB client's injector.
struct Harness {
    stack: Stack,
    clock: Arc<ManualClock>,
    crash: Arc<Crash>,
    faults: Faults,
    dynamodb: aws_sdk_dynamodb::Client,
    config: Config,
    /// `MAX_ATTEMPTS`, as the template sets it.
    max_attempts: Option<u32>,
    /// `ReceiptsQueue` as the template declares it: FIFO or not, its redrive policy's
    /// `maxReceiveCount`, its visibility timeout.
    fifo: bool,
    max_receive_count: u32,
    visibility_timeout: Duration,
    /// The function's dead-letter queue and visibility changes.
    memory: InMemorySqs,
}

impl Harness {
    async fn new() -> Self {
        let stack = super::own_stack().await;
        let clock = Arc::new(ManualClock::starting_now());
        let crash = Arc::new(Crash::default());
        let faults = Faults::new("dynamodb", crash.clone(), clock.clone() as Arc<dyn Clock>);
        let dynamodb = faulty_dynamodb(&stack.sdk, &faults);
        let settings = stack.settings("receipt-sender").unwrap();
        let queue = &stack.template.queues["ReceiptsQueue"];
        let redrive = queue
            .redrive
            .as_ref()
            .expect("ReceiptsQueue has a redrive policy");
        Self {
            config: Config::from_settings(&settings).unwrap(),
            max_attempts: payments_config::max_attempts(&settings).unwrap(),
            fifo: queue.fifo,
            max_receive_count: redrive.max_receive_count,
            visibility_timeout: Duration::from_secs(queue.visibility_timeout.into()),
            stack,
            clock,
            crash,
            faults,
            dynamodb,
            memory: InMemorySqs::new(),
        }
    }

    /// receipt-sender in a new execution environment: the template's settings, the faulty
    /// client, its idempotency records and a batch processor on the test's clock, one record at
    /// a time for `batch` [`Batch::Copy`] (so that request `n` is the same request in every run)
    /// and at the default concurrency for [`Batch::Duplicates`], its dead-letter queue and
    /// backoff in memory.
    fn function(&self, batch: Batch) -> App {
        let clock = self.clock.clone() as Arc<dyn Clock>;
        let mut processor = BatchProcessor::new()
            .with_clock(clock.clone())
            .with_dead_letter(DeadLetter::in_memory(
                &self.memory,
                self.stack.queue_url("ReceiptsDeadLetterQueue"),
            ))
            .with_backoff(VisibilityBackoff::in_memory(&self.memory));
        if batch == Batch::Copy {
            processor = processor.concurrency(1);
        }
        if let Some(attempts) = self.max_attempts {
            processor = processor.max_attempts(attempts);
        }
        App::new(self.dynamodb.clone(), self.config.clone())
            .with_processor(processor)
            .with_clock(clock)
    }

    /// `payments` payments of each of `accounts` new accounts, accepted and charged by
    /// payment-processor as deployed (its own clients, no fault), by account, each with the
    /// `PaymentCharged` event it sent, taken off the receipts queue.
    async fn charged(&self, accounts: usize, payments: usize) -> Vec<Vec<Charged>> {
        let accepted = crate::accepted(&self.stack, accounts, payments).await;
        let processor = self.stack.payment_processor().unwrap();
        let records: Vec<_> = accepted
            .iter()
            .flatten()
            .map(|p| {
                let body = serde_json::to_string(p).unwrap();
                fifo_record(&p.payment_id, &body, &p.account_id, 1)
            })
            .collect();
        for batch in records.chunks(10) {
            let failed = failed_in_batch(&processor, batch.to_vec()).await;
            assert!(failed.is_empty(), "payment-processor failed {failed:?}");
        }
        let mut events = self.take_receipt_events().await;
        accepted
            .into_iter()
            .map(|payments| {
                payments
                    .into_iter()
                    .map(|p| match events.remove(&p.payment_id).as_deref() {
                        Some([body]) => (p, body.clone()),
                        other => panic!("{}'s events: {other:?}", p.payment_id),
                    })
                    .collect()
            })
            .collect()
    }

    /// Every message of the real receipts queue, deleted, as bodies by payment: the queue is
    /// left empty, as the invariant checker wants it.
    async fn take_receipt_events(&self) -> HashMap<String, Vec<String>> {
        let messages = self.stack.receive_all("ReceiptsQueue").await.unwrap();
        let mut events: HashMap<String, Vec<String>> = HashMap::new();
        for m in &messages {
            let body = m.body.clone().unwrap_or_default();
            let event: payments_model::PaymentCharged = serde_json::from_str(&body).unwrap();
            events.entry(event.payment_id).or_default().push(body);
            self.stack
                .clients
                .sqs
                .delete_message()
                .queue_url(self.stack.queue_url("ReceiptsQueue"))
                .receipt_handle(m.receipt_handle.clone().unwrap_or_default())
                .send()
                .await
                .unwrap();
        }
        events
    }

    /// Runs a case of `batch` on `charged` (one account's payments) with `fault` armed at a
    /// request of the DynamoDB client (none: a clean run): what went wrong, and the requests
    /// sent.
    async fn case(
        &self,
        batch: Batch,
        fault: Option<(u32, Fault)>,
        charged: &[Charged],
    ) -> (Vec<String>, u32) {
        let messages = batch.messages(charged);
        self.faults.disarm();
        self.crash.reset();
        if let Some((n, fault)) = fault {
            self.faults.arm(n, fault);
        }
        let queue = SimQueue::new(self.fifo, &messages, self.clock.now_ms())
            .max_receive_count(self.max_receive_count)
            .visibility_timeout(self.visibility_timeout);
        let drained = sim_queue::drain(queue, &self.clock, &self.crash, &self.memory, |event| {
            self.invoke(batch, event)
        })
        .await;
        let fired = self.faults.fired();
        let log = self.faults.runs();
        let requests = self.faults.sent();
        self.faults.disarm();
        self.crash.reset();
        (
            drained.case_problems(fault.is_some() && !fired, &log, []),
            requests,
        )
    }

    async fn invoke(
        &self,
        batch: Batch,
        event: LambdaEvent<SqsEvent>,
    ) -> Result<SqsBatchResponse, String> {
        self.function(batch)
            .handle(event)
            .await
            .map_err(|e| e.to_string())
    }

    /// What is wrong with the receipts of `all`: each payment has exactly one, with its
    /// account, amount and currency.
    async fn wrong_receipts(&self, all: &[PaymentRequested]) -> Vec<String> {
        let mut receipts: HashMap<String, Vec<(String, i64, String)>> = HashMap::new();
        for item in self.stack.scan("ReceiptsTable").await.unwrap() {
            let s = |name: &str| {
                item.get(name)
                    .and_then(|v| v.as_s().ok())
                    .cloned()
                    .unwrap_or_default()
            };
            let amount = item
                .get("amountCents")
                .and_then(|v| v.as_n().ok())
                .and_then(|n| n.parse().ok())
                .unwrap_or_default();
            receipts.entry(s("paymentId")).or_default().push((
                s("accountId"),
                amount,
                s("currency"),
            ));
        }
        all.iter()
            .filter_map(|p| {
                let expected = (p.account_id.clone(), p.amount_cents, p.currency.clone());
                match receipts.get(&p.payment_id).map(Vec::as_slice) {
                    Some([one]) if *one == expected => None,
                    found => Some(format!(
                        "{}: receipts {found:?}, expected one of {expected:?}",
                        p.payment_id
                    )),
                }
            })
            .collect()
    }
}

/// Runs a clean case of `batch`, then one per fault at each request it made, adding the
/// payments to `all` and what went wrong to `failures`: the cases run, and the clean run's
/// requests.
async fn explore(
    harness: &Harness,
    batch: Batch,
    all: &mut Vec<PaymentRequested>,
    failures: &mut Vec<String>,
) -> (usize, u32) {
    let clean_input = harness.charged(1, batch.payments()).await.remove(0);
    let (clean, requests) = harness.case(batch, None, &clean_input).await;
    all.extend(clean_input.into_iter().map(|(p, _)| p));
    if !clean.is_empty() {
        failures.push(format!("{batch:?} clean run: {}", clean.join("; ")));
    }
    let planned: Vec<(u32, Fault)> = (1..=requests)
        .flat_map(|n| FAULTS.map(|fault| (n, fault)))
        .collect();
    let cases = planned.len() + 1;
    let inputs = harness.charged(planned.len(), batch.payments()).await;
    for ((n, fault), input) in planned.into_iter().zip(inputs) {
        let (problems, _) = harness.case(batch, Some((n, fault)), &input).await;
        all.extend(input.into_iter().map(|(p, _)| p));
        if !problems.is_empty() {
            failures.push(format!(
                "{batch:?} DynamoDB request {n} {}: {}",
                fault.label(),
                problems.join("; ")
            ));
        }
    }
    (cases, requests)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_exploration_receipt_sender() {
    let started = Instant::now();
    let harness = Harness::new().await;
    let mut failures = Vec::new();
    let mut all = Vec::new();
    let (copies, copy_requests) = explore(&harness, Batch::Copy, &mut all, &mut failures).await;
    let (duplicates, duplicate_requests) =
        explore(&harness, Batch::Duplicates, &mut all, &mut failures).await;
    failures.extend(harness.wrong_receipts(&all).await);
    summarize(
        &format!(
            "receipt-sender: in a clean run of {PAYMENTS} events and a copy, {copy_requests} \
             DynamoDB requests; of one event twice and its copy twice in one batch, \
             {duplicate_requests}; no SQS request"
        ),
        copies + duplicates,
        started,
        &failures,
    );
    harness
        .stack
        .assert_invariants(&Scope::pipeline(), &[])
        .await;
}
