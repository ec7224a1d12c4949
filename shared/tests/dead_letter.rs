//! Permanent failures go straight to a real dead-letter queue (moto).

mod common;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage, SqsMessageAttribute};
use lambda_idempotency::batch::{BatchProcessor, PermanentError, RecordError, json};
use lambda_idempotency::count::RequestCounter;
use lambda_idempotency::dead_letter::{DeadLetter, REASON_ATTRIBUTE, SOURCE_MESSAGE_ID_ATTRIBUTE};
use lambda_runtime::{Context, LambdaEvent};

fn record(id: &str, body: &str, group: &str) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some(id.into());
    m.body = Some(body.into());
    m.attributes
        .insert("ApproximateReceiveCount".into(), "1".into());
    m.attributes.insert("MessageGroupId".into(), group.into());
    m.event_source_arn = Some("arn:aws:sqs:us-east-1:123456789012:source.fifo".into());
    let mut attribute = SqsMessageAttribute::default();
    attribute.string_value = Some("web".into());
    attribute.data_type = Some("String".into());
    m.message_attributes.insert("origin".into(), attribute);
    m
}

#[derive(serde::Deserialize)]
struct Order {
    amount: i64,
}

async fn validate(
    order: Order,
    _ctx: lambda_idempotency::batch::RecordContext,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    if order.amount <= 0 {
        return Err(PermanentError::new(format!("amount {} is not positive", order.amount)).into());
    }
    if order.amount == 7 {
        return Err("transient".into());
    }
    Ok(())
}

#[tokio::test]
async fn permanent_failures_are_moved_and_acknowledged() {
    let counter = RequestCounter::default();
    let sqs = common::sqs(&counter).await;
    let dlq = common::create_fifo_queue(&sqs).await;
    let processor = BatchProcessor::new().with_dead_letter(DeadLetter::new(sqs.clone(), &dlq));
    let mut event = SqsEvent::default();
    event.records = vec![
        record("ok", r#"{"amount":5}"#, "g1"),
        record("invalid", r#"{"amount":-5}"#, "g2"),
        record("malformed", "{", "g3"),
        record("transient", r#"{"amount":7}"#, "g4"),
    ];
    let report = processor
        .process(
            &LambdaEvent::new(event, Context::default()),
            &json(validate),
        )
        .await
        .unwrap();
    let reported: Vec<_> = report
        .response()
        .batch_item_failures
        .into_iter()
        .map(|f| f.item_identifier)
        .collect();
    assert_eq!(
        reported,
        ["transient"],
        "only the transient failure is retried"
    );
    assert_eq!(report.dead_lettered().count(), 2);
    assert!(matches!(
        report.records[1].result,
        Err(RecordError::Permanent(_))
    ));

    let received = sqs
        .receive_message()
        .queue_url(&dlq)
        .max_number_of_messages(10)
        .message_attribute_names("All")
        .message_system_attribute_names(
            aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId,
        )
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default();
    assert_eq!(received.len(), 2);
    for m in &received {
        let attrs = m.message_attributes.as_ref().unwrap();
        let source = attrs[SOURCE_MESSAGE_ID_ATTRIBUTE].string_value().unwrap();
        let reason = attrs[REASON_ATTRIBUTE].string_value().unwrap();
        assert_eq!(
            attrs["origin"].string_value(),
            Some("web"),
            "original attributes kept"
        );
        let group = m.attributes.as_ref().unwrap()
            [&aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId]
            .clone();
        match source {
            "invalid" => {
                assert_eq!(m.body(), Some(r#"{"amount":-5}"#));
                assert_eq!(group, "g2", "group id kept");
                assert!(reason.contains("amount -5 is not positive"), "{reason}");
            }
            "malformed" => {
                assert_eq!(group, "g3");
                assert!(
                    reason.contains("malformed") && reason.contains("EOF"),
                    "{reason}"
                );
            }
            other => panic!("unexpected {other}"),
        }
    }
}

#[tokio::test]
async fn a_failed_move_leaves_the_record_failed() {
    let counter = RequestCounter::default();
    let sqs = common::sqs(&counter).await;
    let missing = format!("{}/123456789012/no-such-dlq.fifo", common::endpoint());
    let processor = BatchProcessor::new().with_dead_letter(DeadLetter::new(sqs, missing));
    let mut event = SqsEvent::default();
    event.records = vec![record("invalid", r#"{"amount":-1}"#, "g")];
    let report = processor
        .process(
            &LambdaEvent::new(event, Context::default()),
            &json(validate),
        )
        .await
        .unwrap();
    let reported: Vec<_> = report
        .response()
        .batch_item_failures
        .into_iter()
        .map(|f| f.item_identifier)
        .collect();
    assert_eq!(
        reported,
        ["invalid"],
        "nothing is lost: reported failed for redelivery"
    );
    assert_eq!(report.dead_lettered().count(), 0);
}

// --- copies that do not fit, and what a copy keeps ---------------------------------------------

use std::sync::{Arc, Mutex};

use aws_sdk_sqs::types::{
    MessageSystemAttributeName, MessageSystemAttributeNameForSends, QueueAttributeName,
    SendMessageBatchRequestEntry,
};
use lambda_idempotency::dead_letter::{
    Copied, REDUCED_ATTRIBUTE, SOURCE_QUEUE_ATTRIBUTE, TRACE_HEADER_ATTRIBUTE,
};
use lambda_idempotency::publish::Publisher;

const TRACE: &str = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";

/// A FIFO queue whose MaximumMessageSize is `max_bytes`.
async fn small_fifo_queue(sqs: &aws_sdk_sqs::Client, max_bytes: usize) -> String {
    sqs.create_queue()
        .queue_name(format!("{}.fifo", common::unique("small")))
        .attributes(QueueAttributeName::FifoQueue, "true")
        .attributes(
            QueueAttributeName::MaximumMessageSize,
            max_bytes.to_string(),
        )
        .send()
        .await
        .expect("create the queue")
        .queue_url
        .unwrap()
}

async fn receive_all(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<aws_sdk_sqs::types::Message> {
    sqs.receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .message_attribute_names("All")
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default()
}

/// `record` with `count` string attributes `attr-00`, `attr-01`, ... of `value_len` bytes each,
/// and a trace header.
fn with_attributes(mut m: SqsMessage, count: usize, value_len: usize) -> SqsMessage {
    m.message_attributes.clear();
    for i in 0..count {
        let mut attribute = SqsMessageAttribute::default();
        attribute.data_type = Some("String".into());
        attribute.string_value = Some(format!("{i}").repeat(value_len));
        m.message_attributes
            .insert(format!("attr-{i:02}"), attribute);
    }
    m.attributes
        .insert(TRACE_HEADER_ATTRIBUTE.into(), TRACE.into());
    m
}

#[tokio::test]
async fn a_copy_over_the_queues_maximum_message_size_arrives_reduced_and_marked() {
    let counter = RequestCounter::default();
    let sqs = common::sqs(&counter).await;
    let dlq = small_fifo_queue(&sqs, 2048).await;
    let body = format!(r#"{{"amount":-5,"pad":"{}"}}"#, "p".repeat(1500));
    let poison = with_attributes(record("poison", &body, "g1"), 3, 40);
    let reason = format!("permanent failure: {}", "the reason is long. ".repeat(60));

    // moto compares only the body with MaximumMessageSize: it takes the whole copy, which AWS
    // refuses (body and attributes count). That is why the size is computed before the send.
    let lenient = small_fifo_queue(&sqs, 2048).await;
    let whole = DeadLetter::new(sqs.clone(), &lenient)
        .message_for(&poison, &reason)
        .unwrap();
    assert!(whole.size() > 2048, "{}", whole.size());
    Publisher::new(sqs.clone(), &lenient)
        .send(whole)
        .await
        .expect("moto accepts a message over MaximumMessageSize by its attributes");

    let copied = DeadLetter::new(sqs.clone(), &dlq)
        .send(&poison, &reason)
        .await
        .unwrap();
    let Copied::Reduced { marker } = copied else {
        panic!("{copied:?}")
    };
    let received = receive_all(&sqs, &dlq).await;
    assert_eq!(received.len(), 1);
    let m = &received[0];
    assert_eq!(m.body(), Some(body.as_str()), "the body is never changed");
    let attrs = m.message_attributes.as_ref().unwrap();
    assert_eq!(
        attrs[REDUCED_ATTRIBUTE].string_value(),
        Some(marker.as_str())
    );
    assert!(
        marker.starts_with("over the queue's 2048 bytes"),
        "{marker}"
    );
    assert!(marker.contains("DeadLetterReason cut to"), "{marker}");
    assert_eq!(
        attrs[SOURCE_MESSAGE_ID_ATTRIBUTE].string_value(),
        Some("poison")
    );
    assert!(attrs.contains_key(SOURCE_QUEUE_ATTRIBUTE));
    let kept_reason = attrs[REASON_ATTRIBUTE].string_value().unwrap();
    assert!(
        kept_reason.starts_with("permanent failure: the reason is long.")
            && kept_reason.ends_with("..."),
        "{kept_reason}"
    );
    let size = body.len()
        + attrs
            .iter()
            .map(|(n, v)| n.len() + v.data_type().len() + v.string_value().unwrap_or("").len())
            .sum::<usize>();
    assert!(size <= 2048, "the copy is {size} bytes as SQS counts them");
    let group = &m.attributes.as_ref().unwrap()[&MessageSystemAttributeName::MessageGroupId];
    assert_eq!(group, "g1");
}

#[tokio::test]
async fn copies_keep_ten_attributes_the_originals_sorted_by_name() {
    let counter = RequestCounter::default();
    let sqs = common::sqs(&counter).await;
    let dlq = common::create_fifo_queue(&sqs).await;
    let dead_letter = DeadLetter::new(sqs.clone(), &dlq);
    // 9 attributes inserted in a hash map: the copy has room for 7 of them, the first by name.
    let copied = dead_letter
        .send(&with_attributes(record("m", "{}", "g"), 9, 3), "bad")
        .await
        .unwrap();
    assert_eq!(copied, Copied::Full);
    let received = receive_all(&sqs, &dlq).await;
    let mut names: Vec<_> = received[0]
        .message_attributes
        .as_ref()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    names.sort();
    let mut expected: Vec<String> = [
        REASON_ATTRIBUTE,
        SOURCE_MESSAGE_ID_ATTRIBUTE,
        SOURCE_QUEUE_ATTRIBUTE,
    ]
    .iter()
    .map(|s| s.to_string())
    .chain((0..7).map(|i| format!("attr-{i:02}")))
    .collect();
    expected.sort();
    assert_eq!(names, expected, "attr-07 and attr-08 are left out");
}

#[tokio::test]
async fn a_body_over_the_dead_letter_queues_limit_leaves_the_record_and_its_group_failed() {
    let counter = RequestCounter::default();
    let sqs = common::sqs(&counter).await;
    let dlq = small_fifo_queue(&sqs, 1024).await;
    // The processor believes the queue takes 1 MiB: SQS's refusal decides.
    let processor = BatchProcessor::new()
        .with_dead_letter(DeadLetter::new(sqs.clone(), &dlq).max_message_size(1024 * 1024));
    let big = format!(r#"{{"amount":-5,"pad":"{}"}}"#, "p".repeat(1100));
    let mut event = SqsEvent::default();
    event.records = vec![
        record("big", &big, "g"),
        record("follower", r#"{"amount":5}"#, "g"),
    ];
    let report = processor
        .process(
            &LambdaEvent::new(event, Context::default()),
            &json(validate),
        )
        .await
        .unwrap();
    let reported: Vec<_> = report
        .response()
        .batch_item_failures
        .into_iter()
        .map(|f| f.item_identifier)
        .collect();
    assert_eq!(reported, ["big", "follower"], "nothing is lost");
    assert_eq!(report.dead_lettered().count(), 0);
    assert!(receive_all(&sqs, &dlq).await.is_empty());
}

#[tokio::test]
async fn a_poison_message_whose_copy_does_not_fit_still_leaves_its_group() {
    let counter = RequestCounter::default();
    let sqs = common::sqs(&counter).await;
    let dlq = small_fifo_queue(&sqs, 1024).await;
    let processor = BatchProcessor::new().with_dead_letter(DeadLetter::new(sqs.clone(), &dlq));
    let ran: Arc<Mutex<Vec<i64>>> = Arc::default();
    let log = ran.clone();
    let handler = json(move |order: Order, ctx| {
        log.lock().unwrap().push(order.amount);
        validate(order, ctx)
    });
    // 500 bytes of body, 4 attributes of 100 bytes and the reason: over the queue's 1024 bytes.
    let poison_body = format!(r#"{{"amount":-5,"pad":"{}"}}"#, "p".repeat(480));
    let mut event = SqsEvent::default();
    event.records = vec![
        with_attributes(record("poison", &poison_body, "acct"), 4, 100),
        record("f1", r#"{"amount":1}"#, "acct"),
        record("f2", r#"{"amount":2}"#, "acct"),
    ];
    let report = processor
        .process(&LambdaEvent::new(event, Context::default()), &handler)
        .await
        .unwrap();
    assert!(
        report.response().batch_item_failures.is_empty(),
        "the followers ran in the same invocation: {:?}",
        report.records
    );
    assert_eq!(report.dead_lettered().count(), 1);
    assert_eq!(*ran.lock().unwrap(), [-5, 1, 2]);
    let received = receive_all(&sqs, &dlq).await;
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].body(), Some(poison_body.as_str()));
    let attrs = received[0].message_attributes.as_ref().unwrap();
    let marker = attrs[REDUCED_ATTRIBUTE].string_value().unwrap();
    assert!(marker.contains("not copied: attr-"), "{marker}");
    assert_eq!(
        attrs[SOURCE_MESSAGE_ID_ATTRIBUTE].string_value(),
        Some("poison")
    );
}

/// A dead-letter queue (mocked) that refuses, as AWS does, each entry over `limit` bytes counted
/// as SQS counts them, and whose attributes cannot be read (AccessDenied). Accepted entries are
/// kept in `sent`.
fn limited_queue(limit: usize, sent: Arc<Mutex<Vec<SendMessageBatchRequestEntry>>>) -> DeadLetter {
    let send = aws_smithy_mocks::mock!(aws_sdk_sqs::Client::send_message_batch)
        .then_compute_output(move |input| {
            let (mut ok, mut failed) = (Vec::new(), Vec::new());
            for e in input.entries() {
                let size = e.message_body().len()
                    + e.message_attributes().map_or(0, |a| {
                        a.iter()
                            .map(|(n, v)| {
                                n.len() + v.data_type().len() + v.string_value().unwrap_or("").len()
                            })
                            .sum()
                    });
                if size > limit {
                    failed.push(
                        aws_sdk_sqs::types::BatchResultErrorEntry::builder()
                            .id(e.id())
                            .code("InvalidParameterValue")
                            .message(format!(
                                "One or more parameters are invalid. Reason: Message must be \
                                 shorter than {limit} bytes."
                            ))
                            .sender_fault(true)
                            .build()
                            .unwrap(),
                    );
                } else {
                    sent.lock().unwrap().push(e.clone());
                    ok.push(
                        aws_sdk_sqs::types::SendMessageBatchResultEntry::builder()
                            .id(e.id())
                            .message_id("dlq-1")
                            .md5_of_message_body("0")
                            .build()
                            .unwrap(),
                    );
                }
            }
            aws_sdk_sqs::operation::send_message_batch::SendMessageBatchOutput::builder()
                .set_successful(Some(ok))
                .set_failed(Some(failed))
                .build()
                .unwrap()
        });
    let denied =
        aws_smithy_mocks::mock!(aws_sdk_sqs::Client::get_queue_attributes).then_error(|| {
            aws_sdk_sqs::operation::get_queue_attributes::GetQueueAttributesError::generic(
                aws_sdk_sqs::error::ErrorMetadata::builder()
                    .code("AccessDenied")
                    .message("not authorized to perform sqs:GetQueueAttributes")
                    .build(),
            )
        });
    let sqs = aws_smithy_mocks::mock_client!(
        aws_sdk_sqs,
        aws_smithy_mocks::RuleMode::MatchAny,
        [&send, &denied]
    );
    DeadLetter::new(sqs, "https://sqs.local/123456789012/dlq.fifo")
}

#[tokio::test]
async fn a_copy_refused_as_too_large_is_sent_again_reduced_with_its_trace_header() {
    let sent = Arc::default();
    let dead_letter = limited_queue(3300, Arc::clone(&sent));
    let body = format!(r#"{{"amount":-5,"pad":"{}"}}"#, "p".repeat(2500));
    let poison = with_attributes(record("poison", &body, "g"), 6, 50);
    // The limit cannot be read: the whole copy (about 4 KB) is tried against 1 MiB, refused,
    // and sent again within the limit SQS stated.
    let copied = dead_letter
        .send(&poison, &"a long reason. ".repeat(70))
        .await
        .unwrap();
    assert!(matches!(copied, Copied::Reduced { .. }), "{copied:?}");
    let sent = sent.lock().unwrap();
    assert_eq!(sent.len(), 1, "only the reduced copy was accepted");
    let entry = &sent[0];
    assert_eq!(entry.message_body(), body);
    let attrs = entry.message_attributes().unwrap();
    assert!(
        attrs[REDUCED_ATTRIBUTE]
            .string_value()
            .unwrap()
            .starts_with("over the queue's 3300 bytes"),
        "{attrs:?}"
    );
    let kept: Vec<_> = {
        let mut k: Vec<_> = attrs.keys().filter(|n| n.starts_with("attr-")).collect();
        k.sort();
        k
    };
    assert!(
        !kept.is_empty() && kept.len() < 6,
        "the originals that fit, first by name: {kept:?}"
    );
    assert_eq!(kept[0], "attr-00");
    let trace = &entry.message_system_attributes().unwrap()
        [&MessageSystemAttributeNameForSends::AwsTraceHeader];
    assert_eq!(
        trace.string_value(),
        Some(TRACE),
        "the copy stays in the trace"
    );
    assert_eq!(trace.data_type(), "String");
}

#[tokio::test]
async fn the_whole_copy_carries_the_trace_header_as_a_system_attribute() {
    let sent = Arc::default();
    let dead_letter = limited_queue(1024 * 1024, Arc::clone(&sent));
    let copied = dead_letter
        .send(&with_attributes(record("m", "{}", "g"), 2, 5), "bad")
        .await
        .unwrap();
    assert_eq!(copied, Copied::Full);
    let sent = sent.lock().unwrap();
    let entry = &sent[0];
    assert_eq!(
        entry.message_system_attributes().unwrap()
            [&MessageSystemAttributeNameForSends::AwsTraceHeader]
            .string_value(),
        Some(TRACE)
    );
    assert!(
        !entry
            .message_attributes()
            .unwrap()
            .contains_key(TRACE_HEADER_ATTRIBUTE),
        "a system attribute, not a message attribute"
    );
}
