//! The project's main job: the payments pipeline end to end on a local AWS endpoint.
//!
//! Run it with `make demo` (which starts and stops moto). By hand, with an endpoint in
//! `AWS_ENDPOINT_URL`: `cargo run -p payments-e2e --bin demo -- [PAYMENTS]`.

use std::process::ExitCode;
use std::time::Duration;

use payments_e2e::{Workload, run};

#[tokio::main]
async fn main() -> ExitCode {
    let payments = match std::env::args().nth(1).map(|a| a.parse::<usize>()) {
        None => 200,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("usage: demo [PAYMENTS]  (a positive number; default 200)");
            return ExitCode::from(2);
        }
    };
    let workload = Workload::demo(payments);
    println!(
        "payments pipeline demo: {payments} payments over {} accounts, by HTTP, with client retries, \
         concurrent duplicates, reused keys and injected failures",
        workload.accounts
    );
    match run(&workload, Duration::from_secs(300), |line| {
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
