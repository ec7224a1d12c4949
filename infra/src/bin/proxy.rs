//! A TCP proxy on 127.0.0.1 in front of the local AWS endpoint, adding latency each way (see
//! `local_aws::proxy`).
//!
//! ```text
//! proxy [--upstream URL] [--latency-ms MS] [--port P]
//! ```
//!
//! - `--upstream URL`: the endpoint to forward to (default `$AWS_ENDPOINT_URL`);
//! - `--latency-ms MS`: added to each direction (default 0; fractions allowed);
//! - `--port P`: the port to listen on, on 127.0.0.1 (default: any free port).
//!
//! Prints its URL (`http://127.0.0.1:PORT`) as the first line on stdout, then runs until
//! Ctrl-C or SIGTERM and prints its counters on stderr. SIGUSR1 starts an outage (open
//! connections cut, new ones refused), SIGUSR2 ends it.
//!
//! ```text
//! cargo run -p local-aws --bin proxy -- --upstream http://127.0.0.1:4566 --latency-ms 5
//! ```

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use local_aws::ENDPOINT_VAR;
use local_aws::proxy::{Proxy, ProxyOptions, parse_endpoint};
use tokio::signal::unix::{SignalKind, signal};

const USAGE: &str = "usage: proxy [--upstream URL] [--latency-ms MS] [--port P]";

struct Args {
    upstream: String,
    latency: Duration,
    port: u16,
}

fn parse_args() -> Result<Args, String> {
    let mut upstream = std::env::var(ENDPOINT_VAR).ok().filter(|u| !u.is_empty());
    let (mut latency, mut port) = (Duration::ZERO, 0);
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value\n{USAGE}"));
        match arg.as_str() {
            "--upstream" => upstream = Some(value("--upstream")?),
            "--latency-ms" => {
                let ms: f64 = value("--latency-ms")?
                    .parse()
                    .map_err(|_| format!("--latency-ms: not a number\n{USAGE}"))?;
                latency = Duration::try_from_secs_f64(ms / 1000.0)
                    .map_err(|e| format!("--latency-ms: {e}\n{USAGE}"))?;
            }
            "--port" => {
                port = value("--port")?
                    .parse()
                    .map_err(|_| format!("--port: not a port number\n{USAGE}"))?;
            }
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    let upstream = upstream.ok_or(format!(
        "no upstream: pass --upstream or set {ENDPOINT_VAR}\n{USAGE}"
    ))?;
    Ok(Args {
        upstream,
        latency,
        port,
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("proxy: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> std::io::Result<()> {
    let upstream = parse_endpoint(&args.upstream)?;
    let proxy = Proxy::start_on_port(
        args.port,
        upstream,
        ProxyOptions::with_latency(args.latency),
    )
    .await?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{}", proxy.url())?;
    stdout.flush()?;
    drop(stdout);
    eprintln!(
        "proxy: {} -> {upstream}, {:?} each way (Ctrl-C to stop; SIGUSR1: outage, SIGUSR2: back)",
        proxy.url(),
        args.latency
    );

    let mut terminate = signal(SignalKind::terminate())?;
    let mut outage = signal(SignalKind::user_defined1())?;
    let mut back = signal(SignalKind::user_defined2())?;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = terminate.recv() => break,
            _ = outage.recv() => {
                proxy.set_available(false);
                eprintln!("proxy: outage ({})", proxy.stats());
            }
            _ = back.recv() => {
                proxy.set_available(true);
                eprintln!("proxy: available ({})", proxy.stats());
            }
        }
    }
    let stats = proxy.stats();
    proxy.shutdown().await;
    eprintln!("proxy: stopped: {stats}");
    Ok(())
}
