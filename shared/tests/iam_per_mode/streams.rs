//! A stream consumer of each source under exactly the grants of the workspace README's IAM table,
//! its column for that source: each run a first batch (a record done, one failed, one poison and
//! dead-lettered), the replay from the checkpoint, and the cold-start table check; no request
//! refused, and every action the column grants the library's clients used. The rows of Lambda's
//! own (the event source mapping, its on-failure destination) and of the mapping check (a Lambda
//! request, which `from_clients` does not make) are not the DynamoDB and SQS clients' and are left
//! out; the SQS rows the column leaves empty ("-") are never used, or the guard refuses them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use lambda_idempotency::batch::{EventSource, Record};
use lambda_idempotency::consumer::{ConsumerBuilder, ConsumerConfig};
use lambda_idempotency::prelude::*;
use lambda_idempotency::test_util::StreamEventBuilder;
use lambda_idempotency::time::Clock;
use lambda_runtime::LambdaEvent;
use serde_json::json;

use crate::run::Run;
use crate::table::{Grant, Resource};

const README: &str = include_str!("../../../README.md");
const HEADER: &str = "| what | resource | SQS | DynamoDB Streams | Kinesis | Kafka |";

/// The grants of the README's column `source`, for the rows of `what` (a mode, the dead-letter
/// queue, the table check) on the library's DynamoDB and SQS resources.
fn readme_grants(source: &str, what: &[&str]) -> BTreeSet<Grant> {
    let mut lines = README.lines().skip_while(|l| *l != HEADER);
    let header: Vec<&str> = lines
        .next()
        .expect("the README's IAM table")
        .split('|')
        .map(str::trim)
        .collect();
    let column = header
        .iter()
        .position(|c| *c == source)
        .expect("a column of the source");
    let mut grants = BTreeSet::new();
    for row in lines.skip(1).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        if !what.contains(&cells[1]) {
            continue;
        }
        let resource = match cells[2] {
            "idempotency table" => Resource::IdempotencyTable,
            "the dead-letter queue" => Resource::DeadLetterQueue,
            other => panic!("no resource of the run for {other:?}"),
        };
        let mut cell = cells[column];
        if cell == "the same" {
            cell = cells[3];
        }
        let actions = cell.split('`').skip(1).step_by(2);
        grants.extend(actions.map(|action| (action.to_owned(), resource)));
    }
    assert!(!grants.is_empty(), "{source}: no grants for {what:?}");
    grants
}

/// A record whose `poison` is set fails for good; `r-1` fails while `down`.
fn handler<R: Record>(down: Arc<AtomicBool>) -> impl RecordHandler<R, Output = String> + 'static {
    json(move |record: serde_json::Value, _ctx: RecordContext| {
        let down = down.load(Ordering::SeqCst);
        async move {
            let id = record["id"].as_str().unwrap_or_default().to_owned();
            if record["poison"] == true {
                return Err(PermanentError::new(format!("{id} is poison")).into());
            }
            if id == "r-1" && down {
                return Err::<String, Error>("the effect's service is down".into());
            }
            Ok(id)
        }
    })
}

async fn run_stream<E: EventSource + serde::de::DeserializeOwned>(
    source: &str,
    event: impl Fn(&StreamEventBuilder) -> LambdaEvent<E>,
) {
    let run = Run::new(&[]).await;
    let down = Arc::new(AtomicBool::new(true));
    run.guard.ledger().allowed = readme_grants(
        source,
        &[
            "lease mode",
            "dead-letter queue",
            "table check (cold start; optional)",
        ],
    );
    let environment = BTreeMap::from([
        ("IDEMPOTENCY_TABLE", run.idempotency.clone()),
        ("IDEMPOTENCY_KEY", "/id".to_owned()),
        ("IDEMPOTENCY_KEY_PREFIX", "fn".to_owned()),
        ("DEAD_LETTER_QUEUE_URL", run.dead_letter.url.clone()),
    ]);
    let config = ConsumerConfig::from_lookup(|name| environment.get(name).cloned()).unwrap();
    let consumer = ConsumerBuilder::from_clients(run.dynamodb.clone(), run.sqs.clone(), config)
        .expect("the settings name the table")
        .map_engine(|engine| engine.with_clock(run.clock.clone()))
        .map_processor(|processor| processor.with_clock(run.clock.clone() as Arc<dyn Clock>))
        .source::<E>()
        .idempotent(handler(down.clone()));
    let batch = StreamEventBuilder::new()
        .record("k-1", json!({"id": "r-1"}))
        // Its copy is over 1 KiB: the dead-letter queue's MaximumMessageSize is read.
        .record(
            "k-2",
            json!({"id": "r-2", "poison": true, "pad": "x".repeat(2048)}),
        )
        .record("k-3", json!({"id": "r-3"}));
    let first = consumer.process(&event(&batch)).await.expect("processed");
    assert_eq!(first.failures().count(), 1, "{source}: r-1 failed");
    assert_eq!(
        first.dead_lettered().count(),
        1,
        "{source}: r-2 dead-lettered"
    );
    down.store(false, Ordering::SeqCst);
    let replay = consumer.process(&event(&batch)).await.expect("processed");
    assert_eq!(replay.failures().count(), 0, "{source}");
    let report = consumer
        .cold_start_report(None)
        .await
        .expect("the table fits");
    assert_eq!(report.table_warnings, Some(Vec::new()));
    assert_eq!(run.dead_letters().await.len(), 1, "{source}");
    run.assert_exactly_the_tables_actions();
}

#[tokio::test]
async fn a_kinesis_consumer_needs_exactly_the_readmes_kinesis_column() {
    run_stream("Kinesis", StreamEventBuilder::kinesis).await;
}

#[tokio::test]
async fn a_dynamodb_stream_consumer_needs_exactly_the_readmes_dynamodb_streams_column() {
    run_stream("DynamoDB Streams", StreamEventBuilder::dynamodb).await;
}

#[tokio::test]
async fn a_kafka_consumer_needs_exactly_the_readmes_kafka_column() {
    run_stream("Kafka", StreamEventBuilder::kafka).await;
}
