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
//! `AWSTraceHeader` system attribute, and at most 10 message attributes ([`MAX_ATTRIBUTES`], SQS's
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
//! sent: the reason cut to [`REDUCED_REASON_LEN`] bytes (or what room is left), the source
//! message id and queue, and the original's attributes that fit, with [`REDUCED_ATTRIBUTE`] saying
//! what was cut or dropped. When not even that has room, the body goes alone ([`Copied::Bare`]).
//! A copy does not fit when its size as SQS counts it
//! ([`message_size`](crate::publish::message_size): the body and each attribute's name, type and
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
pub const MAX_ATTRIBUTES: usize = 10;
/// Longest reason in a reduced copy, in bytes.
pub const REDUCED_REASON_LEN: usize = 256;
/// The smallest `MaximumMessageSize` SQS allows: a copy this small fits every queue.
pub const MIN_QUEUE_MESSAGE_SIZE: usize = 1024;
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
    publisher: Publisher,
    sqs: aws_sdk_sqs::Client,
    /// The queue's `MaximumMessageSize`, once known; shared by the clones.
    max_message_size: Arc<OnceLock<usize>>,
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
        Self {
            publisher: Publisher::new(sqs.clone(), queue_url).max_attempts(3),
            sqs,
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
        self.publisher.queue_url()
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
        let draft = self.draft(record, reason)?;
        let message_id = draft.message_id.as_str();
        let full = draft.full();
        let full_size = draft.size(&full);
        let mut limit = if full_size <= MIN_QUEUE_MESSAGE_SIZE {
            MAX_MESSAGE_BYTES
        } else {
            self.queue_limit().await
        };
        if full_size <= limit {
            match self.publisher.send(draft.message(&full)?).await {
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
            match self.publisher.send(draft.message(&attributes)?).await {
                Ok(_) => return Ok(Copied::Reduced { marker }),
                Err(e) if too_large(&e).is_some() => tracing::warn!(
                    message_id,
                    error = %e,
                    "the reduced dead-letter copy was refused as too large; sending the body alone"
                ),
                Err(e) => return Err(e.to_string()),
            }
        }
        match self.publisher.send(draft.message(&[])?).await {
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
    async fn queue_limit(&self) -> usize {
        if let Some(&bytes) = self.max_message_size.get() {
            return bytes;
        }
        let read = self
            .sqs
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
        let fifo = if self.publisher.queue_url().ends_with(".fifo") {
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

/// What a copy is made of.
struct Draft {
    body: String,
    message_id: String,
    fifo: Option<(MessageGroupId, DeduplicationId)>,
    trace_header: Option<String>,
    /// The reason as the whole copy carries it (made safe, at most 1 KiB).
    reason: String,
    /// Reason, source message id, source queue.
    own: Vec<Attribute>,
    /// The original's attributes that can be copied, by name.
    originals: Vec<Attribute>,
}

impl Draft {
    /// The whole copy's attributes: its own, then the original's, up to [`MAX_ATTRIBUTES`].
    fn full(&self) -> Vec<Attribute> {
        let room = MAX_ATTRIBUTES - self.own.len();
        if self.originals.len() > room {
            tracing::warn!(
                message_id = self.message_id,
                not_copied = ?self.originals[room..].iter().map(|(n, _)| n).collect::<Vec<_>>(),
                "SQS allows 10 message attributes: the last ones by name are not copied to the \
                 dead-letter queue"
            );
        }
        self.own
            .iter()
            .chain(self.originals.iter().take(room))
            .cloned()
            .collect()
    }

    fn size(&self, attributes: &[Attribute]) -> usize {
        self.body.len() + attributes.iter().map(cost).sum::<usize>()
    }

    /// The reduced copy's attributes within `limit` bytes, with the marker first; `None` when
    /// no attribute fits (the body goes alone); an error when not even the body fits.
    fn reduced(&self, limit: usize) -> Result<Option<(Vec<Attribute>, String)>, String> {
        if self.body.len() > limit {
            return Err(format!(
                "the message body alone ({} bytes) is over the dead-letter queue's \
                 MaximumMessageSize ({limit} bytes): it cannot be dead-lettered and is reported \
                 failed (nothing is lost). Fix: give the dead-letter queue its source queue's \
                 MaximumMessageSize",
                self.body.len()
            ));
        }
        let marker_room = REDUCED_ATTRIBUTE.len() + "String".len() + MARKER_LEN;
        let Some(mut room) = (limit - self.body.len()).checked_sub(marker_room) else {
            return Ok(None);
        };
        let mut kept = Vec::new();
        let mut cuts = Vec::new();
        let mut dropped = Vec::new();
        // The source message id and queue first (short, and what finds the original), then the
        // reason in the room left.
        for attribute in self.own.iter().filter(|a| a.0 != REASON_ATTRIBUTE) {
            if cost(attribute) <= room {
                room -= cost(attribute);
                kept.push(attribute.clone());
            } else {
                dropped.push(attribute.0.clone());
            }
        }
        let reason_room = room.saturating_sub(REASON_ATTRIBUTE.len() + "String".len());
        let reason = truncate(&self.reason, REDUCED_REASON_LEN.min(reason_room));
        let attribute = string_attribute(REASON_ATTRIBUTE, &reason);
        if reason.len() < MIN_REASON_LEN.min(self.reason.len()) || cost(&attribute) > room {
            dropped.insert(0, REASON_ATTRIBUTE.to_owned());
        } else {
            if reason.len() < self.reason.len() {
                cuts.push(format!(
                    "{REASON_ATTRIBUTE} cut to {} of {} bytes",
                    reason.len(),
                    self.reason.len()
                ));
            }
            room -= cost(&attribute);
            kept.push(attribute);
        }
        // One slot is the marker's.
        let slots = MAX_ATTRIBUTES - 1 - kept.len();
        let mut copied = 0;
        for attribute in &self.originals {
            if copied < slots && cost(attribute) <= room {
                room -= cost(attribute);
                kept.push(attribute.clone());
                copied += 1;
            } else {
                dropped.push(attribute.0.clone());
            }
        }
        if !dropped.is_empty() {
            cuts.push(format!("not copied: {}", dropped.join(", ")));
        }
        let marker = truncate(
            &format!("over the queue's {limit} bytes: {}", cuts.join("; ")),
            MARKER_LEN,
        );
        kept.insert(0, string_attribute(REDUCED_ATTRIBUTE, &marker));
        Ok(Some((kept, marker)))
    }

    fn message(&self, attributes: &[Attribute]) -> Result<Message, String> {
        let mut message = match &self.fifo {
            Some((group, dedup)) => Message::fifo(group.clone(), dedup.clone(), self.body.clone()),
            None => Message::standard(self.body.clone()),
        }
        .map_err(|e| e.to_string())?;
        if let Some(header) = &self.trace_header {
            message = message
                .with_trace_header(header)
                .map_err(|e| e.to_string())?;
        }
        for (name, value) in attributes {
            message = message
                .with_attribute_value(name, value.clone())
                .map_err(|e| e.to_string())?;
        }
        Ok(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lambda_events::sqs::SqsMessageAttribute;

    fn dead_letter(url: &str) -> DeadLetter {
        let config = aws_sdk_sqs::Config::builder()
            .behavior_version_latest()
            .build();
        DeadLetter::new(aws_sdk_sqs::Client::from_conf(config), url)
    }

    fn record(body: &str, attributes: usize) -> SqsMessage {
        let mut m = SqsMessage::default();
        m.message_id = Some("m-1".into());
        m.body = Some(body.into());
        m.event_source_arn = Some("arn:aws:sqs:us-east-1:123456789012:source.fifo".into());
        m.attributes.insert("MessageGroupId".into(), "g".into());
        m.attributes.insert(
            TRACE_HEADER_ATTRIBUTE.into(),
            "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1".into(),
        );
        for i in 0..attributes {
            let mut a = SqsMessageAttribute::default();
            a.data_type = Some("String".into());
            a.string_value = Some(format!("value-{i}"));
            // Inserted in reverse: the copy sorts them.
            m.message_attributes
                .insert(format!("attr-{:02}", attributes - 1 - i), a);
        }
        m
    }

    fn names(message: &Message) -> Vec<String> {
        let mut names: Vec<_> = message.attributes().keys().cloned().collect();
        names.sort();
        names
    }

    #[test]
    fn the_copy_keeps_its_own_attributes_then_the_originals_by_name_up_to_ten() {
        let dl = dead_letter("https://sqs.local/1/dlq.fifo");
        let message = dl.message_for(&record("{}", 10), "boom").unwrap();
        let mut expected = vec![
            REASON_ATTRIBUTE.to_owned(),
            SOURCE_MESSAGE_ID_ATTRIBUTE.to_owned(),
            SOURCE_QUEUE_ATTRIBUTE.to_owned(),
        ];
        expected.extend((0..7).map(|i| format!("attr-{i:02}")));
        expected.sort();
        assert_eq!(names(&message), expected, "attr-07 to attr-09 are left out");
        assert_eq!(
            message.trace_header(),
            Some("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1")
        );
        assert_eq!(message.group_id().unwrap().as_str(), "g");
        // The same every time (no hash-map order).
        for _ in 0..5 {
            assert_eq!(
                names(&dl.message_for(&record("{}", 10), "boom").unwrap()),
                expected
            );
        }
    }

    #[test]
    fn the_computed_size_is_the_size_sqs_counts() {
        let dl = dead_letter("https://sqs.local/1/dlq.fifo");
        let mut r = record("Zoë's body", 4);
        let mut binary = SqsMessageAttribute::default();
        binary.data_type = Some("Binary".into());
        let mut bytes = aws_lambda_events::encodings::Base64Data::default();
        bytes.extend_from_slice(&[1, 2, 3]);
        binary.binary_value = Some(bytes);
        r.message_attributes.insert("bin".into(), binary);
        let draft = dl.draft(&r, "reason").unwrap();
        for attributes in [draft.full(), draft.reduced(400).unwrap().unwrap().0, vec![]] {
            let message = draft.message(&attributes).unwrap();
            assert_eq!(draft.size(&attributes), message.size());
        }
    }

    #[test]
    fn an_original_attribute_with_an_own_name_is_replaced_not_doubled() {
        let dl = dead_letter("https://sqs.local/1/dlq");
        let mut r = record("{}", 1);
        let mut old = SqsMessageAttribute::default();
        old.data_type = Some("String".into());
        old.string_value = Some("an earlier reason".into());
        r.message_attributes.insert(REASON_ATTRIBUTE.into(), old);
        let message = dl.message_for(&r, "the new reason").unwrap();
        assert_eq!(
            message.attributes()[REASON_ATTRIBUTE].string_value(),
            Some("the new reason")
        );
        assert_eq!(message.attributes().len(), 4);
    }

    #[test]
    fn the_reason_is_made_safe_and_cut() {
        let dl = dead_letter("https://sqs.local/1/dlq");
        let message = dl
            .message_for(
                &record("{}", 0),
                "ValidationException: Value 'jane@example.com' at 'item.email' failed",
            )
            .unwrap();
        assert_eq!(
            message.attributes()[REASON_ATTRIBUTE].string_value(),
            Some("ValidationException: Value '<redacted>' at 'item.email' failed")
        );
        let message = dl.message_for(&record("{}", 0), &"x".repeat(5000)).unwrap();
        assert_eq!(
            message.attributes()[REASON_ATTRIBUTE]
                .string_value()
                .unwrap()
                .len(),
            crate::state::MAX_ERROR_LEN
        );
    }

    #[test]
    fn a_copy_that_does_not_fit_is_reduced_and_marked_and_its_body_kept() {
        let dl = dead_letter("https://sqs.local/1/dlq.fifo");
        let body = "b".repeat(1500);
        let r = record(&body, 3);
        let reason = "r".repeat(1000);
        let (whole, copied) = dl.copy_within(&r, &reason, MAX_MESSAGE_BYTES).unwrap();
        assert_eq!(copied, Copied::Full);
        assert!(whole.size() > 2048);

        let (copy, copied) = dl.copy_within(&r, &reason, 2048).unwrap();
        let Copied::Reduced { marker } = copied else {
            panic!("{copied:?}")
        };
        assert!(copy.size() <= 2048, "{}", copy.size());
        assert_eq!(copy.body(), body);
        assert_eq!(copy.trace_header(), whole.trace_header());
        assert_eq!(
            copy.attributes()[REDUCED_ATTRIBUTE].string_value(),
            Some(marker.as_str())
        );
        assert!(marker.contains("DeadLetterReason cut to"), "{marker}");
        assert!(copy.attributes().contains_key(SOURCE_MESSAGE_ID_ATTRIBUTE));
        assert!(copy.attributes().contains_key(SOURCE_QUEUE_ATTRIBUTE));
        let kept_reason = copy.attributes()[REASON_ATTRIBUTE].string_value().unwrap();
        assert!(kept_reason.len() <= REDUCED_REASON_LEN && kept_reason.ends_with("..."));

        // Less room: the originals go, and the marker names them.
        let (copy, copied) = dl.copy_within(&r, &reason, 1500 + 500).unwrap();
        let Copied::Reduced { marker } = copied else {
            panic!("{copied:?}")
        };
        assert!(copy.size() <= 2000);
        assert!(
            marker.contains("not copied: attr-00, attr-01, attr-02"),
            "{marker}"
        );

        // No room for the marker: the body goes alone.
        let (copy, copied) = dl.copy_within(&r, &reason, 1600).unwrap();
        assert_eq!(copied, Copied::Bare);
        assert!(copy.attributes().is_empty());
        assert_eq!(copy.body(), body);

        // Not even the body.
        let err = dl.copy_within(&r, &reason, 1499).unwrap_err();
        assert!(
            err.contains("1500 bytes") && err.contains("1499 bytes"),
            "{err}"
        );
    }

    #[test]
    fn a_body_near_one_mebibyte_gets_a_reduced_copy() {
        let dl = dead_letter("https://sqs.local/1/dlq");
        let body = "b".repeat(MAX_MESSAGE_BYTES - 600);
        let r = record(&body, 5);
        assert!(
            dl.message_for(&r, &"r".repeat(1024)).is_err(),
            "the whole copy is over 1 MiB"
        );
        let (copy, copied) = dl
            .copy_within(&r, &"r".repeat(1024), MAX_MESSAGE_BYTES)
            .unwrap();
        assert!(matches!(copied, Copied::Reduced { .. }), "{copied:?}");
        assert!(copy.size() <= MAX_MESSAGE_BYTES);
        assert_eq!(copy.body().len(), body.len());
    }

    #[test]
    fn refusals_for_size_are_recognised_with_their_limit() {
        let rejected = |code: &str, message: &str| PublishError::Rejected {
            code: code.into(),
            message: message.into(),
        };
        assert_eq!(
            too_large(&rejected(
                "InvalidParameterValue",
                "One or more parameters are invalid. Reason: Message must be shorter than 2048 bytes."
            )),
            Some(Some(2048))
        );
        assert_eq!(
            too_large(&rejected(
                "AWS.SimpleQueueService.BatchRequestTooLong",
                "Batch requests cannot be longer than 1048576 bytes."
            )),
            Some(None)
        );
        assert_eq!(
            too_large(&rejected("InvalidMessageContents", "bad character")),
            None
        );
        assert_eq!(
            too_large(&PublishError::Exhausted {
                attempts: 3,
                last_error: "timeout".into()
            }),
            None
        );
    }
}
