//! The deploy package: each function's zip and its init under a Lambda Runtime API, beside
//! Powertools' (`bench-package`, run by `make bench`).
//!
//! - **Zip.** A function's package is its release binary named `bootstrap` (what `sam build` with
//!   `rust-cargolambda` builds), zipped with deflate at zlib's default level 6, as `sam deploy`
//!   zips a function's code, and at level 9, the level the zip target was set at. Powertools' is
//!   what a Python function using it ships: the handler (`bench/powertools/bench.py`),
//!   `aws_lambda_powertools` and `typing_extensions`; boto3, botocore and their `jmespath` come
//!   with the Lambda Python runtime. The packages' `.dist-info` metadata is left out.
//! - **Init.** From the spawn of a function's process to its first `GET
//!   /2018-06-01/runtime/invocation/next` on a Runtime API that only listens ([`RuntimeStub`]):
//!   Lambda's init phase, in which the function reads its settings, builds its clients and runs
//!   its init checks on the local endpoint (payments-api, payment-processor and receipt-sender
//!   describe their idempotency table; the two consumers also read their queue's redrive
//!   policy): round trips to moto, which shares the machine's cores, are part of it. The process
//!   runs with the environment the template gives it, over tables and queues provisioned for the
//!   run. Powertools': from the spawn of `bench.py --init-only` to its `ready` line, after the same
//!   imports and client as in the benchmark, with no request.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::net::TcpListener;
use tokio::process::Command;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long an init may take before the measurement gives up on it.
pub const INIT_TIMEOUT: Duration = Duration::from_secs(30);

/// The path a runtime polls for its next invocation.
const NEXT_PATH: &str = "/2018-06-01/runtime/invocation/next";

/// Where the markers of a document's package figures are.
pub const PACKAGE_START: &str = "<!-- package: start -->";
/// Where they end.
pub const PACKAGE_END: &str = "<!-- package: end -->";

/// Target: a function's init (median) under this many milliseconds.
pub const INIT_TARGET_MS: f64 = 10.0;
/// Target: a function's zip no larger than the arm64 zips of `make sam-build` when the target was
/// set (3.5 to 3.8 MB).
pub const ZIP_TARGET_BYTES: u64 = 3_800_000;

/// One package's measurement.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Package {
    /// The function (or `Powertools`).
    pub name: String,
    /// The unzipped size: the binary, or the files zipped.
    pub unzipped_bytes: u64,
    /// The zip at deflate level 6 (zlib's default, as `sam deploy` zips).
    pub zip_bytes: u64,
    /// The zip at deflate level 9.
    pub zip9_bytes: u64,
    /// Each init, in milliseconds.
    pub init_ms: Vec<f64>,
}

impl Package {
    /// The median init.
    pub fn init_median_ms(&self) -> f64 {
        let mut sorted = self.init_ms.clone();
        sorted.sort_by(f64::total_cmp);
        match sorted.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => sorted[n / 2],
            n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
        }
    }

    /// The slowest init.
    pub fn init_max_ms(&self) -> f64 {
        self.init_ms.iter().copied().fold(f64::NAN, f64::max)
    }
}

/// What `bench-package` measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PackageReport {
    /// The machine (cores, memory).
    pub machine: String,
    /// Which binaries were measured (profile and architecture; Lambda runs the template's
    /// `arm64`).
    pub binaries: String,
    /// Inits per function.
    pub runs: usize,
    /// The functions' packages, by the template's logical ids.
    pub functions: Vec<Package>,
    /// Powertools' package.
    pub powertools: Package,
}

/// The zip of `files` (name in the zip, contents) at deflate `level`, executable, as a deploy
/// package is: its size in bytes.
pub fn zip_size(files: &[(String, Vec<u8>)], level: i64) -> Result<u64, BoxError> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .compression_level(Some(level))
        .unix_permissions(0o755);
    for (name, contents) in files {
        zip.start_file(name.as_str(), options)?;
        zip.write_all(contents)?;
    }
    Ok(zip.finish()?.into_inner().len() as u64)
}

/// The files under `dir`, named relative to `base`, skipping bytecode caches.
pub fn files_under(base: &Path, dir: &Path) -> Result<Vec<(String, Vec<u8>)>, BoxError> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))? {
            let path = entry?.path();
            if path.file_name().is_some_and(|n| n == "__pycache__") {
                continue;
            }
            if path.is_dir() {
                pending.push(path);
            } else {
                let name = path.strip_prefix(base)?.to_string_lossy().into_owned();
                files.push((name, std::fs::read(&path)?));
            }
        }
    }
    files.sort();
    Ok(files)
}

/// A Lambda Runtime API that listens and answers nothing: the time of a process's first poll for
/// its next invocation is the end of its init.
#[derive(Debug)]
pub struct RuntimeStub {
    listener: TcpListener,
}

impl RuntimeStub {
    /// Listens on a free port of 127.0.0.1.
    pub async fn bind() -> Result<Self, BoxError> {
        Ok(Self {
            listener: TcpListener::bind("127.0.0.1:0").await?,
        })
    }

    /// `AWS_LAMBDA_RUNTIME_API` for a process polling this stub.
    pub fn address(&self) -> Result<String, BoxError> {
        Ok(self.listener.local_addr()?.to_string())
    }

    /// Waits for the first request and returns its request line, once its headers are read.
    pub async fn first_request(&self) -> Result<String, BoxError> {
        let (mut socket, _) = self.listener.accept().await?;
        let mut buf = Vec::with_capacity(1024);
        let mut chunk = [0u8; 1024];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = socket.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let text = String::from_utf8_lossy(&buf);
        Ok(text.lines().next().unwrap_or_default().to_owned())
    }
}

/// One init of the function binary `binary` with `env` (and nothing else of this process's
/// environment but [`local_aws::passed_through_env`]): from its spawn to its first poll of a
/// [`RuntimeStub`]. A process that exits first, or does not poll within [`INIT_TIMEOUT`], fails
/// with its last lines of output.
pub async fn function_init(
    binary: &Path,
    env: &BTreeMap<String, String>,
) -> Result<Duration, BoxError> {
    let stub = RuntimeStub::bind().await?;
    let started = Instant::now();
    let mut child = Command::new(binary)
        .env_clear()
        .envs(local_aws::passed_through_env(false))
        .envs(env)
        .env("AWS_LAMBDA_RUNTIME_API", stub.address()?)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("{}: {e}", binary.display()))?;
    // Read as they come, so that a process that writes much never blocks on a full pipe.
    let stdout = tokio::spawn(read_all(child.stdout.take()));
    let stderr = tokio::spawn(read_all(child.stderr.take()));
    let outcome = tokio::select! {
        request = stub.first_request() => Ok((request?, started.elapsed())),
        status = child.wait() => Err(format!("it exited ({})", status?)),
        () = tokio::time::sleep(INIT_TIMEOUT) => Err(format!("no poll within {INIT_TIMEOUT:?}")),
    };
    let _ = child.start_kill();
    let _ = child.wait().await;
    let tail = |bytes: Vec<u8>| {
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(3)..].join("\n")
    };
    match outcome {
        Ok((request, elapsed)) if request.contains(NEXT_PATH) => Ok(elapsed),
        Ok((request, _)) => Err(format!(
            "{}: its first request was `{request}`, not the next invocation",
            binary.display()
        )
        .into()),
        Err(why) => Err(format!(
            "{}: no poll of the Runtime API: {why}; its last lines:\n{}\n{}",
            binary.display(),
            tail(stdout.await.unwrap_or_default()),
            tail(stderr.await.unwrap_or_default())
        )
        .into()),
    }
}

/// Everything `pipe` gives until it closes.
async fn read_all(pipe: Option<impl tokio::io::AsyncRead + Unpin>) -> Vec<u8> {
    let mut text = Vec::new();
    if let Some(mut pipe) = pipe {
        let _ = pipe.read_to_end(&mut text).await;
    }
    text
}

/// One init of Powertools: `python bench.py --init-only`, from its spawn to its `ready` line.
pub async fn powertools_init(python: &Path, script: &Path) -> Result<Duration, BoxError> {
    let started = Instant::now();
    let mut child = Command::new(python)
        .arg(script)
        .args([
            "--init-only",
            "--standard",
            "--events",
            "-",
            "--idempotency-table",
            "idempotency",
            "--effects-table",
            "effects",
            "--out",
            "-",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("{}: {e}", python.display()))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(INIT_TIMEOUT, lines.next_line()).await??;
    let elapsed = started.elapsed();
    let status = child.wait().await?;
    match line.as_deref() {
        Some("ready") if status.success() => Ok(elapsed),
        other => {
            Err(format!("bench.py --init-only printed {other:?} and exited with {status}").into())
        }
    }
}

/// The figures, in Markdown, with the targets.
pub fn render(report: &PackageReport) -> String {
    let mb = |bytes: u64| bytes as f64 / 1_000_000.0;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "<!-- written by `make bench` (`bench-package`); do not edit -->"
    );
    let _ = writeln!(
        md,
        "Machine: {}. {}; {} inits of each function, {} of Powertools.\n",
        report.machine,
        report.binaries,
        report.runs,
        report.powertools.init_ms.len(),
    );
    let _ = writeln!(
        md,
        "| package | unzipped MB | zip MB (deflate 6, as deployed) | zip MB (deflate 9) | init ms, median | init ms, slowest |"
    );
    let _ = writeln!(md, "| --- | ---: | ---: | ---: | ---: | ---: |");
    for p in report.functions.iter().chain([&report.powertools]) {
        let _ = writeln!(
            md,
            "| {} | {:.2} | {:.2} | {:.2} | {:.1} | {:.1} |",
            p.name,
            mb(p.unzipped_bytes),
            mb(p.zip_bytes),
            mb(p.zip9_bytes),
            p.init_median_ms(),
            p.init_max_ms()
        );
    }
    let _ = writeln!(md, "\n| target | measured | |\n| --- | --- | --- |");
    let slowest = report
        .functions
        .iter()
        .max_by(|a, b| a.init_median_ms().total_cmp(&b.init_median_ms()));
    if let Some(p) = slowest {
        let median = p.init_median_ms();
        let _ = writeln!(
            md,
            "| init under {INIT_TARGET_MS:.0} ms (median), every function | {median:.1} ms at worst ({}) | {} |",
            p.name,
            met(median < INIT_TARGET_MS)
        );
    }
    let largest = report.functions.iter().max_by_key(|p| p.zip9_bytes);
    if let Some(p) = largest {
        let _ = writeln!(
            md,
            "| zip (deflate 9) at most {:.1} MB, every function | {:.2} MB at most ({}) | {} |",
            mb(ZIP_TARGET_BYTES),
            mb(p.zip9_bytes),
            p.name,
            met(p.zip9_bytes <= ZIP_TARGET_BYTES)
        );
    }
    md
}

fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "missed" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zip_compresses_and_counts_its_headers() {
        let repetitive = vec![(String::from("bootstrap"), vec![b'a'; 100_000])];
        let size = zip_size(&repetitive, 9).unwrap();
        assert!(
            size > 100 && size < 2_000,
            "100 kB of one byte zips small: {size}"
        );
        let random: Vec<u8> = (0..50_000).map(|_| fastrand::u8(..)).collect();
        let size = zip_size(&[(String::from("bootstrap"), random)], 6).unwrap();
        assert!(size > 50_000, "random bytes do not compress: {size}");
    }

    #[test]
    fn the_median_and_the_slowest() {
        let p = Package {
            name: "f".into(),
            unzipped_bytes: 0,
            zip_bytes: 0,
            zip9_bytes: 0,
            init_ms: vec![5.0, 1.0, 9.0, 3.0],
        };
        assert_eq!(p.init_median_ms(), 4.0);
        assert_eq!(p.init_max_ms(), 9.0);
    }

    #[tokio::test]
    async fn the_stub_reads_a_runtimes_first_poll() {
        let stub = RuntimeStub::bind().await.unwrap();
        let address = stub.address().unwrap();
        let poll = tokio::spawn(async move {
            let mut socket = tokio::net::TcpStream::connect(address).await.unwrap();
            tokio::io::AsyncWriteExt::write_all(
                &mut socket,
                format!("GET {NEXT_PATH} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes(),
            )
            .await
            .unwrap();
            socket
        });
        let line = stub.first_request().await.unwrap();
        assert_eq!(line, format!("GET {NEXT_PATH} HTTP/1.1"));
        drop(poll.await.unwrap());
    }

    #[tokio::test]
    async fn a_process_that_exits_before_polling_is_an_error_with_its_output() {
        let env = BTreeMap::new();
        let error = function_init(Path::new("/bin/false"), &env)
            .await
            .unwrap_err();
        assert!(
            error.to_string().contains("no poll of the Runtime API"),
            "{error}"
        );
    }

    #[test]
    fn the_figures_name_a_missed_target() {
        let package = |name: &str, zip9_bytes, init| Package {
            name: name.into(),
            unzipped_bytes: zip9_bytes * 2,
            zip_bytes: zip9_bytes + 100_000,
            zip9_bytes,
            init_ms: vec![init],
        };
        let report = PackageReport {
            machine: "m".into(),
            binaries: "release binaries for x86_64".into(),
            runs: 1,
            functions: vec![package("a", 3_000_000, 4.0), package("b", 4_000_000, 12.0)],
            powertools: package("Powertools", 5_000_000, 500.0),
        };
        let md = render(&report);
        assert!(
            md.contains("| b | 8.00 | 4.10 | 4.00 | 12.0 | 12.0 |"),
            "{md}"
        );
        assert!(md.contains("12.0 ms at worst (b) | missed"), "{md}");
        assert!(md.contains("4.00 MB at most (b) | missed"), "{md}");
    }
}
