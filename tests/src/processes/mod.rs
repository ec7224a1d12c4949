//! The functions as their own processes, as Lambda runs them: each function's binary, built once
//! with the workspace, runs with the environment the template gives it and polls one Lambda
//! Runtime API (`cargo lambda watch --only-lambda-apis`, from the project's pinned cargo-lambda,
//! which builds nothing). The local API and the event source mappings invoke them through the
//! Invoke API on the same port ([`Processes::invoker`]). What runs is each function's own `main`:
//! its environment reading, its init checks, `lambda_runtime`'s loop and its JSON.
//!
//! As on Lambda, a failed execution environment is replaced:
//!
//! - a function whose process exits (a failed init, a crash) is started again, and the
//!   invocation it held comes back to its event source at the function's timeout;
//! - an invocation that runs past the function's timeout is abandoned by its event source (the
//!   batch is retried) and the process that ran it is killed and started again;
//! - a handler's panic fails its record (the batch processor catches it) and the process goes
//!   on; a panic outside a record's handler is the invocation's error (`lambda_runtime` catches
//!   it), and the batch is retried.
//!
//! [`Processes::observed`] says which happened, and sums the metrics each function printed
//! (its Embedded Metric Format lines): what the in-process functions count in memory.

mod forward;
mod supervise;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use local_aws::provision::Provisioned;
use local_aws::runner::{HttpInvoker, Invocation, InvokeFuture, Invoker};
use local_aws::template::Template;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use forward::{ForwardError, forward};
pub use supervise::Observed;

use crate::stack::BoxError;
use supervise::{RuntimeApi, Supervisor};

/// The functions of the pipeline, in the order they are started.
pub const FUNCTIONS: [&str; 5] = [
    "payments-api",
    "payments-reader",
    "payments-publisher",
    "payment-processor",
    "receipt-sender",
];

/// How to build the functions and run the Runtime API.
#[derive(Debug, Clone)]
pub struct ProcessOptions {
    /// The cargo to build with and to run `cargo lambda watch` with (the project's cargo-lambda,
    /// from `make tools-install`, comes first on its `PATH`).
    pub cargo: PathBuf,
    /// The Runtime API's and Invoke API's port (0: a free one).
    pub runtime_port: u16,
    /// The workspace root (where the build and `cargo lambda watch` run).
    pub workspace: PathBuf,
    /// Build the workspace's binaries first (`cargo build --workspace --bins`, a no-op once
    /// built); off, they must be built already (`make test` builds them).
    pub build: bool,
    /// Print each function's output with its name in front (`make up`); off, it is only read
    /// for its metrics and kept for the reasons of an exit.
    pub echo: bool,
    /// Settings that replace the template's, by function: a function's configuration changed
    /// by hand (a misconfiguration, in the tests).
    pub env_overrides: BTreeMap<String, BTreeMap<String, String>>,
    /// Processes by function (1 when not given): Lambda runs one execution environment per
    /// concurrent invocation, and the Runtime API gives each waiting process the next one.
    /// payments-api has [`API_INSTANCES`], so that concurrent requests of one idempotency key
    /// meet as they do on AWS; the consumers have one each.
    pub instances: BTreeMap<String, usize>,
}

/// payments-api's processes by default.
pub const API_INSTANCES: usize = 4;

impl Default for ProcessOptions {
    fn default() -> Self {
        Self {
            cargo: std::env::var_os("CARGO").map_or_else(|| "cargo".into(), PathBuf::from),
            runtime_port: 0,
            workspace: PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .map_or_else(|| PathBuf::from("."), PathBuf::from),
            build: true,
            echo: false,
            env_overrides: BTreeMap::new(),
            instances: [("payments-api".to_owned(), API_INSTANCES)].into(),
        }
    }
}

impl ProcessOptions {
    /// Where the workspace's build put the functions' binaries: beside this program's own (the
    /// demo and `up` are binaries of the workspace, built into the same directory; a test runs
    /// from its `deps/` below it).
    pub fn binaries(&self) -> PathBuf {
        let beside = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(PathBuf::from));
        match beside {
            Some(dir) if dir.ends_with("deps") => dir.parent().map_or(dir.clone(), PathBuf::from),
            Some(dir) => dir,
            None => self.workspace.join("target/debug"),
        }
    }
}

/// Why the functions could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// `cargo build` of the functions failed.
    #[error("building the functions failed ({0}); see the output above")]
    Build(std::process::ExitStatus),
    /// A program could not be started.
    #[error(
        "cannot start {program}: {source} (is cargo-lambda installed? `make tools-install` installs the project's)"
    )]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// A function's binary is not built.
    #[error(
        "{} is not built: build the workspace's binaries (`cargo build --workspace --bins`; `make test` and `make demo` do), or start with the build on",
        binary.display()
    )]
    NotBuilt {
        /// Where it was looked for.
        binary: PathBuf,
    },
    /// The Runtime API exited before it listened.
    #[error("the Runtime API exited before it listened on port {port}: {status}")]
    Exited {
        /// Its port.
        port: u16,
        /// How it exited.
        status: std::process::ExitStatus,
    },
    /// The Runtime API did not listen within the time given.
    #[error("the Runtime API did not listen on port {port} within {waited:?}")]
    NotListening {
        /// Its port.
        port: u16,
        /// How long it was given.
        waited: Duration,
    },
    /// The template has no such function.
    #[error("template.yaml has no function {0}")]
    NoFunction(String),
}

/// The functions running as processes under one Runtime API.
pub struct Processes {
    port: u16,
    runtime: RuntimeApi,
    kill: BTreeMap<String, Vec<mpsc::UnboundedSender<String>>>,
    observed: Arc<Mutex<Observed>>,
    cancel: CancellationToken,
    supervisors: Vec<tokio::task::JoinHandle<()>>,
}

impl Processes {
    /// Builds the functions (if [`ProcessOptions::build`]), starts the Runtime API, then each of
    /// `functions` with the environment `resources` resolves from the template.
    pub async fn start(
        template: &Template,
        resources: &Provisioned,
        functions: &[&str],
        options: &ProcessOptions,
    ) -> Result<Self, BoxError> {
        if options.build {
            supervise::build(options).await?;
        }
        let port = match options.runtime_port {
            0 => free_port()?,
            port => port,
        };
        let observed = Arc::new(Mutex::new(Observed::default()));
        let mut runtime = RuntimeApi::new(supervise::spawn_runtime_api(options, port)?);
        runtime
            .wait_listening(port, Duration::from_secs(60))
            .await?;
        let cancel = CancellationToken::new();
        let mut kill = BTreeMap::new();
        let mut supervisors = Vec::new();
        for function in functions {
            let f = template
                .function_by_name(function)
                .ok_or_else(|| ProcessError::NoFunction((*function).to_owned()))?;
            let binary = options.binaries().join(function);
            if !binary.is_file() {
                return Err(ProcessError::NotBuilt { binary }.into());
            }
            let mut env: BTreeMap<String, String> = resources.lambda_env(f)?;
            let route = f.binary.as_deref().unwrap_or(&f.name);
            env.insert(
                "AWS_LAMBDA_RUNTIME_API".into(),
                format!("http://127.0.0.1:{port}/.rt/{route}"),
            );
            if let Some(overrides) = options.env_overrides.get(*function) {
                env.extend(overrides.clone());
            }
            let instances = options.instances.get(*function).copied().unwrap_or(1);
            let mut senders = Vec::new();
            for _ in 0..instances.max(1) {
                let (tx, rx) = mpsc::unbounded_channel();
                let supervisor = Supervisor {
                    function: (*function).to_owned(),
                    binary: binary.clone(),
                    env: env.clone(),
                    workspace: options.workspace.clone(),
                    echo: options.echo,
                    observed: observed.clone(),
                };
                // The first start is checked here: a binary that cannot be run at all stops the
                // start.
                let child = supervisor.spawn()?;
                supervisors.push(tokio::spawn(supervisor.run(child, rx, cancel.clone())));
                senders.push(tx);
            }
            kill.insert((*function).to_owned(), senders);
        }
        Ok(Self {
            port,
            runtime,
            kill,
            observed,
            cancel,
            supervisors,
        })
    }

    /// The Invoke API, for a caller that does not replace an environment on a timeout (the local
    /// API: API Gateway's own timeout does not stop the function).
    pub fn http_invoker(&self) -> HttpInvoker {
        HttpInvoker::new(format!("http://127.0.0.1:{}", self.port))
    }

    /// The Invoke API for an event source mapping of `function`: an invocation the mapping
    /// abandons (its timeout) replaces the function's process, as Lambda replaces the
    /// execution environment of a timed-out invocation.
    pub fn invoker(&self, function: &str) -> Result<ProcessInvoker, ProcessError> {
        let kill = self
            .kill
            .get(function)
            .ok_or_else(|| ProcessError::NoFunction(function.to_owned()))?
            .clone();
        Ok(ProcessInvoker {
            http: self.http_invoker(),
            kill,
        })
    }

    /// What the functions printed and how their processes ended, so far.
    pub fn observed(&self) -> Observed {
        self.observed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Stops the functions (SIGTERM, then SIGKILL after 10 s), then the Runtime API.
    pub async fn stop(mut self) {
        self.cancel.cancel();
        for supervisor in self.supervisors.drain(..) {
            let _ = supervisor.await;
        }
        std::mem::take(&mut self.runtime).stop().await;
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        // Stopped without `stop` (a failed start, an interrupted run): the supervisors end their
        // processes; the Runtime API's group is killed by its watcher.
        self.cancel.cancel();
    }
}

/// [`HttpInvoker`] for one function's event source mapping: an invocation dropped before its
/// answer (the mapping's timeout) kills the process that ran it (every process of the function,
/// when it has several), and its supervisor starts a new one.
#[derive(Clone)]
pub struct ProcessInvoker {
    http: HttpInvoker,
    kill: Vec<mpsc::UnboundedSender<String>>,
}

/// Sends its reason to the function's supervisors when dropped armed.
struct KillOnDrop {
    kill: Vec<mpsc::UnboundedSender<String>>,
    reason: Option<String>,
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(reason) = self.reason.take() {
            for kill in &self.kill {
                let _ = kill.send(reason.clone());
            }
        }
    }
}

impl Invoker for ProcessInvoker {
    fn invoke(&self, invocation: Invocation) -> InvokeFuture<'_> {
        Box::pin(async move {
            let timeout = invocation
                .deadline
                .duration_since(std::time::SystemTime::now())
                .unwrap_or_default();
            let mut guard = KillOnDrop {
                kill: self.kill.clone(),
                reason: Some(format!(
                    "invocation {} ran past the function's timeout ({:.0} s)",
                    invocation.request_id,
                    timeout.as_secs_f64()
                )),
            };
            let answer = self.http.invoke(invocation).await;
            guard.reason = None;
            answer
        })
    }
}

fn free_port() -> Result<u16, std::io::Error> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
}
