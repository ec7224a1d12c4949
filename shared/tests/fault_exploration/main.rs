//! The fault exploration: each mode of the library, on DynamoDB (moto) and on Redis where the
//! mode exists, through a batch processor as deployed (an attempt budget of 5 with a dead-letter
//! queue, the visibility backoff), fed by a simulated SQS queue (standard and FIFO; see
//! `lambda_idempotency::test_util::sim_queue`). For each queue, a clean run of a batch of three messages counts the requests the
//! store's client makes; then for every request `n` of them and every [`Fault`], a fresh batch
//! runs with the fault at request `n`, and is redelivered until the queue drains. Each case
//! checks: each message's effect exactly once, its stored result, no failed attempt counted (the
//! handler never fails: every failure is the store's), nothing moved to a dead-letter queue (by
//! the library or by SQS), the queue drained.
//!
//! Every case runs; the failures are listed together at the end. Each test prints its number of
//! cases, its time, its invocations (and how many crashed) and the highest receive count seen.
//!
//! The processor's own SQS calls (its dead-letter sends and visibility changes, in memory here,
//! through an injector of their own as an SQS client's interceptor would send them; the injector
//! on an SQS client is [`sqs_client`]) are explored by [`own_sqs`], on a batch with a poison
//! message and a flaky one. What it does not explore yet: SQS records running concurrently (one
//! at a time, so that request `n` is the same request in every run). The stream path (DynamoDB Streams, Kinesis, Kafka, on a simulated
//! shard, records concurrently too) is [`streams`]. The queue and the injector are the library's test utilities
//! (`test_util::{sim_queue, fault}`); the pipeline's consumer, payment-processor, is explored the
//! same way on its DynamoDB and SQS clients, and its relay, payments-publisher, on a simulated
//! stream shard: tests/tests/fault_exploration/.
//!
//! The lease mode reports a record a success when the store refuses its completion after the
//! handler succeeded (reporting it failed would run the effect again once the lease ends): the
//! record stays in progress until its lease ends. The exploration counts those records and
//! prints them, rather than failing them.

#[path = "../common/mod.rs"]
mod common;
mod modes;
mod own_sqs;
mod sqs_client;
mod streams;

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::backoff::VisibilityBackoff;
use lambda_idempotency::batch::{BatchProcessor, Record, RecordHandler};
use lambda_idempotency::dead_letter::DeadLetter;
use lambda_idempotency::test_util::InMemorySqs;
use lambda_idempotency::test_util::fault::{Crash, Fault, Faults};
use lambda_idempotency::test_util::sim_queue::{self, Drained, SimQueue};
use lambda_idempotency::time::{Clock, ManualClock};

/// The attempt budget (the consumer's default `MAX_ATTEMPTS`).
const MAX_ATTEMPTS: u32 = 5;
/// Messages per batch.
const MESSAGES: usize = 3;

/// The faults every request is explored with. The long outage (ten minutes) is longer than
/// `maxReceiveCount` receives at the backoff's first delays.
pub const FAULTS: [Fault; 5] = [
    Fault::Fail,
    Fault::LoseAnswer,
    Fault::Crash,
    Fault::Outage(Duration::from_secs(30)),
    Fault::Outage(Duration::from_secs(600)),
];

/// What a run of the harness shares: the clock, the crash, the store's fault injector, and the
/// processor's SQS (the dead-letter queue and the visibility changes, in memory) with its own.
pub struct Env {
    pub clock: Arc<ManualClock>,
    pub crash: Arc<Crash>,
    pub faults: Faults,
    /// The injector of the processor's SQS requests.
    pub sqs_faults: Faults,
    sqs: InMemorySqs,
    processor: BatchProcessor,
}

impl Env {
    fn new() -> Self {
        // One record at a time: request `n` is the same request in every run.
        Self::with_concurrency(1)
    }

    /// The processor running `concurrency` records (keys) at once.
    fn with_concurrency(concurrency: usize) -> Self {
        let clock = Arc::new(ManualClock::starting_now());
        let crash = Arc::new(Crash::default());
        let faults = Faults::new("store", crash.clone(), clock.clone());
        let sqs_faults = Faults::new("sqs", crash.clone(), clock.clone());
        let sqs = InMemorySqs::new().with_faults(sqs_faults.clone());
        let processor = BatchProcessor::new()
            .with_clock(clock.clone() as Arc<dyn Clock>)
            .max_attempts(MAX_ATTEMPTS)
            .with_dead_letter(DeadLetter::in_memory(
                &sqs,
                "https://sqs.us-east-1.amazonaws.com/123456789012/explore-dlq",
            ))
            .with_backoff(VisibilityBackoff::in_memory(&sqs))
            .concurrency(concurrency);
        Self {
            clock,
            crash,
            faults,
            sqs_faults,
            sqs,
            processor,
        }
    }
}

/// One mode under exploration: its handler of records `R`, and what each record should have left.
pub trait Explored<R: Record = SqsMessage> {
    type Handler: RecordHandler<R>;

    fn handler(&self) -> &Self::Handler;

    /// What is wrong with what message `id` left (nothing: empty).
    fn check(&self, id: &str) -> impl std::future::Future<Output = Vec<String>>;

    /// What the mode's checks noted beside the failures.
    fn notes(&self) -> String {
        String::new()
    }

    /// The invocations (request ids) of the case to be checked that crashed, where records ran
    /// at once: a crash raised by one record's request may fall between another's effect and
    /// its completion (the lease mode's crash window). Nothing by default.
    fn crashed(&self, _request_ids: &[String]) {}
}

/// Delivers `messages` through the processor until the queue drains.
async fn drain<H: RecordHandler<SqsMessage>>(
    env: &Env,
    handler: &H,
    fifo: bool,
    messages: &[(String, String)],
) -> Drained {
    let queue = SimQueue::new(fifo, messages, env.clock.now_ms());
    sim_queue::drain(
        queue,
        &env.clock,
        &env.crash,
        &env.sqs,
        |event| async move {
            match env.processor.process(&event, handler).await {
                Ok(report) => Ok(report.response()),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await
}

/// What a mode's cases did, together.
#[derive(Default)]
struct Totals {
    invocations: u32,
    crashes: u32,
    max_receives: u32,
}

/// A fresh batch: `(message id, body)` with the key `/id` unique to the case.
fn batch() -> Vec<(String, String)> {
    let case = common::unique("p");
    (1..=MESSAGES)
        .map(|i| {
            let id = format!("{case}-{i}");
            (format!("m-{id}"), format!(r#"{{"id":"{id}"}}"#))
        })
        .collect()
}

/// Runs a batch with `fault` armed at request `n` (none: a clean run); what went wrong.
async fn case<M: Explored>(
    env: &Env,
    mode: &M,
    fifo: bool,
    fault: Option<(u32, Fault)>,
    totals: &mut Totals,
) -> Vec<String> {
    let messages = batch();
    match fault {
        Some((n, fault)) => env.faults.arm(n, fault),
        None => env.faults.disarm(),
    }
    let drained = drain(env, mode.handler(), fifo, &messages).await;
    totals.invocations += drained.invocations;
    totals.crashes += drained.crashes;
    totals.max_receives = totals.max_receives.max(drained.queue.max_receives);
    let log = env.faults.runs();
    let fired = env.faults.fired();
    env.faults.disarm();
    env.crash.reset();
    // Every message once more, after every lease of the case has ended: a duplicate (SQS
    // delivers a message twice now and then, a producer sends one again) runs nothing again,
    // whatever the fault left behind (a completion the store refused among them).
    env.clock.advance(sim_queue::FUNCTION_TIMEOUT * 2);
    let again = drain(env, mode.handler(), fifo, &messages).await;
    let mut checks: Vec<String> = again
        .case_problems(false, "(none armed)", [])
        .into_iter()
        .map(|p| format!("its duplicates: {p}"))
        .collect();
    for (_, body) in &messages {
        let id: serde_json::Value = serde_json::from_str(body).unwrap();
        checks.extend(mode.check(id["id"].as_str().unwrap()).await);
    }
    drained.case_problems(fault.is_some() && !fired, &log, checks)
}

/// Explores `mode` on both queues, over every request of a clean run and every fault; prints
/// the number of cases and the time; fails listing every failing case.
async fn explore<M: Explored>(name: &str, env: &Env, mode: &M) {
    let started = Instant::now();
    let mut totals = Totals::default();
    let mut cases = 0;
    let mut failures = Vec::new();
    for fifo in [false, true] {
        let queue = if fifo { "fifo" } else { "standard" };
        let clean = case(env, mode, fifo, None, &mut totals).await;
        cases += 1;
        // The clean run's requests: the same batch again, counted.
        env.faults.disarm();
        let counted = batch();
        drain(env, mode.handler(), fifo, &counted).await;
        let requests = env.faults.sent();
        env.faults.disarm();
        if !clean.is_empty() {
            failures.push(format!("{name} {queue} clean run: {}", clean.join("; ")));
        }
        for n in 1..=requests {
            for fault in FAULTS {
                cases += 1;
                let problems = case(env, mode, fifo, Some((n, fault)), &mut totals).await;
                if !problems.is_empty() {
                    failures.push(format!(
                        "{name} {queue} request {n} {}: {}",
                        fault.label(),
                        problems.join("; ")
                    ));
                }
            }
        }
        println!("{name} {queue}: {requests} requests in a clean run of {MESSAGES} messages");
    }
    println!(
        "{name}: {cases} cases in {:.1} s, {} failed; {} invocations, {} of them crashed, \
         highest receive count {}; {}",
        started.elapsed().as_secs_f64(),
        failures.len(),
        totals.invocations,
        totals.crashes,
        totals.max_receives,
        mode.notes()
    );
    assert!(
        failures.is_empty(),
        "{} of {cases} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test]
async fn fault_exploration_lease_on_dynamodb() {
    let env = Env::new();
    let mode = modes::Lease::on_dynamodb::<SqsMessage>(&env).await;
    explore("lease (DynamoDB)", &env, &mode).await;
}

#[tokio::test]
async fn fault_exploration_lease_on_redis() {
    let env = Env::new();
    let mode = modes::Lease::on_redis::<SqsMessage>(&env).await;
    explore("lease (Redis)", &env, &mode).await;
}

#[tokio::test]
async fn fault_exploration_transactional() {
    let env = Env::new();
    let mode = modes::Transactional::new::<SqsMessage>(&env, false).await;
    explore("transactional", &env, &mode).await;
}

#[tokio::test]
async fn fault_exploration_carried_record() {
    let env = Env::new();
    let mode = modes::Transactional::new::<SqsMessage>(&env, true).await;
    explore("carried record", &env, &mode).await;
}

#[tokio::test]
async fn fault_exploration_inline() {
    let env = Env::new();
    let mode = modes::Inline::new::<SqsMessage>(&env).await;
    explore("inline", &env, &mode).await;
}

/// The defect the exploration finds in every mode: a store outage of ten minutes from a batch's
/// first request. Each delivery fails with a store error, which is not an attempt (the processor
/// never dead-letters it), and comes back after the backoff of a first attempt (2 s); on the
/// FIFO queue the messages behind it are received each time too. After 41 receives SQS moves
/// them all to the dead-letter queue, none of them at fault.
#[tokio::test]
async fn fault_exploration_a_long_outage_moves_no_innocent_message() {
    let env = Env::new();
    let mode = modes::Transactional::new::<SqsMessage>(&env, false).await;
    let mut totals = Totals::default();
    let mut problems = Vec::new();
    for fifo in [false, true] {
        let outage = Some((1, Fault::Outage(Duration::from_secs(600))));
        for problem in case(&env, &mode, fifo, outage, &mut totals).await {
            problems.push(format!("fifo {fifo}: {problem}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
