//! The local gateway under a burst, as AWS answers it: a route's throttling (429) and the
//! function's reserved concurrency (500, the function never runs).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lambda_http::{Body, Error, Request, Response};
use local_aws::gateway::{Gateway, GatewayOptions};
use local_aws::template::{HttpRoute, Template, TemplateOptions, Throttling};
use tokio::sync::Semaphore;

mod gateway_common;

use gateway_common::{assert_gateway_answer, call, client};

/// A gateway whose one route (`POST /p`) is throttled as `throttling` says, in front of a handler
/// that counts its invocations.
async fn throttled(
    throttling: Throttling,
    options: impl Fn(GatewayOptions) -> GatewayOptions,
) -> (Gateway, Arc<AtomicUsize>) {
    let mut route = HttpRoute::new("POST /p", "POST", "/p");
    route.throttling = Some(throttling);
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = ran.clone();
    let gateway = Gateway::serve(
        "127.0.0.1:0".parse().unwrap(),
        options(GatewayOptions::new("f", Duration::from_secs(5)).routes(vec![route])),
        move |_request: Request| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, Error>(Response::new(Body::from("ok"))) }
        },
    )
    .await
    .unwrap();
    (gateway, ran)
}

/// 25 requests at once on a route with a burst of 10 and no refill: 10 served, 15 answered 429
/// with API Gateway's body, and the function ran 10 times.
#[tokio::test]
async fn a_route_s_burst_is_served_and_the_rest_is_429() {
    let throttling = Throttling {
        rate_limit: 0.0,
        burst_limit: 10,
    };
    let (gateway, ran) = throttled(throttling, |o| o).await;
    let client = client();
    let url = format!("{}/p", gateway.url());
    let answers =
        futures_util::future::join_all((0..25).map(|_| call(&client, "POST", &url, &[], b"{}")))
            .await;
    let too_many: Vec<_> = answers.iter().filter(|a| a.0 == 429).collect();
    assert_eq!(answers.iter().filter(|a| a.0 == 200).count(), 10);
    assert_eq!(too_many.len(), 15);
    for answer in too_many {
        assert_gateway_answer(answer, 429, "Too Many Requests");
    }
    assert_eq!(
        ran.load(Ordering::SeqCst),
        10,
        "a throttled request never runs"
    );
    // Another route key has a bucket of its own: a path with no route is still 404.
    let other = call(
        &client,
        "GET",
        &format!("{}/nothing", gateway.url()),
        &[],
        b"",
    )
    .await;
    assert_eq!(other.0, 404);
    gateway.shutdown().await;

    // Without limits every request reaches the function.
    let (gateway, ran) = throttled(throttling, GatewayOptions::without_limits).await;
    let url = format!("{}/p", gateway.url());
    let answers =
        futures_util::future::join_all((0..25).map(|_| call(&client, "POST", &url, &[], b"{}")))
            .await;
    assert!(answers.iter().all(|a| a.0 == 200));
    assert_eq!(ran.load(Ordering::SeqCst), 25);
    gateway.shutdown().await;
}

/// With a reserved concurrency of 2 and two invocations in progress, a third request is
/// throttled by Lambda: API Gateway's 500, and the function does not run; once one ends, the
/// next request runs.
#[tokio::test]
async fn a_function_at_its_reserved_concurrency_is_throttled_with_a_500() {
    let started = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(Semaphore::new(0));
    let (s, r) = (started.clone(), release.clone());
    let mut options = GatewayOptions::new("busy", Duration::from_secs(10));
    options.reserved_concurrency = Some(2);
    let gateway = Gateway::serve(
        "127.0.0.1:0".parse().unwrap(),
        options,
        move |_: Request| {
            let (s, r) = (s.clone(), r.clone());
            async move {
                s.fetch_add(1, Ordering::SeqCst);
                r.acquire().await.unwrap().forget();
                Ok::<_, Error>(Response::new(Body::from("done")))
            }
        },
    )
    .await
    .unwrap();
    let client = client();
    let url = format!("{}/x", gateway.url());
    let held: Vec<_> = (0..2)
        .map(|_| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move { call(&client, "GET", &url, &[], b"").await })
        })
        .collect();
    while started.load(Ordering::SeqCst) < 2 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let third = call(&client, "GET", &url, &[], b"").await;
    assert_gateway_answer(&third, 500, "Internal Server Error");
    assert_eq!(
        started.load(Ordering::SeqCst),
        2,
        "the throttled invocation never ran"
    );
    // One of the two ends: its unit is back, and the next request runs.
    release.add_permits(1);
    while !held.iter().any(|h| h.is_finished()) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    release.add_permits(2);
    let next = call(&client, "GET", &url, &[], b"").await;
    assert_eq!((next.0, &next.2[..]), (200, &b"done"[..]));
    for h in held {
        assert_eq!(h.await.unwrap().0, 200);
    }
    gateway.shutdown().await;
}

/// The template's limits reach the gateway: payments-api's reserved concurrency and its
/// routes' throttling.
#[test]
fn the_limits_come_from_the_template() {
    let options = TemplateOptions::default()
        .parameter("ApiReservedConcurrency", "7")
        .parameter("ApiThrottlingBurstLimit", "30")
        .parameter("ApiThrottlingRateLimit", "3");
    let template = Template::load_project(&options).unwrap();
    let api = GatewayOptions::for_function(template.function_by_name("payments-api").unwrap());
    assert_eq!(api.reserved_concurrency, Some(7));
    assert!(api.routes.iter().all(|r| r.throttling
        == Some(Throttling {
            rate_limit: 3.0,
            burst_limit: 30
        })));
    let reconciler =
        GatewayOptions::for_function(template.function_by_name("payments-reconciler").unwrap());
    assert_eq!(reconciler.reserved_concurrency, Some(1));
    let unlimited = api.without_limits();
    assert_eq!(unlimited.reserved_concurrency, None);
    assert!(unlimited.routes.iter().all(|r| r.throttling.is_none()));
}
