//! Planning a redrive: which received messages to send on and as what, which to hold back, and
//! what the run has done with each message so far ([`Ledger`]).
//!
//! A message goes to the source queue as the library's [`publish::Message`]: the body, the
//! message attributes not named with the dead-letter prefix, the `AWSTraceHeader`, and for a
//! FIFO target its group and a new deduplication id ([`redrive_deduplication_id`]). It is held
//! back (failed, left in the dead-letter queue) when it cannot be sent, when this run already
//! sent it and it came back, and, on a FIFO target, when an earlier message of its group was
//! not sent: each group keeps its order.

use std::collections::{HashMap, HashSet};

use aws_sdk_sqs::types::{Message, MessageAttributeValue, MessageSystemAttributeName};
use lambda_idempotency::publish::{self, DeduplicationId, MessageGroupId};

use super::options::RedriveOptions;

/// The attribute in which the library's dead-letter step records the source message id.
const SOURCE_MESSAGE_ID_ATTRIBUTE: &str = "DeadLetterSourceMessageId";

/// The `MessageDeduplicationId` a redrive gives the dead-letter message `message_id`, first
/// received from the dead-letter queue at `first_receive` (`ApproximateFirstReceiveTimestamp`,
/// epoch ms): `redrive-{message_id}-{first_receive}`.
///
/// It is new (never the message's original id, which the source queue may still remember and
/// would deduplicate against) and unique to this copy in the dead-letter queue: a message that
/// comes back to the dead-letter queue after a redrive has another id there. It is also stable:
/// if a send's outcome was unknown or the delete failed, sending the same copy again within 5
/// minutes is deduplicated by the source queue instead of doubled. Without a usable timestamp or
/// id it is a random UUID.
///
/// ```
/// use payments_operations::redrive::redrive_deduplication_id;
///
/// let id = redrive_deduplication_id("0b3a7c9e-1f2d-4e5f-8a9b-0c1d2e3f4a5b", Some("1767225600000"));
/// assert_eq!(id, "redrive-0b3a7c9e-1f2d-4e5f-8a9b-0c1d2e3f4a5b-1767225600000");
/// assert!(redrive_deduplication_id("id", None).starts_with("redrive-"));
/// assert_ne!(redrive_deduplication_id("id", None), redrive_deduplication_id("id", None));
/// ```
pub fn redrive_deduplication_id(message_id: &str, first_receive: Option<&str>) -> String {
    let valid = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c.is_ascii_punctuation())
    };
    match first_receive {
        Some(ts) if valid(ts) && valid(message_id) => {
            let id = format!("redrive-{message_id}-{ts}");
            if id.len() <= publish::MAX_ID_LEN {
                return id;
            }
            format!("redrive-{}", uuid::Uuid::new_v4())
        }
        _ => format!("redrive-{}", uuid::Uuid::new_v4()),
    }
}

/// The message's id and receipt handle (a message without them cannot be handled at all).
pub(super) fn ids(m: &Message) -> Option<(String, String)> {
    Some((m.message_id()?.to_owned(), m.receipt_handle()?.to_owned()))
}

fn system_attribute(m: &Message, name: MessageSystemAttributeName) -> Option<String> {
    m.attributes().and_then(|a| a.get(&name)).cloned()
}

/// A message on its way to the source queue.
#[derive(Clone, Debug)]
pub(super) struct Outgoing {
    /// Its id in the dead-letter queue.
    pub dlq_id: String,
    /// Its receipt handle there.
    pub receipt: String,
    /// Its group, on a FIFO target.
    pub group: Option<String>,
    /// What is sent.
    pub message: publish::Message,
}

/// The message as it goes to the source queue, or why it cannot.
fn to_publish(
    message: &Message,
    dlq_id: &str,
    group: Option<&str>,
    to_fifo: bool,
    options: &RedriveOptions,
) -> Result<publish::Message, String> {
    let body = message
        .body()
        .filter(|b| !b.is_empty())
        .ok_or("the message has no body")?
        .to_owned();
    let text = |e: publish::InvalidMessage| e.to_string();
    let mut out = if to_fifo {
        let group = group
            .ok_or("the message has no MessageGroupId: it cannot go to a FIFO queue")
            .map(MessageGroupId::new)?
            .map_err(text)?;
        let first_receive = system_attribute(
            message,
            MessageSystemAttributeName::ApproximateFirstReceiveTimestamp,
        );
        let dedup =
            DeduplicationId::new(redrive_deduplication_id(dlq_id, first_receive.as_deref()))
                .map_err(text)?;
        publish::Message::fifo(group, dedup, body)
    } else {
        publish::Message::standard(body)
    }
    .map_err(text)?;
    for (name, value) in message.message_attributes().into_iter().flatten() {
        if !options.keeps(name) {
            continue;
        }
        // Only the type and the value: the list values are not implemented by SQS.
        let value = MessageAttributeValue::builder()
            .data_type(value.data_type())
            .set_string_value(value.string_value().map(str::to_owned))
            .set_binary_value(value.binary_value().cloned())
            .build()
            .map_err(|e| format!("message attribute {name}: {e}"))?;
        out = out.with_attribute_value(name, value).map_err(text)?;
    }
    if let Some(header) = system_attribute(message, MessageSystemAttributeName::AwsTraceHeader) {
        out = out.with_trace_header(header).map_err(text)?;
    }
    Ok(out)
}

/// Why a message is still held (invisible) in the dead-letter queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HoldKind {
    /// Not sent: it is reported in `failed`.
    Failed,
    /// Sent, but its delete from the dead-letter queue failed: reported in `not_deleted`.
    NotDeleted,
    /// Received in a dry run.
    DryRun,
}

/// A message the run holds in the dead-letter queue until it ends.
#[derive(Debug)]
pub(super) struct Held {
    /// Its id in the dead-letter queue.
    pub dlq_id: String,
    /// Its latest receipt handle.
    pub receipt: String,
    /// Why it is held.
    pub kind: HoldKind,
    /// What went wrong.
    pub error: String,
    /// Its id in the source queue, for a message sent but not deleted.
    pub sent_as: Option<String>,
}

/// A received message, sorted out by [`Ledger::sort`].
pub(super) enum Sorted {
    /// Not seen before in this run.
    Fresh(Message),
    /// Sent before (or moved) and delivered again: to be deleted (id, receipt handle).
    Delete(String, String),
    /// Held already: its receipt handle is renewed.
    Held,
}

/// What a run has done with each message it has seen.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    to_fifo: bool,
    held: HashMap<String, Held>,
    /// The held messages' ids, in the order they were first held.
    order: Vec<String>,
    /// Dead-letter ids moved (sent and deleted) in this run.
    moved: HashSet<String>,
    /// Source-queue ids of what this run sent: such a message back in the dead-letter queue
    /// failed again and is not sent a second time.
    sent: HashSet<String>,
    /// FIFO groups with a message that was not sent, and that message.
    blocked: HashMap<String, String>,
}

impl Ledger {
    /// A ledger for a run to a FIFO target (`to_fifo`) or a standard one.
    pub fn new(to_fifo: bool) -> Self {
        Self {
            to_fifo,
            ..Self::default()
        }
    }

    /// Holds `dlq_id` until the run ends (replacing an earlier hold of it).
    pub fn hold(&mut self, dlq_id: &str, receipt: &str, kind: HoldKind, error: String) {
        let held = Held {
            dlq_id: dlq_id.to_owned(),
            receipt: receipt.to_owned(),
            kind,
            error,
            sent_as: None,
        };
        if self.held.insert(dlq_id.to_owned(), held).is_none() {
            self.order.push(dlq_id.to_owned());
        }
    }

    /// Holds a message that was sent as `sent_as` but not deleted.
    pub fn hold_not_deleted(
        &mut self,
        dlq_id: &str,
        receipt: &str,
        sent_as: String,
        error: String,
    ) {
        self.hold(dlq_id, receipt, HoldKind::NotDeleted, error);
        if let Some(held) = self.held.get_mut(dlq_id) {
            held.sent_as = Some(sent_as);
        }
    }

    /// Marks a message failed; on a FIFO target its group is blocked from then on.
    pub fn fail(&mut self, dlq_id: &str, receipt: &str, group: Option<&str>, error: String) {
        if self.to_fifo
            && let Some(g) = group
        {
            self.blocked
                .entry(g.to_owned())
                .or_insert_with(|| dlq_id.to_owned());
        }
        self.hold(dlq_id, receipt, HoldKind::Failed, error);
    }

    /// Records that the message `dlq_id` was sent as `sent_as`.
    pub fn sent(&mut self, sent_as: &str) {
        self.sent.insert(sent_as.to_owned());
    }

    /// Records that `dlq_id` was moved (sent and deleted); answers its id in the source queue
    /// when it had been held as sent but not deleted.
    pub fn moved(&mut self, dlq_id: &str) -> Option<String> {
        self.moved.insert(dlq_id.to_owned());
        let held = self.held.remove(dlq_id)?;
        self.order.retain(|id| id != dlq_id);
        held.sent_as
    }

    /// Whether `dlq_id` is held as sent but not deleted.
    pub fn is_not_deleted(&self, dlq_id: &str) -> bool {
        self.held
            .get(dlq_id)
            .is_some_and(|h| h.kind == HoldKind::NotDeleted)
    }

    /// Sorts out a received message: a message held already gets its new receipt handle (and
    /// is deleted again if it was sent but not deleted); a moved one delivered again is deleted.
    pub fn sort(&mut self, message: Message) -> Option<Sorted> {
        let (id, receipt) = ids(&message)?;
        if let Some(held) = self.held.get_mut(&id) {
            held.receipt = receipt.clone();
            return Some(match held.kind {
                HoldKind::NotDeleted => Sorted::Delete(id, receipt),
                _ => Sorted::Held,
            });
        }
        Some(if self.moved.contains(&id) {
            Sorted::Delete(id, receipt)
        } else {
            Sorted::Fresh(message)
        })
    }

    /// The messages of `fresh` to send, in order; each of the others is held as failed, with
    /// why.
    pub fn plan(&mut self, fresh: &[Message], options: &RedriveOptions) -> Vec<Outgoing> {
        let mut out = Vec::with_capacity(fresh.len());
        for m in fresh {
            let Some((id, receipt)) = ids(m) else {
                continue;
            };
            let group = system_attribute(m, MessageSystemAttributeName::MessageGroupId);
            let came_back = self.sent.contains(&id)
                || m.message_attributes()
                    .and_then(|a| a.get(SOURCE_MESSAGE_ID_ATTRIBUTE))
                    .and_then(|v| v.string_value())
                    .is_some_and(|source| self.sent.contains(source));
            let checked = if came_back {
                Err(
                    "sent on by this redrive, it failed again and came back to the \
                     dead-letter queue: not sent a second time"
                        .to_owned(),
                )
            } else if let Some(first) = self.blocking(group.as_deref()) {
                Err(group_blocked(first, group.as_deref().unwrap_or_default()))
            } else {
                to_publish(m, &id, group.as_deref(), self.to_fifo, options)
            };
            match checked {
                Ok(message) => out.push(Outgoing {
                    dlq_id: id,
                    receipt,
                    group: group.filter(|_| self.to_fifo),
                    message,
                }),
                Err(error) => self.fail(&id, &receipt, group.as_deref(), error),
            }
        }
        out
    }

    /// The message that blocks `group`, on a FIFO target.
    fn blocking(&self, group: Option<&str>) -> Option<&str> {
        let group = group.filter(|_| self.to_fifo)?;
        self.blocked.get(group).map(String::as_str)
    }

    /// Ends the run's holds: every held message, in the order first held.
    pub fn take_held(&mut self) -> Vec<Held> {
        let mut held = std::mem::take(&mut self.held);
        std::mem::take(&mut self.order)
            .into_iter()
            .filter_map(|id| held.remove(&id))
            .collect()
    }
}

/// Why a message is not sent: `first`, an earlier message of its group, was not.
pub(super) fn group_blocked(first: &str, group: &str) -> String {
    format!(
        "not sent: message {first} of its group ({group}) was not sent, and the group keeps its order"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn received(id: &str, group: Option<&str>, body: &str) -> Message {
        let mut m = Message::builder()
            .message_id(id)
            .receipt_handle(format!("rh-{id}"))
            .body(body)
            .attributes(
                MessageSystemAttributeName::ApproximateFirstReceiveTimestamp,
                "17",
            );
        if let Some(g) = group {
            m = m.attributes(MessageSystemAttributeName::MessageGroupId, g);
        }
        m.build()
    }

    #[test]
    fn dedup_ids_are_valid_and_new() {
        let id = redrive_deduplication_id(&"x".repeat(200), Some("1"));
        assert!(id.len() <= publish::MAX_ID_LEN && id.starts_with("redrive-"));
        let id = redrive_deduplication_id("has space", Some("1"));
        assert!(!id.contains(' '));
    }

    #[test]
    fn a_fifo_message_keeps_its_group_and_gets_a_new_dedup_id() {
        let mut ledger = Ledger::new(true);
        let planned = ledger.plan(
            &[received("m1", Some("g"), "b")],
            &RedriveOptions::default(),
        );
        let message = &planned[0].message;
        assert_eq!(message.group_id().unwrap().as_str(), "g");
        assert_eq!(message.dedup_id().unwrap().as_str(), "redrive-m1-17");
        assert_eq!(planned[0].group.as_deref(), Some("g"));
    }

    #[test]
    fn after_a_failed_message_the_rest_of_its_group_is_held_back() {
        let mut ledger = Ledger::new(true);
        let options = RedriveOptions::default();
        // No body: it cannot be sent, and holds back the next message of group g.
        let planned = ledger.plan(
            &[
                received("m1", Some("g"), ""),
                received("m2", Some("g"), "b"),
                received("m3", Some("h"), "b"),
            ],
            &options,
        );
        let sent: Vec<_> = planned.iter().map(|o| o.dlq_id.as_str()).collect();
        assert_eq!(sent, ["m3"]);
        let held = ledger.take_held();
        assert_eq!(held.len(), 2);
        assert_eq!(held[0].error, "the message has no body");
        assert_eq!(held[1].error, group_blocked("m1", "g"));
    }

    #[test]
    fn a_standard_target_holds_no_group_back() {
        let mut ledger = Ledger::new(false);
        let options = RedriveOptions::default();
        let planned = ledger.plan(
            &[
                received("m1", Some("g"), ""),
                received("m2", Some("g"), "b"),
            ],
            &options,
        );
        assert_eq!(planned.len(), 1);
        assert!(planned[0].message.group_id().is_none() && planned[0].group.is_none());
    }

    #[test]
    fn a_message_sent_by_the_run_that_comes_back_is_not_sent_again() {
        let mut ledger = Ledger::new(false);
        ledger.sent("m1");
        let planned = ledger.plan(&[received("m1", None, "b")], &RedriveOptions::default());
        assert!(planned.is_empty());
        assert!(ledger.take_held()[0].error.contains("came back"));
    }

    #[test]
    fn a_message_sent_but_not_deleted_is_deleted_when_seen_again() {
        let mut ledger = Ledger::new(false);
        ledger.hold_not_deleted("m1", "old", "new-id".into(), "timeout".into());
        assert!(ledger.is_not_deleted("m1"));
        assert!(matches!(
            ledger.sort(received("m1", None, "b")),
            Some(Sorted::Delete(id, receipt)) if id == "m1" && receipt == "rh-m1"
        ));
        assert_eq!(ledger.moved("m1").as_deref(), Some("new-id"));
        assert!(ledger.take_held().is_empty());
        assert!(matches!(
            ledger.sort(received("m1", None, "b")),
            Some(Sorted::Delete(..))
        ));
        assert!(matches!(
            ledger.sort(received("m2", None, "b")),
            Some(Sorted::Fresh(_))
        ));
    }
}
