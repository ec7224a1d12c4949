//! SQS batch processing with partial batch responses.
//!
//! [`BatchProcessor::process`] runs a [`RecordHandler`] over every record of an SQS event and
//! reports only the failed records in `batchItemFailures`, so that SQS redelivers those alone
//! (the event source mapping needs `FunctionResponseTypes: [ReportBatchItemFailures]`).
//!
//! - Standard queues: records run concurrently, up to a limit; records with the same idempotency
//!   key run one after the other.
//! - FIFO queues (source ARN ending in `.fifo`): each message group runs in order, one record at
//!   a time, groups concurrently; after a failure the rest of that group is reported failed
//!   without running, and other groups go on. [`BatchProcessor::strict_order`] stops the whole
//!   batch at the first failure instead.
//! - A record whose error is permanent, or whose attempt budget
//!   ([`BatchProcessor::max_attempts`], counted by the idempotency store) is used up, goes to the
//!   dead-letter queue right where it fails ([`BatchProcessor::with_dead_letter`]), and the rest
//!   of its group runs on: a message behind a failing one never collects receives on its
//!   account. The handler hears of it ([`RecordHandlerExt::on_dead_letter`]).
//! - A panic, a body that does not deserialize or an approaching deadline fails that record
//!   only. Near the deadline only the handler's work is cancelled, never the write that records
//!   its outcome.
//! - Every reported `itemIdentifier` is a non-empty message id of the batch, reported once; a
//!   record without a message id fails the whole invocation (see [`BatchError`]).
//!
//! The pieces: [`RecordHandler`] (the trait) and what a handler is told ([`RecordContext`]); the
//! adapters [`json`] and [`message`]; composition ([`RecordHandlerExt`]: `idempotent`,
//! `transactional`, `inline`, `and_then`, `on_dead_letter`, `boxed`) and the wrappers it makes;
//! [`BatchReport`] (what a batch gave); [`BatchProcessor`] (the settings and `process`).

mod boxed;
mod ext;
mod handler;
mod idempotent;
mod inline;
mod lanes;
mod lookup;
mod processor;
mod report;
mod then;
mod transactional;

pub use boxed::BoxRecordHandler;
pub use ext::RecordHandlerExt;
pub use handler::{
    DeadLettered, JsonHandler, MessageHandler, OnDeadLetter, RecordContext, RecordHandler, json,
    message,
};
pub use idempotent::{Deduplicated, Idempotent, LeaseMode, Mode};
pub use inline::{Inline, InlineMode};
pub(crate) use lookup::ItemLookup;
pub use processor::{BatchProcessor, DEFAULT_CONCURRENCY};
pub use report::{BatchError, BatchReport, RecordReport};
pub use then::AndThen;
pub use transactional::{Transactional, TransactionalMode};

pub use crate::error::{PermanentError, RecordError};
