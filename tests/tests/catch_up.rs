//! No payment stuck: a payment payment-processor gives up on is marked `failed` with its reason,
//! whatever the version of its message and whether it was charged from its own message or
//! ahead of it, from the payments table ("catch-up"); an account's later payments are never held
//! up behind an earlier one that cannot be charged. Each case calls payment-processor directly
//! and checks the stored data.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::AttributeValue;
use lambda_idempotency::transaction::Peeked;
use payment_processor::App;
use payments_e2e::Stack;
use payments_e2e::faults::failed_in_batch;
use payments_e2e::invariants::{Failure, Scope, Violation};
use payments_e2e::sqs_records::fifo_record;
use payments_e2e::stack::payments;
use payments_model::stored::StoredPayment;
use payments_model::{PaymentRequested, PaymentStatus};

/// Runs one batch through payment-processor, each record received `receive_count` times;
/// returns the ids it reported failed.
async fn deliver(
    app: &App,
    records: &[(&str, &PaymentRequested)],
    receive_count: u32,
) -> Vec<String> {
    let records = records
        .iter()
        .map(|(id, p)| {
            let body = serde_json::to_string(p).unwrap();
            fifo_record(id, &body, &p.account_id, receive_count)
        })
        .collect();
    failed_in_batch(app, records).await
}

async fn stored(stack: &Stack, p: &PaymentRequested) -> StoredPayment {
    StoredPayment::read(
        &stack.clients.dynamodb,
        stack.table("PaymentsTable"),
        &p.payment_id,
    )
    .await
    .unwrap()
    .unwrap()
}

/// The payment's status and reason, asserting that it failed with a reason containing `cause`.
async fn assert_failed_with(stack: &Stack, p: &PaymentRequested, cause: &str) -> String {
    let stored = stored(stack, p).await;
    assert!(
        stored.is(PaymentStatus::Failed),
        "{} is {:?}, not failed",
        p.payment_id,
        stored.status
    );
    let reason = stored.last_error.unwrap_or_default();
    assert!(reason.contains(cause), "{}: {reason}", p.payment_id);
    reason
}

async fn dead_letters(stack: &Stack) -> BTreeMap<String, String> {
    stack
        .dead_letter_reasons("PaymentsDeadLetterQueue")
        .await
        .unwrap()
}

/// A stack with these parameters, its payment-processor, and `n` payments of one account
/// accepted in order, those `marked` ending with `marker` in their description.
async fn account_of(
    parameters: &[(&str, &str)],
    n: usize,
    marker: &str,
    marked: impl Fn(usize) -> bool,
) -> (Stack, App, Vec<PaymentRequested>) {
    let stack = Stack::provision(parameters).await.unwrap();
    let app = stack.payment_processor().unwrap();
    let all = payments(n, 1, "catchup", |i| {
        if marked(i) {
            format!(" {marker}")
        } else {
            String::new()
        }
    });
    let all = stack.accept(all).await.unwrap();
    (stack, app, all)
}

async fn assert_charged_once(stack: &Stack, charged: &[PaymentRequested]) {
    let offenders = stack.charged_exactly_once(charged).await.unwrap();
    assert!(offenders.is_empty(), "{offenders:?}");
}

/// The failed attempts payment-processor's idempotency store holds for `p`.
async fn attempts_of(app: &App, p: &PaymentRequested) -> u32 {
    let body = serde_json::to_string(p).unwrap();
    let record = fifo_record("peek", &body, &p.account_id, 1);
    let (key, hash) = App::keys().key_and_payload_hash(&record).unwrap();
    match app.idempotency().peek(&key, &hash).await.unwrap() {
        Peeked::Attempts(attempts) => attempts,
        other => panic!("{} is not waiting: {other:?}", p.payment_id),
    }
}

/// The message of the previous version: no `sequence`.
fn previous_version(p: &PaymentRequested) -> PaymentRequested {
    PaymentRequested {
        sequence: None,
        ..p.clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lettered_message_of_the_previous_version_marks_its_payment_failed() {
    let parameters = [("FailPayments", "[refused]:1:permanent")];
    let (stack, app, all) = account_of(&parameters, 1, "[refused]", |_| true).await;
    let p = &all[0];
    assert_eq!(p.sequence, Some(1), "a numbered payment");
    let old = previous_version(p);
    assert_eq!(
        deliver(&app, &[("old", &old)], 1).await,
        Vec::<String>::new()
    );
    let reasons = dead_letters(&stack).await;
    assert!(
        reasons["old"].contains("injected permanent failure"),
        "{reasons:?}"
    );
    assert_failed_with(&stack, p, "injected permanent failure").await;
    assert_eq!(
        app.failed_ahead(),
        0,
        "its own message's dead letter holds it"
    );
    stack
        .assert_invariants(
            &Scope::through_charging().declaring(Failure::Permanent, [&p.payment_id]),
            &[],
        )
        .await;
}

/// The earliest unsettled payments of an account are stored so that they can never be charged
/// (a currency that is no ISO 4217 code; no amount at all), and their own messages never come:
/// the later payments' messages fail them with their reasons and are charged, none
/// dead-lettered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn earlier_payments_that_can_never_be_charged_are_failed_and_the_later_ones_go_on() {
    let stack = Stack::provision(&[]).await.unwrap();
    let app = stack.payment_processor().unwrap();
    let mut all = payments(4, 1, "unchargeable", |_| String::new());
    all[0].currency = "EURO".into();
    let all = stack.accept(all).await.unwrap();
    stack
        .clients
        .dynamodb
        .update_item()
        .table_name(stack.table("PaymentsTable"))
        .key("paymentId", AttributeValue::S(all[1].payment_id.clone()))
        .update_expression("REMOVE amountCents")
        .send()
        .await
        .unwrap();
    let failed = deliver(&app, &[("third", &all[2]), ("fourth", &all[3])], 1).await;
    assert_eq!(failed, Vec::<String>::new(), "nothing held up");
    let reason = assert_failed_with(&stack, &all[0], "ISO 4217").await;
    assert!(reason.contains("ahead of its message"), "{reason}");
    assert_failed_with(&stack, &all[1], "amountCents 0 is not positive").await;
    assert_eq!(
        app.failed_ahead(),
        2,
        "counted: no dead letter holds them yet"
    );
    assert_charged_once(&stack, &all[2..]).await;
    // Its own message, when it comes at last, is refused: the payment keeps its first reason.
    assert_eq!(
        deliver(&app, &[("first", &all[0])], 1).await,
        Vec::<String>::new()
    );
    let reasons = dead_letters(&stack).await;
    assert_eq!(
        reasons.keys().collect::<Vec<_>>(),
        vec!["first"],
        "{reasons:?}"
    );
    assert_eq!(stored(&stack, &all[0]).await.last_error, Some(reason));
    stack
        .assert_invariants(
            &Scope::through_charging()
                .declaring(Failure::Permanent, [&all[0].payment_id, &all[1].payment_id]),
            &[],
        )
        .await;
}

/// The failure switch fails the earliest unsettled payment on every attempt, and its own message
/// never comes: each delivery of the later payment's message tries it once (its attempts counted
/// as its own), and once its budget is spent it is failed with its reason and the later payment
/// is charged, never dead-lettered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_earlier_payment_that_always_fails_is_failed_once_its_attempts_are_spent() {
    let parameters = [("FailPayments", "[poison]:1000"), ("MaxAttempts", "3")];
    let (stack, app, all) = account_of(&parameters, 2, "[poison]", |i| i == 0).await;
    for receive in 1..3 {
        assert_eq!(
            deliver(&app, &[("later", &all[1])], receive).await,
            vec!["later".to_owned()],
            "retried, receive {receive}"
        );
        for p in &all {
            assert!(stored(&stack, p).await.is(PaymentStatus::Accepted));
        }
        // Waiting is not an attempt of the later payment: its budget is whole once it may go.
        assert_eq!(attempts_of(&app, &all[1]).await, 0, "receive {receive}");
    }
    assert_eq!(
        deliver(&app, &[("later", &all[1])], 3).await,
        Vec::<String>::new()
    );
    let reason = assert_failed_with(&stack, &all[0], "injected failure").await;
    assert!(reason.contains("attempt budget used up"), "{reason}");
    assert_eq!(app.failed_ahead(), 1);
    assert_charged_once(&stack, &all[1..]).await;
    assert!(dead_letters(&stack).await.is_empty());
    stack
        .assert_invariants(
            &Scope::through_charging().declaring(Failure::Budget, [&all[0].payment_id]),
            &[],
        )
        .await;
}

/// The failure switch fails the earliest unsettled payment on its first attempt only, and its
/// own message has not come: the later payment's first delivery tries it once (attempt 1,
/// counted under its own key), the next delivery is told attempt 2 and charges it, then the
/// later one. Nothing fails, however the message catch-up builds for it says it was received.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_earlier_payment_that_fails_once_is_charged_by_the_next_delivery() {
    let parameters = [("FailPayments", "[flaky]:1"), ("MaxAttempts", "3")];
    let (stack, app, all) = account_of(&parameters, 2, "[flaky]", |i| i == 0).await;
    assert_eq!(
        deliver(&app, &[("later", &all[1])], 1).await,
        vec!["later".to_owned()],
        "the earlier payment's first attempt fails"
    );
    assert_eq!(attempts_of(&app, &all[0]).await, 1, "counted as its own");
    assert_eq!(
        deliver(&app, &[("later", &all[1])], 2).await,
        Vec::<String>::new(),
        "its second attempt is told so, and succeeds"
    );
    assert_charged_once(&stack, &all).await;
    assert_eq!(app.failed_ahead(), 0);
    assert!(dead_letters(&stack).await.is_empty());
    stack
        .assert_invariants(&Scope::through_charging(), &[])
        .await;
}

/// Catch-up charges with the stored payment, description included: the failure switch applies
/// to a payment charged ahead of its own message, and to a payment whose message lacks the
/// description.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catch_up_honours_the_failure_switch_with_the_stored_description() {
    let parameters = [("FailPayments", "[refused]:1:permanent")];
    let (stack, app, all) = account_of(&parameters, 3, "[refused]", |i| i != 1).await;
    // Payment 0 is charged ahead of its message, by payment 1's: the switch fails it.
    assert_eq!(
        deliver(&app, &[("second", &all[1])], 1).await,
        Vec::<String>::new()
    );
    let reason = assert_failed_with(&stack, &all[0], "injected permanent failure").await;
    assert_eq!(app.failed_ahead(), 1);
    assert_charged_once(&stack, &all[1..2]).await;
    // Payment 2's message, of the previous version and without its description, is charged as
    // stored: the switch fails it, and it is dead-lettered with the reason.
    let bare = PaymentRequested {
        description: None,
        ..previous_version(&all[2])
    };
    assert_eq!(
        deliver(&app, &[("bare", &bare)], 1).await,
        Vec::<String>::new()
    );
    assert_failed_with(&stack, &all[2], "injected permanent failure").await;
    let reasons = dead_letters(&stack).await;
    assert_eq!(
        reasons.keys().collect::<Vec<_>>(),
        vec!["bare"],
        "{reasons:?}"
    );
    assert!(
        reasons["bare"].contains("injected permanent failure"),
        "{reasons:?}"
    );
    assert_eq!(stored(&stack, &all[0]).await.last_error, Some(reason));
    assert_charged_once(&stack, &all[1..2]).await;
    stack
        .assert_invariants(
            &Scope::through_charging()
                .declaring(Failure::Permanent, [&all[0].payment_id, &all[2].payment_id]),
            &[],
        )
        .await;
}

/// An old copy of a reopened payment's message, of the previous version, never fails it again:
/// the reopen sent it with its new number.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_copy_never_fails_a_reopened_payment() {
    use lambda_idempotency::time::{Clock, SystemClock};
    use payments_model::lifecycle::{MarkedFailed, mark_failed};
    use payments_operations::reopen::{Reopener, Reopening, Tables};

    let parameters = [("FailPayments", "[refused]:1:permanent")];
    let (stack, app, all) = account_of(&parameters, 1, "[refused]", |_| true).await;
    assert_eq!(
        deliver(&app, &[("first", &all[0])], 1).await,
        Vec::<String>::new()
    );
    assert_failed_with(&stack, &all[0], "injected permanent failure").await;
    let reopener = Reopener::new(
        stack.clients.dynamodb.clone(),
        stack.clients.sqs.clone(),
        Tables {
            payments: stack.table("PaymentsTable").to_owned(),
            accounts: stack.table("AccountsTable").to_owned(),
        },
        stack.queue_url("PaymentsQueue"),
    );
    let reopening = Reopening {
        payment_id: all[0].payment_id.clone(),
        operator: "on-call".into(),
        reason: "fixed".into(),
    };
    assert_eq!(reopener.reopen(&reopening).await.unwrap().sequence, 2);
    let table = stack.table("PaymentsTable");
    for old in [all[0].clone(), previous_version(&all[0])] {
        let marked = mark_failed(
            &stack.clients.dynamodb,
            table,
            &old,
            "an old copy",
            SystemClock.now_ms(),
        )
        .await
        .unwrap();
        assert_eq!(marked, MarkedFailed::NotAccepted, "{:?}", old.sequence);
    }
    assert!(stored(&stack, &all[0]).await.is(PaymentStatus::Accepted));
    // The reopened payment's message is left on the queue, with nobody to charge it.
    stack
        .assert_invariants(
            &Scope::through_charging().leaving("PaymentsQueue"),
            &[Violation::Unsettled {
                payment_id: all[0].payment_id.clone(),
                status: "accepted".into(),
            }],
        )
        .await;
}

/// Thirty numbers of an account were taken and never written (a gap each), then a payment is
/// accepted. Its message passes over the gaps until the invocation's time is up, and leaves
/// the rest to the next delivery, spending none of its attempts: no invocation runs past its
/// deadline, however many gaps an account has. Each delivery settles some, and the payment is
/// charged once they are all passed over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catch_up_stops_when_the_invocations_time_is_up_and_the_next_delivery_goes_on() {
    use payments_e2e::ticking::Ticking;
    use payments_model::order::{self, Account};

    const GAPS: u64 = 30;
    let stack = Stack::provision(&[]).await.unwrap();
    let dynamodb = &stack.clients.dynamodb;
    let accounts = stack.table("AccountsTable");
    let mut one = payments(1, 1, "time-up", |_| String::new());
    let group = one[0].account_id.clone();
    for _ in 0..GAPS {
        order::take_number(dynamodb, accounts, &group)
            .await
            .unwrap();
    }
    let payment = stack.accept(vec![one.remove(0)]).await.unwrap().remove(0);
    assert_eq!(payment.sequence, Some(GAPS + 1));
    // The processor's clock moves 5 s at each read: a 60 s invocation has about ten checks.
    let clock = std::sync::Arc::new(Ticking::new(5_000));
    let app = stack
        .payment_processor()
        .unwrap()
        .with_processor(lambda_idempotency::batch::BatchProcessor::new().with_clock(clock.clone()));
    let settled = || async {
        Account::read(dynamodb, accounts, &group)
            .await
            .unwrap()
            .settled
    };
    let mut progress = Vec::new();
    for receives in 1..=GAPS as u32 {
        // Each invocation starts on time (its deadline 60 s from the system's now).
        clock.restart();
        let failed = deliver(&app, &[("m", &payment)], receives).await;
        progress.push(settled().await);
        if failed.is_empty() {
            break;
        }
        assert_eq!(failed, vec!["m".to_owned()]);
        assert_eq!(attempts_of(&app, &payment).await, 0, "no attempt spent");
    }
    println!("settled after each delivery: {progress:?}");
    assert!(
        progress.len() > 1 && progress[0] < GAPS,
        "the first delivery stops when its time is up: {progress:?}"
    );
    assert!(
        progress.windows(2).all(|w| w[0] < w[1]),
        "each delivery goes on from the last: {progress:?}"
    );
    assert_eq!(progress.last(), Some(&(GAPS + 1)), "charged at last");
    assert_charged_once(&stack, &[payment]).await;
    assert!(dead_letters(&stack).await.is_empty());
    stack
        .assert_invariants(&Scope::through_charging(), &[])
        .await;
}
