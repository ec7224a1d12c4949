//! payment-processor's own SQS calls under every fault: its dead-letter sends and its
//! visibility changes (in memory, through the SQS client's injector), beside its receipt sends.
//!
//! A clean run of three payments makes none of them, so each case's account has a poison
//! payment (the failure switch fails every charge of it for good: dead-lettered, the payment
//! failed with its reason), a flaky one (its first two attempts fail: a visibility change each)
//! and a third, in that order in one message group. For every SQS request of a clean run and
//! every fault, a new account's payments run with the fault at that request until the queue
//! drains. Each case checks: the queue drained; nothing moved by SQS; nothing dead-lettered but
//! the poison payment's message, each copy with its permanent reason; and, unless the fault was
//! a crash or an outage, no message kept away for the whole visibility timeout. Once every case
//! ran: each poison payment failed with its permanent reason, every other charged exactly once
//! with its receipt event, and the invariant checker, told only of the poison payments, finds
//! nothing.

use std::time::Instant;

use lambda_idempotency::test_util::fault::Fault;
use lambda_idempotency::test_util::sim_queue::{self, SimQueue};
use lambda_idempotency::time::Clock;
use payments_config::FailureSwitch;
use payments_e2e::invariants::{Failure, Scope};
use payments_model::stored::StoredPayment;
use payments_model::{PaymentRequested, PaymentStatus};

use crate::{FAULTS, Harness, PAYMENTS, described, summarize};

/// The failure switch's markers: every charge of a poison payment fails for good, the first two
/// attempts of a flaky one fail.
const POISON: &str = "explore-poison";
const SWITCH: &str = "explore-poison:1000:permanent,explore-flaky:2";
/// What a poison payment's reason says.
const POISON_REASON: &str = "injected permanent failure";

/// Payment `i` of an account: poison, flaky, then a plain one.
fn suffix(i: usize) -> String {
    [" explore-poison", " explore-flaky", ""][i % PAYMENTS].to_owned()
}

/// What a case did.
struct Case {
    problems: Vec<String>,
    /// The SQS client's requests (receipt sends, dead-letter sends, visibility changes).
    requests: u32,
}

/// Runs one account's `accepted` payments with `fault` armed at SQS request `n` (none: a clean
/// run).
async fn case(
    harness: &Harness,
    fault: Option<(u32, Fault)>,
    accepted: &[PaymentRequested],
) -> Case {
    let messages: Vec<(String, String)> = accepted
        .iter()
        .map(|p| {
            (
                format!("m-{}", p.payment_id),
                serde_json::to_string(p).unwrap(),
            )
        })
        .collect();
    harness.disarm();
    if let Some((n, fault)) = fault {
        harness.sqs_faults.arm(n, fault);
    }
    let queue = SimQueue::grouped(
        true,
        &messages,
        &accepted[0].account_id,
        harness.clock.now_ms(),
    );
    let poison = [(messages[0].0.clone(), POISON_REASON.to_owned())];
    let drained = sim_queue::drain(
        queue,
        &harness.clock,
        &harness.crash,
        &harness.memory,
        |event| harness.invoke(event),
    )
    .await
    .with_poison(&poison);
    let unfired = fault.is_some() && !harness.sqs_faults.fired();
    let (requests, log) = (harness.sqs_faults.sent(), harness.sqs_faults.runs());
    harness.disarm();
    // A crash, or an outage (which the change sent again meets too), leaves a failed message
    // to come back after the queue's visibility timeout.
    let kept_away = match fault {
        Some((_, Fault::Crash | Fault::Outage(_))) => Vec::new(),
        _ => drained.kept_away(),
    };
    Case {
        problems: drained.case_problems(unfired, &format!("sqs: {log}"), kept_away),
        requests,
    }
}

/// What is wrong with a poison payment now: anything but failed with its permanent reason.
async fn not_failed(harness: &Harness, payment: &PaymentRequested) -> Option<String> {
    let stored = StoredPayment::read(
        &harness.stack.clients.dynamodb,
        harness.stack.table("PaymentsTable"),
        &payment.payment_id,
    )
    .await
    .unwrap()
    .unwrap();
    let reason = stored.last_error.as_deref().unwrap_or_default();
    (!stored.is(PaymentStatus::Failed) || !reason.contains(POISON_REASON)).then(|| {
        format!(
            "{} is {:?} ({reason:?}), not failed with its permanent reason",
            payment.payment_id, stored.status
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_exploration_payment_processor_own_sqs_calls() {
    let started = Instant::now();
    let mut harness = Harness::new().await;
    harness.config.failure_switch = FailureSwitch::parse(SWITCH).unwrap();
    let accounts = described(&harness.stack, 1, PAYMENTS, suffix).await;
    let clean = case(&harness, None, &accounts[0]).await;
    let mut cases = 1;
    let mut failures = Vec::new();
    if !clean.problems.is_empty() {
        failures.push(format!("clean run: {}", clean.problems.join("; ")));
    }
    let planned: Vec<(u32, Fault)> = (1..=clean.requests)
        .flat_map(|n| FAULTS.map(|fault| (n, fault)))
        .collect();
    let mut all = accounts;
    let more = described(&harness.stack, planned.len(), PAYMENTS, suffix).await;
    for ((n, fault), accepted) in planned.into_iter().zip(more) {
        cases += 1;
        let done = case(&harness, Some((n, fault)), &accepted).await;
        if !done.problems.is_empty() {
            failures.push(format!(
                "SQS request {n} {}: {}",
                fault.label(),
                done.problems.join("; ")
            ));
        }
        all.push(accepted);
    }
    let (poison, rest): (Vec<PaymentRequested>, Vec<PaymentRequested>) = all
        .into_iter()
        .flatten()
        .partition(|p| p.description.as_deref().is_some_and(|d| d.contains(POISON)));
    for p in &poison {
        failures.extend(not_failed(&harness, p).await);
    }
    for p in &rest {
        failures.extend(harness.not_charged(p).await);
    }
    summarize(
        &format!(
            "payment-processor, its own SQS calls: {} SQS requests in a clean run of a poison, \
             a flaky and a plain payment",
            clean.requests
        ),
        cases,
        started,
        &failures,
    );
    let offenders = harness.stack.charged_exactly_once(&rest).await.unwrap();
    assert!(offenders.is_empty(), "{offenders:?}");
    let receipts = harness.receipts().await;
    let missing: Vec<&str> = rest
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
        .assert_invariants(
            &Scope::through_charging().declaring_marked(Failure::Permanent, POISON),
            &[],
        )
        .await;
}
