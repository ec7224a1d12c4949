//! payments-publisher's stream mapping from template.yaml: resolved from the template, run with
//! `Runner::function` like an SQS consumer, and drained with `wait_idle` in a pipeline where
//! the relay queues what the stream carries and a consumer takes it off the queue.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::dynamodb::Event;
use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use aws_lambda_events::streams::DynamoDbEventResponse;
use aws_sdk_dynamodb::types::AttributeValue;
use lambda_runtime::{Error, LambdaEvent};
use local_aws::runner::{
    HttpInvoker, InProcess, Runner, RunnerError, StreamOptions, StreamWaitError,
};
use local_aws::template::{Naming, StartingPosition, Template, TemplateOptions};
use tokio_util::sync::CancellationToken;

fn fast() -> StreamOptions {
    StreamOptions {
        poll_interval: Duration::from_millis(20),
        shard_refresh_interval: Duration::from_millis(200),
        retry_base_delay: Duration::from_millis(10),
        retry_max_delay: Duration::from_millis(50),
    }
}

fn text(item: &serde_dynamo::Item, name: &str) -> String {
    match item.get(name) {
        Some(serde_dynamo::AttributeValue::S(s)) => s.clone(),
        other => panic!("{name}: {other:?}"),
    }
}

#[tokio::test]
async fn the_template_s_stream_source_resolves_and_all_functions_includes_it() {
    let clients = common::clients().await;
    let template =
        Template::load_project(&TemplateOptions::default().naming(Naming::unique("rt"))).unwrap();
    let resources = local_aws::provision::provision(&clients, &template)
        .await
        .unwrap();
    let invoker = HttpInvoker::new("http://127.0.0.1:9");

    let runner = Runner::from_clients(&clients)
        .all_functions(&template, &resources, invoker.clone())
        .unwrap();
    let mut consumers: Vec<_> = runner
        .mappings()
        .map(|m| m.function_name.as_str())
        .collect();
    consumers.sort_unstable();
    assert_eq!(consumers, ["payment-processor", "receipt-sender"]);
    let streams: Vec<_> = runner.stream_mappings().collect();
    assert_eq!(streams.len(), 1);
    let m = streams[0];
    assert_eq!(m.function_name, "payments-publisher");
    assert_eq!(m.binary.as_deref(), Some("payments-publisher"));
    assert_eq!(
        Some(m.stream_arn.as_str()),
        resources.tables["PaymentsTable"].stream_arn.as_deref()
    );
    assert_eq!(m.starting_position, StartingPosition::TrimHorizon);
    assert_eq!(m.batch_size, 10);
    assert_eq!(m.maximum_batching_window, Duration::from_secs(1));
    assert!(m.report_batch_item_failures);
    assert!(m.bisect_batch_on_function_error);
    assert_eq!(m.maximum_retry_attempts, None);
    assert_eq!(m.maximum_record_age, Some(Duration::from_secs(43_200)));
    assert_eq!(m.timeout, Duration::from_secs(30));
    assert_eq!(m.filters.len(), 1);
    assert_eq!(
        m.on_failure.as_ref().map(|q| q.name.as_str()),
        Some(
            resources.queues["PaymentsOutboxDeadLetterQueue"]
                .name
                .as_str()
        )
    );

    // Without a DynamoDB Streams client the stream source cannot run: said, not skipped.
    let err = Runner::new(clients.sqs.clone())
        .all_functions(&template, &resources, invoker.clone())
        .err()
        .unwrap();
    assert!(matches!(err, RunnerError::NoStreamsClient(ref f) if f == "payments-publisher"));
    // payments-api has no event source a runner runs.
    assert!(matches!(
        Runner::from_clients(&clients).function(&template, &resources, "payments-api", invoker),
        Err(RunnerError::NoSqsEvents(_))
    ));
}

#[tokio::test]
async fn payments_publisher_relays_every_write_and_wait_idle_drains_the_pipeline() {
    let clients = common::clients().await;
    let template =
        Template::load_project(&TemplateOptions::default().naming(Naming::unique("rp"))).unwrap();
    let resources = local_aws::provision::provision(&clients, &template)
        .await
        .unwrap();
    let payments_queue = resources.queues["PaymentsQueue"].clone();
    let table = resources.tables["PaymentsTable"].name.clone();

    // The relay: each new payment to payments.fifo (group = account, dedup id = payment id).
    let sqs = clients.sqs.clone();
    let queue_url = payments_queue.url.clone();
    let relayed: Arc<Mutex<Vec<String>>> = Arc::default();
    let relay_log = Arc::clone(&relayed);
    let publisher = InProcess::new(move |event: LambdaEvent<Event>| {
        let (sqs, queue_url, relay_log) = (sqs.clone(), queue_url.clone(), relay_log.clone());
        async move {
            for record in &event.payload.records {
                assert_eq!(
                    record.event_name, "INSERT",
                    "the filter lets INSERTs through only"
                );
                let image = &record.change.new_image;
                let id = text(image, "paymentId");
                sqs.send_message()
                    .queue_url(&queue_url)
                    .message_group_id(text(image, "accountId"))
                    .message_deduplication_id(&id)
                    .message_body(&id)
                    .send()
                    .await?;
                relay_log.lock().unwrap().push(id);
            }
            Ok::<_, Error>(DynamoDbEventResponse::default())
        }
    });
    // The consumer: takes each payment off the queue and marks it charged (a MODIFY on the
    // stream, which the relay's filter drops).
    let ddb = clients.dynamodb.clone();
    let charged: Arc<Mutex<Vec<String>>> = Arc::default();
    let charge_log = Arc::clone(&charged);
    let charged_table = table.clone();
    let processor = InProcess::new(move |event: LambdaEvent<SqsEvent>| {
        let (ddb, charge_log, table) = (ddb.clone(), charge_log.clone(), charged_table.clone());
        async move {
            for message in &event.payload.records {
                let id = message.body.clone().unwrap_or_default();
                ddb.update_item()
                    .table_name(&table)
                    .key("paymentId", AttributeValue::S(id.clone()))
                    .update_expression("SET #s = :charged")
                    .expression_attribute_names("#s", "status")
                    .expression_attribute_values(":charged", AttributeValue::S("charged".into()))
                    .send()
                    .await?;
                charge_log.lock().unwrap().push(id);
            }
            Ok::<_, Error>(SqsBatchResponse::default())
        }
    });
    let running = Runner::from_clients(&clients)
        .wait_time_seconds(1)
        .stream_options(fast())
        .function(&template, &resources, "payments-publisher", publisher)
        .unwrap()
        .function(&template, &resources, "payment-processor", processor)
        .unwrap()
        .start(CancellationToken::new());

    let ids: Vec<String> = (0..12).map(|i| format!("p{i:02}")).collect();
    for (i, id) in ids.iter().enumerate() {
        clients
            .dynamodb
            .put_item()
            .table_name(&table)
            .item("paymentId", AttributeValue::S(id.clone()))
            .item("accountId", AttributeValue::S(format!("acct-{}", i % 3)))
            .item("status", AttributeValue::S("accepted".into()))
            .send()
            .await
            .unwrap();
    }
    running
        .wait_idle(&[payments_queue.url.as_str()], Duration::from_secs(60))
        .await
        .unwrap();
    // Idle means done: every write relayed (in order, once), every message consumed.
    assert_eq!(*relayed.lock().unwrap(), ids);
    let mut done = charged.lock().unwrap().clone();
    done.sort();
    assert_eq!(done, ids);
    assert!(matches!(
        running
            .wait_stream_caught_up("payment-processor", Duration::from_millis(10))
            .await,
        Err(StreamWaitError::NoStreamMapping(_))
    ));
    let stats = running.stop().await;
    let publisher = stats["payments-publisher"].stream;
    assert_eq!(
        publisher.records_read, 24,
        "12 INSERTs and 12 MODIFYs: {publisher:?}"
    );
    assert_eq!(publisher.records_filtered, 12);
    assert_eq!(publisher.records_processed, 12);
    assert_eq!(stats["payment-processor"].records_deleted, 12);
}
