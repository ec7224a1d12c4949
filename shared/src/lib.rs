//! Exactly-once-in-effect SQS processing on AWS Lambda, on top of at-least-once delivery.
//!
//! ```toml
//! [dependencies]
//! lambda-idempotency = "0.1"
//! lambda_runtime = "1.5"
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! serde = { version = "1", features = ["derive"] }
//! ```
//!
//! # A first consumer
//!
//! An SQS consumer whose effect is one new order item: the [`inline`] mode writes it with its
//! idempotency record on it, in one conditional write, keyed on the body's `/orderId`. Everything
//! else comes from the environment ([`ConsumerConfig`](consumer::ConsumerConfig)'s table:
//! `IDEMPOTENCY_TABLE`, `DEAD_LETTER_QUEUE_URL`, ...) with the safe defaults: an attempt budget,
//! visibility backoff, the dead-letter queue with each failure's reason, the cold-start checks of
//! the table and the queue, and a partial batch response. The [`iam`] module lists the IAM it
//! needs.
//!
//! ```
//! use lambda_idempotency::prelude::*;
//!
//! #[derive(serde::Deserialize)]
//! #[serde(rename_all = "camelCase")]
//! struct OrderPlaced { order_id: String, total_cents: i64 }
//!
//! async fn record_order(order: OrderPlaced, _ctx: RecordContext) -> Result<InlinePut<(), NewItem>, Error> {
//!     let item = NewItem::new("orders", "orderId", AttributeValue::S(order.order_id))
//!         .attribute("totalCents", AttributeValue::N(order.total_cents.to_string()));
//!     Ok(InlinePut::new((), item))
//! }
//!
//! /// The consumer, over the environment's DynamoDB table in the function, the in-memory
//! /// backend in tests.
//! fn consumer<B>(builder: ConsumerBuilder<B>) -> Consumer<Deduplicated<()>>
//! where
//!     B: TransactionalBackend + 'static,
//!     NewItem: Into<B::Write>,
//! {
//!     builder.with_keys(KeyConfig::json_pointer("/orderId")).inline(json(record_order))
//! }
//!
//! # async fn main_() -> Result<(), Error> {
//! // main: Lambda's runtime loop.
//! consumer(Consumer::from_env().await?).run().await
//! # }
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! // A unit test: the same consumer on the in-memory backend, a producer's message sent twice.
//! use lambda_idempotency::store::InMemoryBackend;
//! use lambda_idempotency::test_util::{InMemorySqs, sqs_event};
//! use std::sync::Arc;
//!
//! let backend = Arc::new(InMemoryBackend::default());
//! let sqs = InMemorySqs::new(); // its dead-letter queue and backoff, recorded
//! let consumer = consumer(Consumer::builder(backend.clone()).with_in_memory_sqs(&sqs));
//! let event = sqs_event([
//!     ("m-1", r#"{"orderId": "o-1", "totalCents": 500}"#),
//!     ("m-2", r#"{"totalCents": 500, "orderId": "o-1"}"#),
//! ]);
//! let report = consumer.process(&event).await.unwrap();
//! assert!(report.response().batch_item_failures.is_empty());
//! assert_eq!(report.successes().filter(|(_, done)| done.is_duplicate()).count(), 1);
//! assert_eq!(backend.item("orders", "o-1").as_deref(), Some(r#"{"orderId":"o-1","totalCents":500}"#));
//! # });
//! ```
//!
//! The other modes: [`idempotent`](consumer::ConsumerBuilder::idempotent) (the lease mode: any
//! effect, a record written before and completed after) and
//! [`transactional`](consumer::ConsumerBuilder::transactional) (the handler's DynamoDB writes
//! committed with the record in one transaction). The [`consumer`] module says what each
//! default does and how to turn it off; [`batch`] is the layer beneath, for compositions of your
//! own.
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
//!     [`runtime`]: Lambda's loop, several invocations at once on Lambda Managed Instances.
//! 11. [`publish`]: messages out, batched to SQS (FIFO groups and deduplication ids);
//!     [`redact`] keeps an item's values out of the reasons that are logged and sent.
//! 12. [`iam`]: the IAM actions each mode and option needs, on which resource, and why.
//!
//! Above them all, [`consumer`] puts the pieces together from the environment, and [`prelude`]
//! is what a consumer is written with.
//!
//! # Features
//!
//! - `dynamodb` (default): [`store::DynamoDbBackend`], the DynamoDB actions of
//!   [`transaction::Transaction`] (`put`, `update`, `delete`, `condition_check`), the inline
//!   mode's [`store::NewItem`], `Consumer::from_env`, and the `aws-sdk-dynamodb` dependency,
//!   whose types a consumer writes with are re-exported in [`dynamodb`].
//!   Without it the engine, the transactional mode, the batch processor, the publisher, the
//!   dead-letter queue and the request counter all work, over a [`store::Backend`] of your own
//!   (or the in-memory backend of `test-util`, in tests):
//!   `lambda-idempotency = { version = "0.1", default-features = false }`.
//! - `kinesis-aggregation` (default): Kinesis records aggregated by the Kinesis Producer Library
//!   unpacked, each user record processed as a record of its own ([`batch::AggregateError`] says
//!   why an aggregate cannot be), and the `prost` and `md-5` dependencies. Without it an
//!   aggregate fails as a permanent error naming the feature.
//! - `mapping-check` (default): the cold-start check of a stream or Kafka consumer's event
//!   source mapping (its retry and age limits, partial batch responses, on-failure destination:
//!   `lambda:ListEventSourceMappings`), and the `aws-sdk-lambda` dependency.
// Without the feature `redis` its backend is not compiled: the link goes to docs.rs's page.
#![cfg_attr(
    feature = "redis",
    doc = " - `redis`: [`store::RedisBackend`] (Redis or Valkey) for the lease mode, and the `redis`"
)]
#![cfg_attr(
    not(feature = "redis"),
    doc = " - `redis`: [`store::RedisBackend`](https://docs.rs/lambda-idempotency/latest/lambda_idempotency/store/struct.RedisBackend.html) (Redis or Valkey) for the lease mode, and the `redis`"
)]
//!   dependency.
//! - `test-util`: what unit tests run on: [`store::InMemoryBackend`] (which takes the inline
//!   mode's DynamoDB `NewItem` too, and fails on demand with
//!   [`with_faults`](store::InMemoryBackend::with_faults)) and [`store::MemoryWrite`],
//!   [`time::ManualClock`], and the state machine's table of transitions, [`state::table`],
//!   which a backend of your own is tested against; and [`test_util`]: SQS in memory (the
//!   dead-letter queue and the backoff of a test consumer), SQS events from `(message id, body)`
//!   pairs and stream events ([`StreamEventBuilder`](test_util::StreamEventBuilder)), the fault
//!   injector and the simulated queue. Its items are in these docs
//!   whatever features your build has. No dependency; in `[dev-dependencies]`:
//!   `lambda-idempotency = { version = "0.1", features = ["test-util"] }`.
//!
//! SQS support (batch processing, the publisher, the dead-letter queue) is always on.
//!
//! The minimum supported Rust version (MSRV) is 1.95.
//!
//! # Examples
//!
//! Small standalone crates in the repository's `examples/` directory, each a Lambda function (a
//! thin `src/main.rs` over a handler in `src/lib.rs`, a plain async function a test can call),
//! with a sample event under `events/`, a README on running it with `cargo lambda` and deploying
//! it, and a test that runs the handler: in memory (`inline-consumer` and the three stream
//! consumers), or against a local DynamoDB or SQS (the others):
//!
//! - `examples/inline-consumer`: the consumer above, whole: a [`Consumer`](consumer::Consumer)
//!   from the environment in the inline mode, its tests on the in-memory backend.
//! - `examples/kinesis-consumer`, `examples/dynamodb-stream-consumer`,
//!   `examples/kafka-consumer`: a [`Consumer`](consumer::Consumer) of a stream or a Kafka topic
//!   (`.source::<KinesisEvent>()`), its tests in memory with
//!   [`StreamEventBuilder`](test_util::StreamEventBuilder): the checkpoint, a replay from it, a
//!   poison record dead-lettered with its reason.
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
#![deny(missing_docs)]

pub mod backoff;
pub mod batch;
pub mod cache;
pub mod consumer;
pub mod count;
pub mod dead_letter;
#[cfg(feature = "dynamodb")]
#[cfg_attr(docsrs, doc(cfg(feature = "dynamodb")))]
pub mod dynamodb;
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
pub mod record;
pub mod redact;
pub mod redrive_policy;
pub mod runtime;
pub mod state;
pub mod store;
#[cfg(any(test, doc, feature = "test-util"))]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod test_util;
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

/// The examples of the workspace's `docs/` pages, compiled as doc tests as the README's are: one
/// item per page (a code block that is not Rust names its language, and rustdoc leaves it alone).
#[cfg(all(doctest, workspace_readme, feature = "dynamodb"))]
pub mod docs_doctests {
    #[doc = include_str!("../../docs/modes.md")]
    pub struct Modes;
    #[doc = include_str!("../../docs/costs.md")]
    pub struct Costs;
    #[doc = include_str!("../../docs/guarantees.md")]
    pub struct Guarantees;
    #[doc = include_str!("../../docs/streams.md")]
    pub struct Streams;
    #[doc = include_str!("../../docs/pipeline.md")]
    pub struct Pipeline;
    #[doc = include_str!("../../docs/local-development.md")]
    pub struct LocalDevelopment;
    #[doc = include_str!("../../docs/deployment.md")]
    pub struct Deployment;
    #[doc = include_str!("../../docs/operations.md")]
    pub struct Operations;
    #[doc = include_str!("../../docs/contributing.md")]
    pub struct Contributing;
    #[doc = include_str!("../../docs/benchmarks.md")]
    pub struct Benchmarks;
    #[doc = include_str!("../../docs/capacity.md")]
    pub struct Capacity;
    #[doc = include_str!("../../docs/benchmarks-figures.md")]
    pub struct BenchmarksFigures;
    #[doc = include_str!("../../docs/managed-instances.md")]
    pub struct ManagedInstances;
    /// The Redis backend's page: its example needs the feature `redis`.
    #[doc = include_str!("../../docs/redis.md")]
    #[cfg(feature = "redis")]
    pub struct Redis;
}
