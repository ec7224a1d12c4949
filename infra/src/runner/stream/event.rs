//! The Lambda event for DynamoDB stream records, and the invocation record Lambda sends to an
//! on-failure destination (for DynamoDB and Kinesis streams).

use std::time::{Duration, SystemTime};

use aws_sdk_dynamodbstreams::primitives::{DateTime, DateTimeFormat};
use aws_sdk_dynamodbstreams::types::{AttributeValue, Record};
use serde_json::{Map, Value, json};

/// The `eventVersion` of the stream records DynamoDB writes today (moto writes `1.0`).
pub const EVENT_VERSION: &str = "1.1";

/// One record read from a shard: its event record (as Lambda sends it) and what the mapping
/// needs to order, age and report it.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardRecord {
    /// `dynamodb.SequenceNumber`.
    pub sequence_number: String,
    /// `dynamodb.ApproximateCreationDateTime`.
    pub created: DateTime,
    /// The record of the event, see [`stream_record`].
    pub event: Value,
}

impl ShardRecord {
    /// Reads `record` of the stream `stream_arn`; `None` when it has no sequence number.
    pub fn new(record: &Record, stream_arn: &str) -> Option<Self> {
        let change = record.dynamodb.as_ref()?;
        Some(Self {
            sequence_number: change.sequence_number.clone()?,
            created: change
                .approximate_creation_date_time
                .unwrap_or_else(|| DateTime::from(SystemTime::now())),
            event: stream_record(record, stream_arn),
        })
    }

    /// How old the record is at `now` (zero for a record from the future).
    pub fn age(&self, now: SystemTime) -> Duration {
        SystemTime::try_from(self.created)
            .ok()
            .and_then(|created| now.duration_since(created).ok())
            .unwrap_or_default()
    }
}

fn image(item: &std::collections::HashMap<String, AttributeValue>) -> Value {
    // serde_dynamo's Item serializes in DynamoDB JSON ({"S": "..."}), as Lambda sends images.
    serde_json::to_value(serde_dynamo::Item::from(item.clone())).unwrap_or(Value::Null)
}

/// One record of the event, as Lambda builds it from a stream record: `eventID`, `eventName`,
/// `eventVersion`, `eventSource` (`aws:dynamodb`), `awsRegion`, `dynamodb` (with
/// `ApproximateCreationDateTime` in whole epoch seconds, `Keys`, `NewImage`/`OldImage` as the
/// stream view type gives them, `SequenceNumber`, `SizeBytes`, `StreamViewType`),
/// `eventSourceARN` (the stream), and `userIdentity` for a TTL deletion. It deserializes into
/// [`aws_lambda_events::dynamodb::EventRecord`].
///
/// ```
/// use aws_sdk_dynamodbstreams::primitives::DateTime;
/// use aws_sdk_dynamodbstreams::types::{AttributeValue, OperationType, Record, StreamRecord, StreamViewType};
///
/// let record = Record::builder()
///     .event_id("e-1")
///     .event_name(OperationType::Insert)
///     .dynamodb(
///         StreamRecord::builder()
///             .approximate_creation_date_time(DateTime::from_secs(1_700_000_000))
///             .keys("paymentId", AttributeValue::S("p-1".into()))
///             .new_image("paymentId", AttributeValue::S("p-1".into()))
///             .new_image("amountCents", AttributeValue::N("250".into()))
///             .sequence_number("100")
///             .size_bytes(42)
///             .stream_view_type(StreamViewType::NewImage)
///             .build(),
///     )
///     .build();
/// let arn = "arn:aws:dynamodb:eu-west-1:123456789012:table/payments/stream/2024-01-01T00:00:00.000";
/// let event = local_aws::runner::stream_record(&record, arn);
/// assert_eq!(event["eventName"], "INSERT");
/// assert_eq!(event["awsRegion"], "eu-west-1");
/// assert_eq!(event["dynamodb"]["NewImage"]["amountCents"], serde_json::json!({"N": "250"}));
/// let typed: aws_lambda_events::dynamodb::EventRecord = serde_json::from_value(event).unwrap();
/// assert_eq!(typed.change.sequence_number.as_deref(), Some("100"));
/// ```
pub fn stream_record(record: &Record, stream_arn: &str) -> Value {
    let mut change = Map::new();
    if let Some(c) = &record.dynamodb {
        if let Some(t) = c.approximate_creation_date_time {
            change.insert("ApproximateCreationDateTime".into(), json!(t.secs()));
        }
        change.insert(
            "Keys".into(),
            c.keys.as_ref().map_or_else(|| json!({}), image),
        );
        if let Some(new) = &c.new_image {
            change.insert("NewImage".into(), image(new));
        }
        if let Some(old) = &c.old_image {
            change.insert("OldImage".into(), image(old));
        }
        change.insert("SequenceNumber".into(), json!(c.sequence_number));
        change.insert("SizeBytes".into(), json!(c.size_bytes.unwrap_or_default()));
        if let Some(view) = &c.stream_view_type {
            change.insert("StreamViewType".into(), json!(view.as_str()));
        }
    }
    let mut out = Map::new();
    out.insert("eventID".into(), json!(record.event_id));
    out.insert(
        "eventName".into(),
        json!(record.event_name.as_ref().map(|n| n.as_str())),
    );
    out.insert("eventVersion".into(), json!(EVENT_VERSION));
    out.insert("eventSource".into(), json!("aws:dynamodb"));
    out.insert("awsRegion".into(), json!(crate::arn::region(stream_arn)));
    out.insert("dynamodb".into(), Value::Object(change));
    out.insert("eventSourceARN".into(), json!(stream_arn));
    if let Some(identity) = &record.user_identity {
        out.insert(
            "userIdentity".into(),
            json!({"type": identity.r#type, "principalId": identity.principal_id}),
        );
    }
    Value::Object(out)
}

/// The event Lambda sends for a batch of stream records.
pub fn stream_event(records: &[ShardRecord]) -> Value {
    json!({ "Records": records.iter().map(|r| &r.event).collect::<Vec<_>>() })
}

/// Why a batch was given up on (`requestContext.condition` of the invocation record).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Condition {
    /// `MaximumRetryAttempts` used up.
    RetryAttemptsExhausted,
    /// The records got older than `MaximumRecordAgeInSeconds`.
    RecordAgeExceeded,
}

impl Condition {
    /// The name Lambda writes.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RetryAttemptsExhausted => "RetryAttemptsExhausted",
            Self::RecordAgeExceeded => "RecordAgeExceeded",
        }
    }
}

/// The last invocation of a batch that was given up on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LastInvocation {
    /// Its request id.
    pub request_id: String,
    /// Whether it failed as a function error (an error, a panic, a timeout): Lambda then writes
    /// `functionError: Unhandled`.
    pub function_error: bool,
}

/// What an invocation record describes.
#[derive(Clone, Debug)]
pub struct GivenUp<'a> {
    /// The records (one shard, in order; not empty).
    pub records: &'a [ShardRecord],
    /// The shard.
    pub shard_id: &'a str,
    /// The stream.
    pub stream_arn: &'a str,
    /// The function.
    pub function_arn: &'a str,
    /// Why.
    pub condition: Condition,
    /// Invocations with these records so far (0 when they aged out before the first).
    pub approximate_invoke_count: u32,
    /// The last of those invocations.
    pub last: Option<&'a LastInvocation>,
}

fn timestamp(t: DateTime) -> String {
    // Milliseconds, as Lambda writes them.
    let millis = DateTime::from_secs_and_nanos(t.secs(), t.subsec_nanos() / 1_000_000 * 1_000_000);
    millis
        .fmt(DateTimeFormat::DateTime)
        .unwrap_or_else(|_| t.secs().to_string())
}

/// The invocation record Lambda sends to the on-failure destination of a stream mapping: the
/// request and response context, and `DDBStreamBatchInfo` (`KinesisBatchInfo` for a Kinesis
/// stream's ARN) naming the shard, the first and last
/// sequence numbers, their approximate arrival and the batch size. It carries no record data:
/// the records are read back from the stream (within its 24-hour retention).
///
/// ```
/// use aws_sdk_dynamodbstreams::primitives::DateTime;
/// use local_aws::runner::{Condition, GivenUp, LastInvocation, ShardRecord, invocation_record};
///
/// let record = |n: &str| ShardRecord {
///     sequence_number: n.into(),
///     created: DateTime::from_secs(1_700_000_000),
///     event: serde_json::json!({}),
/// };
/// let last = LastInvocation { request_id: "r-3".into(), function_error: true };
/// let doc = invocation_record(&GivenUp {
///     records: &[record("100"), record("101")],
///     shard_id: "shardId-1",
///     stream_arn: "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/x",
///     function_arn: "arn:aws:lambda:us-east-1:123456789012:function:f",
///     condition: Condition::RetryAttemptsExhausted,
///     approximate_invoke_count: 3,
///     last: Some(&last),
/// });
/// assert_eq!(doc["requestContext"]["condition"], "RetryAttemptsExhausted");
/// assert_eq!(doc["requestContext"]["approximateInvokeCount"], 3);
/// assert_eq!(doc["responseContext"]["functionError"], "Unhandled");
/// let info = &doc["DDBStreamBatchInfo"];
/// assert_eq!((info["startSequenceNumber"].as_str(), info["endSequenceNumber"].as_str()), (Some("100"), Some("101")));
/// assert_eq!(info["batchSize"], 2);
/// assert_eq!(info["approximateArrivalOfFirstRecord"], "2023-11-14T22:13:20Z");
/// ```
pub fn invocation_record(given_up: &GivenUp<'_>) -> Value {
    let records = given_up.records;
    let (first, last) = (records.first(), records.last());
    let mut request_context = Map::new();
    request_context.insert(
        "requestId".into(),
        json!(given_up.last.map_or_else(
            || uuid::Uuid::new_v4().to_string(),
            |l| l.request_id.clone()
        )),
    );
    request_context.insert("functionArn".into(), json!(given_up.function_arn));
    request_context.insert("condition".into(), json!(given_up.condition.as_str()));
    request_context.insert(
        "approximateInvokeCount".into(),
        json!(given_up.approximate_invoke_count),
    );
    let mut out = Map::new();
    out.insert("requestContext".into(), Value::Object(request_context));
    if let Some(l) = given_up.last {
        let mut response = json!({"statusCode": 200, "executedVersion": "$LATEST"});
        if l.function_error {
            response["functionError"] = json!("Unhandled");
        }
        out.insert("responseContext".into(), response);
    }
    out.insert("version".into(), json!("1.0"));
    out.insert(
        "timestamp".into(),
        json!(timestamp(DateTime::from(SystemTime::now()))),
    );
    let kind =
        super::StreamKind::of_arn(given_up.stream_arn).unwrap_or(super::StreamKind::DynamoDb);
    out.insert(
        kind.batch_info_key().into(),
        json!({
            "shardId": given_up.shard_id,
            "startSequenceNumber": first.map(|r| &r.sequence_number),
            "endSequenceNumber": last.map(|r| &r.sequence_number),
            "approximateArrivalOfFirstRecord": first.map(|r| timestamp(r.created)),
            "approximateArrivalOfLastRecord": last.map(|r| timestamp(r.created)),
            "batchSize": records.len(),
            "streamArn": given_up.stream_arn,
        }),
    );
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodbstreams::types::{Identity, OperationType, StreamRecord};

    #[test]
    fn a_ttl_deletion_carries_its_identity_and_old_image() {
        let record = Record::builder()
            .event_id("e")
            .event_name(OperationType::Remove)
            .user_identity(
                Identity::builder()
                    .r#type("Service")
                    .principal_id("dynamodb.amazonaws.com")
                    .build(),
            )
            .dynamodb(
                StreamRecord::builder()
                    .keys("k", AttributeValue::S("a".into()))
                    .old_image("k", AttributeValue::S("a".into()))
                    .old_image("tags", AttributeValue::Ss(vec!["x".into()]))
                    .old_image("blob", AttributeValue::B(vec![1, 2].into()))
                    .sequence_number("7")
                    .build(),
            )
            .build();
        let arn = "arn:aws:dynamodb:us-east-1:1:table/t/stream/s";
        let event = stream_record(&record, arn);
        assert_eq!(
            event["userIdentity"]["principalId"],
            "dynamodb.amazonaws.com"
        );
        assert_eq!(event["dynamodb"]["OldImage"]["tags"], json!({"SS": ["x"]}));
        assert_eq!(event["dynamodb"]["OldImage"]["blob"], json!({"B": "AQI="}));
        assert!(event["dynamodb"].get("NewImage").is_none());
        let typed: aws_lambda_events::dynamodb::Event =
            serde_json::from_value(json!({"Records": [event]})).unwrap();
        assert_eq!(typed.records[0].event_name, "REMOVE");
        assert!(typed.records[0].change.new_image.is_empty());
        assert_eq!(
            timestamp(DateTime::from_secs_and_nanos(0, 123_456_789)),
            "1970-01-01T00:00:00.123Z"
        );
    }
}
