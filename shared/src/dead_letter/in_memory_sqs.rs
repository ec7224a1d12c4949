//! [`InMemorySqs`]: the dead-letter queue and the visibility changes of a consumer under test
//! (feature `test-util`, re-exported by [`crate::test_util`]). It lives beside the dead-letter
//! queue, whose copies it records, so that neither module depends on the other's.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::Copied;
use crate::publish::Message;

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
/// [`with_faults`](InMemorySqs::with_faults) sends each dead-letter copy and each call of the visibility
/// changes through a fault injector, as the SDK client's interceptor would.
#[derive(Debug, Clone, Default)]
pub struct InMemorySqs {
    sent: Arc<Mutex<Recorded>>,
    pub(crate) serve: Option<Serve>,
}

/// How an [`InMemorySqs`]'s requests are served, when not simply applied: of an operation's
/// name and the request's effect, the answer (the test utilities' fault injector sets it).
#[derive(Clone)]
pub(crate) struct Serve(pub(crate) Arc<ServeFn>);

/// Of an operation's name and its effect (to run once, if the request is applied), the answer.
pub(crate) type ServeFn = dyn Fn(&str, &mut dyn FnMut()) -> Result<(), String> + Send + Sync;

impl std::fmt::Debug for Serve {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Serve")
    }
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
        let mut apply = Some(apply);
        let mut once = || {
            if let Some(apply) = apply.take() {
                apply();
            }
        };
        match &self.serve {
            Some(Serve(serve)) => serve(operation, &mut once),
            None => {
                once();
                Ok(())
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Recorded> {
        self.sent.lock().unwrap_or_else(|e| e.into_inner())
    }
}
