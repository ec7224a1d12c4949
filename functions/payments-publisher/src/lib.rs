//! payments-publisher: the outbox relay. payments-api only writes a payment to the payments
//! table; this function, triggered by the table's DynamoDB stream (new items only, by the event
//! source's filter), sends each new payment to `payments.fifo` with the library's
//! [`Publisher`]: group = account, deduplication id = the payment id.
//!
//! What it guarantees, with the event source's settings in `template.yaml`
//! (`ReportBatchItemFailures`, bisect on error, bounded retries, an on-failure queue):
//!
//! - **Nothing stays unpublished.** A payment whose send fails is reported in
//!   `batchItemFailures`; Lambda retries the shard from the lowest such record. A crash or a
//!   timeout fails the whole batch, which is retried the same way. After the retries, Lambda puts
//!   the batch's shard and sequence numbers on the on-failure queue (and its alarm fires).
//! - **Nothing is sent twice to the consumer's effects.** A record retried after its send
//!   succeeded is sent again with the same deduplication id (SQS drops it within 5 minutes), and
//!   payment-processor deduplicates on the payment id beyond that.
//! - **Order per account, as the stream gives it.** A payment whose send failed holds back the
//!   later payments of its account in the batch ([`PublishError::EarlierInGroupFailed`]), so a
//!   retry never lands behind a later payment of the same account.
//! - **A record that can never be sent** (not a payment item, or text SQS would reject) does not
//!   block the shard: it goes to `DEAD_LETTER_QUEUE_URL` (the on-failure queue) with the reason,
//!   and the batch moves on. Only if that send fails is it reported as a batch item failure.
//!
//! [`PublishError::EarlierInGroupFailed`]: lambda_idempotency::publish::PublishError::EarlierInGroupFailed

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lambda_events::dynamodb::{Event, EventRecord};
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use lambda_idempotency::metrics::Metrics;
use lambda_idempotency::publish::{DeduplicationId, Message, MessageGroupId, Publisher};
use lambda_runtime::{Error, LambdaEvent};
use payments_config::{ConfigError, Settings};
use payments_model::metrics::{self, publisher};
use payments_model::{METRICS_NAMESPACE, PaymentItem, PaymentStatus};
use serde_json::json;

pub mod republish;

/// Settings of payments-publisher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `PAYMENTS_QUEUE_URL`: where payments go.
    pub payments_queue_url: String,
    /// `DEAD_LETTER_QUEUE_URL`: where records that can never be sent go (optional; without it
    /// they are reported failed, and Lambda's on-failure destination gets them after the
    /// retries).
    pub dead_letter_queue_url: Option<String>,
}

impl Config {
    /// Reads the settings.
    pub fn from_settings(settings: &impl Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            payments_queue_url: settings.required("PAYMENTS_QUEUE_URL")?,
            dead_letter_queue_url: settings.get("DEAD_LETTER_QUEUE_URL"),
        })
    }
}

/// Why a stream record can never become a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unrelayable {
    /// The new image is not a payment item.
    #[error("the new image is not a payment item: {0}")]
    NotAPayment(String),
    /// SQS would refuse the message on every retry.
    #[error("payment {payment_id} cannot be sent: {reason}")]
    InvalidMessage {
        /// The payment.
        payment_id: String,
        /// Why.
        reason: String,
    },
}

/// What one batch came to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Relayed {
    /// Payments sent (payment id, lag from its write to the send in ms), in stream order.
    pub sent: Vec<(String, i64)>,
    /// Records that are not outbox entries, skipped: not INSERTs (the event source filter drops
    /// those), or items payment-processor created itself.
    pub skipped: usize,
    /// Records that can never be sent, moved to the dead-letter queue (sequence number, why).
    pub dead_lettered: Vec<(String, String)>,
    /// Sequence numbers of the records to retry.
    pub failed: Vec<String>,
}

impl Relayed {
    /// The response to Lambda: the failed records' sequence numbers.
    pub fn response(&self) -> DynamoDbEventResponse {
        let mut response = DynamoDbEventResponse::default();
        response.batch_item_failures = self
            .failed
            .iter()
            .map(|sequence| {
                let mut failure = DynamoDbBatchItemFailure::default();
                failure.item_identifier = Some(sequence.clone());
                failure
            })
            .collect();
        response
    }
}

/// The function's state, built once per execution environment.
#[derive(Debug, Clone)]
pub struct App {
    payments: Publisher,
    dead_letter: Option<Publisher>,
}

impl App {
    /// An app over this client.
    pub fn new(sqs: aws_sdk_sqs::Client, config: Config) -> Self {
        Self {
            payments: Publisher::new(sqs.clone(), config.payments_queue_url),
            dead_letter: config
                .dead_letter_queue_url
                .map(|url| Publisher::new(sqs, url)),
        }
    }

    /// An app from the SDK configuration and the settings.
    pub fn from_settings(
        sdk: &aws_config::SdkConfig,
        settings: &impl Settings,
    ) -> Result<Self, ConfigError> {
        Ok(Self::new(
            aws_sdk_sqs::Client::new(sdk),
            Config::from_settings(settings)?,
        ))
    }

    /// Handles one batch of stream records; reports the records to retry.
    pub async fn handle(&self, event: LambdaEvent<Event>) -> Result<DynamoDbEventResponse, Error> {
        let relayed = self.relay(&event.payload.records).await;
        let max_lag = relayed.sent.iter().map(|(_, lag)| *lag).max().unwrap_or(0);
        Metrics::new(METRICS_NAMESPACE)
            .dimension(
                metrics::FUNCTION_DIMENSION,
                metrics::function::PAYMENTS_PUBLISHER,
            )
            .count(publisher::RELAYED, relayed.sent.len() as u64)
            .count(publisher::FAILED, relayed.failed.len() as u64)
            .count(publisher::DEAD_LETTERED, relayed.dead_lettered.len() as u64)
            .milliseconds(publisher::MAX_RELAY_LAG, max_lag as f64)
            .emit();
        Ok(relayed.response())
    }

    /// Sends the new payments among `records`, in order.
    pub async fn relay(&self, records: &[EventRecord]) -> Relayed {
        let mut relayed = Relayed::default();
        let mut to_send = Vec::new(); // (sequence number, payment id, created at, message)
        for record in records {
            let sequence = record.change.sequence_number.clone().unwrap_or_default();
            if record.event_name != "INSERT" || !is_outbox_entry(record) {
                relayed.skipped += 1;
                continue;
            }
            match message_of(record) {
                Ok((item, message)) => {
                    to_send.push((sequence, item.payment_id, item.created_at, message))
                }
                Err(why) => self.dead_letter(record, &sequence, why, &mut relayed).await,
            }
        }
        let messages = to_send.iter().map(|(.., m)| m.clone()).collect();
        let results = self.payments.send_all(messages).await;
        let now = now_ms();
        for ((sequence, payment_id, created_at, _), result) in to_send.into_iter().zip(results) {
            match result {
                Ok(_) => {
                    tracing::info!(payment_id, lag_ms = now - created_at, "payment relayed");
                    relayed.sent.push((payment_id, now - created_at));
                }
                Err(e) => {
                    tracing::warn!(payment_id, sequence, error = %e, "payment not relayed; the stream retries it");
                    relayed.failed.push(sequence);
                }
            }
        }
        relayed
    }

    async fn dead_letter(
        &self,
        record: &EventRecord,
        sequence: &str,
        why: Unrelayable,
        relayed: &mut Relayed,
    ) {
        tracing::error!(sequence, event_id = record.event_id, error = %why, "stream record cannot be relayed");
        let body = json!({
            "reason": why.to_string(),
            "eventID": record.event_id,
            "sequenceNumber": sequence,
            "eventSourceARN": record.event_source_arn,
            "keys": record.change.keys,
        })
        .to_string();
        let sent = match (&self.dead_letter, Message::standard(body)) {
            (Some(queue), Ok(message)) => queue.send(message).await.map_err(|e| e.to_string()),
            (None, _) => Err("no DEAD_LETTER_QUEUE_URL".to_owned()),
            (_, Err(e)) => Err(e.to_string()),
        };
        match sent {
            Ok(_) => relayed
                .dead_lettered
                .push((sequence.to_owned(), why.to_string())),
            Err(e) => {
                tracing::error!(
                    sequence,
                    error = e,
                    "could not dead-letter the record; the stream retries it"
                );
                relayed.failed.push(sequence.to_owned());
            }
        }
    }
}

/// Whether an INSERT is an outbox entry: payments-api writes each payment `accepted`. An item
/// that payment-processor created itself (a message that reached the queue without its payment
/// item, which it charges all the same) is already past the queue: not one to relay, nor to
/// dead-letter. An item without a status is a broken payment, and goes on to be dead-lettered.
fn is_outbox_entry(record: &EventRecord) -> bool {
    match record.change.new_image.get("status") {
        Some(serde_dynamo::AttributeValue::S(status)) => status == PaymentStatus::Accepted.as_str(),
        _ => true,
    }
}

/// The payment item of a record's new image, and its message.
fn message_of(record: &EventRecord) -> Result<(PaymentItem, Message), Unrelayable> {
    let item: PaymentItem = serde_dynamo::from_item(record.change.new_image.clone())
        .map_err(|e| Unrelayable::NotAPayment(e.to_string()))?;
    let message = payment_message(&item)?;
    Ok((item, message))
}

/// The message of a payment on `payments.fifo`: group = account, deduplication id = payment id
/// (with the reopening's count, for a payment an operator reopened: SQS must not drop it as a
/// copy of the first send), body = [`PaymentItem::requested`].
pub fn payment_message(item: &PaymentItem) -> Result<Message, Unrelayable> {
    let invalid = |reason: String| Unrelayable::InvalidMessage {
        payment_id: item.payment_id.clone(),
        reason,
    };
    let group =
        MessageGroupId::new(item.account_id.as_str()).map_err(|e| invalid(e.to_string()))?;
    let body = serde_json::to_string(&item.requested()).expect("a payment serializes");
    let deduplication = match item.reopens {
        None | Some(0) => DeduplicationId::from_key(&item.payment_id),
        Some(n) => DeduplicationId::from_key(&format!("{}#reopen-{n}", item.payment_id)),
    };
    Message::fifo(group, deduplication, body).map_err(|e| invalid(e.to_string()))
}

/// Now, in epoch ms.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis() as i64
}
