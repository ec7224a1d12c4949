//! Redrive: moves the messages of a dead-letter queue back to their source queue, after a fix.
//!
//! [`redrive`] receives from the dead-letter queue (10 at a time, every system and message
//! attribute), sends each message to the source queue through the library's
//! [`Publisher`](lambda_idempotency::publish::Publisher) (`SendMessageBatch` calls of at most 10
//! entries and 1 MiB, retrying only the failed entries) and deletes from the dead-letter queue
//! **only** the messages whose send succeeded. What it sends:
//!
//! - the body and the message attributes, except those named with the dead-letter prefix
//!   ([`DEAD_LETTER_ATTRIBUTE_PREFIX`], `DeadLetter`: the `DeadLetterReason`,
//!   `DeadLetterSourceMessageId` and `DeadLetterSourceQueueArn` that the library's dead-letter
//!   step adds), and the `AWSTraceHeader` system attribute when there is one;
//! - for a FIFO source queue, the message's `MessageGroupId`, and a **new**
//!   `MessageDeduplicationId` ([`redrive_deduplication_id`]): the source queue remembers the
//!   original one for 5 minutes and would silently drop the resend, and deleting the
//!   dead-letter copy would then lose the message.
//!
//! A message whose send fails stays in the dead-letter queue and is reported in
//! [`RedriveReport::failed`]. It is kept invisible until the run ends (so that the run does not
//! receive it again and again), then its visibility is reset to 0: it is not stuck. On a FIFO
//! source queue, a failed message also holds back the later messages of its group (they stay in
//! the dead-letter queue too), so each group keeps its order; to the same end the publisher sends
//! the messages of one group one `SendMessageBatch` after the other, never two in one call.
//!
//! The run stops when the dead-letter queue returns no new message twice in a row, after
//! [`RedriveOptions::max_messages`], or when the source queue refuses every send (it does not
//! exist, access denied: [`is_queue_level`](lambda_idempotency::publish::is_queue_level)): then
//! [`RedriveReport::stopped`] says why.
//!
//! The parts: [`options`](RedriveOptions); finding the queues (`resolve`); planning what to send
//! and what to hold back (`plan`); sending, deleting and releasing (`send`); the
//! [`report`](RedriveReport).
//!
//! [`route`] finds the queues as the `redrive` binary does: each by name ([`resolve_queue`],
//! `GetQueueUrl`) or URL, and without a target the dead-letter queue's source
//! ([`resolve_source`], `ListDeadLetterSourceQueues`). The binary
//! (`cargo run -p payments-operations --bin redrive -- --help`) runs on AWS with the SDK's default
//! configuration ([`sdk_config`](crate::sdk_config)), or on a local endpoint when
//! `AWS_ENDPOINT_URL` is set. What it calls is granted by the template's `PaymentsRedrivePolicy`.
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use payments_operations::redrive::{self, RedriveOptions};
//!
//! let sqs = aws_sdk_sqs::Client::new(&payments_operations::sdk_config().await);
//! let route = redrive::route(&sqs, "payments-dlq.fifo", None).await?;
//! let report = redrive::redrive(&sqs, &route.from.url, &route.to.url, RedriveOptions::default()).await?;
//! println!("{report}");
//! assert!(report.is_success(), "{:?}", report.failed);
//! # Ok(()) }
//! ```

mod options;
mod plan;
mod report;
mod resolve;
mod send;

pub use options::{DEAD_LETTER_ATTRIBUTE_PREFIX, RedriveOptions};
pub use plan::redrive_deduplication_id;
pub use report::{RedriveError, RedriveReport};
pub use resolve::{QueueRef, Route, resolve_queue, resolve_source, route};
pub use send::redrive;
