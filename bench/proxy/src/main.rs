//! A TCP proxy on 127.0.0.1 in front of the local AWS endpoint, adding latency each way (see
//! `latency_proxy`). `proxy --help` lists the options and exit codes.
//!
//! Prints its URL (`http://127.0.0.1:PORT`) as the first line on stdout, then runs until
//! Ctrl-C or SIGTERM and prints its counters on stderr. SIGUSR1 starts an outage (open
//! connections cut, new ones refused), SIGUSR2 ends it.
//!
//! ```text
//! cargo run -p latency-proxy --bin proxy -- --upstream http://127.0.0.1:4566 --latency-ms 5
//! ```

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use latency_proxy::{Proxy, ProxyOptions, parse_endpoint, parse_millis};
use tokio::signal::unix::{SignalKind, signal};

const AFTER_HELP: &str = "\
Prints its URL (http://127.0.0.1:PORT) as the first line on stdout, then runs until Ctrl-C or
SIGTERM and prints its counters on stderr. SIGUSR1 starts an outage (open connections cut, new
ones refused), SIGUSR2 ends it.

Exit codes:
  0  stopped by Ctrl-C or SIGTERM
  1  the port could not be bound, or a signal handler could not be set up
  2  bad command line (an unknown option, a missing or invalid value, no --upstream and no
     AWS_ENDPOINT_URL)";

/// A TCP proxy on 127.0.0.1 in front of the local AWS endpoint, adding latency each way, for
/// fault injection and benchmarks.
#[derive(Debug, Parser)]
#[command(name = "proxy", version, after_help = AFTER_HELP)]
struct Cli {
    /// The endpoint to forward to: http(s)://IP:PORT or localhost (names are not resolved)
    #[arg(long, value_name = "URL", env = "AWS_ENDPOINT_URL", value_parser = parse_endpoint)]
    upstream: SocketAddr,
    /// Latency added in each direction, in milliseconds (fractions allowed; a round trip pays it
    /// twice)
    #[arg(long = "latency-ms", value_name = "MS", default_value = "0", value_parser = parse_millis)]
    latency: Duration,
    /// The port to listen on, on 127.0.0.1 (0: any free port)
    #[arg(long, value_name = "P", default_value_t = 0)]
    port: u16,
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("proxy: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Cli) -> std::io::Result<()> {
    let upstream = args.upstream;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_options_parse_into_an_address_and_a_duration() {
        let cli = Cli::try_parse_from([
            "proxy",
            "--upstream",
            "http://localhost:4566",
            "--latency-ms",
            "2.5",
            "--port",
            "8080",
        ])
        .unwrap();
        assert_eq!(cli.upstream, "127.0.0.1:4566".parse().unwrap());
        assert_eq!(cli.latency, Duration::from_micros(2500));
        assert_eq!(cli.port, 8080);
    }

    #[test]
    fn bad_values_name_the_option() {
        let cases: [(&[&str], &str); 4] = [
            (&["--upstream", "http://moto.example:4566"], "--upstream"),
            (
                &["--upstream", "127.0.0.1:1", "--latency-ms=-3"],
                "--latency-ms",
            ),
            (
                &["--upstream", "127.0.0.1:1", "--latency-ms", "slow"],
                "--latency-ms",
            ),
            (&["--upstream", "127.0.0.1:1", "--port", "70000"], "--port"),
        ];
        for (args, flag) in cases {
            let err = Cli::try_parse_from([&["proxy"][..], args].concat()).unwrap_err();
            assert_eq!(err.exit_code(), 2);
            assert!(err.to_string().contains(flag), "{flag}: {err}");
        }
    }
}
