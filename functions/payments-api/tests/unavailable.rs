//! When DynamoDB fails, the API answers `503` with a problem+json body that names what is
//! unavailable and never carries the SDK's error text; a POST stays retryable with its key. Each
//! `503` is counted as the outcome `unavailable`, the metric its alarm watches (a `503` is a
//! successful invocation to Lambda, so the function's `Errors` never sees it).

use aws_sdk_dynamodb::operation::get_item::GetItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::{UpdateItemError, UpdateItemOutput};
use aws_sdk_dynamodb::types::error::InternalServerError;
use aws_smithy_mocks::mock;
use common::{app, request};
use lambda_http::Request;
use payments_api::{App, Outcome};

mod common;

/// Text only the SDK's error carries.
const SDK_TEXT: &str = "InternalServerError: the disk under partition 7 caught fire";

fn internal() -> InternalServerError {
    InternalServerError::builder().message(SDK_TEXT).build()
}

const PAYMENT: &str = r#"{"amountCents":100,"currency":"EUR"}"#;

/// The answer's status and problem body; checks the problem's shape, that no SDK text leaked,
/// and that the answer is counted `unavailable`.
async fn answer(app: &App, request: Request) -> (u16, serde_json::Value) {
    let (outcome, response) = app.respond(&request).await;
    assert_eq!(outcome, Outcome::Unavailable);
    assert_eq!(outcome.metric(), "unavailable");
    let status = response.status().as_u16();
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let text = String::from_utf8(response.body().to_vec()).unwrap();
    assert!(
        !text.contains("fire") && !text.contains("InternalServerError"),
        "the SDK's error text leaked: {text}"
    );
    (status, serde_json::from_str(&text).unwrap())
}

#[tokio::test]
async fn the_idempotency_store_down_is_a_503_without_sdk_text() {
    let store = mock!(aws_sdk_dynamodb::Client::update_item)
        .then_error(|| UpdateItemError::InternalServerError(internal()));
    let app = app(&[&store]);
    let (status, problem) = answer(&app, request("POST", "/payments", PAYMENT)).await;
    assert_eq!(status, 503);
    assert_eq!(problem["status"], 503);
    assert_eq!(problem["detail"], "the idempotency store is unavailable");
    assert!(store.num_calls() >= 1);
}

#[tokio::test]
async fn the_payments_table_down_is_a_503_and_the_key_stays_retryable() {
    // The key is taken (UpdateItem succeeds), the account's next number taken (an UpdateItem of
    // the accounts table), the payment's write fails: the key's record is marked failed (a
    // second UpdateItem of the idempotency table), so a retry with the same key runs again.
    let account = common::account_numbers();
    let store = mock!(aws_sdk_dynamodb::Client::update_item)
        .then_output(|| UpdateItemOutput::builder().build());
    let payments = mock!(aws_sdk_dynamodb::Client::transact_write_items)
        .then_error(|| TransactWriteItemsError::InternalServerError(internal()));
    // No payment under the key yet.
    let absent = mock!(aws_sdk_dynamodb::Client::get_item)
        .then_output(|| aws_sdk_dynamodb::operation::get_item::GetItemOutput::builder().build());
    let app = app(&[&account, &store, &payments, &absent]);
    let (status, problem) = answer(&app, request("POST", "/payments", PAYMENT)).await;
    assert_eq!(status, 503);
    assert_eq!(problem["detail"], "the payments table is unavailable");
    assert_eq!(account.num_calls(), 1, "one number taken");
    assert!(payments.num_calls() >= 1);
    assert!(
        store.num_calls() >= 2,
        "the key was taken, then released for a retry ({} UpdateItem calls)",
        store.num_calls()
    );
}

#[tokio::test]
async fn a_read_with_the_table_down_is_a_503_without_sdk_text() {
    let read = mock!(aws_sdk_dynamodb::Client::get_item)
        .then_error(|| GetItemError::InternalServerError(internal()));
    let app = app(&[&read]);
    let (status, problem) = answer(&app, request("GET", "/payments/pay_1", "")).await;
    assert_eq!(status, 503);
    assert_eq!(problem["detail"], "the payments table is unavailable");
}
