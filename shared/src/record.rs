//! [`Record`]: what the batch layer and the keys need of one record of any source (an SQS
//! message, a DynamoDB stream record, a Kinesis record, a Kafka record), so that one processor,
//! one set of handlers and the three idempotency modes serve them all. The sources' own
//! implementations are in [`batch`](crate::batch)'s, beside their responses.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::time::SystemTime;

use aws_lambda_events::sqs::SqsMessage;
use serde::de::DeserializeOwned;

/// One record of a batch. Implemented for the records of the four sources the
/// [`BatchProcessor`](crate::batch::BatchProcessor) serves: [`SqsMessage`], the DynamoDB stream's
/// [`EventRecord`](aws_lambda_events::dynamodb::EventRecord), Kinesis'
/// [`KinesisEventRecord`](aws_lambda_events::kinesis::KinesisEventRecord) and Kafka's
/// [`KafkaRecord`](aws_lambda_events::kafka::KafkaRecord) (with its topic and partition, as
/// [`KafkaEvent`](aws_lambda_events::kafka::KafkaEvent) gives it).
pub trait Record: Clone + Send + Sync + 'static {
    /// What the record is, for messages and errors (`"SQS message"`, `"Kinesis record"`, ...).
    const KIND: &'static str;

    /// What identifies the record across its deliveries, and so its default idempotency key:
    /// the SQS message id, the DynamoDB stream record's `eventID` (unique across streams), a
    /// Kinesis record's stream ARN, shard id and sequence number
    /// (`arn:aws:kinesis:...:stream/payments/shardId-000000000000:4959...`; a user record of a
    /// KPL aggregate's ends with its sub-sequence number, `...:4959...:2`), a Kafka record's
    /// topic, partition and offset (`payments-0@42`; the processor puts the event's cluster
    /// before it: [`EventSource::record_id`](crate::batch::EventSource::record_id)). `None` when
    /// the record has none.
    fn id(&self) -> Option<Cow<'_, str>>;

    /// The record's payload: what [`json`](crate::batch::json) handlers decode, a
    /// [`KeyConfig::json_pointer`](crate::key::KeyConfig::json_pointer) reads and the payload
    /// hash covers. The SQS body; a Kinesis record's data and a Kafka record's value (decoded
    /// from base64); a DynamoDB stream record's new image as plain JSON, or its keys where it has
    /// none (a `REMOVE`, any record under `KEYS_ONLY`: see [`Change`]).
    /// `None` when there is none (a Kafka tombstone).
    fn payload(&self) -> Option<Cow<'_, [u8]>>;

    /// The payload as a `T` (no payload reads as JSON `null`). JSON for every source but DynamoDB streams, whose image is read as
    /// DynamoDB's attribute values (`serde_dynamo`), so that a type that reads its table's items
    /// reads its stream's records.
    fn decode<T: DeserializeOwned>(&self) -> Result<T, String> {
        match self.payload() {
            Some(payload) => serde_json::from_slice(&payload).map_err(|e| e.to_string()),
            // A tombstone: JSON null, which an `Option<T>` reads as `None`.
            None => serde_json::from_str("null")
                .map_err(|_| format!("the {} has no payload", Self::KIND)),
        }
    }

    /// Why the record can never be processed, whatever the handler: a Kinesis record whose data
    /// is a corrupt aggregate of the Kinesis Producer Library
    /// ([`AggregateError`](crate::batch::AggregateError)), say. The [`json`](crate::batch::json)
    /// and [`record`](crate::batch::record()) handlers fail such a record with
    /// [`RecordError::Permanent`](crate::error::RecordError::Permanent) of this error before
    /// their function runs (with a dead-letter queue, it is moved there whole); a hand-written
    /// [`RecordHandler`](crate::batch::RecordHandler) should too. `None` (the default) for a
    /// record that can be.
    fn malformed(&self) -> Option<Box<dyn std::error::Error + Send + Sync>> {
        None
    }

    /// What happened to a DynamoDB stream record's item (`INSERT`, `MODIFY`, `REMOVE`, a time
    /// to live expiry); `None` for the other sources.
    fn change(&self) -> Option<Change> {
        None
    }

    /// How many times the source delivered it (SQS's `ApproximateReceiveCount`); `None` for
    /// sources that do not count (the streams and Kafka: a retried record looks like a new one).
    fn receive_count(&self) -> Option<u32> {
        None
    }

    /// When the source accepted it (SQS's `SentTimestamp`, a Kinesis record's arrival, a DynamoDB
    /// change's creation, a Kafka record's timestamp).
    fn sent_at(&self) -> Option<SystemTime> {
        None
    }

    /// The key whose records must run in order: the SQS message group (FIFO queues), a DynamoDB
    /// item's keys, a Kinesis partition key, a Kafka record's key.
    fn order_key(&self) -> Option<Cow<'_, str>> {
        None
    }

    /// Where the record is in its stream: its shard (or partition) and sequence number (or
    /// offset); `None` for SQS.
    fn position(&self) -> Option<Position> {
        None
    }

    /// The copy of the record a dead-letter queue receives: the message itself for SQS; for a
    /// stream, a message whose body is the record as Lambda delivered it with its shard (or
    /// partition) and sequence number (or offset).
    fn dead_letter_copy(&self) -> SqsMessage;

    /// True when a copy in a dead-letter queue comes back as this record (an SQS redrive), so that
    /// its attempts start again; false for streams, where the shard moves past it and a replay of
    /// the shard must skip it.
    fn redriven() -> bool {
        false
    }
}

/// What happened to a DynamoDB stream record's item ([`RecordContext::change`](crate::batch::RecordContext::change)).
///
/// A handler counting, say, orders acts on [`Insert`](Self::Insert) and treats a
/// [`Remove`](Self::Remove) as a delete: the record's payload is then the item's keys, never the
/// deleted item (its old image is in the record, `change.old_image`, for a [`record`](crate::batch::record)
/// handler under `OLD_IMAGE` or `NEW_AND_OLD_IMAGES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Change {
    /// `INSERT`: a new item.
    Insert,
    /// `MODIFY`: an item's attributes changed.
    Modify,
    /// `REMOVE`: the item was deleted.
    Remove {
        /// True when DynamoDB's time to live deleted it (the record's `userIdentity` is
        /// `{"type": "Service", "principalId": "dynamodb.amazonaws.com"}`), false for a delete of
        /// the table's writers.
        expired: bool,
    },
}

/// Where a stream record is: its shard (a Kafka topic's partition) and its sequence number (its
/// offset), compared as numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    /// The shard id, or `topic-partition` for Kafka.
    pub shard: String,
    /// The sequence number or offset, in decimal.
    pub sequence: String,
}

impl Position {
    /// Compares two sequence numbers (decimal, of any length) as numbers: `"10"` is after `"9"`.
    pub fn cmp_sequence(a: &str, b: &str) -> Ordering {
        let a = a.trim_start_matches('0');
        let b = b.trim_start_matches('0');
        a.len().cmp(&b.len()).then_with(|| a.cmp(b))
    }
}

impl Record for SqsMessage {
    const KIND: &'static str = "SQS message";

    fn id(&self) -> Option<Cow<'_, str>> {
        self.message_id.as_deref().map(Cow::Borrowed)
    }

    fn payload(&self) -> Option<Cow<'_, [u8]>> {
        self.body.as_deref().map(|b| Cow::Borrowed(b.as_bytes()))
    }

    fn receive_count(&self) -> Option<u32> {
        self.attributes
            .get("ApproximateReceiveCount")
            .and_then(|c| c.parse().ok())
    }

    fn sent_at(&self) -> Option<SystemTime> {
        self.attributes
            .get("SentTimestamp")
            .and_then(|ms| ms.parse().ok())
            .map(at_ms)
    }

    fn order_key(&self) -> Option<Cow<'_, str>> {
        self.attributes
            .get("MessageGroupId")
            .map(|g| Cow::Borrowed(g.as_str()))
    }

    fn dead_letter_copy(&self) -> SqsMessage {
        self.clone()
    }

    fn redriven() -> bool {
        true
    }
}

/// `ms` epoch milliseconds as a time.
pub(crate) fn at_ms(ms: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::Position;
    use std::cmp::Ordering;

    #[test]
    fn sequence_numbers_compare_as_numbers_not_as_text() {
        assert_eq!(Position::cmp_sequence("10", "9"), Ordering::Greater);
        assert_eq!(Position::cmp_sequence("009", "9"), Ordering::Equal);
        let long = "49590338271490256608559692538361571095921575989136588898";
        let longer = "149590338271490256608559692538361571095921575989136588898";
        assert_eq!(Position::cmp_sequence(long, longer), Ordering::Less);
        assert_eq!(Position::cmp_sequence("0", "00"), Ordering::Equal);
    }
}
