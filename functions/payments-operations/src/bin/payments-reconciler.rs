//! payments-reconciler: the scheduled reconciler (an EventBridge schedule invokes it every few
//! minutes), and its one-shot mode for operators: `payments-reconciler once --help`.
//!
//! In Lambda it reads its settings from the environment (see
//! `payments_operations::reconcile::Config`). `once` runs the same pass from a shell, on AWS
//! with the default credential chain (or a local endpoint in `AWS_ENDPOINT_URL`), each setting
//! an option or the same environment variable; it prints what it did and exits 1 if a payment
//! could not be sent or the audit found a mismatch.

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use lambda_runtime::{Error, LambdaEvent, service_fn};
use payments_operations::reconcile::{Budget, Config, Reconciler};

const EXIT_CODES: &str = "\
Exit codes (once):
  0  every payment found was sent or marked, and the audit found nothing wrong
  1  a payment could not be sent, a payment is stuck, the audit found a mismatch, or a call failed
  2  bad command line";

/// The payments pipeline's reconciler: Lambda when run without arguments.
#[derive(Debug, Parser)]
#[command(name = "payments-reconciler", version, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    mode: Option<Mode>,
}

#[derive(Debug, Subcommand)]
enum Mode {
    /// One pass now: payments left accepted are sent again (their message sent back when SQS
    /// moved it to the dead-letter queue, the payment marked failed when the consumer put it
    /// there with its reason or SQS moved it past the send-back limit), charged payments without their receipt get their
    /// PaymentCharged sent again, then the charges not yet audited are checked against the
    /// ledger and the balances.
    Once(Once),
}

#[derive(Debug, Args)]
struct Once {
    /// The payments table
    #[arg(long, env = "PAYMENTS_TABLE", default_value = "payments")]
    payments_table: String,
    /// The ledger table
    #[arg(long, env = "LEDGER_TABLE", default_value = "payments-ledger")]
    ledger_table: String,
    /// The balances table
    #[arg(long, env = "BALANCES_TABLE", default_value = "payments-balances")]
    balances_table: String,
    /// The accounts table (also holds the audit's cursors)
    #[arg(long, env = "ACCOUNTS_TABLE", default_value = "payments-accounts")]
    accounts_table: String,
    /// The payments queue's URL (the stack's output PaymentsQueueUrl)
    #[arg(long, env = "PAYMENTS_QUEUE_URL")]
    payments_queue_url: String,
    /// The payments dead-letter queue's URL (the stack's output PaymentsDeadLetterQueueUrl)
    #[arg(long, env = "DEAD_LETTER_QUEUE_URL")]
    dead_letter_queue_url: String,
    /// The receipts table
    #[arg(long, env = "RECEIPTS_TABLE", default_value = "payments-receipts")]
    receipts_table: String,
    /// The receipts queue's URL (the stack's output ReceiptsQueueUrl)
    #[arg(long, env = "RECEIPTS_QUEUE_URL")]
    receipts_queue_url: String,
    /// Send again the payments accepted at least this many seconds ago
    #[arg(long, env = "RESEND_AFTER_SECONDS", default_value_t = 300)]
    resend_after_seconds: u64,
    /// Do not send again a payment sent again less than this many seconds ago
    #[arg(long, env = "RESEND_INTERVAL_SECONDS", default_value_t = 1800)]
    resend_interval_seconds: u64,
    /// Send again at most this many payments
    #[arg(long = "max-resends", env = "MAX_RESENDS_PER_RUN", default_value_t = 100,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_resends: u64,
    /// Send again the PaymentCharged of the payments charged at least this many seconds ago
    /// without a receipt
    #[arg(long, env = "RECEIPT_AFTER_SECONDS", default_value_t = 300)]
    receipt_after_seconds: u64,
    /// Count as stuck the payments accepted at least this many seconds ago
    #[arg(long, env = "STUCK_AFTER_SECONDS", default_value_t = 3600)]
    stuck_after_seconds: u64,
    /// Audit the charges at least this many seconds old
    #[arg(long, env = "AUDIT_LAG_SECONDS", default_value_t = 120)]
    audit_lag_seconds: u64,
    /// Send back a message SQS moved to the dead-letter queue at most this many times; a further
    /// move marks its payment failed
    #[arg(long, env = "SEND_BACK_LIMIT", default_value_t = payments_operations::reconcile::DEFAULT_SEND_BACK_LIMIT)]
    send_back_limit: u32,
    /// At most this many payments in each part of the pass
    #[arg(long = "max", env = "MAX_PAYMENTS_PER_RUN", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..))]
    max: u64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match cli.mode {
        None => match runtime.block_on(lambda()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("payments-reconciler: {e}");
                ExitCode::FAILURE
            }
        },
        Some(Mode::Once(once)) => runtime.block_on(run_once(once)),
    }
}

async fn lambda() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let sdk = payments_operations::sdk_config().await;
    let config = Config::from_settings(&payments_config::Env)?;
    let reconciler = Reconciler::from_sdk(&sdk, config);
    let reconciler = &reconciler;
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<serde_json::Value>| async move {
            // Stops looking before the deadline, and keeps its progress for the next run.
            let budget = Budget::of_invocation(&event.context);
            let report = reconciler
                .run_within(payments_publisher::now_ms(), &budget)
                .await?;
            Ok::<_, Error>(serde_json::json!({
                "resent": report.waiting.resent.len(),
                "unchecked": report.waiting.unchecked.len(),
                "markedFailed": report.waiting.marked_failed.len(),
                "sentBack": report.waiting.sent_back.len(),
                "stuck": report.waiting.stuck.len(),
                "receiptsResent": report.receipts.resent.len(),
                "audited": report.audit.audited,
                "ledgerMismatches": report.audit.mismatches.len(),
            }))
        },
    ))
    .await
}

async fn run_once(once: Once) -> ExitCode {
    let sdk = payments_operations::sdk_config().await;
    let config = Config {
        payments_table: once.payments_table,
        ledger_table: once.ledger_table,
        balances_table: once.balances_table,
        accounts_table: once.accounts_table,
        payments_queue_url: once.payments_queue_url,
        dead_letter_queue_url: once.dead_letter_queue_url,
        receipts_table: once.receipts_table,
        receipts_queue_url: once.receipts_queue_url,
        resend_after: std::time::Duration::from_secs(once.resend_after_seconds),
        resend_interval: std::time::Duration::from_secs(once.resend_interval_seconds),
        max_resends_per_run: usize::try_from(once.max_resends).unwrap_or(usize::MAX),
        receipt_after: std::time::Duration::from_secs(once.receipt_after_seconds),
        stuck_after: std::time::Duration::from_secs(once.stuck_after_seconds),
        audit_lag: std::time::Duration::from_secs(once.audit_lag_seconds),
        send_back_limit: once.send_back_limit,
        max_per_run: usize::try_from(once.max).unwrap_or(usize::MAX),
    };
    lambda_idempotency::metrics::set_enabled(false);
    let reconciler = Reconciler::from_sdk(&sdk, config);
    match reconciler.run(payments_publisher::now_ms()).await {
        Ok(report) => {
            print!("{report}");
            if report.is_clean() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("payments-reconciler: {e}");
            ExitCode::FAILURE
        }
    }
}
