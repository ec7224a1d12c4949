//! The consumer on its sample event, against the local DynamoDB and SQS (README.md, "Test it").

mod local;

use aws_lambda_events::dynamodb::Event;
use aws_lambda_events::streams::DynamoDbEventResponse;
use aws_sdk_dynamodb::types::AttributeValue;
use dynamodb_stream_consumer::{App, Config};
use lambda_runtime::{Context, LambdaEvent};
use local::{create_queue, create_table, dead_letters, number, sdk_config};

const EVENT: &str = include_str!("../events/order-inserted.json");

struct Fixture {
    app: App,
    dynamodb: aws_sdk_dynamodb::Client,
    sqs: aws_sdk_sqs::Client,
    customers_table: String,
    dead_letter_queue_url: String,
}

async fn fixture() -> Fixture {
    let sdk = sdk_config().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let config = Config {
        idempotency_table: create_table(&dynamodb, "idempotency", "id").await,
        customers_table: create_table(&dynamodb, "customers", "customerId").await,
        dead_letter_queue_url: create_queue(&sqs, "orders-dlq").await,
        max_attempts: 5,
    };
    Fixture {
        customers_table: config.customers_table.clone(),
        dead_letter_queue_url: config.dead_letter_queue_url.clone(),
        app: App::new(&sdk, config),
        dynamodb,
        sqs,
    }
}

/// The sample event, from its record `from` on: what Lambda delivers again from a checkpoint.
fn event_from(from: usize) -> LambdaEvent<Event> {
    let mut event: Event = serde_json::from_str(EVENT).expect("a DynamoDB stream event");
    event.records.drain(..from);
    LambdaEvent::new(event, Context::default())
}

fn sequence_number(index: usize) -> String {
    let event: Event = serde_json::from_str(EVENT).unwrap();
    event.records[index].change.sequence_number.clone().unwrap()
}

fn checkpoints(response: &DynamoDbEventResponse) -> Vec<String> {
    let failures = response.batch_item_failures.iter();
    failures
        .map(|f| f.item_identifier.clone().unwrap_or_default())
        .collect()
}

async fn spent(f: &Fixture, customer: &str) -> Option<i64> {
    let key = ("customerId", customer);
    number(&f.dynamodb, &f.customers_table, key, "spentCents").await
}

async fn set_closed(f: &Fixture, customer: &str, closed: bool) {
    let update = f
        .dynamodb
        .update_item()
        .table_name(&f.customers_table)
        .key("customerId", AttributeValue::S(customer.to_owned()));
    let update = if closed {
        update
            .update_expression("SET closed = :yes")
            .expression_attribute_values(":yes", AttributeValue::Bool(true))
    } else {
        update.update_expression("REMOVE closed")
    };
    update.send().await.unwrap();
}

async fn set_order_limit(f: &Fixture, customer: &str, cents: i64) {
    f.dynamodb
        .update_item()
        .table_name(&f.customers_table)
        .key("customerId", AttributeValue::S(customer.to_owned()))
        .update_expression("SET orderLimitCents = :cents")
        .expression_attribute_values(":cents", AttributeValue::N(cents.to_string()))
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_batch_delivered_again_counts_each_order_once() {
    let f = fixture().await;

    let first = f.app.handle(event_from(0)).await.unwrap();
    assert_eq!(checkpoints(&first), Vec::<String>::new());
    assert_eq!(spent(&f, "cust-7").await, Some(4599 + 800));
    assert_eq!(spent(&f, "cust-9").await, Some(1250));

    // Lambda delivers the same records again (the invocation timed out after its work, say).
    let again = f.app.handle(event_from(0)).await.unwrap();
    assert_eq!(checkpoints(&again), Vec::<String>::new());
    assert_eq!(spent(&f, "cust-7").await, Some(4599 + 800), "counted twice");
    assert_eq!(spent(&f, "cust-9").await, Some(1250), "counted twice");
}

#[tokio::test]
async fn a_failure_is_the_checkpoint_and_the_replay_from_it_redoes_nothing() {
    let f = fixture().await;
    set_closed(&f, "cust-9", true).await;

    // Record 1 (cust-9) fails: it is the shard's checkpoint. Record 2 is another customer's, so
    // it runs; a later record of cust-9 would have been held.
    let first = f.app.handle(event_from(0)).await.unwrap();
    assert_eq!(checkpoints(&first), [sequence_number(1)]);
    assert_eq!(spent(&f, "cust-7").await, Some(4599 + 800));
    assert_eq!(spent(&f, "cust-9").await, None);

    // Lambda delivers the shard again from the checkpoint: records 1 and 2. Record 2 ran already:
    // a duplicate, not counted again.
    set_closed(&f, "cust-9", false).await;
    let replay = f.app.handle(event_from(1)).await.unwrap();
    assert_eq!(checkpoints(&replay), Vec::<String>::new());
    assert_eq!(spent(&f, "cust-9").await, Some(1250));
    assert_eq!(spent(&f, "cust-7").await, Some(4599 + 800), "counted twice");
}

#[tokio::test]
async fn a_customers_later_order_waits_behind_its_failed_one() {
    let f = fixture().await;
    set_order_limit(&f, "cust-7", 1000).await;

    // Record 0 (cust-7, 4599 cents) is above the limit: the checkpoint. Record 2, another order of
    // cust-7 (800 cents), would pass, but does not run before record 0: the records run in order
    // per customer, not per order (`ordered_by`).
    let first = f.app.handle(event_from(0)).await.unwrap();
    assert_eq!(checkpoints(&first), [sequence_number(0)]);
    assert_eq!(spent(&f, "cust-7").await, None, "a later order ran first");
    assert_eq!(spent(&f, "cust-9").await, Some(1250));

    // A review raises the limit; Lambda delivers the shard again from the checkpoint.
    set_order_limit(&f, "cust-7", 10_000).await;
    let replay = f.app.handle(event_from(0)).await.unwrap();
    assert_eq!(checkpoints(&replay), Vec::<String>::new());
    assert_eq!(spent(&f, "cust-7").await, Some(4599 + 800));
    assert_eq!(spent(&f, "cust-9").await, Some(1250), "counted twice");
}

#[tokio::test]
async fn a_poison_order_is_dead_lettered_once_and_the_shard_moves_past_it() {
    let f = fixture().await;
    let mut event = event_from(0);
    let image = &mut event.payload.records[1].change.new_image;
    let free: serde_json::Value = serde_json::json!({
        "orderId": {"S": "order-1002"}, "customerId": {"S": "cust-9"}, "totalCents": {"N": "0"}
    });
    *image = serde_json::from_value(free).unwrap();

    let response = f.app.handle(event.clone()).await.unwrap();
    // No checkpoint: the shard moves on.
    assert_eq!(checkpoints(&response), Vec::<String>::new());
    assert_eq!(spent(&f, "cust-7").await, Some(4599 + 800));
    let dead = dead_letters(&f.sqs, &f.dead_letter_queue_url).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].body["sequenceNumber"], sequence_number(1).as_str());
    assert_eq!(dead[0].body["keys"]["orderId"]["S"], "order-1002");
    assert!(
        dead[0]
            .reason
            .contains("order order-1002 has a total of 0 cents"),
        "{}",
        dead[0].reason
    );

    // A replay of the batch (a bisected retry, say) neither counts nor dead-letters anything again.
    let replay = f.app.handle(event).await.unwrap();
    assert_eq!(checkpoints(&replay), Vec::<String>::new());
    assert_eq!(spent(&f, "cust-7").await, Some(4599 + 800));
    assert!(
        dead_letters(&f.sqs, &f.dead_letter_queue_url)
            .await
            .is_empty()
    );
}
