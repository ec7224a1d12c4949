//! The engine in the modes that write their record completed at once, with the handler's
//! effect: the transactional mode's [`transact`](Idempotency::transact) and
//! [`peek`](Idempotency::peek), and the inline mode's [`put_inline`](Idempotency::put_inline),
//! a commit of one write that carries the record ([`crate::inline`]).

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use serde::Serialize;

use super::Idempotency;
use crate::error::panic_message;
use crate::inline::InlinePut;
use crate::lease::{AcquireError, Acquired};
use crate::payload::PayloadHash;
use crate::state::{IdempotencyRecord, Status, classify, classify_on_item, new_owner_token};
use crate::store::{LimitError, StoreError, TransactionalBackend};
use crate::time::Deadline;
use crate::transaction::{Attempt, Peeked, TransactError, Transacted, Transaction, answer, settle};

impl<B: TransactionalBackend> Idempotency<B> {
    /// Runs `work` at most once per `key` (in effect) in transactional mode: `work` returns its
    /// writes, and they commit with the idempotency record in one request (see the
    /// [module](crate::transaction)). `finish_by` bounds the tries of the commit.
    pub async fn transact<T, E, F, Fut>(
        &self,
        key: &str,
        payload: &[u8],
        finish_by: Option<Deadline>,
        work: F,
    ) -> Result<Transacted<T>, TransactError<E>>
    where
        T: Serialize,
        E: fmt::Display,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Transaction<T, B::Write>, E>>,
    {
        self.transact_hashed(key, &PayloadHash::of_bytes(payload), finish_by, work)
            .await
    }

    /// [`transact`](Self::transact) with a payload hash computed by the caller.
    ///
    /// A panic in `work` is recorded as a failed attempt and then resumed.
    pub async fn transact_hashed<T, E, F, Fut>(
        &self,
        key: &str,
        payload_hash: &PayloadHash,
        finish_by: Option<Deadline>,
        work: F,
    ) -> Result<Transacted<T>, TransactError<E>>
    where
        T: Serialize,
        E: fmt::Display,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Transaction<T, B::Write>, E>>,
    {
        self.transact_at(key, payload_hash, finish_by, None, work, |_| true)
            .await
    }

    /// Runs `work` at most once per `key` (in effect) in inline mode: `work` returns one new
    /// item, and it is written with the idempotency record on it, in one conditional write: the
    /// commit of a [`Transaction`] of that one write, which carries the record (see
    /// [`crate::inline`]). Answers as [`transact`](Self::transact) does.
    pub async fn put_inline<T, I, E, F, Fut>(
        &self,
        key: &str,
        payload: &[u8],
        work: F,
    ) -> Result<Transacted<T>, TransactError<E>>
    where
        T: Serialize,
        I: Into<B::Write>,
        E: fmt::Display,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<InlinePut<T, I>, E>>,
    {
        let work = || async { work().await.map(Transaction::from) };
        self.transact(key, payload, None, work).await
    }

    /// [`transact_hashed`](Self::transact_hashed) for an attempt that knows where its record
    /// would ride (`item`: the item of the message's carried write, from the batch wrapper's
    /// [item lookup](crate::batch::Inline::with_item_lookup)). When `work` fails, that item is
    /// read first ([`TransactionalBackend::record_on_item`]): a record on it answers for the key
    /// (the work was done by another delivery: a duplicate; another payload: a mismatch), and
    /// the failure is not counted. So a key whose work is done is never dead-lettered for a
    /// later failure, and a success costs nothing more than its write: the count of failed
    /// attempts in the engine's table is never ended by a success, only never reached again.
    /// A failure of `work` that `counted` says is not an attempt (not the message's fault: a
    /// [`TransientError`](crate::error::TransientError)) is not recorded: the key's record and
    /// its count stay as they were.
    pub(crate) async fn transact_at<T, E, F, Fut>(
        &self,
        key: &str,
        payload_hash: &PayloadHash,
        finish_by: Option<Deadline>,
        item: Option<&B::Write>,
        work: F,
        counted: impl FnOnce(&E) -> bool,
    ) -> Result<Transacted<T>, TransactError<E>>
    where
        T: Serialize,
        E: fmt::Display,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Transaction<T, B::Write>, E>>,
    {
        let now_ms = self.clock.now_ms();
        let mut record = self.completed_record(self.stored_key(key), payload_hash, now_ms);
        let attempt = Attempt {
            backend: &self.backend,
            clock: self.clock.as_ref(),
            key,
            payload_hash,
        };
        // A panic in `work` is recorded as a failed attempt and then resumed.
        let transaction = match AssertUnwindSafe(work()).catch_unwind().await {
            Ok(Ok(transaction)) => transaction,
            Ok(Err(error)) => {
                if let Some(done) = self
                    .done_on_item(key, &record.key, payload_hash, item)
                    .await
                {
                    return answer(done);
                }
                if !counted(&error) {
                    return Err(TransactError::Failed {
                        error,
                        attempts: None,
                    });
                }
                let noted = attempt.note_failure(&record, &error.to_string()).await;
                return settle(noted, |attempts| TransactError::Failed { error, attempts });
            }
            Err(panic) => {
                let message = format!("panicked: {}", panic_message(&panic));
                attempt.note_failure(&record, &message).await;
                std::panic::resume_unwind(panic)
            }
        };
        // The code's error, found before any request: never counted, never permanent.
        if transaction.is_new_item()
            && let Some(problem) = transaction
                .writes()
                .iter()
                .find_map(|write| self.backend.new_item_problem(write))
        {
            tracing::error!(
                key,
                problem,
                "the inline item is not a new item: nothing written"
            );
            return Err(TransactError::Store(StoreError::Misconfigured {
                table: String::new(),
                problem,
            }));
        }
        let (output, writes, carrier) = transaction.into_carried_parts();
        self.set_result(&mut record, &output);
        let mut checked = self.backend.check(&record, &writes, carrier);
        // A stored result shares the request with the effect (and a carried one its item):
        // dropped when the two do not fit, so that the effect is still written.
        let crowded = match &checked {
            Err(LimitError::ItemTooLarge { index, .. }) => carrier == Some(*index),
            Err(LimitError::TooLarge { .. }) => true,
            _ => false,
        };
        if crowded && record.result.is_some() {
            let limit = checked.as_ref().err().map(ToString::to_string);
            tracing::warn!(
                key,
                limit,
                "the writes and the result do not fit together: the result is not stored"
            );
            record.result = None;
            record.result_omitted = true;
            checked = self.backend.check(&record, &writes, carrier);
        }
        // Found before any request, and permanent: not counted as an attempt.
        if let Err(error) = checked {
            return Err(TransactError::Limit {
                error,
                attempts: None,
            });
        }
        attempt
            .commit(&record, output, &writes, carrier, finish_by, now_ms)
            .await
    }

    /// What the record on `item` says of `key` ([`classify_on_item`]), when the item exists and
    /// carries one: the work was done by another delivery. `None` when there is no item to read,
    /// it carries no record, or the read fails (logged: the failure is then counted, as without
    /// an item).
    async fn done_on_item(
        &self,
        key: &str,
        stored: &str,
        payload_hash: &PayloadHash,
        item: Option<&B::Write>,
    ) -> Option<Result<Acquired, AcquireError>> {
        let found = match self.backend.record_on_item(stored, item?).await {
            Ok(found) => found?,
            Err(e) => {
                tracing::warn!(key, error = %e, "could not read the item the work writes");
                return None;
            }
        };
        let now_ms = self.clock.now_ms();
        Some(Acquired::blocked(
            key,
            classify_on_item(found, payload_hash, now_ms),
        ))
    }

    /// Reads where `key` stands, from the local cache or with one read: completed (a duplicate,
    /// answered without running anything), held, or the failed attempts so far. The transactional
    /// batch wrapper (and the inline one with
    /// [`with_attempts_read`](crate::batch::Inline::with_attempts_read)) peeks before a
    /// redelivery (receive count above 1): a redelivered duplicate costs this read
    /// instead of a cancelled transaction, and a retried record's handler is told its attempt. A
    /// first delivery goes straight to [`transact`](Self::transact).
    pub async fn peek(
        &self,
        key: &str,
        payload_hash: &PayloadHash,
    ) -> Result<Peeked, AcquireError> {
        let stored = self.stored_key(key);
        let now_ms = self.clock.now_ms();
        let found = match self.backend.get(&stored, now_ms).await? {
            None => return Ok(Peeked::Attempts(0)),
            Some(record) if record.is_replaceable(now_ms) => {
                let attempts = if record.carries_attempts_to(payload_hash.as_str(), now_ms) {
                    record.attempts
                } else {
                    0
                };
                return Ok(Peeked::Attempts(attempts));
            }
            Some(record) => Acquired::blocked(key, classify(record, payload_hash, now_ms))?,
        };
        Ok(match found {
            Acquired::Duplicate { result, .. } => Peeked::Duplicate { result },
            Acquired::InProgress { lease_until_ms } => Peeked::InProgress { lease_until_ms },
            Acquired::Started(_) => unreachable!("a stored record never starts an attempt"),
        })
    }

    /// The record a new attempt writes completed at once (transactional and inline modes), under
    /// its own owner token, without a result yet.
    pub(crate) fn completed_record(
        &self,
        stored: String,
        payload_hash: &PayloadHash,
        now_ms: i64,
    ) -> IdempotencyRecord {
        IdempotencyRecord {
            key: stored,
            status: Status::Completed,
            expires_at: self.expires_at(now_ms),
            lease_until_ms: None,
            owner: Some(new_owner_token()),
            payload_hash: payload_hash.as_str().to_owned(),
            attempts: 0,
            last_error: None,
            result: None,
            result_omitted: false,
        }
    }

    /// Stores `output` as the record's result, unless it is too large for the store's item.
    pub(crate) fn set_result<T: Serialize>(&self, record: &mut IdempotencyRecord, output: &T) {
        let json = serde_json::to_string(output).ok().filter(|j| j != "null");
        match (json, self.backend.max_result_bytes(&record.key)) {
            (Some(json), Some(max)) if json.len() > max => {
                tracing::warn!(
                    key = record.key,
                    result_bytes = json.len(),
                    max_bytes = max,
                    "result too large for the idempotency record: not stored"
                );
                record.result_omitted = true;
            }
            (json, _) => record.result = json,
        }
    }
}
