//! The invocation's deadline, as the Lambda context carries it.
//!
//! Lambda's runtime API gives the deadline as epoch milliseconds (`Lambda-Runtime-Deadline-Ms`).
//! A context without one carries `0` (`Context::default()`, in tests), and `cargo lambda watch`
//! sends a fixed `600000` (ten minutes after 1970). Neither is a deadline: taken as one, every
//! record would count as too late to start. So a value below [`MIN_EPOCH_MS`] is no deadline,
//! and the batch runs as with none (no start, stop or finish margins; leases of the default
//! length).
//!
//! ```
//! use lambda_idempotency::deadline::{deadline, deadline_ms};
//! use lambda_runtime::Context;
//!
//! let mut context = Context::default();
//! assert_eq!(deadline_ms(&context), None);
//! context.deadline = 600_000; // what `cargo lambda watch` sends
//! assert_eq!(deadline(&context), None);
//! context.deadline = 1_795_461_947_250;
//! assert_eq!(deadline_ms(&context), Some(1_795_461_947_250));
//! ```

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lambda_runtime::Context;

/// The smallest value read as a deadline: 2001-09-09 in epoch milliseconds.
pub const MIN_EPOCH_MS: u64 = 1_000_000_000_000;

/// The invocation's deadline in epoch milliseconds, or `None` when the context carries none.
pub fn deadline_ms(context: &Context) -> Option<i64> {
    (context.deadline >= MIN_EPOCH_MS).then(|| i64::try_from(context.deadline).unwrap_or(i64::MAX))
}

/// The invocation's deadline, or `None` when the context carries none.
pub fn deadline(context: &Context) -> Option<SystemTime> {
    (context.deadline >= MIN_EPOCH_MS).then(|| UNIX_EPOCH + Duration::from_millis(context.deadline))
}
