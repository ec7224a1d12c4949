//! What one charge writes: the domain's four items in one transaction, the charge's idempotency
//! record riding on the payment (no item of its own), each item within DynamoDB's 1 KB write
//! unit for a payment with a description of up to [`DESCRIPTION_WITHIN_1_KB`] characters, so
//! that the transaction bills 2 write units per item: 8 per charge (6 for a payment without a
//! number), where a record beside the writes made it 10.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use payments_e2e::Stack;
use payments_e2e::faults::{event, failed_ids};
use payments_e2e::invariants::Scope;
use payments_e2e::sqs_records::fifo_record;
use payments_e2e::stack::payments;

type Item = HashMap<String, AttributeValue>;

/// The longest description with which a charged payment, its record on it, stays within 1 KB.
const DESCRIPTION_WITHIN_1_KB: usize = 200;

/// An item's size as DynamoDB bills it: each attribute's name and value (a number at its text
/// length, an upper bound).
fn item_bytes(item: &Item) -> usize {
    item.iter()
        .map(|(name, value)| {
            name.len()
                + match value {
                    AttributeValue::S(v) | AttributeValue::N(v) => v.len(),
                    AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
                    other => panic!("an attribute of an unexpected type: {other:?}"),
                }
        })
        .sum()
}

async fn item_of(stack: &Stack, table: &str, key: &str, value: &str) -> Option<Item> {
    stack
        .scan(table)
        .await
        .unwrap()
        .into_iter()
        .find(|item| item.get(key) == Some(&AttributeValue::S(value.to_owned())))
}

#[tokio::test]
async fn a_charge_is_the_domains_writes_with_the_record_on_the_payment() {
    let stack = Stack::provision(&[]).await.unwrap();
    let mut all = payments(1, 1, "cost", |_| String::new());
    all[0].description = Some("d".repeat(DESCRIPTION_WITHIN_1_KB));
    let accepted = stack.accept(all).await.unwrap();
    let p = &accepted[0];
    let body = serde_json::to_string(p).unwrap();
    let app = stack.payment_processor().unwrap();
    let charge = |id: &str| {
        event(
            vec![fifo_record(id, &body, &p.account_id, 1)],
            Duration::from_secs(60),
        )
    };
    let response = app.handle(charge("m-1")).await.unwrap();
    assert!(failed_ids(&response).is_empty(), "{response:?}");

    let payment = item_of(&stack, "PaymentsTable", "paymentId", &p.payment_id)
        .await
        .expect("the payment");
    assert_eq!(payment["status"], AttributeValue::S("charged".into()));
    assert_eq!(
        payment["idem_status"],
        AttributeValue::S("COMPLETED".into()),
        "the charge's record rides on the payment"
    );
    assert!(
        stack.scan("IdempotencyTable").await.unwrap().is_empty(),
        "and nothing is written beside the domain's items"
    );
    let entry = item_of(&stack, "LedgerTable", "paymentId", &p.payment_id)
        .await
        .expect("the ledger entry");
    let balance = item_of(&stack, "BalancesTable", "accountId", &p.account_id)
        .await
        .expect("the balance");
    let account = item_of(&stack, "AccountsTable", "accountId", &p.account_id)
        .await
        .expect("the account's order");
    for (name, item) in [
        ("payment", &payment),
        ("ledger entry", &entry),
        ("balance", &balance),
        ("account", &account),
    ] {
        let bytes = item_bytes(item);
        eprintln!("{name}: {bytes} bytes");
        assert!(
            bytes <= 1024,
            "the {name} takes {bytes} bytes: over one write unit"
        );
    }

    // A second delivery of the same payment (another message id, as a resend) to another
    // execution environment (no warm cache): a duplicate, answered by the record on the
    // payment, nothing written again.
    let other = stack.payment_processor().unwrap();
    let again = other.handle(charge("m-2")).await.unwrap();
    assert!(failed_ids(&again).is_empty(), "{again:?}");
    assert_eq!(other.cache_hits(), 0);
    assert_eq!(
        other.receipts_resent(),
        1,
        "its stored PaymentCharged is sent again"
    );
    let entries = stack.ledger_entries().await.unwrap();
    assert_eq!(entries.get(&p.payment_id), Some(&1), "charged once");
    stack
        .assert_invariants(&Scope::through_charging(), &[])
        .await;
}
