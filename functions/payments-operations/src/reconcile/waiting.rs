//! Payments left `accepted`: found through the sparse index, marked from the dead-letter queue
//! or sent again.

use std::collections::{HashMap, HashSet};

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::{ChangeMessageVisibilityBatchRequestEntry, MessageSystemAttributeName};
use payments_model::lifecycle::{self, ACCEPTED_AT, ACCEPTED_INDEX, ACCEPTED_SHARD, MarkedFailed};
use payments_model::{PaymentItem, PaymentRequested, PaymentStatus};

use super::{ReconcileError, Reconciler};

/// How long the dead-letter queue's messages stay invisible while the reconciler looks at them
/// (they are made visible again as soon as it is done).
const PEEK_VISIBILITY_SECONDS: i32 = 30;

/// The reason given for a message SQS moved itself (its receive limit, `maxReceiveCount`):
/// payment-processor's own dead-letter copies carry theirs (`DeadLetterReason`).
pub const MOVED_BY_SQS: &str =
    "moved to the dead-letter queue by SQS after its receive limit (crashes or timeouts)";

/// What the reconciler did with the payments left `accepted`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Waiting {
    /// Payments sent again, oldest first.
    pub resent: Vec<String>,
    /// Payments marked `failed` because their message is in the dead-letter queue.
    pub marked_failed: Vec<String>,
    /// Payments `accepted` for longer than the stuck threshold (sent again or not).
    pub stuck: Vec<String>,
    /// Payments that could not be sent (payment id, why): the next run tries again.
    pub send_failed: Vec<(String, String)>,
    /// Payments not sent again because the dead-letter queue may hold their message unseen
    /// (their account's group has messages there, or the look stopped at its limit).
    pub unchecked: Vec<String>,
}

/// A payment's message found in the dead-letter queue.
#[derive(Debug, Clone)]
struct DeadLetter {
    message: PaymentRequested,
    reason: String,
}

/// What a look into the dead-letter queue saw.
#[derive(Debug, Default)]
struct Peeked {
    /// The payments' messages, by payment id.
    found: HashMap<String, DeadLetter>,
    /// Message groups (accounts) that may have messages there unseen: on a FIFO queue a receive
    /// hands out no more of a group while some of it is in flight, so a group of a full receive
    /// (10 messages) may have more.
    groups: HashSet<String>,
    /// True when the queue ran dry before the receive limit: every other group was seen whole.
    complete: bool,
}

impl Reconciler {
    /// Payments `accepted` for longer than [`Config::resend_after`](super::Config): marked
    /// `failed` when their message is in the dead-letter queue, sent again otherwise.
    pub async fn waiting(&self, now_ms: i64) -> Result<Waiting, ReconcileError> {
        let before = now_ms - millis(self.config.resend_after);
        let stuck_before = now_ms - millis(self.config.stuck_after);
        let candidates = self.accepted_before(before).await?;
        let mut waiting = Waiting::default();
        if candidates.is_empty() {
            return Ok(waiting);
        }
        let dead_letters = self.dead_letters().await?;
        let mut to_send = Vec::new();
        for (accepted_at, payment_id) in candidates {
            let Some(item) = self.accepted_payment(&payment_id).await? else {
                continue;
            };
            if let Some(dead) = dead_letters.found.get(&payment_id) {
                let reason = format!("in the dead-letter queue: {}", dead.reason);
                let marked = lifecycle::mark_failed(
                    &self.dynamodb,
                    &self.config.payments_table,
                    &dead.message,
                    &reason,
                    now_ms,
                )
                .await
                .map_err(ReconcileError::dynamodb(
                    "UpdateItem",
                    &self.config.payments_table,
                ))?;
                if marked == MarkedFailed::Marked {
                    tracing::warn!(payment_id, reason, "payment marked failed");
                    waiting.marked_failed.push(payment_id);
                    continue;
                }
                // The copy disagrees with the payment: it is not this payment's message.
            }
            if !dead_letters.complete || dead_letters.groups.contains(&item.account_id) {
                // Its message may be in the dead-letter queue unseen: not sent again blindly
                // (a message that crashes the processor would go round again); the next run
                // looks again, and a payment waiting too long counts as stuck.
                tracing::warn!(
                    payment_id,
                    "dead-letter queue not seen whole for its account: not sent again"
                );
                waiting.unchecked.push(payment_id.clone());
                if accepted_at < stuck_before {
                    waiting.stuck.push(payment_id);
                }
                continue;
            }
            if accepted_at < stuck_before {
                tracing::warn!(payment_id, accepted_at, "payment stuck");
                waiting.stuck.push(payment_id.clone());
            }
            to_send.push(item);
        }
        let republished = self.relay.republish(to_send).await;
        waiting.resent = republished.sent;
        waiting.send_failed = republished.failed;
        waiting.send_failed.extend(republished.invalid);
        Ok(waiting)
    }

    /// The payments in the accepted index accepted before `before_ms` (when, id), oldest
    /// first, at most `max_per_run`.
    async fn accepted_before(&self, before_ms: i64) -> Result<Vec<(i64, String)>, ReconcileError> {
        let table = &self.config.payments_table;
        let mut found: Vec<(i64, String)> = Vec::new();
        for shard in lifecycle::shards() {
            let mut pages = self
                .dynamodb
                .query()
                .table_name(table)
                .index_name(ACCEPTED_INDEX)
                .key_condition_expression("#shard = :shard AND #at < :before")
                .expression_attribute_names("#shard", ACCEPTED_SHARD)
                .expression_attribute_names("#at", ACCEPTED_AT)
                .expression_attribute_values(":shard", AttributeValue::S(shard))
                .expression_attribute_values(":before", AttributeValue::N(before_ms.to_string()))
                .into_paginator()
                .items()
                .send();
            let mut in_shard = 0;
            while let Some(item) = pages.next().await {
                let item = item.map_err(ReconcileError::dynamodb("Query", table))?;
                let (Some(AttributeValue::S(id)), Some(AttributeValue::N(at))) =
                    (item.get("paymentId"), item.get(ACCEPTED_AT))
                else {
                    continue;
                };
                found.push((at.parse().unwrap_or(0), id.clone()));
                in_shard += 1;
                if in_shard >= self.config.max_per_run {
                    break;
                }
            }
        }
        found.sort();
        found.truncate(self.config.max_per_run);
        Ok(found)
    }

    /// The payment, read consistently, if it is still `accepted` (the index lags).
    async fn accepted_payment(
        &self,
        payment_id: &str,
    ) -> Result<Option<PaymentItem>, ReconcileError> {
        let table = &self.config.payments_table;
        let item = self
            .dynamodb
            .get_item()
            .table_name(table)
            .key("paymentId", AttributeValue::S(payment_id.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(ReconcileError::dynamodb("GetItem", table))?
            .item;
        let Some(item) = item else { return Ok(None) };
        match serde_dynamo::aws_sdk_dynamodb_1::from_item::<PaymentItem>(item) {
            Ok(payment) if payment.status == PaymentStatus::Accepted.as_str() => Ok(Some(payment)),
            Ok(_) => Ok(None),
            Err(e) => {
                tracing::warn!(payment_id, error = %e, "not a payment item: left alone");
                Ok(None)
            }
        }
    }

    /// The payments whose message is in the dead-letter queue, by payment id. The messages are
    /// received (invisible for a moment) and made visible again: the queue keeps them all.
    async fn dead_letters(&self) -> Result<Peeked, ReconcileError> {
        let queue = &self.config.dead_letter_queue_url;
        let mut peeked = Peeked::default();
        let mut handles = Vec::new();
        let mut result = Ok(());
        for _ in 0..self.config.max_per_run.div_ceil(10) {
            let received = self
                .sqs
                .receive_message()
                .queue_url(queue)
                .max_number_of_messages(10)
                .visibility_timeout(PEEK_VISIBILITY_SECONDS)
                .wait_time_seconds(0)
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
                peeked.complete = true;
                break;
            }
            let full = messages.len() == 10;
            for m in messages {
                if let Some(handle) = m.receipt_handle.clone() {
                    handles.push(handle);
                }
                if let Some(group) = m
                    .attributes
                    .as_ref()
                    .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
                    .filter(|_| full)
                {
                    peeked.groups.insert(group.clone());
                }
                let Some(message) = m
                    .body
                    .as_deref()
                    .and_then(|b| serde_json::from_str::<PaymentRequested>(b).ok())
                else {
                    continue;
                };
                let reason = m
                    .message_attributes
                    .as_ref()
                    .and_then(|a| a.get("DeadLetterReason"))
                    .and_then(|a| a.string_value.clone())
                    .unwrap_or_else(|| MOVED_BY_SQS.to_owned());
                peeked
                    .found
                    .insert(message.payment_id.clone(), DeadLetter { message, reason });
            }
        }
        self.release(&handles).await;
        result.map(|()| peeked)
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

fn millis(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
