//! Provisions the template's queues and tables on `$AWS_ENDPOINT_URL` (moto or LocalStack) and
//! prints them, with each function's environment as shell exports. `provision --help` lists the
//! options and exit codes.
//!
//! - `--function NAME` prints only that function's environment (FunctionName or logical id),
//!   so that `eval "$(cargo run -p local-aws --bin provision -- --function payment-processor)"`
//!   sets it up for `cargo lambda watch`; `--format dotenv` writes `KEY=VALUE` lines for
//!   `cargo lambda watch --env-file`.
//! - `--verify` only compares the endpoint with the template (creates nothing) and exits 1 when
//!   they differ.

use std::collections::BTreeMap;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use local_aws::cli::TemplateArgs;
use local_aws::provision::{self, Provisioned};
use local_aws::template::Template;
use local_aws::{Clients, ENDPOINT_VAR};

const EXIT_CODES: &str = "\
Exit codes:
  0  provisioned and printed (with --verify: the endpoint matches the template)
  1  provisioning failed (no endpoint, an invalid template, an unknown --function, an AWS
     error), or --verify found differences (printed one a line)
  2  bad command line (an unknown option, a missing or invalid value)";

/// Provisions the SAM template's queues and tables on the local endpoint in $AWS_ENDPOINT_URL
/// (moto or LocalStack) and prints them, with each function's environment as shell exports.
#[derive(Debug, Parser)]
#[command(name = "provision", version, after_help = EXIT_CODES)]
struct Cli {
    #[command(flatten)]
    template: TemplateArgs,
    /// Print only this function's environment (its FunctionName or logical id)
    #[arg(long, value_name = "NAME")]
    function: Option<String>,
    /// How to print the environment: `export K='V'` lines, `K=V` lines (for
    /// `cargo lambda watch --env-file`), or one JSON document with the resources
    #[arg(long, value_enum, default_value_t = Format::Shell)]
    format: Format,
    /// Create nothing: compare the endpoint with the template, print each difference and exit 1
    /// if there is one
    #[arg(long)]
    verify: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Format {
    /// `export NAME='value'` lines, with comments naming the resources
    Shell,
    /// `NAME=value` lines
    Dotenv,
    /// One JSON document: the resources and each function's environment
    Json,
}

/// Single-quoted for POSIX shells.
fn quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

fn print_env(env: &BTreeMap<String, String>, format: Format) {
    for (k, v) in env {
        match format {
            Format::Shell => println!("export {k}={}", quote(v)),
            _ => println!("{k}={v}"),
        }
    }
}

fn print(template: &Template, resources: &Provisioned, args: &Cli) -> Result<(), String> {
    let mut envs = Vec::new();
    for f in template.functions.values() {
        if args
            .function
            .as_ref()
            .is_none_or(|n| *n == f.name || *n == f.logical_id)
        {
            envs.push((f, resources.function_env(f).map_err(|e| e.to_string())?));
        }
    }
    if let Some(name) = &args.function
        && envs.is_empty()
    {
        return Err(format!("no function {name} in the template"));
    }
    if args.format == Format::Json {
        let functions: BTreeMap<_, _> = envs
            .iter()
            .map(|(f, env)| (f.name.clone(), serde_json::json!({ "logicalId": f.logical_id, "binary": f.binary, "environment": env })))
            .collect();
        let out = serde_json::json!({ "resources": resources, "functions": functions });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    if args.function.is_none() {
        println!(
            "# local-aws: provisioned on {} (region {})",
            std::env::var(ENDPOINT_VAR).unwrap_or_default(),
            resources.region
        );
        for (id, q) in &resources.queues {
            println!("# queue {id}: {} {} {}", q.name, q.url, q.arn);
        }
        for (id, t) in &resources.tables {
            match &t.stream_arn {
                Some(stream) => println!("# table {id}: {} (stream {stream})", t.name),
                None => println!("# table {id}: {}", t.name),
            }
        }
    }
    for (f, env) in &envs {
        if args.function.is_none() {
            println!(
                "# function {} ({}, binary {})",
                f.name,
                f.logical_id,
                f.binary.as_deref().unwrap_or("-")
            );
        }
        print_env(env, args.format);
    }
    Ok(())
}

async fn run(args: Cli) -> Result<ExitCode, String> {
    let template = Template::from_file(args.template.path(), &args.template.options())
        .map_err(|e| e.to_string())?;
    let clients = Clients::from_env().await.map_err(|e| e.to_string())?;
    if args.verify {
        let differences = provision::verify(&clients, &template)
            .await
            .map_err(|e| e.to_string())?;
        for d in &differences {
            println!("{d}");
        }
        return Ok(if differences.is_empty() {
            eprintln!("provision: the endpoint matches the template");
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    let resources = provision::provision(&clients, &template)
        .await
        .map_err(|e| e.to_string())?;
    print(&template, &resources, &args)?;
    Ok(ExitCode::SUCCESS)
}

#[tokio::main]
async fn main() -> ExitCode {
    local_aws::cli::exit_code("provision", run(Cli::parse()).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_parses() {
        let cli = Cli::try_parse_from([
            "provision",
            "--template",
            "t.yaml",
            "--prefix",
            "p-",
            "--suffix",
            "-s",
            "--param",
            "MaxAttempts=3",
            "--function",
            "payments-api",
            "--format",
            "dotenv",
            "--verify",
        ])
        .unwrap();
        assert_eq!(cli.template.path(), std::path::Path::new("t.yaml"));
        assert_eq!(cli.template.options().naming.apply("q"), "p-q-s");
        assert_eq!(cli.function.as_deref(), Some("payments-api"));
        assert_eq!(cli.format, Format::Dotenv);
        assert!(cli.verify);
    }

    #[test]
    fn an_unknown_format_names_the_option_and_the_choices() {
        let err = Cli::try_parse_from(["provision", "--format", "yaml"]).unwrap_err();
        let text = err.to_string();
        assert_eq!(err.exit_code(), 2);
        assert!(
            text.contains("--format") && text.contains("dotenv"),
            "{text}"
        );
    }
}
