//! payment-processor against producers other than the pipeline's own relay: bodies written by
//! hand, other serializations, the next and the previous version of the message, tampered
//! fields, payments never accepted, redrives of failed payments, and an account's messages
//! arriving in any order (many stream shards, retried batches, republish runs). Each case
//! checks the stored data: the payments table is the source of truth, the queue is not.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use payments_e2e::Stack;
use payments_e2e::faults::{event, failed_ids, failed_in_batch};
use payments_e2e::invariants::{Failure, Scope};
use payments_e2e::sqs_records::fifo_record;
use payments_e2e::stack::payments;
use payments_model::PaymentRequested;
use payments_model::order::Account;

type Item = HashMap<String, AttributeValue>;

/// Runs one batch through payment-processor; returns the ids it reported failed.
async fn deliver(stack: &Stack, records: Vec<(&str, String, &str)>) -> Vec<String> {
    let app = stack.payment_processor().unwrap();
    let records = records
        .into_iter()
        .map(|(id, body, group)| fifo_record(id, &body, group, 1))
        .collect();
    failed_in_batch(&app, records).await
}

/// The reasons of the messages in the payments dead-letter queue, by source message id.
async fn dead_letters(stack: &Stack) -> BTreeMap<String, String> {
    stack
        .dead_letter_reasons("PaymentsDeadLetterQueue")
        .await
        .unwrap()
}

async fn payment(stack: &Stack, id: &str) -> Option<Item> {
    stack.get("PaymentsTable", "paymentId", id).await.unwrap()
}

fn s<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    item.get(name)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
}

/// Ledger entries of these payments: (payment id, created at, sequence), in the order written.
async fn ledger_of(stack: &Stack, ids: &[&str]) -> Vec<(String, i64, Option<u64>)> {
    let mut entries: Vec<_> = stack
        .scan("LedgerTable")
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| {
            let id = s(&e, "paymentId")?.to_owned();
            ids.contains(&id.as_str()).then(|| {
                let n = |name: &str| e.get(name).and_then(|v| v.as_n().ok()).cloned();
                (
                    id,
                    n("createdAt").unwrap().parse().unwrap(),
                    n("sequence").map(|v| v.parse().unwrap()),
                )
            })
        })
        .collect();
    entries.sort_by_key(|(_, at, sequence)| (*at, *sequence));
    entries
}

/// The relay's own body of a payment.
fn body(p: &PaymentRequested) -> String {
    serde_json::to_string(p).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_never_accepted_is_refused_with_its_reason_and_creates_no_row() {
    let stack = Stack::provision(&[]).await.unwrap();
    let never = payments(1, 1, "never", |_| String::new()).remove(0);
    // A producer writing the queue directly, for a payment payments-api never saw.
    let failed = deliver(&stack, vec![("never-1", body(&never), "g1")]).await;
    assert_eq!(failed, Vec::<String>::new(), "dead-lettered, not retried");
    assert_eq!(
        payment(&stack, &never.payment_id).await,
        None,
        "no row is created"
    );
    assert!(ledger_of(&stack, &[&never.payment_id]).await.is_empty());
    let reasons = dead_letters(&stack).await;
    assert!(reasons["never-1"].contains("never accepted"), "{reasons:?}");
    stack
        .assert_invariants(&Scope::through_charging(), &[])
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_that_disagrees_with_its_payment_is_refused_and_the_payment_is_left_as_it_was() {
    let stack = Stack::provision(&[]).await.unwrap();
    let p = stack
        .accept(payments(1, 1, "tamper", |_| String::new()))
        .await
        .unwrap()
        .remove(0);
    let mut amount = p.clone();
    amount.amount_cents += 90_000;
    let mut account = p.clone();
    account.account_id = "acct-elsewhere".into();
    let mut currency = p.clone();
    currency.currency = "JPY".into();
    let failed = deliver(
        &stack,
        vec![
            ("amount", body(&amount), "g1"),
            ("account", body(&account), "g2"),
            ("currency", body(&currency), "g3"),
        ],
    )
    .await;
    assert_eq!(failed, Vec::<String>::new());
    let reasons = dead_letters(&stack).await;
    for (id, field) in [
        ("amount", "amountCents"),
        ("account", "accountId"),
        ("currency", "currency"),
    ] {
        assert!(
            reasons[id].contains("disagrees") && reasons[id].contains(field),
            "{id}: {reasons:?}"
        );
    }
    let stored = payment(&stack, &p.payment_id).await.unwrap();
    assert_eq!(s(&stored, "status"), Some("accepted"));
    assert_eq!(
        stored.get("lastError"),
        None,
        "the payment is left as it was"
    );
    assert!(ledger_of(&stack, &[&p.payment_id]).await.is_empty());

    // Its own message is then charged, with the stored amount.
    assert_eq!(
        deliver(&stack, vec![("own", body(&p), "g1")]).await,
        Vec::<String>::new()
    );
    let stored = payment(&stack, &p.payment_id).await.unwrap();
    assert_eq!(s(&stored, "status"), Some("charged"));
    assert!(stack.charged_exactly_once(&[p]).await.unwrap().is_empty());
    stack
        .assert_invariants(&Scope::through_charging(), &[])
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_and_the_previous_version_are_each_charged_exactly_once() {
    let stack = Stack::provision(&[]).await.unwrap();
    let accepted = stack
        .accept(payments(2, 2, "versions", |_| String::new()))
        .await
        .unwrap();
    let (a, b) = (&accepted[0], &accepted[1]);
    // The next version: fields this one does not know, another field order, white space.
    let next = format!(
        r#"{{ "version": 3, "currency": "{}", "amountCents": {}, "sequence": {},
             "accountId": "{}", "paymentId": "{}", "channel": {{"kind": "web"}},
             "requestedAt": "2026-11-25T10:00:00Z" }}"#,
        a.currency,
        a.amount_cents,
        a.sequence.unwrap(),
        a.account_id,
        a.payment_id
    );
    // The previous version: no sequence (an optional field missing).
    let previous = format!(
        r#"{{"paymentId":"{}","accountId":"{}","amountCents":{},"currency":"{}"}}"#,
        b.payment_id, b.account_id, b.amount_cents, b.currency
    );
    let failed = deliver(
        &stack,
        vec![
            ("next", next.clone(), "g1"),
            ("previous", previous.clone(), "g2"),
        ],
    )
    .await;
    assert_eq!(failed, Vec::<String>::new());
    assert!(dead_letters(&stack).await.is_empty());
    // Each sent again in the other's envelope, and in the relay's: duplicates, not conflicts.
    let failed = deliver(
        &stack,
        vec![
            ("a-relay", body(a), "g1"),
            ("b-relay", body(b), "g2"),
            ("a-next-again", next, "g1"),
            ("b-previous-again", previous, "g2"),
        ],
    )
    .await;
    assert_eq!(failed, Vec::<String>::new());
    assert!(
        dead_letters(&stack).await.is_empty(),
        "no conflict was dead-lettered"
    );
    assert!(
        stack
            .charged_exactly_once(&accepted)
            .await
            .unwrap()
            .is_empty()
    );
    stack
        .assert_invariants(&Scope::through_charging(), &[])
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_payment_is_never_charged_by_a_later_delivery_or_a_redrive() {
    let stack = Stack::provision(&[("FailPayments", "[refused]:1:permanent")])
        .await
        .unwrap();
    let p = stack
        .accept(payments(1, 1, "final", |_| " [refused]".into()))
        .await
        .unwrap()
        .remove(0);
    assert_eq!(
        deliver(&stack, vec![("first", body(&p), "g1")]).await,
        Vec::<String>::new()
    );
    let stored = payment(&stack, &p.payment_id).await.unwrap();
    assert_eq!(s(&stored, "status"), Some("failed"));
    let reason = s(&stored, "lastError").unwrap().to_owned();
    assert!(reason.contains("injected permanent failure"), "{reason}");
    assert!(stored.contains_key("failedAt"));
    // The same payment again: a redrive of its dead letter (refused again), and a producer's
    // resend without the failure switch's marker (which nothing else would stop).
    let mut resend = p.clone();
    resend.description = None;
    let failed = deliver(
        &stack,
        vec![("redrive", body(&p), "g1"), ("resend", body(&resend), "g1")],
    )
    .await;
    assert_eq!(failed, Vec::<String>::new());
    let reasons = dead_letters(&stack).await;
    assert!(reasons.contains_key("redrive"), "{reasons:?}");
    assert!(
        reasons["resend"].contains("failed") && reasons["resend"].contains("reopens"),
        "{reasons:?}"
    );
    let stored = payment(&stack, &p.payment_id).await.unwrap();
    assert_eq!(s(&stored, "status"), Some("failed"));
    assert_eq!(
        s(&stored, "lastError"),
        Some(reason.as_str()),
        "its first reason stays"
    );
    assert!(ledger_of(&stack, &[&p.payment_id]).await.is_empty());

    // An operator reopens it: recorded, numbered after the account's later payments, sent.
    let later = stack
        .accept(vec![PaymentRequested {
            payment_id: format!("{}-later", p.payment_id),
            ..resend.clone()
        }])
        .await
        .unwrap();
    let reopener = payments_operations::reopen::Reopener::new(
        stack.clients.dynamodb.clone(),
        stack.clients.sqs.clone(),
        payments_operations::reopen::Tables {
            payments: stack.table("PaymentsTable").to_owned(),
            accounts: stack.table("AccountsTable").to_owned(),
        },
        stack.queue_url("PaymentsQueue"),
    );
    let reopening = payments_operations::reopen::Reopening {
        payment_id: p.payment_id.clone(),
        operator: "on-call".into(),
        reason: "the card issuer's outage is over".into(),
    };
    let reopened = reopener.reopen(&reopening).await.unwrap();
    assert_eq!((reopened.sequence, reopened.reopens), (3, 1));
    let stored = payment(&stack, &p.payment_id).await.unwrap();
    assert_eq!(s(&stored, "status"), Some("accepted"));
    assert_eq!(s(&stored, "reopenedBy"), Some("on-call"));
    assert!(stored.contains_key("reopenedAt") && stored.contains_key("failedAt"));
    // Reopening twice is refused: it is no longer failed.
    assert!(matches!(
        reopener.reopen(&reopening).await,
        Err(payments_operations::reopen::ReopenError::NotFailed { .. })
    ));
    let sent = stack
        .clients
        .sqs
        .receive_message()
        .queue_url(stack.queue_url("PaymentsQueue"))
        .wait_time_seconds(2)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default();
    assert_eq!(sent.len(), 1);
    // The cause is fixed: the failure switch is off.
    let mut settings = stack.settings("payment-processor").unwrap();
    settings.remove("FAIL_PAYMENTS");
    let fixed = payment_processor::App::from_settings(&stack.sdk, &settings).unwrap();
    let record = fifo_record("reopened", sent[0].body().unwrap(), &p.account_id, 1);
    let response = fixed
        .handle(event(vec![record], Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(failed_ids(&response), Vec::<String>::new());
    let ledger = ledger_of(&stack, &[&p.payment_id, &later[0].payment_id]).await;
    let order: Vec<&str> = ledger.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(
        order,
        vec![later[0].payment_id.as_str(), p.payment_id.as_str()],
        "the later payment first, then the reopened one"
    );
    assert_eq!(
        s(&payment(&stack, &p.payment_id).await.unwrap(), "status"),
        Some("charged")
    );
    // The reopened payment's message, received above and charged by hand, is not deleted.
    stack
        .assert_invariants(&Scope::through_charging().leaving("PaymentsQueue"), &[])
        .await;
}

/// An account's payments delivered as AWS may deliver them: the stream's shards relayed in
/// parallel (a later payment's shard first), a retried batch, a republish of everything, a
/// previous-version message. The ledger holds each once, in the order payments-api accepted
/// them, and nothing is charged before an earlier payment is settled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accounts_payments_are_charged_in_acceptance_order_however_they_arrive() {
    let stack = Stack::provision(&[("FailPayments", "[refused]:1:permanent")])
        .await
        .unwrap();
    let mut all = payments(7, 1, "order", |_| String::new());
    all[2].description = Some("payment 2 [refused]".into());
    let all = stack.accept(all).await.unwrap();
    let ids: Vec<&str> = all.iter().map(|p| p.payment_id.as_str()).collect();
    let group = all[0].account_id.as_str();
    let msg = |i: usize| (ids[i], body(&all[i]), group);

    // Payment 2 fails first (its own message, on its own): the account's order passes over it.
    assert_eq!(deliver(&stack, vec![msg(2)]).await, Vec::<String>::new());
    // Shard B's batch (payments 4 and 6) reaches the queue before shard A's.
    assert_eq!(deliver(&stack, vec![msg(4)]).await, Vec::<String>::new());
    let charged: Vec<String> = ledger_of(&stack, &ids)
        .await
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(
        charged,
        vec![ids[0], ids[1], ids[3], ids[4]],
        "payment 4 waited for 0, 1 and 3 (2 failed), and 5 and 6 were not charged before it"
    );
    assert_eq!(deliver(&stack, vec![msg(6)]).await, Vec::<String>::new());
    // The stream retries shard B's batch; shard A's arrives; republish sends everything again,
    // payment 5 as the previous version would (no sequence).
    let mut previous = all[5].clone();
    previous.sequence = None;
    let failed = deliver(
        &stack,
        vec![
            msg(4),
            msg(6),
            msg(0),
            msg(1),
            msg(3),
            msg(5),
            ("republish-5", body(&previous), group),
        ],
    )
    .await;
    assert_eq!(failed, Vec::<String>::new());

    let ledger = ledger_of(&stack, &ids).await;
    let order: Vec<u64> = ledger.iter().map(|e| e.2.unwrap()).collect();
    assert_eq!(
        order,
        vec![1, 2, 4, 5, 6, 7],
        "acceptance order (number 3 failed)"
    );
    let mut charged: Vec<PaymentRequested> = all.clone();
    charged.remove(2);
    assert!(
        stack
            .charged_exactly_once(&charged)
            .await
            .unwrap()
            .is_empty()
    );
    let account = Account::read(&stack.clients.dynamodb, stack.table("AccountsTable"), group)
        .await
        .unwrap();
    assert_eq!((account.next, account.settled), (7, 7));
    assert!(account.pending.is_empty(), "{:?}", account.pending);
    let reasons = dead_letters(&stack).await;
    assert_eq!(reasons.len(), 1, "only payment 2: {reasons:?}");
    stack
        .assert_invariants(
            &Scope::through_charging().declaring(Failure::Permanent, [ids[2]]),
            &[],
        )
        .await;
}

/// Many orders of delivery, as a simulation of the stream's shards: two accounts' payments,
/// each delivery a random batch of random messages (duplicates included), until every
/// message was delivered at least once. Whatever the order, each account's ledger is in
/// acceptance order and every payment is charged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_delivery_order_charges_in_acceptance_order() {
    let stack = Stack::provision(&[]).await.unwrap();
    let mut everything = Vec::new();
    for seed in 1..=4u64 {
        let mut all = payments(10, 2, &format!("shuffle{seed}"), |_| String::new());
        for (i, p) in all.iter_mut().enumerate() {
            p.account_id = format!("acct-{seed}-{}", i % 2);
        }
        let all = stack.accept(all).await.unwrap();
        let ids: Vec<&str> = all.iter().map(|p| p.payment_id.as_str()).collect();
        // A small deterministic generator: the same seed, the same orders.
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut next = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let mut delivered = vec![false; all.len()];
        let mut k = 0;
        while delivered.iter().any(|d| !d) {
            let size = 1 + next(4);
            let mut batch = Vec::new();
            for _ in 0..size {
                let i = next(all.len());
                delivered[i] = true;
                k += 1;
                batch.push((
                    format!("m{seed}-{k}"),
                    body(&all[i]),
                    all[i].account_id.clone(),
                ));
            }
            let records = batch
                .iter()
                .map(|(id, body, group)| (id.as_str(), body.clone(), group.as_str()))
                .collect();
            assert_eq!(deliver(&stack, records).await, Vec::<String>::new());
            // After every batch, each account's charged payments are its first ones: nothing
            // is charged before an earlier payment (whatever the clock says).
            let charged = ledger_of(&stack, &ids).await;
            for account in [format!("acct-{seed}-0"), format!("acct-{seed}-1")] {
                let of_account: Vec<&PaymentRequested> =
                    all.iter().filter(|p| p.account_id == account).collect();
                let mut numbers: Vec<u64> =
                    of_account.iter().map(|p| p.sequence.unwrap()).collect();
                numbers.sort_unstable();
                let mut done: Vec<u64> = charged
                    .iter()
                    .filter(|(id, ..)| of_account.iter().any(|p| &p.payment_id == id))
                    .map(|e| e.2.unwrap())
                    .collect();
                done.sort_unstable();
                assert_eq!(
                    done,
                    numbers[..done.len()],
                    "seed {seed}, {account}: {done:?}"
                );
            }
        }
        everything.extend(all.iter().cloned());
        let offenders = stack.charged_exactly_once(&everything).await.unwrap();
        assert!(offenders.is_empty(), "seed {seed}: {offenders:?}");
        for account in [format!("acct-{seed}-0"), format!("acct-{seed}-1")] {
            let sequences: Vec<u64> = ledger_of(&stack, &ids)
                .await
                .into_iter()
                .filter(|(id, ..)| {
                    all.iter()
                        .any(|p| &p.payment_id == id && p.account_id == account)
                })
                .map(|e| e.2.unwrap())
                .collect();
            let mut sorted = sequences.clone();
            sorted.sort_unstable();
            assert_eq!(sequences, sorted, "seed {seed}, {account}");
        }
    }
    stack
        .assert_invariants(&Scope::through_charging(), &[])
        .await;
}

/// A number whose payment is not written (payments-api stopped between taking the number and
/// writing the payment, or the write failed) holds up none of the account's later payments:
/// payment-processor voids it and passes over it. A payment write that comes after the void is
/// refused, and the payment takes another number: nothing is ever written under a number that is
/// voided or settled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_number_without_a_payment_is_voided_and_holds_up_nothing() {
    use aws_sdk_dynamodb::types::{Put, TransactWriteItem};
    use payments_model::order::{self, Holder};

    let stack = Stack::provision(&[]).await.unwrap();
    let mut all = payments(2, 1, "gap", |_| String::new());
    let group = all[0].account_id.clone();
    let accounts = stack.table("AccountsTable");
    let dynamodb = &stack.clients.dynamodb;
    // A request takes number 1, and has not written its payment yet.
    assert_eq!(
        order::take_number(dynamodb, accounts, &group)
            .await
            .unwrap(),
        1
    );
    // Another payment of the account is accepted meanwhile (number 2), and delivered.
    let later = stack.accept(vec![all.remove(1)]).await.unwrap().remove(0);
    assert_eq!(later.sequence, Some(2));
    let failed = deliver(&stack, vec![("later", body(&later), group.as_str())]).await;
    assert_eq!(failed, Vec::<String>::new());
    assert_eq!(
        ledger_of(&stack, &[&later.payment_id]).await.len(),
        1,
        "charged, not held up by number 1"
    );
    assert_eq!(
        Holder::read(dynamodb, accounts, &group, 1).await.unwrap(),
        Holder::Voided
    );
    assert_eq!(
        Holder::read(dynamodb, accounts, &group, 2).await.unwrap(),
        Holder::Payment(later.payment_id.clone())
    );
    // A void comes second to a payment written first: the number stays the payment's.
    assert_eq!(
        order::void(dynamodb, accounts, &group, 2, 0).await.unwrap(),
        Holder::Payment(later.payment_id.clone())
    );
    let account = Account::read(dynamodb, accounts, &group).await.unwrap();
    assert_eq!((account.next, account.settled), (2, 2));

    // The first request's write comes now, with number 1: refused, nothing is written.
    let first = all.remove(0);
    let put = Put::builder()
        .table_name(stack.table("PaymentsTable"))
        .item("paymentId", AttributeValue::S(first.payment_id.clone()))
        .item("accountId", AttributeValue::S(group.clone()))
        .item("status", AttributeValue::S("accepted".into()))
        .item("sequence", AttributeValue::N("1".into()))
        .condition_expression("attribute_not_exists(paymentId)")
        .build()
        .unwrap();
    let written = dynamodb
        .transact_write_items()
        .transact_items(TransactWriteItem::builder().put(put).build())
        .transact_items(
            TransactWriteItem::builder()
                .put(order::claim(accounts, &group, 1, &first.payment_id))
                .build(),
        )
        .send()
        .await;
    assert!(written.is_err(), "number 1 is voided");
    assert_eq!(payment(&stack, &first.payment_id).await, None);
    // Written as payments-api writes it, the payment takes another number; one voided before
    // its write (number 3 here) makes it take the next (number 4). It is charged after the
    // later payment, the numbers between passed over.
    assert_eq!(
        order::void(dynamodb, accounts, &group, 3, 0).await.unwrap(),
        Holder::Voided
    );
    let first = stack.accept(vec![first]).await.unwrap().remove(0);
    assert_eq!(first.sequence, Some(4));
    let failed = deliver(&stack, vec![("first", body(&first), group.as_str())]).await;
    assert_eq!(failed, Vec::<String>::new());
    let ledger = ledger_of(&stack, &[&first.payment_id, &later.payment_id]).await;
    let order: Vec<(&str, Option<u64>)> = ledger.iter().map(|e| (e.0.as_str(), e.2)).collect();
    assert_eq!(
        order,
        vec![
            (later.payment_id.as_str(), Some(2)),
            (first.payment_id.as_str(), Some(4))
        ]
    );
    let account = Account::read(dynamodb, accounts, &group).await.unwrap();
    assert_eq!((account.next, account.settled), (4, 4));
    assert!(
        stack
            .charged_exactly_once(&[later, first])
            .await
            .unwrap()
            .is_empty()
    );
    stack
        .assert_invariants(&Scope::through_charging(), &[])
        .await;
}
