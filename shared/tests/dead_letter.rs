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
