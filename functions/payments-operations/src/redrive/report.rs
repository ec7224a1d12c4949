//! What a redrive gives back: its [`RedriveReport`], or the [`RedriveError`] that kept it from
//! running.

use std::fmt;
use std::time::Duration;

/// What a redrive did. Every received message is in exactly one of `moved`, `failed` and
/// `not_deleted` (none of them in a dry run).
///
/// ```no_run
/// # async fn f(sqs: aws_sdk_sqs::Client) -> Result<(), payments_operations::redrive::RedriveError> {
/// use payments_operations::redrive::{redrive, RedriveOptions};
///
/// let report = redrive(&sqs, "https://sqs.us-east-1.amazonaws.com/123456789012/payments-dlq.fifo",
///     "https://sqs.us-east-1.amazonaws.com/123456789012/payments.fifo", RedriveOptions::default()).await?;
/// for (message_id, error) in &report.failed {
///     eprintln!("still in the dead-letter queue: {message_id}: {error}");
/// }
/// std::process::exit(if report.is_success() { 0 } else { 1 });
/// # }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedriveReport {
    /// The dead-letter queue.
    pub from_queue_url: String,
    /// The queue the messages were sent to.
    pub to_queue_url: String,
    /// A dry run: nothing was sent or deleted.
    pub dry_run: bool,
    /// Distinct messages received from the dead-letter queue.
    pub received: usize,
    /// Messages sent to the source queue and deleted from the dead-letter queue.
    pub moved: usize,
    /// For each moved message: its id in the dead-letter queue and its new id in the source
    /// queue, in the order they were sent.
    pub moved_ids: Vec<(String, String)>,
    /// Messages not sent, with why: they are still in the dead-letter queue, visible again.
    pub failed: Vec<(String, String)>,
    /// Messages sent to the source queue whose delete from the dead-letter queue failed: they
    /// are in both queues, and a later redrive would send them again (on a FIFO queue, within
    /// 5 minutes, with the same deduplication id, so the source queue drops that resend).
    pub not_deleted: Vec<(String, String)>,
    /// Messages whose visibility was reset to 0 at the end (failed, not deleted, dry run).
    pub released: usize,
    /// Messages whose visibility reset failed: they come back after the visibility timeout.
    pub release_failed: Vec<(String, String)>,
    /// Why the run stopped before the dead-letter queue was empty, if it did (other than
    /// [`RedriveOptions::max_messages`](super::options::RedriveOptions::max_messages)).
    pub stopped: Option<String>,
    /// The dead-letter queue's approximate count (visible and in flight) at the end, when it
    /// could be read: what is left for another run or a look.
    pub left_in_dlq: Option<u64>,
    /// How long the run took.
    pub elapsed: Duration,
}

impl RedriveReport {
    /// Every received message was moved (or, in a dry run, nothing went wrong) and the run was
    /// not stopped.
    pub fn is_success(&self) -> bool {
        self.failed.is_empty()
            && self.not_deleted.is_empty()
            && self.stopped.is_none()
            && self.release_failed.is_empty()
    }
}

impl fmt::Display for RedriveReport {
    /// A summary: one line of counts, then one line per problem.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.elapsed.as_secs_f64();
        if self.dry_run {
            writeln!(
                f,
                "dry run: {} received, nothing sent or deleted, {} made visible again, in {secs:.1} s",
                self.received, self.released
            )?;
        } else {
            writeln!(
                f,
                "moved {} of {} received, {} failed, in {secs:.1} s",
                self.moved,
                self.received,
                self.failed.len() + self.not_deleted.len()
            )?;
        }
        for (id, error) in &self.failed {
            writeln!(f, "failed {id}: {error} (still in the dead-letter queue)")?;
        }
        for (id, error) in &self.not_deleted {
            writeln!(
                f,
                "not deleted {id}: {error} (sent to the source queue but still in the dead-letter queue: delete it there)"
            )?;
        }
        for (id, error) in &self.release_failed {
            writeln!(
                f,
                "visibility not reset {id}: {error} (visible again after the visibility timeout)"
            )?;
        }
        if let Some(reason) = &self.stopped {
            writeln!(f, "stopped early: {reason}")?;
        }
        if let Some(left) = self.left_in_dlq {
            writeln!(f, "left in the dead-letter queue: about {left}")?;
        }
        Ok(())
    }
}

/// Why a redrive could not run, or a queue could not be found.
#[derive(Debug, thiserror::Error)]
pub enum RedriveError {
    /// The dead-letter queue and the target are the same queue.
    #[error("the dead-letter queue and the target are the same queue: {0}")]
    SameQueue(String),
    /// The first receive from the dead-letter queue failed: nothing was done.
    #[error("cannot receive from {queue_url}: {message}")]
    Receive {
        /// The dead-letter queue.
        queue_url: String,
        /// The SDK error.
        message: String,
    },
    /// A queue could not be found.
    #[error("no queue {spec}: {message}")]
    UnknownQueue {
        /// What was asked for (name or URL).
        spec: String,
        /// Why.
        message: String,
    },
    /// No queue has this dead-letter queue in its redrive policy.
    #[error(
        "no queue sends its dead letters to {dlq} (ListDeadLetterSourceQueues): name the target"
    )]
    NoSourceQueue {
        /// The dead-letter queue.
        dlq: String,
    },
    /// Several queues have this dead-letter queue in their redrive policy.
    #[error("several queues send their dead letters to {dlq}: {}; name the target", candidates.join(", "))]
    AmbiguousSource {
        /// The dead-letter queue.
        dlq: String,
        /// The candidates.
        candidates: Vec<String>,
    },
}
