//! The fault exploration of payments-api: the function as deployed (its handler, the template's
//! settings), in process, over every request its DynamoDB client makes and every fault of the
//! injector, with a client that follows the API's docs.
//!
//! Each case is a new account whose client POSTs three payments one after another, each with
//! its own `Idempotency-Key`, then sends each once more (a replay), with one fault armed at
//! request `n` of the function's DynamoDB client. Each request is an invocation in a new
//! execution environment, its deadline the template's timeout on the test's clock; a crash ends
//! it as the death of the invocation would (its future dropped, the client without an answer).
//! The client does what docs/pipeline.md tells one to ("Under load: `429`, `500`, and what a
//! client does"): a `5xx`, a `409`, a `429` or no answer is sent again with the same key and
//! body, after a wait of 100 ms doubling up to 10 s (the longest its jitter could draw), or the
//! `Retry-After` when longer, until a final answer (`201`, `200`); any other answer is one it
//! cannot recover from. Its waits move the test's clock, which times the outages and, through
//! [`payments_api::App::with_clock`], the keys' leases: a crash's lease and a ten-minute outage
//! are waited out without real waits.
//!
//! Each case checks: each key answered with one payment id, the same on every answer; the
//! account holds exactly the answered payments, one per key, `accepted`, each with its body's
//! amount, numbered in the order of their POSTs (a number left without a payment, a gap, is
//! allowed). Once every case ran, payment-processor (without faults, [`Harness::case`]) charges
//! each case's payments from a simulated `payments.fifo`: the queue drains, nothing is
//! dead-lettered (a gap never holds up or fails a later payment), each payment is charged
//! exactly once with its balance, and the invariant checker finds nothing, no failure declared.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use lambda_http::aws_lambda_events::apigw::{
    ApiGatewayRequestAuthorizer, ApiGatewayRequestAuthorizerJwtDescription,
    ApiGatewayV2httpRequestContext,
};
use lambda_http::request::RequestContext;
use lambda_http::{Body, Context, Request, RequestExt, Response};
use lambda_idempotency::test_util::fault::Fault;
use lambda_idempotency::time::Clock;
use payments_e2e::invariants::Scope;
use payments_model::stored::StoredPayment;
use payments_model::{PaymentRequested, PaymentStatus};

use crate::{FAULTS, Harness, Order};

/// Payments per case, of one account.
const PAYMENTS: usize = 3;
/// The client's first wait before a retry, doubled after each, up to [`LONGEST_WAIT`].
const FIRST_WAIT: Duration = Duration::from_millis(100);
const LONGEST_WAIT: Duration = Duration::from_secs(10);
/// Requests with one key after which the client gives up: a ten-minute outage takes about 65.
const GIVE_UP_AFTER: u32 = 200;

/// What a client's requests with one key got.
struct Key {
    key: String,
    amount_cents: i64,
    /// The payment id of each final answer.
    answered: Vec<String>,
    /// Requests sent with the key, retries included.
    requests: u32,
}

/// What a case did.
struct Case {
    label: String,
    account: String,
    keys: Vec<Key>,
    problems: Vec<String>,
    /// The function's DynamoDB requests.
    dynamodb_requests: u32,
}

/// A function of payments-api's binary (payments-api, payments-reader) over the exploration's
/// [`Harness`]: its stack, clock, crash and faulty DynamoDB client.
pub(crate) struct Api<'a> {
    harness: &'a Harness,
    config: payments_api::Config,
    timeout: Duration,
}

impl<'a> Api<'a> {
    /// The function `name` of the template (payments-api or payments-reader): its settings and
    /// timeout.
    pub(crate) fn new(harness: &'a Harness, name: &str) -> Self {
        let stack = &harness.stack;
        let config = payments_api::Config::from_settings(&stack.settings(name).unwrap()).unwrap();
        let timeout = stack.template.function_by_name(name).unwrap().timeout();
        Self {
            harness,
            config,
            timeout,
        }
    }

    /// The exploration's harness.
    pub(crate) fn harness(&self) -> &'a Harness {
        self.harness
    }

    /// payments-api in a new execution environment: the template's settings, the faulty client,
    /// its keys' leases on the test's clock.
    fn function(&self) -> payments_api::App {
        payments_api::App::new(self.harness.dynamodb.clone(), self.config.clone())
            .with_clock(self.harness.clock.clone() as Arc<dyn Clock>)
    }

    /// `POST /payments` with `key` and `body`, as API Gateway passes it ([`Self::request`]).
    fn post_request(&self, account: &str, key: &str, body: &str) -> Request {
        self.request(
            "POST",
            "/payments",
            account,
            &[
                ("content-type", "application/json"),
                ("idempotency-key", key),
            ],
            body,
        )
    }

    /// A request of `account`'s user as API Gateway passes it: the JWT authorizer's claims (the
    /// account's user, and its account in the template's `ACCOUNT_CLAIM`), the invocation's
    /// deadline.
    pub(crate) fn request(
        &self,
        method: &str,
        path: &str,
        account: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Request {
        let mut jwt = ApiGatewayRequestAuthorizerJwtDescription::default();
        jwt.claims = HashMap::from([("sub".to_owned(), format!("user-{account}"))]);
        jwt.claims
            .insert(self.config.account_claim.clone(), account.to_owned());
        let mut authorizer = ApiGatewayRequestAuthorizer::default();
        authorizer.jwt = Some(jwt);
        let mut http = ApiGatewayV2httpRequestContext::default();
        http.authorizer = Some(authorizer);
        let mut lambda = Context::default();
        lambda.deadline = (self.harness.clock.now_ms() + self.timeout.as_millis() as i64) as u64;
        let mut builder = lambda_http::http::Request::builder()
            .method(method)
            .uri(format!("https://api.example.com{path}"));
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder
            .body(Body::from(body.to_owned()))
            .unwrap()
            .with_request_context(RequestContext::ApiGatewayV2(http))
            .with_lambda_context(lambda)
    }

    /// One invocation: its response, or none when it crashed (its future dropped as the
    /// crash is raised; a new process serves the next request). An error of the handler is
    /// API Gateway's `500`.
    pub(crate) async fn invoke(&self, request: Request) -> Option<Response<Body>> {
        let crash = &self.harness.crash;
        let function = self.function();
        let answer = tokio::select! {
            biased;
            () = crash.raised() => None,
            response = function.handle(request) => Some(response.unwrap_or_else(|_| {
                let mut response = Response::new(Body::from(r#"{"message":"Internal Server Error"}"#));
                *response.status_mut() = lambda_http::http::StatusCode::INTERNAL_SERVER_ERROR;
                response
            })),
        };
        if crash.is_raised() {
            crash.reset();
            return None;
        }
        answer
    }

    /// The client's requests (each one `request()`) until a final answer (anything but a
    /// `409`, a `429`, a `5xx` or no answer), or why the client could not get one: a retryable
    /// answer that is not `application/problem+json`, as the API documents its errors, or no
    /// final answer after [`GIVE_UP_AFTER`] requests. Adds the requests sent to `sent`.
    pub(crate) async fn until_final(
        &self,
        request: impl Fn() -> Request,
        sent: &mut u32,
    ) -> Result<Response<Body>, String> {
        let mut wait = FIRST_WAIT;
        for _ in 0..GIVE_UP_AFTER {
            *sent += 1;
            let pause = match self.invoke(request()).await {
                None => wait,
                Some(response) => match response.status().as_u16() {
                    409 | 429 | 500..=599 => {
                        let kind = response.headers().get("content-type");
                        if kind.is_none_or(|v| v != "application/problem+json") {
                            return Err(format!(
                                "answered {} as {kind:?}, not a problem: {}",
                                response.status(),
                                String::from_utf8_lossy(response.body())
                            ));
                        }
                        wait.max(retry_after(&response))
                    }
                    _ => return Ok(response),
                },
            };
            self.harness.clock.advance(pause);
            wait = (wait * 2).min(LONGEST_WAIT);
        }
        Err(format!("no final answer after {GIVE_UP_AFTER} requests"))
    }

    /// The client's requests with `key` until a final answer: the payment id it names, or why
    /// the client could not get one. Adds the requests sent to `sent`.
    async fn post(
        &self,
        account: &str,
        key: &str,
        body: &str,
        sent: &mut u32,
    ) -> Result<String, String> {
        let response = self
            .until_final(|| self.post_request(account, key, body), sent)
            .await?;
        let status = response.status().as_u16();
        let text = String::from_utf8_lossy(response.body()).into_owned();
        if !matches!(status, 200 | 201) {
            return Err(format!("answered {status}: {text}"));
        }
        let body: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| format!("{status} with an unreadable body {text}: {e}"))?;
        body["paymentId"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("{status} without a paymentId: {text}"))
    }

    /// A case: a new account's [`PAYMENTS`] POSTs and their replays, `fault` armed at the
    /// request it names of the DynamoDB client (none: a clean run).
    async fn case(&self, label: String, fault: Option<(u32, Fault)>) -> Case {
        let run = uuid::Uuid::new_v4().simple().to_string();
        let account = format!("acct-api-{}", &run[..12]);
        self.harness.disarm();
        if let Some((n, fault)) = fault {
            self.harness.dynamodb_faults.arm(n, fault);
        }
        let mut keys: Vec<Key> = (0..PAYMENTS)
            .map(|i| Key {
                key: format!("key-{i}"),
                amount_cents: 100 + 37 * i as i64,
                answered: Vec::new(),
                requests: 0,
            })
            .collect();
        let mut problems = Vec::new();
        // The POSTs one after another, then each again: a retry after a final answer.
        for round in ["POST", "replay"] {
            for (i, k) in keys.iter_mut().enumerate() {
                let body = format!(
                    r#"{{"amountCents":{},"currency":"EUR","description":"payment {i}"}}"#,
                    k.amount_cents
                );
                match self.post(&account, &k.key, &body, &mut k.requests).await {
                    Ok(id) => k.answered.push(id),
                    Err(why) => problems.push(format!("{round} of {}: {why}", k.key)),
                }
            }
        }
        let faults = &self.harness.dynamodb_faults;
        if fault.is_some() && !faults.fired() {
            problems.push("the fault never fired".to_owned());
        }
        for k in &keys {
            if k.answered.windows(2).any(|w| w[0] != w[1]) {
                problems.push(format!("{} answered {:?}", k.key, k.answered));
            }
        }
        if !problems.is_empty() {
            problems.push(format!("dynamodb: {}", faults.runs()));
        }
        let dynamodb_requests = faults.sent();
        self.harness.disarm();
        Case {
            label,
            account,
            keys,
            problems,
            dynamodb_requests,
        }
    }
}

/// A response's `Retry-After` in seconds (zero without one).
fn retry_after(response: &Response<Body>) -> Duration {
    let seconds = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    Duration::from_secs(seconds)
}

/// What is wrong with what `case`'s account holds (`stored`, its payments in the table), and
/// its payments as payments-publisher would send them, in their account's order.
fn check_stored(case: &Case, stored: &[StoredPayment]) -> (Vec<String>, Vec<PaymentRequested>) {
    let mut problems = Vec::new();
    if stored.len() != case.keys.len() {
        problems.push(format!(
            "{} payments stored for {} keys: {:?}",
            stored.len(),
            case.keys.len(),
            stored.iter().map(|p| &p.payment_id).collect::<Vec<_>>()
        ));
    }
    let mut sequences = Vec::new();
    for k in &case.keys {
        let Some(id) = k.answered.first() else {
            continue;
        };
        match stored.iter().find(|p| &p.payment_id == id) {
            None => problems.push(format!("{} answered {id}, which is not stored", k.key)),
            Some(p) => {
                if !p.is(PaymentStatus::Accepted) || p.amount_cents != Some(k.amount_cents) {
                    problems.push(format!(
                        "{}: {id} is {:?} of {:?}, not accepted of {}",
                        k.key, p.status, p.amount_cents, k.amount_cents
                    ));
                }
                sequences.push(p.sequence);
            }
        }
    }
    if sequences.windows(2).any(|w| w[0].is_none() || w[0] >= w[1]) {
        problems.push(format!(
            "numbered {sequences:?}, not in the order of the POSTs"
        ));
    }
    let mut requested: Vec<PaymentRequested> =
        stored.iter().map(StoredPayment::requested).collect();
    requested.sort_by_key(|p| p.sequence);
    (problems, requested)
}

/// The payments table's payments, by account.
async fn payments_by_account(harness: &Harness) -> HashMap<String, Vec<StoredPayment>> {
    let mut by_account: HashMap<String, Vec<StoredPayment>> = HashMap::new();
    for item in harness.stack.scan("PaymentsTable").await.unwrap() {
        let Some(AttributeValue::S(id)) = item.get("paymentId") else {
            continue;
        };
        let payment = StoredPayment::of_item(id, &item);
        let account = payment.account_id.clone().unwrap_or_default();
        by_account.entry(account).or_default().push(payment);
    }
    by_account
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_exploration_payments_api() {
    let started = Instant::now();
    let harness = Harness::new().await;
    let api = Api::new(&harness, "payments-api");
    let clean = api.case("clean run".to_owned(), None).await;
    let requests = clean.dynamodb_requests;
    let mut cases = vec![clean];
    for n in 1..=requests {
        for fault in FAULTS {
            let label = format!("DynamoDb request {n} {}", fault.label());
            cases.push(api.case(label, Some((n, fault))).await);
        }
    }

    let mut failures: Vec<String> = Vec::new();
    let by_account = payments_by_account(&harness).await;
    let mut gaps = 0;
    let mut charged: Vec<(String, Vec<PaymentRequested>)> = Vec::new();
    for case in &cases {
        let stored = by_account.get(&case.account).map_or(&[][..], Vec::as_slice);
        let (mut problems, requested) = check_stored(case, stored);
        problems.splice(0..0, case.problems.iter().cloned());
        if !problems.is_empty() {
            failures.push(format!("{}: {}", case.label, problems.join("; ")));
        }
        if let Some(last) = requested.last().and_then(|p| p.sequence) {
            gaps += last - requested.len() as u64;
        }
        if !requested.is_empty() {
            charged.push((case.label.clone(), requested));
        }
    }
    // payment-processor over every case's payments, without faults.
    for (label, payments) in &charged {
        let run = harness.case(Order::Accepted, None, payments.clone()).await;
        if !run.problems.is_empty() {
            failures.push(format!("{label}, charging: {}", run.problems.join("; ")));
        }
        for p in payments {
            if let Some(why) = harness.not_charged(p).await {
                failures.push(format!("{label}: {why}"));
            }
        }
    }
    let most = cases
        .iter()
        .flat_map(|c| c.keys.iter().map(|k| k.requests))
        .max()
        .unwrap_or(0);
    println!(
        "payments-api: in a clean run of {PAYMENTS} POSTs and their replays, {requests} DynamoDB \
         requests; {} cases in {:.1} s, {} failed; at most {most} requests with one key, {gaps} \
         numbers left without a payment",
        cases.len(),
        started.elapsed().as_secs_f64(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );

    let all: Vec<PaymentRequested> = charged.into_iter().flat_map(|(_, p)| p).collect();
    let offenders = harness.stack.charged_exactly_once(&all).await.unwrap();
    assert!(offenders.is_empty(), "{offenders:?}");
    harness
        .stack
        .assert_invariants(&Scope::through_charging(), &[])
        .await;
}
