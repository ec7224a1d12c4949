//! The client side of a run: payments sent by real HTTP, with retries of the same key,
//! concurrent duplicates, reused keys and invalid requests, and what came back.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::{StreamExt, stream};
use serde_json::json;

use crate::http::{Answer, HttpClient};
use crate::invariants::{Failure, Scope};

/// What the client does with one payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Behaviour {
    /// One POST.
    Once,
    /// One POST, then the same POST again (a client retry after a lost answer).
    ClientRetry,
    /// Three identical POSTs at once (a double-click, a retry racing the first attempt).
    ConcurrentDuplicates,
    /// One POST, then the same key with another amount (a client bug): must be refused.
    ReusedKey,
}

/// What payment-processor does with one payment (through the failure switch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// Charged on the first attempt.
    None,
    /// Fails its first attempts, then is charged.
    Flaky,
    /// Always fails: dead-lettered once its attempts are used up.
    Poison,
    /// Fails permanently on its first attempt: dead-lettered at once.
    Permanent,
}

impl Fault {
    /// Never charged: ends in the dead-letter queue, marked `failed`.
    pub fn is_fatal(self) -> bool {
        self.failure().is_some()
    }

    /// The failure it makes, as the invariant checker is told of it: a poison payment uses up
    /// its attempt budget, a permanent one is refused as a poison message; `None` for one that
    /// is charged.
    pub fn failure(self) -> Option<Failure> {
        match self {
            Fault::None | Fault::Flaky => None,
            Fault::Poison => Some(Failure::Budget),
            Fault::Permanent => Some(Failure::Permanent),
        }
    }
}

/// Description markers of the failure switch.
pub const FLAKY_MARKER: &str = "[flaky]";
/// See [`FLAKY_MARKER`].
pub const POISON_MARKER: &str = "[poison]";
/// See [`FLAKY_MARKER`].
pub const PERMANENT_MARKER: &str = "[permanent]";

/// The failure switch (`FAIL_PAYMENTS`) that goes with the workload: flaky payments fail their
/// first `flaky_attempts` attempts; poison ones every attempt; permanent ones fail permanently.
pub fn failure_switch(flaky_attempts: u32) -> String {
    format!(
        "{FLAKY_MARKER}:{flaky_attempts},{POISON_MARKER}:1000000,{PERMANENT_MARKER}:1000000:permanent"
    )
}

/// The currencies of a run, one minor unit each (JPY none, EUR 2 decimal places, BHD 3): each
/// account pays in every one of them, so that its balances are per currency.
pub const CURRENCIES: [&str; 3] = ["EUR", "JPY", "BHD"];

/// One planned payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// The Idempotency-Key.
    pub key: String,
    /// The account.
    pub account: String,
    /// Amount, minor units of `currency`.
    pub amount_cents: i64,
    /// One of [`CURRENCIES`].
    pub currency: &'static str,
    /// Sent as `amount`, a decimal string of major units, instead of `amountCents`.
    pub decimal: bool,
    /// Description (carries the fault marker).
    pub description: String,
    /// Client behaviour.
    pub behaviour: Behaviour,
    /// Processing fault.
    pub fault: Fault,
    /// Place in its account's sequence (0 first): the account's payments are sent one after
    /// another, so this is also their order in the account's FIFO message group.
    pub position: usize,
}

impl Planned {
    /// The JSON body: the amount as `amountCents`, or as `amount` in major units.
    pub fn body(&self) -> String {
        let mut body = json!({
            "accountId": self.account,
            "currency": self.currency,
            "description": self.description,
        });
        if self.decimal {
            let exponent = payments_api::validate::exponent(self.currency)
                .expect("the run's currencies have a minor unit");
            body["amount"] = payments_api::validate::decimal(self.amount_cents, exponent).into();
        } else {
            body["amountCents"] = self.amount_cents.into();
        }
        body.to_string()
    }
}

/// The shape of a run.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Distinct payments.
    pub payments: usize,
    /// Accounts (FIFO message groups) they are spread over.
    pub accounts: usize,
    /// Payments in flight at once on the client side.
    pub client_concurrency: usize,
    /// Percent of payments retried by the client after their answer.
    pub retry_percent: u32,
    /// Percent sent three times at once.
    pub concurrent_percent: u32,
    /// Percent whose key is then reused with another body.
    pub reuse_percent: u32,
    /// Percent that fail their first attempts in payment-processor.
    pub flaky_percent: u32,
    /// Percent that always fail (dead-lettered), at least 2; besides them one payment fails
    /// permanently. See [`Workload::plan`] for where they go.
    pub poison_percent: u32,
    /// Percent of the accepted payments (failing ones aside) that a producer sends to the queue
    /// again, as a new message (as a resend after the FIFO deduplication window would be).
    pub resend_percent: u32,
    /// Seed of the plan.
    pub seed: u64,
}

impl Workload {
    /// The demo's workload for `payments` payments.
    pub fn demo(payments: usize) -> Self {
        Self {
            payments,
            accounts: 12,
            client_concurrency: 16,
            retry_percent: 15,
            concurrent_percent: 10,
            reuse_percent: 5,
            flaky_percent: 8,
            poison_percent: 2,
            resend_percent: 10,
            seed: 42,
        }
    }

    /// The payments, in sending order. Failing payments are placed on purpose where they hold
    /// up others: early in their account's sequence (its FIFO message group), with later
    /// payments of the account behind them. The first account's first payment fails
    /// permanently; the second account holds two poison payments (its second and fourth), with a
    /// flaky one between them; the other poison payments are second in their accounts; flaky
    /// payments head their accounts, then come third. Client behaviours and amounts are random
    /// (seeded). An account's payments take the [`CURRENCIES`] in turn, every other one with its
    /// amount as a decimal string (`amount`).
    pub fn plan(&self) -> Vec<Planned> {
        let mut rng = fastrand::Rng::with_seed(self.seed);
        let run = uuid::Uuid::new_v4().simple().to_string();
        let faults = self.fault_slots();
        let accounts = self.accounts.max(1);
        (0..self.payments)
            .map(|i| {
                let behaviour = match rng.u32(0..100) {
                    r if r < self.retry_percent => Behaviour::ClientRetry,
                    r if r < self.retry_percent + self.concurrent_percent => {
                        Behaviour::ConcurrentDuplicates
                    }
                    r if r < self.retry_percent + self.concurrent_percent + self.reuse_percent => {
                        Behaviour::ReusedKey
                    }
                    _ => Behaviour::Once,
                };
                let (account, position) = (i % accounts, i / accounts);
                let fault = faults
                    .get(&(account, position))
                    .copied()
                    .unwrap_or(Fault::None);
                let marker = match fault {
                    Fault::None => "",
                    Fault::Flaky => FLAKY_MARKER,
                    Fault::Poison => POISON_MARKER,
                    Fault::Permanent => PERMANENT_MARKER,
                };
                Planned {
                    key: format!("{run}-{i}"),
                    account: format!("acct-{account:02}"),
                    amount_cents: i64::from(rng.u32(100..10_000)),
                    currency: CURRENCIES[position % CURRENCIES.len()],
                    decimal: position % 2 == 1,
                    description: format!("payment {i} {marker}").trim_end().to_owned(),
                    behaviour,
                    fault,
                    position,
                }
            })
            .collect()
    }

    /// Where the failing payments go: (account, position) to fault. Only positions with at least
    /// three payments of the account behind them are used.
    fn fault_slots(&self) -> HashMap<(usize, usize), Fault> {
        let accounts = self.accounts.max(1);
        let per_account =
            |a: usize| self.payments / accounts + usize::from(a < self.payments % accounts);
        let percent = |p: u32| self.payments * p as usize / 100;
        let mut slots = HashMap::new();
        let mut place = |candidates: Vec<(usize, usize)>, fault: Fault, n: usize| {
            let free: Vec<_> = candidates
                .into_iter()
                .filter(|&(a, k)| a < accounts && k + 3 < per_account(a))
                .filter(|slot| !slots.contains_key(slot))
                .take(n)
                .collect();
            for slot in free {
                slots.insert(slot, fault);
            }
        };
        place(vec![(0, 0)], Fault::Permanent, 1);
        let poison = [(1, 1), (1, 3)]
            .into_iter()
            .chain((2..accounts).map(|a| (a, 1)))
            .collect();
        place(poison, Fault::Poison, percent(self.poison_percent).max(2));
        let flaky = [(1, 2)]
            .into_iter()
            .chain((0..accounts).map(|a| (a, 0)))
            .chain((0..accounts).map(|a| (a, 2)))
            .collect();
        place(flaky, Fault::Flaky, percent(self.flaky_percent));
        slots
    }

    /// Sends the plan; `progress` is called with the number of payments done so far.
    ///
    /// The accounts are sent concurrently (up to `client_concurrency` at once), each account's
    /// payments one after another: a payment is sent once the previous one of its account has its
    /// answer, so the send order of an account is its plan order.
    pub async fn run(&self, client: &HttpClient, progress: impl Fn(usize, usize) + Sync) -> Tally {
        let plan = self.plan();
        let total = plan.len();
        let mut by_account: BTreeMap<String, Vec<Planned>> = BTreeMap::new();
        for p in plan {
            by_account.entry(p.account.clone()).or_default().push(p);
        }
        let done = AtomicUsize::new(0);
        let tally = Arc::new(std::sync::Mutex::new(Tally::default()));
        invalid_requests(client, &tally).await;
        stream::iter(by_account.into_values())
            .map(|sequence| {
                let tally = tally.clone();
                let done = &done;
                let progress = &progress;
                async move {
                    for p in sequence {
                        let outcome = send(&client.as_caller(&p.account), &p).await;
                        tally.lock().unwrap().record(p, outcome);
                        progress(done.fetch_add(1, Ordering::SeqCst) + 1, total);
                    }
                }
            })
            .buffer_unordered(self.client_concurrency.max(1))
            .collect::<Vec<_>>()
            .await;
        Arc::try_unwrap(tally)
            .expect("all sends done")
            .into_inner()
            .unwrap()
    }
}

/// A payment the API accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// The payment id the API gave.
    pub payment_id: String,
    /// What was sent.
    pub planned: Planned,
}

/// `scope`, declaring the failures the failure switch makes of `payments` (payment id and
/// fault): each payment of a fatal [`Fault`], with its kind.
pub fn declaring_faults<'a>(
    scope: Scope,
    payments: impl IntoIterator<Item = (&'a str, Fault)>,
) -> Scope {
    payments
        .into_iter()
        .fold(scope, |scope, (id, fault)| match fault.failure() {
            Some(failure) => scope.declaring(failure, [id]),
            None => scope,
        })
}

/// What the client saw.
#[derive(Debug, Default)]
pub struct Tally {
    /// HTTP requests sent.
    pub requests: usize,
    /// Answers by status.
    pub statuses: HashMap<u16, usize>,
    /// 201 answers that were replays.
    pub replayed: usize,
    /// Payments accepted (a 201 for their key).
    pub accepted: Vec<Accepted>,
    /// Answers that broke the API's contract, described.
    pub unexpected: Vec<String>,
}

impl Tally {
    /// Answers with `status`.
    pub fn count(&self, status: u16) -> usize {
        self.statuses.get(&status).copied().unwrap_or(0)
    }

    fn record(&mut self, planned: Planned, outcome: Outcome) {
        self.requests += outcome.answers.len();
        for a in &outcome.answers {
            *self.statuses.entry(a.status).or_default() += 1;
            if a.status == 201 && a.replayed {
                self.replayed += 1;
            }
        }
        self.unexpected.extend(outcome.unexpected);
        if let Some(payment_id) = outcome.payment_id {
            self.accepted.push(Accepted {
                payment_id,
                planned,
            });
        }
    }
}

struct Outcome {
    answers: Vec<Answer>,
    payment_id: Option<String>,
    unexpected: Vec<String>,
}

/// Sends one POST, retrying 409 and 5xx answers with the same key, as a well-behaved client does.
async fn post_until_answered(
    client: &HttpClient,
    key: &str,
    body: &str,
    answers: &mut Vec<Answer>,
) -> Option<Answer> {
    for _ in 0..60 {
        let answer = match client.post_payment(Some(key), body).await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(key, error = e, "request failed");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        answers.push(answer.clone());
        match answer.status {
            // In progress, unavailable, or the function timed out: a well-behaved client retries
            // with the same key.
            409 | 500 | 502 | 503 | 504 => {
                let wait = answer.retry_after.unwrap_or(1).min(2);
                tokio::time::sleep(Duration::from_secs(wait)).await;
            }
            _ => return Some(answer),
        }
    }
    None
}

async fn send(client: &HttpClient, p: &Planned) -> Outcome {
    let body = p.body();
    let mut answers = Vec::new();
    let mut unexpected = Vec::new();
    let first = match p.behaviour {
        Behaviour::ConcurrentDuplicates => {
            // Three at once; every answer is the stored 201 or a 409 that resolves to it.
            let attempts = (0..3).map(|_| async {
                let mut mine = Vec::new();
                let answer = post_until_answered(client, &p.key, &body, &mut mine).await;
                (answer, mine)
            });
            let results = futures_util::future::join_all(attempts).await;
            let mut finals = Vec::new();
            for (answer, mine) in results {
                answers.extend(mine);
                finals.extend(answer);
            }
            if finals.len() != 3 || finals.iter().any(|a| a.status != 201) {
                unexpected.push(format!(
                    "{}: concurrent duplicates did not all end in 201: {finals:?}",
                    p.key
                ));
            }
            if finals.windows(2).any(|w| w[0].body != w[1].body) {
                unexpected.push(format!(
                    "{}: concurrent duplicates got different bodies",
                    p.key
                ));
            }
            if finals.iter().filter(|a| !a.replayed).count() > 1 {
                unexpected.push(format!(
                    "{}: more than one concurrent POST was not a replay",
                    p.key
                ));
            }
            finals.into_iter().next()
        }
        _ => post_until_answered(client, &p.key, &body, &mut answers).await,
    };
    let Some(first) = first.filter(|a| a.status == 201) else {
        unexpected.push(format!(
            "{}: no 201 for a valid payment: {:?}",
            p.key,
            answers.last()
        ));
        return Outcome {
            answers,
            payment_id: None,
            unexpected,
        };
    };
    let payment_id = serde_json::from_str::<serde_json::Value>(&first.body)
        .ok()
        .and_then(|v| v["paymentId"].as_str().map(str::to_owned));
    match p.behaviour {
        Behaviour::ClientRetry => {
            if let Some(again) = post_until_answered(client, &p.key, &body, &mut answers).await
                && !(again.status == 201 && again.replayed && again.body == first.body)
            {
                unexpected.push(format!(
                    "{}: a retry was not a byte-for-byte replay: {again:?}",
                    p.key
                ));
            }
        }
        Behaviour::ReusedKey => {
            let mut other = p.clone();
            other.amount_cents += 1;
            if let Some(answer) =
                post_until_answered(client, &p.key, &other.body(), &mut answers).await
                && !(answer.status == 422
                    && answer.content_type.as_deref() == Some("application/problem+json"))
            {
                unexpected.push(format!(
                    "{}: a reused key with another body was not refused with 422: {answer:?}",
                    p.key
                ));
            }
        }
        _ => {}
    }
    if payment_id.is_none() {
        unexpected.push(format!(
            "{}: the 201 has no paymentId: {}",
            p.key, first.body
        ));
    }
    Outcome {
        answers,
        payment_id,
        unexpected,
    }
}

/// One request the API must refuse, before storing anything.
struct Refused {
    what: &'static str,
    caller: Option<&'static str>,
    method: &'static str,
    path: &'static str,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
    status: u16,
    /// The problem's `field`, when the answer names one.
    field: Option<&'static str>,
}

/// Requests that must be refused: each bad input gets its status and (for the function's
/// answers) a problem+json body naming the field.
async fn invalid_requests(client: &HttpClient, tally: &Arc<std::sync::Mutex<Tally>>) {
    let key = || format!("refused-{}", uuid::Uuid::new_v4());
    let json = || ("content-type", "application/json".to_owned());
    let post = |what, body: &str, field, status| Refused {
        what,
        caller: Some("acct-x"),
        method: "POST",
        path: "/payments",
        headers: vec![json(), ("idempotency-key", key())],
        body: body.as_bytes().to_vec(),
        status,
        field,
    };
    let valid = r#"{"accountId":"acct-x","amountCents":100,"currency":"EUR"}"#;
    let mut cases = vec![
        post(
            "a negative amount",
            r#"{"amountCents":-5,"currency":"EUR"}"#,
            Some("amountCents"),
            400,
        ),
        post(
            "an unknown currency",
            r#"{"amountCents":5,"currency":"XYZ"}"#,
            Some("currency"),
            400,
        ),
        post(
            "a currency without a minor unit",
            r#"{"amountCents":5,"currency":"XAU"}"#,
            Some("currency"),
            400,
        ),
        post(
            "decimals JPY does not have",
            r#"{"amount":"100.5","currency":"JPY"}"#,
            Some("amount"),
            400,
        ),
        post(
            "an amount over the limit",
            r#"{"amountCents":100000001,"currency":"EUR"}"#,
            Some("amountCents"),
            400,
        ),
        post(
            "both amount and amountCents",
            r#"{"amount":"1.00","amountCents":100,"currency":"EUR"}"#,
            Some("amount"),
            400,
        ),
        post("a body that is not JSON", "{", Some("body"), 400),
        post(
            "an unknown field",
            r#"{"amountCents":5,"currency":"EUR","x":1}"#,
            Some("body"),
            400,
        ),
        post(
            "a character SQS refuses",
            r#"{"amountCents":5,"currency":"EUR","description":"bell \u0007"}"#,
            Some("description"),
            400,
        ),
        post(
            "another caller's account",
            r#"{"accountId":"acct-y","amountCents":5,"currency":"EUR"}"#,
            Some("accountId"),
            403,
        ),
        post(
            "a body over 16 KiB",
            &format!(
                r#"{{"amountCents":5,"currency":"EUR","description":"{}"}}"#,
                "x".repeat(17 * 1024)
            ),
            Some("body"),
            413,
        ),
    ];
    cases.push(Refused {
        what: "no Idempotency-Key",
        headers: vec![json()],
        ..post("", valid, Some("Idempotency-Key"), 400)
    });
    cases.push(Refused {
        what: "a body that is not JSON by its content type",
        headers: vec![
            ("content-type", "text/plain".to_owned()),
            ("idempotency-key", key()),
        ],
        ..post("", valid, Some("Content-Type"), 415)
    });
    cases.push(Refused {
        what: "a wrong method",
        method: "DELETE",
        ..post("", "", None, 405)
    });
    cases.push(Refused {
        what: "no token",
        caller: None,
        ..post("", valid, None, 401)
    });
    // A read (payments-reader's route) of a payment that does not exist.
    cases.push(Refused {
        what: "a payment that does not exist",
        method: "GET",
        path: "/payments/pay_00000000000000000000000000000000",
        headers: Vec::new(),
        ..post("", "", None, 404)
    });
    for case in cases {
        let client = match case.caller {
            Some(caller) => client.as_caller(caller),
            None => client.clone().with_token(None),
        };
        let headers: Vec<(&str, &str)> =
            case.headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let answer = client
            .request(case.method, case.path, &headers, case.body)
            .await;
        let mut t = tally.lock().unwrap();
        t.requests += 1;
        let what = case.what;
        match answer {
            Ok(a) => {
                *t.statuses.entry(a.status).or_default() += 1;
                let body = serde_json::from_str::<serde_json::Value>(&a.body).unwrap_or_default();
                let names_field = case.field.is_none_or(|f| body["field"] == f);
                let problem = case.caller.is_none()
                    || a.content_type.as_deref() == Some("application/problem+json");
                let allow = case.status != 405 || a.allow.as_deref() == Some("POST");
                if a.status != case.status || !names_field || !problem || !allow {
                    t.unexpected.push(format!(
                        "{what}: not refused with {} naming {:?}: {a:?}",
                        case.status, case.field
                    ));
                }
            }
            Err(e) => t.unexpected.push(format!("{what}: {e}")),
        }
    }
}
