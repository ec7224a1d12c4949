//! `make up WATCH=1`: every function under its own `cargo lambda watch`, on its own port, with
//! the environment the template gives it; the local API and event source mappings invoke them
//! there, and each one's output is printed with its name in front. Saving a file rebuilds and
//! reloads the functions that use it.

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

/// How to run `cargo lambda watch`.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// The cargo to run `cargo lambda watch` with (`cargo-lambda` must be on its `PATH`).
    pub cargo: PathBuf,
    /// The first function's Invoke API port; the others follow.
    pub first_port: u16,
    /// The workspace root (where `cargo lambda watch` runs).
    pub workspace: PathBuf,
}

impl Default for WatchOptions {
    fn default() -> Self {
        Self {
            cargo: std::env::var_os("CARGO").map_or_else(|| "cargo".into(), PathBuf::from),
            first_port: 9100,
            workspace: PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .map_or_else(|| PathBuf::from("."), PathBuf::from),
        }
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
    /// A `cargo lambda watch` did not listen within the time given.
    #[error("cargo lambda watch for {function} did not listen on port {port} within {waited:?}")]
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

/// The `cargo lambda watch` processes, each in its own process group. Dropped without
/// [`stop`](Watchers::stop) (a failed start, `up` interrupted while starting), it kills their
/// groups, so that nothing they started outlives `up`.
#[derive(Default)]
struct Watchers(Vec<(String, Child)>);

impl Watchers {
    async fn stop(mut self) {
        for (function, child) in &mut self.0 {
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
    /// Provisions, builds the functions, starts one `cargo lambda watch` per function, and the
    /// API and event source mappings in front of them.
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
        build(&options).await?;
        let mut children = Watchers::default();
        let mut invokers = BTreeMap::new();
        for (i, function) in FUNCTIONS.iter().enumerate() {
            let port = options.first_port + u16::try_from(i).unwrap_or(0);
            let env = stack.settings(function)?;
            let child = spawn_watch(&options, function, port, &env)?;
            children.0.push(((*function).to_owned(), child));
            invokers.insert(
                *function,
                HttpInvoker::new(format!("http://127.0.0.1:{port}")),
            );
        }
        for (i, function) in FUNCTIONS.iter().enumerate() {
            let port = options.first_port + u16::try_from(i).unwrap_or(0);
            wait_listening(function, port, Duration::from_secs(120)).await?;
        }

        let api = stack
            .template
            .function_by_name("payments-api")
            .ok_or("template.yaml has no payments-api")?
            .clone();
        let api_arn = stack.resources.function_arn(&api.name);
        let api_invoker = Arc::new(invokers["payments-api"].clone());
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
            runner = runner.function(
                &stack.template,
                &stack.resources,
                function,
                invokers[function].clone(),
            )?;
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

    /// Stops the mappings, the API, then every `cargo lambda watch` (and what it started).
    pub async fn stop(self) {
        self.runner.stop().await;
        self.gateway.shutdown().await;
        self.children.stop().await;
    }
}

/// Builds each function on its own, as `cargo lambda watch --package` does (built together,
/// their dependencies' features would unify differently, and each watch would build again).
async fn build(options: &WatchOptions) -> Result<(), BoxError> {
    for function in FUNCTIONS {
        let status = Command::new(&options.cargo)
            .args(["build", "--package", function, "--bin", function])
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
    }
    Ok(())
}

fn spawn_watch(
    options: &WatchOptions,
    function: &str,
    port: u16,
    env: &std::collections::HashMap<String, String>,
) -> Result<Child, WatchError> {
    let mut command = Command::new(&options.cargo);
    command
        .args(["lambda", "watch", "--package", function, "--bin", function])
        .args(["--invoke-address", "127.0.0.1", "--invoke-port"])
        .arg(port.to_string())
        .args(["--concurrency", "2"])
        .current_dir(&options.workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group: Ctrl-C reaches `up`, which stops it and everything it started.
        .process_group(0)
        .kill_on_drop(true);
    for (key, value) in env {
        command.arg("--env-var").arg(format!("{key}={value}"));
    }
    // The function reaches the same endpoint, with the same dummy credentials.
    for key in [
        "AWS_ENDPOINT_URL",
        "AWS_REGION",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
    ] {
        if let Ok(value) = std::env::var(key) {
            command.arg("--env-var").arg(format!("{key}={value}"));
        }
    }
    let mut child = command.spawn().map_err(|source| WatchError::Spawn {
        program: "cargo lambda watch".to_owned(),
        source,
    })?;
    if let Some(out) = child.stdout.take() {
        tokio::spawn(prefix_lines(function.to_owned(), out));
    }
    if let Some(err) = child.stderr.take() {
        tokio::spawn(prefix_lines(function.to_owned(), err));
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

async fn wait_listening(function: &str, port: u16, waited: Duration) -> Result<(), WatchError> {
    let end = tokio::time::Instant::now() + waited;
    while tokio::time::Instant::now() < end {
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
        tracing::warn!(
            function,
            "cargo lambda watch did not stop on SIGTERM: killing it"
        );
        // SAFETY: as above.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        let _ = child.wait().await;
    }
}
