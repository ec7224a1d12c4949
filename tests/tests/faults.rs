//! Fault injection: each scenario fails on a regression, and checks its invariant from the stored
//! data (ledger, balances, payments, queues), not from logs.

use std::collections::HashMap;
use std::time::Duration;

use aws_lambda_events::sqs::SqsMessage;
use payments_e2e::Stack;
use payments_e2e::faults::{
    Consumer, event, failed_ids, receive_counts, run_processor, wait_until,
};
use payments_e2e::invariants::{Failure, Scope};
use payments_e2e::sqs_records::fifo_record;
use payments_e2e::stack::payments;
use payments_model::PaymentRequested;

/// FIFO order, a killed consumer, a store outage.
#[path = "faults/order_and_outages.rs"]
mod order_and_outages;

fn assert_exactly_once(offenders: Vec<String>) {
    assert!(
        offenders.is_empty(),
        "{} offenders: {:?}",
        offenders.len(),
        &offenders[..offenders.len().min(5)]
    );
}

/// Scenario 1: 1,000 distinct payments, each delivered one to three times (producer resends
/// with the same business key, and redeliveries after invocations that crash before their
/// acknowledgement), consumed by 4 concurrent invocations: every effect exactly once.
///
/// The producer feeds the queue in waves of 100 messages, each wave once the queue is nearly
/// empty: moto's FIFO receive slows down sharply on a deep queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_under_concurrency_take_effect_once() {
    let stack = Stack::provision(&[("BackoffBaseSeconds", "1")])
        .await
        .unwrap();
    let all = stack
        .accept(payments(1000, 100, "dup", |_| String::new()))
        .await
        .unwrap();
    // Every payment once; a third of them again and a sixth a third time, as new messages with
    // the same business key, each sent one wave after the previous send.
    let mut sends: Vec<(PaymentRequested, bool)> = Vec::new();
    for (wave, chunk) in all.chunks(60).enumerate() {
        sends.extend(chunk.iter().map(|p| (p.clone(), false)));
        if wave > 0 {
            let previous = &all[(wave - 1) * 60..wave * 60];
            sends.extend(previous.iter().step_by(3).map(|p| (p.clone(), true)));
            sends.extend(previous.iter().step_by(6).map(|p| (p.clone(), true)));
        }
    }
    let tail = &all[(all.len() - 1) / 60 * 60..];
    sends.extend(tail.iter().step_by(3).map(|p| (p.clone(), true)));
    sends.extend(tail.iter().step_by(6).map(|p| (p.clone(), true)));
    let resent = sends.iter().filter(|(_, again)| *again).count();

    let consumer = Consumer {
        concurrency: 4,
        crash_after_work_every: 7,
        ..Consumer::default()
    };
    let running = run_processor(&stack, stack.payment_processor().unwrap(), consumer).unwrap();
    for wave in sends.chunks(100) {
        wait_until(Duration::from_secs(120), || async {
            Ok(stack.depth("PaymentsQueue").await? < 30)
        })
        .await
        .unwrap();
        let (first, again): (Vec<_>, Vec<_>) = wave.iter().partition(|(_, again)| !*again);
        let first: Vec<PaymentRequested> = first.into_iter().map(|(p, _)| p.clone()).collect();
        let again: Vec<PaymentRequested> = again.into_iter().map(|(p, _)| p.clone()).collect();
        stack.publish(&first, false).await.unwrap();
        stack.publish(&again, true).await.unwrap();
    }
    stack.wait_drained(Duration::from_secs(300)).await.unwrap();
    let crashes = running.crashes.load(std::sync::atomic::Ordering::SeqCst);
    let deliveries = running.deliveries.lock().unwrap().len();
    let resent_events = running.app.receipts_resent();
    running.stop().await;

    assert_exactly_once(stack.charged_exactly_once(&all).await.unwrap());
    assert!(crashes > 0, "some invocations crashed after their work");
    // Every duplicate delivery sends its PaymentCharged again: the producer's resends, and the
    // records of the crashed invocations, redelivered after their charges committed.
    assert!(
        resent_events > resent as u64,
        "{resent_events} events sent again for {resent} resends and {crashes} crashes"
    );
    assert!(
        deliveries > all.len() + resent,
        "{deliveries} deliveries for {} messages: crashes redelivered some",
        all.len() + resent
    );
    eprintln!(
        "1000 payments, {resent} resent, {crashes} crashed invocations, {deliveries} deliveries"
    );
}

/// Scenario 4: a message that always fails reaches the dead-letter queue after the template's
/// `MaxAttempts` (the consumer dead-letters it: the queue's maxReceiveCount is only a backstop,
/// far above), and the gaps between its receives grow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_message_backs_off_then_is_dead_lettered() {
    let stack = Stack::provision(&[
        ("FailPayments", "[poison]:1000"),
        ("BackoffBaseSeconds", "1"),
        ("BackoffMaxSeconds", "16"),
    ])
    .await
    .unwrap();
    let max: u32 = stack
        .template
        .parameter("MaxAttempts")
        .unwrap()
        .parse()
        .unwrap();
    let poison = stack
        .accept(payments(1, 1, "poison", |_| " [poison]".into()))
        .await
        .unwrap();
    stack.publish(&poison, false).await.unwrap();
    let running = run_processor(
        &stack,
        stack.payment_processor().unwrap(),
        Consumer::default(),
    )
    .unwrap();
    wait_until(Duration::from_secs(120), || async {
        Ok(stack.depth("PaymentsDeadLetterQueue").await? == 1)
    })
    .await
    .unwrap();
    let deliveries = running.deliveries_of(&poison[0].payment_id);
    running
        .stop_checking(
            &Scope::through_charging().declaring(Failure::Budget, [&poison[0].payment_id]),
            &[],
        )
        .await;

    assert_eq!(
        deliveries.len() as u32,
        max,
        "received exactly MaxAttempts times: {deliveries:?}"
    );
    let counts: Vec<u32> = deliveries.iter().map(|d| d.receive_count).collect();
    assert_eq!(counts, (1..=max).collect::<Vec<_>>());
    let gaps: Vec<f64> = deliveries
        .windows(2)
        .map(|w| (w[1].at - w[0].at).as_secs_f64())
        .collect();
    // The n-th retry waits at least base * 2^(n-1) (1, 2, 4, 8 s), plus jitter and however long
    // the next receive takes on a loaded machine.
    for (n, gap) in gaps.iter().enumerate() {
        let backoff = f64::from(1u32 << n);
        assert!(
            *gap >= backoff * 0.95,
            "retry {} came after {gap:.2} s, before its backoff of {backoff} s: {gaps:?}",
            n + 1
        );
        assert!(
            *gap < backoff * 1.25 + 5.0,
            "retry {} came after {gap:.2} s: {gaps:?}",
            n + 1
        );
    }
    // The lower bounds above are what shows the growth (a constant backoff would bring the
    // fourth retry back long before 8 s); a ratio of measured gaps is too noisy on a loaded
    // machine, where a receive can lag by seconds.
    assert_eq!(stack.depth("PaymentsQueue").await.unwrap(), 0);
    assert!(
        stack.ledger_entries().await.unwrap().is_empty(),
        "never charged"
    );
    let status = stack.scan("PaymentsTable").await.unwrap();
    assert_eq!(status.len(), 1);
    assert_eq!(
        status[0]["status"].as_s().unwrap(),
        "failed",
        "marked failed on its last receive"
    );
    eprintln!("gaps between receives: {gaps:?}");
}

/// The same records, delivered a second time.
fn redelivered(records: Vec<SqsMessage>) -> Vec<SqsMessage> {
    records
        .into_iter()
        .map(|mut r| {
            r.attributes
                .insert("ApproximateReceiveCount".into(), "2".into());
            r
        })
        .collect()
}

/// Delivers `records` again with 30 s to spare: every record succeeds, and every payment of
/// `all` is charged exactly once.
async fn redeliver_with_time_to_spare(
    app: &payment_processor::App,
    records: Vec<SqsMessage>,
    stack: &Stack,
    all: &[PaymentRequested],
) {
    let response = app
        .handle(event(redelivered(records), Duration::from_secs(30)))
        .await
        .unwrap();
    assert!(response.batch_item_failures.is_empty());
    assert_exactly_once(stack.charged_exactly_once(all).await.unwrap());
}

/// Scenario 5: bad input gets a clear error or a per-record failure, and the rest of its batch
/// succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_fails_alone_with_a_clear_error() {
    let stack = Stack::provision(&[]).await.unwrap();
    let app = stack.payment_processor().unwrap();
    let good = stack
        .accept(payments(2, 2, "good", |_| String::new()))
        .await
        .unwrap();
    let json = |p: &PaymentRequested| serde_json::to_string(p).unwrap();
    let mut negative = payments(1, 1, "neg", |_| String::new()).remove(0);
    negative.amount_cents = -5;
    let mut lowercase = payments(1, 1, "cur", |_| String::new()).remove(0);
    lowercase.currency = "eur".into();
    let mut long_key = payments(1, 1, "key", |_| String::new()).remove(0);
    long_key.payment_id = "k".repeat(3000);
    let huge = "x".repeat(1024 * 1024 - 200);
    let records = vec![
        fifo_record("good-1", &json(&good[0]), "g1", 1),
        fifo_record("malformed", "{\"paymentId\":", "g2", 1),
        fifo_record(
            "wrong-shape",
            r#"{"paymentId":"p","amount":"ten"}"#,
            "g3",
            1,
        ),
        fifo_record("negative", &json(&negative), "g4", 1),
        fifo_record("lowercase-currency", &json(&lowercase), "g5", 1),
        fifo_record("long-key", &json(&long_key), "g6", 1),
        fifo_record("one-mib", &huge, "g7", 1),
        fifo_record("good-2", &json(&good[1]), "g8", 1),
    ];
    let response = app
        .handle(event(records, Duration::from_secs(30)))
        .await
        .unwrap();
    // Permanent failures went to the dead-letter queue, the one too big for a whole copy as a
    // reduced copy (its body whole, the reason cut): a poison message always leaves its group.
    assert_eq!(failed_ids(&response), Vec::<String>::new());
    assert_exactly_once(stack.charged_exactly_once(&good).await.unwrap());
    let dead: Vec<_> = stack.receive("PaymentsDeadLetterQueue").await.unwrap();
    // The 1 MiB message's copy: its body whole, with only what room was left for attributes
    // (here none: 200 bytes do not hold the reason).
    let reduced = dead
        .iter()
        .find(|m| m.body().is_some_and(|b| b.len() == huge.len()))
        .expect("the 1 MiB message's copy, its body whole");
    if let Some(attributes) = reduced.message_attributes.as_ref() {
        assert!(
            attributes.contains_key("DeadLetterReduced"),
            "{attributes:?}"
        );
    }
    let reasons: HashMap<String, String> = dead
        .iter()
        .filter(|m| m.body().is_none_or(|b| b.len() != huge.len()))
        .map(|m| {
            let a = m.message_attributes.as_ref().unwrap();
            (
                a["DeadLetterSourceMessageId"]
                    .string_value()
                    .unwrap()
                    .to_owned(),
                a["DeadLetterReason"].string_value().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(reasons.len(), 5, "{reasons:?}");
    assert!(
        reasons["malformed"].contains("malformed") && reasons["malformed"].contains("EOF"),
        "{reasons:?}"
    );
    // A body without the fields that define a payment names the first one missing.
    assert!(
        reasons["wrong-shape"].contains("wrong-shape")
            && reasons["wrong-shape"].contains("/accountId"),
        "{reasons:?}"
    );
    assert!(
        reasons["negative"].contains("amountCents -5"),
        "{reasons:?}"
    );
    assert!(
        reasons["lowercase-currency"].contains("currency `eur`"),
        "{reasons:?}"
    );
    assert!(reasons["long-key"].contains("paymentId"), "{reasons:?}");
    // None of them was ever accepted: refused, nothing is written for them (no row).
    let status = stack.payment_statuses().await.unwrap();
    assert_eq!(status.get(&negative.payment_id), None, "{status:?}");

    // A record without a messageId fails the invocation, with a clear error.
    let mut nameless = fifo_record("x", &json(&good[0]), "g1", 1);
    nameless.message_id = None;
    let err = app
        .handle(event(
            vec![fifo_record("good-1", &json(&good[0]), "g1", 2), nameless],
            Duration::from_secs(30),
        ))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("record 1 of the batch has no messageId"),
        "{err}"
    );
    // An empty batch succeeds.
    let response = app
        .handle(event(vec![], Duration::from_secs(30)))
        .await
        .unwrap();
    assert!(response.batch_item_failures.is_empty());
    // The duplicate delivery above never charged again.
    assert_exactly_once(stack.charged_exactly_once(&good).await.unwrap());
    stack
        .assert_invariants(&Scope::through_charging(), &[])
        .await;
}

/// Scenario 6: a panic in the handler fails only its record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_fails_only_its_record() {
    let stack = Stack::provision(&[("FailPayments", "[panic]:1:panic")])
        .await
        .unwrap();
    let app = stack.payment_processor().unwrap();
    let all = stack
        .accept(payments(3, 3, "panic", |i| {
            if i == 1 {
                " [panic]".into()
            } else {
                String::new()
            }
        }))
        .await
        .unwrap();
    let json = |p: &PaymentRequested| serde_json::to_string(p).unwrap();
    let records: Vec<_> = all
        .iter()
        .enumerate()
        .map(|(i, p)| fifo_record(&format!("m{i}"), &json(p), &p.account_id, 1))
        .collect();
    let response = app
        .handle(event(records.clone(), Duration::from_secs(30)))
        .await
        .unwrap();
    assert_eq!(failed_ids(&response), ["m1"]);
    assert_exactly_once(
        stack
            .charged_exactly_once(&[all[0].clone(), all[2].clone()])
            .await
            .unwrap(),
    );
    // Redelivered, it succeeds; the others are duplicates.
    redeliver_with_time_to_spare(&app, records, &stack, &all).await;
    stack
        .assert_invariants(&Scope::through_charging(), &[])
        .await;
}

/// Scenario 7: a batch whose deadline passes part way: the records not started are reported
/// failed; none is lost, none acknowledged without its effect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_not_started_before_the_deadline_are_reported_failed() {
    let stack = Stack::provision(&[("FailPayments", "[slow]:1:sleep=1500")])
        .await
        .unwrap();
    let app = stack.payment_processor().unwrap();
    let all = stack
        .accept(payments(4, 1, "slow", |_| " [slow]".into()))
        .await
        .unwrap();
    let json = |p: &PaymentRequested| serde_json::to_string(p).unwrap();
    let records: Vec<_> = all
        .iter()
        .enumerate()
        .map(|(i, p)| fifo_record(&format!("m{i}"), &json(p), "one-group", 1))
        .collect();
    // 4 s left, 1 s start margin, over 1.5 s per record: the last record cannot start, since the
    // three before it take longer than the time left. How many run before the deadline depends
    // on the machine's load (on a loaded one, even the first can be cancelled at the deadline).
    let response = app
        .handle(event(records.clone(), Duration::from_millis(4000)))
        .await
        .unwrap();
    let failed = failed_ids(&response);
    assert!(
        failed.contains(&"m3".to_string()),
        "the last record did not start: {failed:?}"
    );
    let first_failed: usize = failed[0][1..].parse().unwrap();
    let suffix: Vec<String> = (first_failed..4).map(|i| format!("m{i}")).collect();
    assert_eq!(
        failed, suffix,
        "once one is not started, none after it is (one group)"
    );
    let ledger = stack.ledger_entries().await.unwrap();
    for (i, p) in all.iter().enumerate() {
        let charged = ledger.get(&p.payment_id).copied().unwrap_or(0);
        let acknowledged = !failed.contains(&format!("m{i}"));
        assert_eq!(
            charged,
            usize::from(acknowledged),
            "m{i}: acknowledged only with its effect"
        );
    }
    // Redelivered with time to spare: the rest is charged, the first two are not charged again.
    redeliver_with_time_to_spare(&app, records, &stack, &all).await;
    stack
        .assert_invariants(&Scope::through_charging(), &[])
        .await;
}
