//! The outbox: payments-api only writes payments; payments-publisher relays them from the
//! payments table's stream. Payments written while the relay is stopped are all sent when it
//! starts, and a relay that crashes mid-batch (after sending part of it) loses nothing and
//! charges nothing twice.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use aws_lambda_events::dynamodb::Event as StreamEvent;
use aws_sdk_dynamodb::types::AttributeValue;
use lambda_runtime::{Error, LambdaEvent};
use local_aws::runner::InProcess;
use payments_e2e::{Options, Pipeline};
use payments_operations::reconcile::audit::Mismatch;
use payments_publisher::now_ms;

/// Posts `n` payments over `accounts` callers; returns (payment id, account, amount).
async fn post_payments(
    pipeline: &Pipeline,
    n: usize,
    accounts: usize,
) -> Vec<(String, String, i64)> {
    let mut accepted = Vec::new();
    for i in 0..n {
        let account = format!("acct-{}", i % accounts);
        let amount = 100 + i as i64;
        let body =
            format!(r#"{{"amountCents":{amount},"currency":"EUR","description":"outbox {i}"}}"#);
        let answer = pipeline
            .http()
            .as_caller(&account)
            .post_payment(Some(&uuid::Uuid::new_v4().to_string()), &body)
            .await
            .unwrap();
        assert_eq!(answer.status, 201, "{answer:?}");
        let id = serde_json::from_str::<serde_json::Value>(&answer.body).unwrap()["paymentId"]
            .as_str()
            .unwrap()
            .to_owned();
        accepted.push((id, account, amount));
    }
    accepted
}

/// payments-publisher's app with the settings the template gives it.
async fn publisher_app(pipeline: &Pipeline) -> payments_publisher::App {
    let function = pipeline
        .template
        .function_by_name("payments-publisher")
        .unwrap();
    let settings: HashMap<String, String> = pipeline
        .resources
        .function_env(function)
        .unwrap()
        .into_iter()
        .collect();
    let sdk = local_aws::local_sdk_config().await.unwrap();
    payments_publisher::App::from_settings(&sdk, &settings).unwrap()
}

/// Every payment charged exactly once (one ledger entry, status `charged`, one receipt), and
/// every balance the sum of its payments (all in EUR).
async fn assert_each_charged_once(pipeline: &Pipeline, accepted: &[(String, String, i64)]) {
    let stored = pipeline.stored().await.unwrap();
    let mut offenders = Vec::new();
    let mut expected: HashMap<&str, (i64, i64)> = HashMap::new();
    for (id, account, amount) in accepted {
        let ledger = stored.ledger_entries.get(id).copied().unwrap_or(0);
        let receipts = stored.receipts.get(id).copied().unwrap_or(0);
        let status = stored.payment_status.get(id).map(String::as_str);
        if ledger != 1 || receipts != 1 || status != Some("charged") {
            offenders.push(format!(
                "{id}: {ledger} ledger entries, {receipts} receipts, status {status:?}"
            ));
        }
        let e = expected.entry(account.as_str()).or_default();
        e.0 += amount;
        e.1 += 1;
    }
    for (account, want) in expected {
        let got = stored.balance(account, "EUR").unwrap_or_default();
        if got != want {
            offenders.push(format!("{account}: balance {got:?}, expected {want:?}"));
        }
    }
    assert!(
        offenders.is_empty(),
        "{} offenders: {offenders:?}",
        offenders.len()
    );
    assert_eq!(
        stored.payment_status.len(),
        accepted.len(),
        "no other payment stored"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payments_written_while_the_publisher_is_stopped_are_all_sent_once_it_starts() {
    let mut pipeline = Pipeline::start(Options {
        start_publisher: false,
        ..Options::default()
    })
    .await
    .unwrap();
    let accepted = post_payments(&pipeline, 24, 3).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        pipeline.in_flight().await.unwrap(),
        0,
        "nothing is queued without the relay"
    );
    let stored = pipeline.stored().await.unwrap();
    assert!(
        stored.payment_status.values().all(|s| s == "accepted"),
        "{:?}",
        stored.payment_status
    );

    pipeline.start_publisher().unwrap();
    pipeline
        .drain(Duration::from_secs(90), |_| {})
        .await
        .unwrap();
    assert_each_charged_once(&pipeline, &accepted).await;
    let stats = pipeline.stop().await;
    assert_eq!(stats["payments-publisher"].whole_batch_failures(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_crash_mid_batch_loses_nothing_and_charges_once() {
    let mut pipeline = Pipeline::start(Options {
        start_publisher: false,
        ..Options::default()
    })
    .await
    .unwrap();
    let accepted = post_payments(&pipeline, 30, 4).await;

    // The relay's first invocations send part of their batch and then die: one with an error,
    // one with a panic. Lambda retries the whole batch, so the sent part is sent again.
    let app = Arc::new(publisher_app(&pipeline).await);
    let invocations = Arc::new(AtomicU32::new(0));
    let (seen, relay) = (invocations.clone(), app.clone());
    pipeline
        .start_publisher_with(InProcess::new(move |event: LambdaEvent<StreamEvent>| {
            let (app, seen) = (relay.clone(), seen.clone());
            async move {
                let records = &event.payload.records;
                match seen.fetch_add(1, Ordering::SeqCst) {
                    0 => {
                        app.relay(&records[..records.len() / 2]).await;
                        Err::<_, Error>("crashed after sending half of the batch".into())
                    }
                    1 => {
                        app.relay(&records[..1]).await;
                        panic!("crashed after sending one record");
                    }
                    _ => app.handle(event).await,
                }
            }
        }))
        .unwrap();
    pipeline
        .drain(Duration::from_secs(90), |_| {})
        .await
        .unwrap();
    assert_each_charged_once(&pipeline, &accepted).await;
    let stats = pipeline.stop().await;
    assert!(invocations.load(Ordering::SeqCst) > 2);
    assert!(
        stats["payments-publisher"].whole_batch_failures() >= 2,
        "both crashes were retried: {:?}",
        stats["payments-publisher"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payments_the_relay_gave_up_on_are_sent_again_by_the_reconciler_in_order_and_charged_once()
{
    use payments_model::lifecycle;

    // The relay never runs: as if it had given up on these records and the stream had dropped
    // them. The payments stay `accepted`, with no message.
    let mut pipeline = Pipeline::start(Options {
        start_publisher: false,
        ..Options::default()
    })
    .await
    .unwrap();
    let accepted = post_payments(&pipeline, 12, 3).await;
    let dynamodb = &pipeline.clients.dynamodb;
    let table = pipeline.tables().payments;

    // An item in the accepted index that is not a payment is left alone, and holds back nothing.
    let s = |v: &str| AttributeValue::S(v.to_owned());
    let broken = HashMap::from([
        ("paymentId".to_owned(), s("pay-broken")),
        ("status".to_owned(), s("accepted")),
        ("createdAt".to_owned(), AttributeValue::N("1".into())),
        (
            lifecycle::ACCEPTED_SHARD.to_owned(),
            s(&lifecycle::shard("pay-broken")),
        ),
    ]);
    dynamodb
        .put_item()
        .table_name(&table)
        .set_item(Some(broken))
        .send()
        .await
        .unwrap();

    // Within the resend threshold the reconciler leaves them to the relay.
    let patient = pipeline.reconciler(&[]).unwrap();
    let report = patient.waiting(now_ms()).await.unwrap();
    assert_eq!(report, Default::default(), "too recent to send again");

    let reconciler = pipeline
        .reconciler(&[("RESEND_AFTER_SECONDS", "0"), ("AUDIT_LAG_SECONDS", "0")])
        .unwrap();
    let report = reconciler.run(now_ms() + 1).await.unwrap();
    let mut resent = report.waiting.resent.clone();
    let mut accepted_ids: Vec<_> = accepted.iter().map(|(id, ..)| id.clone()).collect();
    resent.sort();
    accepted_ids.sort();
    assert_eq!(
        resent, accepted_ids,
        "every accepted payment is sent again: {report}"
    );
    assert!(report.waiting.send_failed.is_empty(), "{report}");
    assert!(report.waiting.stuck.is_empty(), "{report}");
    dynamodb
        .delete_item()
        .table_name(&table)
        .key("paymentId", s("pay-broken"))
        .send()
        .await
        .unwrap();
    pipeline
        .drain(Duration::from_secs(90), |_| {})
        .await
        .unwrap();
    assert_each_charged_once(&pipeline, &accepted).await;

    // Each account's payments were charged in the order they were written.
    let stored = pipeline.stored().await.unwrap();
    for account in ["acct-0", "acct-1", "acct-2"] {
        let charged: Vec<i64> = accepted
            .iter()
            .filter(|(_, a, _)| a == account)
            .map(|(id, ..)| stored.charged_at[id])
            .collect();
        assert!(
            charged.windows(2).all(|w| w[0] <= w[1]),
            "{account} charged out of order: {charged:?}"
        );
    }
    let report = reconciler.waiting(now_ms() + 1).await.unwrap();
    assert!(
        report.resent.is_empty(),
        "nothing left to send once charged: {report:?}"
    );

    // The audit, with two faults planted: acct-0's balance is a cent off, and one of acct-1's
    // payments lost its ledger entry. Each is reported, nothing else is.
    let tables = pipeline.tables();
    dynamodb
        .update_item()
        .table_name(&tables.balances)
        .key("accountId", s("acct-0"))
        .key("currency", s("EUR"))
        .update_expression("ADD balanceCents :one")
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .send()
        .await
        .unwrap();
    let lost = accepted
        .iter()
        .find(|(_, a, _)| a == "acct-1")
        .unwrap()
        .0
        .clone();
    let entry = dynamodb
        .get_item()
        .table_name(&table)
        .key("paymentId", s(&lost))
        .send()
        .await
        .unwrap()
        .item
        .unwrap()["ledgerEntryId"]
        .clone();
    let removed = dynamodb
        .delete_item()
        .table_name(&tables.ledger)
        .key("entryId", entry)
        .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    let audit = reconciler.audit(now_ms() + 1).await.unwrap();
    assert_eq!(audit.audited, accepted.len() as u64, "{audit:?}");
    assert_eq!(audit.mismatches.len(), 2, "{audit:?}");
    assert!(
        audit.mismatches.iter().any(|m| matches!(m,
            Mismatch::Balance { account_id, balance_cents, audited_cents, .. }
                if account_id == "acct-0" && balance_cents - audited_cents == 1)),
        "{audit:?}"
    );
    assert!(
        audit.mismatches.iter().any(|m| matches!(m,
            Mismatch::LedgerEntries { payment_id, found, .. } if *payment_id == lost && found.is_empty())),
        "{audit:?}"
    );
    // Incremental: a second pass has nothing new to audit (it may compare acct-0's balance
    // again, when a charge of it was too recent to conclude on in the first pass).
    let again = reconciler.audit(now_ms() + 1).await.unwrap();
    assert_eq!(again.audited, 0, "each charge is audited once: {again:?}");
    assert!(
        again.mismatches.iter().all(|m| matches!(m,
            Mismatch::Balance { account_id, .. } if account_id == "acct-0")),
        "{again:?}"
    );
    // The faults repaired, for what follows.
    dynamodb
        .put_item()
        .table_name(&tables.ledger)
        .set_item(Some(removed))
        .send()
        .await
        .unwrap();
    dynamodb
        .update_item()
        .table_name(&tables.balances)
        .key("accountId", s("acct-0"))
        .key("currency", s("EUR"))
        .update_expression("ADD balanceCents :minus_one")
        .expression_attribute_values(":minus_one", AttributeValue::N("-1".into()))
        .send()
        .await
        .unwrap();

    // The relay, started late after all, sends every payment again (SQS drops the sends within
    // its deduplication window, payment-processor skips them after it): nothing is charged twice.
    pipeline.start_publisher().unwrap();
    pipeline
        .drain(Duration::from_secs(90), |_| {})
        .await
        .unwrap();
    assert_each_charged_once(&pipeline, &accepted).await;
    assert_eq!(
        pipeline.counts()["payments-publisher"].processed,
        accepted.len() as u64 + 1,
        "the relay sent every payment again, and dead-lettered the broken item's INSERT"
    );
    pipeline.stop().await;
}
