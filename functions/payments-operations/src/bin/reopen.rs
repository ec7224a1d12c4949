//! Reopens a `failed` payment: sets it back to `accepted` with who, when and why, gives it the
//! next number of its account, and sends it to the payments queue (see
//! `payments_operations::reopen`). A failed payment is charged by nothing else.
//!
//! ```text
//! reopen --payment-id pay_... --operator alice --reason "card issuer outage over"
//! ```
//!
//! The tables and the queue default to `PAYMENTS_TABLE`, `ACCOUNTS_TABLE` and
//! `PAYMENTS_QUEUE_URL`; the AWS settings come from the environment (credentials, region, and
//! `AWS_ENDPOINT_URL` for a local endpoint), with a role that has the template's
//! `PaymentsReopenPolicy`. `reopen --help` lists the options and exit codes.

use std::process::ExitCode;

use clap::Parser;
use payments_operations::reopen::{ReopenError, Reopener, Reopening, Tables};

const EXIT_CODES: &str = "\
Exit codes:
  0  the payment was reopened and sent to the payments queue
  1  not reopened (no such payment, not failed, a table error), or reopened but not sent (run
     republish)
  2  bad command line (an unknown option, a missing or invalid value)";

/// Reopens a failed payment and sends it to the payments queue.
///
/// AWS settings come from the environment (credentials, region, and AWS_ENDPOINT_URL for a
/// local endpoint).
#[derive(Debug, Parser)]
#[command(name = "reopen", version, after_help = EXIT_CODES)]
struct Args {
    /// The payment to reopen.
    #[arg(long)]
    payment_id: String,
    /// Who reopens it (recorded with the payment).
    #[arg(long)]
    operator: String,
    /// Why (recorded with the payment).
    #[arg(long)]
    reason: String,
    /// The payments table.
    #[arg(long, env = "PAYMENTS_TABLE")]
    table: String,
    /// The accounts table (each account's order).
    #[arg(long, env = "ACCOUNTS_TABLE")]
    accounts_table: String,
    /// The URL of the payments queue (`payments.fifo`).
    #[arg(long, env = "PAYMENTS_QUEUE_URL")]
    queue_url: String,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let sdk = payments_operations::sdk_config().await;
    let reopener = Reopener::new(
        aws_sdk_dynamodb::Client::new(&sdk),
        aws_sdk_sqs::Client::new(&sdk),
        Tables {
            payments: args.table,
            accounts: args.accounts_table,
        },
        args.queue_url,
    );
    let reopening = Reopening {
        payment_id: args.payment_id,
        operator: args.operator,
        reason: args.reason,
    };
    match reopener.reopen(&reopening).await {
        Ok(reopened) => {
            println!(
                "reopened {} (reopening {}, number {} of its account) and sent it",
                reopening.payment_id, reopened.reopens, reopened.sequence
            );
            ExitCode::SUCCESS
        }
        Err(e @ ReopenError::NotSent { .. }) => {
            eprintln!("reopen: {e}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("reopen: not reopened: {e}");
            ExitCode::FAILURE
        }
    }
}
