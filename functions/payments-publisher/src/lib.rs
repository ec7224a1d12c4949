//! payments-publisher: the outbox relay. payments-api only writes a payment to the payments
//! table; this function, triggered by the table's DynamoDB stream (new items only, by the event
//! source's filter), sends each new payment to `payments.fifo` with the library's
//! [`Publisher`]: group = account, deduplication id = the payment id.
//!
//! It is the library's DynamoDB stream processor ([`BatchProcessor`] over the stream's
//! [`Event`]) with a handler per record, ordered by account ([`RecordHandlerExt::ordered_by`]),
//! without an idempotency store: the deduplication id makes a resend harmless. The sends of a
//! batch's records go out together ([`Batcher`]: one `SendMessageBatch` call per ten records).
//!
//! What it guarantees, with the event source's settings in `template.yaml`
//! (`ReportBatchItemFailures`, bisect on error, retries without limit within a record age of 12
//! hours, an on-failure queue):
//!
//! - **Nothing stays unpublished.** A payment whose send fails is reported as the shard's
//!   checkpoint (the lowest failed sequence number); Lambda retries the shard from it. A crash or
//!   a timeout fails the whole batch, which is retried the same way. A record's own faults are
//!   dead-lettered (below), so what it reports is SQS's failure (unreachable, throttled or
//!   denied, the queue missing) or a crash or timeout of the relay, and Lambda retries it without
//!   a limit: an outage of `payments.fifo` delays the payments and gives up on none.
//!   Only records 12 hours old are given up on: Lambda puts the batch's shard and sequence
//!   numbers on the on-failure queue (and its alarm fires), and payments-reconciler sends the
//!   payments, still `accepted`.
//! - **Nothing is sent twice to the consumer's effects.** A record retried after its send
//!   succeeded is sent again with the same deduplication id (SQS drops it within 5 minutes), and
//!   payment-processor deduplicates on the payment id beyond that.
//! - **Order per account, as the stream gives it.** A payment whose send failed holds back the
//!   later payments of its account in the batch ([`RecordError::GroupBlocked`]), so a retry
//!   never lands behind a later payment of the same account; other accounts go on.
//! - **A record that can never be sent** (not a payment item, text SQS would reject, or a
//!   message SQS refused as the sender's fault) does not
//!   block the shard: it goes to `DEAD_LETTER_QUEUE_URL` (the on-failure queue) with the record,
//!   its sequence number and the reason, and the batch moves on. Only if that send fails is it
//!   reported.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lambda_events::dynamodb::{Event, EventRecord};
use aws_lambda_events::streams::DynamoDbEventResponse;
use lambda_idempotency::batch::{
    BatchError, BatchProcessor, BatchReport, RecordContext, RecordError, RecordHandlerExt, record,
};
use lambda_idempotency::dead_letter::DeadLetter;
use lambda_idempotency::metrics::Metrics;
use lambda_idempotency::publish::{
    Batcher, DeduplicationId, Message, MessageGroupId, PublishError, Publisher,
};
use lambda_runtime::{Context, Error, LambdaEvent};
use payments_config::{ConfigError, Settings};
use payments_model::metrics::{self, publisher};
use payments_model::{METRICS_NAMESPACE, PaymentItem, PaymentStatus};

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

/// What one record came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The payment was sent (its id, the lag from its write to the send in ms).
    Sent(String, i64),
    /// Not an outbox entry: not an INSERT (the event source filter drops those), or an item
    /// payment-processor created itself.
    Skipped,
}

/// What one batch came to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Relayed {
    /// Payments sent (payment id, lag from its write to the send in ms), in stream order.
    pub sent: Vec<(String, i64)>,
    /// Records that are not outbox entries, skipped.
    pub skipped: usize,
    /// Records that can never be sent, moved to the dead-letter queue (sequence number, why).
    pub dead_lettered: Vec<(String, String)>,
    /// Sequence numbers of the records that failed or were held behind one of their account.
    pub failed: Vec<String>,
    /// The response to Lambda: the shard's checkpoint, the lowest of `failed`.
    pub response: DynamoDbEventResponse,
}

impl Relayed {
    /// The response to Lambda: the checkpoint.
    pub fn response(&self) -> DynamoDbEventResponse {
        self.response.clone()
    }

    /// The batch's EMF line, which [`App::handle`] prints.
    pub fn metrics(&self) -> Metrics {
        let max_lag = self.sent.iter().map(|(_, lag)| *lag).max().unwrap_or(0);
        Metrics::new(METRICS_NAMESPACE)
            .dimension(
                metrics::FUNCTION_DIMENSION,
                metrics::function::PAYMENTS_PUBLISHER,
            )
            .count(publisher::RELAYED, self.sent.len() as u64)
            .count(publisher::FAILED, self.failed.len() as u64)
            .count(publisher::DEAD_LETTERED, self.dead_lettered.len() as u64)
            .milliseconds(publisher::MAX_RELAY_LAG, max_lag as f64)
    }

    fn of(report: &BatchReport<Outcome, Event>, records: &[EventRecord]) -> Self {
        let sequence = |index: usize| {
            records[index]
                .change
                .sequence_number
                .clone()
                .unwrap_or_default()
        };
        let mut relayed = Relayed {
            response: report.response(),
            ..Relayed::default()
        };
        for r in &report.records {
            match &r.result {
                Ok(Outcome::Sent(payment_id, lag)) => {
                    relayed.sent.push((payment_id.clone(), *lag));
                }
                Ok(Outcome::Skipped) => relayed.skipped += 1,
                Err(e) if r.dead_lettered => {
                    relayed
                        .dead_lettered
                        .push((sequence(r.index), e.to_string()));
                }
                Err(_) => relayed.failed.push(sequence(r.index)),
            }
        }
        relayed
    }
}

/// The function's state, built once per execution environment.
#[derive(Debug, Clone)]
pub struct App {
    payments: Batcher,
    processor: BatchProcessor,
}

impl App {
    /// An app over this client.
    pub fn new(sqs: aws_sdk_sqs::Client, config: Config) -> Self {
        let mut processor = BatchProcessor::new();
        if let Some(url) = config.dead_letter_queue_url {
            processor = processor.with_dead_letter(DeadLetter::new(sqs.clone(), url));
        }
        Self {
            payments: Batcher::new(Publisher::new(sqs, config.payments_queue_url)),
            processor,
        }
    }

    /// The same app with `processor` running its batches (a test's: its clock, an in-memory
    /// dead-letter queue).
    pub fn with_processor(mut self, processor: BatchProcessor) -> Self {
        self.processor = processor;
        self
    }

    /// The same app sending payments with `publisher` (a test's: its retries without their
    /// waits).
    pub fn with_publisher(mut self, publisher: Publisher) -> Self {
        self.payments = Batcher::new(publisher);
        self
    }

    /// An app from the SDK configuration and the settings.
    pub fn from_settings(
        sdk: &aws_config::SdkConfig,
        settings: &impl Settings,
    ) -> Result<Self, ConfigError> {
        Ok(Self::new(
            payments_config::sqs(sdk),
            Config::from_settings(settings)?,
        ))
    }

    /// Handles one batch of stream records; reports the shard's checkpoint.
    pub async fn handle(&self, event: LambdaEvent<Event>) -> Result<DynamoDbEventResponse, Error> {
        let relayed = self.relay_event(&event).await?;
        relayed.metrics().emit();
        Ok(relayed.response())
    }

    /// Sends the new payments among `records`, in order per account (without a deadline).
    pub async fn relay(&self, records: &[EventRecord]) -> Relayed {
        let mut event = Event::default();
        event.records = records.to_vec();
        match self
            .relay_event(&LambdaEvent::new(event, Context::default()))
            .await
        {
            Ok(relayed) => relayed,
            Err(e) => {
                // A record without a sequence number: the whole batch is retried.
                tracing::error!(error = %e, "the batch cannot be answered record by record");
                Relayed {
                    failed: records
                        .iter()
                        .filter_map(|r| r.change.sequence_number.clone())
                        .collect(),
                    ..Relayed::default()
                }
            }
        }
    }

    /// Runs the processor over one event.
    async fn relay_event(&self, event: &LambdaEvent<Event>) -> Result<Relayed, BatchError> {
        let handler = record(|r: EventRecord, ctx: RecordContext| self.relay_one(r, ctx))
            .ordered_by(account_of);
        // Boxed: a batch's future is large (every record's lane), and keeps the runtime's stack
        // small.
        let report = Box::pin(self.processor.process(event, &handler)).await?;
        Ok(Relayed::of(&report, &event.payload.records))
    }

    /// Sends one record's payment, if it is an outbox entry.
    async fn relay_one(&self, r: EventRecord, ctx: RecordContext) -> Result<Outcome, RecordError> {
        if r.event_name != "INSERT" || !is_outbox_entry(&r) {
            return Ok(Outcome::Skipped);
        }
        let (item, message) = message_of(&r).map_err(RecordError::permanent)?;
        let sent = ctx.cancellable(async {
            self.payments.send(message).await.map_err(|e| match e {
                // Refused by SQS for what the message is: never sent, whatever the retries.
                PublishError::Rejected { ref code, .. } if is_message_fault(code) => {
                    RecordError::permanent(e)
                }
                // Not the record's fault: SQS unreachable or throttled, the queue missing or
                // denied, its key unusable (a misconfiguration). Retried until it is sent.
                e => RecordError::handler(e),
            })
        });
        sent.await?;
        let lag = now_ms() - item.created_at;
        tracing::info!(
            payment_id = item.payment_id,
            lag_ms = lag,
            "payment relayed"
        );
        Ok(Outcome::Sent(item.payment_id, lag))
    }
}

/// Whether SQS refused a message for what it is (its body, attributes or size): the codes of
/// the message's own faults. Any other refusal (the queue, its access or its key, the
/// credentials) is a misconfiguration the records wait out.
fn is_message_fault(code: &str) -> bool {
    const CODES: [&str; 5] = [
        "InvalidMessageContents",
        "InvalidParameterValue",
        "InvalidAttributeName",
        "InvalidAttributeValue",
        "MessageTooLong",
    ];
    CODES.iter().any(|c| code.contains(c))
}

/// The account a record's payment is of: the key its records run in order by (the stream's key
/// is the payment).
fn account_of(record: &EventRecord) -> Option<String> {
    match record.change.new_image.get("accountId") {
        Some(serde_dynamo::AttributeValue::S(account)) => Some(account.clone()),
        _ => None,
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
