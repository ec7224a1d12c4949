//! What a batch gave: one [`RecordReport`] per record, and the partial batch response.

use std::collections::HashSet;

use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse};

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
}

/// One record's result.
#[derive(Debug)]
pub struct RecordReport<T> {
    /// Position in the event's `Records`.
    pub index: usize,
    /// The message id.
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

/// The result of every record of a batch, in batch order.
#[derive(Debug)]
pub struct BatchReport<T> {
    /// One per record, in batch order.
    pub records: Vec<RecordReport<T>>,
}

impl<T> BatchReport<T> {
    /// The partial batch response: the failed records' message ids, each once, never one that
    /// went to the dead-letter queue.
    pub fn response(&self) -> SqsBatchResponse {
        let dead: HashSet<&str> = self
            .dead_lettered()
            .map(|r| r.message_id.as_str())
            .collect();
        let mut seen = HashSet::new();
        let mut response = SqsBatchResponse::default();
        response.batch_item_failures = self
            .failures()
            .filter(|r| !dead.contains(r.message_id.as_str()))
            .filter(|r| seen.insert(r.message_id.as_str()))
            .map(|r| {
                let mut failure = BatchItemFailure::default();
                failure.item_identifier = r.message_id.clone();
                failure
            })
            .collect();
        response
    }

    /// The failed records reported for redelivery (not those moved to the dead-letter queue,
    /// nor repeats of a message id).
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
