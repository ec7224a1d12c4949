//! Messages to send: validated FIFO identifiers, and messages that fit SQS's limits.

use std::collections::HashMap;
use std::fmt;

use aws_sdk_sqs::types::{
    MessageAttributeValue, MessageSystemAttributeNameForSends, MessageSystemAttributeValue,
    SendMessageBatchRequestEntry,
};

use super::{MAX_ID_LEN, MAX_MESSAGE_BYTES};
use crate::payload::sha256_hex;

/// Why an identifier or a message is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidMessage {
    /// The identifier is empty.
    #[error("{field} is empty (1 to 128 characters required)")]
    EmptyId {
        /// `MessageGroupId` or `MessageDeduplicationId`.
        field: &'static str,
    },
    /// The identifier is longer than 128 characters.
    #[error("{field} is {len} characters long (at most 128)")]
    IdTooLong {
        /// Which identifier.
        field: &'static str,
        /// Its length.
        len: usize,
    },
    /// The identifier has a character SQS does not accept.
    #[error(
        "{field} has {ch:?} at position {position}: only a-z, A-Z, 0-9 and ASCII punctuation are allowed"
    )]
    IdCharacter {
        /// Which identifier.
        field: &'static str,
        /// The character.
        ch: char,
        /// Its position (in characters).
        position: usize,
    },
    /// The message (body and attributes) is over 1 MiB.
    #[error("the message is {size} bytes, over the SQS limit of {MAX_MESSAGE_BYTES} bytes")]
    TooLarge {
        /// Its size.
        size: usize,
    },
    /// The body or an attribute value has a character SQS rejects.
    #[error(
        "{field} has {ch:?} (U+{code:04X}) at position {position}: SQS accepts only #x9, #xA, #xD, #x20 to #xD7FF, #xE000 to #xFFFD and #x10000 to #x10FFFF",
        code = u32::from(*ch)
    )]
    Character {
        /// `the message body`, or `message attribute `NAME``.
        field: String,
        /// The character.
        ch: char,
        /// Its position (in characters).
        position: usize,
    },
    /// An attribute is invalid.
    #[error("message attribute `{name}` is invalid: {reason}")]
    Attribute {
        /// Its name.
        name: String,
        /// Why.
        reason: String,
    },
}

/// The first character SQS would reject in a message body or attribute value, with its position
/// (in characters). SQS accepts only the XML characters `#x9 | #xA | #xD | #x20-#xD7FF |
/// #xE000-#xFFFD | #x10000-#x10FFFF`; anything else fails the whole `SendMessage` call with
/// `InvalidMessageContents` on every retry.
///
/// ```
/// use lambda_idempotency::publish::invalid_character;
///
/// assert_eq!(invalid_character("tab\t, newline\n and Zoë 😀 are fine"), None);
/// assert_eq!(invalid_character("nul\u{0}"), Some((3, '\u{0}')));
/// assert_eq!(invalid_character("bell\u{7}"), Some((4, '\u{7}')));
/// assert_eq!(invalid_character("\u{FFFE}"), Some((0, '\u{FFFE}')));
/// ```
// Not API: the payments API refuses these characters in a request's fields with the publisher's
// rule, before the payment is stored.
#[doc(hidden)]
pub fn invalid_character(text: &str) -> Option<(usize, char)> {
    text.chars().enumerate().find(|&(_, c)| {
        !matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
    })
}

fn check_characters(field: impl FnOnce() -> String, text: &str) -> Result<(), InvalidMessage> {
    match invalid_character(text) {
        None => Ok(()),
        Some((position, ch)) => Err(InvalidMessage::Character {
            field: field(),
            ch,
            position,
        }),
    }
}

/// Checks an attribute name as SQS does: 1 to 256 characters of `A-Za-z0-9`, `-`, `_` and `.`,
/// not starting with `AWS.` or `Amazon.` (any case), no `.` first or last, no `..`.
fn check_attribute_name(name: &str) -> Result<(), InvalidMessage> {
    let reason = if name.is_empty() || name.len() > 256 {
        Some(format!(
            "the name is {} characters long (1 to 256)",
            name.len()
        ))
    } else if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        Some(format!(
            "the name has {c:?}: only A-Z, a-z, 0-9, '-', '_' and '.' are allowed"
        ))
    } else if name.starts_with('.') || name.ends_with('.') || name.contains("..") {
        Some("the name starts or ends with '.' or has '..'".to_owned())
    } else {
        let lower = name.to_ascii_lowercase();
        (lower.starts_with("aws.") || lower.starts_with("amazon."))
            .then(|| "names starting with AWS. or Amazon. are reserved".to_owned())
    };
    match reason {
        None => Ok(()),
        Some(reason) => Err(InvalidMessage::Attribute {
            name: name.to_owned(),
            reason,
        }),
    }
}

fn validate_id(field: &'static str, value: &str) -> Result<(), InvalidMessage> {
    if value.is_empty() {
        return Err(InvalidMessage::EmptyId { field });
    }
    if let Some((position, ch)) = value
        .chars()
        .enumerate()
        .find(|(_, c)| !(c.is_ascii_alphanumeric() || c.is_ascii_punctuation()))
    {
        return Err(InvalidMessage::IdCharacter {
            field,
            ch,
            position,
        });
    }
    if value.len() > MAX_ID_LEN {
        return Err(InvalidMessage::IdTooLong {
            field,
            len: value.len(),
        });
    }
    Ok(())
}

/// A valid `MessageGroupId`.
///
/// ```
/// use lambda_idempotency::publish::MessageGroupId;
///
/// assert!(MessageGroupId::new("account-42").is_ok());
/// assert!(MessageGroupId::new("").is_err());
/// assert!(MessageGroupId::new("has space").is_err());
/// assert!(MessageGroupId::new("x".repeat(129)).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MessageGroupId(String);

impl MessageGroupId {
    /// Validates `value`.
    pub fn new(value: impl Into<String>) -> Result<Self, InvalidMessage> {
        let value = value.into();
        validate_id("MessageGroupId", &value)?;
        Ok(Self(value))
    }

    /// The identifier.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for MessageGroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A valid `MessageDeduplicationId`.
///
/// ```
/// use lambda_idempotency::publish::DeduplicationId;
///
/// // Any domain key, however long or whatever its characters, gives a valid id.
/// let id = DeduplicationId::from_key("payment: Zoë's order #1 / retry");
/// assert_eq!(id.as_str().len(), 64);
/// assert_eq!(id, DeduplicationId::from_key("payment: Zoë's order #1 / retry"));
/// assert!(DeduplicationId::new("é").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DeduplicationId(String);

impl DeduplicationId {
    /// Validates `value`.
    pub fn new(value: impl Into<String>) -> Result<Self, InvalidMessage> {
        let value = value.into();
        validate_id("MessageDeduplicationId", &value)?;
        Ok(Self(value))
    }

    /// A valid id derived from any domain key: the SHA-256 of the key, in hex. The same key
    /// always gives the same id.
    pub fn from_key(key: &str) -> Self {
        Self(sha256_hex(key.as_bytes()))
    }

    /// The identifier.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DeduplicationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A message to send: FIFO ([`Message::fifo`]) or standard ([`Message::standard`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    body: String,
    group_id: Option<MessageGroupId>,
    dedup_id: Option<DeduplicationId>,
    attributes: HashMap<String, MessageAttributeValue>,
    trace_header: Option<String>,
}

impl Message {
    /// A FIFO message. The body must be at most 1 MiB and hold only characters SQS accepts
    /// (see [`InvalidMessage::Character`]).
    ///
    /// ```
    /// use lambda_idempotency::publish::{DeduplicationId, Message, MessageGroupId};
    ///
    /// let message = Message::fifo(
    ///     MessageGroupId::new("acct-42").unwrap(),
    ///     DeduplicationId::from_key("payment-1"),
    ///     r#"{"amountCents":100}"#,
    /// )
    /// .unwrap();
    /// assert_eq!(message.group_id().unwrap().as_str(), "acct-42");
    /// assert!(Message::standard("x".repeat(1024 * 1024 + 1)).is_err());
    /// ```
    pub fn fifo(
        group_id: MessageGroupId,
        dedup_id: DeduplicationId,
        body: impl Into<String>,
    ) -> Result<Self, InvalidMessage> {
        let message = Self {
            body: body.into(),
            group_id: Some(group_id),
            dedup_id: Some(dedup_id),
            attributes: HashMap::new(),
            trace_header: None,
        };
        message.check_size()
    }

    /// A message for a standard queue (same checks as [`Message::fifo`]).
    ///
    /// ```
    /// use lambda_idempotency::publish::{InvalidMessage, Message};
    ///
    /// let err = Message::standard("a\u{1b}[31m").unwrap_err();
    /// assert!(matches!(err, InvalidMessage::Character { position: 1, ch: '\u{1b}', .. }));
    /// assert!(err.to_string().starts_with("the message body has"));
    /// ```
    pub fn standard(body: impl Into<String>) -> Result<Self, InvalidMessage> {
        let message = Self {
            body: body.into(),
            group_id: None,
            dedup_id: None,
            attributes: HashMap::new(),
            trace_header: None,
        };
        message.check_size()
    }

    /// Adds a `String` message attribute.
    pub fn with_attribute(
        self,
        name: impl Into<String>,
        value: impl Into<String>,
    ) -> Result<Self, InvalidMessage> {
        let name = name.into();
        let value = MessageAttributeValue::builder()
            .data_type("String")
            .string_value(value)
            .build()
            .map_err(|e| InvalidMessage::Attribute {
                name: name.clone(),
                reason: e.to_string(),
            })?;
        self.with_attribute_value(name, value)
    }

    /// Adds a message attribute of any type. Its name follows SQS's rules and a `String` or
    /// `Number` value holds only characters SQS accepts.
    ///
    /// ```
    /// use lambda_idempotency::publish::Message;
    ///
    /// let m = Message::standard("{}").unwrap();
    /// assert!(m.clone().with_attribute("trace-id", "abc").is_ok());
    /// assert!(m.clone().with_attribute("AWS.reserved", "x").is_err());
    /// assert!(m.with_attribute("trace-id", "\u{0}").is_err());
    /// ```
    pub fn with_attribute_value(
        mut self,
        name: impl Into<String>,
        value: MessageAttributeValue,
    ) -> Result<Self, InvalidMessage> {
        let name = name.into();
        check_attribute_name(&name)?;
        if let Some(text) = value.string_value() {
            check_characters(|| format!("message attribute `{name}`"), text)?;
        }
        self.attributes.insert(name, value);
        self.check_size()
    }

    /// Sends the message with the `AWSTraceHeader` system attribute (an X-Ray trace header,
    /// such as the one a received message carries): a message moved from one queue to another
    /// stays in its trace. It does not count toward the message's size.
    ///
    /// ```
    /// use lambda_idempotency::publish::Message;
    ///
    /// let header = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
    /// let m = Message::standard("{}").unwrap().with_trace_header(header).unwrap();
    /// assert_eq!(m.trace_header(), Some(header));
    /// assert_eq!(m.size(), 2);
    /// assert!(Message::standard("{}").unwrap().with_trace_header("").is_err());
    /// ```
    pub fn with_trace_header(mut self, header: impl Into<String>) -> Result<Self, InvalidMessage> {
        let header = header.into();
        let invalid = |reason: &str| InvalidMessage::Attribute {
            name: "AWSTraceHeader".to_owned(),
            reason: reason.to_owned(),
        };
        if header.is_empty() {
            return Err(invalid("the trace header is empty"));
        }
        check_characters(|| "message attribute `AWSTraceHeader`".to_owned(), &header)?;
        self.trace_header = Some(header);
        Ok(self)
    }

    /// The `AWSTraceHeader` system attribute it is sent with, if any.
    pub fn trace_header(&self) -> Option<&str> {
        self.trace_header.as_deref()
    }

    /// The body.
    pub fn body(&self) -> &str {
        &self.body
    }

    /// The message group, for FIFO messages.
    pub fn group_id(&self) -> Option<&MessageGroupId> {
        self.group_id.as_ref()
    }

    /// The deduplication id, for FIFO messages.
    pub fn dedup_id(&self) -> Option<&DeduplicationId> {
        self.dedup_id.as_ref()
    }

    /// The attributes.
    pub fn attributes(&self) -> &HashMap<String, MessageAttributeValue> {
        &self.attributes
    }

    /// Size as SQS counts it: the body and each attribute's name, type and value.
    pub fn size(&self) -> usize {
        message_size(&self.body, &self.attributes)
    }

    fn check_size(self) -> Result<Self, InvalidMessage> {
        check_characters(|| "the message body".to_owned(), &self.body)?;
        match self.size() {
            size if size > MAX_MESSAGE_BYTES => Err(InvalidMessage::TooLarge { size }),
            _ => Ok(self),
        }
    }

    /// The batch entry for this message, under `id`.
    pub(super) fn entry(&self, id: String) -> SendMessageBatchRequestEntry {
        let trace = self.trace_header.as_ref().map(|header| {
            let value = MessageSystemAttributeValue::builder()
                .data_type("String")
                .string_value(header)
                .build()
                .expect("the data type is set");
            HashMap::from([(MessageSystemAttributeNameForSends::AwsTraceHeader, value)])
        });
        SendMessageBatchRequestEntry::builder()
            .id(id)
            .message_body(&self.body)
            .set_message_group_id(self.group_id.as_ref().map(|g| g.0.clone()))
            .set_message_deduplication_id(self.dedup_id.as_ref().map(|d| d.0.clone()))
            .set_message_attributes((!self.attributes.is_empty()).then(|| self.attributes.clone()))
            .set_message_system_attributes(trace)
            .build()
            .expect("id and body are set")
    }
}

/// A message's size as SQS counts it against its limits: the body, and each attribute's name,
/// type and value.
pub(crate) fn message_size(
    body: &str,
    attributes: &HashMap<String, MessageAttributeValue>,
) -> usize {
    body.len()
        + attributes
            .iter()
            .map(|(name, v)| attribute_size(name, v))
            .sum::<usize>()
}

/// One message attribute's share of [`message_size`]: its name, type and value.
pub(crate) fn attribute_size(name: &str, value: &MessageAttributeValue) -> usize {
    name.len()
        + value.data_type().len()
        + value.string_value().map_or(0, str::len)
        + value.binary_value().map_or(0, |b| b.as_ref().len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn id_validation_names_the_problem() {
        assert_eq!(
            MessageGroupId::new("a b"),
            Err(InvalidMessage::IdCharacter {
                field: "MessageGroupId",
                ch: ' ',
                position: 1
            })
        );
        assert!(MessageGroupId::new("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~aZ9").is_ok());
        assert!(matches!(
            DeduplicationId::new("x".repeat(129)),
            Err(InvalidMessage::IdTooLong { len: 129, .. })
        ));
        assert!(DeduplicationId::new("x".repeat(128)).is_ok());
    }

    #[test]
    fn attributes_count_toward_the_size() {
        let body = "x".repeat(MAX_MESSAGE_BYTES - 10);
        let m = Message::standard(body).unwrap();
        assert!(matches!(
            m.with_attribute("name", "0123456789"),
            Err(InvalidMessage::TooLarge { .. })
        ));
    }

    #[test]
    fn characters_sqs_rejects_are_refused_before_any_call() {
        for bad in [
            '\u{0}', '\u{8}', '\u{b}', '\u{c}', '\u{1f}', '\u{FFFE}', '\u{FFFF}',
        ] {
            let body = format!("ok {bad}");
            match Message::standard(body.clone()) {
                Err(InvalidMessage::Character {
                    ch,
                    position: 3,
                    field,
                }) => {
                    assert_eq!((ch, field.as_str()), (bad, "the message body"));
                }
                other => panic!("{body:?}: {other:?}"),
            }
        }
        for good in [
            '\t',
            '\n',
            '\r',
            ' ',
            '\u{D7FF}',
            '\u{E000}',
            '\u{FFFD}',
            '\u{10000}',
            '\u{10FFFF}',
        ] {
            assert!(Message::standard(format!("ok {good}")).is_ok(), "{good:?}");
        }
        let group = MessageGroupId::new("g").unwrap();
        let err = Message::fifo(group, DeduplicationId::from_key("k"), "\u{7f}\u{0}").unwrap_err();
        assert!(
            matches!(err, InvalidMessage::Character { position: 1, .. }),
            "{err}"
        );
        let err = Message::standard("{}")
            .unwrap()
            .with_attribute("note", "x\u{2}")
            .unwrap_err();
        assert!(
            err.to_string().contains("message attribute `note`"),
            "{err}"
        );
    }

    proptest! {
        #[test]
        fn valid_text_is_accepted_and_the_position_is_exact(
            prefix in "[a-zA-Z0-9 \\t\\n\\r\u{e9}\u{1F600}]{0,20}",
            bad in prop::sample::select(vec!['\u{0}', '\u{1}', '\u{1f}', '\u{FFFE}', '\u{FFFF}']),
        ) {
            prop_assert_eq!(invalid_character(&prefix), None);
            let text = format!("{prefix}{bad}tail");
            prop_assert_eq!(invalid_character(&text), Some((prefix.chars().count(), bad)));
        }

        #[test]
        fn derived_dedup_ids_are_always_valid(key in ".*") {
            let id = DeduplicationId::from_key(&key);
            prop_assert!(DeduplicationId::new(id.as_str()).is_ok());
        }
    }
}
