//! `GET /payments/{paymentId}` gives, besides the payment and its status, why it failed and when
//! each state change happened, read from the payment item; what the item does not have is `null`.

use std::collections::HashMap;

use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_smithy_mocks::mock;
use common::{app, request};
use serde_json::{Value, json};

mod common;

/// The body of `GET /payments/pay_1` (status 200) when the payments table holds `item` (a later
/// pair overrides an earlier one of the same name).
async fn get(item: &[(&str, AttributeValue)]) -> Value {
    let item: HashMap<String, AttributeValue> = item
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect();
    let read = mock!(aws_sdk_dynamodb::Client::get_item)
        .match_requests(|r| {
            r.table_name() == Some("payments")
                && r.key().and_then(|k| k.get("paymentId")) == Some(&s("pay_1"))
        })
        .then_output(move || {
            GetItemOutput::builder()
                .set_item(Some(item.clone()))
                .build()
        });
    let response = app(&[&read])
        .handle(request("GET", "/payments/pay_1", ""))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(read.num_calls(), 1);
    serde_json::from_slice(response.body()).unwrap()
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// The attributes payments-api writes.
fn accepted() -> Vec<(&'static str, AttributeValue)> {
    vec![
        ("paymentId", s("pay_1")),
        ("accountId", s("acct-1")),
        ("amountCents", n(500)),
        ("currency", s("EUR")),
        ("description", s("coffee")),
        ("status", s("accepted")),
        ("createdAt", n(1_700_000_000_000)),
        ("callerId", s("acct-1")),
        ("requestHash", s("h")),
    ]
}

#[tokio::test]
async fn a_payment_failed_then_reopened_shows_why_and_when() {
    let mut item = accepted();
    item.extend([
        ("sequence", n(7)),
        ("failedAt", n(1_700_000_001_000)),
        (
            "lastError",
            s("invalid payment: amountCents differs from the accepted payment"),
        ),
        ("reopenedAt", n(1_700_000_002_000)),
        ("reopenReason", s("operator: amount corrected")),
    ]);
    assert_eq!(
        get(&item).await,
        json!({
            "paymentId": "pay_1",
            "accountId": "acct-1",
            "amountCents": 500,
            "currency": "EUR",
            "description": "coffee",
            "status": "accepted",
            "failureReason": "invalid payment: amountCents differs from the accepted payment",
            "sequence": 7,
            "timestamps": {
                "accepted": 1_700_000_000_000_i64,
                "charged": null,
                "failed": 1_700_000_001_000_i64,
                "reopened": 1_700_000_002_000_i64,
            },
        })
    );
}

#[tokio::test]
async fn a_charged_payment_shows_when_it_was_accepted_and_charged() {
    let mut item = accepted();
    item.extend([
        ("status", s("charged")),
        ("sequence", n(1)),
        ("chargedAt", n(1_700_000_000_450)),
        ("queuedAt", n(1_700_000_000_200)),
        ("ledgerEntryId", s("entry-1")),
    ]);
    let body = get(&item).await;
    assert_eq!(body["status"], "charged");
    assert_eq!(body["failureReason"], Value::Null);
    assert_eq!(body["sequence"], 1);
    assert_eq!(
        body["timestamps"],
        json!({
            "accepted": 1_700_000_000_000_i64,
            "charged": 1_700_000_000_450_i64,
            "failed": null,
            "reopened": null,
        })
    );
}

#[tokio::test]
async fn what_the_item_does_not_have_is_null() {
    let body = get(&accepted()).await;
    assert_eq!(body["status"], "accepted");
    assert_eq!(body["amountCents"], 500);
    assert_eq!(body["failureReason"], Value::Null);
    assert_eq!(body["sequence"], Value::Null);
    assert_eq!(
        body["timestamps"],
        json!({
            "accepted": 1_700_000_000_000_i64,
            "charged": null,
            "failed": null,
            "reopened": null,
        })
    );
}
