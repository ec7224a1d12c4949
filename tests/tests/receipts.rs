//! receipt-sender sends exactly one receipt per payment, even when it dies between the receipt's
//! write and the completion of its idempotency record: the next delivery, which takes the key
//! over once the lease has ended, finds the receipt and sends no second one.
//!
//! The crash is a DynamoDB client on which every request after the receipt's `PutItem` fails:
//! the receipt is stored, and its idempotency record stays in progress until its lease (the
//! invocation's deadline) ends, as after a process killed at that point.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aws_lambda_events::sqs::SqsMessage;
use aws_sdk_dynamodb::config::interceptors::BeforeSerializationInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::operation::put_item::PutItemInput;
use aws_sdk_dynamodb::types::AttributeValue;
use lambda_idempotency::Idempotency;
use lambda_idempotency::dead_letter::{REASON_ATTRIBUTE, SOURCE_MESSAGE_ID_ATTRIBUTE};
use lambda_idempotency::state::Status;
use lambda_idempotency::store::DynamoDbBackend;
use payments_e2e::Stack;
use payments_e2e::faults::{event, failed_ids};
use payments_model::PaymentCharged;

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

fn charged(payment_id: &str, amount_cents: i64) -> PaymentCharged {
    PaymentCharged {
        payment_id: payment_id.into(),
        account_id: "acct-1".into(),
        amount_cents,
        currency: "EUR".into(),
        ledger_entry_id: "entry-1".into(),
    }
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
    let payment_id = format!("pay_crash_{}", uuid::Uuid::new_v4().simple());
    let charged = charged(&payment_id, 500);
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
    assert_eq!(s(&receipts[0], "accountId"), "acct-1");
    assert_eq!(receipts[0]["amountCents"].as_n().unwrap(), "500");

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
}

/// A crash after the receipt's write, then an event for the same payment with another amount:
/// not a second receipt, and not a success: it is dead-lettered with a reason naming the
/// mismatch, and the stored receipt is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receipt_for_another_amount_is_a_permanent_failure() {
    let stack = Stack::provision(&[]).await.unwrap();
    let payment_id = format!("pay_other_{}", uuid::Uuid::new_v4().simple());
    crash_after_the_write(&stack, "first", &charged(&payment_id, 500)).await;

    let response = sender(&stack)
        .handle(event(
            vec![record(
                &stack,
                "other-amount",
                &charged(&payment_id, 900),
                1,
            )],
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
}
