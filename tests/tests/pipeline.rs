//! The demo's pipeline at a smaller size: every check must pass.
//!
//! The drain may take longer than the queue's visibility timeout (180 s): on a loaded machine an
//! invocation can run past the function's timeout, and then its whole batch comes back only after
//! that.

use std::time::Duration;

use payments_e2e::processes::ProcessOptions;
use payments_e2e::{Functions, Workload, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pipeline_charges_every_payment_exactly_once() {
    let workload = Workload {
        payments: 40,
        accounts: 5,
        client_concurrency: 8,
        retry_percent: 20,
        concurrent_percent: 15,
        reuse_percent: 10,
        flaky_percent: 15,
        poison_percent: 5,
        resend_percent: 20,
        seed: 7,
    };
    // Each function its own process, as in the demo (`make test` builds their binaries first).
    let functions = Functions::Processes(ProcessOptions {
        build: false,
        ..ProcessOptions::default()
    });
    let report = run(&workload, functions, Duration::from_secs(420), |line| {
        eprintln!("{line}")
    })
    .await
    .unwrap_or_else(|e| panic!("the run failed: {e}"));
    eprintln!("{report}");
    let processes = report
        .processes
        .as_ref()
        .expect("the functions ran as processes");
    for function in payments_e2e::processes::FUNCTIONS {
        assert!(
            processes.starts.get(function).copied().unwrap_or(0) >= 1,
            "{function} never started: {processes:?}"
        );
        // payments-reader runs payments-api's code, whose metrics carry `function:
        // payments-api` (one outcome metric and its alarms for the whole API): its read's
        // `not_found` is counted there.
        let dimension = if function == "payments-reader" {
            "payments-api"
        } else {
            function
        };
        assert!(
            processes.metrics.contains_key(dimension),
            "{function} printed no metric: {processes:?}"
        );
    }
    assert_eq!(
        processes.metrics["payments-api"].get("not_found").copied(),
        Some(1.0),
        "the read of a payment that does not exist"
    );
    for check in &report.checks {
        assert!(check.passed, "{}: {}", check.name, check.detail);
    }
    // The run exercised what it claims to.
    let t = &report.tally;
    assert!(t.replayed > 0, "no replay happened");
    assert!(t.count(422) > 0, "no reused key was refused");
    // The refused requests: ten 400s, one each of 401, 403, 404 (a read), 405, 413 and 415.
    assert_eq!(t.count(400), 10, "the invalid requests");
    // Payments in every currency, with each form of the amount.
    for currency in payments_e2e::workload::CURRENCIES {
        for decimal in [false, true] {
            assert!(
                t.accepted
                    .iter()
                    .any(|a| a.planned.currency == currency && a.planned.decimal == decimal),
                "no {currency} payment with decimal = {decimal}"
            );
        }
    }
    for status in [401, 403, 404, 405, 413, 415] {
        assert_eq!(t.count(status), 1, "the request refused with {status}");
    }
    let processor = report.counts["payment-processor"];
    assert_eq!(
        processor.processed as usize,
        t.accepted
            .iter()
            .filter(|a| !a.planned.fault.is_fatal())
            .count()
    );
    assert!(
        report.stats["payment-processor"].records_reported_failed > 0,
        "injected failures were retried"
    );
}
