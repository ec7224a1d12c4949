//! An HTTP endpoint that honours the `Idempotency-Key` header (IETF draft "The Idempotency-Key
//! HTTP Header Field"), built on the library's [`Idempotency`] engine: `POST /orders` with
//! `{"item": "...", "quantity": n}` creates an order once per key.
//!
//! | request | answer |
//! | --- | --- |
//! | a new key | the order is created: `201 {"orderId", "item", "quantity"}`, stored under the key |
//! | the same key and body again | the stored response, byte for byte, with `Idempotent-Replayed: true` |
//! | the same key while the first request runs | `409` with `Retry-After` |
//! | the same key with another body | `422` |
//! | no key, or a malformed one ([`key::KeyError`]) | `400` naming what is wrong |
//!
//! [`Idempotency::run`] does the bookkeeping: it takes the key (one conditional write, which
//! also finds a completed, running or differently used key), creates the order, and stores the
//! response as the key's result. The payload it compares is the order re-serialized
//! ([`NewOrder::fingerprint`]), so whitespace or field order do not make another request.
//!
//! A real API would scope keys to the caller (prefix the key with the caller's identity), as
//! the project's `functions/payments-api` does. [`App::handle`] is a plain async method: the
//! tests call it with the sample request.

pub mod key;

use aws_sdk_dynamodb::types::AttributeValue;
use lambda_http::http::{HeaderValue, Method, StatusCode, header};
use lambda_http::{Body, Error, Request, RequestExt, Response};
use lambda_idempotency::store::DynamoDbBackend;
use lambda_idempotency::{Idempotency, Outcome, RunError};
use serde::{Deserialize, Serialize};

/// The header that marks a replayed response.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// The body of `POST /orders`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewOrder {
    /// What is ordered.
    pub item: String,
    /// How many.
    pub quantity: u32,
}

impl NewOrder {
    /// What the idempotency record compares: the order re-serialized, fields in a fixed order.
    pub fn fingerprint(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("an order serializes")
    }
}

/// The response stored under a key, and replayed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Stored {
    status: u16,
    body: String,
}

/// Why the function cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A required environment variable is not set.
    #[error("the environment variable {0} is not set (it names a DynamoDB table)")]
    Missing(&'static str),
}

/// The function's settings, from its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `IDEMPOTENCY_TABLE`: the idempotency records (string key `id`, TTL on `expiration`).
    pub idempotency_table: String,
    /// `ORDERS_TABLE`: the orders (string key `orderId`).
    pub orders_table: String,
}

impl Config {
    /// Reads `IDEMPOTENCY_TABLE` and `ORDERS_TABLE`.
    pub fn from_env() -> Result<Self, ConfigError> {
        let var = |name| std::env::var(name).map_err(|_| ConfigError::Missing(name));
        Ok(Self {
            idempotency_table: var("IDEMPOTENCY_TABLE")?,
            orders_table: var("ORDERS_TABLE")?,
        })
    }
}

/// The function's state, built once per execution environment.
#[derive(Debug, Clone)]
pub struct App {
    engine: Idempotency<DynamoDbBackend>,
    dynamodb: aws_sdk_dynamodb::Client,
    orders_table: String,
}

impl App {
    /// The app over the SDK configuration `sdk`.
    pub fn new(sdk: &aws_config::SdkConfig, config: Config) -> Self {
        let dynamodb = aws_sdk_dynamodb::Client::new(sdk);
        let backend = DynamoDbBackend::new(dynamodb.clone(), config.idempotency_table);
        Self {
            engine: Idempotency::new(backend).with_key_prefix("http-idempotency-key"),
            dynamodb,
            orders_table: config.orders_table,
        }
    }

    /// The idempotency engine (the tests hold a key with it, as a first request still running
    /// would).
    pub fn engine(&self) -> &Idempotency<DynamoDbBackend> {
        &self.engine
    }

    /// Handles one HTTP request.
    pub async fn handle(&self, request: Request) -> Result<Response<Body>, Error> {
        if request.method() != Method::POST {
            let mut response = problem(StatusCode::METHOD_NOT_ALLOWED, "only POST is allowed");
            let allow = HeaderValue::from_static("POST");
            response.headers_mut().insert(header::ALLOW, allow);
            return Ok(response);
        }
        let key = match key::idempotency_key(request.headers()) {
            Ok(key) => key,
            Err(e) => return Ok(problem(StatusCode::BAD_REQUEST, &e.to_string())),
        };
        let order: NewOrder = match serde_json::from_slice(request.body()) {
            Ok(order) => order,
            Err(e) => {
                let detail = format!("the body is not an order: {e}");
                return Ok(problem(StatusCode::BAD_REQUEST, &detail));
            }
        };
        // The first request holds the key until the function's deadline at most.
        let deadline = request
            .lambda_context_ref()
            .and_then(lambda_idempotency::time::Deadline::of);
        let create = || self.create(&order);
        let outcome = self
            .engine
            .run(key, &order.fingerprint(), deadline, create)
            .await;
        Ok(match outcome {
            Ok(Outcome::Ran(stored) | Outcome::RanNotRecorded(stored)) => stored.response(false),
            Ok(Outcome::Duplicate(Some(stored))) => stored.response(true),
            Ok(Outcome::Duplicate(None)) | Err(RunError::StoredResult { .. }) => {
                tracing::error!(key, "the key's stored response is missing or unreadable");
                problem(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the stored response is lost",
                )
            }
            Err(RunError::InProgress { .. }) => {
                let detail = "a request with this Idempotency-Key is in progress; retry shortly";
                let mut response = problem(StatusCode::CONFLICT, detail);
                let retry_after = HeaderValue::from_static("1");
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, retry_after);
                response
            }
            Err(RunError::PayloadMismatch { .. }) => problem(
                StatusCode::UNPROCESSABLE_ENTITY,
                "this Idempotency-Key was already used with another request body",
            ),
            Err(RunError::Failed(e)) => {
                tracing::error!(key, error = %e, "the order was not stored; the key may be retried");
                let detail = "the order could not be stored; retry with the same Idempotency-Key";
                problem(StatusCode::SERVICE_UNAVAILABLE, detail)
            }
            Err(RunError::Store(e)) => {
                tracing::error!(key, error = %e, "the idempotency store failed");
                let detail = "the idempotency store is unavailable; retry with the same key";
                problem(StatusCode::SERVICE_UNAVAILABLE, detail)
            }
        })
    }

    /// The effect: stores a new order under a fresh id. Returns the response to give (and to
    /// replay).
    async fn create(&self, order: &NewOrder) -> Result<Stored, aws_sdk_dynamodb::Error> {
        let order_id = uuid::Uuid::new_v4().to_string();
        self.dynamodb
            .put_item()
            .table_name(&self.orders_table)
            .item("orderId", AttributeValue::S(order_id.clone()))
            .item("item", AttributeValue::S(order.item.clone()))
            .item("quantity", AttributeValue::N(order.quantity.to_string()))
            .send()
            .await?;
        tracing::info!(order_id, "order created");
        let body = serde_json::json!({
            "orderId": order_id,
            "item": order.item,
            "quantity": order.quantity,
        });
        Ok(Stored {
            status: StatusCode::CREATED.as_u16(),
            body: body.to_string(),
        })
    }
}

impl Stored {
    fn response(&self, replayed: bool) -> Response<Body> {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::OK);
        let mut response = with_body(status, "application/json", self.body.clone());
        if replayed {
            let true_ = HeaderValue::from_static("true");
            response.headers_mut().insert(REPLAYED_HEADER, true_);
        }
        response
    }
}

/// An error response, `application/problem+json` (RFC 9457).
fn problem(status: StatusCode, detail: &str) -> Response<Body> {
    let body = serde_json::json!({
        "title": status.canonical_reason(),
        "status": status.as_u16(),
        "detail": detail,
    });
    with_body(status, "application/problem+json", body.to_string())
}

fn with_body(status: StatusCode, content_type: &'static str, body: String) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    let content_type = HeaderValue::from_static(content_type);
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, content_type);
    response
}
