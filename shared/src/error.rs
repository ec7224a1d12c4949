//! Why a record failed: the error types every other module shares.
//!
//! This module is a leaf: it depends on nothing of the batch processing, so that the batch
//! processor, the visibility backoff and the dead-letter queue can all use it without depending
//! on each other.

use std::any::Any;
use std::fmt;
use std::time::Duration;

use crate::key::KeyError;
use crate::state::Status;
use crate::store::{BoxError, StoreError};

/// Why one record failed. Every variant fails that record only.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The body is missing or does not deserialize to the handler's type.
    #[error("message {message_id}: body is not a valid {type_name}: {cause}")]
    Body {
        /// The message id.
        message_id: String,
        /// The expected type.
        type_name: &'static str,
        /// Why it does not deserialize.
        cause: String,
    },
    /// No idempotency key could be taken from the message.
    #[error("message {message_id}: no idempotency key: {source}")]
    Key {
        /// The message id.
        message_id: String,
        /// Why.
        source: KeyError,
    },
    /// The handler returned an error; the record is retried.
    #[error("handler failed: {0}")]
    Handler(BoxError),
    /// The handler said the error is permanent (a retry cannot succeed): with a dead-letter
    /// queue on the processor, the message goes straight to it.
    #[error("permanent failure: {0}")]
    Permanent(BoxError),
    /// The handler said the failure is not the record's fault ([`TransientError`]: a dependency
    /// is unavailable, throttled or timed out): retried, never counted against the attempt
    /// budget, never permanent.
    #[error("transient failure: {0}")]
    Transient(BoxError),
    /// The handler panicked.
    #[error("handler panicked: {0}")]
    Panicked(String),
    /// Not started: too little time was left before the deadline.
    #[error("not started: less than {margin:?} left before the invocation's deadline")]
    DeadlineNear {
        /// The configured start margin.
        margin: Duration,
    },
    /// Started but not finished before the deadline; cancelled so that the response can still be
    /// sent.
    #[error("cancelled: still running {margin:?} before the invocation's deadline")]
    DeadlineReached {
        /// How long before the deadline it was cancelled.
        margin: Duration,
    },
    /// Not run: an earlier message of the same FIFO message group failed.
    #[error("not run: message {failed} of message group `{group_id}` failed before it")]
    GroupBlocked {
        /// The message group.
        group_id: String,
        /// The message that failed first.
        failed: String,
    },
    /// Not run: an earlier message failed and the batch runs in strict order.
    #[error("not run: message {failed} failed before it (strict order)")]
    BatchStopped {
        /// The message that failed first.
        failed: String,
    },
    /// Not run: the same message id came earlier in the batch; that record decides its fate.
    #[error("not run: message id repeated in the batch (first at record {first_index})")]
    Repeated {
        /// Position of the first record with this message id.
        first_index: usize,
    },
    /// Another invocation holds the message's idempotency key; retry after its lease.
    #[error("in progress in another invocation until {lease_until_ms} (epoch ms)")]
    InProgress {
        /// When the other invocation's lease ends, epoch milliseconds.
        lease_until_ms: i64,
    },
    /// A record of another payload holds the idempotency key: completed (the key was used for
    /// other work: permanent), or in progress (another attempt runs other work under it: retried,
    /// since that attempt may fail and free the key).
    #[error("idempotency key `{key}` was already used with a different payload ({stored} record)")]
    PayloadMismatch {
        /// The key.
        key: String,
        /// The state of the record that holds the key.
        stored: Status,
    },
    /// The idempotency store failed: the record is not treated as processed.
    #[error(transparent)]
    Store(StoreError),
    /// A failure recorded in the idempotency store, with the key's failed attempts so far
    /// (this one included): the count the attempt budget and the backoff go by.
    #[error("{error} (failed attempt {attempts})")]
    Attempt {
        /// Failed attempts of the key, this one included.
        attempts: u32,
        /// The failure.
        error: Box<RecordError>,
    },
}

impl RecordError {
    /// Wraps any error as a handler failure. A [`PermanentError`] becomes
    /// [`RecordError::Permanent`], a [`TransientError`] [`RecordError::Transient`], and a boxed
    /// `RecordError` is kept as it is.
    pub fn handler(error: impl Into<BoxError>) -> Self {
        let error = error.into();
        let error = match error.downcast::<PermanentError>() {
            Ok(permanent) => return RecordError::Permanent(permanent.0),
            Err(other) => other,
        };
        let error = match error.downcast::<TransientError>() {
            Ok(transient) => return RecordError::Transient(transient.0),
            Err(other) => other,
        };
        match error.downcast::<RecordError>() {
            Ok(record) => *record,
            Err(other) => RecordError::Handler(other),
        }
    }

    /// A permanent failure.
    pub fn permanent(error: impl Into<BoxError>) -> Self {
        RecordError::Permanent(error.into())
    }

    /// The failure itself, without the attempt count of [`RecordError::Attempt`].
    pub fn cause(&self) -> &RecordError {
        match self {
            RecordError::Attempt { error, .. } => error.cause(),
            other => other,
        }
    }

    /// The key's failed attempts recorded by the idempotency store, when this failure was
    /// recorded there.
    pub fn attempts(&self) -> Option<u32> {
        match self {
            RecordError::Attempt { attempts, .. } => Some(*attempts),
            _ => None,
        }
    }

    /// True when retrying cannot help: the handler said so ([`RecordError::Permanent`]), the
    /// body does not deserialize, no key can be taken from it, or its key holds the completed
    /// work of another payload. Never for a failure of the store or its configuration.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self.cause(),
            RecordError::Permanent(_)
                | RecordError::Body { .. }
                | RecordError::Key { .. }
                | RecordError::PayloadMismatch {
                    stored: Status::Completed,
                    ..
                }
        )
    }

    /// True when the handler ran and failed (or panicked, or was cancelled): the failures an
    /// attempt budget counts. Records that did not run (blocked, not started, in progress
    /// elsewhere, store unreachable) and failures the handler marked as not the record's fault
    /// ([`RecordError::Transient`]) do not use up attempts.
    pub fn is_attempt(&self) -> bool {
        matches!(
            self.cause(),
            RecordError::Handler(_)
                | RecordError::Permanent(_)
                | RecordError::Panicked(_)
                | RecordError::DeadlineReached { .. }
        )
    }
}

/// An error a handler marks as permanent: a retry cannot succeed (a body that fails
/// validation, say). Return it from a handler (it converts into the handler's error type through
/// `Box<dyn Error>`).
///
/// ```
/// use lambda_idempotency::batch::{PermanentError, RecordError};
///
/// let error = RecordError::handler(PermanentError::new("amount must be positive"));
/// assert!(error.is_permanent());
/// assert!(!RecordError::handler("timeout").is_permanent());
/// ```
#[derive(Debug)]
pub struct PermanentError(BoxError);

impl PermanentError {
    /// Marks `error` permanent.
    pub fn new(error: impl Into<BoxError>) -> Self {
        Self(error.into())
    }
}

impl fmt::Display for PermanentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for PermanentError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.0.as_ref())
    }
}

/// An error a handler marks as not the record's fault: a dependency is unavailable, throttled or
/// timed out (the handler's own table in an outage, say). Return it from a handler (it converts
/// into the handler's error type through `Box<dyn Error>`): the record is retried as any failed
/// one, but the failure never counts against the attempt budget, so an outage of any length
/// never sends a healthy record to the dead-letter queue. Under an idempotency store the failure
/// is still recorded (its error kept), without counting an attempt.
///
/// ```
/// use lambda_idempotency::batch::{RecordError, TransientError};
///
/// let error = RecordError::handler(TransientError::new("the ledger table is throttled"));
/// assert!(matches!(error, RecordError::Transient(_)));
/// assert!(!error.is_attempt() && !error.is_permanent());
/// ```
#[derive(Debug)]
pub struct TransientError(BoxError);

impl TransientError {
    /// Marks `error` transient: not the record's fault.
    pub fn new(error: impl Into<BoxError>) -> Self {
        Self(error.into())
    }
}

impl fmt::Display for TransientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for TransientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.0.as_ref())
    }
}

/// The text of a panic payload.
pub(crate) fn panic_message(panic: &Box<dyn Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_keeps_its_cause_and_count() {
        let e = RecordError::Attempt {
            attempts: 3,
            error: Box::new(RecordError::permanent("bad")),
        };
        assert!(e.is_permanent());
        assert!(e.is_attempt());
        assert_eq!(e.attempts(), Some(3));
        assert!(matches!(e.cause(), RecordError::Permanent(_)));
        assert_eq!(e.to_string(), "permanent failure: bad (failed attempt 3)");
        let blocked = RecordError::GroupBlocked {
            group_id: "g".into(),
            failed: "m".into(),
        };
        assert!(!blocked.is_attempt() && !blocked.is_permanent());
        assert_eq!(blocked.attempts(), None);
    }
}
