//! payments-reconciler against a provisioned stack: payments left `accepted` whose message SQS
//! moved to the dead-letter queue get it sent back (a copy moved again after as many sends back
//! as the limit allows marks its payment failed, and the queue keeps it), the others are sent
//! again through the relay's path, those waiting too long are counted stuck, and a dead-letter
//! copy that disagrees with its payment marks nothing; the audit reports a balance that its
//! charges do not explain (an over-charge too), but not one with charges not yet audited.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName};
use lambda_idempotency::publish::{DeduplicationId, Message, MessageGroupId, Publisher};
use lambda_idempotency::time::{Clock, Deadline};
use payments_e2e::faults::{event, failed_ids};
use payments_e2e::invariants::{Failure, Scope, Violation};
use payments_e2e::sqs_records::{fifo_record, receipts_record};
use payments_e2e::stack::{self, Stack};
use payments_model::{PaymentCharged, PaymentRequested};
use payments_operations::reconcile::Budget;
use payments_operations::reconcile::audit::{Mismatch, WRITER_CLOCK_SKEW};
use payments_operations::reconcile::send_back::{FATAL_ON_EVERY_DELIVERY, SENT_BACK_ATTRIBUTE};
use payments_operations::reconcile::waiting::Stopped;
use payments_publisher::now_ms;

/// Puts `payment`'s message in the dead-letter queue as SQS's own move does (no reason), after
/// the reconciler sent it back `sent_back` times (its [`SENT_BACK_ATTRIBUTE`]).
async fn dead_letter(stack: &Stack, payment: &PaymentRequested, sent_back: Option<u32>) {
    let publisher = Publisher::new(
        stack.clients.sqs.clone(),
        stack.queue_url("PaymentsDeadLetterQueue"),
    );
    let mut message = Message::fifo(
        MessageGroupId::new(payment.account_id.as_str()).unwrap(),
        DeduplicationId::from_key(&payment.payment_id),
        serde_json::to_string(payment).unwrap(),
    )
    .unwrap();
    if let Some(n) = sent_back {
        let count = MessageAttributeValue::builder()
            .data_type("Number")
            .string_value(n.to_string())
            .build()
            .unwrap();
        message = message
            .with_attribute_value(SENT_BACK_ATTRIBUTE, count)
            .unwrap();
    }
    publisher.send_all(vec![message]).await.remove(0).unwrap();
}

async fn payment(stack: &Stack, payment_id: &str) -> HashMap<String, AttributeValue> {
    stack
        .get("PaymentsTable", "paymentId", payment_id)
        .await
        .unwrap()
        .unwrap()
}

async fn status(stack: &Stack, payment_id: &str) -> (String, Option<String>) {
    let item = payment(stack, payment_id).await;
    let s = |k: &str| match item.get(k) {
        Some(AttributeValue::S(v)) => Some(v.clone()),
        _ => None,
    };
    (s("status").unwrap(), s("lastError"))
}

/// The invariants once the reconciler sent `resent` again (or back) and no payment-processor
/// ran: those payments left accepted, their messages left on the payments queue. `fatal` are
/// the payments whose message SQS moved again after the limit of sends back: failed, as a
/// message that crashes its consumer on every delivery.
async fn assert_left_resent(stack: &Stack, resent: &[String], fatal: &[String]) {
    let expected: Vec<Violation> = resent
        .iter()
        .map(|id| Violation::Unsettled {
            payment_id: id.clone(),
            status: "accepted".into(),
        })
        .collect();
    stack
        .assert_invariants(
            &Scope::through_charging()
                .leaving("PaymentsQueue")
                .declaring(Failure::Fatal, fatal.iter().cloned()),
            &expected,
        )
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payments_left_accepted_get_their_moved_message_sent_back_or_are_sent_again() {
    let stack = Stack::provision(&[]).await.unwrap();
    // Four accounts, one payment each: moved by SQS to the dead-letter queue once; moved again
    // after the limit of sends back; its copy there disagreeing with it (an amount changed by
    // hand); no message anywhere.
    let accepted = stack
        .accept(stack::payments(4, 4, "reconcile", |_| String::new()))
        .await
        .unwrap();
    let [moved, fatal, tampered, lost] = <[PaymentRequested; 4]>::try_from(accepted).unwrap();
    let reconciler = stack
        .reconciler(&[("RESEND_AFTER_SECONDS", "1"), ("STUCK_AFTER_SECONDS", "1")])
        .unwrap();
    let limit = reconciler.config().send_back_limit;
    dead_letter(&stack, &moved, None).await;
    dead_letter(&stack, &fatal, Some(limit)).await;
    let mut wrong = tampered.clone();
    wrong.amount_cents += 1;
    dead_letter(&stack, &wrong, None).await;

    // Everything older than a second is sent again, and counts as stuck.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let report = reconciler.waiting(now_ms()).await.unwrap();

    // Moved once: not failed, sent back.
    assert_eq!(
        report.sent_back,
        std::slice::from_ref(&moved.payment_id),
        "{report:?}"
    );
    assert_eq!(status(&stack, &moved.payment_id).await.0, "accepted");
    // Moved again after `limit` sends back: failed, as a message fatal on every delivery.
    assert_eq!(
        report.marked_failed,
        std::slice::from_ref(&fatal.payment_id),
        "{report:?}"
    );
    let (fatal_status, reason) = status(&stack, &fatal.payment_id).await;
    assert_eq!(fatal_status, "failed");
    let reason = reason.unwrap_or_default();
    assert!(
        reason.contains(FATAL_ON_EVERY_DELIVERY)
            && reason.contains(&format!("sent back {limit} times")),
        "{reason}"
    );
    // The tampered copy is not the payment's message: the payment is sent again instead.
    assert_eq!(status(&stack, &tampered.payment_id).await.0, "accepted");
    let mut resent = report.resent.clone();
    resent.sort();
    let mut expected = vec![tampered.payment_id.clone(), lost.payment_id.clone()];
    expected.sort();
    assert_eq!(resent, expected, "{report:?}");
    assert_eq!(report.stuck.len(), 3, "{report:?}");
    assert!(report.send_failed.is_empty(), "{report:?}");

    // The dead-letter queue keeps the fatal and the tampered copies, visible again; the copy
    // sent back left it.
    let in_dlq = stack::dead_letters_in_queue(
        &stack.clients.sqs,
        stack.queue_url("PaymentsDeadLetterQueue"),
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    let mut in_dlq: Vec<String> = in_dlq.into_iter().map(|(id, _)| id).collect();
    in_dlq.sort();
    let mut kept = vec![fatal.payment_id.clone(), tampered.payment_id.clone()];
    kept.sort();
    assert_eq!(in_dlq, kept);
    // The resent messages and the one sent back are on payments.fifo.
    assert_eq!(stack.depth("PaymentsQueue").await.unwrap(), 3);

    // A second pass finds the same three still accepted (nothing charged them yet): sent again
    // or back less than the resend interval ago, they are not sent a second time.
    let again = reconciler.waiting(now_ms()).await.unwrap();
    assert!(
        again.resent.is_empty() && again.sent_back.is_empty(),
        "{again:?}"
    );
    assert_eq!(stack.depth("PaymentsQueue").await.unwrap(), 3);
    expected.push(moved.payment_id.clone());
    assert_left_resent(&stack, &expected, std::slice::from_ref(&fatal.payment_id)).await;
}

/// A payment's message moved by SQS, sent back by the reconciler, charged by payment-processor
/// from the copy sent back: charged once, and the relay's copy still queued is a duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_sent_back_is_charged_once_and_its_other_copies_are_duplicates() {
    let stack = Stack::provision(&[]).await.unwrap();
    let accepted = stack
        .accept(stack::payments(1, 1, "sent-back", |_| String::new()))
        .await
        .unwrap();
    let moved = accepted[0].clone();
    dead_letter(&stack, &moved, None).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let reconciler = stack.reconciler(&[("RESEND_AFTER_SECONDS", "1")]).unwrap();
    let report = reconciler.waiting(now_ms()).await.unwrap();
    assert_eq!(
        report.sent_back,
        std::slice::from_ref(&moved.payment_id),
        "{report:?}"
    );
    // What payment-processor receives: the body as it was, in the account's group, counted once.
    let received = stack
        .clients
        .sqs
        .receive_message()
        .queue_url(stack.queue_url("PaymentsQueue"))
        .message_attribute_names("All")
        .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default();
    assert_eq!(received.len(), 1, "{received:?}");
    let m = &received[0];
    assert_eq!(
        serde_json::from_str::<PaymentRequested>(m.body().unwrap())
            .unwrap()
            .payment_id,
        moved.payment_id
    );
    assert_eq!(
        m.attributes().unwrap()[&MessageSystemAttributeName::MessageGroupId],
        moved.account_id
    );
    assert_eq!(
        m.message_attributes().unwrap()[SENT_BACK_ATTRIBUTE].string_value(),
        Some("1")
    );
    // payment-processor charges it; the same payment's message again (the relay's copy) is a
    // duplicate: one ledger entry.
    let app = stack.payment_processor().unwrap();
    let record = fifo_record("m-sent-back", m.body().unwrap(), &moved.account_id, 1);
    let response = app
        .handle(event(vec![record], Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(failed_ids(&response).is_empty(), "{response:?}");
    charge(&app, &moved).await;
    assert_eq!(status(&stack, &moved.payment_id).await.0, "charged");
    assert_eq!(
        stack.ledger_entries().await.unwrap().get(&moved.payment_id),
        Some(&1)
    );
}

/// Charges `payment` through payment-processor, as its message would.
async fn charge(app: &payment_processor::App, payment: &PaymentRequested) {
    let body = serde_json::to_string(payment).unwrap();
    let record = fifo_record(
        &format!("m-{}", payment.payment_id),
        &body,
        &payment.account_id,
        1,
    );
    let response = app
        .handle(event(vec![record], Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(failed_ids(&response).is_empty(), "{response:?}");
}

/// Adds to a balance outside the pipeline: as a bug applying a charge twice, or an adversary,
/// would.
async fn add_to_balance(stack: &Stack, account_id: &str, cents: i64) {
    let s = |v: &str| AttributeValue::S(v.to_owned());
    stack
        .clients
        .dynamodb
        .update_item()
        .table_name(stack.table("BalancesTable"))
        .key("accountId", s(account_id))
        .key("currency", s("EUR"))
        .update_expression("ADD balanceCents :cents, charges :one")
        .expression_attribute_values(":cents", AttributeValue::N(cents.to_string()))
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .send()
        .await
        .unwrap();
}

async fn charged_at(stack: &Stack, payment_id: &str) -> i64 {
    payment(stack, payment_id).await["chargedAt"]
        .as_n()
        .unwrap()
        .parse()
        .unwrap()
}

fn over_charge(account_id: &str, charged: &[&PaymentRequested], extra_cents: i64) -> Mismatch {
    let cents: i64 = charged.iter().map(|p| p.amount_cents).sum();
    let count = charged.len() as i64;
    Mismatch::Balance {
        account_id: account_id.to_owned(),
        currency: "EUR".into(),
        balance_cents: cents + extra_cents,
        charges: count + 1,
        audited_cents: cents,
        audited_charges: count,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_reports_an_over_charge_once_past_the_last_charge_and_not_charges_in_flight() {
    let stack = Stack::provision(&[]).await.unwrap();
    let app = stack.payment_processor().unwrap();
    let reconciler = stack.reconciler(&[("AUDIT_LAG_SECONDS", "0")]).unwrap();
    let skew = WRITER_CLOCK_SKEW.as_millis() as i64;
    // acct-000: payments 0, 2, 4; acct-001: payments 1, 3.
    let accepted = stack
        .accept(stack::payments(5, 2, "audit", |_| String::new()))
        .await
        .unwrap();
    let (a, b) = ("acct-000", "acct-001");
    let of = |account: &str| -> Vec<&PaymentRequested> {
        accepted
            .iter()
            .filter(|p| p.account_id == account)
            .collect()
    };
    let (in_a, in_b) = (of(a), of(b));
    for p in in_a.iter().chain(&in_b[..1]) {
        charge(&app, p).await;
    }
    let first_charges_done = now_ms();
    // acct-001's second payment is charged after the audit's horizon below: in flight for it.
    tokio::time::sleep(WRITER_CLOCK_SKEW + Duration::from_millis(200)).await;
    charge(&app, in_b[1]).await;
    // acct-000, all of whose charges the audit is past, gets an increment that no payment
    // explains.
    add_to_balance(&stack, a, 500).await;

    let audit = reconciler.audit(first_charges_done + skew).await.unwrap();
    assert_eq!(audit.audited, 4, "{audit:?}");
    assert_eq!(
        audit.mismatches,
        vec![over_charge(a, &in_a, 500)],
        "acct-000's over-charge, not acct-001's charge in flight"
    );

    // acct-001's last charge applied twice: not concluded while the audit is within the margin
    // of that charge, reported once past it. acct-000's over-charge, still there, is reported
    // again by each run's look at every balance in turn.
    let last_b = charged_at(&stack, &in_b[1].payment_id).await;
    add_to_balance(&stack, b, in_b[1].amount_cents).await;
    let audit = reconciler.audit(last_b + 1).await.unwrap();
    assert_eq!(audit.audited, 1, "{audit:?}");
    assert_eq!(
        audit.mismatches,
        vec![over_charge(a, &in_a, 500)],
        "acct-001 within the margin: {audit:?}"
    );
    let audit = reconciler.audit(last_b + skew).await.unwrap();
    assert_eq!(audit.audited, 0, "{audit:?}");
    assert_eq!(
        audit.mismatches,
        vec![
            over_charge(b, &in_b, in_b[1].amount_cents),
            over_charge(a, &in_a, 500)
        ],
        "acct-001's charge applied twice"
    );

    // The invariant checker finds both increments, and (receipt-sender not running here) each
    // charge's event waiting on the receipts queue, no receipt written yet.
    let sum = |payments: &[&PaymentRequested]| payments.iter().map(|p| p.amount_cents).sum::<i64>();
    let (sum_a, sum_b) = (sum(&in_a), sum(&in_b));
    let expected = [
        Violation::Balance {
            account: a.into(),
            currency: "EUR".into(),
            balance: sum_a + 500,
            ledger: sum_a,
        },
        Violation::Balance {
            account: b.into(),
            currency: "EUR".into(),
            balance: sum_b + in_b[1].amount_cents,
            ledger: sum_b,
        },
    ];
    stack
        .assert_invariants(&Scope::through_charging(), &expected)
        .await;
}

/// The approximate receive count of the one message of a queue (received here, so counted once
/// more).
async fn receive_count(stack: &Stack, logical_id: &str) -> u32 {
    let messages = stack
        .clients
        .sqs
        .receive_message()
        .queue_url(stack.queue_url(logical_id))
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default();
    assert_eq!(messages.len(), 1, "{messages:?}");
    messages[0].attributes.as_ref().unwrap()[&MessageSystemAttributeName::ApproximateReceiveCount]
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_out_of_sight_at_the_first_receive_is_found_and_not_received_for_nothing() {
    let stack = Stack::provision(&[]).await.unwrap();
    let accepted = stack
        .accept(stack::payments(2, 2, "peek", |_| String::new()))
        .await
        .unwrap();
    let [dead, lost] = <[PaymentRequested; 2]>::try_from(accepted).unwrap();
    let reconciler = stack.reconciler(&[("RESEND_AFTER_SECONDS", "1")]).unwrap();
    // Moved again after the limit of sends back: its payment is marked failed, and the queue
    // keeps it.
    dead_letter(&stack, &dead, Some(reconciler.config().send_back_limit)).await;
    // Someone else (an operator's look) holds the dead letter for a moment: a receive then
    // answers nothing although the queue is not empty.
    let held = stack
        .clients
        .sqs
        .receive_message()
        .queue_url(stack.queue_url("PaymentsDeadLetterQueue"))
        .visibility_timeout(2)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default();
    assert_eq!(held.len(), 1);
    tokio::time::sleep(Duration::from_millis(1100)).await;

    let report = reconciler.waiting(now_ms()).await.unwrap();
    assert_eq!(
        report.marked_failed,
        vec![dead.payment_id.clone()],
        "{report:?}"
    );
    assert_eq!(report.resent, vec![lost.payment_id], "{report:?}");

    // The next pass has nothing to send (the lost payment was sent again moments ago): it does
    // not receive from the dead-letter queue, whose message was received twice (held, then
    // looked at once) before this test's own receive.
    let again = reconciler.waiting(now_ms()).await.unwrap();
    assert!(again.resent.is_empty(), "{again:?}");
    assert_eq!(receive_count(&stack, "PaymentsDeadLetterQueue").await, 3);
    assert_left_resent(&stack, &report.resent, &[dead.payment_id]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resends_are_bounded_per_run_and_not_repeated_within_the_interval() {
    let stack = Stack::provision(&[]).await.unwrap();
    let accepted = stack
        .accept(stack::payments(5, 5, "bounded", |_| String::new()))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let reconciler = stack
        .reconciler(&[("RESEND_AFTER_SECONDS", "1"), ("MAX_RESENDS_PER_RUN", "2")])
        .unwrap();
    // Two a run, each run going on from where the last stopped.
    let mut sent = Vec::new();
    for expected in [2, 2, 1] {
        let report = reconciler.waiting(now_ms()).await.unwrap();
        assert_eq!(report.resent.len(), expected, "{report:?}");
        sent.extend(report.resent);
    }
    sent.sort();
    let mut all: Vec<String> = accepted.iter().map(|p| p.payment_id.clone()).collect();
    all.sort();
    assert_eq!(sent, all);
    // Every one was sent again less than the interval ago: none is sent a second time.
    let report = reconciler.waiting(now_ms()).await.unwrap();
    assert!(report.resent.is_empty(), "{report:?}");
    assert_eq!(stack.depth("PaymentsQueue").await.unwrap(), 5);
    assert_left_resent(&stack, &all, &[]).await;
}

async fn receipt_amount(stack: &Stack, payment_id: &str) -> Option<i64> {
    let receipt_id = payments_model::receipt_id(payment_id);
    let item = stack
        .get("ReceiptsTable", "receiptId", &receipt_id)
        .await
        .unwrap()?;
    item["amountCents"].as_n().ok().and_then(|n| n.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charged_payment_without_its_receipt_gets_it() {
    let stack = Stack::provision(&[]).await.unwrap();
    let app = stack.payment_processor().unwrap();
    let accepted = stack
        .accept(stack::payments(2, 2, "receipt", |_| String::new()))
        .await
        .unwrap();
    let [sent, lost] = <[PaymentRequested; 2]>::try_from(accepted).unwrap();
    charge(&app, &sent).await;
    charge(&app, &lost).await;
    // Both events are lost on their way (the queue emptied); one receipt was written anyway.
    stack
        .clients
        .sqs
        .purge_queue()
        .queue_url(stack.queue_url("ReceiptsQueue"))
        .send()
        .await
        .unwrap();
    stack
        .clients
        .dynamodb
        .put_item()
        .table_name(stack.table("ReceiptsTable"))
        .item(
            "receiptId",
            AttributeValue::S(payments_model::receipt_id(&sent.payment_id)),
        )
        .send()
        .await
        .unwrap();

    let reconciler = stack
        .reconciler(&[("RECEIPT_AFTER_SECONDS", "0"), ("AUDIT_LAG_SECONDS", "0")])
        .unwrap();
    reconciler.run(now_ms() + 1).await.unwrap();

    // The lost one's PaymentCharged is on the receipts queue again; receipt-sender sends it.
    let messages = stack.receive("ReceiptsQueue").await.unwrap();
    assert_eq!(messages.len(), 1, "{messages:?}");
    let charged: PaymentCharged = serde_json::from_str(messages[0].body().unwrap()).unwrap();
    assert_eq!(charged.payment_id, lost.payment_id);
    assert_eq!(charged.amount_cents, lost.amount_cents);
    let sender =
        receipt_sender::App::from_settings(&stack.sdk, &stack.settings("receipt-sender").unwrap())
            .unwrap();
    let response = sender
        .handle(event(
            vec![receipts_record(&stack, &messages[0])],
            Duration::from_secs(60),
        ))
        .await
        .unwrap();
    assert!(failed_ids(&response).is_empty(), "{response:?}");
    stack
        .clients
        .sqs
        .delete_message()
        .queue_url(stack.queue_url("ReceiptsQueue"))
        .receipt_handle(messages[0].receipt_handle().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(
        receipt_amount(&stack, &lost.payment_id).await,
        Some(lost.amount_cents)
    );

    // Checked once: the next pass sends nothing.
    reconciler.run(now_ms() + 1).await.unwrap();
    assert_eq!(stack.depth("ReceiptsQueue").await.unwrap(), 0);
    stack
        .assert_invariants(&Scope::through_charging(), &[])
        .await;
}

/// A clock that moves a second each time it is read: a run's budget runs out after a few reads,
/// whatever the machine's speed.
#[derive(Debug)]
struct Ticking(AtomicI64);

impl Clock for Ticking {
    fn now_ms(&self) -> i64 {
        self.0.fetch_add(1_000, Ordering::SeqCst)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_out_of_time_sends_what_it_found_and_the_next_goes_on_from_there() {
    let stack = Stack::provision(&[]).await.unwrap();
    let accepted = stack
        .accept(stack::payments(6, 6, "budget", |_| String::new()))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let reconciler = stack.reconciler(&[("RESEND_AFTER_SECONDS", "1")]).unwrap();

    // Spent after three payments looked at.
    let budget = Budget::until(
        Deadline::at_epoch_ms(2_000),
        Arc::new(Ticking(AtomicI64::new(0))),
    );
    let first = reconciler.waiting_within(now_ms(), &budget).await.unwrap();
    assert_eq!(first.stopped, Some(Stopped::OutOfTime), "{first:?}");
    assert_eq!(first.resent.len(), 3, "what it found is sent: {first:?}");

    // The next run looks at the other three only: not at those sent again.
    let second = reconciler.waiting(now_ms()).await.unwrap();
    assert_eq!(second.stopped, None, "{second:?}");
    assert!(second.recently_resent.is_empty(), "{second:?}");
    let mut sent = [first.resent, second.resent].concat();
    sent.sort();
    let mut all: Vec<String> = accepted.iter().map(|p| p.payment_id.clone()).collect();
    all.sort();
    assert_eq!(sent, all);

    // Having reached the end, the run after starts over: every one sent again moments ago.
    let third = reconciler.waiting(now_ms()).await.unwrap();
    assert!(third.resent.is_empty(), "{third:?}");
    assert_eq!(third.recently_resent.len(), 6, "{third:?}");
    assert_left_resent(&stack, &all, &[]).await;
}
