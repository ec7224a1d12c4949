//! FIFO groups under failures, a consumer killed mid-batch, the store unreachable mid-run.

use super::*;

/// Scenario 8: with failures injected in some groups, each group's effects happen in send order,
/// and the other groups are not held up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_groups_keep_order_and_do_not_hold_each_other_up() {
    let stack = Stack::provision(&[("FailPayments", "[flaky]:2"), ("BackoffBaseSeconds", "1")])
        .await
        .unwrap();
    // 6 accounts x 6 payments; in accounts 0 and 1 the third payment fails twice.
    let all = stack
        .accept(payments(36, 6, "order", |i| {
            if i / 6 == 2 && i % 6 < 2 {
                " [flaky]".into()
            } else {
                String::new()
            }
        }))
        .await
        .unwrap();
    stack.publish(&all, false).await.unwrap();
    let running = run_processor(
        &stack,
        stack.payment_processor().unwrap(),
        Consumer::default(),
    )
    .unwrap();
    stack.wait_drained(Duration::from_secs(120)).await.unwrap();
    let counts = receive_counts(&running.deliveries);
    let deliveries = running.deliveries.lock().unwrap().clone();
    running.stop().await;
    assert_exactly_once(stack.charged_exactly_once(&all).await.unwrap());

    // Effects in send order, per account, failing ones included: ledger entries by creation time.
    let mut ledger: Vec<(i64, String, String)> = stack
        .scan("LedgerTable")
        .await
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["createdAt"].as_n().unwrap().parse().unwrap(),
                i["accountId"].as_s().unwrap().clone(),
                i["paymentId"].as_s().unwrap().clone(),
            )
        })
        .collect();
    ledger.sort();
    let position: HashMap<&str, usize> = all
        .iter()
        .enumerate()
        .map(|(i, p)| (p.payment_id.as_str(), i))
        .collect();
    for account in 0..6 {
        let account = format!("acct-{account:03}");
        let order: Vec<usize> = ledger
            .iter()
            .filter(|(_, a, _)| *a == account)
            .map(|(_, _, p)| position[p.as_str()])
            .collect();
        assert!(
            order.windows(2).all(|w| w[0] < w[1]),
            "{account}: charged out of order: {order:?}"
        );
    }
    // The processor's part for the failing accounts: in every batch where a flaky payment failed,
    // the later payments of its group were not run (each was delivered again afterwards).
    for flaky in all.iter().filter(|p| {
        p.description
            .as_deref()
            .is_some_and(|d| d.contains("[flaky]"))
    }) {
        let failed_at: Vec<_> = deliveries
            .iter()
            .filter(|d| {
                d.payment_id.as_deref() == Some(flaky.payment_id.as_str()) && d.receive_count <= 2
            })
            .map(|d| d.at)
            .collect();
        for at in failed_at {
            for mate in deliveries.iter().filter(|d| {
                d.at == at
                    && d.group.as_deref() == Some(flaky.account_id.as_str())
                    && d.payment_id
                        .as_deref()
                        .is_some_and(|p| position[p] > position[flaky.payment_id.as_str()])
            }) {
                assert!(
                    deliveries
                        .iter()
                        .any(|d| d.message_id == mate.message_id
                            && d.receive_count > mate.receive_count),
                    "{:?} ran in the batch where {} failed before it",
                    mate.payment_id,
                    flaky.payment_id
                );
            }
        }
    }
    // The groups without failures were never held up: each of their messages was received once.
    let by_payment: HashMap<String, String> = deliveries
        .iter()
        .filter_map(|d| Some((d.payment_id.clone()?, d.message_id.clone())))
        .collect();
    for p in all
        .iter()
        .filter(|p| !matches!(p.account_id.as_str(), "acct-000" | "acct-001"))
    {
        let message = &by_payment[&p.payment_id];
        assert_eq!(
            counts[message], 1,
            "{} of {} was received again",
            p.payment_id, p.account_id
        );
    }
    let held: u32 = all
        .iter()
        .filter(|p| p.account_id == "acct-000")
        .map(|p| counts[&by_payment[&p.payment_id]])
        .max()
        .unwrap();
    assert!(
        held >= 3,
        "the failing group retried its flaky payment twice: {held}"
    );
}

/// Scenario 2: the consumer process is killed (SIGKILL) in the middle of a batch, after some
/// charges; a new process takes over once the messages in flight are visible again; every
/// message is processed and no charge happened twice or in part (a charge is one transaction).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_consumer_loses_nothing_and_repeats_nothing() {
    use local_aws::template::Naming;
    let prefix = format!("crash{}-", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let params = [
        ("FailPayments", "[slow]:1:sleep=300"),
        ("BackoffBaseSeconds", "1"),
    ];
    let stack = Stack::provision_named(Naming::prefix(prefix.clone()), &params)
        .await
        .unwrap();
    let all = stack
        .accept(payments(150, 30, "crash", |_| " [slow]".into()))
        .await
        .unwrap();
    stack.publish(&all, false).await.unwrap();
    let spawn = || {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_consumer"));
        command
            .args([
                "--prefix",
                &prefix,
                "--timeout-secs",
                "4",
                "--visibility-timeout-secs",
                "6",
            ])
            .stdout(std::process::Stdio::null());
        for (k, v) in params {
            command.args(["--param", &format!("{k}={v}")]);
        }
        command.spawn().expect("start the consumer")
    };
    let mut first = spawn();
    wait_until(Duration::from_secs(60), || async {
        Ok(stack.ledger_entries().await?.values().sum::<usize>() >= 30)
    })
    .await
    .unwrap();
    first.kill().expect("SIGKILL"); // Child::kill sends SIGKILL on Unix
    first.wait().unwrap();
    let charged_at_kill = stack
        .ledger_entries()
        .await
        .unwrap()
        .values()
        .sum::<usize>();
    assert!(
        charged_at_kill < all.len(),
        "killed before the end: {charged_at_kill}"
    );

    let mut second = spawn();
    let drained = stack.wait_drained(Duration::from_secs(120)).await;
    second.kill().unwrap();
    second.wait().unwrap();
    drained.unwrap();
    assert_exactly_once(stack.charged_exactly_once(&all).await.unwrap());
    eprintln!("killed after {charged_at_kill} of {} charges", all.len());
    stack
        .assert_invariants(&Scope::through_charging(), &[])
        .await;
}

/// Scenario 3: the store becomes unreachable during a run and comes back: no record is
/// acknowledged without being processed, and after the recovery every payment is charged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_outage_acknowledges_nothing_unprocessed() {
    use lambda_idempotency::backoff::VisibilityBackoff;
    use lambda_idempotency::batch::BatchProcessor;
    use lambda_idempotency::dead_letter::DeadLetter;
    use latency_proxy::{Proxy, ProxyOptions, parse_endpoint};

    let stack = Stack::provision(&[]).await.unwrap();
    let endpoint = std::env::var("AWS_ENDPOINT_URL").unwrap();
    let proxy = Proxy::start(parse_endpoint(&endpoint).unwrap(), ProxyOptions::default())
        .await
        .unwrap();
    // DynamoDB (the store and the charge) goes through the proxy; SQS does not.
    let dynamodb_config =
        aws_sdk_dynamodb::config::Builder::from(&local_aws::sdk_config_for(&proxy.url()).await)
            .retry_config(
                aws_sdk_dynamodb::config::retry::RetryConfig::standard().with_max_attempts(2),
            )
            .build();
    let dynamodb = aws_sdk_dynamodb::Client::from_conf(dynamodb_config);
    let sqs = stack.clients.sqs.clone();
    let config =
        payment_processor::Config::from_settings(&stack.settings("payment-processor").unwrap())
            .unwrap();
    let processor = BatchProcessor::new()
        .with_backoff(
            VisibilityBackoff::new(sqs.clone())
                .base(Duration::from_secs(1))
                .max(Duration::from_secs(4)),
        )
        .with_dead_letter(DeadLetter::new(
            sqs.clone(),
            stack.queue_url("PaymentsDeadLetterQueue"),
        ));
    let app = payment_processor::App::new(dynamodb, sqs, config).with_processor(processor);

    let all = stack
        .accept(payments(80, 20, "outage", |_| String::new()))
        .await
        .unwrap();
    stack.publish(&all, false).await.unwrap();
    let consumer = Consumer {
        timeout: Duration::from_secs(5),
        ..Consumer::default()
    };
    let running = run_processor(&stack, app, consumer).unwrap();
    wait_until(Duration::from_secs(60), || async {
        Ok(stack.ledger_entries().await?.values().sum::<usize>() >= 10)
    })
    .await
    .unwrap();
    proxy.set_available(false);
    // The outage lasts until a batch has answered under it (each store call is bounded, so a
    // batch answers well within its 5 s timeout), at most 30 s.
    let under_outage = wait_until(Duration::from_secs(30), || async {
        Ok(running
            .runner
            .stats("payment-processor")
            .records_reported_failed
            > 0)
    })
    .await;
    let during = running.runner.stats("payment-processor");
    proxy.set_available(true);
    under_outage.unwrap_or_else(|e| panic!("no batch answered during the outage: {e}; {during:?}"));
    // A batch whose invocation timed out under load comes back only after the queue's 180 s
    // visibility timeout, as on Lambda.
    let drained = stack.wait_drained(Duration::from_secs(300)).await;
    let stats = running.stop().await;
    if let Err(e) = drained {
        panic!("{e}; during the outage: {during:?}; final: {stats:?}");
    }

    assert!(
        during.records_reported_failed > 0,
        "the outage failed records: {during:?}"
    );
    assert!(
        proxy.stats().cut + proxy.stats().refused > 0,
        "{}",
        proxy.stats()
    );
    // Every message is gone from the queue, and every payment has exactly one charge: no message
    // was acknowledged without its effect, none took effect twice.
    assert_exactly_once(stack.charged_exactly_once(&all).await.unwrap());
    assert_eq!(stack.depth("PaymentsDeadLetterQueue").await.unwrap(), 0);
    eprintln!("outage: {during:?}; final: {stats:?}");
}
