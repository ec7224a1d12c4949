//! A property over whole delivery histories, as producers other than our own make them: logical
//! payments, each delivered any number of times, re-serialized (spacing, key order, escapes), with
//! envelope fields the consumer does not read, some preceded (or followed) by a malformed or a
//! poison version under the same key, in any order and any batch split, with redelivery of what
//! a batch reported failed.
//!
//! What must hold: each logical payment's effect happens exactly once, with its own amount; the
//! dead-letter queue holds exactly the versions that can never succeed; the queue drains.

mod common;

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{
    BatchProcessor, PermanentError, RecordContext, RecordHandlerExt, json,
};
use lambda_idempotency::key::KeyConfig;
use lambda_idempotency::store::InMemoryBackend;
use lambda_runtime::{Context, LambdaEvent};
use proptest::prelude::*;

use common::{Sent, dead_letter_queue};

#[derive(serde::Deserialize)]
struct Payment {
    id: String,
    amount: i64,
}

/// One logical payment and what its producer did with it.
#[derive(Debug, Clone)]
struct Logical {
    amount: i64,
    /// Deliveries of the good version, each written its own way.
    deliveries: Vec<Writing>,
    /// A version that can never succeed, under the same key.
    bad: Option<Bad>,
    /// The handler fails its first run for this payment (a transient error).
    flaky: bool,
}

#[derive(Debug, Clone, Copy)]
enum Bad {
    /// `amount` is not a number: the body does not deserialize.
    Malformed,
    /// The handler refuses it for good.
    Poison,
}

/// How one delivery is written.
#[derive(Debug, Clone, Copy)]
struct Writing {
    spaced: bool,
    reversed: bool,
    /// An envelope field the consumer does not read (a trace id), with this value.
    trace: Option<u8>,
    escaped: bool,
}

fn writing() -> impl Strategy<Value = Writing> {
    (
        any::<bool>(),
        any::<bool>(),
        prop::option::of(any::<u8>()),
        any::<bool>(),
    )
        .prop_map(|(spaced, reversed, trace, escaped)| Writing {
            spaced,
            reversed,
            trace,
            escaped,
        })
}

fn logical() -> impl Strategy<Value = Logical> {
    (
        1..10_000i64,
        prop::collection::vec(writing(), 1..4),
        prop_oneof![
            3 => Just(None),
            1 => Just(Some(Bad::Malformed)),
            1 => Just(Some(Bad::Poison)),
        ],
        any::<bool>(),
    )
        .prop_map(|(amount, deliveries, bad, flaky)| Logical {
            amount,
            deliveries,
            bad,
            flaky,
        })
}

/// The body of payment `id` with `amount` (a JSON value, as text), written as `w` says.
fn written(id: &str, amount: &str, w: Writing) -> String {
    let id = if w.escaped {
        // The same string with a JSON escape: `p` is `\u0070`.
        id.replacen('p', "\\u0070", 1)
    } else {
        id.to_owned()
    };
    let mut fields = vec![format!("\"id\":\"{id}\""), format!("\"amount\":{amount}")];
    if let Some(trace) = w.trace {
        fields.push(format!("\"traceId\":\"t-{trace}\""));
    }
    if w.reversed {
        fields.reverse();
    }
    let sep = if w.spaced { ", " } else { "," };
    let body = fields.join(sep);
    if w.spaced {
        format!("{{ {} }}", body.replace("\":", "\": "))
    } else {
        format!("{{{body}}}")
    }
}

fn message(n: usize, body: String, receives: u32) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some(format!("m-{n}"));
    m.body = Some(body);
    m.attributes
        .insert("ApproximateReceiveCount".into(), receives.to_string());
    m
}

/// Runs the history; returns the effects by payment (amounts charged) and the dead-letter bodies.
fn simulate(
    payments: &[Logical],
    order: &[u32],
    batch_sizes: &[usize],
) -> (BTreeMap<String, Vec<i64>>, Vec<String>, Vec<String>, usize) {
    // Every delivery, then shuffled by the generated sort keys.
    let mut deliveries: Vec<(String, Option<Bad>)> = Vec::new();
    for (i, p) in payments.iter().enumerate() {
        let id = format!("p-{i}");
        for w in &p.deliveries {
            deliveries.push((written(&id, &p.amount.to_string(), *w), None));
        }
        match p.bad {
            Some(Bad::Malformed) => deliveries.push((
                written(&id, "\"ten\"", p.deliveries[0]),
                Some(Bad::Malformed),
            )),
            Some(Bad::Poison) => {
                deliveries.push((written(&id, "-2", p.deliveries[0]), Some(Bad::Poison)))
            }
            None => {}
        }
    }
    let mut keyed: Vec<_> = deliveries
        .into_iter()
        .enumerate()
        .map(|(n, d)| (order.get(n).copied().unwrap_or(0), n, d))
        .collect();
    keyed.sort_by_key(|(k, n, _)| (*k, *n));
    let cannot_succeed: Vec<String> = keyed
        .iter()
        .filter(|(_, _, (_, bad))| bad.is_some())
        .map(|(_, _, (body, _))| body.clone())
        .collect();
    let mut queue: VecDeque<SqsMessage> = keyed
        .into_iter()
        .map(|(_, n, (body, _))| message(n, body, 1))
        .collect();

    let effects: Arc<Mutex<BTreeMap<String, Vec<i64>>>> = Arc::default();
    let runs: Arc<Mutex<BTreeMap<String, u32>>> = Arc::default();
    let flaky: Vec<bool> = payments.iter().map(|p| p.flaky).collect();
    let (e, r) = (effects.clone(), runs.clone());
    let handler = json(move |p: Payment, _ctx: RecordContext| {
        let (effects, runs, flaky) = (e.clone(), r.clone(), flaky.clone());
        async move {
            if p.amount < 0 {
                return Err(PermanentError::new("amount must be positive").into());
            }
            let index: usize = p.id.trim_start_matches("p-").parse().unwrap();
            let run = {
                let mut runs = runs.lock().unwrap();
                let run = runs.entry(p.id.clone()).or_default();
                *run += 1;
                *run
            };
            if flaky[index] && run == 1 {
                return Err::<i64, Box<dyn std::error::Error + Send + Sync>>(
                    "downstream timeout".into(),
                );
            }
            effects
                .lock()
                .unwrap()
                .entry(p.id)
                .or_default()
                .push(p.amount);
            Ok(p.amount)
        }
    })
    .idempotent(Idempotency::new(InMemoryBackend::default()))
    .with_keys(KeyConfig::json_pointer("/id").with_payload_pointers(["/id", "/amount"]));
    let sent = Sent::default();
    let processor = BatchProcessor::new()
        .with_dead_letter(dead_letter_queue(&sent))
        .max_attempts(3);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut batches = 0;
    while !queue.is_empty() && batches < 200 {
        let size = batch_sizes
            .get(batches % batch_sizes.len().max(1))
            .copied()
            .unwrap_or(10)
            .clamp(1, 10)
            .min(queue.len());
        let records: Vec<SqsMessage> = queue.drain(..size).collect();
        let mut event = SqsEvent::default();
        event.records = records.clone();
        let response = runtime
            .block_on(processor.process(&LambdaEvent::new(event, Context::default()), &handler))
            .unwrap()
            .response();
        // What the batch reported failed comes back, received once more.
        for failure in response.batch_item_failures {
            let mut again = records
                .iter()
                .find(|m| m.message_id.as_deref() == Some(&failure.item_identifier))
                .unwrap()
                .clone();
            let receives: u32 = again.attributes["ApproximateReceiveCount"].parse().unwrap();
            again
                .attributes
                .insert("ApproximateReceiveCount".into(), (receives + 1).to_string());
            queue.push_back(again);
        }
        batches += 1;
    }
    let effects = effects.lock().unwrap().clone();
    let dead = sent.lock().unwrap().clone();
    (effects, dead, cannot_succeed, queue.len())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn every_payment_takes_effect_once_and_only_what_cannot_succeed_is_dead_lettered(
        payments in prop::collection::vec(logical(), 1..6),
        order in prop::collection::vec(0..8u32, 32),
        batch_sizes in prop::collection::vec(1..11usize, 1..5),
    ) {
        let (effects, mut dead, mut cannot_succeed, left) =
            simulate(&payments, &order, &batch_sizes);
        prop_assert_eq!(left, 0, "the queue drains");
        for (i, p) in payments.iter().enumerate() {
            prop_assert_eq!(
                effects.get(&format!("p-{i}")).cloned().unwrap_or_default(),
                vec![p.amount],
                "payment p-{} takes effect exactly once, with its own amount", i
            );
        }
        prop_assert_eq!(effects.len(), payments.len());
        dead.sort();
        cannot_succeed.sort();
        prop_assert_eq!(dead, cannot_succeed, "the dead-letter queue holds exactly what can never succeed");
    }
}

/// The case the property found worth pinning: a malformed version, then its fix, then a resend
/// of the fix written the way Python's `json.dumps` writes it.
#[test]
fn a_malformed_version_then_its_fix_then_a_python_resend() {
    let payments = [Logical {
        amount: 10,
        deliveries: vec![
            Writing {
                spaced: false,
                reversed: false,
                trace: None,
                escaped: false,
            },
            Writing {
                spaced: true,
                reversed: true,
                trace: Some(7),
                escaped: false,
            },
        ],
        bad: Some(Bad::Malformed),
        flaky: false,
    }];
    // The malformed version first (it is the third delivery), then the two good ones.
    let (effects, dead, cannot_succeed, left) = simulate(&payments, &[1, 2, 0], &[1]);
    assert_eq!(left, 0);
    assert_eq!(effects["p-0"], vec![10]);
    assert_eq!(dead, cannot_succeed);
    assert_eq!(dead, [r#"{"id":"p-0","amount":"ten"}"#]);
}
