//! The FIFO consumer on its sample event, against the local DynamoDB (README.md, "Test it").

mod local;

use fifo_consumer::{App, Config};
use local::{create_table, failed_ids, number, sdk_config, sqs_event};

const EVENT: &str = include_str!("../events/transactions.json");

struct Fixture {
    app: App,
    dynamodb: aws_sdk_dynamodb::Client,
    balances_table: String,
}

async fn fixture() -> Fixture {
    let sdk = sdk_config().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let config = Config {
        idempotency_table: create_table(&dynamodb, "idempotency", "id").await,
        balances_table: create_table(&dynamodb, "balances", "accountId").await,
    };
    let balances_table = config.balances_table.clone();
    let app = App::new(&sdk, config);
    Fixture {
        app,
        dynamodb,
        balances_table,
    }
}

async fn balance(f: &Fixture, account: &str) -> Option<i64> {
    let key = ("accountId", account);
    number(&f.dynamodb, &f.balances_table, key, "balanceCents").await
}

#[tokio::test]
async fn a_duplicate_delivery_applies_each_transaction_once() {
    let f = fixture().await;

    let first = f.app.handle(sqs_event(EVENT)).await.unwrap();
    assert_eq!(failed_ids(&first), Vec::<&str>::new());
    assert_eq!(balance(&f, "acct-42").await, Some(7500));
    assert_eq!(balance(&f, "acct-7").await, Some(500));

    let again = f.app.handle(sqs_event(EVENT)).await.unwrap();
    assert_eq!(failed_ids(&again), Vec::<&str>::new());
    assert_eq!(balance(&f, "acct-42").await, Some(7500), "applied twice");
    assert_eq!(balance(&f, "acct-7").await, Some(500), "applied twice");
}

#[tokio::test]
async fn a_resend_as_a_new_message_is_caught_by_the_key_from_the_body() {
    let f = fixture().await;
    f.app.handle(sqs_event(EVENT)).await.unwrap();

    // The producer sends transaction tx-001 again: a new message, with a new message id.
    let mut resend = sqs_event(EVENT);
    resend.payload.records.truncate(1);
    resend.payload.records[0].message_id = Some("a-new-message-id".into());
    let response = f.app.handle(resend).await.unwrap();

    assert_eq!(failed_ids(&response), Vec::<&str>::new());
    assert_eq!(
        balance(&f, "acct-42").await,
        Some(7500),
        "tx-001 applied twice"
    );
}

#[tokio::test]
async fn a_failed_withdrawal_holds_only_the_rest_of_its_group() {
    let f = fixture().await;
    // acct-42's withdrawal now comes before its deposit: the balance cannot cover it.
    let mut event = sqs_event(EVENT);
    let records = &mut event.payload.records;
    let (first, second) = (records[0].body.take(), records[1].body.take());
    (records[0].body, records[1].body) = (second, first);
    let ids: Vec<String> = records
        .iter()
        .map(|r| r.message_id.clone().unwrap())
        .collect();

    let response = f.app.handle(event).await.unwrap();

    // The withdrawal failed and the deposit behind it did not run: both come back, in order.
    assert_eq!(failed_ids(&response), [ids[0].as_str(), ids[1].as_str()]);
    assert_eq!(balance(&f, "acct-42").await, None, "the held deposit ran");
    // The other account's group went on.
    assert_eq!(balance(&f, "acct-7").await, Some(500));
}
