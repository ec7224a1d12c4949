//! `make check-invariants`: the pipeline's invariants checked against a running stack (see
//! `payments_e2e::invariants`).

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use payments_e2e::invariants::{Failure, Scope, Sources, settle};

/// The pipeline's invariants, checked against a running stack (`make up`'s, named by its exports
/// in .local/up.env: AWS_ENDPOINT_URL, each table's name, each queue's URL): waits until the
/// pipeline drains, then checks that every payment is charged, each charged payment has one
/// ledger entry and one receipt with its amount, each balance is the sum of its ledger entries,
/// and no receipt or ledger entry exists without its charged payment. No payment may fail unless
/// --expect-failed names it: a failed payment is a violation, whatever its reason.
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
    /// `MARKER=KIND`: the payments whose description contains MARKER (a marker of the failure
    /// switch, FAIL_PAYMENTS) were made to fail, as KIND: `permanent` (a poison message: the
    /// switch's `permanent` action) or `budget` (attempts used up by the handler's own failures:
    /// `fail` or `panic` on every attempt). Each must be failed for that kind. Repeatable; none
    /// by default: then no payment may fail.
    #[arg(long = "expect-failed", value_name = "MARKER=KIND", value_parser = marked)]
    expect_failed: Vec<(String, Failure)>,
}

/// `MARKER=KIND`, the marker not empty.
fn marked(value: &str) -> Result<(String, Failure), String> {
    let (marker, kind) = value
        .rsplit_once('=')
        .ok_or_else(|| format!("`{value}` is not MARKER=KIND"))?;
    if marker.is_empty() {
        return Err(format!("`{value}`: the marker is empty"));
    }
    Ok((marker.to_owned(), kind.parse()?))
}

impl Args {
    /// The whole pipeline, with the failures the command line declares.
    fn scope(&self) -> Scope {
        self.expect_failed
            .iter()
            .fold(Scope::pipeline(), |scope, (marker, failure)| {
                scope.declaring_marked(*failure, marker)
            })
    }
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
        &args.scope(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_failure_is_declared_by_default() {
        let args = Args::try_parse_from(["check-invariants"]).unwrap();
        assert_eq!(args.scope(), Scope::pipeline());
        assert!(args.scope().failures.is_empty() && args.scope().marked.is_empty());
    }

    #[test]
    fn each_marker_declares_its_kind_of_failure() {
        let args = Args::try_parse_from([
            "check-invariants",
            "--expect-failed",
            "[poison]=budget",
            "--expect-failed",
            "a=b=permanent",
        ])
        .unwrap();
        assert_eq!(
            args.scope(),
            Scope::pipeline()
                .declaring_marked(Failure::Budget, "[poison]")
                .declaring_marked(Failure::Permanent, "a=b")
        );
        for bad in ["[poison]", "=budget", "[poison]=timeout"] {
            assert!(
                Args::try_parse_from(["check-invariants", "--expect-failed", bad]).is_err(),
                "{bad}"
            );
        }
    }
}
