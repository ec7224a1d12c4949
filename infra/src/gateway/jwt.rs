//! API Gateway's JWT authorizer for HTTP APIs, emulated with a local issuer's keys.
//!
//! A token's signature is verified against the authorizer's keys (a JWKS, as API Gateway fetches
//! from the issuer's `jwks_uri`): by default those of the process's
//! [`LocalIssuer`](super::LocalIssuer), which signs [`test_token`](super::test_token)'s tokens, so
//! a token whose header or claims were edited, or that another key signed, is refused as API
//! Gateway refuses it. Everything API Gateway checks is checked, in its order (API Gateway
//! developer guide, "Control access to HTTP APIs with JWT authorizers"):
//!
//! 1. the identity source (`Authorization`) holds a token, alone or after `Bearer `;
//! 2. the token decodes: three base64url segments, the first two JSON objects, a signature;
//! 3. the header's `alg` is RSA-based (`RS256`/`RS384`/`RS512`/`PS256`/`PS384`/`PS512`, the only
//!    kind API Gateway supports; `none` is refused) and its `kid` names one of the keys;
//! 4. the signature verifies with that key and the header's `alg`;
//! 5. `iss` is the issuer; `aud` (a string, or an array with one match) or, only when there is
//!    no `aud`, `client_id` is one of the audiences; `exp` is after now; `nbf` and `iat`, when
//!    present, are not after now;
//! 6. when the route has authorization scopes, `scp` or `scope` holds at least one of them.
//!
//! Two choices stricter than what is documented: a token without `exp` is refused (the guide
//! only says `exp` must be in the future), and no clock skew is allowed.
//!
//! A refusal is 401 `{"message":"Unauthorized"}` with a `www-authenticate` challenge naming the
//! reason (403 `{"message":"Forbidden"}` for scopes); see [`JwtError`].

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::alphabet::URL_SAFE;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use http::StatusCode;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey};
use lambda_http::aws_lambda_events::apigw::ApiGatewayRequestAuthorizerJwtDescription;
use serde_json::{Map, Value};

use super::{LocalIssuer, claims};
use crate::template::Template;

/// base64url as JWT libraries read it: padding optional.
pub(crate) const BASE64URL: GeneralPurpose = GeneralPurpose::new(
    &URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The algorithms API Gateway's JWT authorizer accepts: RSA-based ones only.
const RSA_ALGORITHMS: [&str; 6] = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512"];

/// A JWT authorizer: the `JwtConfiguration` of an HTTP API authorizer, plus the route's
/// `AuthorizationScopes`.
///
/// ```
/// use std::time::Duration;
/// use local_aws::gateway::{JwtAuthorizer, test_token};
///
/// let authorizer = JwtAuthorizer::new("https://issuer.example.com/", ["payments-api"]);
/// let token = test_token("https://issuer.example.com/", "payments-api", "alice", &[], Duration::from_secs(60));
/// let jwt = authorizer.authorize(Some(&format!("Bearer {token}"))).unwrap();
/// assert_eq!(jwt.claims["sub"], "alice");
/// assert_eq!(jwt.scopes, None); // no authorization scopes on the route, as on AWS
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JwtAuthorizer {
    /// `JwtConfiguration.issuer`: the exact `iss` a token must carry.
    pub issuer: String,
    /// `JwtConfiguration.audience`: a token's `aud` (or `client_id`) must be one of these.
    pub audiences: Vec<String>,
    /// The scopes of routes that have no `AuthorizationScopes` of their own (a route's own
    /// replace them, as SAM's event-level scopes replace the `DefaultAuthorizer`'s; see
    /// [`HttpRoute::authorization_scopes`](crate::template::HttpRoute::authorization_scopes)).
    /// Empty (the default): no scope check, and the request context's `jwt.scopes` is `None`,
    /// as API Gateway sends it for routes without scopes.
    pub authorization_scopes: Vec<String>,
    /// The issuer's public keys (its JWKS): a token's `kid` picks one, which must verify its
    /// signature. [`LocalIssuer::local`]'s by default.
    pub keys: JwkSet,
}

impl JwtAuthorizer {
    /// An authorizer for `issuer` and `audiences`, trusting [`LocalIssuer::local`]'s keys,
    /// without authorization scopes.
    pub fn new<A: Into<String>>(
        issuer: impl Into<String>,
        audiences: impl IntoIterator<Item = A>,
    ) -> Self {
        Self {
            issuer: issuer.into(),
            audiences: audiences.into_iter().map(Into::into).collect(),
            authorization_scopes: Vec::new(),
            keys: LocalIssuer::local().jwks().clone(),
        }
    }

    /// Trusts `keys` (an issuer's JWKS) instead of the local issuer's.
    pub fn with_keys(mut self, keys: JwkSet) -> Self {
        self.keys = keys;
        self
    }

    /// An authorizer configured from two template parameters: the issuer and a comma-delimited
    /// list of audiences (as `JwtConfiguration: {issuer: !Ref P1, audience: !Ref P2}` does).
    /// `None` if either parameter is missing or has no value.
    ///
    /// ```
    /// use local_aws::gateway::JwtAuthorizer;
    /// use local_aws::template::{Template, TemplateOptions};
    ///
    /// let template = Template::load_project(&TemplateOptions::default()).unwrap();
    /// let authorizer = JwtAuthorizer::from_parameters(&template, "JwtIssuer", "JwtAudience").unwrap();
    /// assert_eq!(authorizer.audiences, ["payments-api"]);
    /// ```
    pub fn from_parameters(template: &Template, issuer: &str, audiences: &str) -> Option<Self> {
        let issuer = template.parameter(issuer)?;
        let audiences = template.parameter(audiences)?;
        Some(Self::new(
            issuer,
            audiences
                .split(',')
                .map(str::trim)
                .filter(|a| !a.is_empty()),
        ))
    }

    /// The template's JWT authorizer `name` (an HTTP API's, as [`HttpRoute::authorizer`]
    /// names it); `None` if the template has none of that name.
    ///
    /// ```
    /// use local_aws::gateway::JwtAuthorizer;
    /// use local_aws::template::{Template, TemplateOptions};
    ///
    /// let template = Template::load_project(&TemplateOptions::default()).unwrap();
    /// let authorizer = JwtAuthorizer::from_template(&template, "PaymentsJwt").unwrap();
    /// assert_eq!(
    ///     Some(authorizer),
    ///     JwtAuthorizer::from_parameters(&template, "JwtIssuer", "JwtAudience"),
    /// );
    /// ```
    ///
    /// [`HttpRoute::authorizer`]: crate::template::HttpRoute::authorizer
    pub fn from_template(template: &Template, name: &str) -> Option<Self> {
        let jwt = template.jwt_authorizers.get(name)?;
        Some(Self::new(&jwt.issuer, jwt.audiences.iter().cloned()))
    }

    /// Requires one of `scopes` in the token's `scp`/`scope` (a route's `AuthorizationScopes`).
    pub fn with_authorization_scopes<S: Into<String>>(
        mut self,
        scopes: impl IntoIterator<Item = S>,
    ) -> Self {
        self.authorization_scopes = scopes.into_iter().map(Into::into).collect();
        self
    }

    /// Checks the `Authorization` header's value now; see [`authorize_at`](Self::authorize_at).
    pub fn authorize(
        &self,
        authorization: Option<&str>,
    ) -> Result<ApiGatewayRequestAuthorizerJwtDescription, JwtError> {
        self.authorize_at(authorization, SystemTime::now())
    }

    /// Checks the `Authorization` header's value at `now` and returns what API Gateway puts in
    /// `requestContext.authorizer.jwt`: every claim as a string (the [module
    /// documentation](super#claims-in-the-request-context) says how non-string claims are
    /// written), and `scopes` when the route has authorization scopes.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use local_aws::gateway::{JwtAuthorizer, JwtError, test_token};
    ///
    /// let authorizer = JwtAuthorizer::new("https://issuer.example.com/", ["payments-api"]);
    /// let token = test_token("https://issuer.example.com/", "payments-api", "alice", &[], Duration::from_secs(60));
    /// let later = SystemTime::now() + Duration::from_secs(120);
    /// assert_eq!(authorizer.authorize_at(Some(&token), later), Err(JwtError::Expired));
    /// assert_eq!(authorizer.authorize_at(None, later), Err(JwtError::Missing));
    /// ```
    pub fn authorize_at(
        &self,
        authorization: Option<&str>,
        now: SystemTime,
    ) -> Result<ApiGatewayRequestAuthorizerJwtDescription, JwtError> {
        self.authorize_route_at(authorization, &[], now)
    }

    /// [`authorize_at`](Self::authorize_at) for a route with `route_scopes` (its
    /// `AuthorizationScopes`; empty: the authorizer's own): the token must carry at least one of
    /// them in `scp` or `scope`, else [`JwtError::Scope`] (403).
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use local_aws::gateway::{JwtAuthorizer, JwtError, test_token};
    ///
    /// let authorizer = JwtAuthorizer::new("https://issuer.example.com/", ["payments-api"]);
    /// let token = test_token("https://issuer.example.com/", "payments-api", "alice",
    ///     &[("scope", "payments/read")], Duration::from_secs(60));
    /// let write = ["payments/write".to_owned()];
    /// let now = SystemTime::now();
    /// assert_eq!(authorizer.authorize_route_at(Some(&token), &write, now), Err(JwtError::Scope));
    /// let read = ["payments/read".to_owned()];
    /// assert!(authorizer.authorize_route_at(Some(&token), &read, now).is_ok());
    /// ```
    pub fn authorize_route_at(
        &self,
        authorization: Option<&str>,
        route_scopes: &[String],
        now: SystemTime,
    ) -> Result<ApiGatewayRequestAuthorizerJwtDescription, JwtError> {
        let required = if route_scopes.is_empty() {
            &self.authorization_scopes
        } else {
            route_scopes
        };
        let token = authorization
            .map(|value| value.strip_prefix("Bearer ").unwrap_or(value).trim())
            .filter(|token| !token.is_empty())
            .ok_or(JwtError::Missing)?;
        let (header, claims) = decode(token)?;
        let (algorithm, kid) = check_header(&header)?;
        self.check_signature(token, algorithm, kid)?;
        self.check_claims(&claims, now)?;
        let scopes = if required.is_empty() {
            None
        } else {
            let granted = claims::scopes(&claims).unwrap_or_default();
            if !granted.iter().any(|s| required.contains(s)) {
                return Err(JwtError::Scope);
            }
            Some(granted)
        };
        let mut jwt = ApiGatewayRequestAuthorizerJwtDescription::default();
        jwt.claims = claims::stringify(&claims);
        jwt.scopes = scopes;
        Ok(jwt)
    }

    /// The token's signature, verified with the key named by `kid` and the header's algorithm.
    fn check_signature(
        &self,
        token: &str,
        algorithm: Algorithm,
        kid: &str,
    ) -> Result<(), JwtError> {
        let jwk = self.keys.find(kid).ok_or(JwtError::UnknownKey)?;
        let key = DecodingKey::from_jwk(jwk).map_err(|_| JwtError::UnknownKey)?;
        let (input, signature) = token.rsplit_once('.').ok_or(JwtError::Segments)?;
        match jsonwebtoken::crypto::verify(signature, input.as_bytes(), &key, algorithm) {
            Ok(true) => Ok(()),
            _ => Err(JwtError::Signature),
        }
    }

    fn check_claims(&self, claims: &Map<String, Value>, now: SystemTime) -> Result<(), JwtError> {
        if claims.get("iss").and_then(Value::as_str) != Some(self.issuer.as_str()) {
            return Err(JwtError::Issuer);
        }
        let valid = |v: &Value| {
            v.as_str()
                .is_some_and(|a| self.audiences.iter().any(|x| x == a))
        };
        let audience_ok = match claims.get("aud") {
            Some(Value::Array(auds)) => auds.iter().any(valid),
            Some(aud) => valid(aud),
            None => claims.get("client_id").is_some_and(valid),
        };
        if !audience_ok {
            return Err(JwtError::Audience);
        }
        let now = now
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        let time = |name: &str| -> Result<Option<f64>, JwtError> {
            match claims.get(name) {
                None => Ok(None),
                Some(v) => v.as_f64().map(Some).ok_or(JwtError::Claim(name.to_owned())),
            }
        };
        match time("exp")? {
            None => return Err(JwtError::MissingExpiry),
            Some(exp) if exp <= now => return Err(JwtError::Expired),
            Some(_) => {}
        }
        if time("nbf")?.is_some_and(|nbf| nbf > now) {
            return Err(JwtError::NotYetValid);
        }
        if time("iat")?.is_some_and(|iat| iat > now) {
            return Err(JwtError::IssuedInFuture);
        }
        Ok(())
    }
}

/// Why the JWT authorizer refused a request. `Display` is the `error_description` of the
/// `www-authenticate` challenge.
///
/// Only two descriptions are API Gateway's own published wording: "the token does not have a
/// valid audience" (developer guide) and "token contains an invalid number of segments"
/// (observed); the others are this emulation's, in the same style. Check a refusal by its
/// status and `error="invalid_token"`, not by the description.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JwtError {
    /// No token in the identity source: the challenge is a bare `Bearer`.
    #[error("no token in the Authorization header")]
    Missing,
    /// Not three dot-separated segments.
    #[error("token contains an invalid number of segments")]
    Segments,
    /// A segment is not base64url, or the header or payload is not a JSON object.
    #[error("the token's {part} is malformed: {reason}")]
    Malformed {
        /// `header`, `payload` or `signature`.
        part: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// `alg` is missing or not an RSA-based algorithm.
    #[error("signing method {0} is invalid")]
    Algorithm(String),
    /// The header has no `kid`, so no issuer key could match.
    #[error("the token has no kid header")]
    KeyId,
    /// None of the issuer's keys has the header's `kid`.
    #[error("the token's kid is not one of the issuer's keys")]
    UnknownKey,
    /// The signature does not verify with the issuer's key: the header or claims were changed
    /// after signing, or another key signed them.
    #[error("the token's signature is invalid")]
    Signature,
    /// `iss` is not the authorizer's issuer.
    #[error("the token does not have a valid issuer")]
    Issuer,
    /// Neither `aud` nor (without `aud`) `client_id` is one of the audiences.
    #[error("the token does not have a valid audience")]
    Audience,
    /// No `exp` claim.
    #[error("the token has no expiration time")]
    MissingExpiry,
    /// `exp` is not after now.
    #[error("the token has expired")]
    Expired,
    /// `nbf` is after now.
    #[error("the token is not valid yet")]
    NotYetValid,
    /// `iat` is after now.
    #[error("the token was issued in the future")]
    IssuedInFuture,
    /// A time claim (`exp`, `nbf`, `iat`) is not a number.
    #[error("the token's {0} claim is not a number")]
    Claim(String),
    /// None of the route's authorization scopes is in `scp`/`scope`: 403, not 401.
    #[error("the token does not have a required scope")]
    Scope,
}

impl JwtError {
    /// 403 for [`Scope`](Self::Scope), 401 otherwise.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Scope => StatusCode::FORBIDDEN,
            _ => StatusCode::UNAUTHORIZED,
        }
    }

    /// The `www-authenticate` value: `Bearer` without a token, `Bearer scope=""
    /// error="invalid_token" error_description="…"` for a refused token (API Gateway's format),
    /// none for missing scopes (API Gateway's challenge there is not documented).
    ///
    /// ```
    /// use local_aws::gateway::JwtError;
    /// assert_eq!(
    ///     JwtError::Expired.www_authenticate().unwrap(),
    ///     r#"Bearer scope="" error="invalid_token" error_description="the token has expired""#,
    /// );
    /// ```
    pub fn www_authenticate(&self) -> Option<String> {
        match self {
            Self::Missing => Some("Bearer".to_owned()),
            Self::Scope => None,
            _ => Some(format!(
                r#"Bearer scope="" error="invalid_token" error_description="{}""#,
                self.to_string().replace(['"', '\\'], "'")
            )),
        }
    }
}

/// A JWT's header and payload (claims).
type Json = Map<String, Value>;

/// Splits and decodes a compact JWS: header and payload as JSON objects, signature present.
fn decode(token: &str) -> Result<(Json, Json), JwtError> {
    let segments: Vec<&str> = token.split('.').collect();
    let [header, payload, signature] = segments[..] else {
        return Err(JwtError::Segments);
    };
    let json = |part: &'static str, segment: &str| -> Result<Json, JwtError> {
        let malformed = |reason: String| JwtError::Malformed { part, reason };
        let bytes = BASE64URL
            .decode(segment)
            .map_err(|e| malformed(e.to_string()))?;
        serde_json::from_slice(&bytes).map_err(|e| malformed(e.to_string()))
    };
    let header = json("header", header)?;
    let payload = json("payload", payload)?;
    match BASE64URL.decode(signature) {
        Ok(bytes) if !bytes.is_empty() => Ok((header, payload)),
        Ok(_) => Err(JwtError::Malformed {
            part: "signature",
            reason: "empty".to_owned(),
        }),
        Err(e) => Err(JwtError::Malformed {
            part: "signature",
            reason: e.to_string(),
        }),
    }
}

/// The header's algorithm (RSA-based only) and key id.
fn check_header(header: &Map<String, Value>) -> Result<(Algorithm, &str), JwtError> {
    let algorithm = match header.get("alg") {
        Some(Value::String(alg)) if RSA_ALGORITHMS.contains(&alg.as_str()) => alg
            .parse::<Algorithm>()
            .map_err(|_| JwtError::Algorithm(alg.clone()))?,
        Some(Value::String(alg)) => return Err(JwtError::Algorithm(alg.clone())),
        Some(other) => return Err(JwtError::Algorithm(other.to_string())),
        None => return Err(JwtError::Algorithm("(none)".to_owned())),
    };
    match header.get("kid") {
        Some(Value::String(kid)) if !kid.is_empty() => Ok((algorithm, kid)),
        _ => Err(JwtError::KeyId),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::gateway::LocalIssuer;
    use crate::gateway::token::signed_token;

    const ISS: &str = "https://issuer.example.com/";

    fn authorizer() -> JwtAuthorizer {
        JwtAuthorizer::new(ISS, ["payments-api", "other"])
    }

    fn now() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    fn check(claims: Value) -> Result<ApiGatewayRequestAuthorizerJwtDescription, JwtError> {
        authorizer().authorize(Some(&signed_token(&claims)))
    }

    #[test]
    fn token_with_or_without_bearer() {
        let token = signed_token(&json!({"iss": ISS, "aud": "payments-api", "exp": now() + 60}));
        assert!(authorizer().authorize(Some(&token)).is_ok());
        assert!(
            authorizer()
                .authorize(Some(&format!("Bearer {token}")))
                .is_ok()
        );
        assert_eq!(authorizer().authorize(None), Err(JwtError::Missing));
        assert_eq!(
            authorizer().authorize(Some("Bearer ")),
            Err(JwtError::Missing)
        );
        assert_eq!(
            authorizer().authorize(Some("Bearer not-a-token")),
            Err(JwtError::Segments)
        );
        assert!(matches!(
            authorizer().authorize(Some("a.b.c")),
            Err(JwtError::Malformed { part: "header", .. })
        ));
    }

    #[test]
    fn audience_from_aud_or_client_id() {
        let exp = now() + 60;
        assert!(check(json!({"iss": ISS, "aud": ["x", "other"], "exp": exp})).is_ok());
        assert_eq!(
            check(json!({"iss": ISS, "aud": ["x"], "exp": exp})),
            Err(JwtError::Audience)
        );
        assert!(check(json!({"iss": ISS, "client_id": "payments-api", "exp": exp})).is_ok());
        // With an `aud`, `client_id` is not looked at.
        assert_eq!(
            check(json!({"iss": ISS, "aud": "x", "client_id": "payments-api", "exp": exp})),
            Err(JwtError::Audience)
        );
        assert_eq!(
            check(json!({"iss": "https://evil/", "aud": "payments-api", "exp": exp})),
            Err(JwtError::Issuer)
        );
    }

    #[test]
    fn times() {
        let base = json!({"iss": ISS, "aud": "payments-api"});
        let with = |extra: Value| {
            let mut claims = base.clone();
            claims
                .as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            check(claims)
        };
        assert_eq!(with(json!({})), Err(JwtError::MissingExpiry));
        assert_eq!(with(json!({"exp": now() - 1})), Err(JwtError::Expired));
        assert_eq!(
            with(json!({"exp": now() + 60, "nbf": now() + 30})),
            Err(JwtError::NotYetValid)
        );
        assert_eq!(
            with(json!({"exp": now() + 60, "iat": now() + 30})),
            Err(JwtError::IssuedInFuture)
        );
        assert_eq!(
            with(json!({"exp": "tomorrow"})),
            Err(JwtError::Claim("exp".into()))
        );
        assert!(with(json!({"exp": now() + 60, "nbf": now(), "iat": now()})).is_ok());
        let later = SystemTime::now() + Duration::from_secs(120);
        let token = signed_token(&json!({"iss": ISS, "aud": "other", "exp": now() + 60}));
        assert_eq!(
            authorizer().authorize_at(Some(&token), later),
            Err(JwtError::Expired)
        );
    }

    #[test]
    fn header_needs_an_rsa_alg_a_kid_and_a_signature() {
        let claims = json!({"iss": ISS, "aud": "payments-api", "exp": now() + 60});
        let token = |header: Value| LocalIssuer::local().sign_with_header(&header, &claims);
        let a = authorizer();
        assert!(
            a.authorize(Some(&token(json!({"alg": "RS256", "kid": "local"}))))
                .is_ok()
        );
        // PS384 is an algorithm API Gateway takes; this RS256 signature does not verify with it.
        assert_eq!(
            a.authorize(Some(&token(json!({"alg": "PS384", "kid": "local"})))),
            Err(JwtError::Signature)
        );
        assert_eq!(
            a.authorize(Some(&token(json!({"alg": "RS256", "kid": "k"})))),
            Err(JwtError::UnknownKey)
        );
        assert_eq!(
            a.authorize(Some(&token(json!({"alg": "HS256", "kid": "k"})))),
            Err(JwtError::Algorithm("HS256".into()))
        );
        assert_eq!(
            a.authorize(Some(&token(json!({"alg": "none", "kid": "k"})))),
            Err(JwtError::Algorithm("none".into()))
        );
        assert_eq!(
            a.authorize(Some(&token(json!({"kid": "k"})))),
            Err(JwtError::Algorithm("(none)".into()))
        );
        assert_eq!(
            a.authorize(Some(&token(json!({"alg": "RS256"})))),
            Err(JwtError::KeyId)
        );
        let good = token(json!({"alg": "RS256", "kid": "local"}));
        let unsigned = &good[..good.rfind('.').unwrap() + 1];
        assert!(matches!(
            a.authorize(Some(unsigned)),
            Err(JwtError::Malformed {
                part: "signature",
                ..
            })
        ));
    }

    #[test]
    fn scopes_only_for_routes_with_authorization_scopes() {
        let exp = now() + 60;
        let claims = json!({"iss": ISS, "aud": "payments-api", "exp": exp, "scope": "payments/read payments/write"});
        assert_eq!(check(claims.clone()).unwrap().scopes, None);
        let scoped = authorizer().with_authorization_scopes(["payments/write"]);
        let jwt = scoped.authorize(Some(&signed_token(&claims))).unwrap();
        assert_eq!(jwt.scopes.unwrap(), ["payments/read", "payments/write"]);
        let claims =
            json!({"iss": ISS, "aud": "payments-api", "exp": exp, "scp": ["payments/read"]});
        let refused = scoped.authorize(Some(&signed_token(&claims)));
        assert_eq!(refused, Err(JwtError::Scope));
        assert_eq!(refused.unwrap_err().status(), StatusCode::FORBIDDEN);
    }

    #[test]
    fn challenge_quotes_are_kept_out() {
        let challenge = JwtError::Algorithm("a\"b".into())
            .www_authenticate()
            .unwrap();
        assert!(challenge.ends_with(r#"error_description="signing method a'b is invalid""#));
    }

    #[test]
    fn the_signature_is_verified_against_the_issuer_s_keys() {
        let claims = json!({"iss": ISS, "aud": "payments-api", "sub": "alice", "exp": now() + 60});
        let token = signed_token(&claims);
        assert!(authorizer().authorize(Some(&token)).is_ok());

        // The claims edited after signing (header and signature kept).
        let (header, _) = token.split_once('.').unwrap();
        let signature = token.rsplit('.').next().unwrap();
        let mut edited = claims.clone();
        edited["sub"] = json!("mallory");
        let forged = format!(
            "{header}.{}.{signature}",
            BASE64URL.encode(edited.to_string())
        );
        assert_eq!(
            authorizer().authorize(Some(&forged)),
            Err(JwtError::Signature)
        );

        // Another key under the same kid, and another issuer's key trusted instead.
        let other = LocalIssuer::generate("local");
        assert_eq!(
            authorizer().authorize(Some(&other.sign(&claims))),
            Err(JwtError::Signature)
        );
        let trusting_other = authorizer().with_keys(other.jwks().clone());
        assert!(trusting_other.authorize(Some(&other.sign(&claims))).is_ok());
        assert_eq!(
            trusting_other.authorize(Some(&token)),
            Err(JwtError::Signature)
        );

        // alg none, with an empty or a kept signature.
        let none = BASE64URL.encode(r#"{"alg":"none","typ":"JWT","kid":"local"}"#);
        let payload = token.split('.').nth(1).unwrap();
        for unsigned in [
            format!("{none}.{payload}."),
            format!("{none}.{payload}.{signature}"),
        ] {
            assert!(
                authorizer().authorize(Some(&unsigned)).is_err(),
                "{unsigned}"
            );
        }
        assert_eq!(
            authorizer().authorize(Some(&format!("{none}.{payload}.{signature}"))),
            Err(JwtError::Algorithm("none".into()))
        );
    }
}
