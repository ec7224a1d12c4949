//! Moves the messages of a dead-letter queue back to its source queue (after a fix), on
//! `$AWS_ENDPOINT_URL` (moto or LocalStack); see `local_aws::redrive` for what is sent, kept and
//! deleted.
//!
//! ```text
//! redrive --from <logical id | queue name | URL> [--to <logical id | queue name | URL>]
//!         [--prefix P] [--suffix S] [--template PATH] [--param NAME=VALUE]...
//!         [--max N] [--dry-run] [--drop-attributes PREFIX] [--visibility-timeout SECS]
//!         [--wait SECS]
//! ```
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

use local_aws::redrive::{self, RedriveOptions};
use local_aws::template::{Naming, Template, TemplateOptions};

const USAGE: &str = "usage: redrive --from <logical id | queue name | URL> \
[--to <logical id | queue name | URL>] [--prefix P] [--suffix S] [--template PATH] \
[--param NAME=VALUE]... [--max N] [--dry-run] [--drop-attributes PREFIX] \
[--visibility-timeout SECS] [--wait SECS]";

struct Args {
    from: String,
    to: Option<String>,
    template: Option<std::path::PathBuf>,
    template_options: TemplateOptions,
    options: RedriveOptions,
}

fn parse_args() -> Result<Args, String> {
    let (mut from, mut to, mut template) = (None, None, None);
    let mut template_options = TemplateOptions::default();
    let mut options = RedriveOptions::default();
    let (mut prefix, mut suffix) = (String::new(), String::new());
    let mut it = std::env::args().skip(1);
    let number = |name: &str, v: String| {
        v.parse::<u64>()
            .map_err(|_| format!("{name} {v}: expected a whole number\n{USAGE}"))
    };
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value\n{USAGE}"));
        match arg.as_str() {
            "--from" => from = Some(value("--from")?),
            "--to" => to = Some(value("--to")?),
            "--prefix" => prefix = value("--prefix")?,
            "--suffix" => suffix = value("--suffix")?,
            "--template" => template = Some(value("--template")?.into()),
            "--param" => {
                let p = value("--param")?;
                let (k, v) = p
                    .split_once('=')
                    .ok_or(format!("--param {p}: expected NAME=VALUE"))?;
                template_options
                    .parameters
                    .insert(k.to_owned(), v.to_owned());
            }
            "--max" => {
                options = options.max_messages(number("--max", value("--max")?)? as usize);
            }
            "--dry-run" => options = options.dry_run(true),
            "--drop-attributes" => {
                options = options.drop_attribute_prefix(value("--drop-attributes")?);
            }
            "--visibility-timeout" => {
                let secs = number("--visibility-timeout", value("--visibility-timeout")?)?;
                options = options.visibility_timeout(Duration::from_secs(secs));
            }
            "--wait" => {
                let secs = number("--wait", value("--wait")?)?;
                options = options.wait_time(Duration::from_secs(secs));
            }
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    template_options.naming = Naming::prefix(prefix).with_suffix(suffix);
    Ok(Args {
        from: from.ok_or(format!("--from is required\n{USAGE}"))?,
        to,
        template,
        template_options,
        options,
    })
}

async fn run(args: Args) -> Result<ExitCode, String> {
    // The template is only needed for logical ids: without one, URLs and names still work.
    let template = match &args.template {
        Some(path) => {
            Some(Template::from_file(path, &args.template_options).map_err(|e| e.to_string())?)
        }
        None => match Template::load_project(&args.template_options) {
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
    let report = redrive::redrive(&sqs, &from.url, &to.url, args.options)
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
            eprintln!("redrive: {message}");
            ExitCode::FAILURE
        }
    }
}
