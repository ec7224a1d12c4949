//! The fault exploration of payments-publisher: the function as deployed (the library's stream
//! processor, ordered by account, its `Batcher` and `Publisher`), in process, over every request
//! its SQS client makes and every fault of the injector.
//!
//! Each case writes three payments of each of two new accounts to a simulated shard of the
//! payments table's stream (their `INSERT`s, as payments-api writes them), arms one fault at
//! request `n` of the SQS client, and runs Lambda's stream event source over the shard as
//! template.yaml sets it up (`Harness::case`: batches of `BatchSize`, the partial batch
//! response's checkpoint, a batch that fails whole split in two or retried, and given up on
//! after `MaximumRetryAttempts` retries or `MaximumRecordAgeInSeconds`), each invocation in a
//! new execution environment, until the shard is read to its end. The payments go to the
//! stack's `payments.fifo` on the local AWS; the function's dead-letter queue is in memory.
//!
//! Each case checks: the shard read to its end; no batch given up on (the on-failure queue); no
//! record dead-lettered by the function (every failure is an injected fault, never the
//! record's). Once every case ran: each payment on `payments.fifo` exactly once, and each
//! account's in the order of their numbers.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lambda_events::dynamodb::{Event, EventRecord};
use aws_lambda_events::streams::DynamoDbEventResponse;
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::dead_letter::DeadLetter;
use lambda_idempotency::publish::Publisher;
use lambda_idempotency::test_util::InMemorySqs;
use lambda_idempotency::test_util::fault::{Crash, Fault, Faults};
use lambda_idempotency::time::{Clock, ManualClock};
use lambda_runtime::{Context, LambdaEvent};
use payments_e2e::Stack;
use payments_e2e::stack::payments;
use payments_model::{PaymentItem, PaymentRequested};
use payments_publisher::{App, Config};

use crate::{FAULTS, faulty_sqs, summarize};

/// Accounts per case, and payments per account.
const ACCOUNTS: usize = 2;
const PAYMENTS: usize = 3;
/// Invocations after which a shard counts as never read to its end.
const MAX_INVOCATIONS: u32 = 2_000;
/// What an invocation costs on the test's clock: Lambda's next poll of the shard, and an
/// invocation whose sends the publisher retries (5 tries, from 50 ms to 2 s apart with full
/// jitter: about half a second when every try fails).
const INVOCATION: Duration = Duration::from_secs(1);

/// How an invocation ended, as Lambda takes it.
enum Outcome {
    /// Every record done.
    Done,
    /// The partial batch response's lowest sequence number: this record of the batch and the
    /// ones after it failed.
    FailedFrom(usize),
    /// Failed as a whole: an error, a crash, or a response naming a record without an
    /// identifier or outside the batch.
    Whole,
}

/// What Lambda did with a shard.
#[derive(Default)]
struct Read {
    invocations: u32,
    crashes: u32,
    /// The sequence numbers given up on (to the on-failure queue).
    discarded: Vec<String>,
    /// Records left unread when [`MAX_INVOCATIONS`] were made.
    unread: usize,
}

fn sequence(record: &EventRecord) -> String {
    record.change.sequence_number.clone().unwrap_or_default()
}

/// What Lambda takes from `response` to the invocation of `batch`.
fn outcome(batch: &[EventRecord], response: &DynamoDbEventResponse) -> Outcome {
    let mut lowest: Option<usize> = None;
    for failure in &response.batch_item_failures {
        let id = failure.item_identifier.as_deref().unwrap_or_default();
        match batch
            .iter()
            .position(|r| !id.is_empty() && sequence(r) == id)
        {
            Some(i) => lowest = Some(lowest.map_or(i, |l| l.min(i))),
            None => return Outcome::Whole,
        }
    }
    lowest.map_or(Outcome::Done, Outcome::FailedFrom)
}

struct Harness {
    stack: Stack,
    clock: Arc<ManualClock>,
    crash: Arc<Crash>,
    faults: Faults,
    sqs: aws_sdk_sqs::Client,
    config: Config,
    memory: InMemorySqs,
    batch_size: usize,
    bisect: bool,
    max_retries: Option<u32>,
    max_age: Option<Duration>,
}

impl Harness {
    async fn new() -> Self {
        let stack = super::own_stack().await;
        let clock = Arc::new(ManualClock::starting_now());
        let crash = Arc::new(Crash::default());
        let faults = Faults::new("sqs", crash.clone(), clock.clone() as Arc<dyn Clock>);
        let sqs = faulty_sqs(&stack.sdk, &faults);
        let config = Config::from_settings(&stack.settings("payments-publisher").unwrap()).unwrap();
        let source =
            stack.template.functions["PaymentsPublisherFunction"].dynamodb_events[0].clone();
        Self {
            stack,
            clock,
            crash,
            faults,
            sqs,
            config,
            memory: InMemorySqs::new(),
            batch_size: source.batch_size as usize,
            bisect: source.bisect_batch_on_function_error,
            max_retries: source.maximum_retry_attempts(),
            max_age: source.maximum_record_age(),
        }
    }

    /// payments-publisher in a new execution environment: its clients with the injector, its
    /// dead-letter queue in memory, its publisher's retries without their waits (the test's
    /// clock does not drive them: [`INVOCATION`] stands for them).
    fn function(&self) -> App {
        let processor = BatchProcessor::new()
            .with_clock(self.clock.clone() as Arc<dyn Clock>)
            .with_dead_letter(DeadLetter::in_memory(
                &self.memory,
                "https://sqs.us-east-1.amazonaws.com/123456789012/payments-outbox-dlq",
            ));
        let publisher = Publisher::new(self.sqs.clone(), &self.config.payments_queue_url)
            .backoff(Duration::ZERO, Duration::ZERO);
        App::new(self.sqs.clone(), self.config.clone())
            .with_processor(processor)
            .with_publisher(publisher)
    }

    /// [`PAYMENTS`] payments of each of [`ACCOUNTS`] new accounts, numbered, as the stream's
    /// records of their `INSERT`s, interleaved by account.
    fn records(&self, first_sequence: &mut u64) -> (Vec<PaymentRequested>, Vec<EventRecord>) {
        let run = uuid::Uuid::new_v4().simple().to_string();
        let mut accepted = Vec::new();
        for a in 0..ACCOUNTS {
            let account = format!("acct-publish-{}-{a}", &run[..8]);
            for (i, p) in payments(PAYMENTS, 1, "publish", |_| String::new())
                .into_iter()
                .enumerate()
            {
                accepted.push(PaymentRequested {
                    account_id: account.clone(),
                    sequence: Some(i as u64 + 1),
                    ..p
                });
            }
        }
        // The stream's order: the accounts' payments interleaved, each account's in order.
        accepted.sort_by_key(|p| (p.sequence, p.account_id.clone()));
        let records = accepted
            .iter()
            .map(|p| {
                *first_sequence += 1;
                stream_record(p, *first_sequence, self.clock.now_ms())
            })
            .collect();
        (accepted, records)
    }

    /// Runs a case with `fault` armed (none: a clean run): what went wrong, and the requests.
    async fn case(
        &self,
        fault: Option<(u32, Fault)>,
        records: Vec<EventRecord>,
    ) -> (Vec<String>, u32) {
        self.faults.disarm();
        self.crash.reset();
        if let Some((n, fault)) = fault {
            self.faults.arm(n, fault);
        }
        let written_ms = self.clock.now_ms();
        let mut read = Read::default();
        let mut problems = Vec::new();
        // Lambda's stream event source, as the project's runner has it
        // (infra/src/runner/stream/shard.rs): batches of `BatchSize` in the shard's order; each
        // processed until done with, retried from its first failed record, split in two (no
        // retry spent) when it failed whole with bisection on, given up on after
        // `MaximumRetryAttempts` retries or once its records are older than
        // `MaximumRecordAgeInSeconds`.
        for batch in records.chunks(self.batch_size) {
            let mut pending = VecDeque::from([batch.to_vec()]);
            while let Some(mut batch) = pending.pop_front() {
                let mut retries = 0;
                loop {
                    let age = Duration::from_millis((self.clock.now_ms() - written_ms) as u64);
                    if self.max_age.is_some_and(|max| age > max) {
                        read.discarded.extend(batch.iter().map(sequence));
                        break;
                    }
                    if read.invocations == MAX_INVOCATIONS {
                        read.unread += batch.len();
                        break;
                    }
                    match self.invoke(&batch, &mut read, &mut problems).await {
                        Outcome::Done => break,
                        Outcome::FailedFrom(first) => {
                            batch.drain(..first);
                        }
                        Outcome::Whole if self.bisect && batch.len() > 1 => {
                            let second = batch.split_off(batch.len() / 2);
                            pending.push_front(second);
                            pending.push_front(batch);
                            break;
                        }
                        Outcome::Whole => {}
                    }
                    retries += 1;
                    if self.max_retries.is_some_and(|max| retries > max) {
                        read.discarded.extend(batch.iter().map(sequence));
                        break;
                    }
                }
            }
        }
        let fired = self.faults.fired();
        let log = self.faults.runs();
        let requests = self.faults.sent();
        self.faults.disarm();
        self.crash.reset();
        if fault.is_some() && !fired {
            problems.push("the fault never fired".to_owned());
        }
        if read.unread > 0 {
            problems.push(format!(
                "{} records not read in {} invocations",
                read.unread, read.invocations
            ));
        }
        if !read.discarded.is_empty() {
            problems.push(format!(
                "Lambda gave up on records {:?} (the on-failure queue; retries {:?}, record age \
                 {:?})",
                read.discarded, self.max_retries, self.max_age
            ));
        }
        if !problems.is_empty() {
            problems.insert(
                0,
                format!(
                    "{} invocations, {} crashes; requests {log}",
                    read.invocations, read.crashes
                ),
            );
        }
        (problems, requests)
    }

    /// One invocation of the function with `batch`, in a new execution environment, its deadline
    /// 30 s away (the template's timeout); what Lambda takes from it. What the function
    /// dead-lettered, and an error it returned, go to `problems`.
    async fn invoke(
        &self,
        batch: &[EventRecord],
        read: &mut Read,
        problems: &mut Vec<String>,
    ) -> Outcome {
        read.invocations += 1;
        self.crash.reset();
        self.memory.clear();
        let mut event = Event::default();
        event.records = batch.to_vec();
        let mut context = Context::default();
        context.request_id = format!("invocation-{}", read.invocations);
        context.deadline = (self.clock.now_ms() + 30_000) as u64;
        let function = self.function();
        let answered = tokio::select! {
            biased;
            () = self.crash.raised() => None,
            response = function.handle(LambdaEvent::new(event, context)) => Some(response),
        };
        self.clock.advance(INVOCATION);
        for dead in self.memory.dead_letters() {
            problems.push(format!("dead-lettered by the function: {}", dead.reason));
        }
        match answered {
            Some(Ok(response)) if !self.crash.is_raised() => outcome(batch, &response),
            Some(Err(e)) if !self.crash.is_raised() => {
                problems.push(format!("the invocation failed: {e}"));
                Outcome::Whole
            }
            // Lambda saw no answer.
            _ => {
                read.crashes += 1;
                Outcome::Whole
            }
        }
    }

    /// Every payment on `payments.fifo`, in the order received (each account's group in its
    /// order), each message deleted once read.
    async fn sent(&self) -> Vec<PaymentRequested> {
        let sqs = &self.stack.clients.sqs;
        let url = &self.config.payments_queue_url;
        let mut all = Vec::new();
        loop {
            let messages = sqs
                .receive_message()
                .queue_url(url)
                .max_number_of_messages(10)
                .send()
                .await
                .unwrap()
                .messages
                .unwrap_or_default();
            if messages.is_empty() {
                return all;
            }
            for m in messages {
                all.push(serde_json::from_str(m.body.as_deref().unwrap_or_default()).unwrap());
                sqs.delete_message()
                    .queue_url(url)
                    .receipt_handle(m.receipt_handle.unwrap_or_default())
                    .send()
                    .await
                    .unwrap();
            }
        }
    }

    /// What is wrong with what `payments.fifo` holds for `all`: each payment once, each
    /// account's in the order of their numbers.
    async fn sent_once_in_order(&self, all: &[PaymentRequested]) -> Vec<String> {
        let sent = self.sent().await;
        let mut failures = Vec::new();
        let mut copies: HashMap<&str, usize> = HashMap::new();
        let mut by_account: HashMap<&str, Vec<u64>> = HashMap::new();
        for p in &sent {
            *copies.entry(&p.payment_id).or_default() += 1;
            by_account
                .entry(&p.account_id)
                .or_default()
                .push(p.sequence.unwrap_or_default());
        }
        for p in all {
            match copies.get(p.payment_id.as_str()) {
                Some(1) => {}
                n => failures.push(format!(
                    "{} sent {} times",
                    p.payment_id,
                    n.copied().unwrap_or(0)
                )),
            }
        }
        for (account, numbers) in &by_account {
            if !numbers.is_sorted() {
                failures.push(format!("{account}: sent in the order {numbers:?}"));
            }
        }
        failures
    }
}

/// The stream's record of `payment`'s `INSERT` by payments-api, at `sequence`.
fn stream_record(payment: &PaymentRequested, sequence: u64, now_ms: i64) -> EventRecord {
    let item = PaymentItem {
        payment_id: payment.payment_id.clone(),
        account_id: payment.account_id.clone(),
        amount_cents: payment.amount_cents,
        currency: payment.currency.clone(),
        description: payment.description.clone(),
        status: "accepted".to_owned(),
        created_at: now_ms,
        caller_id: "explore".to_owned(),
        request_hash: "explore".to_owned(),
        sequence: payment.sequence,
        reopens: None,
    };
    let image: serde_dynamo::Item = serde_dynamo::to_item(&item).unwrap();
    let keys = serde_json::json!({"paymentId": {"S": payment.payment_id}});
    serde_json::from_value(serde_json::json!({
        "eventID": format!("e-{sequence}"),
        "eventName": "INSERT",
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/payments/stream/2026-01-01T00:00:00.000",
        "dynamodb": {
            "ApproximateCreationDateTime": (now_ms / 1000) as f64,
            "Keys": keys,
            "NewImage": serde_json::to_value(image).unwrap(),
            "SequenceNumber": format!("{sequence:021}"),
            "SizeBytes": 200,
            "StreamViewType": "NEW_IMAGE",
        },
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_exploration_payments_publisher() {
    let started = Instant::now();
    let harness = Harness::new().await;
    let mut sequence = 0;
    let mut failures = Vec::new();
    let mut all = Vec::new();
    let (accepted, records) = harness.records(&mut sequence);
    let (clean, requests) = harness.case(None, records).await;
    all.extend(accepted);
    if !clean.is_empty() {
        failures.push(format!("clean run: {}", clean.join("; ")));
    }
    let mut cases = 1;
    for n in 1..=requests {
        for fault in FAULTS {
            cases += 1;
            let (accepted, records) = harness.records(&mut sequence);
            let (problems, _) = harness.case(Some((n, fault)), records).await;
            all.extend(accepted);
            if !problems.is_empty() {
                failures.push(format!(
                    "request {n} {}: {}",
                    fault.label(),
                    problems.join("; ")
                ));
            }
        }
    }
    failures.extend(harness.sent_once_in_order(&all).await);
    summarize(
        &format!(
            "payments-publisher: {requests} SQS requests in a clean run of {} payments",
            ACCOUNTS * PAYMENTS
        ),
        cases,
        started,
        &failures,
    );
}

/// The defect the exploration found: `payments.fifo` unreachable for ten minutes from the first
/// send. Each retry of the batch failed within about a second, and once `MaximumRetryAttempts`
/// (100, then) were spent Lambda gave up on the batch: its payments went to the on-failure queue,
/// none of them at fault, and waited for the reconciler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_exploration_a_long_outage_of_the_payments_queue_gives_up_on_no_record() {
    let harness = Harness::new().await;
    let (accepted, records) = harness.records(&mut 0);
    let outage = Some((1, Fault::Outage(Duration::from_secs(600))));
    let (mut problems, _) = harness.case(outage, records).await;
    problems.extend(harness.sent_once_in_order(&accepted).await);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
