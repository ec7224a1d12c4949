//! A small HTTP/1.1 client for the local API, calling as a caller with a local test token (the
//! local gateway checks its issuer, audience, expiry and the route's scopes as API Gateway's JWT
//! authorizer would).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use local_aws::template::Template;

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
    /// `Allow`.
    pub allow: Option<String>,
    /// `Preference-Applied` (RFC 7240).
    pub preference_applied: Option<String>,
}

/// Who the tokens come from: the JWT authorizer's issuer and an accepted audience, and the
/// scopes they grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenIssuer {
    /// `iss`.
    pub issuer: String,
    /// `aud`.
    pub audience: String,
    /// `scope`: space-separated scopes (none when empty).
    pub scope: String,
}

impl TokenIssuer {
    /// The template's `JwtIssuer`, first `JwtAudience`, and both `WriteScope` and `ReadScope`
    /// (a caller that may charge and read).
    pub fn from_template(template: &Template) -> Self {
        let parameter = |name: &str| template.parameter(name).unwrap_or_default().to_owned();
        let audience = parameter("JwtAudience");
        Self {
            issuer: parameter("JwtIssuer"),
            audience: audience
                .split(',')
                .next()
                .unwrap_or_default()
                .trim()
                .to_owned(),
            scope: format!("{} {}", parameter("WriteScope"), parameter("ReadScope"))
                .trim()
                .to_owned(),
        }
    }

    /// A token for `sub` with `scope` (none when empty), valid for `ttl`.
    pub fn token(&self, sub: &str, scope: &str, ttl: Duration) -> String {
        let claims: &[(&str, &str)] = if scope.is_empty() {
            &[]
        } else {
            &[("scope", scope)]
        };
        local_aws::gateway::test_token(&self.issuer, &self.audience, sub, claims, ttl)
    }
}

/// A client of one base URL, calling as one caller (or none).
#[derive(Debug, Clone)]
pub struct HttpClient {
    base: String,
    client: Client<HttpConnector, Full<Bytes>>,
    issuer: Option<TokenIssuer>,
    token: Option<String>,
}

impl HttpClient {
    /// A client of `base` (`http://127.0.0.1:PORT`) with no identity: see
    /// [`with_issuer`](Self::with_issuer) and [`as_caller`](Self::as_caller).
    pub fn new(base: impl Into<String>) -> Self {
        Self {
            base: base.into().trim_end_matches('/').to_owned(),
            client: Client::builder(TokioExecutor::new()).build_http(),
            issuer: None,
            token: None,
        }
    }

    /// The same client for another base URL.
    pub fn with_base(mut self, base: impl Into<String>) -> Self {
        self.base = base.into().trim_end_matches('/').to_owned();
        self
    }

    /// Mints its tokens for this issuer and audience.
    pub fn with_issuer(mut self, issuer: TokenIssuer) -> Self {
        self.issuer = Some(issuer);
        self
    }

    /// The same client calling as `sub`, whose account (the `sub` claim, the template's
    /// default `AccountClaim`) is `sub` too, with the issuer's scopes.
    pub fn as_caller(&self, sub: &str) -> Self {
        let scope = self
            .issuer
            .as_ref()
            .map(|i| i.scope.clone())
            .unwrap_or_default();
        self.as_caller_with_scope(sub, &scope)
    }

    /// [`as_caller`](Self::as_caller) with a token granting only `scope` (space-separated;
    /// none when empty).
    pub fn as_caller_with_scope(&self, sub: &str, scope: &str) -> Self {
        let mut client = self.clone();
        client.token = self
            .issuer
            .as_ref()
            .map(|i| i.token(sub, scope, Duration::from_secs(3600)));
        client
    }

    /// The same client with this `Authorization` token (or none).
    pub fn with_token(mut self, token: Option<String>) -> Self {
        self.token = token;
        self
    }

    /// `POST /payments` with an optional Idempotency-Key.
    pub async fn post_payment(&self, key: Option<&str>, body: &str) -> Result<Answer, String> {
        self.post_raw(key, Some("application/json"), body.as_bytes().to_vec())
            .await
    }

    /// `POST /payments` with any content type and body.
    pub async fn post_raw(
        &self,
        key: Option<&str>,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> Result<Answer, String> {
        let mut headers = Vec::new();
        if let Some(key) = key {
            headers.push(("idempotency-key", key));
        }
        if let Some(ct) = content_type {
            headers.push(("content-type", ct));
        }
        self.request("POST", "/payments", &headers, body).await
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Result<Answer, String> {
        self.request("GET", path, &[], Vec::new()).await
    }

    /// Any request, with the caller's token.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Result<Answer, String> {
        let mut request = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(Full::new(Bytes::from(body)))
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
        let allow = header("allow");
        let preference_applied = header("preference-applied");
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
            allow,
            preference_applied,
        })
    }
}
