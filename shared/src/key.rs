//! Idempotency keys and payload hashes.
//!
//! A key names one unit of work; the payload hash tells whether a second delivery under that key
//! carries the same work. [`KeyConfig`] says where both come from in an SQS message: by default the
//! key is the `MessageId` and the hash covers the whole body. A key taken from the body (a
//! business key such as a payment id) is better: it also catches a producer that sends the same
//! work twice as two messages.

use std::fmt;
use std::sync::Arc;

use std::any::Any;

use aws_lambda_events::sqs::SqsMessage;

use crate::record::Record;
use serde_json::Value;

use crate::payload::sha256_hex;
use crate::payload::{PayloadHash, canonical_sha256};

/// Longest partition key DynamoDB accepts, in bytes. Longer keys are hashed, never truncated.
pub const MAX_KEY_BYTES: usize = 2048;

/// Longest key prefix, in bytes. A hashed key takes 71 bytes (`sha256:` and 64 hex digits) and
/// the separator one more, so any stored key with a prefix this long stays far below
/// [`MAX_KEY_BYTES`], and keys up to 1535 bytes are still stored as they are.
pub const MAX_PREFIX_BYTES: usize = 512;

/// What separates a key prefix from the key: `prefix#key`. A prefix cannot contain it.
pub(crate) const PREFIX_SEPARATOR: char = '#';

/// Why no key or payload could be taken from a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The message has no body, but the key or payload comes from the body.
    #[error("the message has no body")]
    MissingBody,
    /// The body is not JSON, but the key or payload comes from a JSON pointer.
    #[error("the body is not valid JSON: {0}")]
    InvalidJson(String),
    /// The JSON pointer selects nothing in the body.
    #[error("the body has no value at `{0}`")]
    Missing(String),
    /// The selected key is empty, null, or not a string or number.
    #[error("the value at `{pointer}` cannot be a key: {reason}")]
    Unusable {
        /// The JSON pointer.
        pointer: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The message has no message id.
    #[error("the message has no messageId")]
    MissingMessageId,
    /// A custom key function refused the message.
    #[error("{0}")]
    Custom(String),
}

/// Why a string cannot be a key prefix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    /// The prefix is empty: `#key` would be the stored form of the unprefixed key `#key` too.
    #[error("the idempotency key prefix is empty (leave it out, or give at least one character)")]
    Empty,
    /// The prefix contains the separator `#`: prefix `a#b` with key `c` would be stored as prefix
    /// `a` with key `b#c` is.
    #[error(
        "the idempotency key prefix {prefix:?} contains the separator '#' (at byte {position}), so two different keys could be stored alike"
    )]
    ContainsSeparator {
        /// The prefix.
        prefix: String,
        /// The byte offset of the first `#`.
        position: usize,
    },
    /// The prefix is longer than [`MAX_PREFIX_BYTES`].
    #[error("the idempotency key prefix is {len} bytes long (at most {MAX_PREFIX_BYTES})")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
}

/// Checks that `prefix` can be a key prefix: not empty, no `#` (the separator), at most
/// [`MAX_PREFIX_BYTES`] bytes. With such prefixes, [`stored_key`] never gives two different
/// (prefix, key) pairs the same stored key.
///
/// ```
/// use lambda_idempotency::key::{PrefixError, validate_prefix};
///
/// assert_eq!(validate_prefix("payment-processor"), Ok(()));
/// assert_eq!(validate_prefix(""), Err(PrefixError::Empty));
/// assert!(matches!(validate_prefix("a#b"), Err(PrefixError::ContainsSeparator { position: 1, .. })));
/// assert_eq!(validate_prefix(&"p".repeat(513)), Err(PrefixError::TooLong { len: 513 }));
/// ```
pub fn validate_prefix(prefix: &str) -> Result<(), PrefixError> {
    if prefix.is_empty() {
        return Err(PrefixError::Empty);
    }
    if let Some(position) = prefix.find(PREFIX_SEPARATOR) {
        return Err(PrefixError::ContainsSeparator {
            prefix: prefix.to_owned(),
            position,
        });
    }
    if prefix.len() > MAX_PREFIX_BYTES {
        return Err(PrefixError::TooLong { len: prefix.len() });
    }
    Ok(())
}

type KeyFn = dyn Fn(&dyn Any) -> Result<String, KeyError> + Send + Sync;

/// Where the idempotency key of a message comes from.
#[derive(Clone, Default)]
pub enum KeySource {
    /// The record's id (the default): catches redeliveries of one message. The SQS `MessageId`;
    /// under a [`BatchProcessor`](crate::batch::BatchProcessor), what it names the record by
    /// ([`RecordContext::message_id`](crate::batch::RecordContext::message_id), from
    /// [`EventSource::record_id`](crate::batch::EventSource::record_id)), which for a Kafka
    /// record names its cluster as well.
    #[default]
    MessageId,
    /// A string or number in the JSON body, by [JSON pointer](https://www.rfc-editor.org/rfc/rfc6901)
    /// (`/paymentId`): also catches a producer that sends the same work twice.
    JsonPointer(String),
    /// Any function of the record ([`KeyConfig::custom`] for SQS messages,
    /// [`KeyConfig::custom_for`] for records of another source).
    Custom(Arc<KeyFn>),
}

impl fmt::Debug for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySource::MessageId => f.write_str("MessageId"),
            KeySource::JsonPointer(p) => f.debug_tuple("JsonPointer").field(p).finish(),
            KeySource::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

/// Where a message's key and payload come from.
///
/// ```
/// use lambda_idempotency::key::KeyConfig;
/// use aws_lambda_events::sqs::SqsMessage;
///
/// let mut message = SqsMessage::default();
/// message.message_id = Some("m-1".into());
/// message.body = Some(r#"{"paymentId":"p-7","amountCents":100}"#.into());
///
/// let by_id = KeyConfig::default();
/// assert_eq!(by_id.key(&message).unwrap(), "m-1");
///
/// let by_payment = KeyConfig::json_pointer("/paymentId");
/// assert_eq!(by_payment.key(&message).unwrap(), "p-7");
/// ```
#[derive(Clone, Debug, Default)]
pub struct KeyConfig {
    key: KeySource,
    payload_pointers: Vec<String>,
}

impl KeyConfig {
    /// Keys from a JSON pointer into the body.
    pub fn json_pointer(pointer: impl Into<String>) -> Self {
        Self {
            key: KeySource::JsonPointer(pointer.into()),
            payload_pointers: Vec::new(),
        }
    }

    /// Keys from a function of the SQS message.
    pub fn custom(
        f: impl Fn(&SqsMessage) -> Result<String, KeyError> + Send + Sync + 'static,
    ) -> Self {
        Self::custom_for(f)
    }

    /// Keys from a function of a record of another source (a
    /// [`KinesisEventRecord`](aws_lambda_events::kinesis::KinesisEventRecord), say). Used on
    /// records of another type, it gives [`KeyError::Custom`] naming both.
    pub fn custom_for<R: Record>(
        f: impl Fn(&R) -> Result<String, KeyError> + Send + Sync + 'static,
    ) -> Self {
        let f = move |record: &dyn Any| match record.downcast_ref::<R>() {
            Some(record) => f(record),
            None => Err(KeyError::Custom(format!(
                "the key function takes a {}, not this record",
                R::KIND
            ))),
        };
        Self {
            key: KeySource::Custom(Arc::new(f)),
            payload_pointers: Vec::new(),
        }
    }

    /// Hashes only the part of the body at `pointer` (canonical JSON), instead of the whole body:
    /// for bodies that carry fields that may differ between two sends of the same work (a
    /// timestamp, a trace id). Called again, adds a pointer: see
    /// [`with_payload_pointers`](Self::with_payload_pointers).
    pub fn with_payload_pointer(mut self, pointer: impl Into<String>) -> Self {
        self.payload_pointers.push(pointer.into());
        self
    }

    /// Hashes only the fields at `pointers` (canonical JSON): the fields that define the work, so
    /// that a resend with another envelope (a new trace id, a schema version, a field the
    /// consumer does not read) is a duplicate, not a conflict. Every pointer must select a value
    /// ([`KeyError::Missing`] names the one that does not).
    ///
    /// ```
    /// use lambda_idempotency::key::KeyConfig;
    /// use aws_lambda_events::sqs::SqsMessage;
    ///
    /// let keys = KeyConfig::json_pointer("/paymentId")
    ///     .with_payload_pointers(["/paymentId", "/amountCents", "/currency"]);
    /// let message = |body: &str| {
    ///     let mut m = SqsMessage::default();
    ///     m.body = Some(body.into());
    ///     m
    /// };
    /// let v1 = message(r#"{"paymentId":"p-1","amountCents":10,"currency":"EUR"}"#);
    /// let v2 = message(r#"{"version":2,"traceId":"t-9","currency":"EUR","amountCents":10,"paymentId":"p-1"}"#);
    /// let fixed = message(r#"{"paymentId":"p-1","amountCents":12,"currency":"EUR"}"#);
    /// assert_eq!(keys.payload_hash(&v1).unwrap(), keys.payload_hash(&v2).unwrap());
    /// assert_ne!(keys.payload_hash(&v1).unwrap(), keys.payload_hash(&fixed).unwrap());
    /// ```
    pub fn with_payload_pointers<I, P>(mut self, pointers: I) -> Self
    where
        I: IntoIterator<Item = P>,
        P: Into<String>,
    {
        self.payload_pointers
            .extend(pointers.into_iter().map(Into::into));
        self
    }

    /// The key source.
    pub fn source(&self) -> &KeySource {
        &self.key
    }

    /// The message's idempotency key (before any prefix or hashing).
    pub fn key<R: Record>(&self, message: &R) -> Result<String, KeyError> {
        let mut body = None;
        self.key_with(message, &mut body)
    }

    /// The payload's hash ([`crate::payload`]): the whole body (canonical when it is JSON), or
    /// the fields at the payload pointers.
    pub fn payload_hash<R: Record>(&self, message: &R) -> Result<PayloadHash, KeyError> {
        let mut body = None;
        self.hash_with(message, &mut body)
    }

    /// The key and the payload hash, parsing the body once.
    pub fn key_and_payload_hash<R: Record>(
        &self,
        message: &R,
    ) -> Result<(String, PayloadHash), KeyError> {
        let mut body = None;
        let key = self.key_with(message, &mut body)?;
        Ok((key, self.hash_with(message, &mut body)?))
    }

    /// The key and the payload hash of `message`, whose id is `id` (the processor's, which for a
    /// Kafka record names its cluster: [`EventSource::record_id`](crate::batch::EventSource::record_id)).
    pub(crate) fn key_and_payload_hash_of<R: Record>(
        &self,
        message: &R,
        id: &str,
    ) -> Result<(String, PayloadHash), KeyError> {
        let mut body = None;
        let key = match &self.key {
            KeySource::MessageId if !id.is_empty() => id.to_owned(),
            _ => self.key_with(message, &mut body)?,
        };
        Ok((key, self.hash_with(message, &mut body)?))
    }

    fn key_with<R: Record>(
        &self,
        message: &R,
        body: &mut Option<Value>,
    ) -> Result<String, KeyError> {
        match &self.key {
            KeySource::MessageId => match message.id() {
                Some(id) if !id.is_empty() => Ok(id.into_owned()),
                _ => Err(KeyError::MissingMessageId),
            },
            KeySource::JsonPointer(pointer) => key_at(parsed(message, body)?, pointer),
            KeySource::Custom(f) => match f(message as &dyn Any)? {
                key if key.is_empty() => Err(KeyError::Custom(
                    "the key function gave an empty key".into(),
                )),
                key => Ok(key),
            },
        }
    }

    fn hash_with<R: Record>(
        &self,
        message: &R,
        body: &mut Option<Value>,
    ) -> Result<PayloadHash, KeyError> {
        let payload = message.payload();
        let text: &[u8] = payload.as_deref().unwrap_or_default();
        match self.payload_pointers.as_slice() {
            [] => Ok(match body {
                // Parsed for the key already.
                Some(value) => PayloadHash::of_json(value).with_legacy(sha256_hex(text)),
                None => PayloadHash::of_bytes(text),
            }),
            [pointer] => {
                let part = parsed(message, body)?
                    .pointer(pointer)
                    .ok_or_else(|| KeyError::Missing(pointer.clone()))?;
                Ok(PayloadHash::of_json(part).with_legacy(canonical_sha256(part)))
            }
            pointers => {
                let body = parsed(message, body)?;
                let mut selected = serde_json::Map::new();
                for pointer in pointers {
                    let part = body
                        .pointer(pointer)
                        .ok_or_else(|| KeyError::Missing(pointer.clone()))?;
                    selected.insert(pointer.clone(), part.clone());
                }
                Ok(PayloadHash::of_json(&Value::Object(selected)))
            }
        }
    }
}

/// SHA-256 (hex) of a JSON value in canonical form (object keys sorted, no white space), without
/// a scheme tag; [`PayloadHash::of_json`] is the payload hash of a value.
// Not API: the payments API's stored request fingerprints have this form (bare hex), which
// records written before hash schemes also hold.
#[doc(hidden)]
pub fn canonical_hash(value: &Value) -> String {
    canonical_sha256(value)
}

/// The parsed body, parsing it on first use.
fn parsed<'a, R: Record>(message: &R, body: &'a mut Option<Value>) -> Result<&'a Value, KeyError> {
    if body.is_none() {
        *body = Some(parse_body(message)?);
    }
    Ok(body.as_ref().expect("parsed above"))
}

fn parse_body<R: Record>(message: &R) -> Result<Value, KeyError> {
    let body = message.payload().ok_or(KeyError::MissingBody)?;
    serde_json::from_slice(&body).map_err(|e| KeyError::InvalidJson(e.to_string()))
}

fn key_at(body: &Value, pointer: &str) -> Result<String, KeyError> {
    let unusable = |reason| KeyError::Unusable {
        pointer: pointer.to_owned(),
        reason,
    };
    match body.pointer(pointer) {
        None => Err(KeyError::Missing(pointer.to_owned())),
        Some(Value::String(s)) if s.is_empty() => Err(unusable("it is empty")),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Number(n)) => Ok(n.to_string()),
        Some(Value::Null) => Err(unusable("it is null")),
        Some(_) => Err(unusable("it is not a string or a number")),
    }
}

/// The stored form of a key: `prefix#key`, or `prefix#sha256:<hex>` when that would exceed
/// [`MAX_KEY_BYTES`]. Two different keys never share a stored form, and a long key is never
/// truncated.
///
/// `prefix` must pass [`validate_prefix`]: a prefix with a `#` would let two different keys
/// share a stored form (`a#b` with `c`, and `a` with `b#c`), an empty one would collide with
/// unprefixed keys, and a prefix over [`MAX_PREFIX_BYTES`] could make the stored key too long for
/// DynamoDB. [`Idempotency::with_key_prefix`](crate::Idempotency::with_key_prefix) checks it; a
/// debug build panics here if it was not checked. Keys stored without a prefix and keys stored
/// with one do not share a table safely: the unprefixed key `a#b` is stored as prefix `a` with
/// key `b` is.
///
/// # Panics
///
/// In debug builds, if `prefix` is invalid.
///
/// ```
/// use lambda_idempotency::key::{stored_key, MAX_KEY_BYTES};
///
/// assert_eq!(stored_key(Some("payments"), "p-1"), "payments#p-1");
/// assert_eq!(stored_key(None, "p-1"), "p-1");
/// let long = "x".repeat(5000);
/// let stored = stored_key(Some("payments"), &long);
/// assert!(stored.starts_with("payments#sha256:") && stored.len() < MAX_KEY_BYTES);
/// ```
pub fn stored_key(prefix: Option<&str>, key: &str) -> String {
    debug_assert!(
        prefix.is_none_or(|p| validate_prefix(p).is_ok()),
        "stored_key needs a prefix that passes validate_prefix: {:?}",
        prefix.map(validate_prefix)
    );
    let joined = match prefix {
        Some(p) => format!("{p}#{key}"),
        None => key.to_owned(),
    };
    // A key that itself looks like a hashed key is hashed too, so it cannot collide with one.
    if joined.len() <= MAX_KEY_BYTES && !key.starts_with("sha256:") {
        return joined;
    }
    let hashed = format!("sha256:{}", sha256_hex(key.as_bytes()));
    match prefix {
        Some(p) => format!("{p}#{hashed}"),
        None => hashed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(body: &str) -> SqsMessage {
        let mut m = SqsMessage::default();
        m.message_id = Some("id-1".into());
        m.body = Some(body.into());
        m
    }

    #[test]
    fn key_from_pointer_errors_name_the_problem() {
        let cfg = KeyConfig::json_pointer("/id");
        assert_eq!(cfg.key(&message(r#"{"id":12}"#)).unwrap(), "12");
        assert_eq!(
            cfg.key(&message("{}")),
            Err(KeyError::Missing("/id".into()))
        );
        assert!(matches!(
            cfg.key(&message("not json")),
            Err(KeyError::InvalidJson(_))
        ));
        assert!(matches!(
            cfg.key(&message(r#"{"id":""}"#)),
            Err(KeyError::Unusable { .. })
        ));
        assert!(matches!(
            cfg.key(&message(r#"{"id":[1]}"#)),
            Err(KeyError::Unusable { .. })
        ));
        let mut no_body = message("");
        no_body.body = None;
        assert_eq!(cfg.key(&no_body), Err(KeyError::MissingBody));
    }

    #[test]
    fn message_id_key_requires_an_id() {
        let mut m = message("x");
        m.message_id = Some(String::new());
        assert_eq!(
            KeyConfig::default().key(&m),
            Err(KeyError::MissingMessageId)
        );
    }

    #[test]
    fn payload_pointer_ignores_other_fields_and_key_order() {
        let cfg = KeyConfig::json_pointer("/id").with_payload_pointer("/order");
        let a = message(r#"{"id":"1","sentAt":1,"order":{"a":1,"b":2}}"#);
        let b = message(r#"{"id":"1","sentAt":2,"order":{"b":2,"a":1}}"#);
        let c = message(r#"{"id":"1","sentAt":2,"order":{"b":3,"a":1}}"#);
        assert_eq!(cfg.payload_hash(&a).unwrap(), cfg.payload_hash(&b).unwrap());
        assert_ne!(cfg.payload_hash(&a).unwrap(), cfg.payload_hash(&c).unwrap());
        // A record the previous version wrote (the bare canonical hash of the part) matches.
        let part: Value = serde_json::from_str(r#"{"a":1,"b":2}"#).unwrap();
        assert!(
            cfg.payload_hash(&b)
                .unwrap()
                .matches(&canonical_hash(&part))
        );
    }

    #[test]
    fn whole_body_hash_by_default() {
        let cfg = KeyConfig::default();
        assert_eq!(
            cfg.payload_hash(&message("abc")).unwrap().as_str(),
            sha256_hex(b"abc")
        );
        // A JSON body: canonical, whatever its spacing and key order.
        let a = cfg.payload_hash(&message(r#"{"id":"1","n":2}"#)).unwrap();
        let b = cfg
            .payload_hash(&message("{ \"n\": 2, \"id\": \"1\" }"))
            .unwrap();
        assert_eq!(a, b);
        // The same with a key from the body (the body parsed once, for both).
        let by_id = KeyConfig::json_pointer("/id");
        let (key, hash) = by_id
            .key_and_payload_hash(&message("{ \"n\": 2, \"id\": \"1\" }"))
            .unwrap();
        assert_eq!((key.as_str(), hash.as_str()), ("1", a.as_str()));
    }

    #[test]
    fn long_keys_are_hashed_not_truncated() {
        let a = "a".repeat(3000);
        let mut b = a.clone();
        b.push('b');
        assert_ne!(stored_key(None, &a), stored_key(None, &b));
        assert_eq!(stored_key(None, &a).len(), "sha256:".len() + 64);
        // A key exactly at the limit stays as it is.
        let exact = "k".repeat(MAX_KEY_BYTES);
        assert_eq!(stored_key(None, &exact), exact);
        // A literal key that looks hashed cannot collide with a hashed one.
        let lookalike = stored_key(None, &a);
        assert_ne!(stored_key(None, &lookalike), lookalike);
    }

    #[test]
    fn a_prefix_with_the_separator_is_refused() {
        // Without the check, these two would share the stored key `a#b#c`.
        assert_eq!(
            validate_prefix("a#b"),
            Err(PrefixError::ContainsSeparator {
                prefix: "a#b".into(),
                position: 1
            })
        );
        assert_eq!(validate_prefix("a"), Ok(()));
        assert_eq!(stored_key(Some("a"), "b#c"), "a#b#c");
        let err = validate_prefix("#").unwrap_err();
        assert!(err.to_string().contains("separator '#'"), "{err}");
    }

    #[test]
    fn prefix_limits() {
        assert_eq!(validate_prefix(""), Err(PrefixError::Empty));
        assert_eq!(validate_prefix(&"p".repeat(MAX_PREFIX_BYTES)), Ok(()));
        assert_eq!(
            validate_prefix(&"p".repeat(MAX_PREFIX_BYTES + 1)),
            Err(PrefixError::TooLong {
                len: MAX_PREFIX_BYTES + 1
            })
        );
        // The limit is in bytes: 171 three-byte characters are 513 bytes.
        assert_eq!(
            validate_prefix(&"€".repeat(171)),
            Err(PrefixError::TooLong { len: 513 })
        );
        assert_eq!(validate_prefix("é-ü"), Ok(()));
    }

    #[test]
    fn a_valid_prefix_gives_prefix_hash_key() {
        assert_eq!(stored_key(Some("payments"), "p-1"), "payments#p-1");
        assert_eq!(stored_key(Some("payments"), "a#b"), "payments#a#b");
    }

    #[test]
    fn keys_with_the_longest_prefix_fit_dynamodb() {
        let prefix = "p".repeat(MAX_PREFIX_BYTES);
        let room = MAX_KEY_BYTES - MAX_PREFIX_BYTES - 1;
        for len in [1, room, room + 1, MAX_KEY_BYTES, 100_000] {
            let key = "k".repeat(len);
            let stored = stored_key(Some(&prefix), &key);
            assert!(stored.len() <= MAX_KEY_BYTES, "{len}: {}", stored.len());
            assert!(stored.starts_with(&format!("{prefix}#")));
            // Kept as it is while it fits, hashed after.
            assert_eq!(stored.ends_with(&key), len <= room, "{len}");
        }
        let multibyte = "€".repeat(1000);
        assert!(stored_key(Some(&prefix), &multibyte).len() <= MAX_KEY_BYTES);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "ContainsSeparator")]
    fn stored_key_with_an_unchecked_prefix_panics_in_debug_builds() {
        stored_key(Some("a#b"), "c");
    }
}
