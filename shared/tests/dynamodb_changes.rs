//! DynamoDB stream records as each stream view type delivers each event: what a `json` handler
//! decodes (the new image, else the item's keys, never the deleted item), what its context says
//! ([`Change`]: the event name, a time to live expiry), and that no record without an image is
//! poison.

use std::sync::{Arc, Mutex};

use aws_lambda_events::dynamodb::Event;
use lambda_idempotency::batch::{BatchProcessor, Change, RecordContext, json};
use lambda_idempotency::dead_letter::DeadLetter;
use lambda_idempotency::test_util::{InMemorySqs, StreamEventBuilder};
use lambda_runtime::LambdaEvent;
use serde_json::{Value, json};

const VIEWS: [&str; 4] = ["NEW_IMAGE", "OLD_IMAGE", "NEW_AND_OLD_IMAGES", "KEYS_ONLY"];
const EVENTS: [&str; 3] = ["INSERT", "MODIFY", "REMOVE"];

/// One record of order `o-1` (total 5 after the change, 4 before it) as the view type `view`
/// delivers the event `name`, deleted by `identity` when given.
fn event(view: &str, name: &str, identity: Option<Value>) -> LambdaEvent<Event> {
    let built = StreamEventBuilder::new()
        .record("o-1", json!({"total": 5}))
        .dynamodb();
    let mut value = serde_json::to_value(&built.payload).unwrap();
    let record = &mut value["Records"][0];
    let new_image = json!({"pk": {"S": "o-1"}, "total": {"N": "5"}});
    let old_image = json!({"pk": {"S": "o-1"}, "total": {"N": "4"}});
    let change = record["dynamodb"].as_object_mut().unwrap();
    change.remove("NewImage");
    change.insert("StreamViewType".into(), json!(view));
    let has_new = name != "REMOVE" && matches!(view, "NEW_IMAGE" | "NEW_AND_OLD_IMAGES");
    let has_old = name != "INSERT" && matches!(view, "OLD_IMAGE" | "NEW_AND_OLD_IMAGES");
    if has_new {
        change.insert("NewImage".into(), new_image);
    }
    if has_old {
        change.insert("OldImage".into(), old_image);
    }
    record["eventName"] = json!(name);
    if let Some(identity) = identity {
        record["userIdentity"] = identity;
    }
    LambdaEvent::new(
        serde_json::from_value(value).unwrap(),
        built.context.clone(),
    )
}

/// Runs a `json` handler of plain JSON over `event`, with a dead-letter queue: what it decoded
/// and was told, what the response names, and what was dead-lettered.
async fn run(event: &LambdaEvent<Event>) -> (Vec<(Value, Option<Change>)>, usize, usize) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let handler = json(move |item: Value, ctx: RecordContext| {
        s.lock().unwrap().push((item, ctx.change));
        async { Ok::<_, std::convert::Infallible>(()) }
    });
    let sqs = InMemorySqs::new();
    let report = BatchProcessor::new()
        .with_dead_letter(DeadLetter::in_memory(&sqs, "dlq"))
        .process(event, &handler)
        .await
        .unwrap();
    let failed = report.response().batch_item_failures.len();
    let seen = seen.lock().unwrap().clone();
    (seen, failed, sqs.dead_letters().len())
}

#[tokio::test]
async fn every_view_type_and_event_decodes_the_new_image_or_the_keys_and_tells_the_change() {
    for view in VIEWS {
        for name in EVENTS {
            let (seen, failed, dead) = run(&event(view, name, None)).await;
            let case = format!("{view} {name}");
            assert_eq!((failed, dead), (0, 0), "{case}: neither failed nor poison");
            let has_new = name != "REMOVE" && matches!(view, "NEW_IMAGE" | "NEW_AND_OLD_IMAGES");
            let expected = if has_new {
                json!({"pk": "o-1", "total": 5})
            } else {
                // Never the old image: a delete is not the item.
                json!({"pk": "o-1"})
            };
            let change = match name {
                "INSERT" => Change::Insert,
                "MODIFY" => Change::Modify,
                _ => Change::Remove { expired: false },
            };
            assert_eq!(seen, [(expected, Some(change))], "{case}");
        }
    }
}

#[tokio::test]
async fn a_time_to_live_expiry_is_a_remove_by_dynamodb_itself() {
    let ttl = json!({"type": "Service", "principalId": "dynamodb.amazonaws.com"});
    let (seen, _, _) = run(&event("NEW_AND_OLD_IMAGES", "REMOVE", Some(ttl))).await;
    assert_eq!(seen[0].1, Some(Change::Remove { expired: true }));
    let other = json!({"type": "Service", "principalId": "backup.amazonaws.com"});
    let (seen, _, _) = run(&event("NEW_AND_OLD_IMAGES", "REMOVE", Some(other))).await;
    assert_eq!(seen[0].1, Some(Change::Remove { expired: false }));
}

#[tokio::test]
async fn a_record_without_an_image_gets_its_keys_and_is_never_poison() {
    for (view, name) in [
        ("NEW_IMAGE", "REMOVE"),
        ("KEYS_ONLY", "INSERT"),
        ("KEYS_ONLY", "MODIFY"),
        ("KEYS_ONLY", "REMOVE"),
    ] {
        let (seen, failed, dead) = run(&event(view, name, None)).await;
        assert_eq!(
            (seen.len(), failed, dead),
            (1, 0, 0),
            "{view} {name}: handled, not failed, not dead-lettered"
        );
        assert_eq!(seen[0].0, json!({"pk": "o-1"}), "{view} {name}");
    }
}

#[tokio::test]
async fn sqs_kinesis_and_kafka_records_tell_no_change() {
    let events = StreamEventBuilder::new().record("k", json!({"total": 1}));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let handler = json(move |_: Value, ctx: RecordContext| {
        s.lock().unwrap().push(ctx.change);
        async { Ok::<_, std::convert::Infallible>(()) }
    });
    let processor = BatchProcessor::new();
    processor
        .process(&events.kinesis(), &handler)
        .await
        .unwrap();
    processor.process(&events.kafka(), &handler).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), [None, None]);
}
