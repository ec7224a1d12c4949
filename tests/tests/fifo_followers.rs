//! A failing payment must not take the payments behind it in its FIFO group to the dead-letter
//! queue. The processor reports a group's later records failed without running them (for order),
//! and SQS counts a receive for each; when a poison payment used up its attempts, the followers
//! had as many receives and SQS dead-lettered them with it, uncharged and still `accepted`.
//!
//! Each test publishes one account's payments (one message group) in order, runs
//! payment-processor as the template configures it until the queue is empty, and checks from the
//! stored data: the dead-letter queue holds exactly the failing payments, marked `failed` and never
//! charged; every other payment is charged exactly once, in send order; and the invariants hold,
//! the failing payments declared with the kind of their failure.

use std::time::Duration;

use payments_e2e::Stack;
use payments_e2e::faults::{Consumer, run_processor};
use payments_e2e::invariants::Scope;
use payments_e2e::stack::{dead_letters_in_queue, payments};
use payments_e2e::workload::{
    FLAKY_MARKER, Fault, PERMANENT_MARKER, POISON_MARKER, declaring_faults, failure_switch,
};

/// Runs one group of payments with these faults, in this order, through payment-processor and
/// checks the outcome.
async fn one_group(tag: &str, faults: &[Fault]) {
    let switch = failure_switch(2);
    let stack = Stack::provision(&[
        ("FailPayments", switch.as_str()),
        ("BackoffBaseSeconds", "1"),
        ("BackoffMaxSeconds", "2"),
    ])
    .await
    .unwrap();
    let marker = |f: Fault| match f {
        Fault::None => "",
        Fault::Flaky => FLAKY_MARKER,
        Fault::Poison => POISON_MARKER,
        Fault::Permanent => PERMANENT_MARKER,
    };
    let all = stack
        .accept(payments(faults.len(), 1, tag, |i| {
            format!(" {}", marker(faults[i]))
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
    // Without the fix the group drains too, into the dead-letter queue, once the failing
    // payment's receives reach the queue's maxReceiveCount (about 65 receives, 2 s apart).
    let drained = stack.wait_drained(Duration::from_secs(240)).await;
    let deliveries = running.deliveries.lock().unwrap().clone();
    let scope = declaring_faults(
        Scope::through_charging(),
        all.iter()
            .map(|p| p.payment_id.as_str())
            .zip(faults.iter().copied()),
    );
    let stats = running.stop_checking(&scope, &[]).await;
    drained.unwrap_or_else(|e| panic!("{e}; {stats:?}"));

    let (failing, innocent): (Vec<_>, Vec<_>) =
        all.iter().zip(faults).partition(|(_, f)| f.is_fatal());
    let failing: Vec<&str> = failing.iter().map(|(p, _)| p.payment_id.as_str()).collect();
    let innocent: Vec<_> = innocent.into_iter().map(|(p, _)| p.clone()).collect();

    let mut dead: Vec<String> = dead_letters_in_queue(
        &stack.clients.sqs,
        stack.queue_url("PaymentsDeadLetterQueue"),
        Duration::from_secs(300),
    )
    .await
    .unwrap()
    .into_iter()
    .map(|(id, _)| id)
    .collect();
    dead.sort();
    let mut expected = failing.clone();
    expected.sort();
    let position = |id: &str| all.iter().position(|p| p.payment_id == id);
    assert_eq!(
        dead,
        expected,
        "the dead-letter queue holds exactly the failing payments (positions in the group: {:?}, failing: {:?})",
        dead.iter().map(|id| position(id)).collect::<Vec<_>>(),
        failing.iter().map(|id| position(id)).collect::<Vec<_>>(),
    );

    let ledger = stack.ledger_entries().await.unwrap();
    let status = stack.payment_statuses().await.unwrap();
    for id in &failing {
        assert_eq!(ledger.get(*id), None, "{id} was never charged");
        assert_eq!(status.get(*id).map(String::as_str), Some("failed"), "{id}");
    }
    let offenders = stack.charged_exactly_once(&innocent).await.unwrap();
    assert!(
        offenders.is_empty(),
        "followers charged once: {offenders:?}"
    );

    // In send order: the ledger entries by creation time (a tie shows no order).
    let mut charged: Vec<(i64, usize)> = stack
        .scan("LedgerTable")
        .await
        .unwrap()
        .iter()
        .map(|i| {
            let at = i["createdAt"].as_n().unwrap().parse().unwrap();
            (at, position(i["paymentId"].as_s().unwrap()).unwrap())
        })
        .collect();
    charged.sort();
    let order: Vec<usize> = charged.iter().map(|(_, p)| *p).collect();
    if !order.windows(2).all(|w| w[0] < w[1]) {
        let start = deliveries.first().map(|d| d.at);
        let batches: Vec<String> = deliveries
            .iter()
            .map(|d| {
                let p = d.payment_id.as_deref().and_then(position);
                let ms = start.map_or(0, |s| d.at.duration_since(s).as_millis());
                format!("{ms}ms #{p:?} receive {}", d.receive_count)
            })
            .collect();
        panic!("charged out of send order: {order:?}; deliveries: {batches:#?}");
    }
    eprintln!("{tag}: dead-lettered {failing:?}; {stats:?}");
}

use Fault::{Flaky, Permanent, Poison};

/// A payment that never fails.
const OK: Fault = Fault::None;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_payment_goes_to_the_dead_letter_queue_alone() {
    one_group("poison", &[Poison, OK, OK, Flaky, OK, OK, OK]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_poison_payments_in_one_group_leave_the_rest_charged_in_order() {
    one_group("twopoison", &[OK, Poison, OK, Poison, Flaky, OK, OK]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_failure_at_the_head_holds_nobody_up() {
    one_group("permanent", &[Permanent, OK, Flaky, OK, OK]).await;
}
