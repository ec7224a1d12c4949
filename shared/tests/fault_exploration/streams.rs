//! The stream path of the fault exploration: the modes of [`modes`](crate::modes) (the lease on
//! DynamoDB, transactional, inline) on each source (DynamoDB Streams, Kinesis, Kafka), through
//! the same processor as the SQS explorations (the consumer's defaults: an attempt budget of 5,
//! the backoff as retries within the invocation, a dead-letter queue in memory), fed by a
//! simulated shard and Lambda's stream event source mapping (`test_util::sim_stream`):
//! back-to-back retries, the checkpoint from the partial batch response, bisection, record age,
//! the on-failure destination, with `MappingSettings::default`, the examples' templates' mapping
//! (batches of 100, bisection, a 30 s function, `MaximumRetryAttempts: -1`,
//! `MaximumRecordAgeInSeconds: 3600`). Under the templates' former bound of 5 retries every
//! ten-minute outage sent the batch to the on-failure destination (six invocations of 30 s).
//!
//! Each batch is three records of two order keys (the first and the third share one; the third
//! names the first as the record before it). A clean run counts the store's requests; then for
//! every request `n` of them and every fault of [`FAULTS`], a fresh batch is drained with the
//! fault at request `n`. Each case checks: each record's effect exactly once and its stored
//! result, order per key (no record ran before the effect of the record before it of its key),
//! nothing sent to the on-failure destination, nothing dead-lettered (no record is at fault), no
//! function error, the shard drained; then the same records once more, after every lease of the
//! case ended, run nothing again. In the lease mode that last check is the one a completion the
//! store refused (an outage from the completion, an earlier record of the shard failing, so that
//! Lambda delivers the record again behind the checkpoint) must pass: the process that ran the
//! record remembers its completion and answers the redelivery as a duplicate.
//!
//! One exploration per source runs records concurrently (the transactional mode, the
//! processor's concurrency 4, so the two keys run at once): request `n` is then not the same
//! request in every run, and the fault armed at `n` strikes whichever request comes `n`-th (a
//! lost answer or a crash takes the next answer to arrive). Those cases check the same
//! invariants whatever request the fault hit; a fault that did not fire (the run made fewer
//! requests) is counted, not failed.
//!
//! Every request of a clean run is explored for every mode and source.

use std::time::Instant;

use aws_lambda_events::dynamodb::Event as DynamoDbEvent;
use aws_lambda_events::kafka::KafkaEvent;
use aws_lambda_events::kinesis::KinesisEvent;
use lambda_idempotency::batch::EventSource;
use lambda_idempotency::test_util::StreamEventBuilder;
use lambda_idempotency::test_util::fault::Fault;
use lambda_idempotency::test_util::sim_stream::{
    self, Drained, MappingSettings, SimShard, failed_sequences,
};
use lambda_idempotency::time::Clock;
use lambda_runtime::LambdaEvent;
use serde_json::{Value, json};

use crate::{Env, Explored, FAULTS, common, modes};

/// The examples' event source mapping, as `MappingSettings::default` gives it: batches of 100,
/// bisection, a 30 s function, retries unbounded, records kept for at most an hour.
fn mapping() -> MappingSettings {
    MappingSettings::default()
}

/// A stream source: its event, built from the shard's batch.
pub trait Source: EventSource + Sized {
    const NAME: &'static str;

    fn event(batch: &StreamEventBuilder) -> LambdaEvent<Self>;
}

impl Source for DynamoDbEvent {
    const NAME: &'static str = "DynamoDB Streams";

    fn event(batch: &StreamEventBuilder) -> LambdaEvent<Self> {
        batch.dynamodb()
    }
}

impl Source for KinesisEvent {
    const NAME: &'static str = "Kinesis";

    fn event(batch: &StreamEventBuilder) -> LambdaEvent<Self> {
        batch.kinesis()
    }
}

impl Source for KafkaEvent {
    const NAME: &'static str = "Kafka";

    fn event(batch: &StreamEventBuilder) -> LambdaEvent<Self> {
        batch.kafka()
    }
}

/// A fresh shard of three records of two order keys, and their ids.
fn batch(now_ms: i64) -> (SimShard, Vec<String>) {
    let case = common::unique("s");
    let ids: Vec<String> = (1..=3).map(|i| format!("{case}-{i}")).collect();
    (shard_of(&case, &ids, now_ms), ids)
}

/// A shard of the records of `case` (ids `ids`), arriving at `now_ms`.
fn shard_of(case: &str, ids: &[String], now_ms: i64) -> SimShard {
    let (a, b) = (format!("{case}-a"), format!("{case}-b"));
    let records = [
        (a.clone(), json!({ "id": ids[0] })),
        (b, json!({ "id": ids[1] })),
        (a, json!({ "id": ids[2], "after": ids[0] })),
    ];
    SimShard::new(records, now_ms)
}

/// The sequence numbers a partial batch response names: a string identifier (Kinesis, DynamoDB
/// Streams) or Kafka's `{partition, offset}`.
fn named(response: &Value) -> Vec<u128> {
    let identifiers: Vec<Option<String>> = response["batchItemFailures"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| match &f["itemIdentifier"] {
            Value::String(s) => Some(s.clone()),
            Value::Object(o) => o.get("offset").map(Value::to_string),
            _ => None,
        })
        .collect();
    failed_sequences(identifiers.iter().map(Option::as_deref))
}

/// Drains `shard` through the processor and `mode`'s handler under the examples' mapping.
async fn drain<S: Source, M: Explored<S::Record>>(env: &Env, mode: &M, shard: SimShard) -> Drained {
    sim_stream::drain(
        shard,
        mapping(),
        &env.clock,
        &env.crash,
        &env.sqs,
        |batch| async move {
            let event = S::event(&batch);
            let report = env
                .processor
                .process(&event, mode.handler())
                .await
                .map_err(|e| e.to_string())?;
            let response = serde_json::to_value(report.response()).map_err(|e| e.to_string())?;
            Ok(named(&response))
        },
    )
    .await
}

/// What a source and mode's cases did, together.
#[derive(Default)]
struct Tally {
    invocations: u32,
    crashes: u32,
    /// Faults that never fired (concurrent runs only).
    unfired: u32,
}

/// Runs a fresh batch with `fault` armed at request `n` (none: a clean run); what went wrong.
async fn case<S: Source, M: Explored<S::Record>>(
    env: &Env,
    mode: &M,
    sequential: bool,
    fault: Option<(u32, Fault)>,
    tally: &mut Tally,
) -> Vec<String> {
    let (shard, ids) = batch(env.clock.now_ms());
    match fault {
        Some((n, fault)) => env.faults.arm(n, fault),
        None => env.faults.disarm(),
    }
    let drained = drain::<S, M>(env, mode, shard).await;
    tally.invocations += drained.invocations;
    tally.crashes += drained.crashes;
    let requests = env.faults.runs();
    let unfired = fault.is_some() && !env.faults.fired();
    env.faults.disarm();
    env.crash.reset();
    let mut problems = Vec::new();
    if unfired {
        if sequential {
            problems.push("the fault never fired".to_owned());
        } else {
            tally.unfired += 1;
        }
    }
    problems.extend(drained.problems());
    if !sequential {
        mode.crashed(&drained.crashed);
    }
    // The batch once more, after every lease of the case has ended (the records again under
    // other sequence numbers: a producer writing them twice): nothing runs again, whatever the
    // fault left behind (a completion the store refused among them).
    env.clock.advance(mapping().function_timeout * 2);
    let case_name = ids[0].trim_end_matches("-1");
    let again = drain::<S, M>(env, mode, shard_of(case_name, &ids, env.clock.now_ms())).await;
    problems.extend(
        again
            .problems()
            .into_iter()
            .map(|p| format!("its duplicates: {p}")),
    );
    for id in &ids {
        problems.extend(mode.check(id).await);
    }
    if !problems.is_empty() {
        problems.insert(
            0,
            format!(
                "{} invocations, {} crashes; requests {requests}",
                drained.invocations, drained.crashes
            ),
        );
    }
    problems
}

/// Explores `mode` on source `S` over every request of a clean run and every fault; prints the
/// number of cases and the time; the failing cases.
async fn explore<S: Source, M: Explored<S::Record>>(
    name: &str,
    env: &Env,
    mode: &M,
    sequential: bool,
) -> Vec<String> {
    let name = format!("{} {name}", S::NAME);
    let started = Instant::now();
    let mut tally = Tally::default();
    let mut failures = Vec::new();
    let clean = case::<S, M>(env, mode, sequential, None, &mut tally).await;
    if !clean.is_empty() {
        failures.push(format!("{name} clean run: {}", clean.join("; ")));
    }
    // The clean run's requests: a batch again, counted.
    env.faults.disarm();
    drain::<S, M>(env, mode, batch(env.clock.now_ms()).0).await;
    let requests = env.faults.sent();
    env.faults.disarm();
    let mut cases = 1;
    for n in 1..=requests {
        for fault in FAULTS {
            cases += 1;
            let problems = case::<S, M>(env, mode, sequential, Some((n, fault)), &mut tally).await;
            if !problems.is_empty() {
                failures.push(format!(
                    "{name} request {n} {}: {}",
                    fault.label(),
                    problems.join("; ")
                ));
            }
        }
    }
    println!(
        "{name}: {requests} requests in a clean run of 3 records; {cases} cases in {:.1} s, {} \
         failed; {} invocations, {} of them crashed, {} faults never fired; {}",
        started.elapsed().as_secs_f64(),
        failures.len(),
        tally.invocations,
        tally.crashes,
        tally.unfired,
        mode.notes()
    );
    failures
}

/// Fails listing every failing case.
fn assert_none_failed(failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The explorations of source `S`: the lease on DynamoDB, transactional, inline, one record at a
/// time.
async fn explore_modes<S: Source>() {
    let env = Env::new();
    let lease = modes::Lease::on_dynamodb::<S::Record>(&env).await;
    let mut failures = explore::<S, _>("lease (DynamoDB)", &env, &lease, true).await;
    let transactional = modes::Transactional::new::<S::Record>(&env, false).await;
    failures.extend(explore::<S, _>("transactional", &env, &transactional, true).await);
    let inline = modes::Inline::new::<S::Record>(&env).await;
    failures.extend(explore::<S, _>("inline", &env, &inline, true).await);
    assert_none_failed(&failures);
}

/// The transactional and lease modes on source `S`, records of both keys at once. In the lease
/// mode a crash raised by one record's request can fall between another's effect and its
/// completion (the crash's window, which one record at a time never opens): that record's
/// effect may run a second time, and only when its first run's invocation crashed.
async fn explore_concurrently<S: Source>() {
    let env = Env::with_concurrency(4);
    let mode = modes::Transactional::new::<S::Record>(&env, false).await;
    let mut failures = explore::<S, _>("transactional, concurrent", &env, &mode, false).await;
    let lease = modes::Lease::on_dynamodb::<S::Record>(&env).await;
    failures.extend(explore::<S, _>("lease (DynamoDB), concurrent", &env, &lease, false).await);
    assert_none_failed(&failures);
}

#[tokio::test]
async fn fault_exploration_dynamodb_streams() {
    explore_modes::<DynamoDbEvent>().await;
}

#[tokio::test]
async fn fault_exploration_kinesis() {
    explore_modes::<KinesisEvent>().await;
}

#[tokio::test]
async fn fault_exploration_kafka() {
    explore_modes::<KafkaEvent>().await;
}

#[tokio::test]
async fn fault_exploration_dynamodb_streams_concurrent() {
    explore_concurrently::<DynamoDbEvent>().await;
}

#[tokio::test]
async fn fault_exploration_kinesis_concurrent() {
    explore_concurrently::<KinesisEvent>().await;
}

#[tokio::test]
async fn fault_exploration_kafka_concurrent() {
    explore_concurrently::<KafkaEvent>().await;
}
