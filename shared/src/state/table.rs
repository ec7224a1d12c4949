//! The table of transitions: what each transition of the [state machine](super) does from each
//! state a record can be in. It is the specification the pure functions of [`super`] are tested
//! against, and the one every backend is tested against in the backend suite (`shared/tests`).
//!
//! Every row starts from one [`Before`] state of a key whose record (if any) was written by the
//! attempt with token [`OWN`] for payload hash [`SAME`], with [`Before::attempts`] failed attempts;
//! applies one [`Event`]; and ends as [`After`] says. [`Before::record`] builds the stored record
//! of a row at a given instant, [`Event::apply`] runs the event through the pure functions.

use super::{
    Blocked, IdempotencyRecord, Put, Status, Step, Update, Updated, acquire, classify,
    classify_on_item, commit, commit_on_item, record_failure, update,
};
use crate::payload::PayloadHash;

/// The owner token of the attempt that wrote the stored record.
pub const OWN: &str = "0123456789abcdef0123456789abcdef";
/// An owner token of another attempt (one whose lease was taken over).
pub const STALE: &str = "fedcba9876543210fedcba9876543210";
/// The owner token of the event's new attempt.
pub const NEW: &str = "00112233445566778899aabbccddeeff";
/// The stored record's payload hash.
pub const SAME: &str = "sha256:same";
/// Another payload's hash.
pub const OTHER: &str = "sha256:other";
/// How long a record lives, and how long before `now` an expired one expired, in seconds.
pub const EXPIRY_SECONDS: i64 = 3_600;
/// How long a live lease lasts after `now`, and how long before `now` an ended one ended, in ms.
pub const LEASE_MS: i64 = 60_000;

/// The state a key starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Before {
    /// No record.
    Absent,
    /// In progress, its lease live.
    Held,
    /// In progress, its lease ended (the record not expired).
    LeaseEnded,
    /// Completed, not expired.
    Completed,
    /// Completed, expired (the TTL sweeper has not deleted it yet).
    CompletedExpired,
    /// Failed once, not expired.
    Failed,
    /// Failed once, expired.
    FailedExpired,
}

impl Before {
    /// Every state, in order.
    pub const ALL: [Before; 7] = [
        Before::Absent,
        Before::Held,
        Before::LeaseEnded,
        Before::Completed,
        Before::CompletedExpired,
        Before::Failed,
        Before::FailedExpired,
    ];

    /// The failed attempts the stored record carries.
    pub fn attempts(self) -> u32 {
        matches!(self, Before::Failed | Before::FailedExpired) as u32
    }

    /// The stored record of this state at `now_ms`, under `key`.
    pub fn record(self, key: &str, now_ms: i64) -> Option<IdempotencyRecord> {
        let now_s = now_ms.div_euclid(1000);
        let (status, expires_at, lease_until_ms) = match self {
            Before::Absent => return None,
            Before::Held => (
                Status::InProgress,
                now_s + EXPIRY_SECONDS,
                Some(now_ms + LEASE_MS),
            ),
            Before::LeaseEnded => (
                Status::InProgress,
                now_s + EXPIRY_SECONDS,
                Some(now_ms - LEASE_MS),
            ),
            Before::Completed => (Status::Completed, now_s + EXPIRY_SECONDS, None),
            Before::CompletedExpired => (Status::Completed, now_s - EXPIRY_SECONDS, None),
            Before::Failed => (Status::Failed, now_s + EXPIRY_SECONDS, None),
            Before::FailedExpired => (Status::Failed, now_s - EXPIRY_SECONDS, None),
        };
        Some(IdempotencyRecord {
            key: key.to_owned(),
            status,
            expires_at,
            lease_until_ms,
            owner: Some(OWN.to_owned()),
            payload_hash: SAME.to_owned(),
            attempts: self.attempts(),
            last_error: (self.attempts() > 0).then(|| "boom".to_owned()),
            result: (status == Status::Completed).then(|| "42".to_owned()),
            result_omitted: false,
        })
    }
}

/// A transition, as a backend is asked for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// [`super::acquire`] by a new attempt with the stored payload.
    AcquireSame,
    /// [`super::acquire`] by a new attempt with another payload.
    AcquireOther,
    /// [`Update::Complete`] by the stored record's owner.
    CompleteOwn,
    /// [`Update::Complete`] by an attempt whose lease was taken over.
    CompleteStale,
    /// [`Update::Fail`] by the stored record's owner.
    FailOwn,
    /// [`Update::Fail`] by an attempt whose lease was taken over.
    FailStale,
    /// [`Update::Fail`] by the stored record's owner, not counted (`counted: false`: a failure
    /// that is not the message's fault).
    FailOwnNotCounted,
    /// [`Update::ResetAttempts`].
    ResetAttempts,
    /// [`super::commit`] of a completed record with the stored payload (transactional mode).
    CommitSame,
    /// [`super::commit`] with another payload.
    CommitOther,
    /// [`super::record_failure`] with the stored payload (transactional mode).
    RecordFailureSame,
    /// [`super::record_failure`] with another payload.
    RecordFailureOther,
    /// [`super::record_failure`] by the attempt whose token the stored record carries: an SDK
    /// retry of a failure whose first answer was lost.
    RecordFailureOwn,
}

impl Event {
    /// True for the transactional mode's events (only a transactional backend takes them).
    pub fn is_transactional(self) -> bool {
        matches!(
            self,
            Event::CommitSame
                | Event::CommitOther
                | Event::RecordFailureSame
                | Event::RecordFailureOther
                | Event::RecordFailureOwn
        )
    }

    /// The payload hash the event carries.
    pub fn payload_hash(self) -> &'static str {
        match self {
            Event::AcquireOther | Event::CommitOther | Event::RecordFailureOther => OTHER,
            _ => SAME,
        }
    }

    /// The new record an acquire, a commit or a recorded failure writes at `now_ms`.
    pub fn new_record(self, key: &str, now_ms: i64) -> IdempotencyRecord {
        let now_s = now_ms.div_euclid(1000);
        let (status, lease_until_ms, last_error) = match self {
            Event::CommitSame | Event::CommitOther => (Status::Completed, None, None),
            Event::RecordFailureSame | Event::RecordFailureOther | Event::RecordFailureOwn => {
                (Status::Failed, None, Some("failed again".to_owned()))
            }
            _ => (Status::InProgress, Some(now_ms + LEASE_MS), None),
        };
        let owner = match self {
            Event::RecordFailureOwn => OWN,
            _ => NEW,
        };
        IdempotencyRecord {
            key: key.to_owned(),
            status,
            expires_at: now_s + EXPIRY_SECONDS,
            lease_until_ms,
            owner: Some(owner.to_owned()),
            payload_hash: self.payload_hash().to_owned(),
            attempts: 0,
            last_error,
            result: None,
            result_omitted: false,
        }
    }

    /// The update a fenced or reset event sends at `now_ms`.
    pub fn update(self, now_ms: i64) -> Option<Update> {
        let complete = |owner: &str| Update::Complete {
            owner: owner.to_owned(),
            payload_hash: SAME.to_owned(),
            expires_at: now_ms.div_euclid(1000) + EXPIRY_SECONDS,
            result: Some("7".to_owned()),
            result_omitted: false,
        };
        let fail = |owner: &str, counted: bool| Update::Fail {
            owner: owner.to_owned(),
            error: "failed".to_owned(),
            counted,
        };
        Some(match self {
            Event::CompleteOwn => complete(OWN),
            Event::CompleteStale => complete(STALE),
            Event::FailOwn => fail(OWN, true),
            Event::FailStale => fail(STALE, true),
            Event::FailOwnNotCounted => fail(OWN, false),
            Event::ResetAttempts => Update::ResetAttempts,
            _ => return None,
        })
    }

    /// What the pure functions of [`super`] make of this event on `stored` at `now_ms`, and the
    /// record stored after it.
    pub fn apply(
        self,
        stored: Option<&IdempotencyRecord>,
        key: &str,
        now_ms: i64,
    ) -> (After, Option<IdempotencyRecord>) {
        let hash = PayloadHash::stored(self.payload_hash());
        let kept = || stored.cloned();
        if let Some(change) = self.update(now_ms) {
            let t = update(stored, &change);
            let after = t.write.as_ref().or(stored);
            return (
                After::of_update(&change, &t.answer, after),
                t.write.or_else(kept),
            );
        }
        let new = self.new_record(key, now_ms);
        match self {
            Event::AcquireSame | Event::AcquireOther => {
                let t = acquire(stored, &new, now_ms);
                let after = match t.answer {
                    Put::Written { attempts, replaced } => After::Started {
                        attempts,
                        replaced: replaced.is_some(),
                    },
                    Put::Exists(existing) => After::refused(classify(existing, &hash, now_ms)),
                };
                (after, t.write.or_else(kept))
            }
            Event::CommitSame | Event::CommitOther => {
                committed(commit(stored, &new, now_ms), stored, |existing| {
                    classify(existing, &hash, now_ms)
                })
            }
            _ => match record_failure(stored, &new, now_ms) {
                Step::Write(failed) => (
                    After::Failed {
                        attempts: failed.attempts,
                    },
                    Some(failed),
                ),
                Step::Held(existing) => (After::refused(classify(existing, &hash, now_ms)), kept()),
            },
        }
    }

    /// What [`commit_on_item`] and [`classify_on_item`] make of a commit event on `stored`, the
    /// record on an item, at `now_ms` (the rows of [`ON_ITEM`]), and the record the item carries
    /// after it.
    pub fn apply_on_item(
        self,
        stored: Option<&IdempotencyRecord>,
        key: &str,
        now_ms: i64,
    ) -> (After, Option<IdempotencyRecord>) {
        let hash = PayloadHash::stored(self.payload_hash());
        let step = commit_on_item(stored, &self.new_record(key, now_ms));
        committed(step, stored, |existing| {
            classify_on_item(existing, &hash, now_ms)
        })
    }
}

/// A commit's row: completed when `step` writes, else the refusal `blocked` reads from the
/// record that holds the key (and `stored` stays).
fn committed(
    step: Step,
    stored: Option<&IdempotencyRecord>,
    blocked: impl FnOnce(IdempotencyRecord) -> Blocked,
) -> (After, Option<IdempotencyRecord>) {
    match step {
        Step::Write(completed) => (After::Completed, Some(completed)),
        Step::Held(existing) => (After::refused(blocked(existing)), stored.cloned()),
    }
}

/// What a transition did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    /// An acquire wrote an in-progress record carrying `attempts`; `replaced` when it took over a
    /// live record of another payload.
    Started {
        /// Failed attempts carried over.
        attempts: u32,
        /// A live record of another payload was replaced.
        replaced: bool,
    },
    /// Refused: a duplicate of completed work ([`Blocked::Duplicate`]).
    Duplicate,
    /// Refused: the key holds other work ([`Blocked::Mismatch`]).
    Mismatch,
    /// Refused: an attempt holds the key ([`Blocked::Held`]).
    Held,
    /// The record is completed (now, or by an earlier try of the same update).
    Completed,
    /// The record is failed with `attempts` failed attempts.
    Failed {
        /// Failed attempts after the event.
        attempts: u32,
    },
    /// The failed record's attempts are back to 0.
    AttemptsReset,
    /// Nothing applied; the stored record (or its absence) stays.
    Unchanged,
}

impl After {
    /// The row's answer for a refusal classified as `blocked`.
    pub fn refused(blocked: Blocked) -> Self {
        match blocked {
            Blocked::Duplicate { .. } => After::Duplicate,
            Blocked::Mismatch { .. } => After::Mismatch,
            Blocked::Held { .. } => After::Held,
        }
    }

    /// The row's answer for `update` answered `updated`, with `after` the record stored after
    /// it.
    pub fn of_update(
        update: &Update,
        updated: &Updated,
        after: Option<&IdempotencyRecord>,
    ) -> Self {
        match (updated, after) {
            (Updated::NotApplied, _) | (Updated::Applied { .. }, None) => After::Unchanged,
            (Updated::Applied { .. }, Some(record)) => match record.status {
                Status::Completed => After::Completed,
                Status::Failed if matches!(update, Update::ResetAttempts) => After::AttemptsReset,
                Status::Failed => After::Failed {
                    attempts: record.attempts,
                },
                Status::InProgress => After::Unchanged,
            },
        }
    }
}

/// One row: from `before`, `event` does `after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    /// The state the key starts from.
    pub before: Before,
    /// The transition.
    pub event: Event,
    /// What it does.
    pub after: After,
}

const fn row(before: Before, event: Event, after: After) -> Row {
    Row {
        before,
        event,
        after,
    }
}

const fn started(attempts: u32, replaced: bool) -> After {
    After::Started { attempts, replaced }
}

const fn failed(attempts: u32) -> After {
    After::Failed { attempts }
}

use After as A;
use Before as B;
use Event as E;

/// Every transition from every state.
#[rustfmt::skip]
pub const TRANSITIONS: &[Row] = &[
    // Acquire: an in-progress record, unless a live lease or live completed work holds the key.
    row(B::Absent,           E::AcquireSame,  started(0, false)),
    row(B::Held,             E::AcquireSame,  A::Held),
    row(B::LeaseEnded,       E::AcquireSame,  started(0, false)),
    row(B::Completed,        E::AcquireSame,  A::Duplicate),
    row(B::CompletedExpired, E::AcquireSame,  started(0, false)),
    row(B::Failed,           E::AcquireSame,  started(1, false)),
    row(B::FailedExpired,    E::AcquireSame,  started(0, false)),
    // ... with another payload: a corrected message takes a failed or abandoned key over.
    row(B::Absent,           E::AcquireOther, started(0, false)),
    row(B::Held,             E::AcquireOther, A::Mismatch),
    row(B::LeaseEnded,       E::AcquireOther, started(0, true)),
    row(B::Completed,        E::AcquireOther, A::Mismatch),
    row(B::CompletedExpired, E::AcquireOther, started(0, false)),
    row(B::Failed,           E::AcquireOther, started(0, true)),
    row(B::FailedExpired,    E::AcquireOther, started(0, false)),
    // Complete, fenced: only the owner's in-progress record; its own completion again answers
    // applied (an SDK retry).
    row(B::Absent,           E::CompleteOwn,  A::Unchanged),
    row(B::Held,             E::CompleteOwn,  A::Completed),
    row(B::LeaseEnded,       E::CompleteOwn,  A::Completed),
    row(B::Completed,        E::CompleteOwn,  A::Completed),
    row(B::CompletedExpired, E::CompleteOwn,  A::Completed),
    row(B::Failed,           E::CompleteOwn,  A::Unchanged),
    row(B::FailedExpired,    E::CompleteOwn,  A::Unchanged),
    row(B::Absent,           E::CompleteStale, A::Unchanged),
    row(B::Held,             E::CompleteStale, A::Unchanged),
    row(B::LeaseEnded,       E::CompleteStale, A::Unchanged),
    row(B::Completed,        E::CompleteStale, A::Unchanged),
    row(B::CompletedExpired, E::CompleteStale, A::Unchanged),
    row(B::Failed,           E::CompleteStale, A::Unchanged),
    row(B::FailedExpired,    E::CompleteStale, A::Unchanged),
    // Fail, fenced the same way: one more attempt.
    row(B::Absent,           E::FailOwn,      A::Unchanged),
    row(B::Held,             E::FailOwn,      failed(1)),
    row(B::LeaseEnded,       E::FailOwn,      failed(1)),
    row(B::Completed,        E::FailOwn,      A::Unchanged),
    row(B::CompletedExpired, E::FailOwn,      A::Unchanged),
    row(B::Failed,           E::FailOwn,      failed(1)),
    row(B::FailedExpired,    E::FailOwn,      failed(1)),
    row(B::Absent,           E::FailStale,    A::Unchanged),
    row(B::Held,             E::FailStale,    A::Unchanged),
    row(B::LeaseEnded,       E::FailStale,    A::Unchanged),
    row(B::Completed,        E::FailStale,    A::Unchanged),
    row(B::CompletedExpired, E::FailStale,    A::Unchanged),
    row(B::Failed,           E::FailStale,    A::Unchanged),
    row(B::FailedExpired,    E::FailStale,    A::Unchanged),
    // ... not counted (not the message's fault): failed, its attempts as they were; its own
    // failure again answers applied with the stored count.
    row(B::Absent,           E::FailOwnNotCounted, A::Unchanged),
    row(B::Held,             E::FailOwnNotCounted, failed(0)),
    row(B::LeaseEnded,       E::FailOwnNotCounted, failed(0)),
    row(B::Completed,        E::FailOwnNotCounted, A::Unchanged),
    row(B::CompletedExpired, E::FailOwnNotCounted, A::Unchanged),
    row(B::Failed,           E::FailOwnNotCounted, failed(1)),
    row(B::FailedExpired,    E::FailOwnNotCounted, failed(1)),
    // Reset attempts: a failed record only (its message went to the dead-letter queue).
    row(B::Absent,           E::ResetAttempts, A::Unchanged),
    row(B::Held,             E::ResetAttempts, A::Unchanged),
    row(B::LeaseEnded,       E::ResetAttempts, A::Unchanged),
    row(B::Completed,        E::ResetAttempts, A::Unchanged),
    row(B::CompletedExpired, E::ResetAttempts, A::Unchanged),
    row(B::Failed,           E::ResetAttempts, A::AttemptsReset),
    row(B::FailedExpired,    E::ResetAttempts, A::AttemptsReset),
    // Commit (transactional mode): written completed at once, under acquire's condition.
    row(B::Absent,           E::CommitSame,   A::Completed),
    row(B::Held,             E::CommitSame,   A::Held),
    row(B::LeaseEnded,       E::CommitSame,   A::Completed),
    row(B::Completed,        E::CommitSame,   A::Duplicate),
    row(B::CompletedExpired, E::CommitSame,   A::Completed),
    row(B::Failed,           E::CommitSame,   A::Completed),
    row(B::FailedExpired,    E::CommitSame,   A::Completed),
    row(B::Absent,           E::CommitOther,  A::Completed),
    row(B::Held,             E::CommitOther,  A::Mismatch),
    row(B::LeaseEnded,       E::CommitOther,  A::Completed),
    row(B::Completed,        E::CommitOther,  A::Mismatch),
    row(B::CompletedExpired, E::CommitOther,  A::Completed),
    row(B::Failed,           E::CommitOther,  A::Completed),
    row(B::FailedExpired,    E::CommitOther,  A::Completed),
    // A failed attempt of the transactional mode: attempts carried like acquire's.
    row(B::Absent,           E::RecordFailureSame,  failed(1)),
    row(B::Held,             E::RecordFailureSame,  A::Held),
    row(B::LeaseEnded,       E::RecordFailureSame,  failed(1)),
    row(B::Completed,        E::RecordFailureSame,  A::Duplicate),
    row(B::CompletedExpired, E::RecordFailureSame,  failed(1)),
    row(B::Failed,           E::RecordFailureSame,  failed(2)),
    row(B::FailedExpired,    E::RecordFailureSame,  failed(1)),
    row(B::Absent,           E::RecordFailureOther, failed(1)),
    row(B::Held,             E::RecordFailureOther, A::Mismatch),
    row(B::LeaseEnded,       E::RecordFailureOther, failed(1)),
    row(B::Completed,        E::RecordFailureOther, A::Mismatch),
    row(B::CompletedExpired, E::RecordFailureOther, failed(1)),
    row(B::Failed,           E::RecordFailureOther, failed(1)),
    row(B::FailedExpired,    E::RecordFailureOther, failed(1)),
    // The same failure again (an SDK retry whose first answer was lost): a failed record that
    // carries its token shows it recorded, and it is counted once.
    row(B::Absent,           E::RecordFailureOwn,   failed(1)),
    row(B::Held,             E::RecordFailureOwn,   A::Held),
    row(B::LeaseEnded,       E::RecordFailureOwn,   failed(1)),
    row(B::Completed,        E::RecordFailureOwn,   A::Duplicate),
    row(B::CompletedExpired, E::RecordFailureOwn,   failed(1)),
    row(B::Failed,           E::RecordFailureOwn,   failed(1)),
    row(B::FailedExpired,    E::RecordFailureOwn,   failed(1)),
];

/// The commits of a record that rides on an item written whole (the inline mode's new item, a
/// record carried by a `Put`: [`commit_on_item`]), from the states a record on an item can be
/// in (an item carries only completed records). Unlike [`TRANSITIONS`]' commit rows, an expired
/// record still holds the key: the item is the work's effect, and never rewritten.
#[rustfmt::skip]
pub const ON_ITEM: &[Row] = &[
    row(B::Absent,           E::CommitSame,  A::Completed),
    row(B::Absent,           E::CommitOther, A::Completed),
    row(B::Completed,        E::CommitSame,  A::Duplicate),
    row(B::Completed,        E::CommitOther, A::Mismatch),
    row(B::CompletedExpired, E::CommitSame,  A::Duplicate),
    row(B::CompletedExpired, E::CommitOther, A::Mismatch),
];
