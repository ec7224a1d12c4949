//! The DynamoDB stream event source mapping against moto's DynamoDB Streams: records delivered
//! in order from TRIM_HORIZON or LATEST, as Lambda's event, filtered, one batch at a time per
//! shard; stopping; the Invoke API of `cargo lambda watch`. Failures: `runner_stream_failures.rs`.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::dynamodb::Event;
use aws_lambda_events::streams::DynamoDbEventResponse;
use lambda_runtime::{Error, LambdaEvent};
use local_aws::runner::{InProcess, Runner};
use local_aws::template::{FilterPattern, StartingPosition, StreamViewType};
use tokio_util::sync::CancellationToken;

use common::stream::*;

#[tokio::test]
async fn records_written_before_the_mapping_starts_are_all_delivered_in_order() {
    let clients = common::clients().await;
    let t = table(&clients, StreamViewType::NewImage).await;
    for k in keys(25) {
        put(&clients, &t, &k, "before").await;
    }
    let seen = Seen::default();
    let events: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
    let shapes = Arc::clone(&events);
    let running = Runner::from_clients(&clients)
        .stream_options(fast())
        .stream_mapping(
            mapping("trim", &t).batch_size(10),
            InProcess::new(move |event: LambdaEvent<serde_json::Value>| {
                let shapes = Arc::clone(&shapes);
                async move {
                    shapes.lock().unwrap().push(event.payload);
                    Ok::<_, Error>(serde_json::json!(null))
                }
            }),
        )
        .unwrap()
        .start(CancellationToken::new());
    running.wait_stream_caught_up("trim", WAIT).await.unwrap();
    let events = events.lock().unwrap().clone();
    let typed: Vec<Event> = events
        .iter()
        .map(|e| serde_json::from_value(e.clone()).expect("the aws_lambda_events type"))
        .collect();
    for e in &typed {
        seen.record(e);
    }
    // All 25, once each, in write order, in batches of at most BatchSize.
    assert_eq!(seen.flat(), keys(25));
    assert!(
        seen.batches().iter().all(|b| b.len() <= 10),
        "{:?}",
        seen.batches()
    );
    // The record as Lambda sends it.
    let record = &events[0]["Records"][0];
    assert_eq!(record["eventName"], "INSERT");
    assert_eq!(record["eventVersion"], "1.1");
    assert_eq!(record["eventSource"], "aws:dynamodb");
    assert_eq!(record["awsRegion"], clients.region());
    assert_eq!(record["eventSourceARN"], t.stream_arn.clone().unwrap());
    assert!(record["eventID"].as_str().is_some_and(|id| !id.is_empty()));
    let change = &record["dynamodb"];
    assert_eq!(change["Keys"], serde_json::json!({"k": {"S": "r01"}}));
    assert_eq!(
        change["NewImage"],
        serde_json::json!({"k": {"S": "r01"}, "v": {"S": "before"}})
    );
    assert_eq!(change["StreamViewType"], "NEW_IMAGE");
    assert!(change["SequenceNumber"].as_str().is_some());
    assert!(change["SizeBytes"].as_i64().is_some_and(|n| n > 0));
    assert!(
        change["ApproximateCreationDateTime"]
            .as_i64()
            .is_some_and(|t| t > 1_600_000_000)
    );
    assert!(change.get("OldImage").is_none());
    let stats = running.stop().await["trim"];
    assert_eq!(stats.stream.records_read, 25);
    assert_eq!(stats.stream.records_processed, 25);
    assert_eq!(stats.stream.shards, 1);
    assert_eq!(stats.records_received, 25);
}

#[tokio::test]
async fn latest_delivers_only_what_is_written_after_the_start() {
    let clients = common::clients().await;
    let t = table(&clients, StreamViewType::KeysOnly).await;
    put(&clients, &t, "old", "x").await;
    let seen = Seen::default();
    let running = start(
        &clients,
        mapping("latest", &t).starting_position(StartingPosition::Latest),
        &seen,
        |_, _| Ok(DynamoDbEventResponse::default()),
    );
    // Once the mapping has read its shard, what comes next is new.
    running.wait_stream_caught_up("latest", WAIT).await.unwrap();
    put(&clients, &t, "new", "y").await;
    running.wait_stream_caught_up("latest", WAIT).await.unwrap();
    assert_eq!(seen.flat(), ["new"]);
    running.stop().await;
}

#[tokio::test]
async fn the_insert_filter_drops_modify_and_remove() {
    let clients = common::clients().await;
    let t = table(&clients, StreamViewType::NewAndOldImages).await;
    put(&clients, &t, "a", "1").await; // INSERT
    put(&clients, &t, "a", "2").await; // MODIFY
    put(&clients, &t, "b", "1").await; // INSERT
    delete(&clients, &t, "a").await; // REMOVE
    put(&clients, &t, "c", "1").await; // INSERT
    let seen = Seen::default();
    let inserts = FilterPattern::parse(r#"{"eventName": ["INSERT"]}"#).unwrap();
    let running = start(
        &clients,
        mapping("filtered", &t).filters(vec![inserts]),
        &seen,
        |_, _| Ok(DynamoDbEventResponse::default()),
    );
    running
        .wait_stream_caught_up("filtered", WAIT)
        .await
        .unwrap();
    assert_eq!(seen.flat(), ["a", "b", "c"]);
    let stats = running.stop().await["filtered"];
    assert_eq!(stats.stream.records_read, 5);
    assert_eq!(stats.stream.records_filtered, 2);
    assert_eq!(stats.stream.records_processed, 3);
}

#[tokio::test]
async fn a_nested_filter_matches_on_the_new_image() {
    let clients = common::clients().await;
    let t = table(&clients, StreamViewType::NewImage).await;
    put(&clients, &t, "a", "keep").await;
    put(&clients, &t, "b", "drop").await;
    put(&clients, &t, "c", "keep").await;
    let seen = Seen::default();
    let keep =
        FilterPattern::parse(r#"{"dynamodb": {"NewImage": {"v": {"S": ["keep"]}}}}"#).unwrap();
    let running = start(
        &clients,
        mapping("nested", &t).filters(vec![keep]),
        &seen,
        |_, _| Ok(DynamoDbEventResponse::default()),
    );
    running.wait_stream_caught_up("nested", WAIT).await.unwrap();
    assert_eq!(seen.flat(), ["a", "c"]);
    running.stop().await;
}

#[tokio::test]
async fn one_batch_at_a_time_per_shard_in_order_through_failures() {
    let clients = common::clients().await;
    let t = table(&clients, StreamViewType::NewImage).await;
    #[derive(Default)]
    struct Log {
        invocations: usize,
        in_flight: usize,
        most_in_flight: usize,
        processed: Vec<String>,
    }
    let log: Arc<Mutex<Log>> = Arc::default();
    let handler_log = Arc::clone(&log);
    // Every third invocation fails as a whole (after a pause, while later records are
    // waiting); the others succeed. The shard must neither skip ahead nor run two at once.
    let running = Runner::from_clients(&clients)
        .stream_options(fast())
        .stream_mapping(
            mapping("ordered", &t).batch_size(4),
            InProcess::new(move |event: LambdaEvent<Event>| {
                let log = Arc::clone(&handler_log);
                async move {
                    let invocation = {
                        let mut l = log.lock().unwrap();
                        l.in_flight += 1;
                        l.most_in_flight = l.most_in_flight.max(l.in_flight);
                        l.invocations += 1;
                        l.invocations
                    };
                    tokio::time::sleep(Duration::from_millis(15)).await;
                    let mut l = log.lock().unwrap();
                    l.in_flight -= 1;
                    if invocation % 3 == 0 {
                        return Err(Error::from("transient"));
                    }
                    for r in &event.payload.records {
                        match r.change.keys.get("k") {
                            Some(serde_dynamo::AttributeValue::S(k)) => l.processed.push(k.clone()),
                            other => panic!("{other:?}"),
                        }
                    }
                    Ok(serde_json::json!({}))
                }
            }),
        )
        .unwrap()
        .start(CancellationToken::new());
    let all = keys(30);
    for (i, k) in all.iter().enumerate() {
        put(&clients, &t, k, "v").await;
        if i % 10 == 9 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    running
        .wait_stream_caught_up("ordered", WAIT)
        .await
        .unwrap();
    {
        let log = log.lock().unwrap();
        assert_eq!(log.most_in_flight, 1, "two batches of one shard at once");
        assert_eq!(log.processed, all, "processed once each, in write order");
        assert!(log.invocations >= 10, "{}", log.invocations);
    }
    let stats = running.stop().await["ordered"];
    assert!(stats.stream.retries >= 3, "{stats:?}");
}

#[tokio::test]
async fn stopping_the_runner_stops_the_stream_pollers() {
    let clients = common::clients().await;
    let t = table(&clients, StreamViewType::NewImage).await;
    put(&clients, &t, "r01", "v").await;
    let seen = Seen::default();
    // A batch that fails forever, retried every 50 ms: stop must not wait for it.
    let running = start(&clients, mapping("stop", &t), &seen, |_, _| {
        Err("forever".into())
    });
    assert!(
        running
            .wait_for("stop", |s| s.stream.retries >= 2, WAIT)
            .await
    );
    let stopped = tokio::time::timeout(Duration::from_secs(5), running.stop()).await;
    let stats = stopped.expect("the pollers stop")["stop"];
    let invocations = seen.batches().len();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        seen.batches().len(),
        invocations,
        "no invocation after stop"
    );
    assert_eq!(stats.batches as usize, invocations);
}

#[tokio::test]
async fn a_cargo_lambda_watch_style_invoke_api_serves_a_stream_mapping() {
    use local_aws::gateway::{Gateway, GatewayOptions};
    use local_aws::runner::HttpInvoker;
    use local_aws::template::HttpRoute;
    use std::sync::atomic::{AtomicUsize, Ordering};

    // A stand-in for `cargo lambda watch`: the Invoke API, routed by the function's binary.
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Seen::default();
    let (handler_calls, handler_seen) = (Arc::clone(&calls), seen.clone());
    let invoke_api = Gateway::serve(
        "127.0.0.1:0".parse().unwrap(),
        GatewayOptions::new("invoke-api", Duration::from_secs(5)).routes(vec![HttpRoute::new(
            "Invoke",
            "POST",
            "/2015-03-31/functions/{name}/invocations",
        )]),
        move |request: lambda_http::Request| {
            let (calls, seen) = (Arc::clone(&handler_calls), handler_seen.clone());
            async move {
                use lambda_http::RequestExt;
                let name = request.path_parameters().first("name").unwrap().to_owned();
                if name != "relay-binary" {
                    return Err(lambda_http::Error::from(format!("no function {name}")));
                }
                let event: Event = serde_json::from_slice(request.body().as_ref())?;
                let batch = seen.record(&event);
                // The first call reports its second record failed.
                let response = match calls.fetch_add(1, Ordering::SeqCst) {
                    0 => failures(&[batch[1].1.clone()]),
                    _ => DynamoDbEventResponse::default(),
                };
                Ok::<_, lambda_http::Error>(lambda_http::Response::new(lambda_http::Body::from(
                    serde_json::to_string(&response)?,
                )))
            }
        },
    )
    .await
    .unwrap();

    let clients = common::clients().await;
    let t = table(&clients, StreamViewType::NewImage).await;
    for k in keys(3) {
        put(&clients, &t, &k, "v").await;
    }
    let mut m = mapping("relay", &t).report_batch_item_failures(true);
    m.binary = Some("relay-binary".into());
    let running = Runner::from_clients(&clients)
        .stream_options(fast())
        .stream_mapping(m, HttpInvoker::new(invoke_api.url()))
        .unwrap()
        .start(CancellationToken::new());
    running.wait_stream_caught_up("relay", WAIT).await.unwrap();
    assert_eq!(seen.batches(), [keys(3), keys(3)[1..].to_vec()]);
    let stats = running.stop().await["relay"];
    assert_eq!(stats.stream.records_processed, 3);
    assert_eq!(stats.whole_batch_failures(), 0);
    invoke_api.shutdown().await;
}
