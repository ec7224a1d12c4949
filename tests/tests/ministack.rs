//! `make up-ministack` driven only from the outside: `infra/ministack/up` is started as a child
//! process (it installs the pinned MiniStack when missing and starts it itself: this test never
//! skips), deploys template.yaml with `sam deploy` and the binaries this test run built, and is
//! reached through what it prints. One payment, with the printed token: `201`, then `charged` on
//! its GET, then one ledger entry and one receipt in the tables, all through MiniStack's own
//! event sources and the functions' own processes, and the invariants checked by
//! `check-invariants`. A token whose signature is not the local issuer's is refused (MiniStack's
//! authorizer checks signatures). Ctrl-C stops everything.
//!
//! What MiniStack does not do as AWS does is measured by `tests/ministack/probes.py` and listed in
//! docs/local-development.md ("make up-ministack"); this test proves the path works, not those gaps.

mod stack_process;

use std::path::PathBuf;
use std::time::Duration;

use payments_e2e::http::HttpClient;
use payments_e2e::up::CALLER;
use stack_process::{
    Started, assert_charged, assert_gone, assert_invariants_hold, assert_stored_once, interrupt,
};
use tokio::process::Command;

/// Where this test run's build put the functions' binaries: `target/debug`, beside `deps/` where
/// this test's own binary is.
fn binaries() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent()?.parent().map(PathBuf::from))
        .expect("the test binary's directory")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_ministack_deploys_the_template_and_charges_a_payment() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let env_file = tempfile_path("ministack-up.env");
    let mut command = Command::new(root.join("infra/ministack/up"));
    command
        .arg("--bin-dir")
        .arg(binaries())
        .arg("--env-file")
        .arg(&env_file)
        // Its own endpoint (MiniStack's): not the moto this test suite runs on.
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("LOCAL_AWS_ENDPOINT");
    let Started {
        _guard,
        mut child,
        pgid,
        stdout,
        stderr,
        exports,
    } = stack_process::start(&mut command, Duration::from_secs(170)).await;
    let var = |name: &str| {
        exports
            .get(name)
            .unwrap_or_else(|| panic!("up-ministack printed no `export {name}=`: {exports:?}"))
            .clone()
    };
    assert_eq!(
        std::fs::read_to_string(&env_file).unwrap(),
        payments_e2e::up::export_lines(&exports),
        "the env file holds the printed exports"
    );

    // The banner says what not to test here.
    assert!(
        stdout
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("do not test stream failure handling here")),
        "the banner warns about the stream event source"
    );

    // The API through MiniStack's gateway, with the routes and authorizer up wired.
    let http = HttpClient::new(var("API_URL")).with_token(Some(var("API_TOKEN")));
    let body = r#"{"amountCents": 990, "currency": "EUR", "description": "ministack"}"#;
    let created = http.post_payment(Some("ministack-1"), body).await.unwrap();
    assert_eq!(created.status, 201, "{created:?}");
    let payment: serde_json::Value = serde_json::from_str(&created.body).unwrap();
    let payment_id = payment["paymentId"].as_str().unwrap().to_owned();

    // The table's stream -> payments-publisher -> payments.fifo -> payment-processor: charged.
    assert_charged(&http, &payment_id).await;

    // -> receipts -> receipt-sender: one ledger entry, the balance, one receipt.
    assert_stored_once(&exports, &payment_id, CALLER, 990).await;

    // The invariants, checked on demand against the deployed stack by its exports.
    assert_invariants_hold(&exports).await;

    // The authorizer checks the signature: the same claims, signed by no one, are refused.
    let token = var("API_TOKEN");
    let (signed, _) = token.rsplit_once('.').unwrap();
    let forged = HttpClient::new(var("API_URL")).with_token(Some(format!("{signed}.AAAA")));
    let refused_answer = forged
        .get(&format!("/payments/{payment_id}"))
        .await
        .unwrap();
    assert_eq!(refused_answer.status, 401, "{refused_answer:?}");

    // Ctrl-C: MiniStack, the functions' processes and the issuer stop (each in its own process
    // group, which up waits for: it exits 1 when one is left), then up; exit 0.
    interrupt(&mut child, pgid).await;
    assert!(
        stderr
            .lock()
            .unwrap()
            .iter()
            .any(|l| l == "up-ministack: stopped"),
        "up-ministack said it stopped:\n{}",
        stderr.lock().unwrap().join("\n")
    );
    assert_gone(pgid, &var("AWS_ENDPOINT_URL")).await;
    let _ = std::fs::remove_file(&env_file);
}

/// A file name in the system's temporary directory, unique to this process.
fn tempfile_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("{}-{name}", std::process::id()))
}
