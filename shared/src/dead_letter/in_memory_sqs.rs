//! [`InMemorySqs`]: the dead-letter queue and the visibility changes of a consumer under test
//! (feature `test-util`, re-exported by [`crate::test_util`]). It lives beside the dead-letter
//! queue, whose copies it records, so that neither module depends on the other's.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::Copied;
use crate::publish::Message;
use crate::test_util::fault::Faults;

/// SQS in memory, for tests: what a consumer sends to its dead-letter queue and the visibility
/// changes of its backoff, recorded instead of sent. Clones share the records.
///
/// [`ConsumerBuilder::with_in_memory_sqs`](crate::consumer::ConsumerBuilder::with_in_memory_sqs)
/// gives a test consumer both, as `DEAD_LETTER_QUEUE_URL` and the SQS client give a deployed one;
/// under a [`BatchProcessor`](crate::batch::BatchProcessor) of your own,
/// [`DeadLetter::in_memory`](crate::dead_letter::DeadLetter::in_memory) and
/// [`VisibilityBackoff::in_memory`](crate::backoff::VisibilityBackoff::in_memory). The copy
/// recorded is the one SQS would have been sent ([`DeadLetter::send`](crate::dead_letter::DeadLetter::send):
/// the whole copy, or a reduced one over the queue's
/// [`max_message_size`](crate::dead_letter::DeadLetter::max_message_size)), and a change is
/// recorded for each record the deployed consumer would change (one with a receipt handle, in an
/// event with an `eventSourceARN`).
///
/// [`with_faults`](Self::with_faults) sends each dead-letter copy and each call of the visibility
/// changes through a fault injector, as the SDK client's interceptor would.
#[derive(Debug, Clone, Default)]
pub struct InMemorySqs {
    sent: Arc<Mutex<Recorded>>,
    faults: Option<Faults>,
}

#[derive(Debug, Default)]
struct Recorded {
    dead_letters: Vec<DeadLetteredMessage>,
    visibility_changes: Vec<VisibilityChange>,
}

/// A message sent to the in-memory dead-letter queue.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetteredMessage {
    /// The dead-letter queue's URL.
    pub queue_url: String,
    /// The record's message id on its source queue.
    pub source_message_id: String,
    /// Why it was dead-lettered, as the whole copy's [`REASON_ATTRIBUTE`](crate::dead_letter::REASON_ATTRIBUTE) carries it (a
    /// permanent error, or `attempt budget used up: ...`; a reduced copy carries less of it).
    pub reason: String,
    /// Which copy was sent.
    pub copied: Copied,
    /// The copy itself: its body, group, attributes and trace header.
    pub message: Message,
}

/// A visibility change of the backoff: the record comes back after `visibility_timeout`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VisibilityChange {
    /// The source queue's ARN.
    pub queue_arn: String,
    /// The record's message id.
    pub message_id: String,
    /// The record's receipt handle, which the change names.
    pub receipt_handle: String,
    /// The new visibility timeout (whole seconds, as SQS takes it).
    pub visibility_timeout: Duration,
}

impl InMemorySqs {
    /// An SQS with nothing sent.
    pub fn new() -> Self {
        Self::default()
    }

    /// This SQS, its requests going through `faults`: each dead-letter copy one `SendMessage`,
    /// each call of up to 10 visibility changes one `ChangeMessageVisibilityBatch`. A request
    /// refused before it is sent ([`Fault::Fail`](crate::test_util::fault::Fault::Fail),
    /// [`Fault::Outage`](crate::test_util::fault::Fault::Outage), after a crash) records
    /// nothing; a [`Fault::LoseAnswer`](crate::test_util::fault::Fault::LoseAnswer) or a
    /// [`Fault::Crash`](crate::test_util::fault::Fault::Crash) records it, then fails it. The
    /// failure reaches the consumer as an SQS error would once the SDK's retries are used up.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use lambda_idempotency::dead_letter::DeadLetter;
    /// use lambda_idempotency::test_util::fault::{Crash, Fault, Faults};
    /// use lambda_idempotency::test_util::{InMemorySqs, sqs_event};
    /// use lambda_idempotency::time::SystemClock;
    /// use std::sync::Arc;
    ///
    /// let faults = Faults::new("sqs", Arc::new(Crash::default()), Arc::new(SystemClock));
    /// let sqs = InMemorySqs::new().with_faults(faults.clone());
    /// let dead_letter = DeadLetter::in_memory(&sqs, "https://sqs.us-east-1.amazonaws.com/123456789012/dlq");
    /// let event = sqs_event([("m-1", "not json")]);
    /// faults.arm(1, Fault::LoseAnswer);
    /// assert!(dead_letter.send(&event.payload.records[0], "bad body").await.is_err());
    /// assert_eq!(sqs.dead_letters().len(), 1, "sent, its answer lost");
    /// assert_eq!(faults.log(), ["SendMessage"]);
    /// # });
    /// ```
    pub fn with_faults(mut self, faults: Faults) -> Self {
        self.faults = Some(faults);
        self
    }

    /// The messages sent to the dead-letter queue, in order.
    pub fn dead_letters(&self) -> Vec<DeadLetteredMessage> {
        self.lock().dead_letters.clone()
    }

    /// The visibility changes, in order.
    pub fn visibility_changes(&self) -> Vec<VisibilityChange> {
        self.lock().visibility_changes.clone()
    }

    /// Forgets what was sent (between two deliveries of a test, say).
    pub fn clear(&self) {
        let mut sent = self.lock();
        sent.dead_letters.clear();
        sent.visibility_changes.clear();
    }

    /// Records a dead-letter copy: one `SendMessage` through the faults, if any.
    pub(crate) fn record_dead_letter(
        &self,
        queue_url: &str,
        source_message_id: &str,
        reason: &str,
        message: Message,
        copied: Copied,
    ) -> Result<(), String> {
        let sent = DeadLetteredMessage {
            queue_url: queue_url.to_owned(),
            source_message_id: source_message_id.to_owned(),
            reason: reason.to_owned(),
            copied,
            message,
        };
        self.serve("SendMessage", || self.lock().dead_letters.push(sent))
    }

    /// Records one call's visibility changes (up to 10): one `ChangeMessageVisibilityBatch`
    /// through the faults, if any.
    pub(crate) fn record_visibility_changes(
        &self,
        changes: Vec<VisibilityChange>,
    ) -> Result<(), String> {
        self.serve("ChangeMessageVisibilityBatch", || {
            self.lock().visibility_changes.extend(changes)
        })
    }

    fn serve(&self, operation: &str, apply: impl FnOnce()) -> Result<(), String> {
        match &self.faults {
            Some(faults) => faults.serve(operation, apply),
            None => {
                apply();
                Ok(())
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Recorded> {
        self.sent.lock().unwrap_or_else(|e| e.into_inner())
    }
}
