//! A function that publishes the messages it is given to a FIFO queue, with the library's
//! [`Publisher`]:
//!
//! - each message names its group (`MessageGroupId`, validated: [`MessageGroupId::new`]) and a
//!   deduplication key, any string, turned into a valid `MessageDeduplicationId` by
//!   [`DeduplicationId::from_key`]: the same key always gives the same id, so sending a request
//!   again within SQS's 5-minute window enqueues nothing twice;
//! - the publisher packs the messages into `SendMessageBatch` calls (at most 10 entries and
//!   1 MiB each), retries only the entries that failed, with backoff, and keeps each group's
//!   order whatever fails (a group's later messages are not sent once an earlier one failed
//!   for good);
//! - an invalid message fails the whole request before anything is sent, naming the message and
//!   the field ([`RequestError`]).
//!
//! [`App::handle`] is a plain async method: the tests call it with the sample request.

use aws_sdk_sqs::Client;
use lambda_idempotency::publish::{
    DeduplicationId, InvalidMessage, Message, MessageGroupId, Publisher,
};
use lambda_runtime::{Diagnostic, LambdaEvent};
use serde::{Deserialize, Serialize};

/// What the function is given: the messages to publish, in order.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PublishRequest {
    /// The messages.
    pub messages: Vec<OutgoingMessage>,
}

/// One message to publish.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OutgoingMessage {
    /// The message group: messages of one group are delivered in order.
    pub group_id: String,
    /// The business key that identifies the message (a payment id, say): its deduplication id
    /// is derived from it.
    pub deduplication_key: String,
    /// The body, sent as its JSON text.
    pub body: serde_json::Value,
}

/// What became of each message, by its position in the request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PublishResponse {
    /// The messages SQS accepted (a duplicate within the deduplication window is accepted, and
    /// not enqueued again).
    pub sent: Vec<SentMessage>,
    /// The messages not sent, with the reason. Sending the same request again is safe: what was
    /// sent is deduplicated.
    pub failed: Vec<FailedMessage>,
}

/// A message SQS accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SentMessage {
    /// Its position in the request.
    pub index: usize,
    /// The SQS message id.
    pub message_id: String,
    /// Its place in the queue (FIFO).
    pub sequence_number: Option<String>,
}

/// A message that was not sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FailedMessage {
    /// Its position in the request.
    pub index: usize,
    /// Why.
    pub error: String,
}

/// Why a request was refused (nothing was sent), or the function cannot start.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// A message cannot be sent as it is: an invalid group id, a body over 1 MiB, a character
    /// SQS refuses.
    #[error("message {index} is invalid: {source}")]
    InvalidMessage {
        /// Its position in the request.
        index: usize,
        /// What is wrong.
        source: InvalidMessage,
    },
    /// `QUEUE_URL` is not set.
    #[error(
        "the environment variable QUEUE_URL is not set (the URL of the FIFO queue to publish to)"
    )]
    MissingQueueUrl,
}

/// Lambda's error type is the variant's name, for callers that tell errors apart.
impl From<RequestError> for Diagnostic {
    fn from(error: RequestError) -> Self {
        let error_type = match error {
            RequestError::InvalidMessage { .. } => "InvalidMessage",
            RequestError::MissingQueueUrl => "MissingQueueUrl",
        };
        Diagnostic {
            error_type: error_type.into(),
            error_message: error.to_string(),
        }
    }
}

/// The function's state, built once per execution environment.
#[derive(Debug, Clone)]
pub struct App {
    publisher: Publisher,
}

impl App {
    /// An app publishing to `queue_url` with `client`.
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        Self {
            publisher: Publisher::new(client, queue_url),
        }
    }

    /// An app publishing to the queue in `QUEUE_URL`.
    pub fn from_env(sdk: &aws_config::SdkConfig) -> Result<Self, RequestError> {
        let queue_url = std::env::var("QUEUE_URL").map_err(|_| RequestError::MissingQueueUrl)?;
        Ok(Self::new(Client::new(sdk), queue_url))
    }

    /// Publishes the request's messages; answers for each.
    pub async fn handle(
        &self,
        event: LambdaEvent<PublishRequest>,
    ) -> Result<PublishResponse, RequestError> {
        let messages = event
            .payload
            .messages
            .into_iter()
            .enumerate()
            .map(|(index, m)| {
                let invalid = |source| RequestError::InvalidMessage { index, source };
                let group = MessageGroupId::new(m.group_id).map_err(invalid)?;
                let dedup = DeduplicationId::from_key(&m.deduplication_key);
                Message::fifo(group, dedup, m.body.to_string()).map_err(invalid)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut response = PublishResponse::default();
        for (index, result) in self
            .publisher
            .send_all(messages)
            .await
            .into_iter()
            .enumerate()
        {
            match result {
                Ok(sent) => response.sent.push(SentMessage {
                    index,
                    message_id: sent.message_id,
                    sequence_number: sent.sequence_number,
                }),
                Err(e) => {
                    tracing::warn!(index, error = %e, "message not sent");
                    let error = e.to_string();
                    response.failed.push(FailedMessage { index, error });
                }
            }
        }
        Ok(response)
    }
}
