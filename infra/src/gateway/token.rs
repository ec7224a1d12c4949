//! Tokens for local tests and demos, signed by the process's [`LocalIssuer`]: what a
//! [`JwtAuthorizer`](super::JwtAuthorizer) trusting that issuer's keys (the default) accepts. No
//! real API Gateway accepts them: its authorizer trusts only its issuer's published keys.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use super::LocalIssuer;

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
    signed_token(&Value::Object(claims))
}

/// A token carrying exactly `claims` (any JSON: non-string claims, expired or missing times),
/// signed by [`LocalIssuer::local`] like [`test_token`]'s.
///
/// ```
/// use local_aws::gateway::signed_token;
///
/// let token = signed_token(&serde_json::json!({"iss": "i", "aud": "a", "exp": 0, "groups": ["x"]}));
/// assert!(token.starts_with("eyJ"));
/// ```
pub fn signed_token(claims: &Value) -> String {
    LocalIssuer::local().sign(claims)
}
