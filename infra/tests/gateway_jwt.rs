//! The local API Gateway's JWT authorizer, as the template configures it: bad tokens refused
//! before the function, each route's authorization scopes enforced (403 without one of them),
//! claims and scopes passed on as API Gateway writes them.

mod gateway_common;

use lambda_http::request::RequestContext;
use lambda_http::{Body, Error, Request, RequestExt, Response};
use local_aws::gateway::{Gateway, GatewayOptions, JwtAuthorizer, signed_token, test_token};
use local_aws::template::{HttpRoute, Template, TemplateOptions};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gateway_common::{assert_gateway_answer, call, client};

const ISSUER: &str = "https://issuer.example.com/";

/// The payments API's options with the template's JWT authorizer (parameters `JwtIssuer`,
/// `JwtAudience`: `https://issuer.example.com/`, `payments-api`).
fn authorized_options() -> GatewayOptions {
    let template = Template::load_project(&TemplateOptions::default()).unwrap();
    let authorizer = JwtAuthorizer::from_parameters(&template, "JwtIssuer", "JwtAudience").unwrap();
    assert_eq!(authorizer.issuer, ISSUER);
    GatewayOptions::for_function(&template.functions["PaymentsApiFunction"])
        .with_function(GatewayOptions::for_function(
            &template.functions["PaymentsReaderFunction"],
        ))
        .with_jwt_authorizer(authorizer)
}

/// Answers with what the authorizer put in the request context.
async fn claims(request: Request) -> Result<Response<Body>, Error> {
    let RequestContext::ApiGatewayV2(ctx) = request.request_context() else {
        return Err(Error::from("not an API Gateway v2 request"));
    };
    let jwt = ctx
        .authorizer
        .and_then(|a| a.jwt)
        .ok_or_else(|| Error::from("no JWT authorizer output"))?;
    let out = json!({ "claims": jwt.claims, "scopes": jwt.scopes, "routeKey": ctx.route_key });
    Ok(Response::new(Body::from(out.to_string())))
}

/// The payments API's gateway in front of [`claims`], counting the requests that reach it.
async fn counting_gateway() -> (Gateway, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let gateway = Gateway::serve(
        "127.0.0.1:0".parse().unwrap(),
        authorized_options(),
        move |request: Request| {
            seen.fetch_add(1, Ordering::SeqCst);
            claims(request)
        },
    )
    .await
    .unwrap();
    (gateway, calls)
}

#[tokio::test]
async fn the_jwt_authorizer_refuses_bad_tokens_before_the_function() {
    let (gateway, calls) = counting_gateway().await;
    let client = client();
    let url = format!("{}/payments", gateway.url());
    let hour = Duration::from_secs(3600);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let expired = signed_token(&json!({
        "iss": ISSUER, "aud": "payments-api", "sub": "alice", "iat": now - 7200, "exp": now - 3600,
    }));
    let cases = [
        ("missing", None, None),
        (
            "malformed",
            Some("Bearer not-a-token".to_owned()),
            Some("token contains an invalid number of segments"),
        ),
        (
            "wrong issuer",
            Some(test_token(
                "https://evil.example.com/",
                "payments-api",
                "alice",
                &[],
                hour,
            )),
            Some("the token does not have a valid issuer"),
        ),
        (
            "wrong audience",
            Some(test_token(ISSUER, "another-api", "alice", &[], hour)),
            Some("the token does not have a valid audience"),
        ),
        (
            "expired",
            Some(format!("Bearer {expired}")),
            Some("the token has expired"),
        ),
    ];
    for (case, authorization, description) in cases {
        let headers: Vec<(&str, &str)> = authorization
            .iter()
            .map(|a| ("authorization", a.as_str()))
            .collect();
        let answer = call(&client, "POST", &url, &headers, br#"{"amountCents":1}"#).await;
        assert_gateway_answer(&answer, 401, "Unauthorized");
        let challenge = answer.1["www-authenticate"].to_str().unwrap();
        match description {
            None => assert_eq!(challenge, "Bearer", "{case}"),
            Some(description) => assert_eq!(
                challenge,
                format!(
                    r#"Bearer scope="" error="invalid_token" error_description="{description}""#
                ),
                "{case}"
            ),
        }
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "a refused request reached the function"
    );

    // Routing comes first: no route is 404 even without a token.
    let answer = call(
        &client,
        "GET",
        &format!("{}/refunds", gateway.url()),
        &[],
        b"",
    )
    .await;
    assert_gateway_answer(&answer, 404, "Not Found");

    // A valid token with the route's scope, with or without `Bearer `, reaches it.
    let token = test_token(
        ISSUER,
        "payments-api",
        "alice",
        &[("scope", "payments/read")],
        hour,
    );
    for authorization in [format!("Bearer {token}"), token] {
        let (status, _, _) = call(
            &client,
            "GET",
            &format!("{url}/p-1"),
            &[("authorization", &authorization)],
            b"",
        )
        .await;
        assert_eq!(status, 200);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    gateway.shutdown().await;
}

#[tokio::test]
async fn claims_reach_the_handler_as_api_gateway_writes_them() {
    let gateway = Gateway::serve("127.0.0.1:0".parse().unwrap(), authorized_options(), claims)
        .await
        .unwrap();
    let client = client();
    let url = format!("{}/payments", gateway.url());

    let token = test_token(
        ISSUER,
        "payments-api",
        "alice",
        &[
            ("scope", "payments/write payments/read"),
            ("email", "alice@example.com"),
        ],
        Duration::from_secs(300),
    );
    let (status, _, body) = call(
        &client,
        "POST",
        &url,
        &[("authorization", &format!("Bearer {token}"))],
        b"",
    )
    .await;
    assert_eq!(status, 200, "{body:?}");
    let seen: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(seen["claims"]["sub"], "alice");
    assert_eq!(seen["claims"]["iss"], ISSUER);
    assert_eq!(seen["claims"]["aud"], "payments-api");
    assert_eq!(seen["claims"]["email"], "alice@example.com");
    assert_eq!(seen["claims"]["scope"], "payments/write payments/read");
    // Numbers are strings too.
    let exp: u64 = seen["claims"]["exp"].as_str().unwrap().parse().unwrap();
    assert!(
        exp > SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
    );
    // The route has authorization scopes: API Gateway sends the token's scopes.
    assert_eq!(seen["scopes"], json!(["payments/write", "payments/read"]));
    assert_eq!(seen["routeKey"], "POST /payments");

    // Non-string claims, as API Gateway writes them; a Cognito access token has `client_id`
    // instead of `aud`.
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 300;
    let token = signed_token(&json!({
        "iss": ISSUER,
        "client_id": "payments-api",
        "sub": "bob",
        "exp": exp,
        "auth_time": 1767225600,
        "ratio": 0.25,
        "email_verified": true,
        "cognito:groups": ["admin", "ops"],
        "address": {"country": "NZ"},
        "nickname": null,
        "scope": "payments/read",
    }));
    let (status, _, body) = call(
        &client,
        "GET",
        &format!("{url}/p-1"),
        &[("authorization", &token)],
        b"",
    )
    .await;
    assert_eq!(status, 200, "{body:?}");
    let seen: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        seen["claims"],
        json!({
            "iss": ISSUER,
            "client_id": "payments-api",
            "sub": "bob",
            "exp": exp.to_string(),
            "auth_time": "1767225600",
            "ratio": "0.25",
            "email_verified": "true",
            "cognito:groups": "[admin ops]",
            "address": "map[country:NZ]",
            "scope": "payments/read",
        })
    );
    gateway.shutdown().await;
}

#[tokio::test]
async fn the_authorizer_s_own_scopes_apply_to_routes_without_scopes() {
    let mut options = authorized_options().routes(vec![HttpRoute::new("Any", "ANY", "/payments")]);
    options.authorizer = options
        .authorizer
        .map(|a| a.with_authorization_scopes(["payments/write"]));
    let gateway = Gateway::serve("127.0.0.1:0".parse().unwrap(), options, claims)
        .await
        .unwrap();
    let client = client();
    let url = format!("{}/payments", gateway.url());
    let token = |scope: &str| {
        let token = test_token(
            ISSUER,
            "payments-api",
            "alice",
            &[("scope", scope)],
            Duration::from_secs(60),
        );
        format!("Bearer {token}")
    };
    let answer = call(
        &client,
        "POST",
        &url,
        &[("authorization", &token("payments/read"))],
        b"",
    )
    .await;
    assert_gateway_answer(&answer, 403, "Forbidden");
    let (status, _, body) = call(
        &client,
        "POST",
        &url,
        &[("authorization", &token("payments/read payments/write"))],
        b"",
    )
    .await;
    assert_eq!(status, 200);
    let seen: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(seen["scopes"], json!(["payments/read", "payments/write"]));
    gateway.shutdown().await;
}

/// A token minted with `claims` added (`scope` or `scp`), valid for a minute.
fn token_with(claims: &[(&str, Value)]) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut all = json!({"iss": ISSUER, "aud": "payments-api", "sub": "alice", "exp": now + 60});
    for (name, value) in claims {
        all[*name] = value.clone();
    }
    format!("Bearer {}", signed_token(&all))
}

#[tokio::test]
async fn each_route_needs_one_of_its_scopes_from_the_template() {
    let (gateway, calls) = counting_gateway().await;
    let client = client();
    let base = gateway.url();
    let read = token_with(&[("scope", json!("openid payments/read"))]);
    let write = token_with(&[("scp", json!(["payments/write"]))]);
    let both = token_with(&[("scope", json!("payments/write payments/read"))]);
    let none = token_with(&[]);
    let other = token_with(&[("scope", json!("email profile"))]);
    // `scp` is read before `scope`, as API Gateway does: only one of them counts.
    let scp_first = token_with(&[
        ("scp", json!(["profile"])),
        ("scope", json!("payments/write")),
    ]);
    // (method, path, token, the route it reaches or None for 403)
    let cases = [
        ("POST", "/payments", &read, None),
        ("POST", "/payments", &write, Some("POST /payments")),
        ("POST", "/payments", &both, Some("POST /payments")),
        ("POST", "/payments", &none, None),
        ("POST", "/payments", &other, None),
        ("POST", "/payments", &scp_first, None),
        (
            "GET",
            "/payments/p-1",
            &read,
            Some("GET /payments/{paymentId}"),
        ),
        ("GET", "/payments/p-1", &write, None),
        (
            "GET",
            "/payments/p-1",
            &both,
            Some("GET /payments/{paymentId}"),
        ),
        ("GET", "/payments/p-1", &none, None),
        // A wrong method falls back to the ANY route, which needs either scope: the function
        // gets it (and answers 405) for any payments token, no one else does.
        ("DELETE", "/payments", &read, Some("ANY /payments")),
        ("GET", "/payments", &write, Some("ANY /payments")),
        ("DELETE", "/payments", &none, None),
        (
            "POST",
            "/payments/p-1",
            &read,
            Some("ANY /payments/{paymentId}"),
        ),
        (
            "PUT",
            "/payments/p-1",
            &write,
            Some("ANY /payments/{paymentId}"),
        ),
        ("PUT", "/payments/p-1", &other, None),
    ];
    let mut reached = 0;
    for (method, path, token, route) in cases {
        let answer = call(
            &client,
            method,
            &format!("{base}{path}"),
            &[("authorization", token.as_str())],
            b"",
        )
        .await;
        let case = format!("{method} {path} with {token}");
        match route {
            None => {
                assert_gateway_answer(&answer, 403, "Forbidden");
                assert!(!answer.1.contains_key("www-authenticate"), "{case}");
            }
            Some(route) => {
                reached += 1;
                assert_eq!(answer.0, 200, "{case}: {:?}", answer.2);
                let seen: Value = serde_json::from_slice(&answer.2).unwrap();
                assert_eq!(seen["routeKey"], route, "{case}");
                assert!(seen["scopes"].is_array(), "{case}: {seen}");
            }
        }
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        reached,
        "a 403 reached the function"
    );
    // Scopes do not replace the token's checks: a token without them is still 401.
    let answer = call(&client, "GET", &format!("{base}/payments/p-1"), &[], b"").await;
    assert_gateway_answer(&answer, 401, "Unauthorized");
    gateway.shutdown().await;
}

#[tokio::test]
async fn the_scopes_come_from_the_template_s_parameters() {
    let options = TemplateOptions::default()
        .parameter("WriteScope", "https://pay.example.com/charge")
        .parameter("ReadScope", "https://pay.example.com/view");
    let template = Template::load_project(&options).unwrap();
    let gateway = Gateway::serve(
        "127.0.0.1:0".parse().unwrap(),
        GatewayOptions::for_function(&template.functions["PaymentsApiFunction"])
            .with_function(GatewayOptions::for_function(
                &template.functions["PaymentsReaderFunction"],
            ))
            .with_jwt_authorizer(
                JwtAuthorizer::from_parameters(&template, "JwtIssuer", "JwtAudience").unwrap(),
            ),
        claims,
    )
    .await
    .unwrap();
    let client = client();
    let url = format!("{}/payments", gateway.url());
    let old = token_with(&[("scope", json!("payments/write payments/read"))]);
    let new = token_with(&[("scope", json!("https://pay.example.com/charge"))]);
    let answer = call(&client, "POST", &url, &[("authorization", &old)], b"").await;
    assert_gateway_answer(&answer, 403, "Forbidden");
    let answer = call(&client, "POST", &url, &[("authorization", &new)], b"").await;
    assert_eq!(answer.0, 200, "{:?}", answer.2);
    gateway.shutdown().await;
}

#[tokio::test]
async fn a_public_route_runs_no_authorizer() {
    let public = HttpRoute {
        authorizer: Some("NONE".into()),
        ..HttpRoute::new("Health", "GET", "/health")
    };
    let options = authorized_options().routes(vec![
        public,
        HttpRoute {
            authorization_scopes: vec!["payments/read".into()],
            ..HttpRoute::new("Payments", "ANY", "/payments")
        },
    ]);
    let gateway = Gateway::serve(
        "127.0.0.1:0".parse().unwrap(),
        options,
        |request: Request| async move {
            let RequestContext::ApiGatewayV2(ctx) = request.request_context() else {
                return Err(Error::from("not an API Gateway v2 request"));
            };
            Ok::<_, Error>(Response::new(Body::from(format!(
                "authorizer: {}",
                ctx.authorizer.and_then(|a| a.jwt).is_some()
            ))))
        },
    )
    .await
    .unwrap();
    let client = client();
    let (status, _, body) = call(
        &client,
        "GET",
        &format!("{}/health", gateway.url()),
        &[],
        b"",
    )
    .await;
    assert_eq!(
        (status, body.as_ref()),
        (200, b"authorizer: false".as_ref())
    );
    let answer = call(
        &client,
        "GET",
        &format!("{}/payments", gateway.url()),
        &[],
        b"",
    )
    .await;
    assert_gateway_answer(&answer, 401, "Unauthorized");
    gateway.shutdown().await;
}

/// `token` with its payload replaced by `claims`, the header and signature kept.
fn with_claims(token: &str, claims: &Value) -> String {
    use base64::Engine;
    let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let parts: Vec<&str> = token.split('.').collect();
    format!(
        "{}.{}.{}",
        parts[0],
        engine.encode(claims.to_string()),
        parts[2]
    )
}

/// The payload of `token`, as JSON.
fn payload(token: &str) -> Value {
    use base64::Engine;
    let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let segment = token.split('.').nth(1).unwrap();
    serde_json::from_slice(&engine.decode(segment).unwrap()).unwrap()
}

#[tokio::test]
async fn a_token_whose_claims_were_edited_is_refused_and_a_fresh_one_accepted() {
    let (gateway, calls) = counting_gateway().await;
    let client = client();
    let url = format!("{}/payments", gateway.url());
    let hour = Duration::from_secs(3600);
    let scope = [("scope", "payments/write")];
    let fresh = test_token(ISSUER, "payments-api", "alice", &scope, hour);
    let mut edited = payload(&fresh);
    edited["sub"] = json!("mallory");
    let mut extended = payload(&fresh);
    extended["exp"] = json!(extended["exp"].as_u64().unwrap() + 86_400);
    for (case, token) in [
        ("another subject", with_claims(&fresh, &edited)),
        ("a later expiry", with_claims(&fresh, &extended)),
    ] {
        let bearer = format!("Bearer {token}");
        let answer = call(&client, "POST", &url, &[("authorization", &bearer)], b"{}").await;
        assert_gateway_answer(&answer, 401, "Unauthorized");
        let challenge = answer.1["www-authenticate"].to_str().unwrap();
        assert!(
            challenge.contains(r#"error="invalid_token""#),
            "{case}: {challenge}"
        );
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "an edited token reached the function"
    );

    let bearer = format!("Bearer {fresh}");
    let answer = call(&client, "POST", &url, &[("authorization", &bearer)], b"{}").await;
    assert_eq!(answer.0, 200, "{:?}", answer.2);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_local_issuer_mints_tokens_for_other_callers_and_publishes_its_keys() {
    let (gateway, _) = counting_gateway().await;
    let issuer = local_aws::gateway::serve_issuer(
        "127.0.0.1:0".parse().unwrap(),
        ISSUER.to_owned(),
        "payments-api".to_owned(),
    )
    .await
    .unwrap();
    let client = client();
    let minted = call(
        &client,
        "GET",
        &format!(
            "{}/token?sub=bob&scope=payments/write%20payments/read&ttl=600",
            issuer.url()
        ),
        &[],
        b"",
    )
    .await;
    assert_eq!(minted.0, 200, "{:?}", minted.2);
    let token = String::from_utf8(minted.2.to_vec()).unwrap();
    assert_eq!(payload(&token)["sub"], "bob");
    let bearer = format!("Bearer {token}");
    let url = format!("{}/payments", gateway.url());
    let answer = call(&client, "POST", &url, &[("authorization", &bearer)], b"{}").await;
    assert_eq!(answer.0, 200, "{:?}", answer.2);
    let seen: Value = serde_json::from_slice(&answer.2).unwrap();
    assert_eq!(seen["claims"]["sub"], "bob");

    let bad = call(
        &client,
        "GET",
        &format!("{}/token?ttl=soon", issuer.url()),
        &[],
        b"",
    )
    .await;
    assert_eq!(bad.0, 400);
    let jwks = call(
        &client,
        "GET",
        &format!("{}/.well-known/jwks.json", issuer.url()),
        &[],
        b"",
    )
    .await;
    let jwks: Value = serde_json::from_slice(&jwks.2).unwrap();
    assert_eq!(jwks["keys"][0]["kid"], "local");
    assert_eq!(jwks["keys"][0]["kty"], "RSA");
}

#[tokio::test]
async fn a_token_signed_by_another_key_or_unsigned_is_refused() {
    let (gateway, calls) = counting_gateway().await;
    let client = client();
    let url = format!("{}/payments", gateway.url());
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = json!({
        "iss": ISSUER, "aud": "payments-api", "sub": "alice", "exp": now + 600,
        "scope": "payments/write",
    });
    let other = local_aws::gateway::LocalIssuer::generate("local");
    let good = signed_token(&claims);
    let none = {
        use base64::Engine;
        let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let header = engine.encode(r#"{"alg":"none","typ":"JWT","kid":"local"}"#);
        format!("{header}.{}.", good.split('.').nth(1).unwrap())
    };
    for (case, token) in [("another key", other.sign(&claims)), ("alg none", none)] {
        let bearer = format!("Bearer {token}");
        let answer = call(&client, "POST", &url, &[("authorization", &bearer)], b"{}").await;
        assert_gateway_answer(&answer, 401, "Unauthorized");
        assert!(
            answer.1["www-authenticate"]
                .to_str()
                .unwrap()
                .contains("invalid_token"),
            "{case}"
        );
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}
