//! The transactional consumer on its sample event, against the local DynamoDB (README.md,
//! "Test it").

use aws_sdk_dynamodb::types::AttributeValue;
mod local;

use local::{count, create_table, failed_ids, item, number, sdk_config, sqs_event};
use transactional::{App, Config};

const EVENT: &str = include_str!("../events/reserve-stock.json");

struct Fixture {
    app: App,
    dynamodb: aws_sdk_dynamodb::Client,
    config: Config,
}

/// Tables with `red-mug` and `blue-bowl` in stock.
async fn fixture(red_mugs: i64) -> Fixture {
    let sdk = sdk_config().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let config = Config {
        idempotency_table: create_table(&dynamodb, "idempotency", "id").await,
        inventory_table: create_table(&dynamodb, "inventory", "sku").await,
        reservations_table: create_table(&dynamodb, "reservations", "orderId").await,
    };
    let f = Fixture {
        app: App::new(&sdk, config.clone()),
        dynamodb,
        config,
    };
    stock(&f, "red-mug", red_mugs).await;
    stock(&f, "blue-bowl", 5).await;
    f
}

async fn stock(f: &Fixture, sku: &str, available: i64) {
    f.dynamodb
        .put_item()
        .table_name(&f.config.inventory_table)
        .item("sku", AttributeValue::S(sku.into()))
        .item("available", AttributeValue::N(available.to_string()))
        .send()
        .await
        .unwrap();
}

async fn available(f: &Fixture, sku: &str) -> Option<i64> {
    number(
        &f.dynamodb,
        &f.config.inventory_table,
        ("sku", sku),
        "available",
    )
    .await
}

async fn reserved(f: &Fixture, order: &str) -> bool {
    let key = ("orderId", order);
    item(&f.dynamodb, &f.config.reservations_table, key)
        .await
        .is_some()
}

#[tokio::test]
async fn a_duplicate_delivery_commits_the_reservation_once() {
    let f = fixture(10).await;

    let first = f.app.handle(sqs_event(EVENT)).await.unwrap();
    assert_eq!(failed_ids(&first), Vec::<&str>::new());
    assert_eq!(available(&f, "red-mug").await, Some(8));
    assert_eq!(available(&f, "blue-bowl").await, Some(4));
    assert!(reserved(&f, "order-1001").await && reserved(&f, "order-1002").await);

    let again = f.app.handle(sqs_event(EVENT)).await.unwrap();
    assert_eq!(failed_ids(&again), Vec::<&str>::new());
    assert_eq!(available(&f, "red-mug").await, Some(8), "reserved twice");
    assert_eq!(available(&f, "blue-bowl").await, Some(4), "reserved twice");
    assert_eq!(count(&f.dynamodb, &f.config.reservations_table).await, 2);
}

#[tokio::test]
async fn short_stock_commits_nothing_and_the_redelivery_runs_again() {
    let f = fixture(1).await;
    let event = sqs_event(EVENT);
    let short = event.payload.records[0].message_id.clone().unwrap();

    let response = f.app.handle(event).await.unwrap();

    // The red mug's condition failed: neither its reservation nor its decrement happened.
    assert_eq!(failed_ids(&response), [short.as_str()]);
    assert_eq!(available(&f, "red-mug").await, Some(1));
    assert!(
        !reserved(&f, "order-1001").await,
        "a reservation without stock"
    );
    // The other order committed.
    assert_eq!(available(&f, "blue-bowl").await, Some(4));

    // Stock arrives; SQS delivers the failed message again.
    stock(&f, "red-mug", 10).await;
    let mut redelivery = sqs_event(EVENT);
    redelivery.payload.records.truncate(1);
    let attributes = &mut redelivery.payload.records[0].attributes;
    attributes.insert("ApproximateReceiveCount".into(), "2".into());
    let response = f.app.handle(redelivery).await.unwrap();

    assert_eq!(failed_ids(&response), Vec::<&str>::new());
    assert_eq!(available(&f, "red-mug").await, Some(8));
    assert!(reserved(&f, "order-1001").await);
}
