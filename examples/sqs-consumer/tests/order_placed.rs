//! The consumer on its sample event, against the local DynamoDB (README.md, "Test it").

mod local;

use local::{create_table, failed_ids, number, sdk_config, sqs_event};
use sqs_consumer::{App, Config};

const EVENT: &str = include_str!("../events/order-placed.json");

struct Fixture {
    app: App,
    dynamodb: aws_sdk_dynamodb::Client,
    points_table: String,
}

async fn fixture() -> Fixture {
    let sdk = sdk_config().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let config = Config {
        idempotency_table: create_table(&dynamodb, "idempotency", "id").await,
        points_table: create_table(&dynamodb, "points", "customerId").await,
    };
    let points_table = config.points_table.clone();
    let app = App::new(&sdk, config);
    Fixture {
        app,
        dynamodb,
        points_table,
    }
}

async fn points(f: &Fixture, customer: &str) -> Option<i64> {
    number(
        &f.dynamodb,
        &f.points_table,
        ("customerId", customer),
        "points",
    )
    .await
}

#[tokio::test]
async fn a_duplicate_delivery_awards_the_points_once() {
    let f = fixture().await;

    let first = f.app.handle(sqs_event(EVENT)).await.unwrap();
    assert_eq!(failed_ids(&first), Vec::<&str>::new());
    assert_eq!(points(&f, "cust-7").await, Some(45));
    assert_eq!(points(&f, "cust-9").await, Some(12));

    // SQS delivers the same batch again (a visibility timeout ran out, say).
    let again = f.app.handle(sqs_event(EVENT)).await.unwrap();
    assert_eq!(failed_ids(&again), Vec::<&str>::new());
    assert_eq!(points(&f, "cust-7").await, Some(45), "awarded twice");
    assert_eq!(points(&f, "cust-9").await, Some(12), "awarded twice");
}

#[tokio::test]
async fn a_malformed_body_fails_only_its_own_record() {
    let f = fixture().await;
    let mut event = sqs_event(EVENT);
    event.payload.records[1].body = Some("{\"orderId\": \"order-1002\"".into());
    let bad_id = event.payload.records[1].message_id.clone().unwrap();

    let response = f.app.handle(event).await.unwrap();

    let failed = failed_ids(&response);
    assert_eq!(
        failed,
        [bad_id.as_str()],
        "only the malformed record goes back"
    );
    assert_eq!(points(&f, "cust-7").await, Some(45));
    assert_eq!(points(&f, "cust-9").await, None);
}
