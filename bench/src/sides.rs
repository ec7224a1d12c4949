//! The sides, and how the driver runs each in a process of its own: `bench-worker` for this
//! project's four configurations, `bench/powertools/bench.py` for Powertools.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use serde_json::Value;

use crate::SideResult;
use crate::streams::StreamSource;

/// The error of the driver's steps.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The sides of each scenario: the floor (no idempotency), this project in four configurations,
/// and Powertools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The same handler with no idempotency at all: its `PutItem`, run again for every
    /// redelivery. What exactly once costs is measured against it.
    Floor,
    /// This project's default mode: a conditional write before the handler, one after it (the
    /// handler makes its own `PutItem`). What the figures of earlier runs call "this project".
    Lease,
    /// The transactional mode: the record and the handler's `Put` in one `TransactWriteItems`.
    Transactional,
    /// The same with a local cache of completed keys (10,000 keys, 15 minutes).
    TransactionalCache,
    /// The inline mode: the record on the handler's new item, in its one conditional `PutItem`.
    Inline,
    /// The same handler held as a `BoxRecordHandler` (`.boxed()`, as an app struct holds it):
    /// what naming a built handler costs. Measured by callgrind only.
    InlineBoxed,
    /// The lease mode over Redis/Valkey (`RedisBackend`); the handler still writes its item to
    /// DynamoDB.
    Redis,
    /// AWS Lambda Powertools for Python.
    Powertools,
}

impl Side {
    /// Every side, in the order of the tables.
    pub const ALL: [Side; 8] = [
        Side::Floor,
        Side::Lease,
        Side::Transactional,
        Side::TransactionalCache,
        Side::Inline,
        Side::InlineBoxed,
        Side::Redis,
        Side::Powertools,
    ];

    /// The sides `bench-worker` runs: the floor and this project's.
    pub const RUST: [Side; 6] = [
        Side::Floor,
        Side::Lease,
        Side::Transactional,
        Side::TransactionalCache,
        Side::Inline,
        Side::Redis,
    ];

    /// A short name, for files and table names.
    pub fn key(self) -> &'static str {
        match self {
            Side::Floor => "floor",
            Side::Lease => "rust",
            Side::Transactional => "transactional",
            Side::TransactionalCache => "transactional-cache",
            Side::Inline => "inline",
            Side::InlineBoxed => "inline-boxed",
            Side::Redis => "redis",
            Side::Powertools => "powertools",
        }
    }

    /// The side named `key`.
    pub fn from_key(key: &str) -> Option<Side> {
        Side::ALL.into_iter().find(|s| s.key() == key)
    }

    /// Its name in the tables.
    pub fn label(self) -> &'static str {
        match self {
            Side::Floor => "no idempotency (the floor)",
            Side::Lease => "this project",
            Side::Transactional => "this project, transactional",
            Side::TransactionalCache => "this project, transactional + cache",
            Side::Inline => "this project, inline",
            Side::InlineBoxed => "this project, inline, boxed handler",
            Side::Redis => "this project, Redis",
            Side::Powertools => "Powertools",
        }
    }

    /// The `bench-worker` flags that select it (none for Powertools).
    pub fn worker_args(self) -> &'static [&'static str] {
        match self {
            Side::Floor => &["--mode", "none"],
            Side::Lease => &["--mode", "lease"],
            Side::Transactional => &["--mode", "transactional"],
            Side::TransactionalCache => &["--mode", "transactional", "--cache"],
            Side::Inline => &["--mode", "inline"],
            Side::InlineBoxed => &["--mode", "inline", "--boxed"],
            Side::Redis => &["--mode", "lease", "--store", "redis"],
            Side::Powertools => &[],
        }
    }
}

/// The machine: its cores, CPU model and memory.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines().next().map(|l| {
                l.split_whitespace()
                    .nth(1)
                    .unwrap_or("0")
                    .parse::<f64>()
                    .unwrap_or(0.0)
                    / 1024.0
                    / 1024.0
            })
        })
        .unwrap_or(0.0);
    format!("{cores} cores ({cpu}), {mem:.0} GiB")
}

/// Creates an on-demand table with a string partition key `id`.
pub async fn create_table(dynamodb: &aws_sdk_dynamodb::Client, name: &str) -> Result<(), BoxError> {
    dynamodb
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(ScalarAttributeType::S)
                .build()?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(KeyType::Hash)
                .build()?,
        )
        .send()
        .await?;
    Ok(())
}

/// The workspace's root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("bench/ is in the workspace")
        .to_path_buf()
}

/// `bench-worker`, beside the running driver.
pub fn worker() -> Result<PathBuf, BoxError> {
    let exe = std::env::current_exe()?.with_file_name("bench-worker");
    if !exe.exists() {
        return Err(format!(
            "{} is missing: build it with `cargo build -p bench --bins` (make bench does)",
            exe.display()
        )
        .into());
    }
    Ok(exe)
}

/// Writes `events` for both sides: at `path` as one JSON document `{"events": [...]}` (for
/// Python), and beside it with the extension `jsonl`, one event per line (for the Rust worker).
pub fn write_events(path: &Path, events: &[Value]) -> Result<(), BoxError> {
    let mut lines = String::new();
    for e in events {
        lines.push_str(&serde_json::to_string(e)?);
        lines.push('\n');
    }
    std::fs::write(path.with_extension("jsonl"), lines)?;
    std::fs::write(path, serde_json::json!({ "events": events }).to_string())?;
    Ok(())
}

/// Runs `command` against `endpoint` with `--out out`, and reads what it wrote there.
pub async fn run_to_file(
    mut command: tokio::process::Command,
    out: &Path,
    endpoint: &str,
    what: &str,
) -> Result<String, BoxError> {
    let status = command
        .arg("--out")
        .arg(out)
        .env("AWS_ENDPOINT_URL", endpoint)
        .status()
        .await?;
    if !status.success() {
        return Err(format!("{what} failed: {status}").into());
    }
    Ok(std::fs::read_to_string(out)?)
}

/// One run of a side.
pub struct Run<'a> {
    /// The DynamoDB endpoint the side talks to.
    pub endpoint: &'a str,
    /// The events, as [`write_events`] wrote them.
    pub events: &'a Path,
    /// FIFO events (Powertools then uses its FIFO processor).
    pub fifo: bool,
    /// Stream events of this source instead of SQS events.
    pub stream: Option<StreamSource>,
    /// A command to run the side under (valgrind), with its arguments.
    pub under: Vec<OsString>,
    /// The deadline of each invocation, from its start (the Lambda function's timeout).
    pub lambda_timeout_ms: u64,
    /// The Redis server of the Redis side (`None`: the driver's own `REDIS_URL`).
    pub redis_url: Option<String>,
}

impl<'a> Run<'a> {
    /// A plain run: no wrapper, the payment processor's 30 s timeout.
    pub fn new(endpoint: &'a str, events: &'a Path, fifo: bool) -> Self {
        Self {
            endpoint,
            events,
            fifo,
            stream: None,
            under: Vec::new(),
            lambda_timeout_ms: 30_000,
            redis_url: None,
        }
    }
}

/// Runs one side in a process of its own, with new tables (created through `dynamodb`, the
/// local endpoint's client), and reads its result.
pub async fn run_side(
    side: Side,
    run: &Run<'_>,
    dynamodb: &aws_sdk_dynamodb::Client,
    dir: &Path,
) -> Result<SideResult, BoxError> {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let name = side.key();
    let (idempotency, effects) = (
        format!("bench-{name}-idem-{}", &id[..8]),
        format!("bench-{name}-effects-{}", &id[..8]),
    );
    create_table(dynamodb, &idempotency).await?;
    create_table(dynamodb, &effects).await?;
    let out = dir.join(format!("{name}-{}.json", &id[..8]));
    let mut program: Vec<OsString> = run.under.clone();
    let mut args: Vec<OsString> = Vec::new();
    match side {
        Side::Powertools => {
            let root = repo_root();
            program.push(root.join(".venv-bench/bin/python").into());
            args.push(root.join("bench/powertools/bench.py").into());
            args.push(match (run.stream, run.fifo) {
                (Some(source), _) => format!("--{}", source.key()).into(),
                (None, true) => "--fifo".into(),
                (None, false) => "--standard".into(),
            });
            args.push("--events".into());
            args.push(run.events.into());
        }
        rust => {
            program.push(worker()?.into());
            args.extend(rust.worker_args().iter().map(OsString::from));
            if let Some(source) = run.stream {
                args.push("--source".into());
                args.push(source.key().into());
            }
            // The same events, one per line, read one at a time.
            args.push("--events".into());
            args.push(run.events.with_extension("jsonl").into());
        }
    }
    // Set last, just before the spawn: the cold start counts from here.
    let started = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)?
        .as_nanos()
        .to_string();
    let mut command = tokio::process::Command::new(&program[0]);
    command.args(&program[1..]).args(args).args([
        "--idempotency-table",
        &idempotency,
        "--effects-table",
        &effects,
        "--lambda-timeout-ms",
        &run.lambda_timeout_ms.to_string(),
        "--started-at-ns",
        &started,
    ]);
    if let Some(url) = &run.redis_url {
        command.env("REDIS_URL", url);
    }
    let result: SideResult = serde_json::from_str(
        &run_to_file(command, &out, run.endpoint, &format!("the {name} side")).await?,
    )?;
    if result.failures > 0 {
        return Err(format!(
            "the {name} side reported {} failed records",
            result.failures
        )
        .into());
    }
    Ok(result)
}
