//! Moves the messages of a dead-letter queue back to its source queue (after a fix); see
//! `payments_operations::redrive` for what is sent, kept and deleted. `redrive --help` lists the
//! options and exit codes.
//!
//! - A queue is a name (`payments-dlq.fifo`, found with `GetQueueUrl`) or a URL.
//! - Without `--to`, the target is the queue whose redrive policy names the dead-letter queue
//!   (`ListDeadLetterSourceQueues`).
//! - `--dry-run` receives and reports, sends and deletes nothing, and makes the messages
//!   visible again.
//! - `--drop-attributes PREFIX`: message attributes named with it are not sent on (default
//!   `DeadLetter`; `""` keeps them all).
//!
//! It runs with the SDK's default configuration (credentials, region; `AWS_ENDPOINT_URL` for a
//! local endpoint), with a role that has the template's `PaymentsRedrivePolicy`. It prints how
//! many messages moved and each failure, and exits 1 if any message was not moved, 2 on a usage
//! error.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use payments_operations::redrive::{
    self, DEAD_LETTER_ATTRIBUTE_PREFIX, RedriveError, RedriveOptions,
};

const EXIT_CODES: &str = "\
Exit codes:
  0  every message received was moved (or, with --dry-run, looked at and put back)
  1  a message was not moved (each is printed, and left in the dead-letter queue), the run
     stopped early, or a queue could not be found or read
  2  bad command line (an unknown option, a missing or invalid value)";

/// Moves the messages of a dead-letter queue back to its source queue (after a fix).
///
/// A queue is a queue name or URL. AWS settings come from the environment (credentials,
/// region, and AWS_ENDPOINT_URL for a local endpoint). Messages whose send fails stay in the
/// dead-letter queue, visible again at the end; on a FIFO queue they hold back the rest of
/// their group, which keeps its order.
#[derive(Debug, Parser)]
#[command(name = "redrive", version, after_help = EXIT_CODES)]
struct Cli {
    /// The dead-letter queue to empty: queue name or URL
    #[arg(long, value_name = "QUEUE")]
    from: String,
    /// The queue to send to: queue name or URL [default: the queue whose redrive policy names
    /// --from, by ListDeadLetterSourceQueues]
    #[arg(long, value_name = "QUEUE")]
    to: Option<String>,
    /// Stop after receiving N messages [default: no limit]
    #[arg(long = "max", value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max: Option<u64>,
    /// Receive and report only: send nothing, delete nothing, make the messages visible again
    #[arg(long)]
    dry_run: bool,
    /// Do not send on the message attributes whose name starts with PREFIX ("" keeps them all)
    #[arg(long = "drop-attributes", value_name = "PREFIX", default_value = DEAD_LETTER_ATTRIBUTE_PREFIX)]
    drop_attributes: String,
    /// Visibility timeout of each receive, in seconds: long enough to send and delete a batch
    #[arg(long, value_name = "SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=43_200))]
    visibility_timeout: u64,
    /// Long-poll wait of each receive, in seconds; two empty receives in a row end the run
    #[arg(long = "wait", value_name = "SECS", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(0..=20))]
    wait: u64,
}

impl Cli {
    fn options(&self) -> RedriveOptions {
        let options = RedriveOptions::default()
            .dry_run(self.dry_run)
            .drop_attribute_prefix(self.drop_attributes.clone())
            .visibility_timeout(Duration::from_secs(self.visibility_timeout))
            .wait_time(Duration::from_secs(self.wait));
        match self.max {
            Some(max) => options.max_messages(usize::try_from(max).unwrap_or(usize::MAX)),
            None => options,
        }
    }
}

async fn run(args: Cli) -> Result<ExitCode, RedriveError> {
    let sqs = aws_sdk_sqs::Client::new(&payments_operations::sdk_config().await);
    let route = redrive::route(&sqs, &args.from, args.to.as_deref()).await?;
    println!("redrive: {route}");
    let report = redrive::redrive(&sqs, &route.from.url, &route.to.url, args.options()).await?;
    print!("{report}");
    Ok(if report.is_success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    run(Cli::parse()).await.unwrap_or_else(|error| {
        eprintln!("redrive: {error}");
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_the_library_defaults() {
        let cli = Cli::try_parse_from(["redrive", "--from", "payments-dlq.fifo"]).unwrap();
        assert_eq!(cli.options(), RedriveOptions::default());
        assert_eq!(cli.to, None);
    }

    #[test]
    fn every_option_reaches_the_redrive_options() {
        let cli = Cli::try_parse_from([
            "redrive",
            "--from",
            "dlq",
            "--to",
            "q",
            "--max",
            "7",
            "--dry-run",
            "--drop-attributes",
            "",
            "--visibility-timeout",
            "5",
            "--wait",
            "0",
        ])
        .unwrap();
        let expected = RedriveOptions::default()
            .max_messages(7)
            .dry_run(true)
            .drop_attribute_prefix("")
            .visibility_timeout(Duration::from_secs(5))
            .wait_time(Duration::ZERO);
        assert_eq!(cli.options(), expected);
        assert_eq!(cli.to.as_deref(), Some("q"));
    }

    #[test]
    fn out_of_range_numbers_name_the_option() {
        for (flag, value) in [
            ("--wait", "21"),
            ("--max", "0"),
            ("--visibility-timeout", "x"),
        ] {
            let err = Cli::try_parse_from(["redrive", "--from", "d", flag, value]).unwrap_err();
            assert_eq!(err.exit_code(), 2);
            assert!(err.to_string().contains(flag), "{flag}: {err}");
        }
    }
}
