//! DynamoDB Streams: a record is identified by its `eventID`, ordered by its item's keys, and
//! reported by its sequence number.

use std::borrow::Cow;
use std::time::SystemTime;

use aws_lambda_events::dynamodb::{Event, EventRecord};
use aws_lambda_events::sqs::SqsMessage;
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use serde::de::DeserializeOwned;

use super::{EventSource, checkpoints, stream_copy};
use crate::record::{Position, Record};

impl Record for EventRecord {
    const KIND: &'static str = "DynamoDB stream record";

    fn id(&self) -> Option<Cow<'_, str>> {
        (!self.event_id.is_empty()).then_some(Cow::Borrowed(self.event_id.as_str()))
    }

    fn payload(&self) -> Option<Cow<'_, [u8]>> {
        let value: serde_json::Value = serde_dynamo::from_item(image(self)?.clone()).ok()?;
        Some(Cow::Owned(serde_json::to_vec(&value).ok()?))
    }

    fn decode<T: DeserializeOwned>(&self) -> Result<T, String> {
        let image = image(self).ok_or_else(|| {
            format!(
                "the {} has no image (event {}, stream view type {:?})",
                Self::KIND,
                self.event_name,
                self.change.stream_view_type
            )
        })?;
        serde_dynamo::from_item(image.clone()).map_err(|e| e.to_string())
    }

    fn sent_at(&self) -> Option<SystemTime> {
        let at = self.change.approximate_creation_date_time;
        (at.timestamp_millis() > 0).then(|| SystemTime::from(at))
    }

    fn order_key(&self) -> Option<Cow<'_, str>> {
        if self.change.keys.is_empty() {
            return None;
        }
        // The keys in a canonical form: JSON objects' keys are sorted.
        let keys: serde_json::Value = serde_dynamo::from_item(self.change.keys.clone()).ok()?;
        Some(Cow::Owned(keys.to_string()))
    }

    fn position(&self) -> Option<Position> {
        let sequence = self
            .change
            .sequence_number
            .clone()
            .filter(|s| !s.is_empty())?;
        // A batch is of one shard, which the record does not name: its stream stands for it.
        Some(Position {
            shard: self.event_source_arn.clone().unwrap_or_default(),
            sequence,
        })
    }

    fn dead_letter_copy(&self) -> SqsMessage {
        let body = serde_json::json!({
            "source": "aws:dynamodb",
            "eventID": self.event_id,
            "eventSourceARN": self.event_source_arn,
            "sequenceNumber": self.change.sequence_number,
            "keys": self.change.keys,
            "record": self,
        });
        stream_copy(self.id().as_deref(), body)
    }
}

/// The image a record's payload is: the new one, else the old one (a `REMOVE`).
fn image(record: &EventRecord) -> Option<&serde_dynamo::Item> {
    [&record.change.new_image, &record.change.old_image]
        .into_iter()
        .find(|image| !image.is_empty())
}

impl EventSource for Event {
    type Record = EventRecord;
    type Response = DynamoDbEventResponse;

    fn records(&self) -> Vec<&EventRecord> {
        self.records.iter().collect()
    }

    fn source_arn(&self) -> Option<&str> {
        self.records
            .first()
            .and_then(|r| r.event_source_arn.as_deref())
    }

    fn ordered(&self) -> bool {
        true
    }

    fn is_stream() -> bool {
        true
    }

    fn response(failed: &[&EventRecord]) -> DynamoDbEventResponse {
        let mut response = DynamoDbEventResponse::default();
        response.batch_item_failures = checkpoints(failed)
            .into_iter()
            .map(|record| {
                let mut failure = DynamoDbBatchItemFailure::default();
                failure.item_identifier = record.change.sequence_number.clone();
                failure
            })
            .collect();
        response
    }
}
