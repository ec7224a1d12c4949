//! Helpers of the gateway tests: an HTTP client and one call.
#![allow(dead_code)]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

pub fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

pub async fn call(
    client: &HttpClient,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, http::HeaderMap, Bytes) {
    let mut request = http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = client
        .request(
            request
                .body(Full::new(Bytes::copy_from_slice(body)))
                .unwrap(),
        )
        .await
        .expect("the gateway answers");
    let (parts, body) = response.into_parts();
    (
        parts.status.as_u16(),
        parts.headers,
        body.collect().await.unwrap().to_bytes(),
    )
}

/// The body and headers of an answer API Gateway makes itself, checked against its shape.
pub fn assert_gateway_answer(
    (status, headers, body): &(u16, http::HeaderMap, Bytes),
    expected_status: u16,
    message: &str,
) {
    assert_eq!(*status, expected_status, "{body:?}");
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(
        serde_json::from_slice::<Value>(body).unwrap(),
        json!({ "message": message })
    );
    assert!(headers.contains_key("apigw-requestid"));
}
