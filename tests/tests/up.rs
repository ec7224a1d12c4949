//! `make up` driven only from the outside, as a user in a second terminal would: the stack is
//! started as a child process (`local-aws run -- up`, what `make up` runs, with its own moto),
//! reached through what it prints (HTTP to the API, a raw SQS send of a duplicate message, reads
//! of the tables with the SDK), and stopped with SIGINT (a terminal's Ctrl-C, to its whole process
//! group): exit code 0, and nothing it started left running.

mod stack_process;

use std::path::PathBuf;
use std::time::Duration;

use payments_e2e::http::HttpClient;
use payments_e2e::up::CALLER;
use stack_process::{
    Started, assert_charged, assert_gone, assert_invariants_hold, assert_stored_once, interrupt,
    refused,
};
use tokio::process::Command;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// `local-aws run -- up --api-port API_PORT`; with `watch` (the Runtime API's port), the
/// functions as their own processes (`--watch`, the binaries this test run built), under the
/// project's pinned tools (cargo-lambda on the PATH), as `make up WATCH=1` runs it.
async fn start_up(api_port: u16, watch: Option<u16>) -> Started {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut command = Command::new(root.join("infra/local-aws/local-aws"));
    command.args(["run", "--"]);
    if watch.is_some() {
        command
            .arg(root.join("infra/tools/tools"))
            .args(["exec", "--"]);
    }
    command
        .arg(env!("CARGO_BIN_EXE_up"))
        .arg("--api-port")
        .arg(api_port.to_string());
    if let Some(port) = watch {
        command
            .args(["--watch", "--no-build", "--watch-port"])
            .arg(port.to_string());
    }
    command
        // Its own endpoint, as `make up` has: not the one this test suite runs on.
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("LOCAL_AWS_ENDPOINT")
        .env_remove("LOCAL_AWS_RUN_PORT");
    stack_process::start(&mut command, Duration::from_secs(180)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_serves_the_stack_to_outside_clients_until_ctrl_c() {
    let api_port = free_port();
    let Started {
        _guard,
        mut child,
        pgid,
        stdout,
        stderr,
        exports,
    } = start_up(api_port, None).await;
    let var = |name: &str| {
        exports
            .get(name)
            .unwrap_or_else(|| panic!("up printed no `export {name}=`: {exports:?}"))
            .clone()
    };

    // The API on the port asked for, reached with the printed URL and token.
    let api_url = var("API_URL");
    assert_eq!(api_url, format!("http://127.0.0.1:{api_port}"));
    let http = HttpClient::new(api_url.clone()).with_token(Some(var("API_TOKEN")));
    let body = r#"{"amountCents": 1250, "currency": "EUR", "description": "make up test"}"#;
    let first = http.post_payment(Some("up-key-1"), body).await.unwrap();
    assert_eq!(first.status, 201, "{first:?}");
    let payment: serde_json::Value = serde_json::from_str(&first.body).unwrap();
    let payment_id = payment["paymentId"].as_str().unwrap().to_owned();
    let replay = http.post_payment(Some("up-key-1"), body).await.unwrap();
    assert!(
        replay.replayed,
        "a retry with the same key replays: {replay:?}"
    );
    assert_eq!(replay.body, first.body);

    // The outbox relay and the consumer run behind it: the payment gets charged.
    assert_charged(&http, &payment_id).await;

    // A producer's resend, straight to the queue with the SDK and the printed endpoint: a new
    // message (new deduplication id) for the same payment.
    let sdk = local_aws::sdk_config_for(&var("AWS_ENDPOINT_URL")).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let duplicate = payments_model::PaymentRequested {
        payment_id: payment_id.clone(),
        account_id: CALLER.to_owned(),
        amount_cents: 1250,
        currency: "EUR".to_owned(),
        description: Some("make up test".to_owned()),
        sequence: None,
        unknown: Default::default(),
    };
    let queue = var("PAYMENTS_QUEUE_URL");
    sqs.send_message()
        .queue_url(&queue)
        .message_group_id(CALLER)
        .message_deduplication_id("up-test-resend")
        .message_body(serde_json::to_string(&duplicate).unwrap())
        .send()
        .await
        .unwrap();
    // Consumed (deleted by the event source mapping) within 60 s, and not dead-lettered.
    let mut empty = 0;
    for _ in 0..120 {
        let depth = local_aws::runner::queue_depth(&sqs, &queue).await.unwrap();
        empty = if depth.visible + depth.not_visible + depth.delayed == 0 {
            empty + 1
        } else {
            0
        };
        if empty >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(empty >= 2, "the duplicate was not consumed within 60 s");
    let dlq = local_aws::runner::queue_depth(&sqs, &var("PAYMENTS_DEAD_LETTER_QUEUE_URL"))
        .await
        .unwrap();
    if dlq.visible + dlq.not_visible > 0 {
        let received = sqs
            .receive_message()
            .queue_url(var("PAYMENTS_DEAD_LETTER_QUEUE_URL"))
            .message_attribute_names("All")
            .send()
            .await
            .unwrap();
        panic!("dead-lettered: {:?}", received.messages());
    }

    // The tables, read with the SDK by the printed names: charged once, one receipt.
    assert_stored_once(&exports, &payment_id, CALLER, 1250).await;

    // The invariants, checked on demand against the running stack by its exports.
    assert_invariants_hold(&exports).await;

    // The functions' JSON logs, each line with the function's name in front.
    {
        let lines = stdout.lock().unwrap();
        for function in [
            "payments-api",
            "payments-publisher",
            "payment-processor",
            "receipt-sender",
        ] {
            let line = lines
                .iter()
                .find(|l| l.split(" | ").next().map(str::trim_end) == Some(function))
                .unwrap_or_else(|| panic!("no log line of {function}:\n{}", lines.join("\n")));
            let json = line.split_once(" | ").unwrap().1;
            let value: serde_json::Value =
                serde_json::from_str(json).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            assert!(
                value["level"].is_string() && value["timestamp"].is_string(),
                "{line}"
            );
        }
    }

    // Ctrl-C: SIGINT to the whole process group, as a terminal sends it.
    interrupt(&mut child, pgid).await;
    assert!(
        stdout.lock().unwrap().iter().any(|l| l == "up: stopped"),
        "up said it stopped; its stderr:\n{}",
        stderr.lock().unwrap().join("\n")
    );
    assert_gone(pgid, &var("AWS_ENDPOINT_URL")).await;
    assert!(
        refused(&format!("127.0.0.1:{api_port}")).await,
        "the API still listens"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_watch_runs_each_function_as_its_own_process() {
    let (api_port, runtime_port) = (free_port(), free_port());
    let Started {
        _guard,
        mut child,
        pgid,
        stdout,
        exports,
        ..
    } = start_up(api_port, Some(runtime_port)).await;
    let var = |name: &str| exports[name].clone();
    let http = HttpClient::new(var("API_URL")).with_token(Some(var("API_TOKEN")));
    let body = r#"{"amountCents": 700, "currency": "EUR", "description": "processes"}"#;
    let created = http.post_payment(Some("up-watch-1"), body).await.unwrap();
    assert_eq!(created.status, 201, "{created:?}");
    let payment: serde_json::Value = serde_json::from_str(&created.body).unwrap();
    let payment_id = payment["paymentId"].as_str().unwrap().to_owned();

    // payments-api answered from its own process; the relay, the consumer and the receipts ran
    // in theirs, invoked through the Runtime API: charged, with one receipt.
    assert_stored_once(&exports, &payment_id, CALLER, 700).await;
    // The read is payments-reader's, a process of its own on the same binary.
    let read = http.get(&format!("/payments/{payment_id}")).await.unwrap();
    assert_eq!(read.status, 200, "{read:?}");

    // Each function's own output, and the Runtime API's, with its name in front.
    {
        let lines = stdout.lock().unwrap();
        for name in [
            "runtime-api",
            "payments-api",
            "payments-reader",
            "payments-publisher",
            "payment-processor",
            "receipt-sender",
        ] {
            assert!(
                lines
                    .iter()
                    .any(|l| l.split(" | ").next().map(str::trim_end) == Some(name)),
                "no output of {name}:\n{}",
                lines.join("\n")
            );
        }
    }

    // Ctrl-C stops the functions and the Runtime API with the rest.
    interrupt(&mut child, pgid).await;
    assert!(
        refused(&format!("127.0.0.1:{runtime_port}")).await,
        "the Runtime API still listens"
    );
}
