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
