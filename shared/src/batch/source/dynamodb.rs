//! DynamoDB Streams: a record is identified by its `eventID`, ordered by its item's keys, and
//! reported by its sequence number; its payload is the item as the change left it (the new
//! image), or its keys where the record has no new image (a `REMOVE`, any record under
//! `KEYS_ONLY`), and [`Change`] tells a handler what happened to the item.

use std::borrow::Cow;
use std::time::SystemTime;

use aws_lambda_events::dynamodb::{Event, EventRecord};
use aws_lambda_events::sqs::SqsMessage;
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use serde::de::DeserializeOwned;

use super::{EventSource, checkpoints, stream_copy};
use crate::record::{Position, Record};

pub use crate::record::Change;

impl Change {
    /// The change `record` tells of; `None` for an event name DynamoDB does not document.
    pub fn of(record: &EventRecord) -> Option<Self> {
        match record.event_name.as_str() {
            "INSERT" => Some(Self::Insert),
            "MODIFY" => Some(Self::Modify),
            "REMOVE" => Some(Self::Remove {
                expired: record.user_identity.as_ref().is_some_and(|who| {
                    who.type_ == "Service" && who.principal_id == "dynamodb.amazonaws.com"
                }),
            }),
            _ => None,
        }
    }
}

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
                "the {} has neither a new image nor keys (event {})",
                Self::KIND,
                self.event_name
            )
        })?;
        serde_dynamo::from_item(image.clone()).map_err(|e| {
            if self.change.new_image.is_empty() {
                format!(
                    "{e} (a {} without a new image, event {}, decodes from its keys: read it \
                     with `record` and check `RecordContext::change`, or leave such records out \
                     with the event source mapping's FilterCriteria, \
                     {{\"eventName\": [\"INSERT\", \"MODIFY\"]}})",
                    Self::KIND,
                    self.event_name
                )
            } else {
                e.to_string()
            }
        })
    }

    fn change(&self) -> Option<Change> {
        Change::of(self)
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

/// What a record's payload is: the item as the change left it (the new image), else its keys
/// (a `REMOVE`, whose item is gone; any record under `KEYS_ONLY`; an `INSERT` or `MODIFY` under
/// `OLD_IMAGE`). Never the old image: a delete must not read as the item itself.
fn image(record: &EventRecord) -> Option<&serde_dynamo::Item> {
    [&record.change.new_image, &record.change.keys]
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
