//! The answers API Gateway (HTTP API) gives on its own, without the function's response:
//! `{"message":"…"}` bodies with `content-type: application/json`.
//!
//! | Case | Status | Body |
//! |---|---|---|
//! | no route matches | 404 | `{"message":"Not Found"}` |
//! | JWT authorizer refuses the token | 401 | `{"message":"Unauthorized"}`, plus `www-authenticate` |
//! | token lacks the route's authorization scopes | 403 | `{"message":"Forbidden"}` |
//! | the event is over Lambda's 6 MB | 413 | `{"message":"Request Too Long"}` |
//! | the route's throttling refuses the request | 429 | `{"message":"Too Many Requests"}` |
//! | the function errors, panics or times out | 500 | `{"message":"Internal Server Error"}` |
//! | Lambda throttles the function (its reserved concurrency is in use) | 500 | `{"message":"Internal Server Error"}` |
//! | the integration timeout (30 s) passes first | 503 | `{"message":"Service Unavailable"}` |
//!
//! Sources: the 404, 401 (with `www-authenticate: Bearer scope="" error="invalid_token"
//! error_description="…"`) and 500 shapes are in the API Gateway developer guide (HTTP API
//! troubleshooting pages); a function timeout below the integration timeout is a function error
//! (Lambda reports `Task timed out`), hence 500, and the integration timeout itself is 503. The
//! 413 body is what API Gateway was observed to send when Lambda rejects an oversized invoke
//! (`RequestEntityTooLargeException`); that observation was on a REST API, and HTTP API's wording
//! is not documented. The 429 is API Gateway's throttling answer
//! (<https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-throttling.html>);
//! a throttled invocation is a 500 like any invocation Lambda rejects
//! (<https://docs.aws.amazon.com/lambda/latest/dg/services-apigateway-errors.html>: "If the Lambda
//! API rejects the invocation request, API Gateway returns a 500 error code"), with an HTTP
//! API's body.

use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use http_body_util::Full;

use super::jwt::JwtError;

/// A response API Gateway makes itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// No route matches the method and path.
    NotFound,
    /// The JWT authorizer refused the request (401, or 403 for missing scopes).
    Refused(JwtError),
    /// The invocation payload is over Lambda's limit.
    RequestTooLong,
    /// The route's throttling refused the request.
    TooManyRequests,
    /// Lambda throttled the invocation (`TooManyRequestsException`): the function is at its
    /// reserved concurrency.
    FunctionThrottled,
    /// The function failed: error, panic, or its own timeout.
    InternalServerError,
    /// The integration timeout passed before the function answered.
    ServiceUnavailable,
}

impl Answer {
    /// The status API Gateway answers with.
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::Refused(e) => e.status(),
            Self::RequestTooLong => StatusCode::PAYLOAD_TOO_LARGE,
            Self::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
            Self::InternalServerError | Self::FunctionThrottled => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            Self::ServiceUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn message(&self) -> &'static str {
        match self {
            Self::NotFound => "Not Found",
            Self::Refused(e) if e.status() == StatusCode::FORBIDDEN => "Forbidden",
            Self::Refused(_) => "Unauthorized",
            Self::RequestTooLong => "Request Too Long",
            Self::TooManyRequests => "Too Many Requests",
            Self::InternalServerError | Self::FunctionThrottled => "Internal Server Error",
            Self::ServiceUnavailable => "Service Unavailable",
        }
    }

    /// The HTTP response.
    pub(crate) fn into_response(self) -> http::Response<Full<Bytes>> {
        let body = serde_json::json!({ "message": self.message() }).to_string();
        let mut response = http::Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = self.status();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Self::Refused(e) = &self
            && let Some(challenge) = e.www_authenticate()
            && let Ok(value) = HeaderValue::from_str(&challenge)
        {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn headers_json() -> http::HeaderMap {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers
    }

    async fn body(answer: Answer) -> (StatusCode, http::HeaderMap, String) {
        let (parts, body) = answer.into_response().into_parts();
        let bytes = body.collect().await.unwrap().to_bytes();
        (
            parts.status,
            parts.headers,
            String::from_utf8(bytes.to_vec()).unwrap(),
        )
    }

    #[tokio::test]
    async fn shaped_like_api_gateway() {
        let (status, headers, text) = body(Answer::InternalServerError).await;
        assert_eq!(status, 500);
        assert_eq!(headers[header::CONTENT_TYPE], "application/json");
        assert_eq!(text, r#"{"message":"Internal Server Error"}"#);

        let (status, headers, text) = body(Answer::Refused(JwtError::Audience)).await;
        assert_eq!(status, 401);
        assert_eq!(text, r#"{"message":"Unauthorized"}"#);
        assert_eq!(
            headers[header::WWW_AUTHENTICATE],
            r#"Bearer scope="" error="invalid_token" error_description="the token does not have a valid audience""#
        );

        let (status, headers, _) = body(Answer::Refused(JwtError::Missing)).await;
        assert_eq!(status, 401);
        assert_eq!(headers[header::WWW_AUTHENTICATE], "Bearer");

        let (status, headers, text) = body(Answer::Refused(JwtError::Scope)).await;
        assert_eq!(
            (status, text.as_str()),
            (StatusCode::FORBIDDEN, r#"{"message":"Forbidden"}"#)
        );
        assert!(!headers.contains_key(header::WWW_AUTHENTICATE));

        assert_eq!(body(Answer::NotFound).await.2, r#"{"message":"Not Found"}"#);
        assert_eq!(
            body(Answer::RequestTooLong).await.0,
            StatusCode::PAYLOAD_TOO_LARGE
        );
        assert_eq!(
            body(Answer::TooManyRequests).await,
            (
                StatusCode::TOO_MANY_REQUESTS,
                headers_json(),
                r#"{"message":"Too Many Requests"}"#.to_owned()
            )
        );
        assert_eq!(
            body(Answer::FunctionThrottled).await.2,
            r#"{"message":"Internal Server Error"}"#
        );
        assert_eq!(
            body(Answer::ServiceUnavailable).await.2,
            r#"{"message":"Service Unavailable"}"#
        );
    }
}
