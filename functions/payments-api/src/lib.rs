//! payments-api: `POST /payments` with a required `Idempotency-Key` header, and
//! `GET /payments/{paymentId}`. Follows the IETF draft "The Idempotency-Key HTTP Header Field";
//! errors are `application/problem+json` (RFC 9457).
//!
//! - The first request with a key stores the payment as `accepted`, publishes it to
//!   `payments.fifo` (group = account, deduplication id derived from the key) and answers `201`
//!   with `{paymentId, status}`.
//! - A retry with the same key and body replays the stored response byte for byte, with
//!   `Idempotent-Replayed: true`.
//! - The same key with another body: `422`. While the first request runs: `409` with
//!   `Retry-After`.
//! - If publishing fails: `503`, and the key stays retryable; the retry publishes the same
//!   message again (same payment id, same deduplication id), so a send that did reach SQS is not
//!   duplicated.
//!
//! The handler is a plain async method ([`App::handle`]), callable from tests without a runtime.

pub mod problem;
pub mod validate;

use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::AttributeValue;
use lambda_http::http::{HeaderValue, Method, StatusCode, header};
use lambda_http::{Body, Error, Request, RequestExt, Response};
use lambda_idempotency::key::{canonical_hash, sha256_hex};
use lambda_idempotency::metrics::Metrics;
use lambda_idempotency::publish::{DeduplicationId, Message, Publisher};
use lambda_idempotency::record::{Clock, SystemClock};
use lambda_idempotency::store::DynamoDbBackend;
use lambda_idempotency::{AcquireError, Acquired, Idempotency};
use payments_model::{ConfigError, METRICS_NAMESPACE, PaymentRequested, PaymentStatus, Settings};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::problem::Problem;
use crate::validate::NewPayment;

/// Header that marks a replayed response.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// Settings of payments-api.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `IDEMPOTENCY_TABLE`.
    pub idempotency_table: String,
    /// `IDEMPOTENCY_TTL_SECONDS` (default 24 h): how long a key replays its response.
    pub idempotency_ttl: Duration,
    /// `PAYMENTS_TABLE`.
    pub payments_table: String,
    /// `PAYMENTS_QUEUE_URL`.
    pub payments_queue_url: String,
}

impl Config {
    /// Reads the settings.
    pub fn from_settings(settings: &impl Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            idempotency_table: settings.required("IDEMPOTENCY_TABLE")?,
            idempotency_ttl: settings
                .seconds("IDEMPOTENCY_TTL_SECONDS", Duration::from_secs(86_400))?,
            payments_table: settings.required("PAYMENTS_TABLE")?,
            payments_queue_url: settings.required("PAYMENTS_QUEUE_URL")?,
        })
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
    publisher: Publisher,
}

impl App {
    /// An app over these clients.
    pub fn new(
        dynamodb: aws_sdk_dynamodb::Client,
        sqs: aws_sdk_sqs::Client,
        config: Config,
    ) -> Self {
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
            publisher: Publisher::new(sqs, config.payments_queue_url),
        }
    }

    /// An app from the SDK configuration and the settings.
    pub fn from_settings(
        sdk: &aws_config::SdkConfig,
        settings: &impl Settings,
    ) -> Result<Self, ConfigError> {
        Ok(Self::new(
            aws_sdk_dynamodb::Client::new(sdk),
            aws_sdk_sqs::Client::new(sdk),
            Config::from_settings(settings)?,
        ))
    }

    /// Handles one HTTP request (API Gateway HTTP API payload 2.0, or a function URL).
    pub async fn handle(&self, request: Request) -> Result<Response<Body>, Error> {
        let path = match request.raw_http_path() {
            "" => request.uri().path().to_owned(),
            raw => raw.to_owned(),
        };
        let path = path.trim_end_matches('/');
        let response = match (request.method(), path) {
            (&Method::POST, "/payments") => self.create(&request).await,
            (_, "/payments") => Problem::method_not_allowed("POST").response(),
            (&Method::GET, p) if p.starts_with("/payments/") => {
                self.get(&p["/payments/".len()..]).await
            }
            (_, p) if p.starts_with("/payments/") => Problem::method_not_allowed("GET").response(),
            _ => Problem::not_found(format!("no route for {} {path}", request.method())).response(),
        };
        Ok(response)
    }

    async fn create(&self, request: &Request) -> Response<Body> {
        let key = match validate::idempotency_key(
            request
                .headers()
                .get("idempotency-key")
                .map(HeaderValue::as_bytes),
        ) {
            Ok(key) => key,
            Err(problem) => return self.answer("rejected", problem.response()),
        };
        let span = tracing::info_span!("create_payment", idempotency_key = key);
        let _enter = span.enter();
        let payment = match validate::new_payment(request.body().as_ref()) {
            Ok(p) => p,
            Err(problem) => {
                tracing::info!(
                    field = problem.field,
                    detail = problem.detail,
                    "invalid request"
                );
                return self.answer("rejected", problem.response());
            }
        };
        let deadline = request.lambda_context_ref().map(|c| c.deadline());
        let hash = canonical_hash(&payment.json);
        match self.idempotency.acquire_hashed(&key, &hash, deadline).await {
            Ok(Acquired::Started(lease)) => match self.accept(&key, &payment).await {
                Ok(stored) => {
                    let json = serde_json::to_string(&stored).expect("serializable");
                    if let Err(e) = self.idempotency.complete(&lease, Some(&json)).await {
                        // The payment is stored and published: answer 201. A retry after the
                        // lease publishes again with the same deduplication id.
                        tracing::error!(error = %e, "payment accepted but its key not completed");
                    }
                    tracing::info!(payment_id = payment_id(&key), "payment accepted");
                    self.answer("accepted", stored_response(&stored, false))
                }
                Err(e) => {
                    tracing::warn!(error = %e, "payment not accepted; the key stays retryable");
                    if let Err(store) = self.idempotency.fail(&lease, &e.to_string()).await {
                        tracing::warn!(error = %store, "could not record the failure");
                    }
                    self.answer(
                        "unavailable",
                        Problem::unavailable(e.to_string()).response(),
                    )
                }
            },
            Ok(Acquired::Completed { result, .. }) => {
                let stored = match result
                    .as_deref()
                    .map(serde_json::from_str::<StoredResponse>)
                {
                    Some(Ok(stored)) => stored,
                    // Not stored (cannot happen for responses this small) or unreadable: the
                    // response is a function of the key alone, so rebuild it.
                    _ => accepted_response(&payment_id(&key)),
                };
                tracing::info!("replaying the stored response");
                self.answer("replayed", stored_response(&stored, true))
            }
            Ok(Acquired::InProgress { lease_until_ms }) => {
                // The first request usually finishes within milliseconds; its lease (the
                // function's deadline) only bounds the worst case. Suggest a short retry.
                let left_ms = (lease_until_ms - SystemClock.now_ms()).max(0);
                let retry_after = u64::try_from((left_ms + 999) / 1000)
                    .unwrap_or(1)
                    .clamp(1, 2);
                self.answer("in_progress", Problem::in_progress(retry_after).response())
            }
            Err(AcquireError::PayloadMismatch { .. }) => {
                self.answer("key_reused", Problem::key_reused().response())
            }
            Err(AcquireError::Store(e)) => {
                tracing::error!(error = %e, "idempotency store unavailable");
                self.answer(
                    "unavailable",
                    Problem::unavailable("the idempotency store is unavailable").response(),
                )
            }
        }
    }

    /// Stores the payment (once) and publishes it.
    async fn accept(&self, key: &str, payment: &NewPayment) -> Result<StoredResponse, AcceptError> {
        let payment_id = payment_id(key);
        let mut item = vec![
            ("paymentId", AttributeValue::S(payment_id.clone())),
            (
                "accountId",
                AttributeValue::S(payment.account_id.to_string()),
            ),
            (
                "amountCents",
                AttributeValue::N(payment.amount_cents.to_string()),
            ),
            ("currency", AttributeValue::S(payment.currency.clone())),
            (
                "status",
                AttributeValue::S(PaymentStatus::Accepted.as_str().into()),
            ),
            (
                "createdAt",
                AttributeValue::N(SystemClock.now_ms().to_string()),
            ),
        ];
        if let Some(d) = &payment.description {
            item.push(("description", AttributeValue::S(d.clone())));
        }
        let put = self
            .dynamodb
            .put_item()
            .table_name(&self.payments_table)
            .set_item(Some(
                item.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
            ))
            // A retry after a failed publish finds it stored already; never reset its status.
            .condition_expression("attribute_not_exists(paymentId)")
            .send()
            .await;
        match put {
            Ok(_) => {}
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), PutItemError::ConditionalCheckFailedException(_)) => {}
            Err(e) => {
                return Err(AcceptError::Store(
                    aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string(),
                ));
            }
        }
        let body = PaymentRequested {
            payment_id: payment_id.clone(),
            account_id: payment.account_id.to_string(),
            amount_cents: payment.amount_cents,
            currency: payment.currency.clone(),
            description: payment.description.clone(),
        };
        let message = Message::fifo(
            payment.account_id.clone(),
            DeduplicationId::from_key(&payment_id),
            serde_json::to_string(&body).expect("serializable"),
        )
        .map_err(|e| AcceptError::Publish(e.to_string()))?;
        self.publisher
            .send(message)
            .await
            .map_err(|e| AcceptError::Publish(e.to_string()))?;
        Ok(accepted_response(&payment_id))
    }

    async fn get(&self, payment_id: &str) -> Response<Body> {
        if payment_id.is_empty()
            || payment_id.len() > 64
            || !payment_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Problem::not_found(format!("no payment `{payment_id}`")).response();
        }
        let item = match self
            .dynamodb
            .get_item()
            .table_name(&self.payments_table)
            .key("paymentId", AttributeValue::S(payment_id.to_owned()))
            .consistent_read(true)
            .send()
            .await
        {
            Ok(output) => output.item,
            Err(e) => {
                tracing::error!(error = %aws_sdk_dynamodb::error::DisplayErrorContext(&e), "GetItem failed");
                return Problem::unavailable("the payments table is unavailable").response();
            }
        };
        let Some(item) = item else {
            return Problem::not_found(format!("no payment `{payment_id}`")).response();
        };
        let s = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
        let n = |name: &str| {
            item.get(name)
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse::<i64>().ok())
        };
        let body = json!({
            "paymentId": payment_id,
            "accountId": s("accountId"),
            "amountCents": n("amountCents"),
            "currency": s("currency"),
            "description": s("description"),
            "status": s("status"),
        });
        json_response(StatusCode::OK, body.to_string())
    }

    fn answer(&self, outcome: &'static str, response: Response<Body>) -> Response<Body> {
        Metrics::new(METRICS_NAMESPACE)
            .dimension("function", "payments-api")
            .count(outcome, 1)
            .emit();
        response
    }
}

/// Why a payment was not accepted (answered 503, the key stays retryable).
#[derive(Debug, thiserror::Error)]
enum AcceptError {
    #[error("could not store the payment: {0}")]
    Store(String),
    #[error("could not publish the payment: {0}")]
    Publish(String),
}

/// The payment id of an Idempotency-Key: a retry of the same request gets the same id, so a
/// payment published before a failure is not published under another id.
pub fn payment_id(key: &str) -> String {
    format!(
        "pay_{}",
        &sha256_hex(format!("payments-api\n{key}").as_bytes())[..32]
    )
}

fn accepted_response(payment_id: &str) -> StoredResponse {
    StoredResponse {
        status: 201,
        location: format!("/payments/{payment_id}"),
        body: json!({"paymentId": payment_id, "status": PaymentStatus::Accepted.as_str()})
            .to_string(),
    }
}

fn json_response(status: StatusCode, body: String) -> Response<Body> {
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
