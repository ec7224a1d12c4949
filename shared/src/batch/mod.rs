//! Batch processing with partial batch responses, for SQS queues, DynamoDB streams, Kinesis data
//! streams and Kafka topics ([`EventSource`]).
//!
//! [`BatchProcessor::process`] runs a [`RecordHandler`] over every record of an event and
//! reports only the failed records in `batchItemFailures` (the event source mapping needs
//! `FunctionResponseTypes: [ReportBatchItemFailures]`).
//!
//! - SQS standard queues: records run concurrently, up to a limit; records with the same
//!   idempotency key run one after the other. SQS redelivers the failed ones alone.
//! - SQS FIFO queues (source ARN ending in `.fifo`): each message group runs in order, one record
//!   at a time, groups concurrently; after a failure the rest of that group is reported failed
//!   without running, and other groups go on. [`BatchProcessor::strict_order`] stops the whole
//!   batch at the first failure instead.
//! - Streams and Kafka: records of one order key ([`RecordHandler::order_key`]: a DynamoDB
//!   item's keys, a Kinesis partition key, a Kafka record's key, or one the handler chooses with
//!   [`RecordHandlerExt::ordered_by`]) run in order, keys concurrently. A failure holds the later
//!   records of its key; the response names the checkpoint of each shard (partition): its lowest
//!   failed record, from which Lambda delivers the shard again. [`BatchProcessor::strict_order`]
//!   stops the whole shard at its first failure instead. Under an idempotency mode, the records
//!   after the checkpoint that succeeded are duplicates when they come back, keyed by default on
//!   what identifies a record across retries ([`Record::id`]).
//! - A record whose error is permanent, or whose attempt budget
//!   ([`BatchProcessor::max_attempts`], counted by the idempotency store) is used up, goes to the
//!   dead-letter queue right where it fails ([`BatchProcessor::with_dead_letter`]), and the rest
//!   of its group (its key, on a stream) runs on: a message behind a failing one never collects
//!   receives on its account, and a shard moves past a poison record. The handler hears of it
//!   ([`RecordHandlerExt::on_dead_letter`]).
//! - A panic, a payload that does not deserialize or an approaching deadline fails that record
//!   only. Near the deadline only the handler's work is cancelled, never the write that records
//!   its outcome.
//! - Every reported `itemIdentifier` is one Lambda knows: a non-empty message id of the batch,
//!   reported once; a stream record's sequence number (a Kafka record's partition and offset). A
//!   record without one fails the whole invocation (see [`BatchError`]).
//!
//! The pieces: [`RecordHandler`] (the trait, over a [`Record`]) and what a handler is told
//! ([`RecordContext`]); the adapters [`json`], [`message`] and [`record()`]; composition
//! ([`RecordHandlerExt`]: `idempotent`, `transactional`, `inline`, `and_then`, `on_dead_letter`,
//! `ordered_by`, `boxed`) and the wrappers it makes; [`BatchReport`] (what a batch gave);
//! [`BatchProcessor`] (the settings and `process`).

mod boxed;
mod ext;
mod handler;
mod idempotent;
mod lanes;
mod lookup;
mod processor;
mod report;
pub(crate) mod source;
mod then;

pub use crate::record::{Position, Record};
pub use boxed::BoxRecordHandler;
pub use ext::RecordHandlerExt;
pub use handler::{
    DeadLettered, HandlerOutput, JsonHandler, MessageHandler, OnDeadLetter, RecordContext,
    RecordHandler, json, message, record,
};
pub use idempotent::{
    Deduplicated, Idempotent, Inline, InlineMode, LeaseMode, Mode, Transactional, TransactionalMode,
};
pub(crate) use lookup::ItemLookup;
pub use processor::{BatchProcessor, DEFAULT_CONCURRENCY};
pub use report::{BatchError, BatchReport, RecordReport};
pub use source::{
    AggregateError, Change, EventSource, KafkaBatchItemFailure, KafkaEventResponse,
    KafkaItemIdentifier, KafkaMessage,
};
pub use then::{AndThen, OrderedBy};

pub use crate::error::{PermanentError, RecordError, TransientError};
