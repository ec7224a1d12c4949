//! The local API in front of a function served elsewhere (`cargo lambda watch`): the gateway's
//! request, with the context it built (route, JWT claims, request id), goes back into the HTTP
//! API's event (payload format 2.0), is sent through the Invoke API, and the function's answer
//! comes back as the HTTP response, as API Gateway does with a Lambda integration.

use std::time::SystemTime;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use lambda_http::aws_lambda_events::apigw::ApiGatewayV2httpRequest;
use lambda_http::request::RequestContext;
use lambda_http::{Body, RequestExt};
use local_aws::runner::{Invocation, Invoker};

/// Why a request could not be forwarded (the gateway answers `500`, as API Gateway does when an
/// integration fails).
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// The function could not be invoked, or failed.
    #[error(transparent)]
    Invoke(#[from] local_aws::runner::InvokeError),
    /// The function's answer is not an HTTP API response.
    #[error("the function's answer is not an HTTP API response: {0}")]
    Response(String),
}

/// The HTTP API event (payload format 2.0) of `request`.
pub fn event(request: &lambda_http::Request) -> ApiGatewayV2httpRequest {
    let mut event = ApiGatewayV2httpRequest::default();
    event.version = Some("2.0".to_owned());
    event.raw_path = Some(request.raw_http_path().to_owned());
    event.raw_query_string = Some(request.uri().query().unwrap_or_default().to_owned());
    event.headers = request.headers().clone();
    event.query_string_parameters = request.query_string_parameters();
    event.path_parameters = request
        .path_parameters()
        .iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    if let Some(RequestContext::ApiGatewayV2(context)) = request.request_context_ref() {
        event.route_key = context.route_key.clone();
        event.request_context = context.clone();
    }
    (event.body, event.is_base64_encoded) = match request.body() {
        Body::Empty => (None, false),
        Body::Text(text) => (Some(text.clone()), false),
        Body::Binary(bytes) => (Some(STANDARD.encode(bytes)), true),
        _ => (None, false),
    };
    event
}

/// The HTTP response of the function's answer (payload format 2.0: a `statusCode`, `headers`,
/// `cookies`, `body` and `isBase64Encoded`; JSON without a `statusCode` is a `200` with that JSON
/// as its body, as API Gateway reads it).
pub fn response(answer: &[u8]) -> Result<http::Response<Body>, ForwardError> {
    let bad = |what: &str| ForwardError::Response(what.to_owned());
    let answer: serde_json::Value =
        serde_json::from_slice(answer).map_err(|e| ForwardError::Response(e.to_string()))?;
    let Some(status) = answer.get("statusCode") else {
        return http::Response::builder()
            .status(200)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Body::Text(answer.to_string()))
            .map_err(|e| ForwardError::Response(e.to_string()));
    };
    let status = status
        .as_u64()
        .and_then(|s| u16::try_from(s).ok())
        .ok_or_else(|| bad("`statusCode` is not an HTTP status"))?;
    let mut response = http::Response::builder().status(status);
    for (name, value) in answer["headers"].as_object().into_iter().flatten() {
        let value = value
            .as_str()
            .ok_or_else(|| bad("a header's value is not a string"))?;
        response = response.header(name, value);
    }
    for cookie in answer["cookies"].as_array().into_iter().flatten() {
        let cookie = cookie
            .as_str()
            .ok_or_else(|| bad("a cookie is not a string"))?;
        response = response.header(http::header::SET_COOKIE, cookie);
    }
    let body = match answer["body"].as_str() {
        None => Body::Empty,
        Some(text) if answer["isBase64Encoded"].as_bool() == Some(true) => Body::Binary(
            STANDARD
                .decode(text)
                .map_err(|e| ForwardError::Response(format!("body: {e}")))?,
        ),
        Some(text) => Body::Text(text.to_owned()),
    };
    response
        .body(body)
        .map_err(|e| ForwardError::Response(e.to_string()))
}

/// Sends `request` to `function` (its cargo binary) through `invoker` and returns its response.
pub async fn forward(
    invoker: &impl Invoker,
    function: &local_aws::template::Function,
    function_arn: String,
    request: lambda_http::Request,
) -> Result<http::Response<Body>, ForwardError> {
    let context = request.lambda_context_ref().cloned();
    let payload = serde_json::to_value(event(&request))
        .map_err(|e| ForwardError::Response(format!("event: {e}")))?;
    let invocation = Invocation {
        function_name: function.name.clone(),
        binary: function.binary.clone(),
        function_arn,
        memory_size: function.memory_size,
        request_id: context.as_ref().map_or_else(
            || uuid::Uuid::new_v4().to_string(),
            |c| c.request_id.clone(),
        ),
        deadline: SystemTime::now() + function.timeout(),
        payload,
    };
    response(&invoker.invoke(invocation).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_goes_back_into_its_event() {
        let request = http::Request::post("http://127.0.0.1:3000/payments?x=1")
            .header("idempotency-key", "k-1")
            .body(Body::Text(r#"{"amountCents":1}"#.to_owned()))
            .unwrap();
        let event = event(&lambda_http::Request::from(request));
        assert_eq!(event.version.as_deref(), Some("2.0"));
        assert_eq!(event.raw_query_string.as_deref(), Some("x=1"));
        assert_eq!(event.headers["idempotency-key"], "k-1");
        assert_eq!(event.body.as_deref(), Some(r#"{"amountCents":1}"#));
        assert!(!event.is_base64_encoded);
    }

    #[test]
    fn an_answer_becomes_the_response() {
        let answer = serde_json::json!({
            "statusCode": 201,
            "headers": {"content-type": "application/json"},
            "body": "{\"paymentId\":\"p-1\"}",
            "isBase64Encoded": false,
        });
        let response = response(answer.to_string().as_bytes()).unwrap();
        assert_eq!(response.status(), 201);
        assert_eq!(response.headers()["content-type"], "application/json");
        assert_eq!(
            response.body(),
            &Body::Text("{\"paymentId\":\"p-1\"}".to_owned())
        );

        let binary =
            serde_json::json!({"statusCode": 200, "body": "AAE=", "isBase64Encoded": true});
        let response = super::response(binary.to_string().as_bytes()).unwrap();
        assert_eq!(response.body(), &Body::Binary(vec![0, 1]));

        let plain = super::response(br#"{"ok":true}"#).unwrap();
        assert_eq!(plain.status(), 200);
        assert!(matches!(
            super::response(br#"{"statusCode": "x"}"#),
            Err(ForwardError::Response(_))
        ));
        assert!(matches!(
            super::response(b"not json"),
            Err(ForwardError::Response(_))
        ));
    }
}
