//! payments-reconciler against a provisioned stack: payments left `accepted` whose message SQS
//! moved to the dead-letter queue are marked failed (the queue keeps the message), the others
//! are sent again through the relay's path, those waiting too long are counted stuck, and a
//! dead-letter copy that disagrees with its payment marks nothing; the audit reports a balance
//! that its charges do not explain (an over-charge too), but not one with charges not yet
//! audited.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use lambda_idempotency::publish::{DeduplicationId, Message, MessageGroupId, Publisher};
use payments_e2e::faults::{event, failed_ids};
use payments_e2e::invariants::Violation;
use payments_e2e::sqs_records::fifo_record;
use payments_e2e::stack::{self, Stack};
use payments_model::PaymentRequested;
use payments_operations::reconcile::audit::{Mismatch, WRITER_CLOCK_SKEW};
use payments_operations::reconcile::waiting::MOVED_BY_SQS;
use payments_publisher::now_ms;

async fn dead_letter(stack: &Stack, payment: &PaymentRequested) {
    let publisher = Publisher::new(
        stack.clients.sqs.clone(),
        stack.queue_url("PaymentsDeadLetterQueue"),
    );
    let message = Message::fifo(
        MessageGroupId::new(payment.account_id.as_str()).unwrap(),
        DeduplicationId::from_key(&payment.payment_id),
        serde_json::to_string(payment).unwrap(),
    )
    .unwrap();
    publisher.send_all(vec![message]).await.remove(0).unwrap();
}

async fn payment(stack: &Stack, payment_id: &str) -> HashMap<String, AttributeValue> {
    stack
        .clients
        .dynamodb
        .get_item()
        .table_name(stack.table("PaymentsTable"))
        .key("paymentId", AttributeValue::S(payment_id.to_owned()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payments_left_accepted_are_marked_from_the_dead_letter_queue_or_sent_again() {
    let stack = Stack::provision(&[]).await.unwrap();
    // Three accounts, one payment each: moved by SQS to the dead-letter queue; its copy there
    // disagreeing with it (an amount changed by hand); no message anywhere.
    let accepted = stack
        .accept(stack::payments(3, 3, "reconcile", |_| String::new()))
        .await
        .unwrap();
    let [moved, tampered, lost] = <[PaymentRequested; 3]>::try_from(accepted).unwrap();
    dead_letter(&stack, &moved).await;
    let mut wrong = tampered.clone();
    wrong.amount_cents += 1;
    dead_letter(&stack, &wrong).await;

    // Everything older than a second is sent again, and counts as stuck.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let reconciler = stack
        .reconciler(&[("RESEND_AFTER_SECONDS", "1"), ("STUCK_AFTER_SECONDS", "1")])
        .unwrap();
    let report = reconciler.waiting(now_ms()).await.unwrap();

    assert_eq!(
        report.marked_failed,
        vec![moved.payment_id.clone()],
        "{report:?}"
    );
    let (moved_status, reason) = status(&stack, &moved.payment_id).await;
    assert_eq!(moved_status, "failed");
    assert!(
        reason.as_deref().unwrap().contains(MOVED_BY_SQS),
        "{reason:?}"
    );
    // The tampered copy is not the payment's message: the payment is sent again instead.
    assert_eq!(status(&stack, &tampered.payment_id).await.0, "accepted");
    let mut resent = report.resent.clone();
    resent.sort();
    let mut expected = vec![tampered.payment_id.clone(), lost.payment_id.clone()];
    expected.sort();
    assert_eq!(resent, expected, "{report:?}");
    assert_eq!(report.stuck.len(), 2, "{report:?}");
    assert!(report.send_failed.is_empty(), "{report:?}");

    // The dead-letter queue keeps both copies (the reconciler only looks), visible again.
    let in_dlq = stack::dead_letters_in_queue(
        &stack.clients.sqs,
        stack.queue_url("PaymentsDeadLetterQueue"),
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert_eq!(in_dlq.len(), 2, "{in_dlq:?}");
    // The resent messages are on payments.fifo, each with the relay's deduplication id.
    assert_eq!(stack.depth("PaymentsQueue").await.unwrap(), 2);

    // A second pass finds the same two still accepted (nothing charged them) and sends them
    // again; SQS drops the copies within its deduplication window.
    let again = reconciler.waiting(now_ms()).await.unwrap();
    assert_eq!(again.resent.len(), 2, "{again:?}");
    assert_eq!(stack.depth("PaymentsQueue").await.unwrap(), 2);
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
    // of that charge, reported once past it.
    let last_b = charged_at(&stack, &in_b[1].payment_id).await;
    add_to_balance(&stack, b, in_b[1].amount_cents).await;
    let audit = reconciler.audit(last_b + 1).await.unwrap();
    assert_eq!(audit.audited, 1, "{audit:?}");
    assert_eq!(audit.mismatches, vec![], "within the margin: {audit:?}");
    let audit = reconciler.audit(last_b + skew).await.unwrap();
    assert_eq!(audit.audited, 0, "{audit:?}");
    assert_eq!(
        audit.mismatches,
        vec![over_charge(b, &in_b, in_b[1].amount_cents)],
        "acct-001's charge applied twice"
    );

    // The invariant checker finds both increments, and (receipt-sender not running here) each
    // charge's event waiting on the receipts queue, no receipt written yet.
    let sum = |payments: &[&PaymentRequested]| payments.iter().map(|p| p.amount_cents).sum::<i64>();
    let (sum_a, sum_b) = (sum(&in_a), sum(&in_b));
    let mut expected = vec![
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
        Violation::Undrained {
            queue: "ReceiptsQueue".into(),
            messages: accepted.len() as u64,
        },
    ];
    expected.extend(accepted.iter().map(|p| Violation::Receipts {
        payment_id: p.payment_id.clone(),
        receipts: 0,
    }));
    stack.assert_invariants(&expected).await;
}
