//! A look into the payments dead-letter queue: which payments' messages are there.
//!
//! SQS has no peek: the reconciler receives the messages (invisible for a moment) and makes
//! them visible again, so the queue keeps them all. It looks only when it has a payment to send
//! again. A look must not take a partial view for the whole queue:
//!
//! - the queue's counts (`GetQueueAttributes`, which receives nothing) are approximate and lag:
//!   a count of zero is not a look, one long poll is made anyway;
//! - each receive long-polls ([`WAIT_SECONDS`]): a long poll asks every SQS server, where a
//!   short poll samples some and may answer nothing although the queue holds messages;
//! - the look is whole once it has seen as many messages as the queue counted (a count above
//!   zero), or once a long poll finds nothing while no message was in flight (received by
//!   someone else) when it began. Messages in flight elsewhere come back visible later: the
//!   look receives again, up to [`EMPTY_RECEIVES`] empty answers, and is otherwise not whole;
//! - on a FIFO queue a receive hands out no more of a group while some of it is in flight, the
//!   look's own messages included: an empty long poll says nothing of the groups the look
//!   holds part of, which may have more there unseen (unless every message counted was seen).
//!
//! A payment may have several copies there (a redrive, a resend, a hand-made one): each is
//! tried in turn, the copy with a reason (payment-processor's own dead-letter step) first, then
//! the oldest; a copy that disagrees with its payment marks nothing. A copy without a reason is
//! one SQS moved itself ([`send_back`](super::send_back)).
//!
//! The messages received stay invisible while the run decides ([`PEEK_VISIBILITY_SECONDS`]):
//! those it sends back are deleted with the receipt handle of the look, the others are made
//! visible again ([`Reconciler::release`]).
//!
//! Receiving raises a message's receive count. On a standard queue, a message received three
//! times or more drops out of `ApproximateAgeOfOldestMessage`; a FIFO queue, as
//! `payments-dlq.fifo` is, keeps its messages in order and its age metric with them. The look
//! stops receiving as soon as it has seen every message counted, and a payment sent again is
//! not looked for again within the resend interval, so a dead letter is received at most once
//! per run that has a payment to send.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, MessageSystemAttributeName, QueueAttributeName,
};
use payments_model::PaymentRequested;

use super::send_back::SENT_BACK_ATTRIBUTE;
use super::{ReconcileError, Reconciler};

/// How long the dead-letter queue's messages stay invisible while the reconciler looks at them
/// (they are made visible again as soon as it is done).
const PEEK_VISIBILITY_SECONDS: i32 = 30;

/// The long poll of each receive, in seconds.
pub const WAIT_SECONDS: i32 = 1;

/// Empty long polls in a row after which a look that has not seen every message counted stops,
/// not whole.
pub const EMPTY_RECEIVES: usize = 3;

/// A payment's message found in the dead-letter queue.
#[derive(Debug, Clone)]
pub(super) struct DeadLetter {
    pub(super) message: PaymentRequested,
    /// Its body, as received (what is sent back).
    pub(super) body: String,
    /// The reason payment-processor's own copy carries (`DeadLetterReason`); `None` for a
    /// message SQS moved itself (its receive limit, `maxReceiveCount`).
    pub(super) reason: Option<String>,
    /// How many times the reconciler sent it back ([`SENT_BACK_ATTRIBUTE`]).
    pub(super) sent_back: u32,
    /// Its message group (its account, on `payments-dlq.fifo`).
    pub(super) group: Option<String>,
    /// When it was first sent (`SentTimestamp`, epoch ms), and its message id: the order among
    /// copies of one payment.
    sent_at: u64,
    pub(super) message_id: String,
    /// The look's receipt handle.
    pub(super) handle: Option<String>,
}

/// What a look into the dead-letter queue saw.
#[derive(Debug, Default)]
pub(super) struct Peeked {
    /// The payments' messages, by payment id: every copy, the one to trust first first.
    found: HashMap<String, Vec<DeadLetter>>,
    /// Message groups (accounts) that may have messages there unseen (the look held part of
    /// them).
    pub(super) groups: HashSet<String>,
    /// True when every other group was seen whole.
    pub(super) complete: bool,
    /// The receipt handles of every message received (still invisible), by message id.
    pub(super) handles: Vec<(String, String)>,
}

impl Peeked {
    /// The copies of the payment's message found, the one to trust first.
    pub(super) fn copies(&self, payment_id: &str) -> Vec<&DeadLetter> {
        self.found
            .get(payment_id)
            .map(|copies| copies.iter().collect())
            .unwrap_or_default()
    }

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
    /// `max_per_run` messages are received; they stay invisible until the caller releases them
    /// ([`Peeked::handles`], [`Reconciler::release`]).
    pub(super) async fn dead_letters(&self) -> Result<Peeked, ReconcileError> {
        let counts = self.dead_letter_counts().await?;
        let mut look = Look::new(counts);
        let queue = &self.config.dead_letter_queue_url;
        let mut handles = Vec::new();
        let mut result = Ok(());
        let mut next = look.first();
        for _ in 0..self.config.max_per_run.div_ceil(10) + EMPTY_RECEIVES {
            if next == Next::Done {
                break;
            }
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
                .customize()
                .config_override(crate::long_poll(Duration::from_secs(WAIT_SECONDS as u64)))
                .send()
                .await;
            let messages = match received {
                Ok(out) => out.messages.unwrap_or_default(),
                Err(e) => {
                    result = Err(ReconcileError::sqs("ReceiveMessage", queue)(e));
                    break;
                }
            };
            handles.extend(
                messages
                    .iter()
                    .filter_map(|m| Some((m.message_id.clone()?, m.receipt_handle.clone()?))),
            );
            next = look.received(&messages);
        }
        if let Err(e) = result {
            self.release(&handles).await;
            return Err(e);
        }
        let mut peeked = look.finish();
        peeked.handles = handles;
        Ok(peeked)
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

    /// Makes the messages received from the dead-letter queue visible again (message id,
    /// receipt handle).
    pub(super) async fn release(&self, handles: &[(String, String)]) {
        let queue = &self.config.dead_letter_queue_url;
        for chunk in handles.chunks(10) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, (_, handle))| {
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

/// Whether a look receives again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    Receive,
    Done,
}

/// A look in progress: what it saw, and whether it is whole.
#[derive(Debug)]
struct Look {
    counts: Counts,
    seen: HashSet<String>,
    /// The groups the look received messages of (and holds in flight).
    held: HashSet<String>,
    empties: usize,
    peeked: Peeked,
}

impl Look {
    fn new(counts: Counts) -> Self {
        Self {
            counts,
            seen: HashSet::new(),
            held: HashSet::new(),
            empties: 0,
            peeked: Peeked::default(),
        }
    }

    /// Whether the look receives at all: always, a count of zero may lag.
    fn first(&mut self) -> Next {
        Next::Receive
    }

    /// Takes in what one receive answered.
    fn received(&mut self, messages: &[aws_sdk_sqs::types::Message]) -> Next {
        if messages.is_empty() {
            self.empties += 1;
            // Nothing visible: whole, unless messages held elsewhere are still to come back;
            // but for the groups the look holds part of, which hand out nothing more meanwhile.
            if self.counts.in_flight == 0 {
                self.peeked.complete = true;
                self.peeked.groups = std::mem::take(&mut self.held);
                return Next::Done;
            }
            return if self.empties >= EMPTY_RECEIVES {
                Next::Done
            } else {
                Next::Receive
            };
        }
        self.empties = 0;
        for m in messages {
            self.seen.insert(m.message_id.clone().unwrap_or_default());
            if let Some(group) = m
                .attributes
                .as_ref()
                .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
            {
                self.held.insert(group.clone());
            }
            if let Some((payment_id, dead)) = dead_letter(m)
                && !self
                    .peeked
                    .found
                    .get(&payment_id)
                    .is_some_and(|copies| copies.iter().any(|c| c.message_id == dead.message_id))
            {
                self.peeked.found.entry(payment_id).or_default().push(dead);
            }
        }
        // A count of zero proved wrong proves nothing.
        let counted = self.counts.visible + self.counts.in_flight;
        if counted > 0 && self.seen.len() as u64 >= counted {
            // Every message counted was seen: no group hides one.
            self.peeked.complete = true;
            self.peeked.groups.clear();
            return Next::Done;
        }
        Next::Receive
    }

    fn finish(mut self) -> Peeked {
        for copies in self.peeked.found.values_mut() {
            copies.sort_by(|a, b| {
                (a.reason.is_none(), a.sent_at, &a.message_id).cmp(&(
                    b.reason.is_none(),
                    b.sent_at,
                    &b.message_id,
                ))
            });
        }
        self.peeked
    }
}

#[cfg(test)]
impl DeadLetter {
    /// A copy SQS moved (no reason) of `body`, received as `message_id` of `group`.
    pub(super) fn for_test(
        body: &str,
        message_id: &str,
        group: Option<&str>,
        sent_back: u32,
    ) -> Self {
        Self {
            message: serde_json::from_str(body).unwrap(),
            body: body.to_owned(),
            reason: None,
            sent_back,
            group: group.map(str::to_owned),
            sent_at: 0,
            message_id: message_id.to_owned(),
            handle: None,
        }
    }
}

/// The payment a dead letter is the message of, with the reason it is there.
fn dead_letter(m: &aws_sdk_sqs::types::Message) -> Option<(String, DeadLetter)> {
    let body = m.body.clone()?;
    let message = serde_json::from_str::<PaymentRequested>(&body).ok()?;
    let attribute = |name: &str| {
        m.message_attributes
            .as_ref()
            .and_then(|a| a.get(name))
            .and_then(|a| a.string_value.clone())
    };
    let own_reason = attribute(lambda_idempotency::dead_letter::REASON_ATTRIBUTE);
    let sent_back = attribute(SENT_BACK_ATTRIBUTE)
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    let group = m
        .attributes
        .as_ref()
        .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
        .cloned();
    let sent_at = m
        .attributes
        .as_ref()
        .and_then(|a| a.get(&MessageSystemAttributeName::SentTimestamp))
        .and_then(|t| t.parse().ok())
        .unwrap_or(u64::MAX);
    Some((
        message.payment_id.clone(),
        DeadLetter {
            message,
            body,
            reason: own_reason,
            sent_back,
            group,
            sent_at,
            message_id: m.message_id.clone().unwrap_or_default(),
            handle: m.receipt_handle.clone(),
        },
    ))
}

#[cfg(test)]
mod tests {
    use aws_sdk_sqs::types::{Message, MessageAttributeValue};

    use super::*;

    fn message(id: &str, group: &str, payment: &str, reason: Option<&str>) -> Message {
        let body = serde_json::json!({
            "paymentId": payment, "accountId": group, "amountCents": 5, "currency": "EUR",
        });
        let mut m = Message::builder()
            .message_id(id)
            .body(body.to_string())
            .attributes(MessageSystemAttributeName::MessageGroupId, group)
            .attributes(
                MessageSystemAttributeName::SentTimestamp,
                id.trim_start_matches('m'),
            );
        if let Some(reason) = reason {
            m = m.message_attributes(
                "DeadLetterReason",
                MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value(reason)
                    .build()
                    .unwrap(),
            );
        }
        m.build()
    }

    fn counts(visible: u64, in_flight: u64) -> Counts {
        Counts { visible, in_flight }
    }

    #[test]
    fn a_count_of_zero_is_not_a_look() {
        let mut look = Look::new(counts(0, 0));
        assert_eq!(
            look.first(),
            Next::Receive,
            "the count may lag: one long poll"
        );
        // The long poll finds what the count missed.
        assert_eq!(
            look.received(&[message("m1", "a", "p1", None)]),
            Next::Receive,
            "a count proved wrong proves nothing"
        );
        assert_eq!(look.received(&[]), Next::Done);
        let peeked = look.finish();
        assert_eq!(peeked.copies("p1").len(), 1);
        assert!(peeked.may_hide("a"), "the look held part of group a");
        assert!(!peeked.may_hide("b"));
        // Nothing there at all: whole after one empty long poll.
        let mut look = Look::new(counts(0, 0));
        assert_eq!(look.first(), Next::Receive);
        assert_eq!(look.received(&[]), Next::Done);
        assert!(!look.finish().may_hide("a"));
    }

    #[test]
    fn an_empty_long_poll_leaves_the_groups_the_look_holds_unseen() {
        // Three messages counted, two received (of group a: a FIFO queue hands out no more of a
        // group while some of it is in flight), then nothing.
        let mut look = Look::new(counts(3, 0));
        assert_eq!(look.first(), Next::Receive);
        let two = [
            message("m1", "a", "p1", None),
            message("m2", "a", "p2", None),
        ];
        assert_eq!(look.received(&two), Next::Receive);
        assert_eq!(look.received(&[]), Next::Done);
        let peeked = look.finish();
        assert!(
            peeked.may_hide("a"),
            "group a may have a third message unseen"
        );
        assert!(!peeked.may_hide("b"), "every other group was seen whole");
        // Every message counted seen: whole, group a too.
        let mut look = Look::new(counts(2, 0));
        look.first();
        assert_eq!(look.received(&two), Next::Done);
        assert!(!look.finish().may_hide("a"));
    }

    #[test]
    fn the_copy_with_a_reason_is_trusted_first_whatever_the_order() {
        for reasoned_first in [true, false] {
            let with = message("m5", "a", "p1", Some("poison"));
            let without = message("m1", "a", "p1", None);
            let messages = if reasoned_first {
                [with, without]
            } else {
                [without, with]
            };
            let mut look = Look::new(counts(3, 0));
            look.first();
            look.received(&messages);
            let peeked = look.finish();
            let copies = peeked.copies("p1");
            let reasons: Vec<Option<&str>> = copies.iter().map(|c| c.reason.as_deref()).collect();
            assert_eq!(reasons, [Some("poison"), None], "{reasoned_first}");
        }
    }

    #[test]
    fn a_copy_moved_by_sqs_has_no_reason_and_its_count_of_sends_back() {
        let moved = message("m1", "a", "p1", None);
        let (_, dead) = dead_letter(&moved).unwrap();
        assert_eq!((dead.reason, dead.sent_back), (None, 0));
        assert_eq!(dead.group.as_deref(), Some("a"));
        let mut again = message("m2", "a", "p1", None);
        again.message_attributes = Some(
            [(
                SENT_BACK_ATTRIBUTE.to_owned(),
                MessageAttributeValue::builder()
                    .data_type("Number")
                    .string_value("2")
                    .build()
                    .unwrap(),
            )]
            .into(),
        );
        let (_, dead) = dead_letter(&again).unwrap();
        assert_eq!((dead.reason, dead.sent_back), (None, 2));
        assert_eq!(dead.body, again.body.unwrap());
    }

    #[test]
    fn a_look_not_whole_hides_every_account_and_a_held_group_its_own() {
        let mut peeked = Peeked::default();
        assert!(peeked.may_hide("a"), "not whole");
        peeked.complete = true;
        assert!(!peeked.may_hide("a"));
        peeked.groups.insert("a".to_owned());
        assert!(peeked.may_hide("a"));
        assert!(!peeked.may_hide("b"));
    }
}
