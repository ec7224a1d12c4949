//! Starting, watching and replacing the functions' processes, and reading their output.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{ProcessError, ProcessOptions};

/// Lines of a function's output kept to say why its process ended.
const LAST_LINES: usize = 5;

/// What the functions' processes printed and how they ended.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The sum of each metric a function printed (Embedded Metric Format lines), by function
    /// (its `function` dimension) and metric name.
    pub metrics: BTreeMap<String, BTreeMap<String, f64>>,
    /// Each process that ended while the function was to keep running (a failed init, a crash,
    /// a timeout), by function: why, with its last lines of output.
    pub replaced: BTreeMap<String, Vec<String>>,
    /// Processes started, by function (1 when none was replaced).
    pub starts: BTreeMap<String, u64>,
    last_lines: BTreeMap<String, VecDeque<String>>,
}

impl Observed {
    /// The sum of `metric` printed by `function` (0 when it printed none).
    pub fn metric(&self, function: &str, metric: &str) -> u64 {
        self.metrics
            .get(function)
            .and_then(|m| m.get(metric))
            .map_or(0, |v| *v as u64)
    }

    /// The last lines `function` printed that were not metrics (at most a few dozen; a replaced
    /// process's go with it into the `replaced` field).
    pub fn printed(&self, function: &str) -> impl Iterator<Item = &str> {
        self.last_lines
            .get(function)
            .into_iter()
            .flatten()
            .map(String::as_str)
    }

    /// Adds the metrics of `line` when it is an Embedded Metric Format line; keeps it otherwise.
    fn line(&mut self, function: &str, line: &str) {
        if let Some((dimension, values)) = emf(line) {
            let sums = self.metrics.entry(dimension).or_default();
            for (name, value) in values {
                *sums.entry(name).or_default() += value;
            }
            return;
        }
        let last = self.last_lines.entry(function.to_owned()).or_default();
        if last.len() == LAST_LINES {
            last.pop_front();
        }
        last.push_back(line.to_owned());
    }

    fn replaced(&mut self, function: &str, reason: String) {
        let last: Vec<String> = self
            .last_lines
            .get_mut(function)
            .map(|l| l.drain(..).collect())
            .unwrap_or_default();
        let reason = match last.last() {
            Some(line) => format!("{reason}; its last line: {line}"),
            None => reason,
        };
        self.replaced
            .entry(function.to_owned())
            .or_default()
            .push(reason);
    }
}

/// The `function` dimension and the metrics of an EMF line (`None` for any other line).
fn emf(line: &str) -> Option<(String, Vec<(String, f64)>)> {
    let value: serde_json::Value = serde_json::from_str(line).ok()?;
    let directive = value.get("_aws")?.get("CloudWatchMetrics")?.get(0)?;
    let function = value
        .get(payments_model::metrics::FUNCTION_DIMENSION)?
        .as_str()?
        .to_owned();
    let metrics = directive
        .get("Metrics")?
        .as_array()?
        .iter()
        .filter_map(|m| m.get("Name")?.as_str())
        .filter_map(|name| Some((name.to_owned(), value.get(name)?.as_f64()?)))
        .collect();
    Some((function, metrics))
}

/// One function's process and the processes that replace it.
pub(super) struct Supervisor {
    pub function: String,
    pub binary: PathBuf,
    pub env: BTreeMap<String, String>,
    pub workspace: PathBuf,
    pub echo: bool,
    pub observed: Arc<Mutex<Observed>>,
}

impl Supervisor {
    /// Starts the function's binary with its environment, and the same endpoint and dummy
    /// credentials as this process.
    pub fn spawn(&self) -> Result<Child, ProcessError> {
        let mut command = Command::new(&self.binary);
        command.env_clear();
        command.envs(local_aws::passed_through_env(true));
        command.envs(&self.env);
        let child = spawn(command, &self.workspace, &self.binary.display().to_string())?;
        *self
            .observed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .starts
            .entry(self.function.clone())
            .or_default() += 1;
        Ok(self.read_output(child))
    }

    fn read_output(&self, mut child: Child) -> Child {
        let (function, observed) = (self.function.clone(), self.observed.clone());
        read_lines(&mut child, &self.function, self.echo, move |line| {
            observed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .line(&function, line);
        });
        child
    }

    /// Watches `child` until `cancel`: a process that exits, or that `kill` names (a timed-out
    /// invocation), is replaced by a new one, as Lambda replaces a failed execution environment.
    pub async fn run(
        self,
        mut child: Child,
        mut kill: mpsc::UnboundedReceiver<String>,
        cancel: CancellationToken,
    ) {
        loop {
            let reason = tokio::select! {
                status = child.wait() => match status {
                    Ok(status) => format!("its process exited ({status})"),
                    Err(e) => format!("its process could not be waited for: {e}"),
                },
                Some(reason) = kill.recv() => {
                    kill_group(&child, libc::SIGKILL);
                    let _ = child.wait().await;
                    reason
                },
                () = cancel.cancelled() => {
                    stop_child(&self.function, &mut child).await;
                    return;
                },
            };
            // Give the output's readers a moment to take the last lines.
            tokio::time::sleep(Duration::from_millis(50)).await;
            tracing::warn!(function = %self.function, "{reason}: a new execution environment starts");
            self.observed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .replaced(&self.function, reason);
            // Kills that came with the same timeout are the same replacement.
            while kill.try_recv().is_ok() {}
            // A failing init is retried, as Lambda does, without spinning.
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(500)) => {},
                () = cancel.cancelled() => return,
            }
            child = match self.spawn() {
                Ok(child) => child,
                Err(e) => {
                    tracing::error!(function = %self.function, "cannot start it again: {e}");
                    return;
                }
            };
        }
    }
}

/// The Runtime API's process group. Dropped without [`stop`](RuntimeApi::stop) (a failed start,
/// an interrupted run), it kills the group, so that nothing it started outlives this process.
#[derive(Default)]
pub(super) struct RuntimeApi(Option<Child>);

impl RuntimeApi {
    pub fn new(child: Child) -> Self {
        Self(Some(child))
    }

    /// Waits until the Runtime API listens on `port`; fails as soon as it exits.
    pub async fn wait_listening(
        &mut self,
        port: u16,
        waited: Duration,
    ) -> Result<(), ProcessError> {
        let end = tokio::time::Instant::now() + waited;
        while tokio::time::Instant::now() < end {
            if let Some(Ok(Some(status))) = self.0.as_mut().map(Child::try_wait) {
                return Err(ProcessError::Exited { port, status });
            }
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(ProcessError::NotListening { port, waited })
    }

    pub async fn stop(mut self) {
        if let Some(mut child) = self.0.take() {
            stop_child("runtime-api", &mut child).await;
        }
    }
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        if let Some(child) = &self.0 {
            kill_group(child, libc::SIGKILL);
        }
    }
}

/// Builds the workspace's binaries, with the workspace's features (those `make test` builds
/// with, so that neither build undoes the other), in the profile of the directory they are run
/// from.
pub(super) async fn build(options: &ProcessOptions) -> Result<(), ProcessError> {
    let mut command = Command::new(&options.cargo);
    command.args(["build", "--workspace", "--bins"]);
    if options.binaries().ends_with("release") {
        command.arg("--release");
    }
    let status = command
        .current_dir(&options.workspace)
        .status()
        .await
        .map_err(|source| ProcessError::Spawn {
            program: format!("{} build", options.cargo.display()),
            source,
        })?;
    if !status.success() {
        return Err(ProcessError::Build(status));
    }
    Ok(())
}

/// `cargo lambda watch --only-lambda-apis`: the Runtime API the functions poll (each on its own
/// path, `/.rt/FUNCTION`) and the Invoke API the mappings and the local API call, on one port.
/// It builds and starts nothing. Its output is printed only with [`ProcessOptions::echo`].
pub(super) fn spawn_runtime_api(
    options: &ProcessOptions,
    port: u16,
) -> Result<Child, ProcessError> {
    let mut command = Command::new(&options.cargo);
    // The project's pinned cargo-lambda (`make tools-install`) comes first on the PATH.
    let tools = options.workspace.join(".venv-tools/bin");
    if tools.is_dir() {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let paths = std::iter::once(tools).chain(std::env::split_paths(&path));
        if let Ok(path) = std::env::join_paths(paths) {
            command.env("PATH", path);
        }
    }
    command
        .args(["lambda", "watch", "--only-lambda-apis"])
        .args(["--invoke-address", "127.0.0.1", "--invoke-port"])
        .arg(port.to_string());
    let mut child = spawn(
        command,
        &options.workspace,
        "cargo lambda watch --only-lambda-apis",
    )?;
    read_lines(&mut child, "runtime-api", options.echo, |_| {});
    Ok(child)
}

/// Reads the lines of `child`'s stdout and stderr: each is printed with `name` in front when
/// `echo`, and given to `sink`.
fn read_lines(
    child: &mut Child,
    name: &str,
    echo: bool,
    sink: impl Fn(&str) + Clone + Send + 'static,
) {
    let outputs = [
        child
            .stdout
            .take()
            .map(|o| Box::new(o) as Box<dyn AsyncRead + Send + Unpin>),
        child
            .stderr
            .take()
            .map(|o| Box::new(o) as Box<dyn AsyncRead + Send + Unpin>),
    ];
    for output in outputs.into_iter().flatten() {
        let (name, sink) = (name.to_owned(), sink.clone());
        tokio::spawn(async move {
            let mut lines = BufReader::new(output).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if echo {
                    println!("{name:<18} | {line}");
                }
                sink(&line);
            }
        });
    }
}

/// Starts `command` in `workspace`, in its own process group (a terminal's Ctrl-C reaches only
/// this process, which stops what it started), its output piped.
fn spawn(
    mut command: Command,
    workspace: &std::path::Path,
    program: &str,
) -> Result<Child, ProcessError> {
    command
        .current_dir(workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    // SAFETY: prctl(2) with PR_SET_PDEATHSIG only sets a flag of the child being started (no
    // allocation, no lock): the child gets SIGTERM when this process dies, even by SIGKILL.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command.spawn().map_err(|source| ProcessError::Spawn {
        program: program.to_owned(),
        source,
    })
}

fn kill_group(child: &Child, signal: i32) {
    if let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) {
        // SAFETY: kill(2) with a process group id and a signal number has no memory effects.
        unsafe { libc::kill(-pid, signal) };
    }
}

/// SIGTERM to the child's process group, then SIGKILL after 10 s.
async fn stop_child(name: &str, child: &mut Child) {
    if child.id().is_none() {
        return;
    }
    kill_group(child, libc::SIGTERM);
    if tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .is_err()
    {
        tracing::warn!(name, "did not stop on SIGTERM: killing it");
        kill_group(child, libc::SIGKILL);
        let _ = child.wait().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_lines_are_summed_by_function_and_other_lines_kept() {
        let line = lambda_idempotency::metrics::Metrics::new("PaymentsPipeline")
            .dimension("function", "payment-processor")
            .count("processed", 8)
            .count("cacheHits", 2)
            .to_json(1_700_000_000_000);
        let mut observed = Observed::default();
        observed.line("payment-processor", &line);
        observed.line("payment-processor", &line);
        observed.line(
            "payment-processor",
            r#"{"level":"INFO","message":"not a metric"}"#,
        );
        assert_eq!(observed.metric("payment-processor", "processed"), 16);
        assert_eq!(observed.metric("payment-processor", "cacheHits"), 4);
        assert_eq!(observed.metric("payment-processor", "failed"), 0);
        assert_eq!(observed.metric("receipt-sender", "processed"), 0);
        observed.replaced(
            "payment-processor",
            "its process exited (exit status: 1)".into(),
        );
        assert_eq!(
            observed.replaced["payment-processor"],
            [
                r#"its process exited (exit status: 1); its last line: {"level":"INFO","message":"not a metric"}"#
            ]
        );
    }
}
