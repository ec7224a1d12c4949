//! A small HTTP/1.1 client for the local API.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// One answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// The body, as text.
    pub body: String,
    /// `Idempotent-Replayed: true` was set.
    pub replayed: bool,
    /// `Retry-After`, in seconds.
    pub retry_after: Option<u64>,
    /// `Content-Type`.
    pub content_type: Option<String>,
}

/// A client of one base URL.
#[derive(Debug, Clone)]
pub struct HttpClient {
    base: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl HttpClient {
    /// A client of `base` (`http://127.0.0.1:PORT`).
    pub fn new(base: impl Into<String>) -> Self {
        Self {
            base: base.into().trim_end_matches('/').to_owned(),
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// `POST /payments` with an optional Idempotency-Key.
    pub async fn post_payment(&self, key: Option<&str>, body: &str) -> Result<Answer, String> {
        let mut request = http::Request::post(format!("{}/payments", self.base))
            .header("content-type", "application/json");
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        self.send(
            request
                .body(Full::new(Bytes::copy_from_slice(body.as_bytes())))
                .map_err(|e| e.to_string())?,
        )
        .await
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Result<Answer, String> {
        let request = http::Request::get(format!("{}{path}", self.base))
            .body(Full::new(Bytes::new()))
            .map_err(|e| e.to_string())?;
        self.send(request).await
    }

    async fn send(&self, request: http::Request<Full<Bytes>>) -> Result<Answer, String> {
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let replayed = header("idempotent-replayed").as_deref() == Some("true");
        let retry_after = header("retry-after").and_then(|v| v.parse().ok());
        let content_type = header("content-type");
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok(Answer {
            status,
            body: String::from_utf8_lossy(&body).into_owned(),
            replayed,
            retry_after,
            content_type,
        })
    }
}
