//! payment-processor fed by the local event source mapping, in a process of its own, until it
//! is killed: the crash scenario of the fault suite kills it (SIGKILL) in the middle of a batch.
//!
//! `consumer --prefix P [--timeout-secs T] [--visibility-timeout-secs V] [--param NAME=VALUE]...`
//! against the endpoint in `AWS_ENDPOINT_URL`; the resources are the template's, named with the
//! prefix `P` (provisioned if missing).

use std::time::Duration;

use local_aws::template::Naming;
use payments_e2e::Stack;
use payments_e2e::faults::{Consumer, run_processor};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut prefix = None;
    let mut timeout = Duration::from_secs(30);
    let mut visibility = None;
    let mut params: Vec<(String, String)> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--prefix" => prefix = Some(value()?),
            "--timeout-secs" => timeout = Duration::from_secs(value()?.parse()?),
            "--visibility-timeout-secs" => visibility = Some(value()?.parse::<u32>()?),
            "--param" => {
                let v = value()?;
                let (k, v) = v.split_once('=').ok_or("--param takes NAME=VALUE")?;
                params.push((k.to_owned(), v.to_owned()));
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let prefix = prefix.ok_or("--prefix is required")?;
    lambda_idempotency::metrics::set_enabled(false);
    let params: Vec<(&str, &str)> = params
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let stack = Stack::provision_named(Naming::prefix(prefix), &params).await?;
    if let Some(seconds) = visibility {
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
            timeout,
            ..Consumer::default()
        },
    )?;
    println!("consumer ready");
    tokio::signal::ctrl_c().await?;
    let stats = running.stop().await;
    println!("{stats:?}");
    Ok(())
}
