//! A local AWS of a test's own: a moto server (and a Redis server) started by
//! `infra/local-aws/local-aws run`, as `make test` starts the suite's, on free loopback ports.
//!
//! The suite's server applies DynamoDB requests one at a time for every test at once (as
//! DynamoDB applies writes to one item): a test that makes thousands of requests, such as a
//! fault exploration, on a server of its own neither waits for the others' requests nor holds
//! them up, and the two servers use both cores.
//!
//! The server runs as long as this process: `local-aws run` serves a command that waits for its
//! standard input to close, which happens when this process ends, however it ends (a panic, an
//! abort, a kill), and then stops both servers.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use crate::stack::BoxError;

/// A running server of this process's own.
pub struct OwnServer {
    /// Its endpoint, as `AWS_ENDPOINT_URL` would give it.
    pub endpoint: String,
    /// `local-aws run`, which stops the servers when its command ends: when this is dropped
    /// (its standard input closes) or this process ends.
    _run: Child,
}

impl OwnServer {
    /// Starts the servers and waits until moto answers (`local-aws run` starts its command, which
    /// prints the endpoint, only then; it gives up after three tries of 30 s).
    pub async fn start() -> Result<Self, BoxError> {
        tokio::task::spawn_blocking(Self::start_blocking).await?
    }

    fn start_blocking() -> Result<Self, BoxError> {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let script = root.join("infra/local-aws/local-aws");
        // What local-aws says goes to a file, not to this process's output: it still speaks
        // while it stops the servers, after this process ended.
        let log = std::env::temp_dir().join(format!("own-local-aws-{}.log", std::process::id()));
        let mut run = Command::new(&script)
            .args(["run", "--", "sh", "-c"])
            .arg(r#"printf '%s\n' "$AWS_ENDPOINT_URL"; exec cat >/dev/null"#)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .map_err(|e| format!("{} could not start: {e}", script.display()))?;
        let mut line = String::new();
        BufReader::new(run.stdout.take().expect("piped")).read_line(&mut line)?;
        let endpoint = line.trim();
        if !endpoint.starts_with("http") {
            let said = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(format!("local-aws run printed no endpoint; it said:\n{said}").into());
        }
        // local-aws writes on through its open file.
        let _ = std::fs::remove_file(&log);
        Ok(Self {
            endpoint: endpoint.to_owned(),
            _run: run,
        })
    }

    /// The SDK configuration for this server, as [`local_aws::local_sdk_config`] makes it for
    /// the suite's.
    pub async fn sdk_config(&self) -> aws_config::SdkConfig {
        local_aws::sdk_config_for(&self.endpoint).await
    }
}
