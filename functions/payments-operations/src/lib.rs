//! The payments pipeline's operations: what keeps it honest after the fact, and what an
//! operator runs.
//!
//! - [`reconcile`]: the scheduled reconciler (`payments-reconciler`): payments left `accepted`
//!   are sent again or marked from their dead-letter queue; charged payments are audited
//!   against the ledger and the balances. Its one-shot mode runs the same pass from a shell.
//! - `redrive`: moves a dead-letter queue's messages back to their source queue.
//! - `reopen`: gives a `failed` payment another chance.
//!
//! Every tool builds its SDK configuration with [`sdk_config`]: the default credential chain
//! and region, and `AWS_ENDPOINT_URL` only when it is set.

pub mod reconcile;
pub mod redrive;
pub mod reopen;

/// The SDK configuration of the operations code: the default chain (credentials, region, and
/// `AWS_ENDPOINT_URL` when set), as on AWS.
pub use payments_config::sdk_config;

/// The SDK timeouts of a long poll of `wait` (`ReceiveMessage`'s `WaitTimeSeconds`): the
/// configuration's ([`payments_config::sdk_timeouts`]) with the wait added to each, so that an
/// empty long poll answers before its attempt is cut (3 s by default, a wait up to 20 s).
pub fn long_poll_timeouts(wait: std::time::Duration) -> aws_config::timeout::TimeoutConfig {
    aws_config::timeout::TimeoutConfig::builder()
        .operation_timeout(payments_config::SDK_OPERATION_TIMEOUT + wait)
        .operation_attempt_timeout(payments_config::SDK_ATTEMPT_TIMEOUT + wait)
        .build()
}

/// A per-request configuration override of [`long_poll_timeouts`] for an SQS receive.
pub(crate) fn long_poll(wait: std::time::Duration) -> aws_sdk_sqs::config::Builder {
    aws_sdk_sqs::config::Builder::default().timeout_config(long_poll_timeouts(wait))
}
