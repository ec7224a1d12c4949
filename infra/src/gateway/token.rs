//! Unsigned JWTs for local tests and demos: what [`JwtAuthorizer`](super::JwtAuthorizer)
//! accepts, since the local gateway does not verify signatures. Real JWT libraries refuse
//! `alg: none`, so the header says `RS256` (with `kid: local`) and the signature segment is a
//! placeholder; no real API Gateway accepts these tokens.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use serde_json::{Map, Value, json};

use super::jwt::BASE64URL;

/// The header of the tokens minted here.
const HEADER: &str = r#"{"alg":"RS256","typ":"JWT","kid":"local"}"#;

/// The placeholder signature segment.
const SIGNATURE: &[u8] = b"local-aws: unsigned";

/// A test token for `sub` from `issuer` to `audience`, issued now and valid for `ttl`, with
/// `extra_claims` added as string claims (replacing the standard ones of the same name).
///
/// ```
/// use std::time::Duration;
/// use local_aws::gateway::test_token;
///
/// let token = test_token("https://issuer.example.com/", "payments-api", "alice",
///     &[("scope", "payments/write")], Duration::from_secs(300));
/// assert_eq!(token.split('.').count(), 3);
/// // curl -H "Authorization: Bearer $token" http://127.0.0.1:PORT/payments
/// ```
pub fn test_token(
    issuer: &str,
    audience: &str,
    sub: &str,
    extra_claims: &[(&str, &str)],
    ttl: Duration,
) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let mut claims = Map::new();
    claims.insert("iss".into(), json!(issuer));
    claims.insert("aud".into(), json!(audience));
    claims.insert("sub".into(), json!(sub));
    claims.insert("iat".into(), json!(now.as_secs()));
    claims.insert("exp".into(), json!((now + ttl).as_secs()));
    claims.insert("jti".into(), json!(uuid::Uuid::new_v4().to_string()));
    for (name, value) in extra_claims {
        claims.insert((*name).to_owned(), json!(value));
    }
    unsigned_token(&Value::Object(claims))
}

/// A token carrying exactly `claims` (any JSON: non-string claims, expired or missing times),
/// with the same header and placeholder signature as [`test_token`].
///
/// ```
/// use local_aws::gateway::unsigned_token;
///
/// let token = unsigned_token(&serde_json::json!({"iss": "i", "aud": "a", "exp": 0, "groups": ["x"]}));
/// assert!(token.starts_with("eyJ"));
/// ```
pub fn unsigned_token(claims: &Value) -> String {
    let header: Value = serde_json::from_str(HEADER).expect("the header is JSON");
    unsigned_token_with_header(&header, claims)
}

/// A token with `header` and `claims` (tests of the header checks).
pub(crate) fn unsigned_token_with_header(header: &Value, claims: &Value) -> String {
    format!(
        "{}.{}.{}",
        BASE64URL.encode(header.to_string()),
        BASE64URL.encode(claims.to_string()),
        BASE64URL.encode(SIGNATURE)
    )
}
