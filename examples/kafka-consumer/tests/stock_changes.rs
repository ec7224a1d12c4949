//! The consumer on its sample event and on AWS's documented sample, against the local DynamoDB
//! and SQS (README.md, "Test it"). There is no local Kafka broker: the events are in the shape
//! the event source mapping delivers.

mod local;

use aws_lambda_events::kafka::KafkaEvent;
use aws_sdk_dynamodb::types::AttributeValue;
use kafka_consumer::{App, Config};
use lambda_idempotency::batch::{KafkaEventResponse, KafkaMessage};
use lambda_runtime::{Context, LambdaEvent};
use local::{create_queue, create_table, dead_letters, number, sdk_config};
use serde_json::json;

const EVENT: &str = include_str!("../events/stock-changes.json");
/// The Amazon MSK event of AWS's Lambda developer guide ("Using Lambda with Amazon MSK",
/// "Example event"), as it is printed there.
const AWS_SAMPLE: &str = include_str!("../events/aws-msk-sample.json");

struct Fixture {
    app: App,
    dynamodb: aws_sdk_dynamodb::Client,
    sqs: aws_sdk_sqs::Client,
    stock_table: String,
    dead_letter_queue_url: String,
}

async fn fixture() -> Fixture {
    let sdk = sdk_config().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let config = Config {
        idempotency_table: create_table(&dynamodb, "idempotency", "id").await,
        stock_table: create_table(&dynamodb, "stock", "sku").await,
        dead_letter_queue_url: create_queue(&sqs, "stock-dlq").await,
        max_attempts: 5,
    };
    Fixture {
        stock_table: config.stock_table.clone(),
        dead_letter_queue_url: config.dead_letter_queue_url.clone(),
        app: App::new(&sdk, config),
        dynamodb,
        sqs,
    }
}

fn event(json: &str) -> LambdaEvent<KafkaEvent> {
    let event = serde_json::from_str(json).expect("a Kafka event");
    LambdaEvent::new(event, Context::default())
}

fn response_json(response: &KafkaEventResponse) -> serde_json::Value {
    serde_json::to_value(response).unwrap()
}

fn no_failures() -> serde_json::Value {
    json!({"batchItemFailures": []})
}

async fn units(f: &Fixture, sku: &str) -> Option<i64> {
    number(&f.dynamodb, &f.stock_table, ("sku", sku), "units").await
}

async fn set_stocktake(f: &Fixture, sku: &str, running: bool) {
    let update = f
        .dynamodb
        .update_item()
        .table_name(&f.stock_table)
        .key("sku", AttributeValue::S(sku.to_owned()));
    let update = if running {
        update
            .update_expression("SET stocktake = :yes")
            .expression_attribute_values(":yes", AttributeValue::Bool(true))
    } else {
        update.update_expression("REMOVE stocktake")
    };
    update.send().await.unwrap();
}

#[tokio::test]
async fn each_change_applies_once_and_a_tombstone_is_read_as_none() {
    let f = fixture().await;

    let first = f.app.handle(event(EVENT)).await.unwrap();
    assert_eq!(response_json(&first), no_failures());
    assert_eq!(units(&f, "sku-1").await, Some(5 - 2));
    assert_eq!(units(&f, "sku-2").await, Some(10));
    // sku-3's record is a tombstone: nothing to apply, and no failure.
    assert_eq!(units(&f, "sku-3").await, None);

    let again = f.app.handle(event(EVENT)).await.unwrap();
    assert_eq!(response_json(&again), no_failures());
    assert_eq!(units(&f, "sku-1").await, Some(5 - 2), "applied twice");
    assert_eq!(units(&f, "sku-2").await, Some(10), "applied twice");
}

#[tokio::test]
async fn each_failed_partition_reports_its_lowest_offset_in_the_shape_aws_documents() {
    let f = fixture().await;
    set_stocktake(&f, "sku-1", true).await;
    set_stocktake(&f, "sku-2", true).await;

    // sku-1's first change (offset 4100) fails, and holds its second (4101, the same key);
    // sku-2's (2730) fails on partition 1; sku-3's tombstone (2731) runs.
    let first = f.app.handle(event(EVENT)).await.unwrap();
    assert_eq!(
        response_json(&first),
        json!({"batchItemFailures": [
            {"itemIdentifier": {"partition": "stock-changes-0", "offset": 4100}},
            {"itemIdentifier": {"partition": "stock-changes-1", "offset": 2730}},
        ]})
    );
    assert_eq!(units(&f, "sku-1").await, None);
    assert_eq!(units(&f, "sku-2").await, None);

    // Lambda delivers both partitions again from their checkpoints: the tombstone is a duplicate.
    set_stocktake(&f, "sku-1", false).await;
    set_stocktake(&f, "sku-2", false).await;
    let replay = f.app.handle(event(EVENT)).await.unwrap();
    assert_eq!(response_json(&replay), no_failures());
    assert_eq!(units(&f, "sku-1").await, Some(5 - 2));
    assert_eq!(units(&f, "sku-2").await, Some(10));
}

#[tokio::test]
async fn a_change_that_can_never_apply_is_dead_lettered_with_its_partition_and_offset() {
    let f = fixture().await;
    let mut e = event(EVENT);
    let records = e.payload.records.get_mut("stock-changes-1").unwrap();
    // {"changeId":"c-3","sku":"sku-2","delta":0}, base64.
    records[0].value = Some("eyJjaGFuZ2VJZCI6ImMtMyIsInNrdSI6InNrdS0yIiwiZGVsdGEiOjB9".into());

    let response = f.app.handle(e).await.unwrap();
    assert_eq!(response_json(&response), no_failures());
    assert_eq!(units(&f, "sku-1").await, Some(5 - 2));
    let dead = dead_letters(&f.sqs, &f.dead_letter_queue_url).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].body["topic"], "stock-changes");
    assert_eq!(dead[0].body["partition"], 1);
    assert_eq!(dead[0].body["offset"], 2730);
    assert!(
        dead[0]
            .reason
            .contains("change c-3 of sku-2 moves no units"),
        "{}",
        dead[0].reason
    );
}

/// The sample's key, `abcDEFghiJKLmnoPQRstuVWXyz1234==`, has non-zero trailing bits: a strict
/// base64 decoder refuses it ("Invalid last symbol 52, offset 29"), where Python's `b64decode`
/// (Powertools) reads it. `KafkaMessage::decode` must read what AWS prints.
#[tokio::test]
async fn aws_documented_sample_event_is_decoded() {
    let sample: KafkaEvent = serde_json::from_str(AWS_SAMPLE).expect("AWS's sample parses");
    let record = &sample.records["mytopic-0"][0];
    let message = KafkaMessage::decode(record).unwrap();
    assert_eq!(
        (message.topic.as_str(), message.partition, message.offset),
        ("mytopic", 0, 15)
    );
    assert_eq!(
        message.value.as_deref(),
        Some(&b"Hello, this is a test."[..])
    );
    assert_eq!(message.header("headerKey"), Some(&b"headerValue"[..]));
    assert!(message.key.is_some());
}

#[tokio::test]
async fn aws_documented_sample_event_is_dead_lettered_as_its_value_is_not_a_stock_change() {
    let f = fixture().await;
    let response = f.app.handle(event(AWS_SAMPLE)).await.unwrap();
    assert_eq!(response_json(&response), no_failures());
    let dead = dead_letters(&f.sqs, &f.dead_letter_queue_url).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].body["topic"], "mytopic");
    assert_eq!(dead[0].body["offset"], 15);
    assert_eq!(
        dead[0].body["record"]["value"],
        "SGVsbG8sIHRoaXMgaXMgYSB0ZXN0Lg=="
    );
}
