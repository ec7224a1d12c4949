//! Exactly-once-in-effect SQS processing on AWS Lambda, on top of at-least-once delivery.
//!
//! # The modules, in the order a record meets them
//!
//! A word first: a *record* is an SQS message of a batch (`RecordHandler`, `RecordContext`,
//! `RecordError`); the store keeps an [`IdempotencyRecord`](state::IdempotencyRecord) for each
//! idempotency key.
//!
//! 1. [`batch`]: the [`BatchProcessor`](batch::BatchProcessor) takes the Lambda event and runs
//!    its records in lanes (a FIFO message group, or one record of a standard queue), each
//!    through a [`RecordHandler`](batch::RecordHandler): your function, made one by
//!    [`json`](batch::json) and wrapped by [`idempotent`](batch::RecordHandlerExt::idempotent),
//!    [`transactional`](batch::RecordHandlerExt::transactional) or
//!    [`inline`](batch::RecordHandlerExt::inline), tower-style.
//! 2. [`time`]: the invocation's [`Deadline`](time::Deadline), read once from the context, and
//!    the instants derived from it (`stop_at`, `finish_by`), all checked against one
//!    [`Clock`](time::Clock).
//! 3. [`key`] and [`payload`]: the record's idempotency key (its message id, or a field of its
//!    body) and the hash of its payload (canonical JSON: the same work written otherwise is the
//!    same payload).
//! 4. [`idempotency`]: the engine, [`Idempotency`]. In lease mode it acquires the key (an
//!    in-progress record with a lease to the deadline), runs the handler, then completes or
//!    fails the record; in transactional mode the handler's writes commit with the record in
//!    one request ([`transaction`]); in inline mode the handler's one new item carries the
//!    record, in one conditional write ([`inline`]). What it answers: [`lease`].
//! 5. [`state`]: the record's state machine, once: its states, each transition as a pure
//!    function, and the [table of transitions](state::table::TRANSITIONS) every backend is tested
//!    against.
//! 6. [`cache`]: a layer over the backend ([`CachedBackend`](cache::CachedBackend)) that answers
//!    a key completed in this execution environment without a request.
//! 7. [`store`]: the small [`Backend`](store::Backend) trait and its backends, DynamoDB (and its
//!    transactions), Redis / Valkey (feature `redis`), and memory for tests.
//! 8. [`error`]: what happened to the record when it did not succeed
//!    ([`RecordError`](error::RecordError)), permanent or to be retried, errors a caller can
//!    match on.
//! 9. [`backoff`], [`dead_letter`], [`redrive_policy`]: a failed record's visibility backoff, its
//!    move to the dead-letter queue with its reason (the rest of its FIFO group runs on), and the
//!    check that the queue's own redrive cannot dead-letter an innocent message.
//! 10. Back in [`batch`]: the [`BatchReport`](batch::BatchReport) and its partial batch
//!     response; [`metrics`] (CloudWatch EMF) and [`count`] (requests per operation).
//! 11. [`publish`]: messages out, batched to SQS (FIFO groups and deduplication ids);
//!     [`redact`] keeps an item's values out of the reasons that are logged and sent.
//! 12. [`iam`]: the IAM actions each mode and option needs, on which resource, and why.
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
pub mod consumer;
pub mod count;
pub mod dead_letter;
pub mod error;
pub mod iam;
pub mod idempotency;
pub mod inline;
pub mod key;
pub mod lease;
pub mod metrics;
pub mod payload;
pub mod prelude;
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
