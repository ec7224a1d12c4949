//! Sending to SQS: validated FIFO identifiers, and a batching publisher that retries only what
//! failed.
//!
//! [`Message::fifo`] cannot be built with an invalid `MessageGroupId` or
//! `MessageDeduplicationId` (1 to 128 characters of `a-zA-Z0-9` and ASCII punctuation), nor with a
//! message over 1 MiB or with a character SQS rejects in its body or attributes
//! (`#x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF` only): what SQS would refuse on every retry is refused before the call. [`Publisher::send_all`] packs messages into `SendMessageBatch` calls of at
//! most 10 entries and 1 MiB, keeps several in flight, retries only the entries in `Failed` (with
//! bounded exponential backoff) and answers per message. A call refused as a whole for a
//! reason of one of its entries (not of the queue: a missing queue, denied access, unusable credentials or KMS key) is sent again one entry
//! at a time, so that only the faulty message is refused.
//!
//! FIFO order: SQS enqueues the entries of one `SendMessageBatch` call in their order in the call,
//! but answers for each entry apart: an entry can fail while a later one of the same call
//! succeeds. So the publisher never puts two messages of one group in the same call, sends a
//! group's next message only once every earlier one of the group has been accepted, and, when an
//! earlier message of a group fails for good, does not send the rest of that group (each of them
//! answers [`PublishError::EarlierInGroupFailed`]). A retry can therefore never land behind a
//! later message of its group. With many groups, calls still hold 10 entries; the messages of a
//! single group go one per call.

mod batcher;
mod fault;
mod message;
mod plan;
mod publisher;

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

pub use batcher::Batcher;
pub use fault::{error_text, is_missing_queue, is_queue_level};
pub(crate) use message::attribute_size;
pub use message::{DeduplicationId, InvalidMessage, Message, MessageGroupId, invalid_character};
pub(crate) use plan::plan_batches;
pub use publisher::{PublishError, Publisher, Sent};

/// Largest SQS message, and largest `SendMessageBatch` request: 1 MiB.
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;
/// Most entries in one `SendMessageBatch` call.
pub const MAX_BATCH_ENTRIES: usize = 10;
/// Longest `MessageGroupId` or `MessageDeduplicationId`.
pub const MAX_ID_LEN: usize = 128;

/// A random number (from the standard library's randomly seeded hasher: no extra dependency).
pub(crate) fn random_u64() -> u64 {
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

/// A random duration in `[d/2, d]`.
pub(crate) fn jitter(d: Duration) -> Duration {
    let half = d / 2;
    half + Duration::from_nanos(random_u64() % (half.as_nanos() as u64).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_in_range() {
        for _ in 0..100 {
            let j = jitter(Duration::from_millis(100));
            assert!(j >= Duration::from_millis(50) && j <= Duration::from_millis(100));
        }
    }
}
