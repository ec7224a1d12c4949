//! payment-processor fed by the local event source mapping, in a process of its own, until it
//! is killed: the crash scenario of the fault suite kills it (SIGKILL) in the middle of a batch.
//!
//! `consumer --prefix P [--timeout-secs T] [--visibility-timeout-secs V] [--param NAME=VALUE]...`
//! against the endpoint in `AWS_ENDPOINT_URL`; the resources are the template's, named with the
//! prefix `P` (provisioned if missing). `consumer --help` lists the exit codes.

use std::time::Duration;

use clap::Parser;
use local_aws::cli::parse_param;
use local_aws::template::Naming;
use payments_e2e::Stack;
use payments_e2e::faults::{Consumer, run_processor};

const AFTER_HELP: &str = "\
Prints \"consumer ready\" once it polls, and its counters when stopped with Ctrl-C.

Exit codes:
  0  stopped with Ctrl-C
  1  provisioning or starting the consumer failed (no endpoint, an invalid parameter)
  2  bad command line (an unknown option, a missing or invalid value)";

/// payment-processor fed by the local event source mapping, in a process of its own, until it
/// is stopped (Ctrl-C) or killed, on the endpoint in $AWS_ENDPOINT_URL.
#[derive(Debug, Parser)]
#[command(name = "consumer", version, after_help = AFTER_HELP)]
struct Cli {
    /// Name the template's resources with this prefix (provisioned if missing)
    #[arg(long, value_name = "P")]
    prefix: String,
    /// The function's timeout, in seconds
    #[arg(long, value_name = "T", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=900))]
    timeout_secs: u64,
    /// Set the payments queue's visibility timeout to V seconds first
    #[arg(long, value_name = "V", value_parser = clap::value_parser!(u32).range(0..=43_200))]
    visibility_timeout_secs: Option<u32>,
    /// Give the template parameter NAME the value VALUE (repeatable)
    #[arg(long = "param", value_name = "NAME=VALUE", value_parser = parse_param)]
    params: Vec<(String, String)>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let cli = Cli::parse();
    lambda_idempotency::metrics::set_enabled(false);
    let params: Vec<(&str, &str)> = cli
        .params
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let stack = Stack::provision_named(Naming::prefix(cli.prefix.clone()), &params).await?;
    if let Some(seconds) = cli.visibility_timeout_secs {
        stack
            .clients
            .sqs
            .set_queue_attributes()
            .queue_url(stack.queue_url("PaymentsQueue"))
            .attributes(
                aws_sdk_sqs::types::QueueAttributeName::VisibilityTimeout,
                seconds.to_string(),
            )
            .send()
            .await?;
    }
    let app = stack.payment_processor()?;
    let running = run_processor(
        &stack,
        app,
        Consumer {
            timeout: Duration::from_secs(cli.timeout_secs),
            ..Consumer::default()
        },
    )?;
    println!("consumer ready");
    tokio::signal::ctrl_c().await?;
    let stats = running.stop_unchecked().await;
    println!("{stats:?}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fault_suites_command_line_parses() {
        let cli = Cli::try_parse_from([
            "consumer",
            "--prefix",
            "crash1-",
            "--timeout-secs",
            "4",
            "--visibility-timeout-secs",
            "6",
            "--param",
            "FailPayments=[slow]:1:sleep=300",
        ])
        .unwrap();
        assert_eq!(
            (cli.timeout_secs, cli.visibility_timeout_secs),
            (4, Some(6))
        );
        assert_eq!(
            cli.params,
            [("FailPayments".into(), "[slow]:1:sleep=300".into())]
        );
    }

    #[test]
    fn the_prefix_is_required() {
        let err = Cli::try_parse_from(["consumer"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::MissingRequiredArgument);
        assert!(err.to_string().contains("--prefix"), "{err}");
    }
}
