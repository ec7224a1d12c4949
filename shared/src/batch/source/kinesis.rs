//! Kinesis: a record is identified by its shard and sequence number, ordered by its partition
//! key, and reported by its sequence number.

use std::borrow::Cow;
use std::time::SystemTime;

use aws_lambda_events::kinesis::{KinesisEvent, KinesisEventRecord};
use aws_lambda_events::sqs::SqsMessage;
use aws_lambda_events::streams::KinesisEventResponse;

use super::{EventSource, checkpoints, kinesis_aggregation, stream_copy};
use crate::record::{Position, Record};
use crate::store::BoxError;

impl Record for KinesisEventRecord {
    const KIND: &'static str = "Kinesis record";

    /// The stream's ARN, the shard id and the sequence number
    /// (`arn:aws:kinesis:...:stream/payments/shardId-000000000000:4959...`), so that two streams
    /// never share a key; the shard id and sequence number alone for a record without its
    /// stream's ARN.
    fn id(&self) -> Option<Cow<'_, str>> {
        let position = self.position()?;
        let id = match self.event_source_arn.as_deref() {
            Some(arn) if !arn.is_empty() => {
                format!("{arn}/{}:{}", position.shard, position.sequence)
            }
            _ => format!("{}:{}", position.shard, position.sequence),
        };
        // A user record of a KPL aggregate: its sub-sequence number too.
        Some(Cow::Owned(kinesis_aggregation::with_sub_sequence(self, id)))
    }

    fn malformed(&self) -> Option<BoxError> {
        kinesis_aggregation::malformed(self).map(Into::into)
    }

    fn payload(&self) -> Option<Cow<'_, [u8]>> {
        Some(Cow::Borrowed(&self.kinesis.data.0))
    }

    fn sent_at(&self) -> Option<SystemTime> {
        let at = self.kinesis.approximate_arrival_timestamp.0;
        (at.timestamp_millis() > 0).then(|| SystemTime::from(at))
    }

    fn order_key(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(self.kinesis.partition_key.as_str()))
    }

    fn position(&self) -> Option<Position> {
        let sequence = &self.kinesis.sequence_number;
        if sequence.is_empty() {
            return None;
        }
        // The event id is `shardId-...:<sequence number>`.
        let shard = self
            .event_id
            .as_deref()
            .and_then(|id| id.split_once(':'))
            .map(|(shard, _)| shard.to_owned())
            .unwrap_or_default();
        Some(Position {
            shard,
            sequence: sequence.clone(),
        })
    }

    fn dead_letter_copy(&self) -> SqsMessage {
        let position = self.position();
        let body = serde_json::json!({
            "source": "aws:kinesis",
            "eventSourceARN": self.event_source_arn,
            "shardId": position.as_ref().map(|p| &p.shard),
            "sequenceNumber": self.kinesis.sequence_number,
            "record": self,
        });
        stream_copy(self.id().as_deref(), body)
    }
}

impl EventSource for KinesisEvent {
    type Record = KinesisEventRecord;
    type Response = KinesisEventResponse;

    fn expand(&self) -> Option<Self> {
        kinesis_aggregation::expand(self)
    }

    fn records(&self) -> Vec<&KinesisEventRecord> {
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

    fn response(failed: &[&KinesisEventRecord]) -> KinesisEventResponse {
        let mut response = KinesisEventResponse::default();
        response.set_failures(
            checkpoints(failed)
                .into_iter()
                .map(|record| record.kinesis.sequence_number.clone()),
        );
        response
    }
}
