//! receipt-sender sends exactly one receipt per charged payment, with the payments table's
//! account, amount and currency, whatever reaches its queue:
//!
//! - it dies between the receipt's write and the completion of its idempotency record: the next
//!   delivery, which takes the key over once the lease has ended, finds the receipt and sends no
//!   second one. The crash is a DynamoDB client on which every request after the receipt's
//!   `PutItem` fails: the receipt is stored, and its idempotency record stays in progress until
//!   its lease (the invocation's deadline) ends, as after a process killed at that point;
//! - forged events sent to the receipts queue (a payment that does not exist, another amount for
//!   a real payment before and after its charge) write no receipt, are dead-lettered with their
//!   reason, and never keep the payment's own event from sending the true receipt.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use aws_sdk_dynamodb::config::interceptors::BeforeSerializationInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::operation::put_item::PutItemInput;
use aws_sdk_dynamodb::types::AttributeValue;
use lambda_idempotency::Idempotency;
use lambda_idempotency::dead_letter::{REASON_ATTRIBUTE, SOURCE_MESSAGE_ID_ATTRIBUTE};
use lambda_idempotency::state::Status;
use lambda_idempotency::store::DynamoDbBackend;
use lambda_runtime::LambdaEvent;
use local_aws::runner::{InProcess, Runner};
use payments_e2e::Stack;
use payments_e2e::faults::{event, failed_ids};
use payments_e2e::invariants::Scope;
use payments_e2e::sqs_records::fifo_record;
use payments_e2e::stack::payments;
use payments_model::PaymentCharged;
use tokio_util::sync::CancellationToken;

/// Fails every request made after the receipt's `PutItem` was sent: the process died there.
#[derive(Debug, Clone)]
struct CrashAfterReceipt {
    receipts_table: String,
    written: Arc<AtomicBool>,
}

impl Intercept for CrashAfterReceipt {
    fn name(&self) -> &'static str {
        "CrashAfterReceipt"
    }

    fn read_before_serialization(
        &self,
        context: &BeforeSerializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        if self.written.load(Ordering::SeqCst) {
            return Err("the process died after the receipt's write".into());
        }
        if context
            .input()
            .downcast_ref::<PutItemInput>()
            .is_some_and(|put| put.table_name() == Some(self.receipts_table.as_str()))
        {
            self.written.store(true, Ordering::SeqCst);
        }
        Ok(())
    }
}

/// receipt-sender as the template configures it (backoff, dead-letter queue), in a new
/// execution environment.
fn sender(stack: &Stack) -> receipt_sender::App {
    receipt_sender::App::from_settings(&stack.sdk, &stack.settings("receipt-sender").unwrap())
        .unwrap()
}

/// receipt-sender whose process dies right after the receipt's write.
fn crashing_sender(stack: &Stack) -> (receipt_sender::App, Arc<AtomicBool>) {
    let settings = stack.settings("receipt-sender").unwrap();
    let crash = CrashAfterReceipt {
        receipts_table: stack.table("ReceiptsTable").to_owned(),
        written: Arc::default(),
    };
    let written = crash.written.clone();
    let dynamodb = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&stack.sdk)
            .interceptor(crash)
            .build(),
    );
    let app = receipt_sender::App::new(
        dynamodb,
        receipt_sender::Config::from_settings(&settings).unwrap(),
    )
    .with_processor(
        payments_config::consumer_processor(stack.clients.sqs.clone(), &settings).unwrap(),
    );
    (app, written)
}

fn record(
    stack: &Stack,
    message_id: &str,
    charged: &PaymentCharged,
    receive_count: u32,
) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some(message_id.into());
    m.receipt_handle = Some(format!("rh-{message_id}-{receive_count}"));
    m.body = Some(serde_json::to_string(charged).unwrap());
    m.attributes
        .insert("ApproximateReceiveCount".into(), receive_count.to_string());
    m.event_source_arn = Some(stack.resources.queues["ReceiptsQueue"].arn.clone());
    m
}

/// A payment stored as payments-api accepts it (not charged yet), with this amount.
async fn accepted(stack: &Stack, tag: &str, amount_cents: i64) -> payments_model::PaymentRequested {
    let mut payment = payments(1, 1, tag, |_| String::new()).remove(0);
    payment.amount_cents = amount_cents;
    stack.accept(vec![payment]).await.unwrap().remove(0)
}

/// Charges `payment` with payment-processor (which also sends its event to the receipts queue,
/// left there) and returns the event it sent: the payment as the table charged it.
async fn charge(stack: &Stack, payment: &payments_model::PaymentRequested) -> PaymentCharged {
    let body = serde_json::to_string(payment).unwrap();
    let record = fifo_record(&payment.payment_id, &body, &payment.account_id, 1);
    let response = stack
        .payment_processor()
        .unwrap()
        .handle(event(vec![record], Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(failed_ids(&response).is_empty(), "{response:?}");
    let stored = stack
        .clients
        .dynamodb
        .get_item()
        .table_name(stack.table("PaymentsTable"))
        .key("paymentId", AttributeValue::S(payment.payment_id.clone()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    assert_eq!(s(&stored, "status"), "charged");
    PaymentCharged {
        payment_id: payment.payment_id.clone(),
        account_id: payment.account_id.clone(),
        amount_cents: payment.amount_cents,
        currency: payment.currency.clone(),
        ledger_entry_id: s(&stored, "ledgerEntryId"),
    }
}

/// A payment accepted and charged, with this amount: its `PaymentCharged`.
async fn charged(stack: &Stack, tag: &str, amount_cents: i64) -> PaymentCharged {
    let payment = accepted(stack, tag, amount_cents).await;
    charge(stack, &payment).await
}

/// The receipts stored for `payment_id`.
async fn receipts_of(stack: &Stack, payment_id: &str) -> Vec<HashMap<String, AttributeValue>> {
    stack
        .scan("ReceiptsTable")
        .await
        .unwrap()
        .into_iter()
        .filter(|r| {
            r.get("paymentId")
                .and_then(|v| v.as_s().ok())
                .map(String::as_str)
                == Some(payment_id)
        })
        .collect()
}

fn s(item: &HashMap<String, AttributeValue>, name: &str) -> String {
    item[name].as_s().unwrap().clone()
}

/// Delivers `charged` to a receipt-sender that dies after the receipt's write, then waits until
/// the lease of the record it left in progress has ended.
async fn crash_after_the_write(stack: &Stack, message_id: &str, charged: &PaymentCharged) {
    let deadline_in = Duration::from_secs(6);
    let (app, written) = crashing_sender(stack);
    let started = tokio::time::Instant::now();
    app.handle(event(
        vec![record(stack, message_id, charged, 1)],
        deadline_in,
    ))
    .await
    .unwrap();
    assert!(written.load(Ordering::SeqCst), "the receipt was written");
    assert_eq!(receipts_of(stack, &charged.payment_id).await.len(), 1);
    let engine = Idempotency::new(DynamoDbBackend::new(
        stack.clients.dynamodb.clone(),
        stack.table("IdempotencyTable"),
    ))
    .with_key_prefix("receipt-sender");
    let left = engine.get(&charged.payment_id).await.unwrap().unwrap();
    assert_eq!(left.status, Status::InProgress, "never completed: {left:?}");
    // The lease is the invocation's deadline.
    tokio::time::sleep_until(started + deadline_in + Duration::from_millis(500)).await;
}

/// A crash between the receipt's write and the record's completion, then the message again
/// (receive count 2, a new execution environment) and once more: one receipt, and the record
/// completed with that receipt's id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_write_sends_no_second_receipt() {
    let stack = Stack::provision(&[]).await.unwrap();
    let charged = charged(&stack, "crash", 500).await;
    let payment_id = charged.payment_id.clone();
    crash_after_the_write(&stack, "m1", &charged).await;

    let app = sender(&stack);
    let response = app
        .handle(event(
            vec![record(&stack, "m1", &charged, 2)],
            Duration::from_secs(30),
        ))
        .await
        .unwrap();
    assert!(failed_ids(&response).is_empty(), "{response:?}");
    let receipts = receipts_of(&stack, &payment_id).await;
    assert_eq!(receipts.len(), 1, "exactly one receipt: {receipts:?}");
    let receipt_id = s(&receipts[0], "receiptId");
    assert_eq!(s(&receipts[0], "accountId"), charged.account_id);
    assert_eq!(receipts[0]["amountCents"].as_n().unwrap(), "500");
    assert_eq!(s(&receipts[0], "ledgerEntryId"), charged.ledger_entry_id);

    // The redelivery completed the record with the stored receipt's id.
    let engine = app.idempotency();
    let completed = engine.get(&payment_id).await.unwrap().unwrap();
    assert_eq!(completed.status, Status::Completed, "{completed:?}");
    assert_eq!(
        completed.result.as_deref(),
        Some(serde_json::to_string(&receipt_id).unwrap().as_str())
    );

    // Once more, as the processor's resend of the same event: a duplicate.
    let response = sender(&stack)
        .handle(event(
            vec![record(&stack, "m2", &charged, 1)],
            Duration::from_secs(30),
        ))
        .await
        .unwrap();
    assert!(failed_ids(&response).is_empty(), "{response:?}");
    assert_eq!(receipts_of(&stack, &payment_id).await.len(), 1);
    assert_eq!(stack.depth("ReceiptsDeadLetterQueue").await.unwrap(), 0);
    // The processor's event is left on the receipts queue: the events above were made by hand.
    stack
        .assert_invariants(&Scope::pipeline().leaving("ReceiptsQueue"), &[])
        .await;
}

/// A crash after the receipt's write, then an event for the same payment with another amount:
/// not a second receipt, and not a success: it disagrees with the charged payment, so it is
/// dead-lettered with a reason naming the mismatch, and the stored receipt is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receipt_for_another_amount_is_a_permanent_failure() {
    let stack = Stack::provision(&[]).await.unwrap();
    let charged = charged(&stack, "other", 500).await;
    let payment_id = charged.payment_id.clone();
    crash_after_the_write(&stack, "first", &charged).await;

    let other_amount = PaymentCharged {
        amount_cents: 900,
        ..charged.clone()
    };
    let response = sender(&stack)
        .handle(event(
            vec![record(&stack, "other-amount", &other_amount, 1)],
            Duration::from_secs(30),
        ))
        .await
        .unwrap();
    // Dead-lettered, so not reported failed.
    assert!(failed_ids(&response).is_empty(), "{response:?}");
    let receipts = receipts_of(&stack, &payment_id).await;
    assert_eq!(receipts.len(), 1, "{receipts:?}");
    assert_eq!(
        receipts[0]["amountCents"].as_n().unwrap(),
        "500",
        "left as it was"
    );

    let dead = stack.receive("ReceiptsDeadLetterQueue").await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    let attributes = dead[0].message_attributes.as_ref().unwrap();
    assert_eq!(
        attributes[SOURCE_MESSAGE_ID_ATTRIBUTE].string_value(),
        Some("other-amount")
    );
    let reason = attributes[REASON_ATTRIBUTE].string_value().unwrap();
    assert!(
        reason.contains(&payment_id) && reason.contains("amountCents"),
        "{reason}"
    );
    assert!(
        !reason.contains("accountId") && !reason.contains("currency"),
        "only the attributes that differ: {reason}"
    );
    stack
        .assert_invariants(&Scope::pipeline().leaving("ReceiptsQueue"), &[])
        .await;
}

/// receipt-sender, as the template configures it, run by the local event source mapping over
/// the receipts queue until the queue is drained (a refused event is drained once it is in the
/// dead-letter queue).
async fn run_sender_until_drained(stack: &Stack) {
    let app = Arc::new(sender(stack));
    let shutdown = CancellationToken::new();
    let running = Runner::new(stack.clients.sqs.clone())
        .wait_time_seconds(1)
        .function(
            &stack.template,
            &stack.resources,
            "receipt-sender",
            InProcess::new(move |event: LambdaEvent<SqsEvent>| {
                let app = app.clone();
                async move { app.handle(event).await }
            }),
        )
        .unwrap()
        .start(shutdown.clone());
    running
        .wait_drained(&[stack.queue_url("ReceiptsQueue")], Duration::from_secs(60))
        .await
        .unwrap();
    shutdown.cancel();
    running.stop().await;
}

/// Sends `event` to the receipts queue as any principal could (no queue policy runs locally);
/// returns its message id.
async fn send_to_receipts(stack: &Stack, event: &PaymentCharged) -> String {
    stack
        .clients
        .sqs
        .send_message()
        .queue_url(stack.queue_url("ReceiptsQueue"))
        .message_body(serde_json::to_string(event).unwrap())
        .send()
        .await
        .unwrap()
        .message_id
        .unwrap()
}

/// Forged `PaymentCharged` events on the receipts queue, as an adversary able to send to it
/// would write them: one for a payment that does not exist, and for a real payment, before its
/// charge, one with another amount and one that copies the payment exactly; after its charge,
/// one with another amount. None writes a receipt, each is dead-lettered with its reason, and the
/// payment's own event, sent by payment-processor after the charge, writes the true receipt:
/// the ledger's amount, account, currency and entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_events_never_write_a_receipt_nor_block_the_true_one() {
    let stack = Stack::provision(&[]).await.unwrap();
    let real = accepted(&stack, "forged", 500).await;
    let never = PaymentCharged {
        payment_id: format!("pay_never_{}", uuid::Uuid::new_v4().simple()),
        account_id: real.account_id.clone(),
        amount_cents: 4242,
        currency: "EUR".into(),
        ledger_entry_id: "entry-forged".into(),
    };
    let forged_amount = PaymentCharged {
        payment_id: real.payment_id.clone(),
        account_id: real.account_id.clone(),
        amount_cents: 4242,
        currency: real.currency.clone(),
        ledger_entry_id: "entry-forged".into(),
    };
    let forged_copy = PaymentCharged {
        amount_cents: real.amount_cents,
        ..forged_amount.clone()
    };
    let never_id = send_to_receipts(&stack, &never).await;
    let early_amount_id = send_to_receipts(&stack, &forged_amount).await;
    let early_copy_id = send_to_receipts(&stack, &forged_copy).await;
    run_sender_until_drained(&stack).await;
    assert!(
        receipts_of(&stack, &never.payment_id).await.is_empty(),
        "no receipt for a payment that does not exist"
    );
    assert!(
        receipts_of(&stack, &real.payment_id).await.is_empty(),
        "no receipt before the charge"
    );

    // The charge: payment-processor sends the payment's own event to the receipts queue.
    let true_event = charge(&stack, &real).await;
    run_sender_until_drained(&stack).await;
    // After it, another amount again, and the true event replayed by anyone: a duplicate.
    let late_amount = PaymentCharged {
        amount_cents: 4242,
        ..true_event.clone()
    };
    let late_amount_id = send_to_receipts(&stack, &late_amount).await;
    let replay_id = send_to_receipts(&stack, &true_event).await;
    run_sender_until_drained(&stack).await;

    let receipts = receipts_of(&stack, &real.payment_id).await;
    assert_eq!(receipts.len(), 1, "exactly the true receipt: {receipts:?}");
    let entry = stack
        .clients
        .dynamodb
        .get_item()
        .table_name(stack.table("LedgerTable"))
        .key(
            "entryId",
            AttributeValue::S(true_event.ledger_entry_id.clone()),
        )
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .expect("the charge's ledger entry");
    assert_eq!(s(&entry, "paymentId"), real.payment_id);
    for name in ["accountId", "currency"] {
        assert_eq!(s(&receipts[0], name), s(&entry, name), "{name}");
    }
    assert_eq!(receipts[0]["amountCents"], entry["amountCents"]);
    assert_eq!(receipts[0]["amountCents"].as_n().unwrap(), "500");
    assert_eq!(s(&receipts[0], "ledgerEntryId"), true_event.ledger_entry_id);

    let reasons = stack
        .dead_letter_reasons("ReceiptsDeadLetterQueue")
        .await
        .unwrap();
    let mut dead: Vec<&str> = reasons.keys().map(String::as_str).collect();
    dead.sort_unstable();
    let mut forged = vec![
        never_id.as_str(),
        early_amount_id.as_str(),
        early_copy_id.as_str(),
        late_amount_id.as_str(),
    ];
    forged.sort_unstable();
    assert_eq!(
        dead, forged,
        "the forged events, and only they ({replay_id} is the replay): {reasons:?}"
    );
    let never_reason = &reasons[&never_id];
    assert!(
        never_reason.contains(&never.payment_id) && never_reason.contains("does not exist"),
        "{never_reason}"
    );
    let early = &reasons[&early_amount_id];
    assert!(
        early.contains("not charged") && early.contains("amountCents"),
        "{early}"
    );
    let copy = &reasons[&early_copy_id];
    assert!(
        copy.contains("not charged") && !copy.contains("amountCents"),
        "{copy}"
    );
    let late = &reasons[&late_amount_id];
    assert!(
        late.contains(&real.payment_id)
            && late.contains("amountCents")
            && !late.contains("accountId")
            && !late.contains("not charged"),
        "{late}"
    );
    // Whatever the forgeries, the stored data keeps every invariant.
    stack.assert_invariants(&Scope::pipeline(), &[]).await;
}
