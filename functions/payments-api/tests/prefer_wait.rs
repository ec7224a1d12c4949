//! `Prefer: wait=N` (RFC 7240) on both routes, over a mocked DynamoDB and tokio's paused clock
//! (a wait's sleeps pass at once): the preference is found among others and in any case, an
//! invalid value is ignored, the wait is capped at 20 s and by the deadline, the answer comes at
//! the first final state, `Preference-Applied` is there only with a valid preference, and a POST
//! waits after its key's record is completed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::operation::get_item::{GetItemError, GetItemOutput};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsOutput;
use aws_sdk_dynamodb::operation::update_item::UpdateItemOutput;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::types::error::ResourceNotFoundException;
use aws_smithy_mocks::{Rule, mock};
use common::{app, request};
use lambda_http::http::HeaderValue;
use lambda_http::{Body, Context, Request, RequestExt, Response};
use lambda_idempotency::time::{Clock, SystemClock};
use serde_json::Value;

mod common;

const PAYMENT: &str = r#"{"amountCents":100,"currency":"EUR"}"#;

/// A GetItem of the payments table answering the payment `pay_1` with each status in turn (the
/// last repeated).
fn payment_reads(statuses: &[&'static str]) -> Rule {
    let statuses = statuses.to_vec();
    let calls = Mutex::new(0_usize);
    mock!(aws_sdk_dynamodb::Client::get_item)
        .match_requests(|r| r.table_name() == Some("payments"))
        .then_compute_output(move |r| {
            let mut calls = calls.lock().unwrap();
            let status = statuses[(*calls).min(statuses.len() - 1)];
            *calls += 1;
            let id = r.key().unwrap()["paymentId"].as_s().unwrap().clone();
            GetItemOutput::builder()
                .set_item(Some(item(&id, status)))
                .build()
        })
}

fn item(id: &str, status: &str) -> HashMap<String, AttributeValue> {
    let s = |v: &str| AttributeValue::S(v.to_owned());
    HashMap::from([
        ("paymentId".to_owned(), s(id)),
        ("accountId".to_owned(), s("acct-1")),
        ("amountCents".to_owned(), AttributeValue::N("100".into())),
        ("currency".to_owned(), s("EUR")),
        ("status".to_owned(), s(status)),
        (
            "createdAt".to_owned(),
            AttributeValue::N("1700000000000".into()),
        ),
    ])
}

fn with_prefer(mut request: Request, values: &[&str]) -> Request {
    for v in values {
        request
            .headers_mut()
            .append("prefer", HeaderValue::from_str(v).unwrap());
    }
    request
}

fn applied(response: &Response<Body>) -> Option<&str> {
    response
        .headers()
        .get("preference-applied")
        .map(|v| v.to_str().unwrap())
}

fn body(response: &Response<Body>) -> Value {
    serde_json::from_slice(response.body()).unwrap()
}

/// `GET /payments/pay_1` with these `Prefer` values over reads answering `statuses`: the
/// response and how many reads it took.
async fn get(prefer: &[&str], statuses: &[&'static str]) -> (Response<Body>, usize) {
    get_request(
        with_prefer(request("GET", "/payments/pay_1", ""), prefer),
        statuses,
    )
    .await
}

async fn get_request(request: Request, statuses: &[&'static str]) -> (Response<Body>, usize) {
    let reads = payment_reads(statuses);
    let response = app(&[&reads]).handle(request).await.unwrap();
    assert_eq!(response.status(), 200);
    (response, reads.num_calls())
}

#[tokio::test(start_paused = true)]
async fn a_charged_payment_is_answered_at_once_with_the_wait_applied() {
    let (plain, _) = get(&[], &["charged"]).await;
    let (waited, reads) = get(&["respond-async, WAIT=5;foo=bar"], &["charged"]).await;
    assert_eq!(reads, 1);
    assert_eq!(applied(&waited), Some("wait=5"));
    assert_eq!(applied(&plain), None);
    assert_eq!(body(&waited)["status"], "charged");
    assert_eq!(waited.body(), plain.body(), "the same representation");
}

#[tokio::test(start_paused = true)]
async fn the_answer_comes_at_the_first_final_state() {
    let (response, reads) = get(&["wait=10"], &["accepted", "accepted", "failed"]).await;
    assert_eq!(reads, 3);
    assert_eq!(body(&response)["status"], "failed");
    assert_eq!(applied(&response), Some("wait=10"));
}

#[tokio::test(start_paused = true)]
async fn a_wait_is_capped_at_20_seconds_and_reads_24_times() {
    let (response, reads) = get(&["handling=lenient", "wait=600"], &["accepted"]).await;
    assert_eq!(applied(&response), Some("wait=20"));
    assert_eq!(body(&response)["status"], "accepted");
    assert_eq!(
        reads, 24,
        "the count docs/pipeline.md gives for a full wait"
    );
}

#[tokio::test(start_paused = true)]
async fn a_wait_ends_a_second_before_the_deadline() {
    let mut context = Context::default();
    context.deadline = u64::try_from(SystemClock.now_ms() + 5_500).unwrap();
    let request = with_prefer(request("GET", "/payments/pay_1", ""), &["wait=20"])
        .with_lambda_context(context);
    let (response, _) = get_request(request, &["accepted"]).await;
    assert_eq!(applied(&response), Some("wait=4"));
}

#[tokio::test(start_paused = true)]
async fn an_invalid_wait_is_ignored() {
    for prefer in ["wait=soon", "wait=-1", "wait=2.5", "wait", "return=minimal"] {
        let (response, reads) = get(&[prefer], &["accepted", "charged"]).await;
        assert_eq!(reads, 1, "{prefer}: no wait");
        assert_eq!(applied(&response), None, "{prefer}");
        assert_eq!(body(&response)["status"], "accepted");
    }
}

#[tokio::test(start_paused = true)]
async fn a_read_that_fails_while_waiting_ends_the_wait_with_the_last_state() {
    let reads = mock!(aws_sdk_dynamodb::Client::get_item)
        .sequence()
        .output(|| {
            GetItemOutput::builder()
                .set_item(Some(item("pay_1", "accepted")))
                .build()
        })
        .error(|| {
            GetItemError::ResourceNotFoundException(ResourceNotFoundException::builder().build())
        })
        .output(|| {
            GetItemOutput::builder()
                .set_item(Some(item("pay_1", "charged")))
                .build()
        })
        .repeatedly()
        .build();
    let request = with_prefer(request("GET", "/payments/pay_1", ""), &["wait=10"]);
    let response = app(&[&reads]).handle(request).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        body(&response)["status"],
        "accepted",
        "the state before the failed read"
    );
    assert_eq!(applied(&response), Some("wait=10"));
    assert_eq!(reads.num_calls(), 2, "no read after the failed one");
}

#[tokio::test(start_paused = true)]
async fn another_accounts_payment_is_a_404_without_a_wait() {
    let reads = mock!(aws_sdk_dynamodb::Client::get_item).then_output(|| {
        let mut theirs = item("pay_1", "accepted");
        theirs.insert("accountId".into(), AttributeValue::S("acct-2".into()));
        GetItemOutput::builder().set_item(Some(theirs)).build()
    });
    let request = with_prefer(request("GET", "/payments/pay_1", ""), &["wait=10"]);
    let response = app(&[&reads]).handle(request).await.unwrap();
    assert_eq!(response.status(), 404);
    assert_eq!(applied(&response), None);
    assert_eq!(reads.num_calls(), 1);
}

/// The mocked calls of a POST, in order: `update_item` (the key's record: taken, completed),
/// `read account`, `transact`, `read payment`.
#[derive(Clone, Default)]
struct Calls(Arc<Mutex<Vec<&'static str>>>);

impl Calls {
    fn push(&self, call: &'static str) {
        self.0.lock().unwrap().push(call);
    }

    fn all(&self) -> Vec<&'static str> {
        self.0.lock().unwrap().clone()
    }
}

/// `POST /payments` (a first request) with these `Prefer` values, over payment reads answering
/// `statuses`: the response and the calls made.
async fn post(prefer: &[&str], statuses: &[&'static str]) -> (Response<Body>, Vec<&'static str>) {
    let calls = Calls::default();
    let c = calls.clone();
    let record = mock!(aws_sdk_dynamodb::Client::update_item).then_compute_output(move |r| {
        let stored = r
            .expression_attribute_values()
            .and_then(|v| {
                v.values()
                    .find_map(|v| v.as_s().ok().filter(|s| s.contains("\"body\"")))
            })
            .cloned();
        c.push(
            if stored.is_some_and(|s| s.contains(r#"\"status\":\"accepted\""#)) {
                "complete with the creation answer"
            } else {
                "update_item"
            },
        );
        UpdateItemOutput::builder().build()
    });
    let c = calls.clone();
    let account = mock!(aws_sdk_dynamodb::Client::update_item)
        .match_requests(|r| r.table_name() == Some("payments-accounts"))
        .then_compute_output(move |_| {
            c.push("take a number");
            UpdateItemOutput::builder()
                .attributes(payments_model::order::NEXT, AttributeValue::N("1".into()))
                .build()
        });
    let c = calls.clone();
    let write =
        mock!(aws_sdk_dynamodb::Client::transact_write_items).then_compute_output(move |_| {
            c.push("transact");
            TransactWriteItemsOutput::builder().build()
        });
    // Before its write, the payment is not there (the first request checks).
    let c = calls.clone();
    let absent = mock!(aws_sdk_dynamodb::Client::get_item)
        .match_requests(move |r| {
            r.table_name() == Some("payments") && !c.all().contains(&"transact")
        })
        .then_output(|| GetItemOutput::builder().build());
    let reads = payment_reads(statuses);
    let response = app(&[&account, &record, &write, &absent, &reads])
        .handle(with_prefer(request("POST", "/payments", PAYMENT), prefer))
        .await
        .unwrap();
    let mut all = calls.all();
    all.extend(std::iter::repeat_n("read payment", reads.num_calls()));
    (response, all)
}

#[tokio::test(start_paused = true)]
async fn a_post_waits_after_its_key_is_completed_and_answers_the_outcome() {
    let (response, calls) = post(&["wait=5"], &["accepted", "charged"]).await;
    assert_eq!(response.status(), 201);
    assert_eq!(applied(&response), Some("wait=5"));
    assert!(response.headers().contains_key("location"));
    assert!(!response.headers().contains_key("idempotent-replayed"));
    let created = body(&response);
    assert_eq!(created["status"], "charged");
    assert!(created["paymentId"].as_str().unwrap().starts_with("pay_"));
    // The record is completed with the creation's answer (`accepted`) before the first read.
    assert_eq!(
        calls,
        [
            "update_item",
            "take a number",
            "transact",
            "complete with the creation answer",
            "read payment",
            "read payment",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_post_that_waits_in_vain_answers_the_creation_body() {
    let (plain, calls) = post(&[], &["charged"]).await;
    assert_eq!(applied(&plain), None);
    assert!(!calls.contains(&"read payment"), "no wait, no read");
    let (waited, calls) = post(&["wait=1"], &["accepted"]).await;
    assert_eq!(applied(&waited), Some("wait=1"));
    assert_eq!(waited.body(), plain.body(), "byte for byte");
    assert_eq!(body(&waited)["status"], "accepted");
    assert_eq!(calls.iter().filter(|c| **c == "read payment").count(), 4);
}
