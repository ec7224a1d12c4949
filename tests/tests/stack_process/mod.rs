//! A stack started as a child process and driven only from the outside, as a user in a second
//! terminal would: its output's lines, the `export` lines it prints, the ready line it ends its
//! start with, and its process group (Ctrl-C reaches the whole group). Shared by `up.rs`
//! (`make up`) and `ministack.rs` (`make up-ministack`).

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use payments_e2e::checks::{Stored, Tables};
use payments_e2e::http::HttpClient;
use payments_e2e::up::READY;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

/// A child's output, line by line.
pub type Lines = Arc<Mutex<Vec<String>>>;

/// Collects `output`'s lines, and sends each to `tx`.
async fn read_lines(
    output: impl AsyncRead + Unpin,
    lines: Lines,
    tx: mpsc::UnboundedSender<String>,
) {
    let mut reader = BufReader::new(output).lines();
    while let Ok(Some(line)) = reader.next_line().await {
        lines.lock().unwrap().push(line.clone());
        let _ = tx.send(line);
    }
}

/// `export NAME=value` lines, unquoted.
pub fn exports(lines: &[String]) -> BTreeMap<String, String> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| {
            let v = v
                .strip_prefix('\'')
                .and_then(|v| v.strip_suffix('\''))
                .map_or_else(|| v.to_owned(), |v| v.replace(r"'\''", "'"));
            (k.to_owned(), v)
        })
        .collect()
}

/// Whether a process of the group `pgid` still runs.
pub fn group_alive(pgid: i32) -> bool {
    // SAFETY: kill(2) with signal 0 only checks that the group exists.
    unsafe { libc::kill(-pgid, 0) == 0 }
}

/// Whether nothing listens on `addr` (`host:port`).
pub async fn refused(addr: &str) -> bool {
    tokio::net::TcpStream::connect(addr).await.is_err()
}

/// Kills the child's whole process group when dropped: a failing assertion must not leave the
/// stack (or its endpoint) running behind the test.
pub struct KillGroup(i32);

impl Drop for KillGroup {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the test's own child process group.
        unsafe { libc::kill(-self.0, libc::SIGKILL) };
    }
}

/// The stored data once `payment_id` has its receipt (or after 60 s, for the caller's
/// assertions to say what is missing).
pub async fn stored_with_receipt(
    dynamodb: &aws_sdk_dynamodb::Client,
    tables: &Tables,
    payment_id: &str,
) -> Stored {
    let mut stored = Stored::read(dynamodb, tables).await.unwrap();
    for _ in 0..120 {
        if stored.receipts.get(payment_id) == Some(&1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        stored = Stored::read(dynamodb, tables).await.unwrap();
    }
    stored
}

/// The tables named by the printed exports.
pub fn tables(exports: &BTreeMap<String, String>) -> Tables {
    let var = |name: &str| exports[name].clone();
    Tables {
        payments: var("PAYMENTS_TABLE"),
        ledger: var("LEDGER_TABLE"),
        balances: var("BALANCES_TABLE"),
        receipts: var("RECEIPTS_TABLE"),
    }
}

/// A stack that printed its ready line.
pub struct Started {
    pub _guard: KillGroup,
    pub child: Child,
    pub pgid: i32,
    pub stdout: Lines,
    pub stderr: Lines,
    pub exports: BTreeMap<String, String>,
}

/// Spawns `command` in its own process group, its output piped, and waits up to `within` for
/// its ready line; panics with its output if none comes.
pub async fn start(command: &mut Command, within: Duration) -> Started {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .expect("the stack starts");
    let pgid = i32::try_from(child.id().expect("a pid")).unwrap();
    let (stdout, stderr) = (Lines::default(), Lines::default());
    let (tx, mut rx) = mpsc::unbounded_channel();
    tokio::spawn(read_lines(
        child.stdout.take().unwrap(),
        stdout.clone(),
        tx.clone(),
    ));
    tokio::spawn(read_lines(child.stderr.take().unwrap(), stderr.clone(), tx));

    let ready = tokio::time::timeout(within, async {
        while let Some(line) = rx.recv().await {
            if line.starts_with(READY) {
                return true;
            }
        }
        false
    })
    .await;
    if ready != Ok(true) {
        // SAFETY: as in KillGroup.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        panic!(
            "no ready line within {within:?}\nstdout:\n{}\nstderr:\n{}",
            stdout.lock().unwrap().join("\n"),
            stderr.lock().unwrap().join("\n")
        );
    }
    let exports = exports(&stdout.lock().unwrap());
    Started {
        _guard: KillGroup(pgid),
        child,
        pgid,
        stdout,
        stderr,
        exports,
    }
}

/// Ctrl-C, as a terminal sends it (SIGINT to the whole group): the stack exits 0 within 60 s
/// and no process of its group is left.
pub async fn interrupt(child: &mut Child, pgid: i32) {
    // SAFETY: kill(2) on the child's own process group.
    assert_eq!(unsafe { libc::kill(-pgid, libc::SIGINT) }, 0);
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("the stack stops within 60 s of SIGINT")
        .unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "exit status after SIGINT: {status:?}"
    );
}

/// Asks for the payment every 500 ms until it is `charged`; fails after 60 s.
pub async fn assert_charged(http: &HttpClient, payment_id: &str) {
    let mut status = String::new();
    for _ in 0..120 {
        let answer = http.get(&format!("/payments/{payment_id}")).await.unwrap();
        let value: serde_json::Value = serde_json::from_str(&answer.body).unwrap_or_default();
        status = value["status"].as_str().unwrap_or_default().to_owned();
        if status == "charged" {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("payment {payment_id} was not charged within 60 s: {status}");
}

/// The invariants, checked on demand against the running stack by its printed exports
/// (`check-invariants`, as `make check-invariants` runs it): no violation. It waits up to 90 s
/// for the pipeline to drain: a receipt event sent again while the first is being sent waits for
/// that invocation's lease, up to receipt-sender's 30 s timeout, and a loaded machine adds to it.
pub async fn assert_invariants_hold(exports: &BTreeMap<String, String>) {
    let checked = tokio::process::Command::new(env!("CARGO_BIN_EXE_check-invariants"))
        .args(["--timeout", "90"])
        .envs(exports)
        .output()
        .await
        .unwrap();
    let report = String::from_utf8_lossy(&checked.stdout);
    assert!(
        checked.status.success() && report.contains(": 0 violations"),
        "{report}{}",
        String::from_utf8_lossy(&checked.stderr)
    );
}

/// The tables (read with the SDK on `endpoint`, by the printed names) once the payment has its
/// receipt: one ledger entry, `caller`'s EUR balance `amount` from one payment, one receipt.
pub async fn assert_stored_once(
    exports: &BTreeMap<String, String>,
    payment_id: &str,
    caller: &str,
    amount: i64,
) {
    let sdk = local_aws::sdk_config_for(&exports["AWS_ENDPOINT_URL"]).await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let stored = stored_with_receipt(&dynamodb, &tables(exports), payment_id).await;
    assert_eq!(
        stored.ledger_entries.get(payment_id),
        Some(&1),
        "{stored:?}"
    );
    assert_eq!(
        stored.balance(caller, "EUR"),
        Some((amount, 1)),
        "{stored:?}"
    );
    assert_eq!(stored.receipts.get(payment_id), Some(&1), "{stored:?}");
}

/// After its exit: no process of the group `pgid` is left, and nothing listens on `endpoint`
/// (`http://host:port`) any more (5 s at most for both).
pub async fn assert_gone(pgid: i32, endpoint: &str) {
    let endpoint = endpoint.trim_start_matches("http://");
    for _ in 0..50 {
        if !group_alive(pgid) && refused(endpoint).await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        !group_alive(pgid),
        "a process of the stack's group is still running"
    );
    assert!(
        refused(endpoint).await,
        "the local endpoint {endpoint} still listens"
    );
}
