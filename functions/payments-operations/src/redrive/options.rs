//! How a redrive runs: [`RedriveOptions`].

use std::time::Duration;

/// Message attributes named with this prefix were added by a dead-letter step (the library adds
/// `DeadLetterReason`, `DeadLetterSourceMessageId`, `DeadLetterSourceQueueArn`): a redrive drops
/// them (see [`RedriveOptions::drop_attribute_prefix`]).
pub const DEAD_LETTER_ATTRIBUTE_PREFIX: &str = "DeadLetter";

/// How a redrive runs.
///
/// ```
/// use std::time::Duration;
/// use payments_operations::redrive::RedriveOptions;
///
/// let options = RedriveOptions::default().max_messages(100).dry_run(true);
/// assert_eq!(options.max_messages, Some(100));
/// assert_eq!(options.drop_attribute_prefix, "DeadLetter");
/// assert_eq!(options.visibility_timeout, Duration::from_secs(60));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedriveOptions {
    /// Stop after receiving this many messages (default: no limit).
    pub max_messages: Option<usize>,
    /// Receive and report only: send nothing, delete nothing, and reset the visibility of what
    /// was received to 0 at the end.
    pub dry_run: bool,
    /// Message attributes whose name starts with this are not sent on (default
    /// [`DEAD_LETTER_ATTRIBUTE_PREFIX`]); an empty prefix keeps every attribute.
    pub drop_attribute_prefix: String,
    /// Visibility timeout of each receive: long enough to send and delete a batch (default 60 s,
    /// at most 12 hours). Messages the run keeps (failed ones) come back after it if the run
    /// is killed.
    pub visibility_timeout: Duration,
    /// Long-poll wait of each receive (default 1 s, at most 20 s); two empty receives in a row
    /// end the run.
    pub wait_time: Duration,
    /// Attempts per message for sends and deletes that fail for a reason that may pass
    /// (default 3, at least 1).
    pub attempts: u32,
}

impl Default for RedriveOptions {
    fn default() -> Self {
        Self {
            max_messages: None,
            dry_run: false,
            drop_attribute_prefix: DEAD_LETTER_ATTRIBUTE_PREFIX.to_owned(),
            visibility_timeout: Duration::from_secs(60),
            wait_time: Duration::from_secs(1),
            attempts: 3,
        }
    }
}

impl RedriveOptions {
    /// Stop after receiving `n` messages.
    pub fn max_messages(mut self, n: usize) -> Self {
        self.max_messages = Some(n);
        self
    }

    /// Receive and report only: send nothing, delete nothing (the `dry_run` field).
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// Drop the message attributes named with `prefix` (empty: keep them all).
    pub fn drop_attribute_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.drop_attribute_prefix = prefix.into();
        self
    }

    /// The visibility timeout of each receive.
    pub fn visibility_timeout(mut self, timeout: Duration) -> Self {
        self.visibility_timeout = timeout;
        self
    }

    /// The long-poll wait of each receive.
    pub fn wait_time(mut self, wait: Duration) -> Self {
        self.wait_time = wait;
        self
    }

    /// Attempts per send and delete (at least 1).
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts.max(1);
        self
    }

    /// Whether an attribute called `name` is sent on.
    pub(super) fn keeps(&self, name: &str) -> bool {
        self.drop_attribute_prefix.is_empty() || !name.starts_with(&self.drop_attribute_prefix)
    }

    /// The backoff before retry `retry` (from 0) of a delete: 100 ms doubling, at most 6.4 s.
    pub(super) fn backoff(retry: u32) -> Duration {
        Duration::from_millis(100u64.saturating_mul(1 << retry.min(6)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dead_letter_prefix_is_dropped_unless_empty() {
        let options = RedriveOptions::default();
        assert!(!options.keeps("DeadLetterReason"));
        assert!(options.keeps("kind"));
        assert!(
            RedriveOptions::default()
                .drop_attribute_prefix("")
                .keeps("DeadLetterReason")
        );
    }

    #[test]
    fn the_backoff_doubles_up_to_a_bound() {
        assert_eq!(RedriveOptions::backoff(0), Duration::from_millis(100));
        assert_eq!(RedriveOptions::backoff(2), Duration::from_millis(400));
        assert_eq!(RedriveOptions::backoff(30), Duration::from_millis(6400));
    }
}
