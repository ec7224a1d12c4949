//! Claims of docs/guarantees.md that the in-memory doubles can check, without AWS: what is
//! permanent (and nothing else), and which entries the warm-container cache answers for.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use lambda_idempotency::cache::{CachedBackend, LocalCache};
use lambda_idempotency::prelude::*;
use lambda_idempotency::store::InMemoryBackend;
use lambda_idempotency::test_util::{InMemorySqs, sqs_event};
use lambda_idempotency::{Idempotency, Outcome};

#[derive(serde::Deserialize)]
struct Order {
    #[allow(dead_code)]
    order_id: String,
    verdict: String,
}

async fn judge(order: Order, _ctx: RecordContext) -> Result<(), Error> {
    match order.verdict.as_str() {
        "permanent" => Err(PermanentError::new("refused for good").into()),
        "transient" => Err("try again".into()),
        _ => Ok(()),
    }
}

/// "What is permanent": a `PermanentError`, a body that does not parse, no key, a key whose
/// completed work was another payload. A handler's own error is not, and neither is the
/// store's (tests/test_util.rs).
#[tokio::test]
async fn only_the_messages_own_faults_are_permanent() {
    let sqs = InMemorySqs::new();
    let consumer = Consumer::builder(Arc::new(InMemoryBackend::default()))
        .with_in_memory_sqs(&sqs)
        .with_keys(KeyConfig::json_pointer("/order_id"))
        .idempotent(json(judge));
    let first = sqs_event([("m-0", r#"{"order_id": "o-0", "verdict": "ok"}"#)]);
    assert_eq!(
        consumer.process(&first).await.unwrap().failures().count(),
        0
    );
    let event = sqs_event([
        ("m-1", r#"{"order_id": "o-1", "verdict": "permanent"}"#),
        ("m-2", r#"{"order_id": "o-2", "verdict": 7}"#),
        ("m-3", r#"{"verdict": "ok"}"#),
        ("m-4", r#"{"order_id": "o-0", "verdict": "ok", "more": 1}"#),
        ("m-5", r#"{"order_id": "o-5", "verdict": "transient"}"#),
    ]);
    let report = consumer.process(&event).await.unwrap();
    let mut dead: Vec<_> = sqs
        .dead_letters()
        .into_iter()
        .map(|d| d.source_message_id)
        .collect();
    dead.sort();
    assert_eq!(dead, ["m-1", "m-2", "m-3", "m-4"]);
    let failed: Vec<_> = report
        .response()
        .batch_item_failures
        .into_iter()
        .map(|f| f.item_identifier)
        .collect();
    assert_eq!(failed, ["m-5"]);
}

/// "The warm-container cache keys its entries by the layer that keeps them and the full stored
/// key": one cache under two layers over one table, and under two prefixes.
#[tokio::test]
async fn a_cache_shared_by_two_layers_or_two_prefixes_never_answers_for_the_other() {
    let cache = LocalCache::new(NonZeroUsize::new(16).unwrap(), Duration::from_secs(60));
    let table = Arc::new(InMemoryBackend::default());
    let layer = |prefix: &str| {
        Idempotency::new(CachedBackend::new(table.clone(), cache.clone())).with_key_prefix(prefix)
    };
    let work = || async { Ok::<_, std::io::Error>(7) };
    let (first, second) = (layer("orders"), layer("orders"));
    assert_eq!(
        first.run("k", b"{}", None, work).await.unwrap(),
        Outcome::Ran(7)
    );
    assert_eq!(
        second.run("k", b"{}", None, work).await.unwrap(),
        Outcome::Duplicate(Some(7))
    );
    assert_eq!(
        cache.hits(),
        0,
        "the other layer's entry did not answer: the table did"
    );

    let clone = first.clone();
    assert_eq!(
        clone.run("k", b"{}", None, work).await.unwrap(),
        Outcome::Duplicate(Some(7))
    );
    assert_eq!(cache.hits(), 1, "a clone of the layer shares its entries");

    let other_prefix = Idempotency::new(first.backend().clone()).with_key_prefix("refunds");
    assert_eq!(
        other_prefix.run("k", b"{}", None, work).await.unwrap(),
        Outcome::Ran(7),
        "another prefix is another stored key"
    );
    assert_eq!(cache.hits(), 1);
}
