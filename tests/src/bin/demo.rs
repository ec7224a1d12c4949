//! The project's main job: the payments pipeline end to end on a local AWS endpoint.
//!
//! Run it with `make demo` (which starts and stops moto). By hand, with an endpoint in
//! `AWS_ENDPOINT_URL`: `cargo run -p payments-e2e --bin demo -- [PAYMENTS]`; `demo --help`
//! lists the exit codes.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use payments_e2e::processes::ProcessOptions;
use payments_e2e::{Functions, Workload, run};

const EXIT_CODES: &str = "\
Exit codes:
  0  every check passed
  1  a check failed (the report says which), or the run failed (no endpoint, a timeout)
  2  bad command line (PAYMENTS not a positive whole number, an unknown option)";

/// The payments pipeline end to end on the local endpoint in $AWS_ENDPOINT_URL: payments by
/// HTTP, with client retries, concurrent duplicates, reused keys and injected failures, then
/// the checks that each was charged once and receipted once.
#[derive(Debug, Parser)]
#[command(name = "demo", version, after_help = EXIT_CODES)]
struct Cli {
    /// How many payments to make
    #[arg(value_name = "PAYMENTS", default_value_t = 200,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    payments: usize,
    /// Run the functions' binaries as they are built, without building the workspace's binaries
    /// first (`make demo` builds them)
    #[arg(long)]
    no_build: bool,
    /// Run the functions in the demo's process instead of each as its own process
    #[arg(long)]
    in_process: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let payments = cli.payments;
    let functions = if cli.in_process {
        Functions::InProcess
    } else {
        Functions::Processes(ProcessOptions {
            build: !cli.no_build,
            ..ProcessOptions::default()
        })
    };
    let workload = Workload::demo(payments);
    println!(
        "payments pipeline demo: {payments} payments over {} accounts, by HTTP, with client retries, \
         concurrent duplicates, reused keys and injected failures",
        workload.accounts
    );
    match run(&workload, functions, Duration::from_secs(300), |line| {
        println!("  .. {line}")
    })
    .await
    {
        Ok(report) => {
            println!("{report}");
            if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("demo failed: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payments_default_to_200_and_must_be_positive() {
        assert_eq!(Cli::try_parse_from(["demo"]).unwrap().payments, 200);
        assert_eq!(Cli::try_parse_from(["demo", "12"]).unwrap().payments, 12);
        for bad in ["0", "-1", "many"] {
            let err = Cli::try_parse_from(["demo", bad]).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{bad}");
        }
    }
}
