//! Invoking the handler as Lambda and API Gateway would: on its own task (a panic stays in the
//! invocation), within the function's timeout, under API Gateway's integration timeout. A
//! failure becomes API Gateway's answer, and its real cause a log line.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use lambda_http::{Body, IntoResponse};

use super::answer::Answer;

/// The time limits of one invocation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// The function's `Timeout`.
    pub(crate) function: Duration,
    /// API Gateway's integration timeout.
    pub(crate) integration: Duration,
}

/// Runs `invocation` (holding `unit` of the function's reserved concurrency) and returns the function's response, or API Gateway's answer when it
/// errors or panics (500), runs past its timeout (500: Lambda reports `Task timed out`, a
/// function error), or past the integration timeout first (503; the function keeps running
/// until its own timeout, as on AWS).
pub(crate) async fn invoke<Fut, R, E>(
    function_name: &str,
    request_id: &str,
    limits: Limits,
    invocation: Fut,
    unit: Option<tokio::sync::OwnedSemaphorePermit>,
) -> Result<http::Response<Full<Bytes>>, Answer>
where
    Fut: Future<Output = Result<R, E>> + Send + 'static,
    R: IntoResponse + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    // The unit of reserved concurrency is the invocation's until it ends, past the integration
    // timeout too (the function keeps running on AWS).
    let mut task = tokio::spawn(async move {
        let _unit = unit;
        match invocation.await {
            Ok(response) => Ok(response.into_response().await),
            Err(e) => Err(e.to_string()),
        }
    });
    let outcome = tokio::time::timeout(limits.function.min(limits.integration), &mut task).await;
    match outcome {
        Ok(Ok(Ok(response))) => Ok(into_http(response)),
        Ok(Ok(Err(error))) => {
            tracing::error!(function = function_name, request_id, %error, "function error: 500");
            Err(Answer::InternalServerError)
        }
        Ok(Err(join_error)) => {
            let cause = if join_error.is_panic() {
                crate::panic_text(join_error.into_panic())
            } else {
                join_error.to_string()
            };
            tracing::error!(function = function_name, request_id, %cause, "function panicked: 500");
            Err(Answer::InternalServerError)
        }
        Err(_) if limits.function < limits.integration => {
            task.abort();
            tracing::error!(
                function = function_name,
                request_id,
                "Task timed out after {:.2} seconds: 500",
                limits.function.as_secs_f64()
            );
            Err(Answer::InternalServerError)
        }
        Err(_) => {
            tracing::error!(
                function = function_name,
                request_id,
                "integration timed out after {:.2} seconds: 503",
                limits.integration.as_secs_f64()
            );
            let rest = limits.function.saturating_sub(limits.integration);
            tokio::spawn(async move {
                if tokio::time::timeout(rest, &mut task).await.is_err() {
                    task.abort();
                }
            });
            Err(Answer::ServiceUnavailable)
        }
    }
}

fn into_http(response: lambda_http::Response<Body>) -> http::Response<Full<Bytes>> {
    let (parts, body) = response.into_parts();
    let bytes = match body {
        Body::Text(t) => Bytes::from(t),
        Body::Binary(b) => Bytes::from(b),
        _ => Bytes::new(),
    };
    http::Response::from_parts(parts, Full::new(bytes))
}
