//! The fault exploration of payments-reconciler: the function as deployed (its three parts over
//! the template's settings, within its time budget), in process, over every request its DynamoDB
//! and its SQS clients make and every fault of the injector.
//!
//! Each case starts from the state each of the reconciler's duties is for, built with the stack's
//! helpers on the local AWS (tables and queues real):
//! - a payment whose message payment-processor dead-lettered with its reason: it must end
//!   `failed` with that reason, and never be sent again;
//! - a payment accepted and never sent to `payments.fifo`, older than `RESEND_AFTER_SECONDS`: it
//!   must be sent, and charged once when payment-processor then runs;
//! - a charged payment whose `PaymentCharged` was lost, so its receipt was never written: its
//!   receipt must be recovered, once;
//! - two charged payments of another account, with their receipts: innocent, they must stay as
//!   they are, and the audit of their charges must find nothing.
//!
//! Each payment's id falls in a shard of its own, the same in every case, so that request `n` is
//! the same request in every case. The reconciler runs on its schedule (`rate(5 minutes)`), its
//! first run once the waiting payment is older than `RESEND_AFTER_SECONDS`, each run in a new
//! execution environment (a crash drops the run), again until its work is done and a run ended
//! without an error, at most [`MAX_RUNS`] runs. Its clients carry the injector; its time is the
//! test's clock, five minutes further at each run, which ends the outages. Between two runs, the
//! rest of the pipeline does what it does in five minutes, without faults: payment-processor
//! charges what is on `payments.fifo`, receipt-sender writes the receipts of the receipts queue,
//! and SQS's visibility timeout (30 s) passes over what a run left hidden in the dead-letter
//! queue. The local AWS keeps such a message hidden for 30 s of the machine's time, and removes
//! no hidden message: so the dead letter is on a dead-letter queue of the case's own, which is
//! replaced by one holding the same message, visible, when a run left it hidden.
//!
//! Each case checks: the dead-lettered payment failed with its own reason, and was never sent;
//! the waiting payment sent once and charged; the receipt recovered, once, its `PaymentCharged`
//! sent at least once (a send whose answer was lost is sent again); the innocent payments as they were, neither sent nor given a `PaymentCharged`; no
//! mismatch in the audit of any run. Then its tables are read for the invariant checker and
//! emptied for the next case. Once every case ran: the invariant checker's verdict on what every
//! case left, only the dead-lettered payments failed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{AttributeValue, DeleteRequest, WriteRequest};
use aws_sdk_sqs::types::{MessageAttributeValue, QueueAttributeName};
use futures_util::future::join_all;
use lambda_idempotency::dead_letter::{REASON_ATTRIBUTE, SOURCE_MESSAGE_ID_ATTRIBUTE};
use lambda_idempotency::time::{Clock, Deadline, ManualClock, SystemClock};
use local_aws::runner::queue_depth;
use payments_e2e::Stack;
use payments_e2e::faults::{event, failed_ids};
use payments_e2e::invariants::{self, Failure, Scope, Snapshot};
use payments_e2e::sqs_records::{fifo_record, receipts_record};
use payments_model::{PaymentCharged, PaymentRequested, lifecycle};
use payments_operations::reconcile::{Budget, Config, DEADLINE_MARGIN, Reconciler, Report};

use crate::clients::{Armed, FaultyClients};
use crate::{FAULTS, summarize};

mod check;

/// The reconciler's schedule in template.yaml: `rate(5 minutes)`.
const SCHEDULE: Duration = Duration::from_secs(5 * 60);

/// Cases run at once, each worker on a stack of its own.
const WORKERS: usize = 4;

/// Runs after which a case whose work is not done is reported.
const MAX_RUNS: u32 = 10;

/// How long after `RESEND_AFTER_SECONDS` the first run comes: the charges payment-processor makes
/// during a case (on the machine's clock) are then older than the first run's look for receipts
/// goes, in every case alike.
const FIRST_RUN_AFTER: Duration = Duration::from_secs(60);

/// The reason payment-processor gave the payment it dead-lettered (the payment's own fault).
const REASON: &str = "permanent failure: the payment's card was refused (failed attempt 1)";

type Item = HashMap<String, AttributeValue>;

/// A case's payments, accepted.
struct State {
    /// Dead-lettered by payment-processor, with [`REASON`].
    dead: PaymentRequested,
    /// Accepted, never sent.
    waiting: PaymentRequested,
    /// Charged, its `PaymentCharged` lost.
    receiptless: PaymentRequested,
    /// Charged, with their receipts; and their items then.
    innocent: Vec<(PaymentRequested, Item)>,
}

/// Each payment's messages seen between runs: on `payments.fifo`, and `PaymentCharged` events on
/// the receipts queue.
type Seen = HashMap<String, [u32; 2]>;

/// What a case did.
struct Case {
    problems: Vec<String>,
    /// The requests of the DynamoDB client, then of the SQS client.
    requests: [u32; 2],
    /// The operations of those requests, in order.
    operations: [Vec<String>; 2],
    runs: u32,
    /// Its tables when it ended.
    snapshot: Snapshot,
    dead: String,
}

struct Harness {
    stack: Stack,
    clock: Arc<ManualClock>,
    clients: FaultyClients,
    config: Config,
    timeout: Duration,
    processor: payment_processor::App,
    receipt_sender: receipt_sender::App,
    /// Each table of the stack, with its key's attributes.
    tables: Vec<(String, Vec<String>)>,
}

impl Harness {
    async fn new() -> Self {
        let stack = super::own_stack().await;
        let clock = Arc::new(ManualClock::starting_now());
        let clients = FaultyClients::new(&stack.sdk, clock.clone() as Arc<dyn Clock>);
        let config = stack.reconciler(&[]).unwrap().config().clone();
        let timeout = Duration::from_secs(u64::from(
            stack.template.functions["PaymentsReconcilerFunction"].timeout_seconds,
        ));
        let processor = stack.payment_processor().unwrap();
        let receipt_sender = receipt_sender::App::from_settings(
            &stack.sdk,
            &stack.settings("receipt-sender").unwrap(),
        )
        .unwrap();
        let mut tables = Vec::new();
        for table in stack.resources.tables.values() {
            let described = stack
                .clients
                .dynamodb
                .describe_table()
                .table_name(&table.name)
                .send()
                .await
                .unwrap();
            let keys = described.table.unwrap().key_schema.unwrap_or_default();
            let keys = keys.into_iter().map(|k| k.attribute_name).collect();
            tables.push((table.name.clone(), keys));
        }
        Self {
            stack,
            clock,
            clients,
            config,
            timeout,
            processor,
            receipt_sender,
            tables,
        }
    }

    /// A case's payments, each in a shard of its own, stored as the duties find them.
    async fn state(&self) -> State {
        let run = uuid::Uuid::new_v4().simple().to_string();
        let run = &run[..8];
        let payment = |role: &str, account: &str, shard: u32, amount_cents: i64| {
            let shard = shard.to_string();
            let payment_id = (0..)
                .map(|i| format!("pay_reconcile_{run}_{role}_{i}"))
                .find(|id| lifecycle::shard(id) == shard)
                .unwrap();
            PaymentRequested {
                payment_id,
                account_id: format!("acct-reconcile-{run}-{account}"),
                amount_cents,
                currency: "EUR".into(),
                description: Some(role.to_owned()),
                sequence: None,
                unknown: Default::default(),
            }
        };
        let accepted = self
            .stack
            .accept(vec![
                payment("dead", "dead", 0, 101),
                payment("waiting", "waiting", 1, 202),
                payment("receiptless", "receiptless", 2, 303),
                payment("innocent1", "innocent", 3, 404),
                payment("innocent2", "innocent", 4, 505),
            ])
            .await
            .unwrap();
        let [dead, waiting, receiptless, innocent1, innocent2] =
            <[PaymentRequested; 5]>::try_from(accepted).unwrap();
        let mut problems = Vec::new();
        for p in [&receiptless, &innocent1, &innocent2] {
            let body = serde_json::to_string(p).unwrap();
            self.charge(&format!("m-{}", p.payment_id), &body, p, &mut problems)
                .await;
        }
        // The charges' events: the innocent payments' receipts written, the other event lost.
        self.pipeline(
            &mut Seen::new(),
            &mut problems,
            Some(&receiptless.payment_id),
        )
        .await;
        assert!(problems.is_empty(), "{problems:?}");
        let mut innocent = Vec::new();
        for p in [innocent1, innocent2] {
            let item = self.item(&p.payment_id).await;
            innocent.push((p, item));
        }
        State {
            dead,
            waiting,
            receiptless,
            innocent,
        }
    }

    /// A dead-letter queue of the case's own, holding `dead`'s message as payment-processor
    /// dead-letters it: in its account's group, with [`REASON`].
    async fn dead_letter_queue(&self, dead: &PaymentRequested) -> String {
        let sqs = &self.stack.clients.sqs;
        let name = self.stack.resources.queues["PaymentsDeadLetterQueue"]
            .name
            .trim_end_matches(".fifo")
            .to_owned();
        let suffix = uuid::Uuid::new_v4().simple().to_string();
        let url = sqs
            .create_queue()
            .queue_name(format!("{name}-{}.fifo", &suffix[..8]))
            .attributes(QueueAttributeName::FifoQueue, "true")
            .send()
            .await
            .unwrap()
            .queue_url
            .unwrap();
        let text = |v: &str| {
            MessageAttributeValue::builder()
                .data_type("String")
                .string_value(v)
                .build()
                .unwrap()
        };
        sqs.send_message()
            .queue_url(&url)
            .message_body(serde_json::to_string(dead).unwrap())
            .message_group_id(&dead.account_id)
            .message_deduplication_id(&dead.payment_id)
            .message_attributes(REASON_ATTRIBUTE, text(REASON))
            .message_attributes(
                SOURCE_MESSAGE_ID_ATTRIBUTE,
                text(&format!("m-{}", dead.payment_id)),
            )
            .send()
            .await
            .unwrap();
        url
    }

    /// Runs a case with `fault` armed (none: a clean run).
    async fn case(&self, fault: Option<Armed>) -> Case {
        let state = self.state().await;
        let mut dead_letters = self.dead_letter_queue(&state.dead).await;
        self.clients.arm(fault);
        let resend_after = self.config.resend_after + FIRST_RUN_AFTER;
        self.clock
            .set(SystemClock.now_ms() + resend_after.as_millis() as i64);
        let mut problems = Vec::new();
        let mut seen = Seen::new();
        let mut reports = Vec::new();
        let (mut runs, mut crashes, mut errors) = (0, 0, Vec::new());
        let done = loop {
            runs += 1;
            let outcome = self.run(&dead_letters).await;
            let ended = matches!(outcome, Some(Ok(_)));
            match outcome {
                Some(Ok(report)) => reports.push(report),
                Some(Err(e)) => errors.push(e),
                None => crashes += 1,
            }
            self.clock.advance(SCHEDULE);
            self.pipeline(&mut seen, &mut problems, None).await;
            let hidden = queue_depth(&self.stack.clients.sqs, &dead_letters)
                .await
                .unwrap()
                .not_visible;
            if hidden > 0 {
                dead_letters = self.dead_letter_queue(&state.dead).await;
            }
            if ended && self.work_done(&state).await {
                break true;
            }
            if runs == MAX_RUNS {
                break false;
            }
        };
        let fired = self.clients.fired(fault);
        let log = self.clients.log();
        let requests = self.clients.requests();
        let operations = [
            self.clients.dynamodb_faults.log(),
            self.clients.sqs_faults.log(),
        ];
        self.clients.disarm();
        if !fired {
            problems.push("the fault never fired".to_owned());
        }
        if !done {
            problems.push(format!("its work not done after {MAX_RUNS} runs"));
        }
        problems.extend(self.check(&state, &seen, &reports).await);
        if !problems.is_empty() {
            problems.insert(
                0,
                format!("{runs} runs, {crashes} crashed, errors {errors:?}; requests {log}"),
            );
        }
        let snapshot = Snapshot::read(&self.stack.clients.dynamodb, &self.stack.sources().tables)
            .await
            .unwrap();
        self.wipe().await;
        Case {
            problems,
            requests,
            operations,
            runs,
            snapshot,
            dead: state.dead.payment_id,
        }
    }

    /// One scheduled run, in a new execution environment, with the template's time budget:
    /// what it returned, or `None` when it crashed.
    async fn run(&self, dead_letters: &str) -> Option<Result<Report, String>> {
        let crash = &self.clients.crash;
        crash.reset();
        let config = Config {
            dead_letter_queue_url: dead_letters.to_owned(),
            ..self.config.clone()
        };
        let reconciler = Reconciler::new(
            self.clients.dynamodb.clone(),
            self.clients.sqs.clone(),
            config,
        );
        let now = self.clock.now_ms();
        let deadline = Deadline::at_epoch_ms(now + self.timeout.as_millis() as i64);
        let budget = Budget::until(
            deadline.earlier_by(DEADLINE_MARGIN),
            self.clock.clone() as Arc<dyn Clock>,
        );
        let outcome = tokio::select! {
            biased;
            () = crash.raised() => None,
            // Boxed: the run's state on the heap, not on the test thread's stack.
            outcome = Box::pin(reconciler.run_within(now, &budget)) => Some(outcome),
        };
        if crash.is_raised() {
            return None;
        }
        outcome.map(|r| r.map_err(|e| e.to_string()))
    }

    /// What the pipeline does between two runs, without faults: payment-processor charges what
    /// is on `payments.fifo`, receipt-sender writes the receipts of the receipts queue (a
    /// `PaymentCharged` of `lost` is deleted unread). Counts each payment's messages in `seen`.
    async fn pipeline(&self, seen: &mut Seen, problems: &mut Vec<String>, lost: Option<&str>) {
        for m in self.stack.receive_all("PaymentsQueue").await.unwrap() {
            let body = m.body().unwrap_or_default();
            let payment: PaymentRequested = serde_json::from_str(body).unwrap();
            seen.entry(payment.payment_id.clone()).or_default()[0] += 1;
            self.charge(m.message_id().unwrap_or_default(), body, &payment, problems)
                .await;
            self.delete("PaymentsQueue", &m).await;
        }
        for m in self.stack.receive_all("ReceiptsQueue").await.unwrap() {
            let body = m.body().unwrap_or_default();
            let charged: PaymentCharged = serde_json::from_str(body).unwrap();
            seen.entry(charged.payment_id.clone()).or_default()[1] += 1;
            if lost != Some(charged.payment_id.as_str()) {
                let record = receipts_record(&self.stack, &m);
                let response = self
                    .receipt_sender
                    .handle(event(vec![record], Duration::from_secs(60)))
                    .await
                    .unwrap();
                if !failed_ids(&response).is_empty() {
                    problems.push(format!("receipt-sender failed {body}: {response:?}"));
                }
            }
            self.delete("ReceiptsQueue", &m).await;
        }
    }

    /// payment-processor (without faults) invoked with `payment`'s message.
    async fn charge(
        &self,
        message_id: &str,
        body: &str,
        payment: &PaymentRequested,
        problems: &mut Vec<String>,
    ) {
        let record = fifo_record(message_id, body, &payment.account_id, 1);
        let response = self
            .processor
            .handle(event(vec![record], Duration::from_secs(60)))
            .await
            .unwrap();
        if !failed_ids(&response).is_empty() {
            problems.push(format!("payment-processor failed {body}: {response:?}"));
        }
    }

    async fn delete(&self, queue: &str, m: &aws_sdk_sqs::types::Message) {
        self.stack
            .clients
            .sqs
            .delete_message()
            .queue_url(self.stack.queue_url(queue))
            .receipt_handle(m.receipt_handle().unwrap_or_default())
            .send()
            .await
            .unwrap();
    }

    /// Empties every table of the stack: the next case starts from nothing.
    async fn wipe(&self) {
        let dynamodb = &self.stack.clients.dynamodb;
        for (table, keys) in &self.tables {
            let items = invariants::settle::scan(dynamodb, table).await.unwrap();
            for chunk in items.chunks(25) {
                let deletes = chunk
                    .iter()
                    .map(|item| {
                        let key = keys.iter().map(|k| (k.clone(), item[k].clone())).collect();
                        let delete = DeleteRequest::builder().set_key(Some(key)).build().unwrap();
                        WriteRequest::builder().delete_request(delete).build()
                    })
                    .collect();
                dynamodb
                    .batch_write_item()
                    .request_items(table, deletes)
                    .send()
                    .await
                    .unwrap();
            }
        }
    }
}

/// Adds what `from` holds to `into`.
fn merge(into: &mut Snapshot, from: Snapshot) {
    into.payments.extend(from.payments);
    into.ledger.extend(from.ledger);
    into.balances.extend(from.balances);
    into.receipts.extend(from.receipts);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_exploration_payments_reconciler() {
    let started = Instant::now();
    let harnesses = join_all((0..WORKERS).map(|_| Harness::new())).await;
    let clean = harnesses[0].case(None).await;
    let requests = clean.requests;
    let planned = FaultyClients::planned_steps(&clean.operations, &FAULTS);
    let steps = planned.len() / FAULTS.len();
    let next = Mutex::new(planned.into_iter());
    let workers = harnesses.iter().map(|harness| async {
        let mut ended = Vec::new();
        loop {
            let Some(fault @ (client, n, kind)) = next.lock().unwrap().next() else {
                break;
            };
            let label = format!("{client:?} request {n} {}", kind.label());
            ended.push((label, Box::pin(harness.case(Some(fault))).await));
        }
        ended
    });
    let mut ended: Vec<(String, Case)> = join_all(workers).await.into_iter().flatten().collect();
    ended.insert(0, ("clean run".to_owned(), clean));
    let cases = ended.len();
    let mut failures = Vec::new();
    let mut all = Snapshot::default();
    let mut dead = Vec::new();
    let mut most_runs = 0;
    for (label, case) in ended {
        if !case.problems.is_empty() {
            failures.push(format!("{label}: {}", case.problems.join("; ")));
        }
        most_runs = most_runs.max(case.runs);
        dead.push(case.dead);
        merge(&mut all, case.snapshot);
    }
    summarize(
        &format!(
            "payments-reconciler: in a clean run, {} DynamoDB and {} SQS requests, {steps} \
             distinct steps, at most {most_runs} runs a case",
            requests[0], requests[1]
        ),
        cases,
        started,
        &failures,
    );
    let violations =
        invariants::violations(&all, &Scope::pipeline().declaring(Failure::Permanent, dead));
    assert!(violations.is_empty(), "{violations:#?}");
}
