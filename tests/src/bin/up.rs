//! `make up`: the payments stack running locally until Ctrl-C (see `payments_e2e::up`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use payments_e2e::up::{Functions, ProcessOptions, Up, UpOptions};

/// The payments stack on a local AWS endpoint, running until Ctrl-C: template.yaml's queues and
/// tables provisioned under their own names, every function running (payments-api behind the
/// local HTTP API, the consumers and the outbox relay behind their event sources), their JSON
/// logs on stdout with the function's name in front.
///
/// The endpoint is the one in AWS_ENDPOINT_URL (`make up` starts moto and sets it; for
/// LocalStack, `make up-localstack`). On start it prints what to export in another terminal
/// (endpoint, credentials, API URL and token, queue URLs, table names), then a line beginning
/// "ready: API on ".
#[derive(Debug, Parser)]
#[command(
    name = "up",
    after_help = "Exit codes:\n  0  stopped by Ctrl-C (SIGINT) or SIGTERM, everything it started stopped\n  1  the stack could not start (no endpoint, port in use, provisioning or build failed)\n  2  bad command line"
)]
struct Args {
    /// The API's port on 127.0.0.1.
    #[arg(long, default_value_t = 3000, env = "UP_API_PORT")]
    api_port: u16,
    /// Run each function as its own process (its binary from one workspace build) under a Lambda
    /// Runtime API (`cargo lambda watch --only-lambda-apis`) instead of in this process.
    /// cargo-lambda must be on PATH (`make up WATCH=1` puts the project's on it).
    #[arg(long)]
    watch: bool,
    /// In watch mode, the Runtime API's and Invoke API's port.
    #[arg(long, default_value_t = 9100, requires = "watch")]
    watch_port: u16,
    /// In watch mode, run the functions' binaries as they are built, without building the
    /// workspace's binaries first (after `make test`, which builds them).
    #[arg(long, requires = "watch")]
    no_build: bool,
    /// Make payments fail on purpose, to watch retries and the dead-letter queue
    /// (`MARKER:N[:ACTION]`, see FAIL_PAYMENTS in docs/pipeline.md).
    #[arg(long, default_value = "")]
    fail_payments: String,
    /// Also write the exports to this file (`source` it in another shell).
    #[arg(long)]
    env_file: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(e) = payments_e2e::logs::init() {
        eprintln!("up: cannot install the log subscriber: {e}");
        return ExitCode::FAILURE;
    }
    let functions = if args.watch {
        Functions::Processes(ProcessOptions {
            runtime_port: args.watch_port,
            build: !args.no_build,
            echo: true,
            ..ProcessOptions::default()
        })
    } else {
        Functions::InProcess
    };
    let options = UpOptions {
        api_addr: SocketAddr::from(([127, 0, 0, 1], args.api_port)),
        functions,
        fail_payments: args.fail_payments,
    };
    // Listening from the start: Ctrl-C while the stack starts (or builds, in watch mode) stops
    // what was started so far (dropping the start kills the watchers) and exits 0.
    let signal = wait_for_signal();
    tokio::pin!(signal);
    let up = tokio::select! {
        up = Up::start(options) => match up {
            Ok(up) => up,
            Err(e) => {
                eprintln!("up: cannot start the stack: {e}");
                return ExitCode::FAILURE;
            }
        },
        name = &mut signal => {
            println!("up: {name} while starting: stopped");
            return ExitCode::SUCCESS;
        }
    };
    if let Some(path) = &args.env_file {
        let text = payments_e2e::up::export_lines(&up.exports());
        if let Err(e) = std::fs::write(path, text) {
            eprintln!("up: cannot write {}: {e}", path.display());
            up.stop().await;
            return ExitCode::FAILURE;
        }
    }
    print!("{}", up.banner(args.env_file.as_deref()));
    let signal = signal.await;
    println!("up: {signal}: stopping");
    up.stop().await;
    println!("up: stopped");
    ExitCode::SUCCESS
}

/// Waits for SIGINT (Ctrl-C) or SIGTERM; returns its name.
async fn wait_for_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        // Cannot listen for signals: the default actions (exit) apply.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}
