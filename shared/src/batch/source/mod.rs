//! The event sources the [`BatchProcessor`](super::BatchProcessor) serves ([`EventSource`]):
//! SQS queues, DynamoDB streams, Kinesis data streams and Kafka topics (Amazon MSK and
//! self-managed), and the partial batch response each expects.
//!
//! - **SQS**: every failed message is named (`itemIdentifier` = its message id); SQS redelivers
//!   those alone.
//! - **DynamoDB Streams and Kinesis**: Lambda restarts a shard from the *lowest* sequence number
//!   reported, and delivers everything after it again. So the response names, per shard, the
//!   checkpoint: the lowest failed record, never a later one, and never an identifier Lambda does
//!   not know (an empty or unknown one fails the whole batch). The records after it that
//!   succeeded come back too: under an idempotency mode they are duplicates and do not run again.
//! - **Kafka**: AWS's documentation reads both ways (Lambda restarts a partition from the lowest
//!   offset named, or it retries only the records named), so the response names every record
//!   not done: each failed record and each held behind a failure (of its key, or of its
//!   partition under strict order, or not started before the deadline), never one that
//!   succeeded or went to the dead-letter queue. Under the first reading the lowest is the
//!   checkpoint; under the second nothing not done is left behind.

mod dynamodb;
mod kafka;
mod kinesis;
pub(crate) mod kinesis_aggregation;
mod sqs;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use aws_lambda_events::sqs::SqsMessage;
use serde::Serialize;

use crate::record::{Position, Record};

pub use dynamodb::Change;
pub use kafka::{KafkaBatchItemFailure, KafkaEventResponse, KafkaItemIdentifier, KafkaMessage};
pub use kinesis_aggregation::AggregateError;

/// An event the [`BatchProcessor`](super::BatchProcessor) processes: its records, whether they run
/// in order, and the partial batch response for the records that failed. Implemented for
/// [`SqsEvent`](aws_lambda_events::sqs::SqsEvent), the DynamoDB stream's
/// [`Event`](aws_lambda_events::dynamodb::Event), [`KinesisEvent`](aws_lambda_events::kinesis::KinesisEvent)
/// and [`KafkaEvent`](aws_lambda_events::kafka::KafkaEvent).
pub trait EventSource: Send + Sync + 'static {
    /// One record.
    type Record: Record;
    /// The partial batch response (`{"batchItemFailures": [...]}`).
    type Response: Clone + fmt::Debug + Serialize + Send + Sync + 'static;

    /// The event with its records unpacked, when some record packs several: a Kinesis event
    /// whose records include aggregates of the Kinesis Producer Library, each replaced by its
    /// user records (see [`AggregateError`]). `None` (the default) when the event is processed
    /// as it is. [`BatchProcessor::process`](super::BatchProcessor::process) calls it once,
    /// first: the records, the report's entries and the response are then those of the event it
    /// gives.
    fn expand(&self) -> Option<Self>
    where
        Self: Sized,
    {
        None
    }

    /// The records, in the order the source delivered them (a Kafka event's partitions in the
    /// order of their names, each in offset order).
    fn records(&self) -> Vec<&Self::Record>;

    /// True when records run in order: each stream shard (Kafka partition) by key, a FIFO queue
    /// by message group. False for a standard SQS queue, whose records run concurrently.
    fn ordered(&self) -> bool;

    /// What identifies `record` across its deliveries, and so its default idempotency key
    /// ([`RecordContext::message_id`](super::RecordContext::message_id)): its own
    /// [`Record::id`], and for a Kafka record, whose record does not name its cluster, the
    /// cluster (the event's `eventSourceArn`, or its `bootstrapServers` for self-managed Kafka)
    /// before it, so that two clusters never share a key.
    fn record_id<'a>(&'a self, record: &'a Self::Record) -> Option<Cow<'a, str>> {
        record.id()
    }

    /// The ARN of the event's source (a queue, a stream, an MSK cluster), if the event names it.
    fn source_arn(&self) -> Option<&str> {
        None
    }

    /// True for a stream source (DynamoDB Streams, Kinesis, Kafka): the response is a checkpoint
    /// per shard, and every record must have a [`Record::position`].
    fn is_stream() -> bool {
        false
    }

    /// The response for `failed`, every record not done (failed, or held behind a failure; in
    /// batch order; never a dead-lettered one): each of them for SQS and Kafka, the checkpoint of
    /// each shard for DynamoDB Streams and Kinesis.
    fn response(failed: &[&Self::Record]) -> Self::Response;
}

/// The checkpoint of each shard among `failed`: its record of the lowest sequence number.
pub(crate) fn checkpoints<'a, R: Record>(failed: &[&'a R]) -> Vec<&'a R> {
    let mut lowest: BTreeMap<String, (Position, &'a R)> = BTreeMap::new();
    for record in failed {
        let Some(position) = record.position() else {
            continue;
        };
        match lowest.get(&position.shard) {
            Some((low, _)) if Position::cmp_sequence(&low.sequence, &position.sequence).is_le() => {
            }
            _ => {
                lowest.insert(position.shard.clone(), (position, *record));
            }
        }
    }
    lowest.into_values().map(|(_, record)| record).collect()
}

/// A dead-letter copy of a stream record: `body`, named by the record's id. A character SQS
/// refuses in a message (U+FFFF, say, which JSON does not escape) is written as a JSON escape
/// (`\uffff`), which reads back as the same text: a record SQS could never carry as it is still
/// reaches the dead-letter queue.
pub(super) fn stream_copy(id: Option<&str>, body: serde_json::Value) -> SqsMessage {
    let text = body.to_string();
    let mut safe = String::with_capacity(text.len());
    for c in text.chars() {
        if crate::publish::invalid_character(c.encode_utf8(&mut [0; 4])).is_some() {
            // Outside JSON's strings only white space and ASCII occur, which SQS takes.
            safe.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            safe.push(c);
        }
    }
    let mut copy = SqsMessage::default();
    copy.message_id = id.map(str::to_owned);
    copy.body = Some(safe);
    copy
}
