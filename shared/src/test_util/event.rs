//! SQS events for tests: [`sqs_event`] and [`SqsEventBuilder`].

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_runtime::{Context, LambdaEvent};

/// The queue of an event built without [`SqsEventBuilder::queue_arn`]: a standard queue.
pub const DEFAULT_QUEUE_ARN: &str = "arn:aws:sqs:us-east-1:123456789012:test-queue";

/// An SQS event of a standard queue ([`DEFAULT_QUEUE_ARN`]) with one record per `(message id,
/// body)` pair, in order, each received once; with the default [`Context`] (no deadline).
///
/// ```
/// use lambda_idempotency::test_util::sqs_event;
///
/// let event = sqs_event([("m-1", r#"{"orderId": "o-1"}"#), ("m-2", r#"{"orderId": "o-2"}"#)]);
/// assert_eq!(event.payload.records.len(), 2);
/// assert_eq!(event.payload.records[1].message_id.as_deref(), Some("m-2"));
/// ```
pub fn sqs_event<I, K, V>(messages: I) -> LambdaEvent<SqsEvent>
where
    I: IntoIterator<Item = (K, V)>,
    K: Into<String>,
    V: Into<String>,
{
    messages
        .into_iter()
        .fold(SqsEventBuilder::new(), |event, (id, body)| {
            event.message(id, body)
        })
        .build()
}

/// Builds an SQS event as Lambda delivers it: each record with its message id, body, receipt
/// handle, `ApproximateReceiveCount`, the queue's ARN and region, and on a FIFO queue (an ARN
/// ending in `.fifo`) its `MessageGroupId`, `MessageDeduplicationId` and `SequenceNumber`.
///
/// [`message`](Self::message) adds a record; [`group`](Self::group),
/// [`receive_count`](Self::receive_count) and [`attribute`](Self::attribute) set the last one
/// added. [`build`](Self::build) gives the `LambdaEvent` that
/// [`Consumer::process`](crate::consumer::Consumer::process) and
/// [`BatchProcessor::process`](crate::batch::BatchProcessor::process) take.
///
/// ```
/// use lambda_idempotency::test_util::SqsEventBuilder;
///
/// let event = SqsEventBuilder::new()
///     .queue_arn("arn:aws:sqs:eu-west-1:123456789012:orders.fifo")
///     .message("m-1", r#"{"orderId": "o-1"}"#).group("customer-1")
///     .message("m-2", r#"{"orderId": "o-2"}"#).group("customer-1").receive_count(3)
///     .build();
/// let second = &event.payload.records[1];
/// assert_eq!(second.attributes["MessageGroupId"], "customer-1");
/// assert_eq!(second.attributes["ApproximateReceiveCount"], "3");
/// assert_eq!(second.aws_region.as_deref(), Some("eu-west-1"));
/// ```
#[derive(Debug, Clone)]
pub struct SqsEventBuilder {
    queue_arn: String,
    records: Vec<SqsMessage>,
    context: Context,
}

impl Default for SqsEventBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl SqsEventBuilder {
    /// An event of no record, from [`DEFAULT_QUEUE_ARN`], with the default [`Context`].
    pub fn new() -> Self {
        Self {
            queue_arn: DEFAULT_QUEUE_ARN.to_owned(),
            records: Vec::new(),
            context: Context::default(),
        }
    }

    /// The queue the records come from (every record's `eventSourceARN`, and its region): a
    /// FIFO queue when it ends in `.fifo`.
    ///
    /// # Panics
    ///
    /// When `arn` is not an SQS queue ARN (`arn:aws:sqs:REGION:ACCOUNT:NAME`).
    pub fn queue_arn(mut self, arn: impl Into<String>) -> Self {
        let arn = arn.into();
        let parts: Vec<&str> = arn.split(':').collect();
        assert!(
            parts.len() == 6 && parts[..3] == ["arn", "aws", "sqs"] && !parts[5].is_empty(),
            "SqsEventBuilder::queue_arn: `{arn}` is not an SQS queue ARN \
             (arn:aws:sqs:REGION:ACCOUNT:NAME)"
        );
        self.queue_arn = arn;
        self
    }

    /// The invocation's context (its deadline: `Context::deadline`, its request id).
    pub fn context(mut self, context: Context) -> Self {
        self.context = context;
        self
    }

    /// Adds a record: message `id` with `body`, received once; on a FIFO queue in the group
    /// `default` until [`group`](Self::group) says otherwise.
    pub fn message(mut self, id: impl Into<String>, body: impl Into<String>) -> Self {
        let id = id.into();
        let mut record = SqsMessage::default();
        record.receipt_handle = Some(format!("receipt-{id}-{}", self.records.len()));
        record.message_id = Some(id);
        record.body = Some(body.into());
        record.event_source = Some("aws:sqs".to_owned());
        for (name, value) in [
            ("ApproximateReceiveCount", "1"),
            ("SentTimestamp", "1767225600000"),
            ("SenderId", "AIDAIENQZJOLO23YVJ4VO"),
            ("ApproximateFirstReceiveTimestamp", "1767225600001"),
        ] {
            record.attributes.insert(name.to_owned(), value.to_owned());
        }
        self.records.push(record);
        self
    }

    /// Adds a record for each `(message id, body)` pair, as [`message`](Self::message).
    pub fn messages<I, K, V>(self, messages: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        messages
            .into_iter()
            .fold(self, |event, (id, body)| event.message(id, body))
    }

    /// The last record's FIFO message group (`MessageGroupId`).
    ///
    /// # Panics
    ///
    /// When no record was added yet.
    pub fn group(self, group_id: impl Into<String>) -> Self {
        self.attribute("MessageGroupId", group_id)
    }

    /// The last record's `ApproximateReceiveCount`: how many times SQS has delivered it, this
    /// delivery included.
    ///
    /// # Panics
    ///
    /// When no record was added yet, or `count` is 0 (a delivered message was received at
    /// least once).
    pub fn receive_count(self, count: u32) -> Self {
        assert!(
            count >= 1,
            "SqsEventBuilder::receive_count: a delivered message has been received at least once, not 0 times"
        );
        self.attribute("ApproximateReceiveCount", count.to_string())
    }

    /// One of the last record's system attributes (`attributes`: `AWSTraceHeader`,
    /// `SentTimestamp`, ...).
    ///
    /// # Panics
    ///
    /// When no record was added yet.
    pub fn attribute(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        let name = name.into();
        let Some(record) = self.records.last_mut() else {
            panic!("SqsEventBuilder: `{name}` of which record? Add one with `message` first")
        };
        record.attributes.insert(name, value.into());
        self
    }

    /// The SQS event alone (the `payload` of [`build`](Self::build)'s).
    pub fn event(&self) -> SqsEvent {
        let fifo = self.queue_arn.ends_with(".fifo");
        let region = self.queue_arn.split(':').nth(3).unwrap_or_default();
        let mut event = SqsEvent::default();
        for (n, record) in self.records.iter().enumerate() {
            let mut record = record.clone();
            record.event_source_arn = Some(self.queue_arn.clone());
            record.aws_region = Some(region.to_owned());
            if fifo {
                let id = record.message_id.clone().unwrap_or_default();
                let attributes = &mut record.attributes;
                attributes
                    .entry("MessageGroupId".to_owned())
                    .or_insert_with(|| "default".to_owned());
                attributes
                    .entry("MessageDeduplicationId".to_owned())
                    .or_insert(id);
                attributes
                    .entry("SequenceNumber".to_owned())
                    .or_insert_with(|| {
                        format!("{:020}", 18_849_496_460_467_696_128_u128 + n as u128)
                    });
            }
            event.records.push(record);
        }
        event
    }

    /// The event as the function receives it: the SQS event and the context.
    pub fn build(self) -> LambdaEvent<SqsEvent> {
        LambdaEvent::new(self.event(), self.context)
    }
}
