//! A look into the payments dead-letter queue: which payments' messages are there.
//!
//! SQS has no peek: the reconciler receives the messages (invisible for a moment) and makes
//! them visible again, so the queue keeps them all. It looks only when it has a payment to send
//! again, and only when the queue's counts (`GetQueueAttributes`, which receives nothing) say it
//! holds messages. A look must not take a partial view for the whole queue:
//!
//! - each receive long-polls ([`WAIT_SECONDS`]): a long poll asks every SQS server, where a
//!   short poll samples some and may answer nothing although the queue holds messages;
//! - the look is whole once it has seen as many messages as the queue counted, or once a long
//!   poll finds nothing while no message was in flight (received by someone else) when it
//!   began. Messages in flight elsewhere come back visible later: the look receives again, up
//!   to [`EMPTY_RECEIVES`] empty answers, and is otherwise not whole;
//! - on a FIFO queue a receive hands out no more of a group while some of it is in flight: a
//!   group that filled a receive (10 messages) may have more there unseen.
//!
//! Receiving raises a message's receive count. On a standard queue, a message received three
//! times or more drops out of `ApproximateAgeOfOldestMessage`; a FIFO queue, as
//! `payments-dlq.fifo` is, keeps its messages in order and its age metric with them. The look
//! stops receiving as soon as it has seen every message counted, and a payment sent again is
//! not looked for again within the resend interval, so a dead letter is received at most once
//! per run that has a payment to send.

use std::collections::{HashMap, HashSet};

use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, MessageSystemAttributeName, QueueAttributeName,
};
use payments_model::PaymentRequested;

use super::{ReconcileError, Reconciler};

/// How long the dead-letter queue's messages stay invisible while the reconciler looks at them
/// (they are made visible again as soon as it is done).
const PEEK_VISIBILITY_SECONDS: i32 = 30;

/// The long poll of each receive, in seconds.
pub const WAIT_SECONDS: i32 = 1;

/// Empty long polls in a row after which a look that has not seen every message counted stops,
/// not whole.
pub const EMPTY_RECEIVES: usize = 3;

/// The reason given for a message SQS moved itself (its receive limit, `maxReceiveCount`):
/// payment-processor's own dead-letter copies carry theirs (`DeadLetterReason`).
pub const MOVED_BY_SQS: &str =
    "moved to the dead-letter queue by SQS after its receive limit (crashes or timeouts)";

/// A payment's message found in the dead-letter queue.
#[derive(Debug, Clone)]
pub(super) struct DeadLetter {
    pub(super) message: PaymentRequested,
    pub(super) reason: String,
}

/// What a look into the dead-letter queue saw.
#[derive(Debug, Default)]
pub(super) struct Peeked {
    /// The payments' messages, by payment id.
    pub(super) found: HashMap<String, DeadLetter>,
    /// Message groups (accounts) that may have messages there unseen (a full receive).
    pub(super) groups: HashSet<String>,
    /// True when every other group was seen whole.
    pub(super) complete: bool,
}

impl Peeked {
    /// Whether a payment of `account_id` may have its message in the queue unseen.
    pub(super) fn may_hide(&self, account_id: &str) -> bool {
        !self.complete || self.groups.contains(account_id)
    }
}

/// The queue's counts when the look began.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    visible: u64,
    in_flight: u64,
}

impl Reconciler {
    /// The payments whose message is in the dead-letter queue (see the module). At most
    /// `max_per_run` messages are received.
    pub(super) async fn dead_letters(&self) -> Result<Peeked, ReconcileError> {
        let counts = self.dead_letter_counts().await?;
        if counts.visible + counts.in_flight == 0 {
            return Ok(Peeked {
                complete: true,
                ..Peeked::default()
            });
        }
        let queue = &self.config.dead_letter_queue_url;
        let mut peeked = Peeked::default();
        let mut seen = HashSet::new();
        let mut handles = Vec::new();
        let mut empties = 0;
        let mut result = Ok(());
        for _ in 0..self.config.max_per_run.div_ceil(10) + EMPTY_RECEIVES {
            let received = self
                .sqs
                .receive_message()
                .queue_url(queue)
                .max_number_of_messages(10)
                .visibility_timeout(PEEK_VISIBILITY_SECONDS)
                .wait_time_seconds(WAIT_SECONDS)
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
                .message_attribute_names("All")
                .send()
                .await;
            let messages = match received {
                Ok(out) => out.messages.unwrap_or_default(),
                Err(e) => {
                    result = Err(ReconcileError::sqs("ReceiveMessage", queue)(e));
                    break;
                }
            };
            if messages.is_empty() {
                empties += 1;
                // Nothing visible: whole, unless messages held elsewhere are still to come back.
                if counts.in_flight == 0 {
                    peeked.complete = true;
                    break;
                }
                if empties >= EMPTY_RECEIVES {
                    break;
                }
                continue;
            }
            empties = 0;
            let full = messages.len() == 10;
            for m in messages {
                if let Some(handle) = m.receipt_handle.clone() {
                    handles.push(handle);
                }
                seen.insert(m.message_id.clone().unwrap_or_default());
                if let Some(group) = m
                    .attributes
                    .as_ref()
                    .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
                    .filter(|_| full)
                {
                    peeked.groups.insert(group.clone());
                }
                if let Some((payment_id, dead)) = dead_letter(&m) {
                    peeked.found.insert(payment_id, dead);
                }
            }
            if seen.len() as u64 >= counts.visible + counts.in_flight {
                // Every message counted was seen: no group hides one.
                peeked.complete = true;
                peeked.groups.clear();
                break;
            }
        }
        self.release(&handles).await;
        result.map(|()| peeked)
    }

    /// The queue's visible and in-flight counts (`GetQueueAttributes`: nothing received).
    async fn dead_letter_counts(&self) -> Result<Counts, ReconcileError> {
        let queue = &self.config.dead_letter_queue_url;
        let out = self
            .sqs
            .get_queue_attributes()
            .queue_url(queue)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .map_err(ReconcileError::sqs("GetQueueAttributes", queue))?;
        let count = |name: QueueAttributeName| {
            out.attributes()
                .and_then(|a| a.get(&name))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        Ok(Counts {
            visible: count(QueueAttributeName::ApproximateNumberOfMessages),
            in_flight: count(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        })
    }

    /// Makes the messages received from the dead-letter queue visible again.
    async fn release(&self, handles: &[String]) {
        let queue = &self.config.dead_letter_queue_url;
        for chunk in handles.chunks(10) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, handle)| {
                    ChangeMessageVisibilityBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(handle)
                        .visibility_timeout(0)
                        .build()
                        .expect("id and receipt handle are set")
                })
                .collect();
            if let Err(e) = self
                .sqs
                .change_message_visibility_batch()
                .queue_url(queue)
                .set_entries(Some(entries))
                .send()
                .await
            {
                // They come back on their own after PEEK_VISIBILITY_SECONDS.
                tracing::warn!(error = %aws_sdk_sqs::Error::from(e), "dead letters not released");
            }
        }
    }
}

/// The payment a dead letter is the message of, with the reason it is there.
fn dead_letter(m: &aws_sdk_sqs::types::Message) -> Option<(String, DeadLetter)> {
    let message = serde_json::from_str::<PaymentRequested>(m.body.as_deref()?).ok()?;
    let reason = m
        .message_attributes
        .as_ref()
        .and_then(|a| a.get("DeadLetterReason"))
        .and_then(|a| a.string_value.clone())
        .unwrap_or_else(|| MOVED_BY_SQS.to_owned());
    Some((message.payment_id.clone(), DeadLetter { message, reason }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_look_not_whole_hides_every_account_and_a_full_group_its_own() {
        let mut peeked = Peeked::default();
        assert!(peeked.may_hide("a"), "not whole");
        peeked.complete = true;
        assert!(!peeked.may_hide("a"));
        peeked.groups.insert("a".to_owned());
        assert!(peeked.may_hide("a"));
        assert!(!peeked.may_hide("b"));
    }
}
