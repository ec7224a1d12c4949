//! payments-reconciler against a provisioned stack: payments left `accepted` whose message SQS
//! moved to the dead-letter queue are marked failed (the queue keeps the message), the others
//! are sent again through the relay's path, those waiting too long are counted stuck, and a
//! dead-letter copy that disagrees with its payment marks nothing.

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use lambda_idempotency::publish::{DeduplicationId, Message, MessageGroupId, Publisher};
use payments_e2e::stack::{self, Stack};
use payments_model::PaymentRequested;
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

async fn status(stack: &Stack, payment_id: &str) -> (String, Option<String>) {
    let item = stack
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
        .unwrap();
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
