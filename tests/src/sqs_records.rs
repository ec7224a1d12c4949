//! SQS records for calling a consumer's handler directly, as Lambda would (events:
//! [`crate::faults::event`]).

use aws_lambda_events::sqs::SqsMessage;

use crate::Stack;

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

/// A message received from the stack's receipts queue, as Lambda hands it to receipt-sender on
/// its first receive.
pub fn receipts_record(stack: &Stack, m: &aws_sdk_sqs::types::Message) -> SqsMessage {
    let mut record = SqsMessage::default();
    record.message_id = m.message_id.clone();
    record.receipt_handle = m.receipt_handle.clone();
    record.body = m.body.clone();
    record
        .attributes
        .insert("ApproximateReceiveCount".into(), "1".into());
    record.event_source_arn = Some(stack.resources.queues["ReceiptsQueue"].arn.clone());
    record
}
