//! Sending to SQS: validated FIFO identifiers, and a batching publisher that retries only what
//! failed.
//!
//! [`Message::fifo`] cannot be built with an invalid `MessageGroupId` or
//! `MessageDeduplicationId` (1 to 128 characters of `a-zA-Z0-9` and ASCII punctuation), nor with a
//! message over 1 MiB. [`Publisher::send_all`] packs messages into `SendMessageBatch` calls of at
//! most 10 entries and 1 MiB, keeps several in flight, retries only the entries in `Failed` (with
//! bounded exponential backoff) and answers per message.
//!
//! FIFO order: a batch waits for every earlier batch that shares a message group with it, so the
//! messages of one group reach the queue in the order given. A retried entry is sent after the
//! entries of its batch that succeeded: within one call, a failed entry can fall behind later
//! messages of its group.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
use futures_util::{StreamExt, stream};
use tokio::sync::watch;

use crate::key::sha256_hex;

/// Largest SQS message, and largest `SendMessageBatch` request: 1 MiB.
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;
/// Most entries in one `SendMessageBatch` call.
pub const MAX_BATCH_ENTRIES: usize = 10;
/// Longest `MessageGroupId` or `MessageDeduplicationId`.
pub const MAX_ID_LEN: usize = 128;

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
    /// An attribute is invalid.
    #[error("message attribute `{name}` is invalid: {reason}")]
    Attribute {
        /// Its name.
        name: String,
        /// Why.
        reason: String,
    },
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
}

impl Message {
    /// A FIFO message.
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
        };
        message.check_size()
    }

    /// A message for a standard queue.
    pub fn standard(body: impl Into<String>) -> Result<Self, InvalidMessage> {
        let message = Self {
            body: body.into(),
            group_id: None,
            dedup_id: None,
            attributes: HashMap::new(),
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

    /// Adds a message attribute of any type.
    pub fn with_attribute_value(
        mut self,
        name: impl Into<String>,
        value: MessageAttributeValue,
    ) -> Result<Self, InvalidMessage> {
        self.attributes.insert(name.into(), value);
        self.check_size()
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

    /// Size as SQS counts it: body, and each attribute's name, type and value.
    pub fn size(&self) -> usize {
        self.body.len()
            + self
                .attributes
                .iter()
                .map(|(name, v)| {
                    name.len()
                        + v.data_type().len()
                        + v.string_value().map_or(0, str::len)
                        + v.binary_value().map_or(0, |b| b.as_ref().len())
                })
                .sum::<usize>()
    }

    fn check_size(self) -> Result<Self, InvalidMessage> {
        match self.size() {
            size if size > MAX_MESSAGE_BYTES => Err(InvalidMessage::TooLarge { size }),
            _ => Ok(self),
        }
    }

    fn entry(&self, id: String) -> SendMessageBatchRequestEntry {
        SendMessageBatchRequestEntry::builder()
            .id(id)
            .message_body(&self.body)
            .set_message_group_id(self.group_id.as_ref().map(|g| g.0.clone()))
            .set_message_deduplication_id(self.dedup_id.as_ref().map(|d| d.0.clone()))
            .set_message_attributes((!self.attributes.is_empty()).then(|| self.attributes.clone()))
            .build()
            .expect("id and body are set")
    }
}

/// A message that SQS accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// The SQS message id.
    pub message_id: String,
    /// The sequence number (FIFO queues).
    pub sequence_number: Option<String>,
}

/// Why a message was not sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PublishError {
    /// SQS refused the entry as the sender's fault; it is not retried.
    #[error("SQS refused the message ({code}): {message}")]
    Rejected {
        /// The error code.
        code: String,
        /// The error message.
        message: String,
    },
    /// The queue is FIFO (its URL ends in `.fifo`) and the message is not: nothing was sent.
    #[error(
        "{queue_url} is a FIFO queue, but the message has no MessageGroupId (build it with Message::fifo)"
    )]
    NotFifo {
        /// The queue.
        queue_url: String,
    },
    /// The entry still failed after every attempt.
    #[error("not sent after {attempts} attempts; last error: {last_error}")]
    Exhausted {
        /// Attempts made.
        attempts: u32,
        /// The last error.
        last_error: String,
    },
}

/// Sends messages to one queue in batches.
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use lambda_idempotency::publish::{DeduplicationId, Message, MessageGroupId, Publisher};
///
/// let config = aws_config::load_from_env().await;
/// let publisher = Publisher::new(aws_sdk_sqs::Client::new(&config), "https://sqs.../payments.fifo");
/// let messages = (0..25)
///     .map(|i| Message::fifo(MessageGroupId::new("acct-1")?, DeduplicationId::from_key(&format!("p-{i}")), "{}"))
///     .collect::<Result<Vec<_>, _>>()?;
/// for result in publisher.send_all(messages).await {
///     println!("{:?}", result?.message_id);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Publisher {
    client: Client,
    queue_url: String,
    in_flight: usize,
    max_attempts: u32,
    base_backoff: Duration,
    max_backoff: Duration,
}

impl Publisher {
    /// A publisher to `queue_url`: 4 calls in flight, 5 attempts per entry, backoff from 50 ms
    /// to 2 s.
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
            in_flight: 4,
            max_attempts: 5,
            base_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
        }
    }

    /// How many `SendMessageBatch` calls may be in flight at once (at least 1).
    pub fn in_flight(mut self, calls: usize) -> Self {
        self.in_flight = calls.max(1);
        self
    }

    /// How many times an entry is tried in all (at least 1).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Backoff before retry `n` (from 1): `min(base * 2^(n-1), max)`, with full jitter.
    pub fn backoff(mut self, base: Duration, max: Duration) -> Self {
        self.base_backoff = base;
        self.max_backoff = max.max(base);
        self
    }

    /// The queue URL.
    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }

    /// Sends one message (a batch of one).
    pub async fn send(&self, message: Message) -> Result<Sent, PublishError> {
        self.send_all(vec![message])
            .await
            .pop()
            .expect("one result per message")
    }

    /// Sends every message, and answers for each, in the order given.
    pub async fn send_all(&self, messages: Vec<Message>) -> Vec<Result<Sent, PublishError>> {
        let mut results: Vec<Option<Result<Sent, PublishError>>> =
            messages.iter().map(|_| None).collect();
        let mut sendable = Vec::with_capacity(messages.len());
        for (i, message) in messages.iter().enumerate() {
            if self.queue_url.ends_with(".fifo") && message.group_id.is_none() {
                results[i] = Some(Err(PublishError::NotFifo {
                    queue_url: self.queue_url.clone(),
                }));
            } else {
                sendable.push(i);
            }
        }
        let batches: Vec<Vec<usize>> =
            plan_batches(&sendable.iter().map(|&i| &messages[i]).collect::<Vec<_>>())
                .into_iter()
                .map(|batch| batch.into_iter().map(|j| sendable[j]).collect())
                .collect();
        // A FIFO batch waits for the earlier batches that share one of its groups.
        let mut last_with_group: HashMap<&str, usize> = HashMap::new();
        let mut done_senders = Vec::with_capacity(batches.len());
        let mut done_receivers = Vec::with_capacity(batches.len());
        let mut waits = Vec::with_capacity(batches.len());
        for (b, batch) in batches.iter().enumerate() {
            let (tx, rx) = watch::channel(false);
            done_senders.push(Some(tx));
            done_receivers.push(rx);
            let mut deps: Vec<usize> = batch
                .iter()
                .filter_map(|&i| messages[i].group_id.as_ref())
                .filter_map(|g| last_with_group.insert(g.as_str(), b))
                .filter(|&d| d != b)
                .collect();
            deps.sort_unstable();
            deps.dedup();
            waits.push(deps);
        }
        let jobs = batches
            .into_iter()
            .zip(waits)
            .zip(done_senders)
            .map(|((batch, deps), done)| {
                let deps: Vec<_> = deps.iter().map(|&d| done_receivers[d].clone()).collect();
                let messages = &messages;
                async move {
                    for mut dep in deps {
                        // An Err means the sender is gone, which only happens once it is done.
                        let _ = dep.wait_for(|finished| *finished).await;
                    }
                    let results = self.send_batch(messages, &batch).await;
                    if let Some(done) = done {
                        let _ = done.send(true);
                    }
                    batch.into_iter().zip(results).collect::<Vec<_>>()
                }
            });
        let finished: Vec<_> = stream::iter(jobs)
            .buffer_unordered(self.in_flight)
            .collect()
            .await;
        for (i, r) in finished.into_iter().flatten() {
            results[i] = Some(r);
        }
        results
            .into_iter()
            .map(|r| r.expect("every message has a result"))
            .collect()
    }

    /// Sends one planned batch, retrying the failed entries.
    async fn send_batch(
        &self,
        messages: &[Message],
        batch: &[usize],
    ) -> Vec<Result<Sent, PublishError>> {
        let mut results: Vec<Option<Result<Sent, PublishError>>> =
            batch.iter().map(|_| None).collect();
        let mut pending: Vec<usize> = (0..batch.len()).collect(); // positions in `batch`
        let mut last_error: HashMap<usize, String> = HashMap::new();
        for attempt in 1..=self.max_attempts {
            if attempt > 1 {
                tokio::time::sleep(self.delay(attempt - 1)).await;
            }
            let entries = pending
                .iter()
                .map(|&p| messages[batch[p]].entry(p.to_string()))
                .collect::<Vec<_>>();
            let response = self
                .client
                .send_message_batch()
                .queue_url(&self.queue_url)
                .set_entries(Some(entries))
                .send()
                .await;
            let output = match response {
                Ok(output) => output,
                Err(SdkError::ServiceError(e))
                    if is_client_fault(e.raw().status().as_u16(), e.err().code()) =>
                {
                    // The request itself is wrong: retrying cannot help.
                    let code = e.err().code().unwrap_or("ClientError").to_owned();
                    let message = e.err().message().unwrap_or_default().to_owned();
                    tracing::warn!(code, message, "SendMessageBatch refused");
                    for &p in &pending {
                        results[p] = Some(Err(PublishError::Rejected {
                            code: code.clone(),
                            message: message.clone(),
                        }));
                    }
                    break;
                }
                Err(e) => {
                    let text = match e.code() {
                        Some(code) => format!("{code}: {}", e.message().unwrap_or_default()),
                        None => DisplayErrorContext(&e).to_string(),
                    };
                    tracing::warn!(attempt, entries = pending.len(), error = %text, "SendMessageBatch failed");
                    for &p in &pending {
                        last_error.insert(p, text.clone());
                    }
                    continue;
                }
            };
            for ok in output.successful() {
                if let Ok(p) = ok.id().parse::<usize>() {
                    results[p] = Some(Ok(Sent {
                        message_id: ok.message_id().to_owned(),
                        sequence_number: ok.sequence_number().map(str::to_owned),
                    }));
                }
            }
            for failed in output.failed() {
                let Ok(p) = failed.id().parse::<usize>() else {
                    continue;
                };
                let message = failed.message().unwrap_or_default().to_owned();
                if failed.sender_fault() {
                    results[p] = Some(Err(PublishError::Rejected {
                        code: failed.code().to_owned(),
                        message,
                    }));
                } else {
                    last_error.insert(p, format!("{}: {message}", failed.code()));
                }
            }
            pending.retain(|&p| results[p].is_none());
            if pending.is_empty() {
                break;
            }
            tracing::warn!(
                attempt,
                failed = pending.len(),
                "retrying the failed entries of a batch"
            );
        }
        results
            .into_iter()
            .enumerate()
            .map(|(p, r)| {
                r.unwrap_or_else(|| {
                    Err(PublishError::Exhausted {
                        attempts: self.max_attempts,
                        last_error: last_error
                            .remove(&p)
                            .unwrap_or_else(|| "no answer for the entry".into()),
                    })
                })
            })
            .collect()
    }

    fn delay(&self, retry: u32) -> Duration {
        let exp = self
            .base_backoff
            .saturating_mul(2u32.saturating_pow(retry.saturating_sub(1)))
            .min(self.max_backoff);
        jitter(exp)
    }
}

/// True for an HTTP 4xx that is not throttling: the caller's mistake, not worth a retry.
fn is_client_fault(status: u16, code: Option<&str>) -> bool {
    (400..500).contains(&status) && status != 429 && !code.is_some_and(|c| c.contains("Throttl"))
}

/// A random number (from the standard library's randomly seeded hasher: no extra dependency).
pub(crate) fn random_u64() -> u64 {
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

/// A random duration in `[d/2, d]`.
pub(crate) fn jitter(d: Duration) -> Duration {
    let half = d / 2;
    half + Duration::from_nanos(random_u64() % (half.as_nanos() as u64).max(1))
}

/// Packs messages, in order, into batches of at most 10 entries and 1 MiB.
pub fn plan_batches<M: std::borrow::Borrow<Message>>(messages: &[M]) -> Vec<Vec<usize>> {
    let sizes: Vec<usize> = messages.iter().map(|m| m.borrow().size()).collect();
    plan_batches_by_size(&sizes)
}

/// Packs items of the given sizes, in order, into `SendMessageBatch` calls of at most 10 entries
/// and 1 MiB; returns the indices of each batch.
///
/// ```
/// use lambda_idempotency::publish::plan_batches_by_size;
///
/// assert_eq!(plan_batches_by_size(&[600_000, 500_000, 10]), vec![vec![0], vec![1, 2]]);
/// ```
pub fn plan_batches_by_size(sizes: &[usize]) -> Vec<Vec<usize>> {
    let mut batches: Vec<Vec<usize>> = Vec::new();
    let mut size = 0;
    for (i, &s) in sizes.iter().enumerate() {
        match batches.last_mut() {
            Some(batch) if batch.len() < MAX_BATCH_ENTRIES && size + s <= MAX_MESSAGE_BYTES => {
                batch.push(i);
                size += s;
            }
            _ => {
                batches.push(vec![i]);
                size = s;
            }
        }
    }
    batches
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

    fn sized(n: usize) -> Message {
        Message::standard("x".repeat(n)).unwrap()
    }

    #[test]
    fn batches_of_ten_and_one_mib() {
        let m: Vec<_> = (0..25).map(|_| sized(10)).collect();
        let sizes: Vec<_> = plan_batches(&m).iter().map(Vec::len).collect();
        assert_eq!(sizes, [10, 10, 5]);
        let big: Vec<_> = (0..5).map(|_| sized(400 * 1024)).collect();
        let sizes: Vec<_> = plan_batches(&big).iter().map(Vec::len).collect();
        assert_eq!(sizes, [2, 2, 1]);
    }

    proptest! {
        #[test]
        fn planned_batches_hold_the_limits(sizes in proptest::collection::vec(0usize..400_000, 0..60)) {
            let messages: Vec<_> = sizes.iter().map(|&s| sized(s)).collect();
            let batches = plan_batches(&messages);
            let flat: Vec<usize> = batches.iter().flatten().copied().collect();
            prop_assert_eq!(flat, (0..messages.len()).collect::<Vec<_>>());
            for b in &batches {
                prop_assert!(!b.is_empty() && b.len() <= MAX_BATCH_ENTRIES);
                prop_assert!(b.iter().map(|&i| messages[i].size()).sum::<usize>() <= MAX_MESSAGE_BYTES);
            }
        }

        #[test]
        fn derived_dedup_ids_are_always_valid(key in ".*") {
            let id = DeduplicationId::from_key(&key);
            prop_assert!(DeduplicationId::new(id.as_str()).is_ok());
        }
    }

    #[test]
    fn jitter_stays_in_range() {
        for _ in 0..100 {
            let j = jitter(Duration::from_millis(100));
            assert!(j >= Duration::from_millis(50) && j <= Duration::from_millis(100));
        }
    }
}
