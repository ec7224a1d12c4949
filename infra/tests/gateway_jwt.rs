//! The local API Gateway's JWT authorizer, as the template configures it: bad tokens refused
//! before the function, claims and scopes passed on as API Gateway writes them.

mod gateway_common;

use lambda_http::request::RequestContext;
use lambda_http::{Body, Error, Request, RequestExt, Response};
use local_aws::gateway::{Gateway, GatewayOptions, JwtAuthorizer, test_token, unsigned_token};
use local_aws::template::{Template, TemplateOptions};
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
    let out = json!({ "claims": jwt.claims, "scopes": jwt.scopes });
    Ok(Response::new(Body::from(out.to_string())))
}

#[tokio::test]
async fn the_jwt_authorizer_refuses_bad_tokens_before_the_function() {
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
    let client = client();
    let url = format!("{}/payments", gateway.url());
    let hour = Duration::from_secs(3600);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let expired = unsigned_token(&json!({
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

    // A valid token, with or without `Bearer `, reaches it.
    let token = test_token(ISSUER, "payments-api", "alice", &[], hour);
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
    // The routes have no authorization scopes: API Gateway sends no scopes.
    assert_eq!(seen["scopes"], Value::Null);

    // Non-string claims, as API Gateway writes them; a Cognito access token has `client_id`
    // instead of `aud`.
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 300;
    let token = unsigned_token(&json!({
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
        })
    );
    gateway.shutdown().await;
}

#[tokio::test]
async fn routes_with_authorization_scopes_check_them_and_pass_them_on() {
    let mut options = authorized_options();
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
