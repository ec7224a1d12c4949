//! The runner's event for real messages has the shape of the events AWS sends
//! (the samples `shared/tests/data/sqs-event.json` and `sqs-fifo-event.json`).

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::MessageAttributeValue;
use bytes::Bytes;
use lambda_runtime::{Error, LambdaEvent};
use local_aws::runner::{EventSourceMapping, InProcess, Invocation, InvokeFuture, Invoker, Runner};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Hands each invocation to the test and reports success.
struct Capture(mpsc::UnboundedSender<Invocation>);

impl Invoker for Capture {
    fn invoke(&self, invocation: Invocation) -> InvokeFuture<'_> {
        let _ = self.0.send(invocation);
        Box::pin(async { Ok(Bytes::from_static(b"{}")) })
    }
}

fn key_set(v: &Value) -> BTreeSet<String> {
    v.as_object().expect("an object").keys().cloned().collect()
}

/// Runs one mapping until one invocation arrives; returns it.
async fn capture_one(
    clients: &local_aws::Clients,
    queue: &local_aws::provision::ProvisionedQueue,
) -> Invocation {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mapping =
        EventSourceMapping::new("shape", queue, Duration::from_secs(7)).maximum_concurrency(1);
    let running = Runner::new(clients.sqs.clone())
        .wait_time_seconds(1)
        .mapping(mapping, Capture(tx))
        .start(CancellationToken::new());
    let invocation = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("an invocation within 10 s")
        .unwrap();
    let stats = running.stop().await;
    assert_eq!(stats["shape"].records_deleted, 1);
    invocation
}

#[tokio::test]
async fn standard_event_has_the_shape_of_the_aws_sample() {
    let clients = common::clients().await;
    let queue = common::queue(&clients, false, 30).await;
    let attr = |t: &str| MessageAttributeValue::builder().data_type(t);
    clients
        .sqs
        .send_message()
        .queue_url(&queue.url)
        .message_body("Message Body")
        .message_attributes(
            "Attribute1",
            attr("String")
                .string_value("AttributeValue1")
                .build()
                .unwrap(),
        )
        .message_attributes(
            "Attribute2",
            attr("Number").string_value("123").build().unwrap(),
        )
        .message_attributes(
            "Attribute3",
            attr("Binary")
                .binary_value(Blob::new(b"1100".to_vec()))
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();

    let before = std::time::SystemTime::now();
    let invocation = capture_one(&clients, &queue).await;
    let event = &invocation.payload;
    let sample = common::sample_event("sqs-event.json");
    let (record, expected) = (&event["Records"][0], &sample["Records"][0]);
    assert_eq!(event["Records"].as_array().unwrap().len(), 1);
    assert_eq!(key_set(event), key_set(&sample));
    assert_eq!(key_set(record), key_set(expected), "record keys");
    assert_eq!(
        key_set(&record["attributes"]),
        key_set(&expected["attributes"]),
        "attributes"
    );
    assert_eq!(
        key_set(&record["messageAttributes"]),
        key_set(&expected["messageAttributes"])
    );
    for name in ["Attribute1", "Attribute2", "Attribute3"] {
        assert_eq!(
            key_set(&record["messageAttributes"][name]),
            key_set(&expected["messageAttributes"][name]),
            "messageAttributes.{name}"
        );
        assert_eq!(
            record["messageAttributes"][name]["dataType"],
            expected["messageAttributes"][name]["dataType"]
        );
    }
    assert_eq!(
        record["messageAttributes"]["Attribute3"]["binaryValue"],
        "MTEwMA=="
    );
    assert_eq!(
        record["messageAttributes"]["Attribute2"]["stringValue"],
        "123"
    );
    assert_eq!(
        record["messageAttributes"]["Attribute1"]["stringListValues"],
        serde_json::json!([])
    );
    assert_eq!(record["body"], "Message Body");
    // MD5("Message Body"), as SQS computed it, and as the sample has it.
    assert_eq!(record["md5OfBody"], "77a3cf88eba293be44f5fd5c61835a43");
    assert_eq!(record["md5OfBody"], expected["md5OfBody"]);
    assert_eq!(
        record["md5OfMessageAttributes"].as_str().map(str::len),
        Some(32)
    );
    assert_eq!(record["eventSource"], "aws:sqs");
    assert_eq!(record["eventSourceARN"], queue.arn.as_str());
    assert_eq!(record["awsRegion"], "us-east-1");
    assert_eq!(record["attributes"]["ApproximateReceiveCount"], "1");
    assert!(!record["receiptHandle"].as_str().unwrap().is_empty());

    // It deserializes into the type handlers take, and the context carries the deadline.
    let typed: SqsEvent = serde_json::from_value(event.clone()).unwrap();
    assert_eq!(
        typed.records[0].message_attributes["Attribute3"]
            .binary_value
            .as_ref()
            .unwrap()
            .0,
        b"1100"
    );
    let context = invocation.context();
    let deadline = std::time::UNIX_EPOCH + Duration::from_millis(context.deadline);
    let budget = deadline.duration_since(before).unwrap();
    assert!(
        budget > Duration::from_secs(6) && budget < Duration::from_secs(9),
        "{budget:?}"
    );
    assert_eq!(context.env_config.function_name, "shape");
    assert!(uuid_like(&context.request_id), "{}", context.request_id);
}

fn uuid_like(s: &str) -> bool {
    s.len() == 36 && s.chars().filter(|c| *c == '-').count() == 4
}

#[tokio::test]
async fn fifo_event_has_the_shape_of_the_aws_sample() {
    let clients = common::clients().await;
    let queue = common::queue(&clients, true, 30).await;
    clients
        .sqs
        .send_message()
        .queue_url(&queue.url)
        .message_body(r#"{"paymentId":"pay-001"}"#)
        .message_group_id("acct-42")
        .message_deduplication_id("pay-001")
        .send()
        .await
        .unwrap();

    let invocation = capture_one(&clients, &queue).await;
    let event = &invocation.payload;
    let sample = common::sample_event("sqs-fifo-event.json");
    let (record, expected) = (&event["Records"][0], &sample["Records"][0]);
    assert_eq!(key_set(record), key_set(expected), "record keys");
    assert_eq!(
        key_set(&record["attributes"]),
        key_set(&expected["attributes"]),
        "attributes"
    );
    assert_eq!(record["attributes"]["MessageGroupId"], "acct-42");
    assert_eq!(record["attributes"]["MessageDeduplicationId"], "pay-001");
    assert!(
        record["attributes"]["SequenceNumber"]
            .as_str()
            .unwrap()
            .parse::<u128>()
            .is_ok()
    );
    assert_eq!(record["messageAttributes"], serde_json::json!({}));
    assert!(
        record["eventSourceARN"]
            .as_str()
            .unwrap()
            .ends_with(".fifo")
    );

    let typed: SqsEvent = serde_json::from_value(event.clone()).unwrap();
    assert_eq!(typed.records[0].attributes["MessageGroupId"], "acct-42");
}

#[tokio::test]
async fn in_process_handlers_get_the_typed_event() {
    let clients = common::clients().await;
    let queue = common::queue(&clients, false, 30).await;
    common::send(&clients, &queue, None, &["a", "b"]).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mapping =
        EventSourceMapping::new("typed", &queue, Duration::from_secs(5)).maximum_concurrency(1);
    let running = Runner::new(clients.sqs.clone())
        .wait_time_seconds(1)
        .mapping(
            mapping,
            InProcess::new(move |event: LambdaEvent<SqsEvent>| {
                let tx = tx.clone();
                async move {
                    for r in &event.payload.records {
                        tx.send((r.body.clone().unwrap(), event.context.request_id.clone()))
                            .unwrap();
                    }
                    Ok::<_, Error>(SqsBatchResponse::default())
                }
            }),
        )
        .start(CancellationToken::new());
    let mut bodies = Vec::new();
    while bodies.len() < 2 {
        let (body, request_id) = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert!(uuid_like(&request_id));
        bodies.push(body);
    }
    bodies.sort();
    assert_eq!(bodies, ["a", "b"]);
    running
        .wait_drained(&[queue.url.as_str()], Duration::from_secs(10))
        .await
        .unwrap();
    let stats = running.stop().await;
    assert_eq!(stats["typed"].records_deleted, 2);
}
