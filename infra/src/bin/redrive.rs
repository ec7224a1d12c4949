//! Moves the messages of a dead-letter queue back to its source queue (after a fix), on
//! `$AWS_ENDPOINT_URL` (moto or LocalStack); see `local_aws::redrive` for what is sent, kept and
//! deleted. `redrive --help` lists the options and exit codes.
//!
//! - A logical id (`PaymentsDeadLetterQueue`) is looked up in the template, with the names that
//!   `provision` gave it (`--prefix`, `--suffix`, `--param` as for `provision`).
//! - Without `--to`, the target is the queue whose `RedrivePolicy` names the dead-letter queue
//!   (in the template, else by `ListDeadLetterSourceQueues`).
//! - `--dry-run` receives and reports, sends and deletes nothing, and makes the messages
//!   visible again.
//! - `--drop-attributes PREFIX`: message attributes named with it are not sent on (default
//!   `DeadLetter`; `""` keeps them all).
//!
//! It prints how many messages moved and each failure, and exits 1 if any message was not
//! moved, 2 on a usage error.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use local_aws::cli::TemplateArgs;
use local_aws::redrive::{self, DEAD_LETTER_ATTRIBUTE_PREFIX, RedriveOptions};
use local_aws::template::Template;

const EXIT_CODES: &str = "\
Exit codes:
  0  every message received was moved (or, with --dry-run, looked at and put back)
  1  a message was not moved (each is printed, and left in the dead-letter queue), the run
     stopped early, or a queue could not be found or read
  2  bad command line (an unknown option, a missing or invalid value)";

/// Moves the messages of a dead-letter queue back to its source queue (after a fix), on the
/// local endpoint in $AWS_ENDPOINT_URL (moto or LocalStack).
///
/// A queue is a logical id of the template (looked up with --prefix, --suffix and --param as
/// `provision` named it), a queue name, or a queue URL. Messages whose send fails stay in the
/// dead-letter queue, visible again at the end; on a FIFO queue they hold back the rest of
/// their group, which keeps its order.
#[derive(Debug, Parser)]
#[command(name = "redrive", version, after_help = EXIT_CODES)]
struct Cli {
    /// The dead-letter queue to empty: logical id, queue name or URL
    #[arg(long, value_name = "QUEUE")]
    from: String,
    /// The queue to send to [default: the queue whose RedrivePolicy names --from, in the
    /// template, else by ListDeadLetterSourceQueues]
    #[arg(long, value_name = "QUEUE")]
    to: Option<String>,
    #[command(flatten)]
    template: TemplateArgs,
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

async fn run(args: Cli) -> Result<ExitCode, String> {
    // The template is only needed for logical ids: without one, URLs and names still work.
    let template_options = args.template.options();
    let template = match &args.template.template {
        Some(path) => {
            Some(Template::from_file(path, &template_options).map_err(|e| e.to_string())?)
        }
        None => match Template::load_project(&template_options) {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("redrive: no template ({e}): logical ids will not resolve");
                None
            }
        },
    };
    let config = local_aws::local_sdk_config()
        .await
        .map_err(|e| e.to_string())?;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let from = redrive::resolve_queue(&sqs, template.as_ref(), &args.from)
        .await
        .map_err(|e| e.to_string())?;
    let to = match &args.to {
        Some(spec) => redrive::resolve_queue(&sqs, template.as_ref(), spec).await,
        None => redrive::resolve_source(&sqs, template.as_ref(), &from).await,
    }
    .map_err(|e| e.to_string())?;
    println!("redrive: from {from} to {to}");
    let report = redrive::redrive(&sqs, &from.url, &to.url, args.options())
        .await
        .map_err(|e| e.to_string())?;
    print!("{report}");
    Ok(if report.is_success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    local_aws::cli::exit_code("redrive", run(Cli::parse()).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_the_library_defaults() {
        let cli = Cli::try_parse_from(["redrive", "--from", "PaymentsDeadLetterQueue"]).unwrap();
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
