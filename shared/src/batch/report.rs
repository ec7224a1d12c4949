//! What a batch gave: one [`RecordReport`] per record, and the partial batch response.

use std::fmt;

use aws_lambda_events::sqs::SqsEvent;

use super::source::EventSource;
use crate::error::RecordError;

/// Why a whole invocation fails (every record is redelivered).
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// A record has no message id, so no partial response can name it.
    #[error(
        "record {index} of the batch has no messageId: a partial batch response cannot name it, \
         so the whole batch fails and is redelivered"
    )]
    MissingMessageId {
        /// Its position in the batch.
        index: usize,
    },
    /// A stream or Kafka record has no sequence number (offset) or no id, so no checkpoint can
    /// name it.
    #[error(
        "record {index} of the batch (a {kind}) has no sequence number: a partial batch response \
         cannot name it, so the whole batch fails and is retried"
    )]
    MissingSequenceNumber {
        /// Its position in the batch.
        index: usize,
        /// What the record is ([`Record::KIND`](super::Record::KIND)).
        kind: &'static str,
    },
}

/// One record's result.
#[derive(Debug)]
pub struct RecordReport<T> {
    /// Position in the event's `Records`. In a Kinesis event with aggregates of the Kinesis
    /// Producer Library, each aggregate counts as its user records, in their order: an entry per
    /// user record ([`EventSource::expand`](super::EventSource::expand)), whose
    /// [`message_id`](Self::message_id) ends with its sub-sequence number.
    pub index: usize,
    /// The record's id ([`Record::id`](super::Record::id)): the SQS message id, a stream
    /// record's.
    pub message_id: String,
    /// What the handler gave.
    pub result: Result<T, RecordError>,
    /// The record failed (permanently, or with its attempt budget used up) and was moved to the
    /// dead-letter queue: it is acknowledged, not reported.
    pub dead_lettered: bool,
}

impl<T> RecordReport<T> {
    /// True when the record goes back to the queue: it failed, was not dead-lettered, and is not
    /// a repeat of a message id that came earlier in the batch.
    pub fn is_reported(&self) -> bool {
        match &self.result {
            Ok(_) => false,
            Err(RecordError::Repeated { .. }) => false,
            Err(_) => !self.dead_lettered,
        }
    }
}

/// The result of every record of a batch, in batch order, and the partial batch response of
/// its source (`E`: an SQS event by default).
pub struct BatchReport<T, E: EventSource = SqsEvent> {
    /// One per record, in batch order.
    pub records: Vec<RecordReport<T>>,
    pub(super) response: E::Response,
}

impl<T: fmt::Debug, E: EventSource> fmt::Debug for BatchReport<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchReport")
            .field("records", &self.records)
            .field("response", &self.response)
            .finish()
    }
}

impl<T, E: EventSource> BatchReport<T, E> {
    /// The partial batch response. SQS: the failed records' message ids, each once, never one
    /// that went to the dead-letter queue. Streams and Kafka: the checkpoint of each shard
    /// (partition) with a failure, its lowest failed record.
    pub fn response(&self) -> E::Response {
        self.response.clone()
    }

    /// The failed records reported for redelivery (not those moved to the dead-letter queue,
    /// nor repeats of a message id). On a stream, Lambda delivers again from the lowest of each
    /// shard, the later records too.
    pub fn failures(&self) -> impl Iterator<Item = &RecordReport<T>> {
        self.records.iter().filter(|r| r.is_reported())
    }

    /// The records moved to the dead-letter queue.
    pub fn dead_lettered(&self) -> impl Iterator<Item = &RecordReport<T>> {
        self.records.iter().filter(|r| r.dead_lettered)
    }

    /// The successful records' outputs.
    pub fn successes(&self) -> impl Iterator<Item = (&str, &T)> {
        self.records
            .iter()
            .filter_map(|r| r.result.as_ref().ok().map(|t| (r.message_id.as_str(), t)))
    }
}
