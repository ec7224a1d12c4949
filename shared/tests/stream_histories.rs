//! Random histories of a Kinesis shard as Lambda's event source mapping delivers it: batches from
//! the checkpoint, records that fail a few times before they succeed, invocations that crash
//! after their work (their response lost: the batch is retried, bisected), with and without
//! strict order. Whatever the history:
//!
//! - each record's effect happens once;
//! - the records of one key take effect in the shard's order;
//! - the checkpoint never passes a record whose effect has not happened.

mod flaky;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use flaky::{Log, flaky};
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{BatchProcessor, RecordHandlerExt};
use lambda_idempotency::store::InMemoryBackend;
use lambda_idempotency::test_util::StreamEventBuilder;
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct History {
    /// Each record's key.
    keys: Vec<u8>,
    /// How many times each record fails before it succeeds.
    fails: Vec<u32>,
    /// The gap between consecutive sequence numbers (the numbers cross powers of ten).
    step: u128,
    /// The mapping's batch size.
    batch_size: usize,
    /// For each invocation, in turn: whether it crashes after its work.
    crashes: Vec<bool>,
    strict: bool,
}

fn history() -> impl Strategy<Value = History> {
    (1usize..16).prop_flat_map(|n| {
        (
            prop::collection::vec(0u8..3, n),
            prop::collection::vec(prop_oneof![4 => Just(0u32), 1 => 1u32..3], n),
            1u128..40,
            1usize..8,
            prop::collection::vec(prop::bool::weighted(0.2), 0..12),
            any::<bool>(),
        )
            .prop_map(|(keys, fails, step, batch_size, crashes, strict)| History {
                keys,
                fails,
                step,
                batch_size,
                crashes,
                strict,
            })
    })
}

async fn replay(history: History) -> Result<(), TestCaseError> {
    let n = history.keys.len();
    let mut events = StreamEventBuilder::new();
    for (i, key) in history.keys.iter().enumerate() {
        let key = format!("k{key}");
        events = events
            .record(key.clone(), serde_json::json!({"index": i, "key": key}))
            .at(90 + i as u128 * history.step);
    }
    let shard = events.kinesis();
    let log = Arc::new(Mutex::new(Log::default()));
    let handler = flaky(log.clone(), history.fails.clone(), Vec::new())
        .idempotent(Idempotency::new(InMemoryBackend::default()));
    let processor = BatchProcessor::new().strict_order(history.strict);

    let mut checkpoint = 0;
    let mut size = history.batch_size;
    let mut crashes = history.crashes.iter();
    let mut invocations = 0;
    while checkpoint < n {
        invocations += 1;
        prop_assert!(invocations < 500, "the shard never drains");
        let end = (checkpoint + size).min(n);
        let mut batch = shard.clone();
        batch.payload.records = shard.payload.records[checkpoint..end].to_vec();
        let report = processor.process(&batch, &handler).await.unwrap();
        if crashes.next().copied().unwrap_or(false) {
            // The response is lost: the whole batch fails, and is bisected.
            size = (end - checkpoint).div_ceil(2);
            continue;
        }
        size = history.batch_size;
        let reported: Vec<String> = report
            .response()
            .batch_item_failures
            .into_iter()
            .filter_map(|f| f.item_identifier)
            .collect();
        prop_assert!(
            reported.len() <= 1,
            "one checkpoint per shard: {reported:?}"
        );
        let next = match reported.first() {
            None => end,
            Some(sequence) => shard.payload.records[checkpoint..end]
                .iter()
                .position(|r| &r.kinesis.sequence_number == sequence)
                .map(|p| checkpoint + p)
                .ok_or_else(|| TestCaseError::fail(format!("{sequence} is not in the batch")))?,
        };
        // Never past a record whose effect has not happened.
        let done: Vec<usize> = log.lock().unwrap().effects.iter().map(|e| e.1).collect();
        for i in checkpoint..next {
            prop_assert!(
                done.contains(&i),
                "checkpoint {next} passes record {i}, not done"
            );
        }
        checkpoint = next;
    }
    let log = log.lock().unwrap();
    let mut counts = vec![0; n];
    for (_, i) in &log.effects {
        counts[*i] += 1;
    }
    prop_assert_eq!(counts, vec![1; n], "each effect once: {:?}", log.effects);
    let mut last: HashMap<&str, usize> = HashMap::new();
    for (key, i) in &log.effects {
        if let Some(before) = last.insert(key, *i) {
            prop_assert!(
                before < *i,
                "key {key}: {before} after {i}: {:?}",
                log.effects
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_history_of_a_shard_takes_each_effect_once_in_key_order(history in history()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(replay(history))?;
    }
}
