//! What a user's tests run a whole consumer on, without AWS (feature `test-util`): SQS events
//! from `(message id, body)` pairs ([`sqs_event`], [`SqsEventBuilder`]), and SQS in memory
//! ([`InMemorySqs`]: the dead-letter queue and the backoff's visibility changes), beside the
//! in-memory backend ([`InMemoryBackend`](crate::store::InMemoryBackend)) and the clock that
//! moves by hand ([`ManualClock`](crate::time::ManualClock)). The event types are re-exported
//! here ([`SqsEvent`], [`SqsMessage`], [`LambdaEvent`]; the streams' and Kafka's, with
//! [`StreamEventBuilder`] building them, are in the [prelude](crate::prelude)), so that a test
//! names them without a dependency of its own on `aws_lambda_events`. A store that fails on
//! demand (throttled, unreachable): [`InMemoryBackend::with_faults`](crate::store::InMemoryBackend::with_faults)
//! with a [`fault::Faults`].
//!
//! ```toml
//! [dev-dependencies]
//! lambda-idempotency = { version = "0.1", features = ["test-util"] }
//! ```
//!
//! # A test consumer, as deployed
//!
//! [`Consumer::builder`](crate::consumer::Consumer::builder) over the in-memory backend, with
//! [`with_in_memory_sqs`](crate::consumer::ConsumerBuilder::with_in_memory_sqs): a permanent
//! failure goes to the dead-letter queue with its reason, and a transient one comes back after
//! its backoff, as in the function.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use lambda_idempotency::prelude::*;
//! use lambda_idempotency::store::InMemoryBackend;
//! use lambda_idempotency::test_util::{InMemorySqs, sqs_event};
//! use std::sync::Arc;
//!
//! #[derive(serde::Deserialize)]
//! struct Charge { amount_cents: i64 }
//!
//! async fn charge(charge: Charge, _ctx: RecordContext) -> Result<(), Error> {
//!     match charge.amount_cents {
//!         ..=0 => Err(PermanentError::new("amount must be positive").into()),
//!         1_000_000.. => Err("the payment provider is busy".into()),
//!         _ => Ok(()),
//!     }
//! }
//!
//! let sqs = InMemorySqs::new();
//! let consumer = Consumer::builder(Arc::new(InMemoryBackend::default()))
//!     .with_in_memory_sqs(&sqs)
//!     .idempotent(json(charge));
//! let event = sqs_event([
//!     ("m-1", r#"{"amount_cents": 500}"#),
//!     ("m-2", r#"{"amount_cents": -5}"#),
//!     ("m-3", r#"{"amount_cents": 5000000}"#),
//! ]);
//! let report = consumer.process(&event).await.unwrap();
//!
//! // The permanent failure is in the dead-letter queue, with its reason, and acknowledged.
//! let dead = sqs.dead_letters();
//! assert_eq!(dead.len(), 1);
//! assert_eq!(dead[0].source_message_id, "m-2");
//! assert!(dead[0].reason.contains("amount must be positive"), "{}", dead[0].reason);
//! // The transient one comes back, after the first attempt's backoff (2 s, plus jitter).
//! let failed: Vec<_> = report.response().batch_item_failures.into_iter().map(|f| f.item_identifier).collect();
//! assert_eq!(failed, ["m-3"]);
//! let backoff = sqs.visibility_changes();
//! assert_eq!(backoff.len(), 1);
//! assert_eq!(backoff[0].message_id, "m-3");
//! assert!((2..=3).contains(&backoff[0].visibility_timeout.as_secs()));
//! # });
//! ```
//!
//! # Testing the attempt budget
//!
//! A failed attempt is counted by the idempotency store, on the key's record: deliver the same
//! message again (a new event, as SQS would, its receive count rising) and the count goes on,
//! each delivery's backoff doubling, until the budget ([`max_attempts`](crate::consumer::ConsumerBuilder::max_attempts),
//! `MAX_ATTEMPTS`, 5 by default) is used up: that delivery sends it to the dead-letter queue,
//! `attempt budget used up: ...`, and acknowledges it. The receive count itself is not what
//! counts (a FIFO record held behind a failing one of its group is received without running);
//! only a handler without a store (the batch layer's plain [`message`](crate::batch::message)
//! handler) falls back to it.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use lambda_idempotency::prelude::*;
//! use lambda_idempotency::store::InMemoryBackend;
//! use lambda_idempotency::test_util::{InMemorySqs, SqsEventBuilder};
//! use std::sync::Arc;
//!
//! async fn always_fails(_body: serde_json::Value, _ctx: RecordContext) -> Result<(), Error> {
//!     Err("the ledger is down".into())
//! }
//!
//! let sqs = InMemorySqs::new();
//! let consumer = Consumer::builder(Arc::new(InMemoryBackend::default()))
//!     .with_in_memory_sqs(&sqs)
//!     .max_attempts(3)
//!     .idempotent(json(always_fails));
//! for delivery in 1..=3 {
//!     let event = SqsEventBuilder::new().message("m-1", r#"{"orderId": "o-1"}"#).receive_count(delivery).build();
//!     let report = consumer.process(&event).await.unwrap();
//!     let dead_lettered = report.dead_lettered().count() == 1;
//!     assert_eq!(dead_lettered, delivery == 3, "delivery {delivery}");
//! }
//! // Two backoffs (2 s, then 4 s, each with up to a quarter more), then the dead letter.
//! let delays: Vec<_> = sqs.visibility_changes().iter().map(|c| c.visibility_timeout.as_secs()).collect();
//! assert!((2..=3).contains(&delays[0]) && (4..=5).contains(&delays[1]) && delays.len() == 2, "{delays:?}");
//! let dead = sqs.dead_letters();
//! assert!(dead[0].reason.starts_with("attempt budget used up"), "{}", dead[0].reason);
//! # });
//! ```
//!
//! The budget counts the handler's own failures only. A failure of the idempotency store
//! (throttled, unreachable, denied, a table that does not fit) is not an attempt: it is never
//! counted and never dead-lettered, and the record comes back until the store answers (or the
//! queue's redrive policy, the backstop, moves it). It does back off, by the message's receive
//! count rather than by an attempt: the first attempt's delay (`BACKOFF_BASE_SECONDS`, 2 s, plus
//! up to a quarter more of jitter) doubled at each receive, past the backoff's `max`, up to 11
//! hours ([`VisibilityBackoff::delay_not_counted`](crate::backoff::VisibilityBackoff::delay_not_counted)),
//! so that an outage of days costs about two receives a day. A record in progress in
//! another invocation comes back when that invocation's lease ends instead.
//!
//! # Every fault, at every request
//!
//! [`fault`] injects a fault at request `n` of a client (fails it, loses its answer, crashes the
//! invocation after it, or starts an outage), and [`sim_queue`] runs a consumer through a
//! simulated standard or FIFO queue, redelivering as SQS does (receive counts, visibility,
//! groups, `maxReceiveCount`) until it drains. Together they explore a consumer over every
//! request of a clean run and every fault, and check that nothing innocent was dead-lettered.
//!
//! Time, where a test needs it (a lease that ends, an expiry, a deadline): a
//! [`ManualClock`](crate::time::ManualClock) given to the engine
//! ([`Idempotency::with_clock`](crate::Idempotency::with_clock), through
//! [`map_engine`](crate::consumer::ConsumerBuilder::map_engine)) and to the processor
//! ([`BatchProcessor::with_clock`](crate::batch::BatchProcessor::with_clock), through
//! [`map_processor`](crate::consumer::ConsumerBuilder::map_processor)).

mod event;
pub mod fault;
pub mod sim_queue;
pub mod sim_stream;
mod stream_event;

pub use crate::dead_letter::in_memory_sqs::{DeadLetteredMessage, InMemorySqs, VisibilityChange};
pub use event::{DEFAULT_QUEUE_ARN, SqsEventBuilder, sqs_event};
pub use stream_event::{DYNAMODB_STREAM_ARN, KAFKA_TOPIC, KINESIS_STREAM_ARN, StreamEventBuilder};

pub use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
pub use lambda_runtime::LambdaEvent;

/// The dead-letter queue of a consumer given [`InMemorySqs`] without one of its own.
pub const IN_MEMORY_DEAD_LETTER_QUEUE_URL: &str =
    "https://sqs.us-east-1.amazonaws.com/123456789012/in-memory-dead-letter-queue";
