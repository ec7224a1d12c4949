//! The fault exploration of payments-reader (`GET /payments/{paymentId}`, payments-api's binary
//! with the reader's settings and timeout in the template): its handler, in process, over every
//! request its DynamoDB client makes and every fault of the injector, with the client of
//! [`api`](super::api), which sends a read again after a `5xx`, a `409`, a `429` or no answer
//! (and fails the case when such an answer is not `application/problem+json`).
//!
//! Each case reads, as the user of a new account `X` whose first payment is charged and second
//! accepted (and of an account `Y` with one accepted payment): `X`'s charged payment, its
//! accepted one, `Y`'s payment (another account's: a `404`, as if it did not exist), a payment
//! id nothing has, and the charged payment again with `Prefer: wait=5` (final already: answered
//! at once, with `Preference-Applied: wait=5`); one fault armed at request `n` of the function's
//! DynamoDB client. Each final answer must be the right one: a `200` with the payment's own
//! account, amount, currency and status, or a `404` (problem+json) for the two that are not the
//! caller's to see; never a `404` for a payment that exists, never another payment's data.
//!
//! Not covered: a wait on a payment that is not final yet (its reads run on the system's time,
//! a second and more per case; `tests/tests/http_api.rs` and payments-api's `prefer_wait.rs` test
//! it without faults), and the cold-start check of the idempotency table that `main` runs before
//! the handler (payments-api's exploration leaves it out too).

use std::time::Instant;

use lambda_http::{Body, Response};
use lambda_idempotency::test_util::fault::Fault;
use payments_model::PaymentRequested;

use crate::api::Api;
use crate::{FAULTS, Harness, Order, summarize};

/// What a read must answer.
#[derive(Debug, Clone, Copy)]
enum Expected {
    /// `200` with the payment, in this status.
    Payment(&'static str),
    /// `404`.
    NotFound,
}

/// One read of a case: as the user of `account`, `GET /payments/{id}` with `prefer`.
struct Read<'a> {
    label: &'static str,
    account: &'a str,
    id: &'a str,
    prefer: Option<&'static str>,
    payment: Option<&'a PaymentRequested>,
    expected: Expected,
}

/// What is wrong with `response`, the final answer to `read`.
fn wrong(read: &Read, response: &Response<Body>) -> Option<String> {
    let status = response.status().as_u16();
    let text = String::from_utf8_lossy(response.body());
    let kind = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok());
    let wrong = match read.expected {
        Expected::NotFound => {
            (status != 404 || kind != Some("application/problem+json")).then_some("a 404 problem")
        }
        Expected::Payment(expected) => {
            let body: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            let p = read.payment.expect("a payment to show");
            let right = status == 200
                && kind == Some("application/json")
                && body["paymentId"] == p.payment_id.as_str()
                && body["accountId"] == p.account_id.as_str()
                && body["amountCents"] == p.amount_cents
                && body["currency"] == p.currency.as_str()
                && body["status"] == expected;
            let applied = response
                .headers()
                .get("preference-applied")
                .and_then(|v| v.to_str().ok());
            let wait_right = match read.prefer {
                Some(_) => applied == Some("wait=5"),
                None => applied.is_none(),
            };
            (!(right && wait_right)).then_some("the payment")
        }
    }?;
    Some(format!(
        "{}: answered {status} ({kind:?}, {:?}) {text}, not {wrong} {:?}",
        read.label,
        response.headers().get("preference-applied"),
        read.expected
    ))
}

/// A case: `reads`, one after another, `fault` armed at the request it names of the DynamoDB
/// client (none: a clean run). What went wrong, and the requests sent.
async fn case(
    api: &Api<'_>,
    reads: &[Read<'_>],
    fault: Option<(u32, Fault)>,
) -> (Vec<String>, u32) {
    let harness = api.harness();
    harness.disarm();
    if let Some((n, fault)) = fault {
        harness.dynamodb_faults.arm(n, fault);
    }
    let mut problems = Vec::new();
    let mut sent = 0;
    for read in reads {
        let path = format!("/payments/{}", read.id);
        let headers: Vec<(&str, &str)> = read.prefer.map(|p| ("prefer", p)).into_iter().collect();
        let request = || api.request("GET", &path, read.account, &headers, "");
        match api.until_final(request, &mut sent).await {
            Ok(response) => problems.extend(wrong(read, &response)),
            Err(why) => problems.push(format!("{}: {why}", read.label)),
        }
    }
    let faults = &harness.dynamodb_faults;
    if fault.is_some() && !faults.fired() {
        problems.push("the fault never fired".to_owned());
    }
    if !problems.is_empty() {
        problems.push(format!("{sent} reads sent; dynamodb: {}", faults.runs()));
    }
    let requests = faults.sent();
    harness.disarm();
    (problems, requests)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_exploration_payments_reader() {
    let started = Instant::now();
    let harness = Harness::new().await;
    let api = Api::new(&harness, "payments-reader");
    let accounts = crate::accepted(&harness.stack, 2, 2).await;
    let (x, y) = (&accounts[0], &accounts[1]);
    // X's first payment charged by payment-processor, without faults.
    let charging = harness
        .case(Order::Accepted, None, vec![x[0].clone()])
        .await;
    assert!(charging.problems.is_empty(), "{:?}", charging.problems);
    let missing = format!("pay_{}", uuid::Uuid::new_v4().simple());
    let caller = x[0].account_id.as_str();
    let read = |label, id, prefer, payment, expected| Read {
        label,
        account: caller,
        id,
        prefer,
        payment,
        expected,
    };
    let reads = [
        read(
            "the charged payment",
            x[0].payment_id.as_str(),
            None,
            Some(&x[0]),
            Expected::Payment("charged"),
        ),
        read(
            "the accepted payment",
            x[1].payment_id.as_str(),
            None,
            Some(&x[1]),
            Expected::Payment("accepted"),
        ),
        read(
            "another account's payment",
            y[0].payment_id.as_str(),
            None,
            None,
            Expected::NotFound,
        ),
        read(
            "a payment nothing has",
            missing.as_str(),
            None,
            None,
            Expected::NotFound,
        ),
        read(
            "the charged payment with Prefer: wait=5",
            x[0].payment_id.as_str(),
            Some("wait=5"),
            Some(&x[0]),
            Expected::Payment("charged"),
        ),
    ];
    let (clean, requests) = case(&api, &reads, None).await;
    let mut failures = Vec::new();
    if !clean.is_empty() {
        failures.push(format!("clean run: {}", clean.join("; ")));
    }
    let mut cases = 1;
    for n in 1..=requests {
        for fault in FAULTS {
            cases += 1;
            let (problems, _) = case(&api, &reads, Some((n, fault))).await;
            if !problems.is_empty() {
                failures.push(format!(
                    "DynamoDb request {n} {}: {}",
                    fault.label(),
                    problems.join("; ")
                ));
            }
        }
    }
    summarize(
        &format!(
            "payments-reader: in a clean run of {} reads, {requests} DynamoDB requests",
            reads.len()
        ),
        cases,
        started,
        &failures,
    );
}
