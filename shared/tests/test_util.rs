//! The `test-util` doubles of SQS (`test_util::InMemorySqs`) and its events
//! (`test_util::SqsEventBuilder`): a consumer under test answers as the deployed one, its
//! dead letters and visibility changes recorded.

use std::sync::Arc;

use lambda_idempotency::consumer::Consumer;
use lambda_idempotency::dead_letter::{Copied, REASON_ATTRIBUTE, SOURCE_MESSAGE_ID_ATTRIBUTE};
use lambda_idempotency::prelude::*;
use lambda_idempotency::state::IdempotencyRecord;
use lambda_idempotency::store::{
    Backend, InMemoryBackend, MemoryWrite, Put, StoreError, Update, Updated,
};
use lambda_idempotency::test_util::{InMemorySqs, SqsEventBuilder, sqs_event};

/// A store that never answers: every request fails as a throttled or unreachable one does.
struct Unreachable;

fn unreachable(operation: &'static str) -> StoreError {
    StoreError::Request {
        operation,
        message: "connection refused".into(),
        source: "connection refused".into(),
    }
}

impl Backend for Unreachable {
    async fn put(&self, _: &IdempotencyRecord, _: i64) -> Result<Put, StoreError> {
        Err(unreachable("UpdateItem"))
    }
    async fn get(&self, _: &str, _: i64) -> Result<Option<IdempotencyRecord>, StoreError> {
        Err(unreachable("GetItem"))
    }
    async fn update(&self, _: &str, _: &Update, _: i64) -> Result<Updated, StoreError> {
        Err(unreachable("UpdateItem"))
    }
    async fn delete(&self, _: &str) -> Result<(), StoreError> {
        Err(unreachable("DeleteItem"))
    }
}

async fn succeeds(_body: serde_json::Value, _ctx: RecordContext) -> Result<(), Error> {
    Ok(())
}

async fn fails_on_bad(body: serde_json::Value, _ctx: RecordContext) -> Result<(), Error> {
    if body["bad"] == true {
        return Err("the ledger is down".into());
    }
    Ok(())
}

#[tokio::test]
/// A store that cannot be reached is not the message's fault: never dead-lettered, and each
/// delivery's delay doubles with its receive count (2 s, 4 s, 8 s, 16 s, plus up to a quarter of
/// jitter), so that SQS's `maxReceiveCount` is not reached however long the outage lasts.
async fn a_store_failure_backs_off_by_its_receives_and_is_never_dead_lettered() {
    let sqs = InMemorySqs::new();
    let consumer = Consumer::builder(Unreachable)
        .with_in_memory_sqs(&sqs)
        .max_attempts(2)
        .idempotent(json(succeeds));
    for delivery in 1..=4 {
        let event = SqsEventBuilder::new()
            .message("m-1", "{}")
            .receive_count(delivery)
            .build();
        let report = consumer.process(&event).await.unwrap();
        assert_eq!(report.failures().count(), 1, "delivery {delivery}");
        assert_eq!(report.dead_lettered().count(), 0, "delivery {delivery}");
    }
    assert!(sqs.dead_letters().is_empty());
    let delays: Vec<_> = sqs
        .visibility_changes()
        .iter()
        .map(|c| c.visibility_timeout.as_secs())
        .collect();
    assert_eq!(delays.len(), 4, "{delays:?}");
    for (delivery, delay) in (1..=4).zip(&delays) {
        let base = 2_u64 << (delivery - 1);
        assert!(
            (base..=base + base.div_ceil(4)).contains(delay),
            "delivery {delivery}: {delays:?}"
        );
    }
}

#[tokio::test]
async fn a_fifo_failure_holds_its_group_which_comes_back_with_it() {
    let sqs = InMemorySqs::new();
    let consumer = Consumer::builder(Arc::new(InMemoryBackend::default()))
        .with_dead_letter_queue("https://sqs.us-east-1.amazonaws.com/123456789012/orders-dlq.fifo")
        .with_in_memory_sqs(&sqs)
        .idempotent(json(fails_on_bad));
    let event = SqsEventBuilder::new()
        .queue_arn("arn:aws:sqs:eu-west-1:123456789012:orders.fifo")
        .message("a-1", r#"{"bad": true}"#)
        .group("a")
        .message("a-2", "{}")
        .group("a")
        .message("b-1", "{}")
        .group("b")
        .build();
    let report = consumer.process(&event).await.unwrap();
    let failed: Vec<_> = report
        .response()
        .batch_item_failures
        .into_iter()
        .map(|f| f.item_identifier)
        .collect();
    assert_eq!(failed, ["a-1", "a-2"]);
    let changes = sqs.visibility_changes();
    assert_eq!(changes.len(), 2);
    assert_eq!(changes[0].message_id, "a-1");
    assert_eq!(changes[1].message_id, "a-2");
    assert_eq!(changes[0].visibility_timeout, changes[1].visibility_timeout);
    assert_eq!(
        changes[0].queue_arn,
        "arn:aws:sqs:eu-west-1:123456789012:orders.fifo"
    );
}

#[tokio::test]
async fn a_permanent_failure_is_copied_to_the_named_fifo_queue_with_its_group_and_reason() {
    let sqs = InMemorySqs::new();
    let dlq = "https://sqs.us-east-1.amazonaws.com/123456789012/orders-dlq.fifo";
    let consumer = Consumer::builder(Arc::new(InMemoryBackend::default()))
        .with_dead_letter_queue(dlq)
        .with_in_memory_sqs(&sqs)
        .idempotent(json(succeeds));
    let event = SqsEventBuilder::new()
        .queue_arn("arn:aws:sqs:eu-west-1:123456789012:orders.fifo")
        .message("a-1", "not json")
        .group("a")
        .build();
    let report = consumer.process(&event).await.unwrap();
    assert!(report.response().batch_item_failures.is_empty());
    let dead = sqs.dead_letters();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].queue_url, dlq);
    assert_eq!(dead[0].copied, Copied::Full);
    assert_eq!(dead[0].message.body(), "not json");
    assert_eq!(dead[0].message.group_id().unwrap().as_str(), "a");
    let attributes = dead[0].message.attributes();
    assert_eq!(
        attributes[SOURCE_MESSAGE_ID_ATTRIBUTE].string_value(),
        Some("a-1")
    );
    assert_eq!(
        attributes[REASON_ATTRIBUTE].string_value(),
        Some(dead[0].reason.as_str())
    );
    assert!(dead[0].reason.contains("body"), "{}", dead[0].reason);
}

#[tokio::test]
async fn without_in_memory_sqs_a_test_consumer_has_no_dead_letter_queue() {
    let consumer =
        Consumer::builder(Arc::new(InMemoryBackend::default())).idempotent(json(succeeds));
    let report = consumer
        .process(&sqs_event([("m-1", "not json")]))
        .await
        .unwrap();
    assert_eq!(report.dead_lettered().count(), 0);
    assert_eq!(report.response().batch_item_failures.len(), 1);
}

#[test]
#[should_panic(expected = "`MessageGroupId` of which record? Add one with `message` first")]
fn a_group_before_any_message_names_the_mistake() {
    let _ = SqsEventBuilder::new().group("a");
}

#[test]
#[should_panic(expected = "`arn:aws:sqs:orders` is not an SQS queue ARN")]
fn a_malformed_queue_arn_is_refused() {
    let _ = SqsEventBuilder::new().queue_arn("arn:aws:sqs:orders");
}

/// The README's first consumer, with its item lookup: message A of an order fails four times,
/// message B of the same order writes it, then message C of the same order fails once. C is a
/// duplicate (its failure read the order's item), and nothing reaches the dead-letter queue.
#[tokio::test]
async fn a_consumer_with_an_item_lookup_never_dead_letters_a_key_whose_work_is_done() {
    #[derive(serde::Deserialize)]
    struct Order {
        order_id: String,
    }
    fn order_item(order_id: &str) -> MemoryWrite {
        MemoryWrite::put_if_absent("orders", order_id, "placed")
    }
    let backend = Arc::new(InMemoryBackend::default());
    let sqs = InMemorySqs::new();
    let consumer = Consumer::builder(backend.clone())
        .with_in_memory_sqs(&sqs)
        .max_attempts(5)
        .with_keys(KeyConfig::json_pointer("/order_id"))
        .with_item_lookup(|order_id: &str, _: &SqsMessage| Some(order_item(order_id)))
        .inline(json(|order: Order, ctx: RecordContext| async move {
            match ctx.message_id.as_str() {
                "m-b" => Ok(InlinePut::new((), order_item(&order.order_id))),
                other => Err(Error::from(format!("{other}: the warehouse is down"))),
            }
        }));
    let body = r#"{"order_id": "o-1"}"#;
    for receive in 1..=4 {
        let event = SqsEventBuilder::new()
            .message("m-a", body)
            .receive_count(receive)
            .build();
        let report = consumer.process(&event).await.unwrap();
        assert_eq!(report.response().batch_item_failures.len(), 1);
    }
    let report = consumer.process(&sqs_event([("m-b", body)])).await.unwrap();
    assert!(
        report.response().batch_item_failures.is_empty(),
        "B writes the order"
    );
    let report = consumer.process(&sqs_event([("m-c", body)])).await.unwrap();
    assert!(report.response().batch_item_failures.is_empty());
    assert!(
        report.successes().all(|(_, done)| done.is_duplicate()),
        "C's failure after B wrote the order is a duplicate"
    );
    assert!(sqs.dead_letters().is_empty(), "{:?}", sqs.dead_letters());
    assert_eq!(backend.item("orders", "o-1").as_deref(), Some("placed"));
}
