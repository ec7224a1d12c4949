//! Errors as `application/problem+json` (RFC 9457).

use lambda_http::http::{HeaderValue, StatusCode, header};
use lambda_http::{Body, Response};
use serde::Serialize;

/// A problem detail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// A URI reference naming the kind of problem.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Short summary of the kind.
    pub title: &'static str,
    /// The HTTP status.
    pub status: u16,
    /// What went wrong with this request.
    pub detail: String,
    /// The request field at fault, for invalid input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<&'static str>,
    /// Seconds after which a retry may succeed (also sent as `Retry-After`).
    #[serde(skip_serializing)]
    pub retry_after: Option<u64>,
}

impl Problem {
    /// 400: an invalid field of the body or the Idempotency-Key header.
    pub fn invalid(field: &'static str, detail: impl Into<String>) -> Self {
        Self {
            kind: "/problems/invalid-request",
            title: "Invalid request",
            status: 400,
            detail: detail.into(),
            field: Some(field),
            retry_after: None,
        }
    }

    /// 400: the Idempotency-Key header is missing or invalid.
    pub fn invalid_key(detail: impl Into<String>) -> Self {
        Self {
            kind: "/problems/invalid-idempotency-key",
            title: "Missing or invalid Idempotency-Key",
            status: 400,
            detail: detail.into(),
            field: Some("Idempotency-Key"),
            retry_after: None,
        }
    }

    /// 409: the first request with this key is still in progress.
    pub fn in_progress(retry_after: u64) -> Self {
        Self {
            kind: "/problems/request-in-progress",
            title: "A request with this Idempotency-Key is in progress",
            status: 409,
            detail: format!(
                "the first request with this key has not finished; retry in {retry_after} s"
            ),
            field: None,
            retry_after: Some(retry_after),
        }
    }

    /// 422: the key was used with another body.
    pub fn key_reused() -> Self {
        Self {
            kind: "/problems/idempotency-key-reused",
            title: "Idempotency-Key reused with a different body",
            status: 422,
            detail: "this Idempotency-Key was already used with a different request body".into(),
            field: Some("Idempotency-Key"),
            retry_after: None,
        }
    }

    /// 503: a dependency failed; the same request may be retried with the same key.
    pub fn unavailable(detail: impl Into<String>) -> Self {
        Self {
            kind: "/problems/temporarily-unavailable",
            title: "Temporarily unavailable",
            status: 503,
            detail: detail.into(),
            field: None,
            retry_after: Some(1),
        }
    }

    /// 404.
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self {
            kind: "/problems/not-found",
            title: "Not found",
            status: 404,
            detail: detail.into(),
            field: None,
            retry_after: None,
        }
    }

    /// 405.
    pub fn method_not_allowed(allowed: &str) -> Self {
        Self {
            kind: "/problems/method-not-allowed",
            title: "Method not allowed",
            status: 405,
            detail: format!("allowed: {allowed}"),
            field: None,
            retry_after: None,
        }
    }

    /// The HTTP response.
    pub fn response(&self) -> Response<Body> {
        let mut response = Response::new(Body::from(
            serde_json::to_string(self).expect("serializable"),
        ));
        *response.status_mut() =
            StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(seconds) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}
