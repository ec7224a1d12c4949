//! Exactly-once-in-effect SQS processing on AWS Lambda, on top of at-least-once delivery.
//!
//! - [`Idempotency`]: an idempotency engine (in progress with a lease that ends at the Lambda
//!   deadline, completed with an optional stored result, failed with attempts and the last
//!   error) over a small [`store::Backend`] trait, with a DynamoDB backend and, with the `redis`
//!   feature, a Redis / Valkey one (`store::RedisBackend`).
//! - [`transaction`]: the transactional mode, where the handler's DynamoDB writes and the
//!   idempotency record commit in one `TransactWriteItems`: one request per record, no lease,
//!   exactly once for the writes ([`batch::RecordHandlerExt::transactional`]).
//! - [`cache`]: a warm-container LRU of completed keys, so a duplicate seen again by the same
//!   execution environment costs no request.
//! - [`batch`]: SQS batch processing with partial batch responses, FIFO-aware.
//! - [`publish`]: a batching SQS publisher for FIFO and standard queues.
//! - [`backoff`], [`dead_letter`], [`redrive_policy`]: per-message backoff, dead-lettering with a
//!   reason, and the check that a queue's redrive backstop cannot dead-letter innocent messages.
//! - [`error`]: what happened to a record ([`error::RecordError`]), errors a caller can match on.
//! - [`payload`]: when two deliveries under one key carry the same work (canonical JSON).
//!
//! # Features
//!
//! - `dynamodb` (default): [`store::DynamoDbBackend`], the DynamoDB actions of
//!   [`transaction::Transaction`] (`put`, `update`, `delete`, `condition_check`), and the
//!   `aws-sdk-dynamodb` dependency. Without it the engine, the transactional mode,
//!   the batch processor, the publisher, the dead-letter queue and the request counter all work,
//!   over [`store::InMemoryBackend`] or a [`store::Backend`] of your own:
//!   `lambda-idempotency = { version = "0.1", default-features = false }`.
//!
//! SQS support (batch processing, the publisher, the dead-letter queue) is always on.
//!
//! # Example
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
//! use lambda_idempotency::batch::{BatchProcessor, RecordContext, RecordHandlerExt, json};
//! use lambda_idempotency::{Idempotency, key::KeyConfig, store::InMemoryBackend};
//! use lambda_runtime::{Context, LambdaEvent};
//!
//! #[derive(serde::Deserialize)]
//! struct Payment { amount_cents: i64 }
//!
//! // In a function, use store::DynamoDbBackend: the in-memory backend is for tests only.
//! let handler = json(|p: Payment, _ctx: RecordContext| async move {
//!     Ok::<_, std::io::Error>(p.amount_cents)
//! })
//! .idempotent(Idempotency::new(InMemoryBackend::default()))
//! .with_keys(KeyConfig::json_pointer("/payment_id"));
//!
//! // A producer sent the same payment twice: two messages, one payment.
//! let message = |id: &str| {
//!     let mut m = SqsMessage::default();
//!     m.message_id = Some(id.into());
//!     m.body = Some(r#"{"payment_id": "p-1", "amount_cents": 500}"#.into());
//!     m
//! };
//! let mut event = SqsEvent::default();
//! event.records = vec![message("m-1"), message("m-2")];
//!
//! let report = BatchProcessor::new()
//!     .concurrency(1)
//!     .process(&LambdaEvent::new(event, Context::default()), &handler)
//!     .await
//!     .unwrap();
//! assert!(report.response().batch_item_failures.is_empty());
//! assert_eq!(report.successes().filter(|(_, d)| d.is_duplicate()).count(), 1);
//! # });
//! ```
//!
//! # Examples
//!
//! Small standalone crates in the repository's `examples/` directory, each a Lambda function (a
//! thin `src/main.rs` over a handler in `src/lib.rs`, a plain async function a test can call),
//! with a sample event under `events/`, a README on running it with `cargo lambda` and deploying
//! it, and a test that runs the handler on the sample event against a local DynamoDB or SQS:
//!
//! - `examples/sqs-consumer`: a standard-queue consumer, `json(f).idempotent(engine)` under a
//!   [`BatchProcessor`](batch::BatchProcessor) with a partial batch response, records in
//!   DynamoDB; a duplicate delivery runs the effect once.
//! - `examples/fifo-consumer`: a FIFO consumer keyed on a business key from the body; a failure
//!   holds only the rest of its message group.
//! - `examples/http-idempotency-key`: an HTTP endpoint (`lambda_http`) that honours the
//!   `Idempotency-Key` header on [`Idempotency::run`]: replay, `409` while the first request
//!   runs, `422` for another body, `400` for a malformed key.
//! - `examples/fifo-publisher`: a function that publishes the messages it is given to a FIFO
//!   queue with [`publish::Publisher`] (groups, deduplication ids, batches).
//! - `examples/transactional`: the transactional mode, a handler's DynamoDB writes committed with
//!   the idempotency record in one `TransactWriteItems` ([`transaction`]).

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod backoff;
pub mod batch;
pub mod cache;
pub mod count;
pub mod dead_letter;
pub mod error;
pub mod idempotency;
pub mod key;
pub mod lease;
pub mod metrics;
pub mod payload;
pub mod publish;
pub mod redact;
pub mod redrive_policy;
pub mod state;
pub mod store;
pub mod time;
pub mod transaction;

pub use idempotency::Idempotency;
pub use lease::{AcquireError, Acquired, Lease, Outcome, RunError};

/// The workspace README's examples, compiled as doc tests so that they cannot rot. Only in the
/// workspace (the build script finds the README; a packaged crate has none) and with
/// DynamoDB, which the examples use.
#[doc = include_str!("../../README.md")]
#[cfg(all(doctest, workspace_readme, feature = "dynamodb"))]
pub struct ReadmeDoctests;
