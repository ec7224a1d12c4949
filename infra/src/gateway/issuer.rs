//! The local token issuer: one RS256 key, made when first used and never written anywhere, its
//! JWKS (what an OpenID Connect issuer publishes at its `jwks_uri`, and what API Gateway's JWT
//! authorizer verifies signatures against), and signed tokens.
//!
//! Every [`JwtAuthorizer`](super::JwtAuthorizer) trusts [`LocalIssuer::local`]'s keys unless
//! given others ([`JwtAuthorizer::with_keys`](super::JwtAuthorizer::with_keys)), so the tokens of
//! [`test_token`](super::test_token) pass in the same process and a token whose claims were edited
//! does not. Another process mints tokens from [`serve`]'s `/token`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::LazyLock;

use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::rsa::{KeyPair, KeySize};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use jsonwebtoken::jwk::{Jwk, JwkSet, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, EncodingKey};
use serde_json::{Value, json};

use super::jwt::BASE64URL;

/// The process's local issuer (see [`LocalIssuer::local`]).
static LOCAL: LazyLock<LocalIssuer> = LazyLock::new(|| LocalIssuer::generate("local"));

/// Why an issuer could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IssuerError {
    /// aws-lc-rs could not generate or encode the RSA key.
    #[error("cannot make the issuer's RSA key: {0}")]
    Key(String),
    /// jsonwebtoken refused the key.
    #[error("cannot use the issuer's RSA key: {0}")]
    Jwt(#[from] jsonwebtoken::errors::Error),
}

/// An issuer's RSA key pair (RS256) and its key id.
///
/// ```
/// use local_aws::gateway::LocalIssuer;
///
/// let issuer = LocalIssuer::local();
/// let token = issuer.sign(&serde_json::json!({"sub": "alice"}));
/// assert_eq!(token.split('.').count(), 3);
/// assert_eq!(issuer.jwks().keys[0].common.key_id.as_deref(), Some("local"));
/// ```
#[derive(Clone)]
pub struct LocalIssuer {
    kid: String,
    key: EncodingKey,
    jwks: JwkSet,
}

impl std::fmt::Debug for LocalIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalIssuer")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

impl LocalIssuer {
    /// The process's issuer, key id `local`: what [`test_token`](super::test_token) signs with
    /// and what an authorizer trusts by default.
    pub fn local() -> &'static Self {
        &LOCAL
    }

    /// A new issuer with a fresh 2048-bit key (another key id, or the same one with another key:
    /// a token it signs fails an authorizer that trusts only [`local`](Self::local)).
    ///
    /// # Panics
    ///
    /// If aws-lc-rs cannot generate an RSA key (see [`try_generate`](Self::try_generate)).
    pub fn generate(kid: &str) -> Self {
        Self::try_generate(kid).expect("an RSA key can be generated")
    }

    /// [`generate`](Self::generate), with its error.
    pub fn try_generate(kid: &str) -> Result<Self, IssuerError> {
        let pair =
            KeyPair::generate(KeySize::Rsa2048).map_err(|e| IssuerError::Key(e.to_string()))?;
        let der = pair.as_der().map_err(|e| IssuerError::Key(e.to_string()))?;
        let pem = pem_lines("PRIVATE KEY", der.as_ref());
        let key = EncodingKey::from_rsa_pem(pem.as_bytes())?;
        let mut jwk = Jwk::from_encoding_key(&key, Algorithm::RS256)?;
        jwk.common.key_id = Some(kid.to_owned());
        jwk.common.public_key_use = Some(PublicKeyUse::Signature);
        jwk.common.key_algorithm = Some(KeyAlgorithm::RS256);
        Ok(Self {
            kid: kid.to_owned(),
            key,
            jwks: JwkSet { keys: vec![jwk] },
        })
    }

    /// Its public keys, as its `jwks_uri` would serve them.
    pub fn jwks(&self) -> &JwkSet {
        &self.jwks
    }

    /// A compact JWS of `claims`: header `{"alg":"RS256","typ":"JWT","kid":…}`, signed.
    pub fn sign(&self, claims: &Value) -> String {
        self.sign_with_header(
            &json!({"alg": "RS256", "typ": "JWT", "kid": self.kid}),
            claims,
        )
    }

    /// `header` and `claims` signed with RS256 whatever the header says (tests of the
    /// authorizer's header checks: `alg: none`, another algorithm, no `kid`).
    pub fn sign_with_header(&self, header: &Value, claims: &Value) -> String {
        let input = format!(
            "{}.{}",
            BASE64URL.encode(header.to_string()),
            BASE64URL.encode(claims.to_string())
        );
        let signature = jsonwebtoken::crypto::sign(input.as_bytes(), &self.key, Algorithm::RS256)
            .expect("the issuer's own RSA key signs");
        format!("{input}.{signature}")
    }
}

/// DER as PEM: base64 in lines of 64 between the `label`'s armour.
fn pem_lines(label: &str, der: &[u8]) -> String {
    let body = STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in body.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// The claims of a token minted at `/token` from its query: `sub` (default `alice`), `aud`,
/// `ttl` in seconds (default 3600), `scope`, and any other parameter as a string claim (e.g. an
/// account claim other than `sub`).
pub(crate) fn claims_from_query(
    issuer: &str,
    default_audience: &str,
    query: &HashMap<String, String>,
    now: u64,
) -> Result<Value, String> {
    let ttl: u64 = match query.get("ttl") {
        None => 3600,
        Some(ttl) => ttl
            .parse()
            .map_err(|_| format!("ttl must be a number of seconds, not {ttl:?}"))?,
    };
    let mut claims = serde_json::Map::new();
    for (name, value) in query {
        if name != "ttl" {
            claims.insert(name.clone(), json!(value));
        }
    }
    claims.insert("iss".into(), json!(issuer));
    claims
        .entry("aud")
        .or_insert_with(|| json!(default_audience));
    claims.entry("sub").or_insert_with(|| json!("alice"));
    claims.insert("iat".into(), json!(now));
    claims.insert("exp".into(), json!(now + ttl));
    claims.insert("jti".into(), json!(uuid::Uuid::new_v4().to_string()));
    Ok(Value::Object(claims))
}

/// A running issuer endpoint; see [`serve`].
pub struct IssuerServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl IssuerServer {
    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for IssuerServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves [`LocalIssuer::local`] on `addr` (port 0: a free one) for other processes, as
/// `make up-ministack`'s issuer does:
///
/// - `GET /.well-known/jwks.json`: its public keys;
/// - `GET /token?sub=bob&scope=payments/read&ttl=600`: a token from `issuer` to `audience`
///   (or `aud=`), signed; any other parameter becomes a string claim. 400 names a bad `ttl`.
///
/// Local only: anyone who can reach the port can mint a token.
pub async fn serve(
    addr: SocketAddr,
    issuer: String,
    audience: String,
) -> std::io::Result<IssuerServer> {
    use http_body_util::Full;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;

    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (issuer, audience) = (issuer.clone(), audience.clone());
            let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let (status, content_type, body) = answer(&issuer, &audience, request.uri());
                let response = hyper::Response::builder()
                    .status(status)
                    .header(http::header::CONTENT_TYPE, content_type)
                    .body(Full::new(bytes::Bytes::from(body)));
                async move { response }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(IssuerServer { addr, task })
}

fn answer(issuer: &str, audience: &str, uri: &http::Uri) -> (u16, &'static str, String) {
    match uri.path() {
        "/.well-known/jwks.json" => (
            200,
            "application/json",
            serde_json::to_string(LocalIssuer::local().jwks()).unwrap_or_default(),
        ),
        "/token" => {
            let query: HashMap<String, String> =
                form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
                    .into_owned()
                    .collect();
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs();
            match claims_from_query(issuer, audience, &query, now) {
                Ok(claims) => (200, "text/plain", LocalIssuer::local().sign(&claims)),
                Err(e) => (400, "text/plain", e),
            }
        }
        _ => (
            404,
            "text/plain",
            "not found: /token or /.well-known/jwks.json".to_owned(),
        ),
    }
}
