//! SQS records for calling a consumer's handler directly, as Lambda would (events:
//! [`crate::faults::event`]).

use aws_lambda_events::sqs::SqsMessage;

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
