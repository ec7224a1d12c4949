//! Records that fail for good go to the dead-letter queue, right where they fail.
//!
//! A record that fails permanently ([`RecordError::is_permanent`](crate::outcome::RecordError::is_permanent):
//! the handler said so with a [`PermanentError`](crate::outcome::PermanentError), the body does not
//! deserialize, no key can be taken from it, or its key was used with another payload), or whose
//! attempt budget is used up, would otherwise stay on the queue until its `maxReceiveCount`, and
//! on a FIFO queue hold up every message of its group behind it: with a [`DeadLetter`] on the
//! [`BatchProcessor`](crate::batch::BatchProcessor), it is sent to the dead-letter queue at once
//! and acknowledged, and the rest of its group runs on.
//!
//! The copy keeps the body, the message attributes and, for a FIFO queue, the message group, and
//! carries three more attributes: `DeadLetterReason` (the error), `DeadLetterSourceMessageId` and
//! `DeadLetterSourceQueueArn`. If the send fails, the record is reported failed as usual: nothing
//! is lost. The function needs `sqs:SendMessage` on the dead-letter queue.

use aws_lambda_events::sqs::SqsMessage;
use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::MessageAttributeValue;

use crate::publish::{DeduplicationId, Message, MessageGroupId, Publisher};
use crate::record::truncate_error;

/// Attribute with the error that sent a message to the dead-letter queue.
pub const REASON_ATTRIBUTE: &str = "DeadLetterReason";
/// Attribute with the message id the message had on its source queue.
pub const SOURCE_MESSAGE_ID_ATTRIBUTE: &str = "DeadLetterSourceMessageId";
/// Attribute with the ARN of the source queue.
pub const SOURCE_QUEUE_ATTRIBUTE: &str = "DeadLetterSourceQueueArn";
/// SQS accepts at most 10 message attributes.
const MAX_ATTRIBUTES: usize = 10;

/// Sends records to a dead-letter queue (a permanent error, or the attempt budget used up), with
/// the reason; see the module docs.
///
/// ```no_run
/// # async fn example() {
/// use lambda_idempotency::batch::BatchProcessor;
/// use lambda_idempotency::dead_letter::DeadLetter;
///
/// let config = aws_config::load_from_env().await;
/// let sqs = aws_sdk_sqs::Client::new(&config);
/// let processor = BatchProcessor::new()
///     .with_dead_letter(DeadLetter::new(sqs, "https://sqs.us-east-1.amazonaws.com/123456789012/payments-dlq.fifo"));
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct DeadLetter {
    publisher: Publisher,
}

impl DeadLetter {
    /// Sends to the queue at `queue_url` (FIFO when it ends in `.fifo`).
    pub fn new(sqs: aws_sdk_sqs::Client, queue_url: impl Into<String>) -> Self {
        Self {
            publisher: Publisher::new(sqs, queue_url).max_attempts(3),
        }
    }

    /// The dead-letter queue's URL.
    pub fn queue_url(&self) -> &str {
        self.publisher.queue_url()
    }

    /// The copy of `record` for the dead-letter queue, with `reason` in its
    /// [`REASON_ATTRIBUTE`], or why there is none.
    pub fn message_for(&self, record: &SqsMessage, reason: &str) -> Result<Message, String> {
        let body = record
            .body
            .clone()
            .filter(|b| !b.is_empty())
            .ok_or("the message has no body")?;
        let message_id = record.message_id.as_deref().unwrap_or_default();
        let mut message = if self.publisher.queue_url().ends_with(".fifo") {
            let group = record
                .attributes
                .get("MessageGroupId")
                .map(String::as_str)
                .unwrap_or("dead-letter");
            Message::fifo(
                MessageGroupId::new(group).map_err(|e| e.to_string())?,
                // The source message id is unique: the dead-letter queue keeps one copy.
                DeduplicationId::from_key(message_id),
                body,
            )
        } else {
            Message::standard(body)
        }
        .map_err(|e| e.to_string())?;
        let mut kept = 0;
        for (name, value) in &record.message_attributes {
            if kept == MAX_ATTRIBUTES - 3 {
                tracing::warn!(
                    message_id,
                    "message attributes beyond 7 not copied to the dead-letter queue"
                );
                break;
            }
            let mut copy = MessageAttributeValue::builder()
                .data_type(value.data_type.clone().unwrap_or_else(|| "String".into()));
            if let Some(text) = &value.string_value {
                copy = copy.string_value(text);
            }
            if let Some(bytes) = &value.binary_value {
                copy = copy.binary_value(Blob::new(bytes.0.clone()));
            }
            if let Ok(copy) = copy.build() {
                message = message
                    .with_attribute_value(name, copy)
                    .map_err(|e| e.to_string())?;
                kept += 1;
            }
        }
        message
            .with_attribute(REASON_ATTRIBUTE, truncate_error(reason))
            .and_then(|m| m.with_attribute(SOURCE_MESSAGE_ID_ATTRIBUTE, message_id))
            .and_then(|m| {
                m.with_attribute(
                    SOURCE_QUEUE_ATTRIBUTE,
                    record
                        .event_source_arn
                        .clone()
                        .unwrap_or_else(|| "unknown".into()),
                )
            })
            .map_err(|e| e.to_string())
    }

    /// Sends the copy of `record` (see [`message_for`](Self::message_for)).
    pub async fn send(&self, record: &SqsMessage, reason: &str) -> Result<(), String> {
        let message = self.message_for(record, reason)?;
        self.publisher
            .send(message)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}
