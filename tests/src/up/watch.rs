//! `make up WATCH=1`: every function as its own process, the workspace's binary built once, with
//! the environment the template gives it, polling one Lambda Runtime API (`cargo lambda watch
//! --only-lambda-apis`, which builds nothing); the local API and event source mappings invoke them
//! there through the Invoke API, and each one's output is printed with its name in front. What
//! runs is each function's own `main`: its environment reading, `lambda_runtime`'s loop and its
//! JSON.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use local_aws::gateway::{Gateway, GatewayOptions, JwtAuthorizer};
use local_aws::runner::{HttpInvoker, Runner, RunningRunner};
use local_aws::template::Naming;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

use crate::stack::{BoxError, Stack};

/// The functions, in the order their ports are given.
pub const FUNCTIONS: [&str; 4] = [
    "payments-api",
    "payments-publisher",
    "payment-processor",
    "receipt-sender",
];

/// How to build the functions and run the Runtime API.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// The cargo to build with and to run `cargo lambda watch` with (`cargo-lambda` must be on
    /// its `PATH`).
    pub cargo: PathBuf,
    /// The Runtime API's and Invoke API's port.
    pub runtime_port: u16,
    /// The workspace root (where the build and `cargo lambda watch` run).
    pub workspace: PathBuf,
    /// Build the workspace's binaries first (`cargo build --workspace --bins`, a no-op after
    /// `make test`); off, they must be built already.
    pub build: bool,
}

impl Default for WatchOptions {
    fn default() -> Self {
        Self {
            cargo: std::env::var_os("CARGO").map_or_else(|| "cargo".into(), PathBuf::from),
            runtime_port: 9100,
            workspace: PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .map_or_else(|| PathBuf::from("."), PathBuf::from),
            build: true,
        }
    }
}

impl WatchOptions {
    /// Where the workspace's build put the functions' binaries: beside this program's own (`up`
    /// is one of the workspace's binaries, built into the same directory).
    pub fn binaries(&self) -> PathBuf {
        std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(PathBuf::from))
            .unwrap_or_else(|| self.workspace.join("target/debug"))
    }
}

/// Why watch mode could not start.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// `cargo build` of the functions failed.
    #[error("building the functions failed ({0}); see the output above")]
    Build(std::process::ExitStatus),
    /// A program could not be started.
    #[error(
        "cannot start {program}: {source} (is cargo-lambda on PATH? `make up WATCH=1` puts the project's on it)"
    )]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// A function's binary is not built (start without `--no-build`, or run
    /// `cargo build --workspace --bins`).
    #[error(
        "{} is not built: build the workspace's binaries (`cargo build --workspace --bins`; `make test` does), or start without --no-build",
        binary.display()
    )]
    NotBuilt {
        /// Where it was looked for.
        binary: PathBuf,
    },
    /// The Runtime API exited before it listened.
    #[error("{function} exited before it listened on port {port}: {status}")]
    Exited {
        /// Its name.
        function: String,
        /// Its port.
        port: u16,
        /// How it exited.
        status: std::process::ExitStatus,
    },
    /// The Runtime API did not listen within the time given.
    #[error("{function} did not listen on port {port} within {waited:?}")]
    NotListening {
        /// The function.
        function: String,
        /// Its port.
        port: u16,
        /// How long it was given.
        waited: Duration,
    },
}

/// The running stack in watch mode.
pub struct Watch {
    /// What was provisioned.
    pub stack: Stack,
    gateway: Gateway,
    runner: RunningRunner,
    children: Watchers,
}

/// The Runtime API and the functions' processes, each in its own process group. Dropped without
/// [`stop`](Watchers::stop) (a failed start, `up` interrupted while starting), it kills their
/// groups, so that nothing they started outlives `up`.
#[derive(Default)]
struct Watchers(Vec<(String, Child)>);

impl Watchers {
    /// Stops the functions, then the Runtime API they poll (the reverse of their start).
    async fn stop(mut self) {
        for (function, child) in self.0.iter_mut().rev() {
            stop_child(function, child).await;
        }
        self.0.clear();
    }
}

impl Drop for Watchers {
    fn drop(&mut self) {
        for (_, child) in &self.0 {
            if let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) {
                // SAFETY: kill(2) with a process group id and a signal number has no memory
                // effects.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
            }
        }
    }
}

impl Watch {
    /// Provisions, builds the functions once, starts the Runtime API and each function's
    /// process, and the API and event source mappings in front of them.
    pub async fn start(
        api_addr: SocketAddr,
        fail_payments: &str,
        options: WatchOptions,
    ) -> Result<Self, BoxError> {
        let stack = Stack::provision_named(
            Naming::none(),
            &[
                ("FailPayments", fail_payments),
                ("BackoffBaseSeconds", "1"),
                ("Stage", crate::stack::DEV_STAGE),
            ],
        )
        .await?;
        if options.build {
            build(&options).await?;
        }
        let mut children = Watchers::default();
        let port = options.runtime_port;
        let mut runtime = spawn_runtime_api(&options)?;
        let listening = wait_listening(&mut runtime, port, Duration::from_secs(60)).await;
        children.0.push((RUNTIME_API.to_owned(), runtime));
        listening?;
        // One Invoke API for every function: it routes by the function's name.
        let invoker = HttpInvoker::new(format!("http://127.0.0.1:{port}"));
        for function in FUNCTIONS {
            let f = stack
                .template
                .function_by_name(function)
                .ok_or_else(|| format!("template.yaml has no function {function}"))?;
            let mut env: BTreeMap<String, String> = stack.settings(function)?.into_iter().collect();
            let route = f.binary.as_deref().unwrap_or(&f.name);
            env.insert(
                "AWS_LAMBDA_RUNTIME_API".into(),
                format!("http://127.0.0.1:{port}/.rt/{route}"),
            );
            env.insert("AWS_LAMBDA_FUNCTION_NAME".into(), f.name.clone());
            env.insert(
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE".into(),
                f.memory_size.to_string(),
            );
            env.insert("AWS_LAMBDA_FUNCTION_VERSION".into(), "$LATEST".into());
            // What the template's LoggingConfig makes Lambda set: JSON logs at INFO.
            env.insert("AWS_LAMBDA_LOG_FORMAT".into(), "JSON".into());
            env.insert("AWS_LAMBDA_LOG_LEVEL".into(), "INFO".into());
            let child = spawn_function(&options, function, &env)?;
            children.0.push((function.to_owned(), child));
        }

        let api = stack
            .template
            .function_by_name("payments-api")
            .ok_or("template.yaml has no payments-api")?
            .clone();
        let api_arn = stack.resources.function_arn(&api.name);
        let api_invoker = Arc::new(invoker.clone());
        let gateway = Gateway::serve(
            api_addr,
            GatewayOptions::for_function(&api).with_jwt_authorizer(
                JwtAuthorizer::from_parameters(&stack.template, "JwtIssuer", "JwtAudience")
                    .ok_or("template.yaml has no JwtIssuer/JwtAudience parameters")?,
            ),
            move |request| {
                let (invoker, api, arn) = (api_invoker.clone(), api.clone(), api_arn.clone());
                async move { super::forward::forward(&invoker, &api, arn, request).await }
            },
        )
        .await?;

        let mut runner = Runner::from_clients(&stack.clients).wait_time_seconds(1);
        for function in &FUNCTIONS[1..] {
            runner =
                runner.function(&stack.template, &stack.resources, function, invoker.clone())?;
        }
        let runner = runner.start(CancellationToken::new());
        Ok(Self {
            stack,
            gateway,
            runner,
            children,
        })
    }

    /// The API's base URL.
    pub fn api_url(&self) -> String {
        self.gateway.url()
    }

    /// Stops the mappings, the API, then the functions and the Runtime API.
    pub async fn stop(self) {
        self.runner.stop().await;
        self.gateway.shutdown().await;
        self.children.stop().await;
    }
}

/// The Runtime API's name in the output and in errors.
const RUNTIME_API: &str = "runtime-api";

/// Builds the workspace's binaries, with the workspace's features (those `make test` builds
/// with, so that neither build undoes the other), in the profile of the directory they are run
/// from.
async fn build(options: &WatchOptions) -> Result<(), BoxError> {
    let mut command = Command::new(&options.cargo);
    command.args(["build", "--workspace", "--bins"]);
    if options.binaries().ends_with("release") {
        command.arg("--release");
    }
    let status = command
        .current_dir(&options.workspace)
        .status()
        .await
        .map_err(|source| WatchError::Spawn {
            program: format!("{} build", options.cargo.display()),
            source,
        })?;
    if !status.success() {
        return Err(WatchError::Build(status).into());
    }
    Ok(())
}

/// `cargo lambda watch --only-lambda-apis`: the Runtime API the functions poll (each on its own
/// path, `/.rt/FUNCTION`) and the Invoke API the runner and the local API call, on one port.
/// It builds and starts nothing.
fn spawn_runtime_api(options: &WatchOptions) -> Result<Child, WatchError> {
    let mut command = Command::new(&options.cargo);
    command
        .args(["lambda", "watch", "--only-lambda-apis"])
        .args(["--invoke-address", "127.0.0.1", "--invoke-port"])
        .arg(options.runtime_port.to_string());
    spawn(
        command,
        options,
        RUNTIME_API,
        "cargo lambda watch --only-lambda-apis",
    )
}

/// The function's own binary, with `env` (the template's environment and the Runtime API's
/// variables) and the same endpoint and dummy credentials as this process.
fn spawn_function(
    options: &WatchOptions,
    function: &str,
    env: &BTreeMap<String, String>,
) -> Result<Child, WatchError> {
    let binary = options.binaries().join(function);
    if !binary.is_file() {
        return Err(WatchError::NotBuilt { binary });
    }
    let mut command = Command::new(&binary);
    command.env_clear();
    for key in [
        "PATH",
        "AWS_ENDPOINT_URL",
        "AWS_REGION",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "RUST_LOG",
    ] {
        if let Some(value) = std::env::var_os(key) {
            command.env(key, value);
        }
    }
    command.envs(env);
    spawn(command, options, function, &binary.display().to_string())
}

/// Starts `command` in the workspace, in its own process group (Ctrl-C reaches `up`, which
/// stops it and everything it started), its output printed with `name` in front.
fn spawn(
    mut command: Command,
    options: &WatchOptions,
    name: &str,
    program: &str,
) -> Result<Child, WatchError> {
    command
        .current_dir(&options.workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    // SAFETY: prctl(2) with PR_SET_PDEATHSIG only sets a flag of the child being started (no
    // allocation, no lock): the child gets SIGTERM when `up` dies, even by SIGKILL, and nothing
    // it runs outlives `up`.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().map_err(|source| WatchError::Spawn {
        program: program.to_owned(),
        source,
    })?;
    if let Some(out) = child.stdout.take() {
        tokio::spawn(prefix_lines(name.to_owned(), out));
    }
    if let Some(err) = child.stderr.take() {
        tokio::spawn(prefix_lines(name.to_owned(), err));
    }
    Ok(child)
}

/// Prints each line of `output` with `function` in front.
async fn prefix_lines(function: String, output: impl AsyncRead + Unpin) {
    let mut lines = BufReader::new(output).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        println!("{function:<18} | {line}");
    }
}

/// Waits until `child` (the Runtime API) listens on `port`; fails as soon as it exits.
async fn wait_listening(child: &mut Child, port: u16, waited: Duration) -> Result<(), WatchError> {
    let function = RUNTIME_API;
    let end = tokio::time::Instant::now() + waited;
    while tokio::time::Instant::now() < end {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(WatchError::Exited {
                function: function.to_owned(),
                port,
                status,
            });
        }
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(WatchError::NotListening {
        function: function.to_owned(),
        port,
        waited,
    })
}

/// SIGTERM to the child's process group, then SIGKILL after 10 s.
async fn stop_child(function: &str, child: &mut Child) {
    let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) else {
        return;
    };
    // SAFETY: kill(2) with a process group id and a signal number has no memory effects.
    unsafe { libc::kill(-pid, libc::SIGTERM) };
    if tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .is_err()
    {
        tracing::warn!(function, "did not stop on SIGTERM: killing it");
        // SAFETY: as above.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        let _ = child.wait().await;
    }
}
