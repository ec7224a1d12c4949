//! payments-api: `POST /payments` with a required `Idempotency-Key` header, and
//! `GET /payments/{paymentId}`, behind API Gateway's JWT authorizer. Follows the IETF draft "The
//! Idempotency-Key HTTP Header Field"; errors are `application/problem+json` (RFC 9457).
//!
//! - **Callers.** The caller is the token's `sub`; the account it may charge and read is the
//!   claim `ACCOUNT_CLAIM` ([`identity::Caller`]). A body naming another account is a 403; a
//!   payment of another account is a 404. Idempotency keys are scoped to the caller, and the
//!   request's fingerprint always holds the account ([`validate::NewPayment::json`]): a body
//!   leaving `accountId` out is the same request as one naming the caller's account, so one
//!   caller sending one key and body for two accounts (tokens of two accounts, with
//!   `ACCOUNT_CLAIM` another claim than `sub`) gets a `422` for the second, never the first
//!   account's payment ([`fingerprint`]). A payment stored before this rule from a body leaving
//!   its account out holds the body's fingerprint alone: its retry still replays it (the payment
//!   is of the caller's account), another account's is a `422`.
//! - **The outbox.** The first request with a key writes the payment once (one conditional
//!   `PutItem`, status `accepted`, with the request's fingerprint) and answers `201` with
//!   `{paymentId, status}`. Nothing is sent to SQS here: payments-publisher relays every new
//!   payment from the table's stream, so an accepted payment is never left unpublished and SQS
//!   never makes this API fail.
//! - **Retries.** The same key and body replays the stored response byte for byte, with
//!   `Idempotent-Replayed: true`; the same key with another body is `422`, also after the
//!   idempotency record expired (the payment item keeps the fingerprint); while the first
//!   request runs, `409` with `Retry-After`.
//! - **Reads.** `GET /payments/{paymentId}` answers the payment (`paymentId`, `accountId`,
//!   `amountCents`, `currency`, `description`, `status`), why it failed (`failureReason`), its
//!   `sequence`, and when each state change happened (`timestamps`: `accepted`, `charged`,
//!   `failed`, `reopened`, epoch ms); a field the payment does not have is `null`.
//! - **Bad input is refused before anything is stored**: a body over 16 KiB is `413` unparsed, a
//!   non-JSON content type `415`, a wrong method `405` with `Allow`, an invalid field (or a
//!   character the queue would refuse) `400` naming it. Problem details never carry SDK errors.
//! - **Waiting for the outcome** ([`prefer`], [`wait`]): with `Prefer: wait=N` (RFC 7240), both
//!   routes answer as soon as the payment is `charged` or `failed`, or after N seconds (at most
//!   20, and 1 s before the invocation's deadline) with its state then, in the body they give
//!   without the header, and say the wait applied in `Preference-Applied: wait=N`. A POST waits
//!   after its idempotent write, outside the key's record: the stored response stays the
//!   creation's, and a retry with the key is never kept out by a waiting request.
//! - **Money is per currency** ([`validate::amount_of`]): the currency is an active ISO 4217 code
//!   with a minor unit; the amount is `amountCents` (minor units) or `amount` (a decimal string of
//!   major units, with no more decimal places than the currency has), at most
//!   `MAX_PAYMENT_AMOUNT` major units. A refusal is a `400` naming the field and the rule.
//!
//! - **Metrics.** Each request is counted by its [`Outcome`] (one EMF line); every `503` is
//!   `unavailable`, which has an alarm: to Lambda it is a successful invocation.
//!
//! The handler is a plain async method ([`App::handle`]), callable from tests without a runtime;
//! [`App::with_clock`] times its keys' leases on a test's clock.

pub mod fingerprint;
pub mod identity;
pub mod lambda_main;
pub mod outcome;
pub mod prefer;
pub mod problem;
pub mod representation;
pub mod validate;
pub mod wait;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use lambda_http::http::{HeaderValue, StatusCode, header};
use lambda_http::{Body, Error, Request, RequestExt, Response};
use lambda_idempotency::payload::PayloadHash;
use lambda_idempotency::store::{DynamoDbBackend, StoreError, TableCheck};
use lambda_idempotency::time::{Clock, SystemClock};
use lambda_idempotency::{AcquireError, Acquired, Idempotency, Lease};
use payments_config::{ConfigError, DEFAULT_IDEMPOTENCY_TTL, Settings};
use payments_model::{PaymentStatus, lifecycle, order};
use serde::{Deserialize, Serialize};

use crate::identity::Caller;
pub use crate::outcome::Outcome;
use crate::prefer::WaitPreference;
use crate::problem::Problem;
use crate::representation::Item;
use crate::validate::{DEFAULT_MAX_PAYMENT_AMOUNT, NewPayment};

/// Header that marks a replayed response.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// Settings of payments-api.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `IDEMPOTENCY_TABLE`.
    pub idempotency_table: String,
    /// `IDEMPOTENCY_TTL_SECONDS` (default 18 days, the queues' retention plus the dead-letter
    /// queues'): how long a key replays its response from its record.
    pub idempotency_ttl: Duration,
    /// `PAYMENTS_TABLE`.
    pub payments_table: String,
    /// `ACCOUNTS_TABLE`: each account's order ([`payments_model::order`]).
    pub accounts_table: String,
    /// `ACCOUNT_CLAIM` (default `sub`): the JWT claim naming the caller's account.
    pub account_claim: String,
    /// `MAX_PAYMENT_AMOUNT` (default [`DEFAULT_MAX_PAYMENT_AMOUNT`], at least 1): the largest
    /// amount of a payment, in major units of its currency (1,000,000 is 1,000,000.00 EUR,
    /// 1,000,000 JPY or 1,000,000.000 BHD).
    pub max_payment_amount: u64,
    /// `MAX_WAIT_SECONDS` (default and at most [`prefer::MAX_WAIT_SECONDS`]): the longest
    /// `Prefer: wait` this function applies. 0: it never waits (answers at once, without
    /// `Preference-Applied`), as payments-api, whose reserved concurrency is for POSTs alone.
    pub max_wait_seconds: u64,
}

impl Config {
    /// Reads the settings.
    pub fn from_settings(settings: &impl Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            idempotency_table: settings.required("IDEMPOTENCY_TABLE")?,
            idempotency_ttl: settings
                .seconds("IDEMPOTENCY_TTL_SECONDS", DEFAULT_IDEMPOTENCY_TTL)?,
            payments_table: settings.required("PAYMENTS_TABLE")?,
            accounts_table: settings.required("ACCOUNTS_TABLE")?,
            account_claim: settings
                .get("ACCOUNT_CLAIM")
                .unwrap_or_else(|| "sub".into()),
            max_payment_amount: max_payment_amount(settings)?,
            max_wait_seconds: max_wait_seconds(settings)?,
        })
    }
}

/// `MAX_WAIT_SECONDS`: whole seconds from 0 to [`prefer::MAX_WAIT_SECONDS`]; that maximum when
/// unset.
fn max_wait_seconds(settings: &impl Settings) -> Result<u64, ConfigError> {
    const NAME: &str = "MAX_WAIT_SECONDS";
    let Some(value) = settings.get(NAME) else {
        return Ok(prefer::MAX_WAIT_SECONDS);
    };
    match value.trim().parse::<u64>() {
        Ok(n) if n <= prefer::MAX_WAIT_SECONDS => Ok(n),
        _ => Err(ConfigError::Invalid {
            name: NAME,
            reason: format!(
                "`{value}` is not whole seconds from 0 to {}",
                prefer::MAX_WAIT_SECONDS
            ),
        }),
    }
}

/// `MAX_PAYMENT_AMOUNT`: a whole number of at least 1; [`DEFAULT_MAX_PAYMENT_AMOUNT`] when unset.
fn max_payment_amount(settings: &impl Settings) -> Result<u64, ConfigError> {
    const NAME: &str = "MAX_PAYMENT_AMOUNT";
    match settings.get(NAME) {
        None => Ok(DEFAULT_MAX_PAYMENT_AMOUNT),
        Some(v) => match v.trim().parse::<u64>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(ConfigError::Invalid {
                name: NAME,
                reason: format!(
                    "`{v}` is not a whole number of at least 1 (major units of a payment's currency)"
                ),
            }),
        },
    }
}

/// The response stored under an Idempotency-Key, replayed byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct StoredResponse {
    status: u16,
    location: String,
    body: String,
}

/// The function's state: clients and settings, built once per execution environment.
#[derive(Debug, Clone)]
pub struct App {
    idempotency: Idempotency<DynamoDbBackend>,
    dynamodb: aws_sdk_dynamodb::Client,
    payments_table: String,
    accounts_table: String,
    account_claim: String,
    max_payment_amount: u64,
    max_wait_seconds: u64,
}

/// What the conditional write of a payment found.
enum Written {
    /// The payment is stored now.
    New,
    /// A payment with this id was stored before, from the same request.
    SameRequest,
    /// A payment with this id was stored before, from another body.
    OtherRequest,
}

impl App {
    /// An app over this client.
    pub fn new(dynamodb: aws_sdk_dynamodb::Client, config: Config) -> Self {
        let idempotency = Idempotency::new(DynamoDbBackend::new(
            dynamodb.clone(),
            config.idempotency_table,
        ))
        .with_key_prefix("payments-api")
        .with_expiry(config.idempotency_ttl);
        Self {
            idempotency,
            dynamodb,
            payments_table: config.payments_table,
            accounts_table: config.accounts_table,
            account_claim: config.account_claim,
            max_payment_amount: config.max_payment_amount,
            max_wait_seconds: config.max_wait_seconds,
        }
    }

    /// An app from the SDK configuration and the settings.
    pub fn from_settings(
        sdk: &aws_config::SdkConfig,
        settings: &impl Settings,
    ) -> Result<Self, ConfigError> {
        Ok(Self::new(
            payments_config::dynamodb(sdk),
            Config::from_settings(settings)?,
        ))
    }

    /// The app with its keys' records timed on `clock` (for tests of leases and expiry, on a
    /// test's clock): when a key's lease and its record end, and the `Retry-After` of a `409`.
    /// The payments' timestamps stay the system clock's.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.idempotency = self.idempotency.with_clock(clock);
        self
    }

    /// The cold-start check of the idempotency table ([`DynamoDbBackend::check_table`]): an
    /// error names the table and what does not match it (a partition key named or typed
    /// otherwise, a sort key, no such table). `main` runs it in the background from the init
    /// (`payments_config::cold_start_checks`) and fails each request on it until it passes.
    /// What does not stop the table from working (its TTL) is only logged.
    pub async fn check_idempotency_table(&self) -> Result<TableCheck, StoreError> {
        self.idempotency.backend().check_table().await
    }

    /// The idempotency engine.
    pub fn idempotency(&self) -> &Idempotency<DynamoDbBackend> {
        &self.idempotency
    }

    /// Handles one HTTP request (API Gateway HTTP API payload 2.0), and counts its outcome
    /// (one EMF line).
    pub async fn handle(&self, request: Request) -> Result<Response<Body>, Error> {
        let (outcome, response) = self.respond(&request).await;
        outcome.metrics().emit();
        Ok(response)
    }

    /// The response to one request and its outcome, which [`handle`](Self::handle) counts:
    /// every response has one, so each `503` is counted `unavailable`.
    pub async fn respond(&self, request: &Request) -> (Outcome, Response<Body>) {
        let path = match request.raw_http_path() {
            "" => request.uri().path().to_owned(),
            raw => raw.to_owned(),
        };
        let path = path.trim_end_matches('/');
        let method = request.method();
        let route = match path {
            "/payments" => Route::Payments,
            p if p.starts_with("/payments/") && !p["/payments/".len()..].contains('/') => {
                Route::Payment(&p["/payments/".len()..])
            }
            _ => {
                let problem = Problem::not_found(format!("no route for {method} {path}"));
                return (Outcome::NotFound, problem.response());
            }
        };
        let allowed = match route {
            Route::Payments => "POST",
            Route::Payment(_) => "GET",
        };
        if method.as_str() != allowed {
            let problem = Problem::method_not_allowed(method.as_str(), allowed);
            return (Outcome::Rejected, problem.response());
        }
        let caller = match Caller::of(request, &self.account_claim) {
            Ok(caller) => caller,
            Err(problem) => return (Outcome::Unauthorized, problem.response()),
        };
        let wait = WaitPreference::of(request)
            .filter(|_| self.max_wait_seconds > 0)
            .map(|w| WaitPreference {
                requested: w.requested.min(self.max_wait_seconds),
                ..w
            });
        match route {
            Route::Payments => self.create(request, &caller, wait).await,
            Route::Payment(id) => self.get(id, &caller, wait).await,
        }
    }

    async fn create(
        &self,
        request: &Request,
        caller: &Caller,
        wait: Option<WaitPreference>,
    ) -> (Outcome, Response<Body>) {
        let body = request.body().as_ref();
        let headers = request.headers();
        let checked = validate::body_size(body)
            .and_then(|()| {
                validate::content_type(headers.get(header::CONTENT_TYPE).map(HeaderValue::as_bytes))
            })
            .and_then(|()| {
                validate::idempotency_key(headers.get("idempotency-key").map(HeaderValue::as_bytes))
            });
        let key = match checked {
            Ok(key) => key,
            Err(problem) => return (Outcome::Rejected, problem.response()),
        };
        let span = tracing::info_span!("create_payment", caller = caller.id, idempotency_key = key);
        let _enter = span.enter();
        let payment = match validate::new_payment(body, &caller.account, self.max_payment_amount) {
            Ok(p) => p,
            Err(problem) => {
                tracing::info!(
                    field = problem.field,
                    detail = problem.detail,
                    "invalid request"
                );
                return (Outcome::Rejected, problem.response());
            }
        };
        let scoped_key = caller.scoped_key(&key);
        let deadline = request
            .lambda_context_ref()
            .and_then(lambda_idempotency::time::Deadline::of);
        let hash = fingerprint::of(&payment);
        // The request's fingerprint is canonical already (the validated payment's JSON): stored
        // as it is, the form payments and their records have always held.
        let fingerprint = PayloadHash::stored(hash.clone());
        let (outcome, response) = match self
            .idempotency
            .acquire_hashed(&scoped_key, &fingerprint, deadline)
            .await
        {
            Ok(Acquired::Started(lease)) => {
                self.first(&lease, &scoped_key, &hash, &payment, caller)
                    .await
            }
            Ok(Acquired::Duplicate { result, .. }) => {
                let stored = match result
                    .as_deref()
                    .map(serde_json::from_str::<StoredResponse>)
                {
                    Some(Ok(stored)) => stored,
                    // Not stored (cannot happen for responses this small) or unreadable: the
                    // response is a function of the key alone, so rebuild it.
                    _ => accepted_response(&payment_id(&scoped_key)),
                };
                tracing::info!("replaying the stored response");
                (Outcome::Replayed, stored_response(&stored, true))
            }
            Ok(Acquired::InProgress { lease_until_ms }) => {
                // The first request usually finishes within milliseconds; its lease (the
                // function's deadline) only bounds the worst case. Suggest a short retry.
                let left_ms = (lease_until_ms - self.idempotency.clock().now_ms()).max(0);
                let retry_after = u64::try_from((left_ms + 999) / 1000)
                    .unwrap_or(1)
                    .clamp(1, 2);
                (
                    Outcome::InProgress,
                    Problem::in_progress(retry_after).response(),
                )
            }
            Err(AcquireError::PayloadMismatch { .. }) => {
                self.reused(&scoped_key, &hash, &payment).await
            }
            Err(AcquireError::Store(e)) => {
                tracing::error!(error = %e, "idempotency store unavailable");
                (
                    Outcome::Unavailable,
                    Problem::unavailable("the idempotency store is unavailable").response(),
                )
            }
        };
        // The key's record is completed (or failed) by now: the wait holds no lease.
        match wait {
            Some(wait) if response.status().is_success() => (
                outcome,
                self.outcome(response, &payment_id(&scoped_key), wait).await,
            ),
            _ => (outcome, response),
        }
    }

    /// The first request with a key (or the first since its record expired): writes the
    /// payment once, and completes the key with the response.
    async fn first(
        &self,
        lease: &Lease,
        scoped_key: &str,
        hash: &str,
        payment: &NewPayment,
        caller: &Caller,
    ) -> (Outcome, Response<Body>) {
        let payment_id = payment_id(scoped_key);
        let (outcome, replayed) = match self.write(&payment_id, hash, payment, caller).await {
            Ok(Written::New) => (Outcome::Accepted, false),
            Ok(Written::SameRequest) => (Outcome::Replayed, true),
            Ok(Written::OtherRequest) => {
                // The record had expired; the payment remembers the first body. Forget the
                // record this request took (it holds the other body's hash): the first body
                // must still replay, from the payment.
                if let Err(e) = self.idempotency.forget(lease.key()).await {
                    tracing::warn!(error = %e, "could not release the key");
                }
                return (Outcome::KeyReused, Problem::key_reused().response());
            }
            Err(e) => {
                tracing::error!(error = %DisplayErrorContext(&e), "could not store the payment; the key stays retryable");
                if let Err(store) = self
                    .idempotency
                    .fail(lease, "payments table unavailable")
                    .await
                {
                    tracing::warn!(error = %store, "could not record the failure");
                }
                return (
                    Outcome::Unavailable,
                    Problem::unavailable("the payments table is unavailable").response(),
                );
            }
        };
        let stored = accepted_response(&payment_id);
        let json = serde_json::to_string(&stored).expect("serializable");
        if let Err(e) = self.idempotency.complete(lease, Some(&json)).await {
            // The payment is stored: answer 201. A retry after the lease finds the payment
            // and replays from it.
            tracing::error!(error = %e, "payment stored but its key not completed");
        }
        tracing::info!(payment_id, "payment accepted");
        (outcome, stored_response(&stored, replayed))
    }

    /// A key whose record holds another fingerprint: `422`, unless its payment is this request's
    /// from an older payments-api ([`fingerprint::is_of`]), which replays.
    async fn reused(
        &self,
        scoped_key: &str,
        hash: &str,
        payment: &NewPayment,
    ) -> (Outcome, Response<Body>) {
        let reused = (Outcome::KeyReused, Problem::key_reused().response());
        if payment.account_named {
            return reused;
        }
        let payment_id = payment_id(scoped_key);
        match self.read_payment(&payment_id).await {
            Ok(Some(stored)) if fingerprint::is_of(&stored, payment, hash) => {
                tracing::info!("replaying a payment stored with the body's fingerprint alone");
                (
                    Outcome::Replayed,
                    stored_response(&accepted_response(&payment_id), true),
                )
            }
            Ok(_) => reused,
            Err(e) => {
                tracing::error!(error = %DisplayErrorContext(&e), "GetItem failed");
                (
                    Outcome::Unavailable,
                    Problem::unavailable("the payments table is unavailable").response(),
                )
            }
        }
    }

    /// The payment's write, with its number in its account's order ([`payments_model::order`]):
    /// one update taking the account's next number (an `ADD`, which concurrent payments of the
    /// account never refuse), then one transaction of the payment (on condition that no payment
    /// has its id) and the number's item (on condition that the number has none: payment-processor
    /// may have voided it). On a conflict over the id, the stored payment's fingerprint tells a
    /// retry from a reuse; a voided number takes another.
    async fn write(
        &self,
        payment_id: &str,
        hash: &str,
        payment: &NewPayment,
        caller: &Caller,
    ) -> Result<Written, aws_sdk_dynamodb::Error> {
        let put = |sequence| {
            let put = Put::builder()
                .table_name(&self.payments_table)
                .set_item(Some(payment_item(
                    payment_id, hash, payment, caller, sequence,
                )))
                .condition_expression("attribute_not_exists(paymentId)")
                .build()
                .expect("table and item are set");
            TransactWriteItem::builder().put(put).build()
        };
        // A payment already stored under this key (its record expired) is answered from the
        // payment, before a number of the account is taken: a refused write would leave the
        // number without a payment, a gap payment-processor must pass over, and a client
        // repeating such a request (answered 422 each time) would leave one gap per request.
        // The key's lease keeps any other request with this key out meanwhile.
        if let Some(stored) = self.read_payment(payment_id).await? {
            return Ok(same_or_other(&stored, payment, hash));
        }
        let account = payment.account_id.as_str();
        match order::append(
            &self.dynamodb,
            &self.accounts_table,
            account,
            payment_id,
            put,
        )
        .await?
        {
            order::Appended::Numbered(_) => Ok(Written::New),
            // Written meanwhile by a request whose lease had ended.
            order::Appended::Refused => Ok(self
                .read_payment(payment_id)
                .await?
                .map_or(Written::OtherRequest, |stored| {
                    same_or_other(&stored, payment, hash)
                })),
        }
    }

    /// A payment item, strongly consistent.
    pub(crate) async fn read_payment(
        &self,
        payment_id: &str,
    ) -> Result<Option<Item>, aws_sdk_dynamodb::Error> {
        Ok(self
            .dynamodb
            .get_item()
            .table_name(&self.payments_table)
            .key("paymentId", AttributeValue::S(payment_id.to_owned()))
            .consistent_read(true)
            .send()
            .await?
            .item)
    }

    /// A payment of the caller's account ([`representation::payment`]); any other is a 404, as
    /// if it did not exist. With `Prefer: wait`, read again until it is final or the wait ends.
    async fn get(
        &self,
        payment_id: &str,
        caller: &Caller,
        preference: Option<WaitPreference>,
    ) -> (Outcome, Response<Body>) {
        let not_found = || {
            (
                Outcome::NotFound,
                Problem::not_found(format!("no payment `{payment_id}`")).response(),
            )
        };
        if payment_id.is_empty()
            || payment_id.len() > 64
            || !payment_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return not_found();
        }
        let item = match self.read_owned(payment_id, caller).await {
            Ok(Some(item)) => item,
            Ok(None) => return not_found(),
            Err(e) => {
                tracing::error!(error = %aws_sdk_dynamodb::error::DisplayErrorContext(&e), "GetItem failed");
                return (
                    Outcome::Unavailable,
                    Problem::unavailable("the payments table is unavailable").response(),
                );
            }
        };
        let response = match preference {
            Some(preference) => self.waited(payment_id, caller, item, preference).await,
            None => json_response(StatusCode::OK, representation::payment(payment_id, &item)),
        };
        (Outcome::Found, response)
    }

    /// A payment item if it is of the caller's account.
    pub(crate) async fn read_owned(
        &self,
        payment_id: &str,
        caller: &Caller,
    ) -> Result<Option<Item>, aws_sdk_dynamodb::Error> {
        Ok(self.read_payment(payment_id).await?.filter(|i| {
            i.get("accountId")
                .and_then(|v| v.as_s().ok())
                .map(String::as_str)
                == Some(caller.account.as_str())
        }))
    }
}

/// The payment id of a caller-scoped Idempotency-Key ([`Caller::scoped_key`]): a retry of the
/// same request gets the same id, so its conditional write finds the payment it wrote before.
pub fn payment_id(key: &str) -> String {
    format!(
        "pay_{}",
        &PayloadHash::raw(format!("payments-api\n{key}").as_bytes()).as_str()[..32]
    )
}

/// The payment item payments-api writes: `accepted`, number `sequence` of its account.
fn payment_item(
    payment_id: &str,
    hash: &str,
    payment: &NewPayment,
    caller: &Caller,
    sequence: u64,
) -> HashMap<String, AttributeValue> {
    let s = |v: &str| AttributeValue::S(v.to_owned());
    let now = AttributeValue::N(SystemClock.now_ms().to_string());
    let mut item = HashMap::from([
        ("paymentId".to_owned(), s(payment_id)),
        ("accountId".to_owned(), s(payment.account_id.as_str())),
        (
            "amountCents".to_owned(),
            AttributeValue::N(payment.amount_cents.to_string()),
        ),
        ("currency".to_owned(), s(&payment.currency)),
        ("status".to_owned(), s(PaymentStatus::Accepted.as_str())),
        ("createdAt".to_owned(), now.clone()),
        (lifecycle::ACCEPTED_AT.to_owned(), now),
        ("callerId".to_owned(), s(&caller.id)),
        ("requestHash".to_owned(), s(hash)),
        (
            "sequence".to_owned(),
            AttributeValue::N(sequence.to_string()),
        ),
        // In the reconciler's index of payments waiting to be charged.
        (
            lifecycle::ACCEPTED_SHARD.to_owned(),
            s(&lifecycle::shard(payment_id)),
        ),
    ]);
    if let Some(d) = &payment.description {
        item.insert("description".to_owned(), s(d));
    }
    item
}

/// The two routes.
enum Route<'a> {
    Payments,
    Payment(&'a str),
}

fn accepted_response(payment_id: &str) -> StoredResponse {
    StoredResponse {
        status: 201,
        location: format!("/payments/{payment_id}"),
        body: representation::created(payment_id, PaymentStatus::Accepted.as_str()),
    }
}

pub(crate) fn json_response(status: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn stored_response(stored: &StoredResponse, replayed: bool) -> Response<Body> {
    let mut response = json_response(
        StatusCode::from_u16(stored.status).unwrap_or(StatusCode::CREATED),
        stored.body.clone(),
    );
    let headers = response.headers_mut();
    if let Ok(location) = HeaderValue::from_str(&stored.location) {
        headers.insert(header::LOCATION, location);
    }
    if replayed {
        headers.insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    }
    response
}

/// Whether a stored payment is of the request `payment` with fingerprint `hash`
/// ([`Written::SameRequest`]) or another one under its key ([`Written::OtherRequest`]).
fn same_or_other(stored: &Item, payment: &NewPayment, hash: &str) -> Written {
    if fingerprint::is_of(stored, payment, hash) {
        Written::SameRequest
    } else {
        Written::OtherRequest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(max: Option<&str>) -> Result<Config, ConfigError> {
        let mut settings = HashMap::from([
            ("IDEMPOTENCY_TABLE".to_owned(), "idem".to_owned()),
            ("PAYMENTS_TABLE".to_owned(), "payments".to_owned()),
            ("ACCOUNTS_TABLE".to_owned(), "accounts".to_owned()),
        ]);
        if let Some(v) = max {
            settings.insert("MAX_PAYMENT_AMOUNT".to_owned(), v.to_owned());
        }
        Config::from_settings(&settings)
    }

    #[test]
    fn the_payment_limit_is_read_with_a_default() {
        assert_eq!(config(None).unwrap().max_payment_amount, 1_000_000);
        assert_eq!(config(Some("")).unwrap().max_payment_amount, 1_000_000);
        assert_eq!(config(Some("250")).unwrap().max_payment_amount, 250);
        assert_eq!(config(Some("1")).unwrap().max_payment_amount, 1);
        for bad in ["0", "-5", "1.5", "1e6", "lots"] {
            match config(Some(bad)) {
                Err(ConfigError::Invalid { name, reason }) => {
                    assert_eq!(name, "MAX_PAYMENT_AMOUNT");
                    assert!(reason.contains(&format!("`{bad}`")), "{reason}");
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }
}
