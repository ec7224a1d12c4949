//! `make check-invariants`: the pipeline's invariants checked against a running stack (see
//! `payments_e2e::invariants`).

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use payments_e2e::invariants::{Scope, Sources, settle};

/// The pipeline's invariants, checked against a running stack (`make up`'s, named by its exports
/// in .local/up.env: AWS_ENDPOINT_URL, each table's name, each queue's URL): waits until the
/// pipeline drains, then checks that every payment is charged or failed with its reason, each
/// charged payment has one ledger entry and one receipt with its amount, each balance is the sum
/// of its ledger entries, and no receipt or ledger entry exists without its charged payment.
#[derive(Debug, Parser)]
#[command(
    name = "check-invariants",
    after_help = "Exit codes:\n  0  every invariant holds\n  1  an invariant is violated (each violation printed, with its ids), or the stack could not be read\n  2  bad command line"
)]
struct Args {
    /// How long to wait for the pipeline to drain, in seconds: what is still pending then is
    /// reported as violations.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let sdk = match local_aws::local_sdk_config().await {
        Ok(sdk) => sdk,
        Err(e) => {
            eprintln!("check-invariants: {e} (source .local/up.env, written by `make up`)");
            return ExitCode::FAILURE;
        }
    };
    let sources = match Sources::from_exports(&sdk, |name| std::env::var(name).ok()) {
        Ok(sources) => sources,
        Err(e) => {
            eprintln!("check-invariants: {e}");
            return ExitCode::FAILURE;
        }
    };
    match settle(
        &sources,
        &Scope::pipeline(),
        &[],
        Duration::from_secs(args.timeout),
    )
    .await
    {
        Ok(checked) => {
            print!("{checked}");
            if checked.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("check-invariants: the stack could not be read: {e}");
            ExitCode::FAILURE
        }
    }
}
