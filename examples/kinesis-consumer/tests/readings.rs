//! The consumer on its sample event, against the local DynamoDB and SQS (README.md, "Test it").

mod local;

use aws_lambda_events::kinesis::KinesisEvent;
use aws_lambda_events::streams::KinesisEventResponse;
use aws_sdk_dynamodb::types::AttributeValue;
use kinesis_consumer::{App, Config};
use lambda_runtime::{Context, LambdaEvent};
use local::{create_queue, create_table, dead_letters, number, sdk_config};

const EVENT: &str = include_str!("../events/meter-readings.json");

struct Fixture {
    app: App,
    dynamodb: aws_sdk_dynamodb::Client,
    sqs: aws_sdk_sqs::Client,
    meters_table: String,
    dead_letter_queue_url: String,
}

async fn fixture() -> Fixture {
    let sdk = sdk_config().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let config = Config {
        idempotency_table: create_table(&dynamodb, "idempotency", "id").await,
        meters_table: create_table(&dynamodb, "meters", "meterId").await,
        dead_letter_queue_url: create_queue(&sqs, "readings-dlq").await,
        max_attempts: 5,
    };
    Fixture {
        meters_table: config.meters_table.clone(),
        dead_letter_queue_url: config.dead_letter_queue_url.clone(),
        app: App::new(&sdk, config),
        dynamodb,
        sqs,
    }
}

fn sample() -> KinesisEvent {
    serde_json::from_str(EVENT).expect("a Kinesis event")
}

/// The sample event, from its record `from` on: what Lambda delivers again from a checkpoint.
fn event_from(from: usize) -> LambdaEvent<KinesisEvent> {
    let mut event = sample();
    event.records.drain(..from);
    LambdaEvent::new(event, Context::default())
}

fn sequence_number(index: usize) -> String {
    sample().records[index].kinesis.sequence_number.clone()
}

fn checkpoints(response: &KinesisEventResponse) -> Vec<String> {
    let failures = response.batch_item_failures.iter();
    failures
        .map(|f| f.item_identifier.clone().unwrap_or_default())
        .collect()
}

async fn watt_hours(f: &Fixture, meter: &str) -> Option<i64> {
    number(
        &f.dynamodb,
        &f.meters_table,
        ("meterId", meter),
        "wattHours",
    )
    .await
}

async fn set_out_of_service(f: &Fixture, meter: &str, out: bool) {
    let update = f
        .dynamodb
        .update_item()
        .table_name(&f.meters_table)
        .key("meterId", AttributeValue::S(meter.to_owned()));
    let update = if out {
        update
            .update_expression("SET outOfService = :yes")
            .expression_attribute_values(":yes", AttributeValue::Bool(true))
    } else {
        update.update_expression("REMOVE outOfService")
    };
    update.send().await.unwrap();
}

#[tokio::test]
async fn a_reading_is_counted_once_however_often_it_is_delivered_or_put() {
    let f = fixture().await;

    let first = f.app.handle(event_from(0)).await.unwrap();
    assert_eq!(checkpoints(&first), Vec::<String>::new());
    assert_eq!(watt_hours(&f, "meter-17").await, Some(1200 + 450));
    assert_eq!(watt_hours(&f, "meter-42").await, Some(300));

    // Lambda delivers the batch again, and the producer put reading r-5001 a second time (its
    // PutRecord's answer was lost): a record with another sequence number, the same reading.
    let mut again = event_from(0);
    let mut resent = again.payload.records[0].clone();
    let sequence = "49657301182264471093528460139178038845774772914709790738";
    resent.kinesis.sequence_number = sequence.into();
    resent.event_id = Some(format!("shardId-000000000000:{sequence}"));
    again.payload.records.push(resent);
    let response = f.app.handle(again).await.unwrap();
    assert_eq!(checkpoints(&response), Vec::<String>::new());
    assert_eq!(
        watt_hours(&f, "meter-17").await,
        Some(1200 + 450),
        "counted twice"
    );
    assert_eq!(watt_hours(&f, "meter-42").await, Some(300), "counted twice");
}

#[tokio::test]
async fn a_failure_is_the_checkpoint_and_the_replay_from_it_redoes_nothing() {
    let f = fixture().await;
    set_out_of_service(&f, "meter-42", true).await;

    // Record 1 (meter-42) fails: the shard's checkpoint. Record 2 is another meter's: it runs.
    let first = f.app.handle(event_from(0)).await.unwrap();
    assert_eq!(checkpoints(&first), [sequence_number(1)]);
    assert_eq!(watt_hours(&f, "meter-17").await, Some(1200 + 450));
    assert_eq!(watt_hours(&f, "meter-42").await, None);

    // Lambda delivers the shard again from the checkpoint: record 2 is a duplicate.
    set_out_of_service(&f, "meter-42", false).await;
    let replay = f.app.handle(event_from(1)).await.unwrap();
    assert_eq!(checkpoints(&replay), Vec::<String>::new());
    assert_eq!(watt_hours(&f, "meter-42").await, Some(300));
    assert_eq!(
        watt_hours(&f, "meter-17").await,
        Some(1200 + 450),
        "counted twice"
    );
}

#[tokio::test]
async fn a_poison_reading_is_dead_lettered_and_the_shard_moves_past_it() {
    let f = fixture().await;
    let mut event = event_from(0);
    let negative = r#"{"readingId":"r-5002","meterId":"meter-42","wattHours":-300}"#;
    event.payload.records[1].kinesis.data.0 = negative.as_bytes().to_vec();

    let response = f.app.handle(event.clone()).await.unwrap();
    assert_eq!(checkpoints(&response), Vec::<String>::new());
    assert_eq!(watt_hours(&f, "meter-17").await, Some(1200 + 450));
    let dead = dead_letters(&f.sqs, &f.dead_letter_queue_url).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].body["shardId"], "shardId-000000000000");
    assert_eq!(dead[0].body["sequenceNumber"], sequence_number(1).as_str());
    assert!(
        dead[0]
            .reason
            .contains("reading r-5002 of meter meter-42 is negative"),
        "{}",
        dead[0].reason
    );

    // A replay of the batch sends nothing again (the copy received above is still in flight, so
    // the queue shows only new messages).
    let replay = f.app.handle(event).await.unwrap();
    assert_eq!(checkpoints(&replay), Vec::<String>::new());
    assert!(
        dead_letters(&f.sqs, &f.dead_letter_queue_url)
            .await
            .is_empty()
    );
    assert_eq!(watt_hours(&f, "meter-17").await, Some(1200 + 450));
}
