//! The reconciler: what keeps the pipeline honest after the fact, every few minutes.
//!
//! One [`Reconciler::run`] does three things, none of which scans a table, each within its share
//! of the run's time budget ([`Budget`]: the Lambda deadline less a margin), keeping its
//! progress in the accounts table for the next run:
//!
//! 1. **Payments left `accepted`** ([`waiting`]). The sparse index
//!    [`accepted`](payments_model::lifecycle::ACCEPTED_INDEX) holds exactly the payments not yet
//!    charged or failed. Those accepted longer than [`Config::resend_after`] ago are read again
//!    (a consistent read: the index lags), oldest first from where the last run stopped, and
//!    - marked `failed`, with the reason, when payment-processor's own copy of their message
//!      sits in the payments dead-letter queue (its hook marks them as it sends the copy; this
//!      catches a payment its hook could not mark);
//!    - their message sent back to `payments.fifo` when SQS moved it to the dead-letter queue
//!      itself (its receive limit: crashes or timeouts, not known to be the message's fault),
//!      and marked `failed` only when SQS moves it again after it was sent back
//!      [`Config::send_back_limit`] times ([`send_back`]);
//!    - otherwise sent again through the relay's own path (same group, same deduplication id:
//!      a message still queued is deduplicated by SQS within 5 minutes and by payment-processor
//!      after), which also recovers what the relay gave up on (the outbox dead-letter queue);
//!      at most [`Config::max_resends_per_run`] a run, and a payment sent again is not sent
//!      again within [`Config::resend_interval`].
//!
//!    Those accepted longer than [`Config::stuck_after`] ago are counted as `stuck`: a metric
//!    with an alarm, since a resend did not help.
//! 2. **Charged payments without their receipt** ([`receipts`]): each charge older than
//!    [`Config::receipt_after`] is looked up in the receipts table, and one without its receipt
//!    gets its `PaymentCharged` sent again to the receipts queue.
//! 3. **The audit of charges** ([`audit`]). Each charged payment is in the index
//!    [`charged`](payments_model::lifecycle::CHARGED_INDEX), sorted by `chargedAt`. Per shard,
//!    from a cursor kept in the accounts table, the reconciler checks that each payment has
//!    exactly one ledger entry, the one it names, agreeing on account, amount and currency; and
//!    adds the audited amounts to the balance's audited sums (`auditedCents`, `auditedCharges`,
//!    the reconciler's own item: it cannot write a balance) in the same transaction that moves
//!    the cursor. A balance whose charges are all audited (the audit past its `lastChargedAt`)
//!    must count as many charges and equal their sum; a difference, an over-charge as well as a
//!    charge missing, is a `ledgerMismatches` metric with an alarm. Besides the balances of the
//!    charges audited, every balance is compared in turn ([`balances`]): one changed outside any
//!    charge is seen too.
//!
//! The parts that read the shards of an index give each shard its share of
//! [`Config::max_per_run`], so that one hot shard never takes a run, and start at another shard
//! each run, so that a run cut short by its time budget never always leaves the same shards.
//!
//! It emits one EMF line per run ([`payments_model::metrics::reconciler`]): `runs` (1: the
//! heartbeat whose absence alarms), `resent`, `unchecked`, `markedFailed`, `sentBack`, `stuck`,
//! `receiptsResent`, `audited`, `ledgerMismatches`.

pub mod audit;
pub mod balances;
mod budget;
mod charged;
mod config;
mod dead_letters;
pub mod receipts;
pub mod send_back;
pub mod waiting;

use lambda_idempotency::metrics::{FUNCTION_DIMENSION, Metrics};
use payments_model::metrics::{NAMESPACE, function, reconciler as metric};

pub use budget::{Budget, DEADLINE_MARGIN};
pub use config::{
    Config, DEFAULT_MAX_RESENDS_PER_RUN, DEFAULT_RECEIPT_AFTER, DEFAULT_RESEND_AFTER,
    DEFAULT_RESEND_INTERVAL, DEFAULT_SEND_BACK_LIMIT, DEFAULT_STUCK_AFTER,
};

/// Why a run stopped early (what it did before is kept: the next run goes on from there).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// A DynamoDB call failed.
    #[error("{operation} on {table} failed: {source}")]
    DynamoDb {
        /// The call.
        operation: &'static str,
        /// The table.
        table: String,
        /// The SDK's error.
        #[source]
        source: Box<aws_sdk_dynamodb::Error>,
    },
    /// An SQS call failed.
    #[error("{operation} on {queue} failed: {source}")]
    Sqs {
        /// The call.
        operation: &'static str,
        /// The queue.
        queue: String,
        /// The SDK's error.
        #[source]
        source: Box<aws_sdk_sqs::Error>,
    },
}

impl ReconcileError {
    pub(crate) fn dynamodb<E>(operation: &'static str, table: &str) -> impl FnOnce(E) -> Self
    where
        aws_sdk_dynamodb::Error: From<E>,
    {
        let table = table.to_owned();
        move |e| Self::DynamoDb {
            operation,
            table,
            source: Box::new(e.into()),
        }
    }

    pub(crate) fn sqs<E>(operation: &'static str, queue: &str) -> impl FnOnce(E) -> Self
    where
        aws_sdk_sqs::Error: From<E>,
    {
        let queue = queue.to_owned();
        move |e| Self::Sqs {
            operation,
            queue,
            source: Box::new(e.into()),
        }
    }
}

/// What one run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Payments left `accepted`.
    pub waiting: waiting::Waiting,
    /// Charged payments without their receipt.
    pub receipts: receipts::Receipts,
    /// The audit of charges.
    pub audit: audit::Audit,
}

impl Report {
    /// The run's EMF line.
    pub fn metrics(&self) -> Metrics {
        Metrics::new(NAMESPACE)
            .dimension(FUNCTION_DIMENSION, function::PAYMENTS_RECONCILER)
            .count(metric::RUNS, 1)
            .count(metric::RESENT, self.waiting.resent.len() as u64)
            .count(metric::UNCHECKED, self.waiting.unchecked.len() as u64)
            .count(
                metric::MARKED_FAILED,
                self.waiting.marked_failed.len() as u64,
            )
            .count(metric::SENT_BACK, self.waiting.sent_back.len() as u64)
            .count(metric::STUCK, self.waiting.stuck.len() as u64)
            .count(metric::RECEIPTS_RESENT, self.receipts.resent.len() as u64)
            .count(metric::AUDITED, self.audit.audited)
            .count(
                metric::LEDGER_MISMATCHES,
                self.audit.mismatches.len() as u64,
            )
    }
}

impl Report {
    /// Nothing to look at: every payment found was sent or marked, none is stuck, every
    /// `PaymentCharged` to send again was sent, and the audit found no mismatch.
    pub fn is_clean(&self) -> bool {
        self.waiting.send_failed.is_empty()
            && self.receipts.send_failed.is_empty()
            && self.waiting.stuck.is_empty()
            && self.audit.mismatches.is_empty()
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let w = &self.waiting;
        writeln!(
            f,
            "accepted: {} resent, {} marked failed (in the dead-letter queue), {} sent back (moved \
             by SQS), {} stuck, {} failed to send, {} unchecked (the dead-letter queue not seen \
             whole), {} sent again recently",
            w.resent.len(),
            w.marked_failed.len(),
            w.sent_back.len(),
            w.stuck.len(),
            w.send_failed.len(),
            w.unchecked.len(),
            w.recently_resent.len()
        )?;
        if let Some(stopped) = w.stopped {
            writeln!(
                f,
                "  stopped early ({stopped:?}): the next run goes on from there"
            )?;
        }
        for (id, why) in &w.send_failed {
            writeln!(f, "  not sent: {id}: {why}")?;
        }
        for id in &w.stuck {
            writeln!(f, "  stuck: {id}")?;
        }
        let r = &self.receipts;
        writeln!(
            f,
            "receipts: {} charges looked up, {} PaymentCharged sent again, {} failed to send{}",
            r.checked,
            r.resent.len(),
            r.send_failed.len(),
            if r.out_of_time { " (out of time)" } else { "" }
        )?;
        for (id, why) in &r.send_failed {
            writeln!(f, "  not sent: {id}: {why}")?;
        }
        writeln!(
            f,
            "audit: {} charges audited, {} mismatches",
            self.audit.audited,
            self.audit.mismatches.len()
        )?;
        for m in &self.audit.mismatches {
            writeln!(f, "  mismatch: {m}")?;
        }
        Ok(())
    }
}

/// The reconciler: its clients, its settings, the relay's sending path and the receipts queue.
#[derive(Debug, Clone)]
pub struct Reconciler {
    dynamodb: aws_sdk_dynamodb::Client,
    sqs: aws_sdk_sqs::Client,
    relay: payments_publisher::App,
    receipts_queue: lambda_idempotency::publish::Publisher,
    config: Config,
}

impl Reconciler {
    /// A reconciler over these clients.
    pub fn new(
        dynamodb: aws_sdk_dynamodb::Client,
        sqs: aws_sdk_sqs::Client,
        config: Config,
    ) -> Self {
        let relay = payments_publisher::App::new(
            sqs.clone(),
            payments_publisher::Config {
                payments_queue_url: config.payments_queue_url.clone(),
                dead_letter_queue_url: None,
            },
        );
        let receipts_queue =
            lambda_idempotency::publish::Publisher::new(sqs.clone(), &config.receipts_queue_url);
        Self {
            dynamodb,
            sqs,
            relay,
            receipts_queue,
            config,
        }
    }

    /// A reconciler from the SDK configuration.
    pub fn from_sdk(sdk: &aws_config::SdkConfig, config: Config) -> Self {
        Self::new(
            payments_config::dynamodb(sdk),
            payments_config::sqs(sdk),
            config,
        )
    }

    /// Its settings.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The reconciler's own item `key` (`reconciler#...`) of the accounts table, read
    /// consistently: where its parts stopped. Empty when there is none.
    async fn reconciler_item(
        &self,
        key: &str,
    ) -> Result<
        std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>,
        ReconcileError,
    > {
        let table = &self.config.accounts_table;
        Ok(self
            .dynamodb
            .get_item()
            .table_name(table)
            .key(
                "accountId",
                aws_sdk_dynamodb::types::AttributeValue::S(key.to_owned()),
            )
            .consistent_read(true)
            .send()
            .await
            .map_err(ReconcileError::dynamodb("GetItem", table))?
            .item
            .unwrap_or_default())
    }

    /// One pass at `now_ms` (epoch ms), with no time limit: see [`Reconciler::run_within`].
    pub async fn run(&self, now_ms: i64) -> Result<Report, ReconcileError> {
        self.run_within(now_ms, &Budget::unlimited()).await
    }

    /// One pass at `now_ms` (epoch ms) within `budget`: payments left `accepted`, then charged
    /// payments without their receipt, then the audit, each within an equal share of what is
    /// left of the budget when it starts. Each part runs even when another failed; the first
    /// error is returned after all three.
    pub async fn run_within(&self, now_ms: i64, budget: &Budget) -> Result<Report, ReconcileError> {
        let waiting = self.waiting_within(now_ms, &budget.share(3)).await;
        let receipts = self.receipts_within(now_ms, &budget.share(2)).await;
        let audit = self.audit_within(now_ms, budget).await;
        let report = Report {
            waiting: waiting.as_ref().cloned().unwrap_or_default(),
            receipts: receipts.as_ref().cloned().unwrap_or_default(),
            audit: audit.as_ref().cloned().unwrap_or_default(),
        };
        report.metrics().emit();
        tracing::info!(%report, "reconciled");
        waiting?;
        receipts?;
        audit?;
        Ok(report)
    }
}
