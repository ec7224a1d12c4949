//! What a consumer is written with, in one `use`:
//!
//! ```
//! use lambda_idempotency::prelude::*;
//! ```
//!
//! The [`Consumer`] and its builder and settings; the handler adapters ([`json`], [`message`],
//! [`record`]) and the output trait a hand-written handler implements ([`HandlerOutput`]),
//! what a handler is told and answers ([`RecordContext`] and a DynamoDB stream record's
//! [`Change`], [`RecordError`], [`PermanentError`], [`TransientError`], [`Deduplicated`]); each
//! mode's output ([`InlinePut`], [`Transaction`]); the keys ([`KeyConfig`]); the bounds of a
//! consumer generic over its backend ([`Backend`], [`TransactionalBackend`]);
//! and on DynamoDB the backend, the inline mode's item and the SDK's
//! `AttributeValue` (the SDK's other types a transaction is written with, at this crate's
//! version, are in [`dynamodb`](crate::dynamodb)). `Error` is Lambda's boxed error. The event
//! types of each source and their records ([`SqsMessage`]; [`KinesisEvent`],
//! [`KinesisEventRecord`]; [`DynamoDbEvent`], [`DynamoDbEventRecord`]; [`KafkaEvent`],
//! [`KafkaRecord`]), `aws_lambda_events`' at this crate's version, so that a consumer names its
//! source (`.source::<KinesisEvent>()`) without a dependency of its own.

pub use crate::Idempotency;
pub use crate::batch::{
    BoxRecordHandler, Change, Deduplicated, HandlerOutput, PermanentError, RecordContext,
    RecordError, RecordHandler, RecordHandlerExt, TransientError, json, message, record,
};
pub use crate::consumer::{Consumer, ConsumerBuilder, ConsumerConfig};
pub use crate::inline::InlinePut;
pub use crate::key::KeyConfig;
pub use crate::store::{Backend, TransactionalBackend};
pub use crate::transaction::Transaction;
pub use aws_lambda_events::dynamodb::{Event as DynamoDbEvent, EventRecord as DynamoDbEventRecord};
pub use aws_lambda_events::kafka::{KafkaEvent, KafkaRecord};
pub use aws_lambda_events::kinesis::{KinesisEvent, KinesisEventRecord};
pub use aws_lambda_events::sqs::SqsMessage;
pub use lambda_runtime::Error;

#[cfg(feature = "dynamodb")]
#[cfg_attr(docsrs, doc(cfg(feature = "dynamodb")))]
pub use crate::store::{DynamoDbBackend, NewItem};
#[cfg(feature = "dynamodb")]
#[cfg_attr(docsrs, doc(cfg(feature = "dynamodb")))]
pub use aws_sdk_dynamodb::types::AttributeValue;
