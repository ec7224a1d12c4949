//! SQS events for calling a consumer's handler directly, as Lambda would.

use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_runtime::{Context, LambdaEvent};

/// A record of `payments.fifo` with this message id, body, group and receive count.
pub fn fifo_record(id: &str, body: &str, group: &str, receive_count: u32) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some(id.into());
    m.receipt_handle = Some(format!("rh-{id}"));
    m.body = Some(body.into());
    m.attributes
        .insert("ApproximateReceiveCount".into(), receive_count.to_string());
    m.attributes.insert("MessageGroupId".into(), group.into());
    m.event_source_arn = Some("arn:aws:sqs:us-east-1:123456789012:payments.fifo".into());
    m
}

/// An event of `records`, its invocation's deadline `deadline_in` from now.
pub fn event(records: Vec<SqsMessage>, deadline_in: Duration) -> LambdaEvent<SqsEvent> {
    let mut e = SqsEvent::default();
    e.records = records;
    let mut context = Context::default();
    context.deadline = (SystemTime::now() + deadline_in)
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    LambdaEvent::new(e, context)
}

/// The message ids a batch response reports failed.
pub fn failed_ids(response: &aws_lambda_events::sqs::SqsBatchResponse) -> Vec<String> {
    response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect()
}
