//! The runner through an Invoke API (as `cargo lambda watch` serves one), waiting for queues to
//! drain, and the event source mappings read from the template.

use super::*;

#[tokio::test]
async fn cargo_lambda_watch_style_invoke_api() {
    // A stand-in for `cargo lambda watch`: the gateway serving the Invoke API route.
    let invoke_api = Gateway::serve(
        "127.0.0.1:0".parse().unwrap(),
        GatewayOptions::new("invoke-api", Duration::from_secs(5)).routes(vec![HttpRoute::new(
            "Invoke",
            "POST",
            "/2015-03-31/functions/{name}/invocations",
        )]),
        |request: lambda_http::Request| async move {
            use lambda_http::RequestExt;
            let name = request.path_parameters().first("name").unwrap().to_owned();
            let event: SqsEvent = serde_json::from_slice(request.body().as_ref())?;
            if name != "receipt-sender"
                || event
                    .records
                    .iter()
                    .any(|r| r.body.as_deref() == Some("boom"))
            {
                return Err(lambda_http::Error::from("handler error"));
            }
            let failed: Vec<_> = event
                .records
                .iter()
                .filter(|r| {
                    r.body.as_deref() == Some("fail")
                        && r.attributes["ApproximateReceiveCount"] == "1"
                })
                .map(|r| serde_json::json!({ "itemIdentifier": r.message_id }))
                .collect();
            Ok::<_, lambda_http::Error>(lambda_http::Response::new(lambda_http::Body::from(
                serde_json::json!({ "batchItemFailures": failed }).to_string(),
            )))
        },
    )
    .await
    .unwrap();

    let clients = common::clients().await;
    let queue = common::queue(&clients, false, 1).await;
    common::send(&clients, &queue, None, &["ok", "fail"]).await;
    let running = start(
        &clients,
        EventSourceMapping::new("receipt-sender", &queue, Duration::from_secs(5))
            .maximum_concurrency(1),
        HttpInvoker::new(invoke_api.url()),
    );
    let stats = drain_and_stop(running, &queue, "receipt-sender").await;
    assert_eq!(stats.records_deleted, 2);
    assert_eq!(stats.records_reported_failed, 1);
    assert_eq!(stats.whole_batch_failures(), 0);

    // A handler error (HTTP 500) leaves the batch.
    common::send(&clients, &queue, None, &["boom"]).await;
    let running = start(
        &clients,
        EventSourceMapping::new("receipt-sender", &queue, Duration::from_secs(5))
            .maximum_concurrency(1),
        HttpInvoker::new(invoke_api.url()),
    );
    assert!(
        running
            .wait_for(
                "receipt-sender",
                |s| s.invocation_errors >= 1,
                Duration::from_secs(10)
            )
            .await
    );
    let stats = running.stop().await["receipt-sender"];
    assert_eq!(stats.records_deleted, 0);
    invoke_api.shutdown().await;

    // Nothing listening: a transport error, counted, nothing deleted.
    let running = start(
        &clients,
        EventSourceMapping::new("receipt-sender", &queue, Duration::from_secs(5))
            .maximum_concurrency(1),
        HttpInvoker::new("http://127.0.0.1:9"),
    );
    assert!(
        running
            .wait_for(
                "receipt-sender",
                |s| s.invocation_errors >= 1,
                Duration::from_secs(10)
            )
            .await
    );
    assert_eq!(running.stop().await["receipt-sender"].records_deleted, 0);
}

#[tokio::test]
async fn wait_drained_times_out_with_the_counts() {
    let clients = common::clients().await;
    let queue = common::queue(&clients, false, 30).await;
    common::send(&clients, &queue, None, &["left"]).await;
    let started = Instant::now();
    let err = local_aws::runner::wait_drained(
        &clients.sqs,
        &[queue.url.as_str()],
        Duration::from_millis(300),
    )
    .await
    .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3));
    match err {
        DrainError::Timeout { remaining, .. } => assert_eq!(remaining[&queue.url].visible, 1),
        other => panic!("{other}"),
    }
}

#[tokio::test]
async fn mappings_from_the_template() {
    let clients = common::clients().await;
    let options = local_aws::template::TemplateOptions::default()
        .naming(local_aws::template::Naming::unique("rt"));
    let template = local_aws::template::Template::load_project(&options).unwrap();
    let resources = local_aws::provision::provision(&clients, &template)
        .await
        .unwrap();
    let runner = Runner::from_clients(&clients)
        .all_functions(&template, &resources, HttpInvoker::cargo_lambda_watch())
        .unwrap();
    // payments-publisher reads the payments table's stream (tests/runner_stream_template.rs).
    let streams: Vec<_> = runner
        .stream_mappings()
        .map(|m| m.function_name.as_str())
        .collect();
    assert_eq!(streams, ["payments-publisher"]);
    let mappings: BTreeMap<&str, &EventSourceMapping> = runner
        .mappings()
        .map(|m| (m.function_name.as_str(), m))
        .collect();
    assert_eq!(mappings.len(), 2);
    let payments = mappings["payment-processor"];
    assert_eq!(payments.queue_url, resources.queues["PaymentsQueue"].url);
    assert_eq!(payments.queue_arn, resources.queues["PaymentsQueue"].arn);
    assert!(payments.fifo);
    assert_eq!(payments.batch_size, 10);
    assert_eq!(payments.maximum_concurrency, 5);
    assert_eq!(payments.timeout, Duration::from_secs(30));
    assert!(payments.report_batch_item_failures);
    assert_eq!(
        payments.function_arn,
        resources.function_arn("payment-processor")
    );
    let receipts = mappings["receipt-sender"];
    assert_eq!(receipts.maximum_batching_window, Duration::from_secs(1));
    assert!(!receipts.fifo);
    assert!(
        Runner::new(clients.sqs.clone())
            .function(
                &template,
                &resources,
                "payments-api",
                HttpInvoker::cargo_lambda_watch()
            )
            .is_err()
    );

    // The receipt-sender mapping, in-process, against the provisioned queue.
    common::send(
        &clients,
        &resources.queues["ReceiptsQueue"],
        None,
        &["r1", "r2", "r3"],
    )
    .await;
    let running = Runner::new(clients.sqs.clone())
        .wait_time_seconds(1)
        .function(
            &template,
            &resources,
            "ReceiptSenderFunction",
            InProcess::new(|_: LambdaEvent<SqsEvent>| async {
                Ok::<_, Error>(SqsBatchResponse::default())
            }),
        )
        .unwrap()
        .start(CancellationToken::new());
    let stats = drain_and_stop(
        running,
        &resources.queues["ReceiptsQueue"],
        "receipt-sender",
    )
    .await;
    assert_eq!(stats.records_deleted, 3);
}
