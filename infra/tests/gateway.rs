//! The local API Gateway in front of `lambda_http` handlers, called with hyper-util's client.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use lambda_http::request::RequestContext;
use lambda_http::{Body, Error, Request, RequestExt, Response};
use local_aws::gateway::{
    Gateway, GatewayOptions, JwtAuthorizer, MAX_BODY_BYTES, test_token, unsigned_token,
};
use local_aws::template::{Template, TemplateOptions};
use serde_json::{Value, json};

type HttpClient = Client<HttpConnector, Full<Bytes>>;

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

async fn call(
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

/// Echoes what the handler saw, as JSON.
async fn echo(request: Request) -> Result<Response<Body>, Error> {
    let context = request.lambda_context();
    let (route_key, source_ip) = match request.request_context() {
        RequestContext::ApiGatewayV2(c) => (c.route_key.clone(), c.http.source_ip.clone()),
        #[allow(unreachable_patterns)]
        _ => (None, None),
    };
    let body = match request.body() {
        Body::Empty => json!({"empty": true}),
        Body::Text(t) => json!({"text": t}),
        Body::Binary(b) => json!({"binary": b.len()}),
        _ => json!(null),
    };
    let out = json!({
        "method": request.method().as_str(),
        "uri": request.uri().to_string(),
        "rawPath": request.raw_http_path(),
        "query": request.query_string_parameters().all("tag"),
        "path": request.path_parameters().first("paymentId"),
        "header": request.headers().get("x-test").map(|v| v.to_str().unwrap()),
        "forwardedProto": request.headers().get("x-forwarded-proto").map(|v| v.to_str().unwrap()),
        "routeKey": route_key,
        "sourceIp": source_ip,
        "body": body,
        "requestId": context.request_id,
        "deadline": context.deadline,
        "function": context.env_config.function_name,
    });
    Ok(Response::builder()
        .status(201)
        .header("content-type", "application/json")
        .header("set-cookie", "a=1")
        .body(Body::from(out.to_string()))?)
}

#[tokio::test]
async fn serves_a_lambda_http_handler() {
    let template = Template::load_project(&TemplateOptions::default()).unwrap();
    let api = &template.functions["PaymentsApiFunction"];
    let gateway = Gateway::serve(
        "127.0.0.1:0".parse().unwrap(),
        GatewayOptions::for_function(api),
        echo,
    )
    .await
    .unwrap();
    assert_ne!(gateway.local_addr().port(), 0);
    let client = client();
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;

    let (status, headers, body) = call(
        &client,
        "GET",
        &format!("{}/payments/p-42?tag=a&tag=b", gateway.url()),
        &[("x-test", "yes")],
        b"",
    )
    .await;
    assert_eq!(status, 201);
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(headers["set-cookie"], "a=1");
    let seen: Value = serde_json::from_slice(&body).unwrap();
    // API Gateway's request id header is the request context's (and here the Lambda's) id.
    assert_eq!(
        headers["apigw-requestid"],
        seen["requestId"].as_str().unwrap()
    );
    assert_eq!(seen["method"], "GET");
    assert_eq!(
        seen["uri"],
        format!("http://{}/payments/p-42?tag=a&tag=b", gateway.local_addr())
    );
    assert_eq!(seen["rawPath"], "/payments/p-42");
    assert_eq!(seen["query"], json!(["a", "b"]));
    assert_eq!(seen["path"], "p-42");
    assert_eq!(seen["header"], "yes");
    assert_eq!(seen["forwardedProto"], "http");
    assert_eq!(seen["routeKey"], "ANY /payments/{paymentId}");
    assert_eq!(seen["sourceIp"], "127.0.0.1");
    assert_eq!(seen["body"], json!({"empty": true}));
    assert_eq!(seen["function"], "payments-api");
    assert_eq!(seen["requestId"].as_str().unwrap().len(), 36);
    // The deadline is now + the function's 10 s timeout.
    let deadline = seen["deadline"].as_u64().unwrap();
    assert!(
        deadline >= started + 9_000 && deadline <= started + 12_000,
        "{deadline} vs {started}"
    );

    let (status, _, body) = call(
        &client,
        "POST",
        &format!("{}/payments", gateway.url()),
        &[("content-type", "application/json")],
        br#"{"amountCents":100}"#,
    )
    .await;
    assert_eq!(status, 201);
    let seen: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(seen["body"], json!({"text": r#"{"amountCents":100}"#}));
    assert_eq!(seen["routeKey"], "ANY /payments");

    let (_, _, body) = call(
        &client,
        "POST",
        &format!("{}/payments", gateway.url()),
        &[("content-type", "application/octet-stream")],
        &[0, 159, 146, 150],
    )
    .await;
    let seen: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(seen["body"], json!({"binary": 4}));

    // No route: API Gateway's 404, and the handler is not called.
    let (status, headers, body) = call(
        &client,
        "GET",
        &format!("{}/refunds/r-1", gateway.url()),
        &[],
        b"",
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(&body[..], br#"{"message":"Not Found"}"#);
    gateway.shutdown().await;

    // As a function URL: every path reaches the handler.
    let gateway = Gateway::serve(
        "127.0.0.1:0".parse().unwrap(),
        GatewayOptions::for_function(api).function_url(),
        echo,
    )
    .await
    .unwrap();
    let (status, _, body) = call(
        &client,
        "DELETE",
        &format!("{}/anything", gateway.url()),
        &[],
        b"",
    )
    .await;
    assert_eq!(status, 201);
    let seen: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(seen["routeKey"], "$default");
    gateway.shutdown().await;
}

#[tokio::test]
async fn serves_requests_concurrently() {
    let running = Arc::new(AtomicUsize::new(0));
    let max = Arc::new(AtomicUsize::new(0));
    let (r, m) = (running.clone(), max.clone());
    let gateway = Gateway::serve(
        "127.0.0.1:0".parse().unwrap(),
        GatewayOptions::new("slow", Duration::from_secs(5)),
        move |_request: Request| {
            let (r, m) = (r.clone(), m.clone());
            async move {
                let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(300)).await;
                r.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, Error>(Response::new(Body::from("done")))
            }
        },
    )
    .await
    .unwrap();
    let client = client();
    let started = Instant::now();
    let calls = (0..10).map(|i| {
        let (client, url) = (client.clone(), format!("{}/r/{i}", gateway.url()));
        async move { call(&client, "GET", &url, &[], b"").await }
    });
    let results = futures_util::future::join_all(calls).await;
    let elapsed = started.elapsed();
    assert!(
        results
            .iter()
            .all(|(status, _, body)| *status == 200 && &body[..] == b"done")
    );
    assert_eq!(max.load(Ordering::SeqCst), 10);
    assert!(
        elapsed < Duration::from_secs(2),
        "{elapsed:?}: not concurrent"
    );

    // Graceful shutdown: a request in progress completes.
    let url = format!("{}/last", gateway.url());
    let in_progress = tokio::spawn({
        let client = client.clone();
        async move { call(&client, "GET", &url, &[], b"").await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let addr = gateway.local_addr();
    gateway.shutdown().await;
    assert_eq!(in_progress.await.unwrap().0, 200);
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "still accepting after shutdown"
    );
}

/// The body and headers of an answer API Gateway makes itself, checked against its shape.
fn assert_gateway_answer(
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

#[tokio::test]
async fn errors_panics_and_timeouts_answer_like_api_gateway() {
    let gateway = Gateway::serve(
        "127.0.0.1:0".parse().unwrap(),
        GatewayOptions::new("failing", Duration::from_millis(500)),
        |request: Request| async move {
            match request.uri().path() {
                "/error" => Err(Error::from("the database is down")),
                "/panic" => panic!("bug"),
                "/slow" => {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    Ok(Response::new(Body::Empty))
                }
                _ => Ok(Response::new(Body::from("fine"))),
            }
        },
    )
    .await
    .unwrap();
    let client = client();
    for path in ["/error", "/panic", "/slow"] {
        let started = Instant::now();
        let answer = call(
            &client,
            "GET",
            &format!("{}{path}", gateway.url()),
            &[],
            b"",
        )
        .await;
        // The function timed out (0.5 s, below the 30 s integration timeout): a function
        // error, so 500 like the others, not the integration timeout's 503.
        assert_gateway_answer(&answer, 500, "Internal Server Error");
        assert!(started.elapsed() < Duration::from_secs(3), "{path}");
    }
    // The server survives all of that.
    let (status, _, body) = call(&client, "GET", &format!("{}/ok", gateway.url()), &[], b"").await;
    assert_eq!((status, &body[..]), (200, &b"fine"[..]));
    gateway.shutdown().await;
}

#[tokio::test]
async fn past_the_integration_timeout_is_503() {
    let mut options = GatewayOptions::new("slow", Duration::from_secs(3));
    options.integration_timeout = Duration::from_millis(300);
    let gateway = Gateway::serve(
        "127.0.0.1:0".parse().unwrap(),
        options,
        |_request: Request| async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            Ok::<_, Error>(Response::new(Body::from("late")))
        },
    )
    .await
    .unwrap();
    let started = Instant::now();
    let answer = call(&client(), "GET", &gateway.url(), &[], b"").await;
    assert_gateway_answer(&answer, 503, "Service Unavailable");
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[tokio::test]
async fn payloads_over_lambdas_limit_are_413() {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let gateway =
        Gateway::serve(
            "127.0.0.1:0".parse().unwrap(),
            GatewayOptions::new("upload", Duration::from_secs(5)),
            move |request: Request| {
                seen.fetch_add(1, Ordering::SeqCst);
                async move {
                    Ok::<_, Error>(Response::new(Body::from(request.body().len().to_string())))
                }
            },
        )
        .await
        .unwrap();
    let client = client();
    let url = format!("{}/upload", gateway.url());
    let text = vec![b'a'; MAX_BODY_BYTES + 1];
    let answer = call(
        &client,
        "POST",
        &url,
        &[("content-type", "text/plain")],
        &text,
    )
    .await;
    assert_gateway_answer(&answer, 413, "Request Too Long");
    // Binary bodies travel base64-encoded: 4.6 MB of them is over 6 MB in the event.
    let octets = [("content-type", "application/octet-stream")];
    let binary = vec![7u8; MAX_BODY_BYTES * 3 / 4 + 1024];
    let answer = call(&client, "POST", &url, &octets, &binary).await;
    assert_gateway_answer(&answer, 413, "Request Too Long");
    assert_eq!(calls.load(Ordering::SeqCst), 0, "the function was invoked");

    let binary = vec![7u8; 4 * 1024 * 1024];
    let (status, _, body) = call(&client, "POST", &url, &octets, &binary).await;
    assert_eq!(
        (status, &body[..]),
        (200, format!("{}", binary.len()).as_bytes())
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    gateway.shutdown().await;
}

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
