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
    /// Other response headers (`Allow`, `Accept-Post`, `WWW-Authenticate`).
    #[serde(skip_serializing)]
    pub headers: Vec<(&'static str, &'static str)>,
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
            headers: Vec::new(),
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
            headers: Vec::new(),
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
            headers: Vec::new(),
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
            headers: Vec::new(),
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
            headers: Vec::new(),
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
            headers: Vec::new(),
        }
    }

    /// 405, with `Allow`.
    pub fn method_not_allowed(method: &str, allowed: &'static str) -> Self {
        Self {
            kind: "/problems/method-not-allowed",
            title: "Method not allowed",
            status: 405,
            detail: format!("{method} is not allowed here; allowed: {allowed}"),
            field: None,
            retry_after: None,
            headers: vec![("allow", allowed)],
        }
    }

    /// 401: no verified caller.
    pub fn unauthorized(detail: impl Into<String>) -> Self {
        Self {
            kind: "/problems/unauthorized",
            title: "Unauthorized",
            status: 401,
            detail: detail.into(),
            field: None,
            retry_after: None,
            headers: vec![("www-authenticate", "Bearer")],
        }
    }

    /// 403: the caller may not do this (charge another account).
    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self {
            kind: "/problems/forbidden",
            title: "Forbidden",
            status: 403,
            detail: detail.into(),
            field: Some("accountId"),
            retry_after: None,
            headers: Vec::new(),
        }
    }

    /// 413: the body is over `limit` bytes (it was not parsed).
    pub fn too_large(size: usize, limit: usize) -> Self {
        Self {
            kind: "/problems/body-too-large",
            title: "Request body too large",
            status: 413,
            detail: format!("the body is {size} bytes; at most {limit} are accepted"),
            field: Some("body"),
            retry_after: None,
            headers: Vec::new(),
        }
    }

    /// 415: the body is not JSON.
    pub fn unsupported_media_type(content_type: Option<&str>) -> Self {
        Self {
            kind: "/problems/unsupported-media-type",
            title: "Unsupported media type",
            status: 415,
            detail: match content_type {
                Some(ct) => format!("Content-Type `{ct}` is not accepted; send application/json"),
                None => "the Content-Type header is missing; send application/json".to_owned(),
            },
            field: Some("Content-Type"),
            retry_after: None,
            headers: vec![("accept-post", "application/json")],
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
        for (name, value) in &self.headers {
            headers.insert(*name, HeaderValue::from_static(value));
        }
        response
    }
}
