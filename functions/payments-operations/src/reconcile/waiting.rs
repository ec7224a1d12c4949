//! Payments left `accepted`: found through the sparse index, marked failed from
//! payment-processor's own dead letters, their message sent back when SQS moved it
//! ([`send_back`](super::send_back)), or sent again.
//!
//! Under incident load a run does what it can and keeps its progress: it reads the payments
//! (consistently, several at a time) oldest first from where the last run stopped (a cursor in
//! the accounts table, [`CURSOR_KEY`]), stops when its time budget is spent or it has sent
//! [`Config::max_resends_per_run`](super::Config) of them, sends what it found, and leaves the
//! rest to the next run; a run that reaches the end starts the next one from the oldest again.
//! The cursor never moves past a payment left unsent (its send failed, or the dead-letter queue
//! may hold its message unseen): a run that stops keeps it before the first such payment.
//! A payment sent again carries when ([`RESENT_AT`]) and is not sent again within
//! [`Config::resend_interval`](super::Config): behind a backlog its message is still queued.

use aws_sdk_dynamodb::types::AttributeValue;
use futures_util::stream::{self, StreamExt};
use payments_model::lifecycle::{self, ACCEPTED_AT, ACCEPTED_INDEX, ACCEPTED_SHARD, MarkedFailed};
use payments_model::{PaymentItem, PaymentStatus};

use super::dead_letters::{DeadLetter, Peeked};
use super::send_back::{self, fatal_reason};
use super::{Budget, ReconcileError, Reconciler};

/// The accounts table's key of the look's progress: the last payment looked at
/// (`afterAcceptedAt`, `afterPaymentId`).
pub const CURSOR_KEY: &str = "reconciler#accepted";

/// The payment attribute that says when the reconciler last sent it again (epoch ms).
pub const RESENT_AT: &str = "resentAt";

/// Payments read at once.
const READS_IN_FLIGHT: usize = 16;

/// Why a run stopped before the end of the payments left accepted: the next run goes on after
/// the last one it looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// Its time budget was spent.
    OutOfTime,
    /// It sent as many as a run may.
    ResendLimit,
    /// It looked at as many as a run may (`MAX_PAYMENTS_PER_RUN`).
    MaxPerRun,
}

/// What the reconciler did with the payments left `accepted`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Waiting {
    /// Payments sent again, oldest first.
    pub resent: Vec<String>,
    /// Payments marked `failed` from the dead-letter queue: payment-processor's copy with its
    /// reason, or a copy SQS moved again after it was sent back as often as the limit allows.
    pub marked_failed: Vec<String>,
    /// Payments whose message SQS moved to the dead-letter queue, sent back to the payments
    /// queue ([`send_back`](super::send_back)).
    pub sent_back: Vec<String>,
    /// Payments `accepted` for longer than the stuck threshold (sent again or not).
    pub stuck: Vec<String>,
    /// Payments that could not be sent (payment id, why): the next run tries again.
    pub send_failed: Vec<(String, String)>,
    /// Payments not sent again because the dead-letter queue may hold their message unseen
    /// (their account's group has messages there, or the look was not whole).
    pub unchecked: Vec<String>,
    /// Payments not sent again because they were sent again less than the resend interval ago.
    pub recently_resent: Vec<String>,
    /// Why the run stopped before the end, if it did.
    pub stopped: Option<Stopped>,
}

/// Where a payment stands in the look: when it was accepted, and its id.
type Position = (i64, String);

/// A payment still `accepted`, read consistently.
#[derive(Debug, Clone)]
struct Candidate {
    payment: PaymentItem,
    accepted_at: i64,
    resent_at: Option<i64>,
}

impl Candidate {
    /// Sent again since it was (last) accepted, and since `since`.
    fn resent_since(&self, since: i64) -> bool {
        self.resent_at
            .is_some_and(|at| at >= since && at >= self.accepted_at)
    }
}

impl Reconciler {
    /// Payments `accepted` for longer than [`Config::resend_after`](super::Config), with no
    /// time limit: see [`Reconciler::waiting_within`].
    pub async fn waiting(&self, now_ms: i64) -> Result<Waiting, ReconcileError> {
        self.waiting_within(now_ms, &Budget::unlimited()).await
    }

    /// Payments `accepted` for longer than [`Config::resend_after`](super::Config), from where
    /// the last run stopped, until `budget` is spent: marked `failed` from payment-processor's
    /// dead letter, their message sent back when SQS moved it, sent again otherwise (see the
    /// module).
    pub async fn waiting_within(
        &self,
        now_ms: i64,
        budget: &Budget,
    ) -> Result<Waiting, ReconcileError> {
        let resent_since = now_ms - millis(self.config.resend_interval);
        let cursor = self.accepted_cursor().await?;
        let (positions, more) = self
            .accepted_before(now_ms - millis(self.config.resend_after), cursor.as_ref())
            .await?;
        let mut waiting = Waiting {
            stopped: more.then_some(Stopped::MaxPerRun),
            ..Waiting::default()
        };
        let read = self
            .read_candidates(positions, budget, &mut waiting)
            .await?;
        let dead_letters = if read
            .iter()
            .any(|(_, c)| c.as_ref().is_some_and(|c| !c.resent_since(resent_since)))
        {
            self.dead_letters().await?
        } else {
            Peeked::default()
        };
        // The dead letters stay invisible while the run decides: released after, but for
        // those sent back (deleted).
        let mut deleted = Vec::new();
        let decided = self
            .decide(read, &dead_letters, now_ms, &mut waiting, &mut deleted)
            .await;
        let handles: Vec<(String, String)> = dead_letters
            .handles
            .iter()
            .filter(|(id, _)| !deleted.contains(id))
            .cloned()
            .collect();
        self.release(&handles).await;
        let (looked, to_send) = decided?;
        let republished = self.relay.republish(to_send).await;
        let mut stamped = republished.sent.clone();
        stamped.extend(waiting.sent_back.iter().cloned());
        self.record_resent(&stamped, now_ms).await;
        waiting.resent = republished.sent;
        waiting.send_failed.extend(republished.failed);
        waiting.send_failed.extend(republished.invalid);
        let unsent: Vec<&str> = waiting
            .send_failed
            .iter()
            .map(|(id, _)| id.as_str())
            .collect();
        let looked: Vec<(Position, bool)> = looked
            .into_iter()
            .map(|(position, left)| {
                let unsent = match &left {
                    Left::Done => false,
                    Left::Unsent => true,
                    Left::Sending(id) => unsent.contains(&id.as_str()),
                };
                (position, unsent)
            })
            .collect();
        match next_cursor(cursor.as_ref(), waiting.stopped.is_some(), &looked) {
            CursorMove::Keep => {}
            CursorMove::Reset => self.keep_cursor(None).await?,
            CursorMove::To(at) => self.keep_cursor(Some(&at)).await?,
        }
        Ok(waiting)
    }

    /// What becomes of each payment read: recently sent again, marked failed or sent back from
    /// the dead letters (the message ids deleted from the dead-letter queue added to `deleted`),
    /// left unsent (the dead-letter queue may hide its message), or to send again. Each payment
    /// looked at, in order, with what was left of it, and those to send again.
    async fn decide(
        &self,
        read: Vec<(Position, Option<Candidate>)>,
        dead_letters: &Peeked,
        now_ms: i64,
        waiting: &mut Waiting,
        deleted: &mut Vec<String>,
    ) -> Result<(Vec<(Position, Left)>, Vec<PaymentItem>), ReconcileError> {
        let stuck_before = now_ms - millis(self.config.stuck_after);
        let resent_since = now_ms - millis(self.config.resend_interval);
        let mut looked: Vec<(Position, Left)> = Vec::new();
        let mut to_send = Vec::new();
        for (position, candidate) in read {
            let Some(candidate) = candidate else {
                looked.push((position, Left::Done));
                continue;
            };
            let payment_id = candidate.payment.payment_id.clone();
            let stuck = position.0 < stuck_before;
            if stuck {
                tracing::warn!(payment_id, accepted_at = position.0, "payment stuck");
            }
            let left = if candidate.resent_since(resent_since) {
                waiting.recently_resent.push(payment_id.clone());
                Some(Left::Done)
            } else {
                match self
                    .by_dead_letters(dead_letters, &candidate.payment, now_ms)
                    .await?
                {
                    FromDeadLetters::Marked => {
                        waiting.marked_failed.push(payment_id);
                        looked.push((position, Left::Done));
                        continue;
                    }
                    FromDeadLetters::SentBack(ids) => {
                        deleted.extend(ids);
                        waiting.sent_back.push(payment_id.clone());
                        Some(Left::Done)
                    }
                    FromDeadLetters::SendFailed(why) => {
                        waiting.send_failed.push((payment_id.clone(), why));
                        Some(Left::Unsent)
                    }
                    FromDeadLetters::Nothing => {
                        self.left_waiting(&candidate, dead_letters, &mut to_send, waiting)
                    }
                }
            };
            let Some(left) = left else { break };
            if stuck {
                waiting.stuck.push(payment_id);
            }
            looked.push((position, left));
        }
        Ok((looked, to_send))
    }

    /// A payment with nothing to do in the dead-letter queue: not sent again when the queue may
    /// hide its message, else to send again (`None`: the run sent as many as it may).
    fn left_waiting(
        &self,
        candidate: &Candidate,
        dead_letters: &Peeked,
        to_send: &mut Vec<PaymentItem>,
        waiting: &mut Waiting,
    ) -> Option<Left> {
        let payment_id = candidate.payment.payment_id.clone();
        if dead_letters.may_hide(&candidate.payment.account_id) {
            // Its message may be in the dead-letter queue unseen: not sent again blindly
            // (a message that crashes the processor would go round again); the next run
            // looks again, and a payment waiting too long counts as stuck.
            tracing::warn!(
                payment_id,
                "dead-letter queue not seen whole for its account: not sent again"
            );
            waiting.unchecked.push(payment_id);
            Some(Left::Unsent)
        } else if to_send.len() >= self.config.max_resends_per_run {
            waiting.stopped = Some(Stopped::ResendLimit);
            None
        } else {
            to_send.push(candidate.payment.clone());
            Some(Left::Sending(payment_id))
        }
    }

    /// The payments at `positions`, read consistently `READS_IN_FLIGHT` at a time, in order,
    /// until `budget` is spent (`None`: no longer `accepted`).
    async fn read_candidates(
        &self,
        positions: Vec<Position>,
        budget: &Budget,
        waiting: &mut Waiting,
    ) -> Result<Vec<(Position, Option<Candidate>)>, ReconcileError> {
        let mut reads = stream::iter(positions)
            .map(|position| async move {
                let read = self.accepted_payment(&position.1).await;
                (position, read)
            })
            .buffered(READS_IN_FLIGHT);
        let mut read = Vec::new();
        while let Some((position, candidate)) = reads.next().await {
            read.push((position, candidate?));
            if budget.is_spent() {
                waiting.stopped = Some(Stopped::OutOfTime);
                break;
            }
        }
        Ok(read)
    }

    /// What the payment's copies in the dead-letter queue decide (a copy that disagrees with
    /// the payment is not its message, and decides nothing): payment-processor's copy with its
    /// reason marks it failed with that reason; else the copies SQS moved are sent back, or,
    /// moved again after as many sends back as the limit allows, mark it failed
    /// ([`send_back`](super::send_back)).
    async fn by_dead_letters(
        &self,
        dead_letters: &Peeked,
        payment: &PaymentItem,
        now_ms: i64,
    ) -> Result<FromDeadLetters, ReconcileError> {
        let copies = dead_letters.copies(&payment.payment_id);
        for dead in &copies {
            if let Some(reason) = &dead.reason
                && self
                    .mark_failed(dead, &format!("in the dead-letter queue: {reason}"), now_ms)
                    .await?
            {
                return Ok(FromDeadLetters::Marked);
            }
        }
        let moved: Vec<&DeadLetter> = copies
            .into_iter()
            .filter(|d| d.reason.is_none() && send_back::agrees(d, payment))
            .collect();
        let Some(highest) = moved.iter().max_by_key(|d| d.sent_back) else {
            return Ok(FromDeadLetters::Nothing);
        };
        if highest.sent_back >= self.config.send_back_limit {
            let reason = format!(
                "in the dead-letter queue: {}",
                fatal_reason(highest.sent_back)
            );
            return Ok(if self.mark_failed(highest, &reason, now_ms).await? {
                FromDeadLetters::Marked
            } else {
                FromDeadLetters::Nothing
            });
        }
        // Boxed: the send back's state stays off the caller's stack (a debug build's future is large).
        Ok(match Box::pin(self.send_back(&moved)).await {
            Ok(count) => {
                tracing::warn!(
                    payment_id = payment.payment_id,
                    count,
                    limit = self.config.send_back_limit,
                    "message moved by SQS (crashes or timeouts) sent back to the payments queue"
                );
                FromDeadLetters::SentBack(moved.iter().map(|d| d.message_id.clone()).collect())
            }
            Err(why) => {
                tracing::warn!(
                    payment_id = payment.payment_id,
                    error = why,
                    "message moved by SQS not sent back: the next run tries again"
                );
                FromDeadLetters::SendFailed(format!("not sent back: {why}"))
            }
        })
    }

    /// Marks the dead letter's payment `failed` with `reason`, if the copy agrees with it.
    async fn mark_failed(
        &self,
        dead: &DeadLetter,
        reason: &str,
        now_ms: i64,
    ) -> Result<bool, ReconcileError> {
        let marked = lifecycle::mark_failed(
            &self.dynamodb,
            &self.config.payments_table,
            &dead.message,
            reason,
            now_ms,
        )
        .await
        .map_err(ReconcileError::dynamodb(
            "UpdateItem",
            &self.config.payments_table,
        ))?;
        if marked == MarkedFailed::Marked {
            tracing::warn!(
                payment_id = dead.message.payment_id,
                reason,
                "payment marked failed"
            );
        }
        Ok(marked == MarkedFailed::Marked)
    }

    /// The payments in the accepted index accepted before `before_ms` and after `after` (when,
    /// id), oldest first, at most `max_per_run`; true when there are more.
    async fn accepted_before(
        &self,
        before_ms: i64,
        after: Option<&Position>,
    ) -> Result<(Vec<Position>, bool), ReconcileError> {
        let table = &self.config.payments_table;
        let limit = self.config.max_per_run;
        if after.is_some_and(|a| a.0 >= before_ms) {
            return Ok((Vec::new(), false));
        }
        let mut found: Vec<Position> = Vec::new();
        let mut more = false;
        for shard in lifecycle::shards() {
            let query = self
                .dynamodb
                .query()
                .table_name(table)
                .index_name(ACCEPTED_INDEX)
                .expression_attribute_names("#shard", ACCEPTED_SHARD)
                .expression_attribute_names("#at", ACCEPTED_AT)
                .expression_attribute_values(":shard", AttributeValue::S(shard))
                .expression_attribute_values(":before", AttributeValue::N(before_ms.to_string()));
            let query = match after {
                None => query.key_condition_expression("#shard = :shard AND #at < :before"),
                Some((at, _)) => query
                    .key_condition_expression("#shard = :shard AND #at BETWEEN :from AND :before")
                    .expression_attribute_values(":from", AttributeValue::N(at.to_string())),
            };
            let mut pages = query.into_paginator().items().send();
            let mut in_shard = 0;
            while let Some(item) = pages.next().await {
                let item = item.map_err(ReconcileError::dynamodb("Query", table))?;
                let (Some(AttributeValue::S(id)), Some(AttributeValue::N(at))) =
                    (item.get("paymentId"), item.get(ACCEPTED_AT))
                else {
                    continue;
                };
                let position = (at.parse().unwrap_or(0), id.clone());
                // BETWEEN includes `:before`, which the look leaves to the next run.
                if position.0 >= before_ms || after.is_some_and(|a| position <= *a) {
                    continue;
                }
                found.push(position);
                in_shard += 1;
                if in_shard > limit {
                    more = true;
                    break;
                }
            }
        }
        found.sort();
        more |= found.len() > limit;
        found.truncate(limit);
        Ok((found, more))
    }

    /// The payment, read consistently, if it is still `accepted` (the index lags).
    async fn accepted_payment(
        &self,
        payment_id: &str,
    ) -> Result<Option<Candidate>, ReconcileError> {
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
        let n = |k: &str| match item.get(k) {
            Some(AttributeValue::N(v)) => v.parse::<i64>().ok(),
            _ => None,
        };
        let (accepted_at, resent_at) = (n(ACCEPTED_AT).unwrap_or(0), n(RESENT_AT));
        match serde_dynamo::aws_sdk_dynamodb_1::from_item::<PaymentItem>(item) {
            Ok(payment) if payment.status == PaymentStatus::Accepted.as_str() => {
                Ok(Some(Candidate {
                    payment,
                    accepted_at,
                    resent_at,
                }))
            }
            Ok(_) => Ok(None),
            Err(e) => {
                tracing::warn!(payment_id, error = %e, "not a payment item: left alone");
                Ok(None)
            }
        }
    }

    /// Records on each payment sent again when it was ([`RESENT_AT`]). A payment whose record
    /// fails may be sent again by the next run: logged, not an error.
    async fn record_resent(&self, payment_ids: &[String], now_ms: i64) {
        let table = &self.config.payments_table;
        let mut writes = stream::iter(payment_ids)
            .map(|payment_id| async move {
                let written = self
                    .dynamodb
                    .update_item()
                    .table_name(table)
                    .key("paymentId", AttributeValue::S(payment_id.clone()))
                    .update_expression("SET #resent = :now")
                    .condition_expression("attribute_exists(paymentId)")
                    .expression_attribute_names("#resent", RESENT_AT)
                    .expression_attribute_values(":now", AttributeValue::N(now_ms.to_string()))
                    .send()
                    .await;
                (payment_id, written)
            })
            .buffer_unordered(READS_IN_FLIGHT);
        while let Some((payment_id, written)) = writes.next().await {
            if let Err(e) = written {
                tracing::warn!(
                    payment_id,
                    error = %aws_sdk_dynamodb::Error::from(e),
                    "when it was sent again not recorded"
                );
            }
        }
    }

    /// Where the last run stopped, if it did.
    async fn accepted_cursor(&self) -> Result<Option<Position>, ReconcileError> {
        let item = self.reconciler_item(CURSOR_KEY).await?;
        Ok(
            match (item.get("afterAcceptedAt"), item.get("afterPaymentId")) {
                (Some(AttributeValue::N(at)), Some(AttributeValue::S(id))) => {
                    at.parse().ok().map(|at| (at, id.clone()))
                }
                _ => None,
            },
        )
    }

    /// Keeps where this run stopped (`None`: it reached the end, the next starts over).
    async fn keep_cursor(&self, at: Option<&Position>) -> Result<(), ReconcileError> {
        let table = &self.config.accounts_table;
        let update = self
            .dynamodb
            .update_item()
            .table_name(table)
            .key("accountId", AttributeValue::S(CURSOR_KEY.to_owned()));
        let update = match at {
            Some((accepted_at, payment_id)) => update
                .update_expression("SET afterAcceptedAt = :at, afterPaymentId = :id")
                .expression_attribute_values(":at", AttributeValue::N(accepted_at.to_string()))
                .expression_attribute_values(":id", AttributeValue::S(payment_id.clone())),
            None => update.update_expression("REMOVE afterAcceptedAt, afterPaymentId"),
        };
        update
            .send()
            .await
            .map_err(ReconcileError::dynamodb("UpdateItem", table))?;
        Ok(())
    }
}

/// What a payment's copies in the dead-letter queue decided.
#[derive(Debug, Clone, PartialEq, Eq)]
enum FromDeadLetters {
    /// The payment is marked `failed`.
    Marked,
    /// Its message is on the payments queue again; these copies were deleted.
    SentBack(Vec<String>),
    /// Its message could not be sent back (why): the copies stay, the next run tries again.
    SendFailed(String),
    /// Nothing: no copy of its message there.
    Nothing,
}

/// What became of a payment looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Left {
    /// Nothing left to do this run: no longer accepted, marked failed, or sent again recently.
    Done,
    /// Not sent again: the dead-letter queue may hold its message unseen.
    Unsent,
    /// Sent again, if its send succeeds.
    Sending(String),
}

/// Where the cursor of the look goes after a run.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CursorMove {
    /// It stays where it is.
    Keep,
    /// Removed: the next run starts from the oldest.
    Reset,
    /// After this payment.
    To(Position),
}

/// The cursor after a run that started at `cursor`, stopped before the end or not, and looked at
/// `looked` in order (each with whether it was left unsent: its send failed, or it was not
/// sent). A run that reached the end resets it; a run that stopped keeps it before the first
/// payment left unsent, so that the next run looks at that one again.
fn next_cursor(
    cursor: Option<&Position>,
    stopped: bool,
    looked: &[(Position, bool)],
) -> CursorMove {
    if !stopped {
        return if cursor.is_some() {
            CursorMove::Reset
        } else {
            CursorMove::Keep
        };
    }
    let kept = match looked.iter().position(|(_, unsent)| *unsent) {
        Some(0) => None,
        Some(first_unsent) => Some(&looked[first_unsent - 1].0),
        None => looked.last().map(|(at, _)| at),
    };
    kept.map_or(CursorMove::Keep, |at| CursorMove::To(at.clone()))
}

pub(super) fn millis(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(accepted_at: i64, resent_at: Option<i64>) -> Candidate {
        let payment: PaymentItem = serde_json::from_value(serde_json::json!({
            "paymentId": "p", "accountId": "a", "amountCents": 5, "currency": "EUR",
            "status": "accepted", "createdAt": 0, "callerId": "c", "requestHash": "h"
        }))
        .unwrap();
        Candidate {
            payment,
            accepted_at,
            resent_at,
        }
    }

    fn at(n: i64) -> Position {
        (n, format!("p{n}"))
    }

    #[test]
    fn a_stopped_look_keeps_its_cursor_before_the_first_payment_left_unsent() {
        let old = at(0);
        // Nothing left unsent: after the last looked at.
        assert_eq!(
            next_cursor(Some(&old), true, &[(at(1), false), (at(2), false)]),
            CursorMove::To(at(2))
        );
        // The second left unsent (its send failed, or the dead-letter queue not seen whole):
        // the cursor stays after the first, and the next run looks at the second again.
        assert_eq!(
            next_cursor(
                Some(&old),
                true,
                &[(at(1), false), (at(2), true), (at(3), false)]
            ),
            CursorMove::To(at(1))
        );
        // The first left unsent: the cursor does not move.
        assert_eq!(
            next_cursor(Some(&old), true, &[(at(1), true), (at(2), false)]),
            CursorMove::Keep
        );
        assert_eq!(next_cursor(None, true, &[(at(1), true)]), CursorMove::Keep);
        // A look that reached the end starts over: nothing is skipped.
        assert_eq!(
            next_cursor(Some(&old), false, &[(at(1), true)]),
            CursorMove::Reset
        );
        assert_eq!(next_cursor(None, false, &[]), CursorMove::Keep);
        assert_eq!(next_cursor(Some(&old), true, &[]), CursorMove::Keep);
    }

    #[test]
    fn a_payment_is_sent_again_once_per_interval_and_again_after_a_reopen() {
        let since = 1_000;
        assert!(!candidate(0, None).resent_since(since));
        assert!(!candidate(0, Some(999)).resent_since(since), "long ago");
        assert!(candidate(0, Some(1_000)).resent_since(since));
        // Reopened after it was sent again: a new acceptance, sent again at once.
        assert!(!candidate(2_000, Some(1_500)).resent_since(since));
    }
}
