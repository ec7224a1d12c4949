//! The account is in every key, over a local DynamoDB (moto: run under
//! `infra/local-aws/local-aws run -- cargo nextest run -p payments-api`; without
//! `AWS_ENDPOINT_URL` the test fails, it never talks to a real account).
//!
//! With `ACCOUNT_CLAIM` another claim than `sub`, one caller may hold tokens for two accounts.
//! The same Idempotency-Key and body (leaving `accountId` out) for both must never replay one
//! account's payment for the other: the request's fingerprint holds the resolved account, so
//! the second is a `422` and nothing is paid for either account but the first's payment. A body
//! naming its own account and one leaving it out are the same request.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use lambda_http::aws_lambda_events::apigw::{
    ApiGatewayRequestAuthorizer, ApiGatewayRequestAuthorizerJwtDescription,
    ApiGatewayV2httpRequestContext,
};
use lambda_http::request::RequestContext;
use lambda_http::{Body, Request, RequestExt, Response};
use payments_api::{App, Config, REPLAYED_HEADER};
use serde_json::Value;

/// A name no other test of this run uses.
fn unique(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{tag}-{}-{nanos:x}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A table keyed by the string `key`.
async fn table(dynamodb: &aws_sdk_dynamodb::Client, tag: &str, key: &str) -> String {
    let name = unique(tag);
    dynamodb
        .create_table()
        .table_name(&name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(key)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(key)
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("CreateTable");
    name
}

/// The app over new tables of the local DynamoDB, the account in the claim `account`; the
/// client, and the names of the payments table and of the idempotency table.
async fn app() -> (App, aws_sdk_dynamodb::Client, String, String) {
    let endpoint = std::env::var("AWS_ENDPOINT_URL").unwrap_or_default();
    assert!(
        endpoint.starts_with("http://127.0.0.1") || endpoint.starts_with("http://localhost"),
        "AWS_ENDPOINT_URL must name a local endpoint, not {endpoint:?}: run the tests under \
         `infra/local-aws/local-aws run -- cargo nextest run -p payments-api`"
    );
    let dynamodb = payments_config::dynamodb(&payments_config::sdk_config().await);
    let payments = table(&dynamodb, "payments", "paymentId").await;
    let idempotency = table(&dynamodb, "idempotency", "id").await;
    let config = Config {
        idempotency_table: idempotency.clone(),
        idempotency_ttl: Duration::from_secs(3600),
        payments_table: payments.clone(),
        accounts_table: table(&dynamodb, "accounts", "accountId").await,
        account_claim: "account".into(),
        max_payment_amount: payments_api::validate::DEFAULT_MAX_PAYMENT_AMOUNT,
        max_wait_seconds: 0,
    };
    (
        App::new(dynamodb.clone(), config),
        dynamodb,
        payments,
        idempotency,
    )
}

/// `POST /payments` of the caller `user-1` with a token for `account`.
fn post(account: &str, key: &str, body: &str) -> Request {
    let mut jwt = ApiGatewayRequestAuthorizerJwtDescription::default();
    jwt.claims = HashMap::from([
        ("sub".to_owned(), "user-1".to_owned()),
        ("account".to_owned(), account.to_owned()),
    ]);
    let mut authorizer = ApiGatewayRequestAuthorizer::default();
    authorizer.jwt = Some(jwt);
    let mut context = ApiGatewayV2httpRequestContext::default();
    context.authorizer = Some(authorizer);
    lambda_http::http::Request::builder()
        .method("POST")
        .uri("https://api.example.com/payments")
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(Body::from(body.to_owned()))
        .unwrap()
        .with_request_context(RequestContext::ApiGatewayV2(context))
}

fn summary(response: &Response<Body>) -> String {
    format!(
        "{} replayed={} {}",
        response.status(),
        response.headers().contains_key(REPLAYED_HEADER),
        String::from_utf8_lossy(response.body())
    )
}

/// Every item of `table`.
async fn items(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Vec<HashMap<String, AttributeValue>> {
    dynamodb
        .scan()
        .table_name(table)
        .send()
        .await
        .expect("Scan")
        .items
        .unwrap_or_default()
}

/// Expires the keys' records (as their TTL would remove them): how many there were.
async fn expire_records(dynamodb: &aws_sdk_dynamodb::Client, idempotency: &str) -> usize {
    let records = items(dynamodb, idempotency).await;
    for record in &records {
        dynamodb
            .delete_item()
            .table_name(idempotency)
            .key("id", record["id"].clone())
            .send()
            .await
            .expect("DeleteItem");
    }
    records.len()
}

/// The accounts of the payments stored.
async fn stored_accounts(dynamodb: &aws_sdk_dynamodb::Client, table: &str) -> Vec<String> {
    let mut accounts: Vec<String> = items(dynamodb, table)
        .await
        .iter()
        .map(|i| i["accountId"].as_s().unwrap().clone())
        .collect();
    accounts.sort();
    accounts
}

#[tokio::test]
async fn one_key_and_body_for_two_accounts_never_replays_one_for_the_other() {
    let (app, dynamodb, payments, _) = app().await;
    let body = r#"{"amountCents":700,"currency":"EUR"}"#;

    let first = app.handle(post("acct-a", "key-1", body)).await.unwrap();
    assert_eq!(first.status(), 201, "{}", summary(&first));
    let second = app.handle(post("acct-b", "key-1", body)).await.unwrap();
    assert_eq!(
        second.status(),
        422,
        "the same key and body for another account: {}",
        summary(&second)
    );
    let problem: Value = serde_json::from_slice(second.body()).unwrap();
    assert_eq!(problem["field"], "Idempotency-Key", "{problem}");
    assert_eq!(stored_accounts(&dynamodb, &payments).await, ["acct-a"]);

    // The first account's retry, leaving its account out or naming it, replays its payment.
    for retry in [
        body,
        r#"{"accountId":"acct-a","amountCents":700,"currency":"EUR"}"#,
    ] {
        let again = app.handle(post("acct-a", "key-1", retry)).await.unwrap();
        assert_eq!(again.status(), 201, "{retry}: {}", summary(&again));
        assert!(again.headers().contains_key(REPLAYED_HEADER), "{retry}");
        assert_eq!(again.body(), first.body(), "{retry}");
    }
    // The second account, naming itself, is refused too: the key is the first account's work.
    let named = r#"{"accountId":"acct-b","amountCents":700,"currency":"EUR"}"#;
    let second = app.handle(post("acct-b", "key-1", named)).await.unwrap();
    assert_eq!(second.status(), 422, "{}", summary(&second));
    assert_eq!(stored_accounts(&dynamodb, &payments).await, ["acct-a"]);

    // Another key pays the second account.
    let other = app.handle(post("acct-b", "key-2", body)).await.unwrap();
    assert_eq!(other.status(), 201, "{}", summary(&other));
    assert!(!other.headers().contains_key(REPLAYED_HEADER));
    assert_eq!(
        stored_accounts(&dynamodb, &payments).await,
        ["acct-a", "acct-b"]
    );
}

/// After the key's record expired, the payment's fingerprint still holds its account: the same
/// key and body for the other account is a `422`, and the first account's retry replays.
#[tokio::test]
async fn after_the_record_expired_the_payment_still_tells_the_accounts_apart() {
    let (app, dynamodb, payments, idempotency) = app().await;
    let body = r#"{"amountCents":300,"currency":"EUR"}"#;
    let first = app.handle(post("acct-a", "key-1", body)).await.unwrap();
    assert_eq!(first.status(), 201, "{}", summary(&first));

    assert_eq!(expire_records(&dynamodb, &idempotency).await, 1);

    let second = app.handle(post("acct-b", "key-1", body)).await.unwrap();
    assert_eq!(
        second.status(),
        422,
        "the same key and body for another account: {}",
        summary(&second)
    );
    assert_eq!(stored_accounts(&dynamodb, &payments).await, ["acct-a"]);
    let again = app.handle(post("acct-a", "key-1", body)).await.unwrap();
    assert_eq!(again.status(), 201, "{}", summary(&again));
    assert!(again.headers().contains_key(REPLAYED_HEADER));
    assert_eq!(again.body(), first.body());
}

/// Replaces, in every item of `table`, a string attribute equal to `from` by `to`.
async fn replace_strings(dynamodb: &aws_sdk_dynamodb::Client, table: &str, from: &str, to: &str) {
    let mut replaced = 0;
    for mut item in items(dynamodb, table).await {
        for value in item.values_mut() {
            if value.as_s().is_ok_and(|s| s == from) {
                *value = AttributeValue::S(to.to_owned());
                replaced += 1;
            }
        }
        dynamodb
            .put_item()
            .table_name(table)
            .set_item(Some(item))
            .send()
            .await
            .expect("PutItem");
    }
    assert_eq!(replaced, 1, "one fingerprint in {table}");
}

/// A payment accepted by a payments-api older than the account rule, from a body leaving its
/// account out, holds the body's fingerprint alone (in the key's record and in the payment): its
/// retry replays it, with the record and after the record expired; another account's is a `422`.
#[tokio::test]
async fn a_payment_fingerprinted_without_its_account_still_replays_for_its_account() {
    let (app, dynamodb, payments, idempotency) = app().await;
    let body = r#"{"amountCents":900,"currency":"EUR"}"#;
    let first = app.handle(post("acct-a", "key-1", body)).await.unwrap();
    assert_eq!(first.status(), 201, "{}", summary(&first));
    // As an older payments-api stored it: the hash of the body alone.
    let with_account = lambda_idempotency::key::canonical_hash(
        &serde_json::json!({"accountId": "acct-a", "amountCents": 900, "currency": "EUR"}),
    );
    let body_alone =
        lambda_idempotency::key::canonical_hash(&serde_json::from_str::<Value>(body).unwrap());
    replace_strings(&dynamodb, &payments, &with_account, &body_alone).await;
    replace_strings(&dynamodb, &idempotency, &with_account, &body_alone).await;

    let other = app.handle(post("acct-b", "key-1", body)).await.unwrap();
    assert_eq!(other.status(), 422, "{}", summary(&other));
    let again = app.handle(post("acct-a", "key-1", body)).await.unwrap();
    assert_eq!(again.status(), 201, "with the record: {}", summary(&again));
    assert!(again.headers().contains_key(REPLAYED_HEADER));
    assert_eq!(again.body(), first.body());

    // The record expires: the payment still tells its request.
    assert_eq!(expire_records(&dynamodb, &idempotency).await, 1);
    let other = app.handle(post("acct-b", "key-1", body)).await.unwrap();
    assert_eq!(other.status(), 422, "{}", summary(&other));
    let again = app.handle(post("acct-a", "key-1", body)).await.unwrap();
    assert_eq!(again.status(), 201, "after the record: {}", summary(&again));
    assert!(again.headers().contains_key(REPLAYED_HEADER));
    assert_eq!(again.body(), first.body());
    assert_eq!(stored_accounts(&dynamodb, &payments).await, ["acct-a"]);
}
