//! Sends again the payments that payments-publisher gave up on: every payment still `accepted`
//! that was written at least `--older-than-seconds` ago (see
//! `payments_publisher::republish`). Run it after the outbox's alarm, once the cause is fixed.
//!
//! ```text
//! republish --table payments --queue-url https://sqs.../payments.fifo [--older-than-seconds 900] [--dry-run]
//! ```
//!
//! The table and queue default to `PAYMENTS_TABLE` and `PAYMENTS_QUEUE_URL`; the AWS settings
//! come from the environment (`AWS_ENDPOINT_URL` for a local endpoint). It prints each payment
//! and exits 1 if any was not sent or an `accepted` item is not a payment item (fix it, run it
//! again), 2 on a usage error.

use std::process::ExitCode;

use clap::Parser;
use payments_publisher::{App, Config, now_ms, republish};

/// Sends the payments the outbox relay gave up on to the payments queue.
#[derive(Debug, Parser)]
#[command(name = "republish", version)]
struct Args {
    /// The payments table.
    #[arg(long, env = "PAYMENTS_TABLE")]
    table: String,
    /// The URL of the payments queue (`payments.fifo`).
    #[arg(long, env = "PAYMENTS_QUEUE_URL")]
    queue_url: String,
    /// Only payments written at least this long ago, in seconds (the relay may still be sending
    /// newer ones; sending them again would be harmless, only useless).
    #[arg(long, default_value_t = 900)]
    older_than_seconds: u64,
    /// List the payments; send nothing.
    #[arg(long)]
    dry_run: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let sdk = payments_model::sdk_config().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let before = now_ms() - (args.older_than_seconds as i64).saturating_mul(1000);
    let found = match republish::unqueued(&dynamodb, &args.table, before).await {
        Ok(found) => found,
        Err(e) => {
            eprintln!("republish: {e}");
            return ExitCode::FAILURE;
        }
    };
    let payments = found.payments;
    println!(
        "{} payments accepted and not charged, written more than {} s ago",
        payments.len(),
        args.older_than_seconds
    );
    for (id, why) in &found.malformed {
        println!("  MALFORMED {id}: {why}");
    }
    let malformed = !found.malformed.is_empty();
    if args.dry_run {
        for p in &payments {
            println!(
                "  {} (account {}, written at {} ms)",
                p.payment_id, p.account_id, p.created_at
            );
        }
        return if malformed {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        };
    }
    let app = App::new(
        aws_sdk_sqs::Client::new(&sdk),
        Config {
            payments_queue_url: args.queue_url,
            dead_letter_queue_url: None,
        },
    );
    let done = app.republish(payments).await;
    for id in &done.sent {
        println!("  sent {id}");
    }
    for (id, why) in done.failed.iter().chain(&done.invalid) {
        println!("  NOT SENT {id}: {why}");
    }
    println!(
        "{} sent, {} failed, {} invalid",
        done.sent.len(),
        done.failed.len(),
        done.invalid.len()
    );
    if done.failed.is_empty() && done.invalid.is_empty() && !malformed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
