//! payments-reconciler looks at the whole, not a part: every shard of the charged index gets
//! its share of a run (a hot shard does not take it all), a receipt is recovered until it
//! exists, every balance is compared with its audited charges on a rotating schedule (a balance
//! changed outside any charge is seen), and the cursor of payments left accepted never moves
//! past one left unsent.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use payments_e2e::stack::Stack;
use payments_model::lifecycle::{self, CHARGED_SHARD};
use payments_operations::reconcile::audit::Mismatch;
use payments_publisher::now_ms;

/// Writes a charged payment straight into the payments table (as the charged index sees it),
/// with no ledger entry and no receipt.
async fn charged(stack: &Stack, payment_id: &str, account_id: &str, charged_at: i64) {
    let s = |v: &str| AttributeValue::S(v.to_owned());
    let n = |v: i64| AttributeValue::N(v.to_string());
    let item = HashMap::from([
        ("paymentId".to_owned(), s(payment_id)),
        ("accountId".to_owned(), s(account_id)),
        ("amountCents".to_owned(), n(10)),
        ("currency".to_owned(), s("EUR")),
        ("status".to_owned(), s("charged")),
        ("chargedAt".to_owned(), n(charged_at)),
        (CHARGED_SHARD.to_owned(), s(&lifecycle::shard(payment_id))),
        (
            "ledgerEntryId".to_owned(),
            s(&format!("entry-{payment_id}")),
        ),
    ]);
    stack
        .clients
        .dynamodb
        .put_item()
        .table_name(stack.table("PaymentsTable"))
        .set_item(Some(item))
        .send()
        .await
        .unwrap();
}

/// `n` payment ids of `shard`, tagged `tag`.
fn ids_in_shard(shard: &str, tag: &str, n: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("{tag}-{}-{i}", uuid::Uuid::new_v4().simple()))
        .filter(|id| lifecycle::shard(id) == shard)
        .take(n)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_shard_does_not_take_the_whole_run_from_the_others() {
    let stack = Stack::provision(&[]).await.unwrap();
    let shards = lifecycle::SHARDS as usize;
    // Shard 0 holds three runs' worth of charges; shard 5 one charge, the latest.
    let t0 = now_ms() - 60_000;
    let hot = ids_in_shard("0", "hot", 3 * shards);
    for (i, id) in hot.iter().enumerate() {
        charged(&stack, id, "acct-hot", t0 + i as i64).await;
    }
    let cold = ids_in_shard("5", "cold", 1).remove(0);
    charged(&stack, &cold, "acct-cold", t0 + 1_000).await;
    let cap = shards.to_string();
    let reconciler = stack
        .reconciler(&[
            ("MAX_PAYMENTS_PER_RUN", cap.as_str()),
            ("RECEIPT_AFTER_SECONDS", "0"),
            ("AUDIT_LAG_SECONDS", "0"),
        ])
        .unwrap();

    let now = now_ms();
    let receipts = reconciler.receipts(now).await.unwrap();
    assert_eq!(receipts.checked, shards as u64, "{receipts:?}");
    assert!(receipts.resent.contains(&cold), "{receipts:?}");
    let audit = reconciler.audit(now).await.unwrap();
    assert_eq!(audit.audited, shards as u64, "{audit:?}");
    let unexplained: Vec<&str> = audit
        .mismatches
        .iter()
        .filter_map(|m| match m {
            Mismatch::LedgerEntries { payment_id, .. } => Some(payment_id.as_str()),
            _ => None,
        })
        .collect();
    assert!(unexplained.contains(&cold.as_str()), "{audit:?}");

    // The share shard 5 left unused goes to shard 0: three more runs see every charge (those
    // sent again before are sent again while their receipt is missing: receipt-sender is not
    // running here).
    let mut resent: Vec<String> = receipts.resent;
    for _ in 0..3 {
        resent.extend(reconciler.receipts(now).await.unwrap().resent);
    }
    resent.sort();
    resent.dedup();
    let mut all: Vec<String> = hot.iter().cloned().chain([cold]).collect();
    all.sort();
    assert_eq!(resent, all);
}

async fn write_receipt(stack: &Stack, payment_id: &str) {
    stack
        .clients
        .dynamodb
        .put_item()
        .table_name(stack.table("ReceiptsTable"))
        .item(
            "receiptId",
            AttributeValue::S(payments_model::receipt_id(payment_id)),
        )
        .send()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receipt_is_recovered_until_it_exists() {
    let stack = Stack::provision(&[]).await.unwrap();
    let id = format!("receipt-{}", uuid::Uuid::new_v4().simple());
    charged(&stack, &id, "acct-r", now_ms() - 60_000).await;
    let reconciler = stack.reconciler(&[("RECEIPT_AFTER_SECONDS", "0")]).unwrap();

    let first = reconciler.receipts(now_ms()).await.unwrap();
    assert_eq!(first.resent, vec![id.clone()], "{first:?}");
    // The PaymentCharged sent again is lost too (receipt-sender failed it, the queue emptied):
    // the next run sends it once more, and so on until the receipt is there.
    stack
        .clients
        .sqs
        .purge_queue()
        .queue_url(stack.queue_url("ReceiptsQueue"))
        .send()
        .await
        .unwrap();
    for _ in 0..2 {
        let again = reconciler.receipts(now_ms()).await.unwrap();
        assert_eq!(again.resent, vec![id.clone()], "{again:?}");
    }
    write_receipt(&stack, &id).await;
    let done = reconciler.receipts(now_ms()).await.unwrap();
    assert!(done.resent.is_empty(), "{done:?}");
    assert_eq!(done.checked, 1, "the receipt looked up once more: {done:?}");
    let after = reconciler.receipts(now_ms()).await.unwrap();
    assert_eq!(after.checked, 0, "nothing left to look up: {after:?}");
}

/// The balance item of one charge of 10 cents at `charged_at`, as payment-processor writes it.
async fn balance(stack: &Stack, account_id: &str, charged_at: i64) {
    let s = |v: &str| AttributeValue::S(v.to_owned());
    let n = |v: i64| AttributeValue::N(v.to_string());
    stack
        .clients
        .dynamodb
        .put_item()
        .table_name(stack.table("BalancesTable"))
        .item("accountId", s(account_id))
        .item("currency", s("EUR"))
        .item("balanceCents", n(10))
        .item("charges", n(1))
        .item("lastChargedAt", n(charged_at))
        .send()
        .await
        .unwrap();
}

fn balance_mismatches(audit: &payments_operations::reconcile::audit::Audit) -> Vec<&Mismatch> {
    audit
        .mismatches
        .iter()
        .filter(|m| matches!(m, Mismatch::Balance { .. }))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_balance_changed_outside_any_charge_is_seen() {
    let stack = Stack::provision(&[]).await.unwrap();
    let at = now_ms() - 60_000;
    let id = format!("balance-{}", uuid::Uuid::new_v4().simple());
    charged(&stack, &id, "acct-b", at).await;
    balance(&stack, "acct-b", at).await;
    let reconciler = stack.reconciler(&[("AUDIT_LAG_SECONDS", "0")]).unwrap();
    let audit = reconciler.audit(now_ms()).await.unwrap();
    assert_eq!(audit.audited, 1, "{audit:?}");
    assert!(balance_mismatches(&audit).is_empty(), "{audit:?}");

    // Seven cents added to the balance, by no charge.
    stack
        .clients
        .dynamodb
        .update_item()
        .table_name(stack.table("BalancesTable"))
        .key("accountId", AttributeValue::S("acct-b".into()))
        .key("currency", AttributeValue::S("EUR".into()))
        .update_expression("SET balanceCents = :cents")
        .expression_attribute_values(":cents", AttributeValue::N("17".into()))
        .send()
        .await
        .unwrap();
    let audit = reconciler.audit(now_ms()).await.unwrap();
    assert_eq!(audit.audited, 0, "{audit:?}");
    assert_eq!(
        balance_mismatches(&audit),
        vec![&Mismatch::Balance {
            account_id: "acct-b".into(),
            currency: "EUR".into(),
            balance_cents: 17,
            charges: 1,
            audited_cents: 10,
            audited_charges: 1,
        }],
        "{audit:?}"
    );
}

/// A run whose time budget is spent on its first shard (three charges without a receipt in each
/// shard, the budget spent at its second check) looks at that shard alone. Each run starts at
/// another shard: twenty such runs, 5 minutes apart, look at many shards, where runs that always began at the
/// same shard would never leave it (its pending receipts hold each run there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_cut_short_by_their_time_budget_do_not_always_leave_the_same_shards() {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use lambda_idempotency::time::Deadline;
    use payments_e2e::ticking::Ticking;
    use payments_operations::reconcile::Budget;

    let stack = Stack::provision(&[]).await.unwrap();
    let t0 = now_ms() - 60_000;
    let mut shard_of = HashMap::new();
    for shard in lifecycle::shards() {
        for (i, id) in ids_in_shard(&shard, "cut", 3).into_iter().enumerate() {
            charged(&stack, &id, "acct-cut", t0 + i as i64).await;
            shard_of.insert(id, shard.clone());
        }
    }
    let reconciler = stack.reconciler(&[("RECEIPT_AFTER_SECONDS", "0")]).unwrap();
    let clock = Arc::new(Ticking::new(1));
    let mut looked_at = BTreeSet::new();
    let now = now_ms();
    for run in 0..20 {
        // Spent at the budget's second check.
        let start = clock.restart();
        let budget = Budget::until(Deadline::at_epoch_ms(start + 1), clock.clone());
        // Runs 5 minutes apart, as the schedule sets them.
        let receipts = reconciler
            .receipts_within(now + run * 300_000, &budget)
            .await
            .unwrap();
        assert!(receipts.out_of_time, "{receipts:?}");
        let shards: BTreeSet<&String> = receipts.resent.iter().map(|id| &shard_of[id]).collect();
        assert!(shards.len() <= 1, "one shard a run: {receipts:?}");
        looked_at.extend(shards.into_iter().cloned());
    }
    assert!(
        looked_at.len() >= 4,
        "the runs looked at shards {looked_at:?} alone"
    );
}
