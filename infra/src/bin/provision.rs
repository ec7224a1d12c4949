//! Provisions the template's queues and tables on `$AWS_ENDPOINT_URL` (moto or LocalStack) and
//! prints them, with each function's environment as shell exports.
//!
//! ```text
//! provision [--template PATH] [--prefix P] [--suffix S] [--param NAME=VALUE]...
//!           [--function NAME] [--format shell|dotenv|json] [--verify]
//! ```
//!
//! - `--function NAME` prints only that function's environment (FunctionName or logical id),
//!   so that `eval "$(cargo run -p local-aws --bin provision -- --function payment-processor)"`
//!   sets it up for `cargo lambda watch`; `--format dotenv` writes `KEY=VALUE` lines for
//!   `cargo lambda watch --env-file`.
//! - `--verify` only compares the endpoint with the template (creates nothing) and exits 1 when
//!   they differ.

use std::collections::BTreeMap;
use std::process::ExitCode;

use local_aws::provision::{self, Provisioned};
use local_aws::template::{Naming, Template, TemplateOptions};
use local_aws::{Clients, ENDPOINT_VAR};

const USAGE: &str = "usage: provision [--template PATH] [--prefix P] [--suffix S] \
[--param NAME=VALUE]... [--function NAME] [--format shell|dotenv|json] [--verify]";

#[derive(PartialEq)]
enum Format {
    Shell,
    Dotenv,
    Json,
}

struct Args {
    template: std::path::PathBuf,
    options: TemplateOptions,
    function: Option<String>,
    format: Format,
    verify: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        template: Template::project_path(),
        options: TemplateOptions::default(),
        function: None,
        format: Format::Shell,
        verify: false,
    };
    let (mut prefix, mut suffix) = (String::new(), String::new());
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value\n{USAGE}"));
        match arg.as_str() {
            "--template" => args.template = value("--template")?.into(),
            "--prefix" => prefix = value("--prefix")?,
            "--suffix" => suffix = value("--suffix")?,
            "--param" => {
                let p = value("--param")?;
                let (k, v) = p
                    .split_once('=')
                    .ok_or(format!("--param {p}: expected NAME=VALUE"))?;
                args.options.parameters.insert(k.to_owned(), v.to_owned());
            }
            "--function" => args.function = Some(value("--function")?),
            "--format" => {
                args.format = match value("--format")?.as_str() {
                    "shell" => Format::Shell,
                    "dotenv" => Format::Dotenv,
                    "json" => Format::Json,
                    other => return Err(format!("unknown format {other}\n{USAGE}")),
                }
            }
            "--verify" => args.verify = true,
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    args.options.naming = Naming::prefix(prefix).with_suffix(suffix);
    Ok(args)
}

/// Single-quoted for POSIX shells.
fn quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

fn print_env(env: &BTreeMap<String, String>, format: &Format) {
    for (k, v) in env {
        match format {
            Format::Shell => println!("export {k}={}", quote(v)),
            _ => println!("{k}={v}"),
        }
    }
}

fn print(template: &Template, resources: &Provisioned, args: &Args) -> Result<(), String> {
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
        print_env(env, &args.format);
    }
    Ok(())
}

async fn run(args: Args) -> Result<ExitCode, String> {
    let template = Template::from_file(&args.template, &args.options).map_err(|e| e.to_string())?;
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
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(code) => code,
        Err(message) => {
            eprintln!("provision: {message}");
            ExitCode::FAILURE
        }
    }
}
