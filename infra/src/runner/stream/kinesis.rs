//! The Lambda event for Kinesis Data Streams records.

use aws_sdk_kinesis::primitives::DateTime;
use aws_sdk_kinesis::types::Record;
use base64::Engine;
use serde_json::{Value, json};

use super::event::ShardRecord;

/// The `kinesisSchemaVersion` Lambda writes.
pub const KINESIS_SCHEMA_VERSION: &str = "1.0";

/// One record of the event, as Lambda builds it from a Kinesis record of shard `shard_id`:
/// `kinesis` (`kinesisSchemaVersion`, `partitionKey`, `sequenceNumber`, `data` in base64,
/// `approximateArrivalTimestamp` in epoch seconds with milliseconds), `eventSource`
/// (`aws:kinesis`), `eventVersion`, `eventID` (`<shard id>:<sequence number>`), `eventName`
/// (`aws:kinesis:record`), `invokeIdentityArn` (the function's execution role), `awsRegion`
/// and `eventSourceARN` (the stream). It deserializes into
/// [`aws_lambda_events::kinesis::KinesisEventRecord`].
///
/// ```
/// use aws_sdk_kinesis::primitives::{Blob, DateTime};
/// use aws_sdk_kinesis::types::Record;
///
/// let record = Record::builder()
///     .sequence_number("49590338271490256608559692538361571095921575989136588898")
///     .partition_key("account-1")
///     .data(Blob::new("Hello, this is a test."))
///     .approximate_arrival_timestamp(DateTime::from_millis(1_545_084_650_987))
///     .build()
///     .unwrap();
/// let stream = "arn:aws:kinesis:us-east-2:123456789012:stream/lambda-stream";
/// let role = "arn:aws:iam::123456789012:role/lambda-role";
/// let event = local_aws::runner::kinesis_record(&record, "shardId-000000000006", stream, role);
/// assert_eq!(event["eventID"], "shardId-000000000006:49590338271490256608559692538361571095921575989136588898");
/// assert_eq!(event["kinesis"]["data"], "SGVsbG8sIHRoaXMgaXMgYSB0ZXN0Lg==");
/// assert_eq!(event["kinesis"]["approximateArrivalTimestamp"], 1_545_084_650.987);
/// let typed: aws_lambda_events::kinesis::KinesisEventRecord = serde_json::from_value(event).unwrap();
/// assert_eq!(typed.kinesis.partition_key, "account-1");
/// assert_eq!(typed.event_source_arn.as_deref(), Some(stream));
/// ```
pub fn kinesis_record(
    record: &Record,
    shard_id: &str,
    stream_arn: &str,
    invoke_identity_arn: &str,
) -> Value {
    let sequence_number = record.sequence_number();
    let arrival = record
        .approximate_arrival_timestamp()
        .map(|t| (t.to_millis().unwrap_or_default() as f64) / 1000.0);
    json!({
        "kinesis": {
            "kinesisSchemaVersion": KINESIS_SCHEMA_VERSION,
            "partitionKey": record.partition_key().unwrap_or_default(),
            "sequenceNumber": sequence_number,
            "data": base64::engine::general_purpose::STANDARD.encode(record.data().as_ref()),
            "approximateArrivalTimestamp": arrival,
        },
        "eventSource": "aws:kinesis",
        "eventVersion": "1.0",
        "eventID": format!("{shard_id}:{sequence_number}"),
        "eventName": "aws:kinesis:record",
        "invokeIdentityArn": invoke_identity_arn,
        "awsRegion": crate::arn::region(stream_arn),
        "eventSourceARN": stream_arn,
    })
}

impl ShardRecord {
    /// Reads the Kinesis `record` of shard `shard_id` (see [`kinesis_record`]); `None` when it
    /// has no sequence number.
    pub fn from_kinesis(
        record: &Record,
        shard_id: &str,
        stream_arn: &str,
        invoke_identity_arn: &str,
    ) -> Option<Self> {
        let sequence_number = record.sequence_number();
        if sequence_number.is_empty() {
            return None;
        }
        Some(Self {
            sequence_number: sequence_number.to_owned(),
            created: record
                .approximate_arrival_timestamp()
                .copied()
                .unwrap_or_else(|| DateTime::from(std::time::SystemTime::now())),
            event: kinesis_record(record, shard_id, stream_arn, invoke_identity_arn),
        })
    }
}
