//! Random histories of a Kafka topic as a simulated event source mapping delivers it, under both
//! readings of AWS's partial batch response for Kafka: the mapping restarts each partition from
//! the lowest offset named, or it retries only the records named. Records fail a few times before
//! they succeed (holding their key's later records behind them), later records of the same
//! partition fail too, and poison records go to the dead-letter queue. Whatever the history and
//! the reading:
//!
//! - each record's effect happens once (a poison record's is its one dead-letter copy);
//! - the records of one key take effect in the partition's order.

mod flaky;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use aws_lambda_events::kafka::KafkaEvent;
use flaky::{Log, flaky};
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{
    BatchProcessor, RecordContext, RecordError, RecordHandlerExt, json,
};
use lambda_idempotency::dead_letter::DeadLetter;
use lambda_idempotency::store::InMemoryBackend;
use lambda_idempotency::test_util::{InMemorySqs, StreamEventBuilder};
use lambda_runtime::LambdaEvent;
use proptest::prelude::*;

/// How the simulated mapping reads the records a response names.
#[derive(Debug, Clone, Copy)]
enum Policy {
    /// Each partition named restarts from its lowest offset named; every record after it comes
    /// again.
    RestartFromLowest,
    /// Only the records named come again; the others of the batch are done.
    RetryOnlyNamed,
}

#[derive(serde::Deserialize)]
struct Work {
    index: usize,
}

#[derive(Debug, Clone)]
struct History {
    /// Each record's partition (0 or 1) and key.
    records: Vec<(u8, u8)>,
    /// How many times each record fails before it succeeds.
    fails: Vec<u32>,
    /// The records that are poison (fail for good).
    poison: Vec<bool>,
    /// The mapping's batch size.
    batch_size: usize,
}

fn history() -> impl Strategy<Value = History> {
    (1usize..14).prop_flat_map(|n| {
        (
            prop::collection::vec((0u8..2, 0u8..3), n),
            prop::collection::vec(prop_oneof![3 => Just(0u32), 2 => 1u32..3], n),
            prop::collection::vec(prop::bool::weighted(0.15), n),
            1usize..8,
        )
            .prop_map(|(records, fails, poison, batch_size)| History {
                records,
                fails,
                poison,
                batch_size,
            })
    })
}

/// The record of each (partition, offset) in the topic, by its index.
fn topic(history: &History) -> (LambdaEvent<KafkaEvent>, HashMap<(i64, i64), usize>) {
    let mut events = StreamEventBuilder::new();
    let mut at = HashMap::new();
    let mut next = [100i64, 100];
    for (i, (partition, key)) in history.records.iter().enumerate() {
        let key = format!("k{key}");
        let offset = next[*partition as usize];
        next[*partition as usize] += 1;
        events = events
            .shard(u32::from(*partition))
            .record(key.clone(), serde_json::json!({"index": i, "key": key}))
            .at(offset as u128);
        at.insert((i64::from(*partition), offset), i);
    }
    (events.kafka(), at)
}

/// `topic` cut to the records at `positions`.
fn batch_of(topic: &LambdaEvent<KafkaEvent>, positions: &[(i64, i64)]) -> LambdaEvent<KafkaEvent> {
    let mut batch = topic.clone();
    for records in batch.payload.records.values_mut() {
        records.retain(|r| positions.contains(&(r.partition, r.offset)));
    }
    batch
        .payload
        .records
        .retain(|_, records| !records.is_empty());
    batch
}

async fn replay(history: History, policy: Policy) -> Result<(), TestCaseError> {
    let n = history.records.len();
    let (topic, index_at) = topic(&history);
    let log = Arc::new(Mutex::new(Log::default()));
    let handler = flaky(log.clone(), history.fails.clone(), history.poison.clone())
        .idempotent(Idempotency::new(InMemoryBackend::default()));
    let sqs = InMemorySqs::new();
    let processor = BatchProcessor::new().with_dead_letter(DeadLetter::in_memory(&sqs, "dlq"));

    // The records the mapping will deliver, in (partition, offset) order.
    let mut pending: BTreeSet<(i64, i64)> = index_at.keys().copied().collect();
    let mut invocations = 0;
    while !pending.is_empty() {
        invocations += 1;
        prop_assert!(invocations < 500, "the topic never drains");
        let batch: Vec<(i64, i64)> = pending.iter().take(history.batch_size).copied().collect();
        let report = processor
            .process(&batch_of(&topic, &batch), &handler)
            .await
            .unwrap();
        let named: Vec<(i64, i64)> = report
            .response()
            .batch_item_failures
            .into_iter()
            .map(|f| {
                let partition = f.item_identifier.partition;
                let number = partition.rsplit_once('-').and_then(|(_, p)| p.parse().ok());
                (number.unwrap_or(-1), f.item_identifier.offset)
            })
            .collect();
        for position in &named {
            prop_assert!(
                batch.contains(position),
                "{position:?} was not in the batch"
            );
        }
        for position in &batch {
            pending.remove(position);
        }
        match policy {
            Policy::RetryOnlyNamed => pending.extend(named),
            Policy::RestartFromLowest => {
                for (partition, lowest) in &named {
                    let lowest = named
                        .iter()
                        .filter(|(p, _)| p == partition)
                        .map(|(_, o)| *o)
                        .min()
                        .unwrap_or(*lowest);
                    pending.extend(batch.iter().filter(|(p, o)| p == partition && *o >= lowest));
                }
            }
        }
    }
    let log = log.lock().unwrap();
    let mut counts = vec![0; n];
    for (_, i) in &log.effects {
        counts[*i] += 1;
    }
    let dead: Vec<usize> = sqs
        .dead_letters()
        .iter()
        .map(|d| {
            let body: serde_json::Value = serde_json::from_str(d.message.body()).unwrap();
            index_at[&(
                body["partition"].as_i64().unwrap(),
                body["offset"].as_i64().unwrap(),
            )]
        })
        .collect();
    for i in dead {
        counts[i] += 1;
    }
    prop_assert_eq!(
        counts,
        vec![1; n],
        "each record's effect (or dead letter) once: {:?}",
        log.effects
    );
    let mut last: HashMap<(u8, &str), usize> = HashMap::new();
    for (key, i) in &log.effects {
        let partition = history.records[*i].0;
        if let Some(before) = last.insert((partition, key), *i) {
            prop_assert!(
                before < *i,
                "key {key}: {before} after {i}: {:?}",
                log.effects
            );
        }
    }
    Ok(())
}

fn run(history: History, policy: Policy) -> Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(replay(history, policy))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn a_mapping_that_retries_only_the_named_records_loses_none(history in history()) {
        run(history, Policy::RetryOnlyNamed)?;
    }

    #[test]
    fn a_mapping_that_restarts_from_the_lowest_named_offset_loses_none(history in history()) {
        run(history, Policy::RestartFromLowest)?;
    }
}

/// One partition: a1 fails once, a2 waits behind it, b1 is poison, b2 fails once later in the
/// partition, c1 succeeds. The response names every record not done: a1, a2 and b2; never c1,
/// and never b1, which is in the dead-letter queue.
#[tokio::test]
async fn the_response_names_every_record_not_done_of_each_partition() {
    let history = History {
        records: vec![(0, 0), (0, 0), (0, 1), (0, 1), (0, 2), (1, 0)],
        fails: vec![1, 0, 0, 1, 0, 1],
        poison: vec![false, false, true, false, false, false],
        batch_size: 6,
    };
    let (topic, _) = topic(&history);
    let fails = history.fails.clone();
    let poison = history.poison.clone();
    let handler = json(move |w: Work, _ctx: RecordContext| {
        let (fails, poison) = (fails[w.index], poison[w.index]);
        async move {
            if poison {
                Err(RecordError::permanent("poison"))
            } else if fails > 0 {
                Err(RecordError::handler("failed"))
            } else {
                Ok(())
            }
        }
    });
    let sqs = InMemorySqs::new();
    let report = BatchProcessor::new()
        .with_dead_letter(DeadLetter::in_memory(&sqs, "dlq"))
        .process(&topic, &handler)
        .await
        .unwrap();
    let response = serde_json::to_value(report.response()).unwrap();
    assert_eq!(
        response,
        serde_json::json!({"batchItemFailures": [
            {"itemIdentifier": {"partition": "payments-0", "offset": 100}},
            {"itemIdentifier": {"partition": "payments-0", "offset": 101}},
            {"itemIdentifier": {"partition": "payments-0", "offset": 103}},
            {"itemIdentifier": {"partition": "payments-1", "offset": 100}},
        ]})
    );
    assert_eq!(sqs.dead_letters().len(), 1);
}
