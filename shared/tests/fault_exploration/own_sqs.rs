//! The processor's own SQS calls under every fault: its dead-letter sends (`SendMessage`) and
//! its visibility changes (`ChangeMessageVisibilityBatch`), in memory, through an injector of
//! their own ([`Env::sqs_faults`]), the store's requests left alone.
//!
//! A clean run has none of them, so each case's batch has a poison message (it fails for good:
//! a dead-letter send), a flaky one (it fails its first two runs, each an attempt of its own:
//! a visibility change each) and an innocent one, in that order (on the FIFO queue, in one
//! group: the flaky one holds the innocent one back). For every SQS request of a clean run and
//! every fault, a fresh batch runs with the fault at that request until the queue drains. Each
//! case checks: the queue drained; nothing moved by SQS; nothing dead-lettered but the poison
//! message, each of its copies with its own reason; the poison message's record failed with its
//! own reason and its effect never applied; the others' effects once, their records completed
//! with their own failed attempts; and, unless the fault was a crash or an outage (which leave a
//! failed message to come back after the queue's visibility timeout), no message kept away for
//! the whole visibility timeout: a visibility change lost to one failed request was sent again.
//!
//! A dead-letter copy sent whose answer was lost is sent again on the next delivery: the copies
//! beyond the first are counted and printed (a FIFO dead-letter queue drops them, its
//! deduplication id being the source message id; a standard one keeps them).

use std::time::{Duration, Instant};

use lambda_idempotency::test_util::fault::Fault;

use aws_lambda_events::sqs::SqsMessage;

use crate::modes::{self, POISON_REASON};
use crate::{Env, Explored, FAULTS, common, drain};

/// A fresh batch: `(message id, body)`, a poison message, a flaky one, an innocent one.
fn batch() -> Vec<(String, String)> {
    let case = common::unique("q");
    ["1-poison", "2-flaky2", "3"]
        .iter()
        .map(|suffix| {
            let id = format!("{case}-{suffix}");
            (format!("m-{id}"), format!(r#"{{"id":"{id}"}}"#))
        })
        .collect()
}

/// What one case did.
struct Case {
    problems: Vec<String>,
    /// The processor's SQS requests.
    requests: u32,
    /// Dead-letter copies of the poison message beyond the first.
    extra_copies: usize,
}

/// Whether a case's fault leaves its failed messages to come back after the queue's visibility
/// timeout: a crash, or an outage (which a visibility change sent again meets too).
fn keeps_away(fault: Option<Fault>) -> bool {
    matches!(fault, Some(Fault::Crash | Fault::Outage(_)))
}

/// Runs a batch with `fault` armed at the processor's SQS request `n` (none: a clean run).
async fn case<M: Explored>(env: &Env, mode: &M, fifo: bool, fault: Option<(u32, Fault)>) -> Case {
    let messages = batch();
    env.faults.disarm();
    match fault {
        Some((n, fault)) => env.sqs_faults.arm(n, fault),
        None => env.sqs_faults.disarm(),
    }
    let poison = [(messages[0].0.clone(), POISON_REASON.to_owned())];
    let drained = drain(env, mode.handler(), fifo, &messages)
        .await
        .with_poison(&poison);
    let (requests, log) = (env.sqs_faults.sent(), env.sqs_faults.runs());
    let unfired = fault.is_some() && !env.sqs_faults.fired();
    env.sqs_faults.disarm();
    env.crash.reset();
    let mut more = Vec::new();
    if !keeps_away(fault.map(|f| f.1)) {
        more.extend(drained.kept_away());
    }
    for (_, body) in &messages {
        let id: serde_json::Value = serde_json::from_str(body).unwrap();
        more.extend(mode.check(id["id"].as_str().unwrap()).await);
    }
    Case {
        problems: drained.case_problems(unfired, &log, more),
        requests,
        extra_copies: drained.copies(&messages[0].0).saturating_sub(1),
    }
}

/// Explores `mode`'s processor on both queues, over every SQS request of a clean run and every
/// fault; prints the cases, the time and the extra dead-letter copies; fails listing every
/// failing case.
async fn explore<M: Explored>(name: &str, env: &Env, mode: &M) {
    let started = Instant::now();
    let (mut cases, mut extra_copies) = (0, 0);
    let mut failures = Vec::new();
    for fifo in [false, true] {
        let queue = if fifo { "fifo" } else { "standard" };
        let clean = case(env, mode, fifo, None).await;
        cases += 1;
        if !clean.problems.is_empty() {
            failures.push(format!(
                "{name} {queue} clean run: {}",
                clean.problems.join("; ")
            ));
        }
        for n in 1..=clean.requests {
            for fault in FAULTS {
                cases += 1;
                let done = case(env, mode, fifo, Some((n, fault))).await;
                extra_copies += done.extra_copies;
                if !done.problems.is_empty() {
                    failures.push(format!(
                        "{name} {queue} SQS request {n} {}: {}",
                        fault.label(),
                        done.problems.join("; ")
                    ));
                }
            }
        }
        println!(
            "{name} {queue}: {} SQS requests of the processor in a clean run",
            clean.requests
        );
    }
    println!(
        "{name}, the processor's SQS calls: {cases} cases in {:.1} s, {} failed; {extra_copies} \
         dead-letter copies sent again after a lost answer or a crash",
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

#[tokio::test]
async fn fault_exploration_own_sqs_calls_lease() {
    let env = Env::new();
    let mode = modes::Lease::on_dynamodb::<SqsMessage>(&env).await;
    explore("lease (DynamoDB)", &env, &mode).await;
}

#[tokio::test]
async fn fault_exploration_own_sqs_calls_transactional() {
    let env = Env::new();
    let mode = modes::Transactional::new::<SqsMessage>(&env, false).await;
    explore("transactional", &env, &mode).await;
}

/// Dead-letter sends that fail for hours (the dead-letter queue's grant missing, say), with every
/// visibility change: the poison message comes back every visibility timeout until SQS moves it
/// after `maxReceiveCount` receives. Its own reason stays where a reader of the dead-letter
/// queue finds it: in its idempotency record (by its key: failed, `last_error` the permanent
/// failure), which every later run rewrote with the same reason. On a standard queue, the
/// others are processed meanwhile; on a FIFO queue they are held behind it, received with it,
/// and moved with it (the reconciler's to send back: see docs/guarantees.md).
#[tokio::test]
async fn fault_exploration_a_poison_message_moved_by_sqs_keeps_its_reason() {
    let env = Env::new();
    let mode = modes::Lease::on_dynamodb::<SqsMessage>(&env).await;
    let mut problems = Vec::new();
    {
        let fifo = false;
        let messages = batch();
        env.sqs_faults
            .arm(1, Fault::Outage(Duration::from_secs(12 * 60 * 60)));
        let drained = drain(&env, mode.handler(), fifo, &messages).await;
        env.sqs_faults.disarm();
        let moved: Vec<&str> = drained
            .queue
            .moved
            .iter()
            .map(|(id, _)| id.as_str())
            .collect();
        if moved != [messages[0].0.as_str()] || !drained.queue.drained() {
            problems.push(format!(
                "fifo {fifo}: moved by SQS {moved:?}, receive counts {}",
                drained.queue
            ));
        }
        for (_, body) in &messages {
            let id: serde_json::Value = serde_json::from_str(body).unwrap();
            let id = id["id"].as_str().unwrap();
            for problem in mode.check(id).await {
                problems.push(format!("fifo {fifo}: {problem}"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
