//! The local API Gateway in front of `lambda_http` handlers, called with hyper-util's client.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lambda_http::request::RequestContext;
use lambda_http::{Body, Error, Request, RequestExt, Response};
use local_aws::gateway::{Gateway, GatewayOptions, MAX_BODY_BYTES};
use local_aws::template::{HttpRoute, Template, TemplateOptions};
use serde_json::{Value, json};

mod gateway_common;

use gateway_common::{assert_gateway_answer, call, client};

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
    let reader = &template.functions["PaymentsReaderFunction"];
    let gateway = Gateway::serve(
        "127.0.0.1:0".parse().unwrap(),
        GatewayOptions::for_function(api).with_function(GatewayOptions::for_function(reader)),
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
    // The most specific route: GET before the ANY fallback.
    assert_eq!(seen["routeKey"], "GET /payments/{paymentId}");
    assert_eq!(seen["sourceIp"], "127.0.0.1");
    assert_eq!(seen["body"], json!({"empty": true}));
    // Reads are payments-reader's, with its own Lambda context.
    assert_eq!(seen["function"], "payments-reader");
    assert_eq!(seen["requestId"].as_str().unwrap().len(), 36);
    // The deadline is now + the reader's 25 s timeout.
    let deadline = seen["deadline"].as_u64().unwrap();
    assert!(
        deadline >= started + 24_000 && deadline <= started + 27_000,
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
    assert_eq!(seen["routeKey"], "POST /payments");
    // POSTs are payments-api's, whose deadline is now + its 20 s timeout.
    assert_eq!(seen["function"], "payments-api");
    let deadline = seen["deadline"].as_u64().unwrap();
    assert!(
        deadline >= started + 19_000 && deadline <= started + 22_000,
        "{deadline} vs {started}"
    );

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
    let calls = (0..10).map(|i| {
        let (client, url) = (client.clone(), format!("{}/r/{i}", gateway.url()));
        async move { call(&client, "GET", &url, &[], b"").await }
    });
    let results = futures_util::future::join_all(calls).await;
    assert!(
        results
            .iter()
            .all(|(status, _, body)| *status == 200 && &body[..] == b"done")
    );
    // All ten ran at once (a serial gateway would have had one at a time).
    assert_eq!(max.load(Ordering::SeqCst), 10);

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
        // Cut short, not served after the handler's 5 s.
        assert!(started.elapsed() < Duration::from_millis(4500), "{path}");
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
    // Answered at the integration timeout, not after the handler's 2 s.
    assert!(started.elapsed() < Duration::from_millis(1900));
}

#[tokio::test]
async fn a_route_s_own_integration_timeout_applies() {
    let mut route = HttpRoute::new("GET /slow", "GET", "/slow");
    route.integration_timeout = Some(Duration::from_millis(300));
    let options = GatewayOptions::new("slow", Duration::from_secs(3))
        .routes(vec![route, HttpRoute::new("GET /fast", "GET", "/fast")]);
    let gateway = Gateway::serve(
        "127.0.0.1:0".parse().unwrap(),
        options,
        |request: Request| async move {
            if request.uri().path() == "/slow" {
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Ok::<_, Error>(Response::new(Body::from("done")))
        },
    )
    .await
    .unwrap();
    let answer = call(
        &client(),
        "GET",
        &format!("{}/slow", gateway.url()),
        &[],
        b"",
    )
    .await;
    assert_gateway_answer(&answer, 503, "Service Unavailable");
    let answer = call(
        &client(),
        "GET",
        &format!("{}/fast", gateway.url()),
        &[],
        b"",
    )
    .await;
    assert_eq!((answer.0, &answer.2[..]), (200, &b"done"[..]));
}

#[test]
fn the_integration_timeouts_come_from_the_template() {
    let template = Template::load_project(&TemplateOptions::default()).unwrap();
    let timeouts = |id: &str| -> Vec<(String, Option<Duration>)> {
        let options = GatewayOptions::for_function(&template.functions[id]);
        options
            .routes
            .iter()
            .map(|r| (r.name.clone(), r.integration_timeout))
            .collect()
    };
    let api = timeouts("PaymentsApiFunction");
    assert_eq!(api.len(), 2, "{api:?}");
    assert!(
        api.iter().all(|(_, t)| *t == Some(Duration::from_secs(23))),
        "{api:?}"
    );
    let reader = timeouts("PaymentsReaderFunction");
    assert_eq!(reader.len(), 2, "{reader:?}");
    assert!(
        reader
            .iter()
            .all(|(_, t)| *t == Some(Duration::from_secs(30))),
        "{reader:?}"
    );
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
