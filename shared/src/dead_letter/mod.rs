//! Records that fail for good go to the dead-letter queue, right where they fail.
//!
//! A record that fails permanently ([`RecordError::is_permanent`](crate::error::RecordError::is_permanent):
//! the handler said so with a [`PermanentError`](crate::error::PermanentError), the body does not
//! deserialize, no key can be taken from it, or its key was used with another payload), or whose
//! attempt budget is used up, would otherwise stay on the queue until its `maxReceiveCount`, and
//! on a FIFO queue hold up every message of its group behind it: with a [`DeadLetter`] on the
//! [`BatchProcessor`](crate::batch::BatchProcessor), it is sent to the dead-letter queue at once
//! and acknowledged, and the rest of its group runs on.
//!
//! # The copy
//!
//! The copy keeps the body (never changed) and, for a FIFO queue, the message group; it carries
//! the original's X-Ray trace header (the record's `AWSTraceHeader` attribute) as its own
//! `AWSTraceHeader` system attribute, and at most 10 message attributes (SQS's
//! limit), in this order:
//!
//! 1. its own, always: [`REASON_ATTRIBUTE`] (the error, at most
//!    [`MAX_ERROR_LEN`](crate::state::MAX_ERROR_LEN) bytes, with anything that looks like an
//!    item's value cut by [`safe_reason`]), [`SOURCE_MESSAGE_ID_ATTRIBUTE`],
//!    [`SOURCE_QUEUE_ATTRIBUTE`], and [`REDUCED_ATTRIBUTE`] on a reduced copy;
//! 2. then the original's message attributes, sorted by name, as many as fit in the 10. An
//!    original attribute with the name of one of the copy's own is not copied (a message
//!    dead-lettered a second time gets a new reason).
//!
//! # A copy that does not fit
//!
//! The copy's attributes add about 1.2 KB to the body: a body near SQS's 1 MiB, or a dead-letter
//! queue whose `MaximumMessageSize` is smaller than its source queue's, makes the whole copy too
//! large, and a send that fails every time would leave the record failed and, on a FIFO queue,
//! its group blocked until SQS's redrive. So when the whole copy does not fit, a reduced one is
//! sent: the reason cut to 256 bytes (or what room is left), the source
//! message id and queue, and the original's attributes that fit, with [`REDUCED_ATTRIBUTE`] saying
//! what was cut or dropped. When not even that has room, the body goes alone ([`Copied::Bare`]).
//! A copy does not fit when its size as SQS counts it
//! (as SQS counts a message's size: the body and each attribute's name, type and
//! value; the trace header does not count) is over the queue's `MaximumMessageSize`, or when SQS
//! refuses it as too large.
//!
//! The size is checked before the send, not only from SQS's answer: the local emulator (moto)
//! compares only the body with `MaximumMessageSize`, and would accept a copy whose attributes
//! take it over the limit that AWS refuses, so the same copy is sent on both. The queue's
//! `MaximumMessageSize` is read once (`GetQueueAttributes`), and only for a copy over 1 KiB, the
//! smallest `MaximumMessageSize` SQS allows (a smaller copy fits every queue), unless it is given
//! with [`DeadLetter::max_message_size`]. If it cannot be read, the copy is checked against 1 MiB
//! and SQS's refusal decides.
//!
//! If even the bare body cannot be sent (it is over the dead-letter queue's limit), or the send
//! fails for another reason, the record is reported failed as usual: nothing is lost, and the log
//! says why. The function needs `sqs:SendMessage` and `sqs:GetQueueAttributes` on the
//! dead-letter queue.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use aws_lambda_events::sqs::SqsMessage;
use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{MessageAttributeValue, QueueAttributeName};

use crate::publish::{
    DeduplicationId, MAX_MESSAGE_BYTES, Message, MessageGroupId, PublishError, Publisher,
};
use crate::redact::safe_reason;
use crate::redact::truncate;
use crate::state::truncate_error;

mod draft;
#[cfg(any(test, doc, feature = "test-util"))]
pub(crate) mod in_memory_sqs;
use draft::Draft;

/// Attribute with the error that sent a message to the dead-letter queue.
pub const REASON_ATTRIBUTE: &str = "DeadLetterReason";
/// Attribute with the message id the message had on its source queue.
pub const SOURCE_MESSAGE_ID_ATTRIBUTE: &str = "DeadLetterSourceMessageId";
/// Attribute of a reduced copy ([`Copied::Reduced`]): what was cut or dropped to make it fit,
/// such as `over the queue's 2048 bytes: DeadLetterReason cut to 120 of 1024 bytes; not copied:
/// note, origin`.
pub const REDUCED_ATTRIBUTE: &str = "DeadLetterReduced";
/// Attribute with the ARN of the source queue.
pub const SOURCE_QUEUE_ATTRIBUTE: &str = "DeadLetterSourceQueueArn";
/// The record attribute (and the copy's system attribute) with the X-Ray trace header.
pub const TRACE_HEADER_ATTRIBUTE: &str = "AWSTraceHeader";
/// SQS accepts at most 10 message attributes.
pub(crate) const MAX_ATTRIBUTES: usize = 10;
/// Longest reason in a reduced copy, in bytes.
pub(crate) const REDUCED_REASON_LEN: usize = 256;
/// The smallest `MaximumMessageSize` SQS allows: a copy this small fits every queue.
pub(crate) const MIN_QUEUE_MESSAGE_SIZE: usize = 1024;
/// Longest [`REDUCED_ATTRIBUTE`] value, in bytes.
const MARKER_LEN: usize = 256;
/// Shortest reason worth keeping in a reduced copy, in bytes.
const MIN_REASON_LEN: usize = 16;
/// How long reading the queue's `MaximumMessageSize` may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);

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
    queue_url: String,
    sink: Sink,
    /// The queue's `MaximumMessageSize`, once known; shared by the clones.
    max_message_size: Arc<OnceLock<usize>>,
}

/// Where the copies go.
#[derive(Debug, Clone)]
enum Sink {
    Sqs {
        publisher: Publisher,
        sqs: aws_sdk_sqs::Client,
    },
    #[cfg(any(test, doc, feature = "test-util"))]
    InMemory(in_memory_sqs::InMemorySqs),
}

/// Which copy [`DeadLetter::send`] sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Copied {
    /// The whole copy: every attribute of the module docs.
    Full,
    /// A reduced copy, with [`REDUCED_ATTRIBUTE`] set to `marker`: the whole one did not fit.
    Reduced {
        /// What was cut or dropped.
        marker: String,
    },
    /// The body alone (with its group and trace header): no room was left for any attribute.
    Bare,
}

impl DeadLetter {
    /// Sends to the queue at `queue_url` (FIFO when it ends in `.fifo`).
    pub fn new(sqs: aws_sdk_sqs::Client, queue_url: impl Into<String>) -> Self {
        let queue_url = queue_url.into();
        Self {
            sink: Sink::Sqs {
                publisher: Publisher::new(sqs.clone(), queue_url.clone()).max_attempts(3),
                sqs,
            },
            queue_url,
            max_message_size: Arc::default(),
        }
    }

    /// Records the copies in `sqs` instead of sending them (feature `test-util`): the copy
    /// [`send`](Self::send) would send to the queue at `queue_url` (FIFO when it ends in
    /// `.fifo`), within its [`max_message_size`](Self::max_message_size) (1 MiB unless given).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use lambda_idempotency::dead_letter::{Copied, DeadLetter};
    /// use lambda_idempotency::test_util::{InMemorySqs, SqsEventBuilder};
    ///
    /// let sqs = InMemorySqs::new();
    /// let dead_letter = DeadLetter::in_memory(&sqs, "https://sqs.us-east-1.amazonaws.com/123456789012/dlq");
    /// let event = SqsEventBuilder::new().message("m-1", "not json").build();
    /// let copied = dead_letter.send(&event.payload.records[0], "the body is not JSON").await.unwrap();
    /// assert_eq!(copied, Copied::Full);
    /// assert_eq!(sqs.dead_letters()[0].reason, "the body is not JSON");
    /// assert_eq!(sqs.dead_letters()[0].message.body(), "not json");
    /// # });
    /// ```
    #[cfg(any(test, doc, feature = "test-util"))]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn in_memory(sqs: &in_memory_sqs::InMemorySqs, queue_url: impl Into<String>) -> Self {
        Self {
            queue_url: queue_url.into(),
            sink: Sink::InMemory(sqs.clone()),
            max_message_size: Arc::default(),
        }
    }

    /// The queue's `MaximumMessageSize`, in bytes (1,024 to 1,048,576), when it is known: the
    /// queue's attribute is then never read.
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        let lock = OnceLock::new();
        let _ = lock.set(bytes.clamp(MIN_QUEUE_MESSAGE_SIZE, MAX_MESSAGE_BYTES));
        self.max_message_size = Arc::new(lock);
        self
    }

    /// The dead-letter queue's URL.
    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }

    /// The whole copy of `record` for the dead-letter queue, with `reason` in its
    /// [`REASON_ATTRIBUTE`], or why there is none (no body, an invalid group id, over 1 MiB).
    pub fn message_for(&self, record: &SqsMessage, reason: &str) -> Result<Message, String> {
        let draft = self.draft(record, reason)?;
        draft.message(&draft.full())
    }

    /// The copy of `record` that fits in `max_bytes` (as SQS counts them; at most 1 MiB): the
    /// whole one, else a reduced one, else the body alone; an error when not even the body fits.
    ///
    /// ```
    /// use aws_lambda_events::sqs::SqsMessage;
    /// use lambda_idempotency::dead_letter::{Copied, DeadLetter, REDUCED_ATTRIBUTE};
    ///
    /// # let config = aws_sdk_sqs::Config::builder().behavior_version_latest().build();
    /// let dead_letter = DeadLetter::new(aws_sdk_sqs::Client::from_conf(config), "https://sqs.local/1/dlq");
    /// let mut record = SqsMessage::default();
    /// record.message_id = Some("m-1".into());
    /// record.body = Some("x".repeat(1500));
    /// let (copy, copied) = dead_letter.copy_within(&record, &"a long reason ".repeat(80), 2048).unwrap();
    /// assert!(matches!(copied, Copied::Reduced { .. }));
    /// assert!(copy.size() <= 2048);
    /// assert_eq!(copy.body(), record.body.as_deref().unwrap());
    /// assert!(copy.attributes().contains_key(REDUCED_ATTRIBUTE));
    /// assert!(dead_letter.copy_within(&record, "reason", 1024).is_err(), "the body alone is too large");
    /// ```
    pub fn copy_within(
        &self,
        record: &SqsMessage,
        reason: &str,
        max_bytes: usize,
    ) -> Result<(Message, Copied), String> {
        let draft = self.draft(record, reason)?;
        let limit = max_bytes.min(MAX_MESSAGE_BYTES);
        let full = draft.full();
        if draft.size(&full) <= limit {
            return Ok((draft.message(&full)?, Copied::Full));
        }
        match draft.reduced(limit)? {
            Some((attributes, marker)) => {
                Ok((draft.message(&attributes)?, Copied::Reduced { marker }))
            }
            None => Ok((draft.message(&[])?, Copied::Bare)),
        }
    }

    /// Sends the copy of `record` (see the module docs): the whole one when it fits, else a
    /// reduced one, else the body alone. An error when nothing could be sent.
    pub async fn send(&self, record: &SqsMessage, reason: &str) -> Result<Copied, String> {
        let (publisher, sqs) = match &self.sink {
            Sink::Sqs { publisher, sqs } => (publisher, sqs),
            #[cfg(any(test, doc, feature = "test-util"))]
            Sink::InMemory(memory) => {
                let limit = self
                    .max_message_size
                    .get()
                    .copied()
                    .unwrap_or(MAX_MESSAGE_BYTES);
                let (message, copied) = self.copy_within(record, reason, limit)?;
                let source = record.message_id.as_deref().unwrap_or_default();
                let reason = truncate_error(&safe_reason(reason));
                memory.record_dead_letter(
                    &self.queue_url,
                    source,
                    &reason,
                    message,
                    copied.clone(),
                )?;
                return Ok(copied);
            }
        };
        let draft = self.draft(record, reason)?;
        let message_id = draft.message_id.as_str();
        let full = draft.full();
        let full_size = draft.size(&full);
        let mut limit = if full_size <= MIN_QUEUE_MESSAGE_SIZE {
            MAX_MESSAGE_BYTES
        } else {
            self.queue_limit(sqs).await
        };
        if full_size <= limit {
            match publisher.send(draft.message(&full)?).await {
                Ok(_) => return Ok(Copied::Full),
                Err(e) => match too_large(&e) {
                    Some(stated) => {
                        // SQS knows better: a smaller limit than the one read, or none was read.
                        limit = stated.unwrap_or(full_size - 1).min(full_size - 1);
                        tracing::warn!(
                            message_id,
                            size = full_size,
                            error = %e,
                            "the dead-letter copy was refused as too large; sending a reduced copy"
                        );
                    }
                    None => return Err(e.to_string()),
                },
            }
        } else {
            tracing::warn!(
                message_id,
                size = full_size,
                limit,
                "the whole dead-letter copy is over the dead-letter queue's MaximumMessageSize; \
                 sending a reduced copy"
            );
        }
        let reduced = match draft.reduced(limit) {
            Ok(reduced) => reduced,
            Err(e) => {
                tracing::error!(
                    message_id,
                    body_bytes = draft.body.len(),
                    limit,
                    queue = self.queue_url(),
                    "{e}"
                );
                return Err(e);
            }
        };
        if let Some((attributes, marker)) = reduced {
            match publisher.send(draft.message(&attributes)?).await {
                Ok(_) => return Ok(Copied::Reduced { marker }),
                Err(e) if too_large(&e).is_some() => tracing::warn!(
                    message_id,
                    error = %e,
                    "the reduced dead-letter copy was refused as too large; sending the body alone"
                ),
                Err(e) => return Err(e.to_string()),
            }
        }
        match publisher.send(draft.message(&[])?).await {
            Ok(_) => Ok(Copied::Bare),
            Err(e) => {
                let error = if too_large(&e).is_some() {
                    format!(
                        "not even the bare body ({} bytes) can be sent to the dead-letter queue: \
                         {e}; raise its MaximumMessageSize to its source queue's",
                        draft.body.len()
                    )
                } else {
                    e.to_string()
                };
                tracing::error!(message_id, queue = self.queue_url(), "{error}");
                Err(error)
            }
        }
    }

    /// The queue's `MaximumMessageSize`: given, read once, or 1 MiB when it cannot be read.
    async fn queue_limit(&self, sqs: &aws_sdk_sqs::Client) -> usize {
        if let Some(&bytes) = self.max_message_size.get() {
            return bytes;
        }
        let read = sqs
            .get_queue_attributes()
            .queue_url(self.queue_url())
            .attribute_names(QueueAttributeName::MaximumMessageSize)
            .send();
        let error = match tokio::time::timeout(LOOKUP_TIMEOUT, read).await {
            Ok(Ok(out)) => {
                let value = out
                    .attributes()
                    .and_then(|a| a.get(&QueueAttributeName::MaximumMessageSize))
                    .and_then(|v| v.parse::<usize>().ok());
                match value {
                    Some(bytes) => {
                        let bytes = bytes.clamp(MIN_QUEUE_MESSAGE_SIZE, MAX_MESSAGE_BYTES);
                        return *self.max_message_size.get_or_init(|| bytes);
                    }
                    None => "no MaximumMessageSize in the answer".to_owned(),
                }
            }
            Ok(Err(e)) => crate::publish::error_text(&e),
            Err(_) => format!("no answer within {LOOKUP_TIMEOUT:?}"),
        };
        tracing::warn!(
            queue = self.queue_url(),
            error,
            "could not read the dead-letter queue's MaximumMessageSize (needs \
             sqs:GetQueueAttributes); checking the copy against 1 MiB"
        );
        MAX_MESSAGE_BYTES
    }

    fn draft(&self, record: &SqsMessage, reason: &str) -> Result<Draft, String> {
        let body = record
            .body
            .clone()
            .filter(|b| !b.is_empty())
            .ok_or("the message has no body")?;
        let message_id = record.message_id.clone().unwrap_or_default();
        let fifo = if self.queue_url.ends_with(".fifo") {
            let group = record
                .attributes
                .get("MessageGroupId")
                .map(String::as_str)
                .unwrap_or("dead-letter");
            Some((
                MessageGroupId::new(group).map_err(|e| e.to_string())?,
                // The source message id is unique: the dead-letter queue keeps one copy.
                DeduplicationId::from_key(&message_id),
            ))
        } else {
            None
        };
        let trace_header = record
            .attributes
            .get(TRACE_HEADER_ATTRIBUTE)
            .filter(|h| Message::standard(".").is_ok_and(|m| m.with_trace_header(*h).is_ok()))
            .cloned();
        let reason = truncate_error(&safe_reason(reason));
        let own = vec![
            string_attribute(REASON_ATTRIBUTE, &reason),
            string_attribute(SOURCE_MESSAGE_ID_ATTRIBUTE, &message_id),
            string_attribute(
                SOURCE_QUEUE_ATTRIBUTE,
                record.event_source_arn.as_deref().unwrap_or("unknown"),
            ),
        ];
        let mut originals: Vec<(String, MessageAttributeValue)> = Vec::new();
        for (name, value) in &record.message_attributes {
            if OWN_ATTRIBUTES.contains(&name.as_str()) {
                tracing::debug!(
                    message_id,
                    name,
                    "the copy's own attribute replaces the original's"
                );
                continue;
            }
            let mut copy = MessageAttributeValue::builder()
                .data_type(value.data_type.clone().unwrap_or_else(|| "String".into()));
            if let Some(text) = &value.string_value {
                copy = copy.string_value(text);
            }
            if let Some(bytes) = &value.binary_value {
                copy = copy.binary_value(Blob::new(bytes.0.clone()));
            }
            // Checked on a small message: SQS would refuse the whole copy for it.
            match copy.build() {
                Ok(copy)
                    if Message::standard(".")
                        .and_then(|m| m.with_attribute_value(name, copy.clone()))
                        .is_ok() =>
                {
                    originals.push((name.clone(), copy));
                }
                _ => tracing::debug!(message_id, name, "invalid message attribute not copied"),
            }
        }
        originals.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(Draft {
            body,
            message_id,
            fifo,
            trace_header,
            reason,
            own,
            originals,
        })
    }
}

/// The copy's own attributes: an original attribute of one of these names is not copied.
const OWN_ATTRIBUTES: [&str; 4] = [
    REASON_ATTRIBUTE,
    SOURCE_MESSAGE_ID_ATTRIBUTE,
    SOURCE_QUEUE_ATTRIBUTE,
    REDUCED_ATTRIBUTE,
];

type Attribute = (String, MessageAttributeValue);

fn string_attribute(name: &str, value: &str) -> Attribute {
    let value = MessageAttributeValue::builder()
        .data_type("String")
        .string_value(value)
        .build()
        .expect("the data type is set");
    (name.to_owned(), value)
}

/// An attribute's share of a message's size ([`attribute_size`](crate::publish::attribute_size)).
fn cost((name, value): &Attribute) -> usize {
    crate::publish::attribute_size(name, value)
}

/// Whether SQS refused a message as too large, and the limit it stated (`Message must be shorter
/// than N bytes`), if any.
fn too_large(error: &PublishError) -> Option<Option<usize>> {
    let PublishError::Rejected { code, message } = error else {
        return None;
    };
    let lower = message.to_ascii_lowercase();
    let is_size = code.contains("TooLong")
        || lower.contains("shorter than")
        || lower.contains("too long")
        || lower.contains("message size");
    if !is_size {
        return None;
    }
    let stated = lower.split("shorter than ").nth(1).and_then(|rest| {
        rest.split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|n| n.parse().ok())
    });
    Some(stated)
}

#[cfg(test)]
mod tests;
