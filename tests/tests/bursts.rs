//! A burst of one account's payments through the local gateway: concurrent `POST /payments` with
//! distinct Idempotency-Keys for the same account are all accepted (no 5xx), each with a number
//! of its own, and the pipeline then charges each exactly once, in its account's order. The
//! account's item stays as small, whatever the number of payments not yet settled.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use payments_e2e::invariants::Violation;
use payments_e2e::{Options, Pipeline};
use payments_model::order::{Account, Holder};

type Item = HashMap<String, AttributeValue>;

async fn scan(pipeline: &Pipeline, logical_id: &str) -> Vec<Item> {
    let table = &pipeline.resources.tables[logical_id].name;
    payments_e2e::checks::scan(&pipeline.clients.dynamodb, table)
        .await
        .unwrap()
}

fn n(item: &Item, name: &str) -> Option<i64> {
    item.get(name)?.as_n().ok()?.parse().ok()
}

fn s<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    item.get(name)?.as_s().ok().map(String::as_str)
}

/// `count` concurrent POSTs of `account`'s caller, each with its own key: asserts that every
/// answer is a 201 of a new payment, and answers the payments' ids.
async fn post_a_burst(pipeline: &Pipeline, account: &str, count: usize) -> Vec<String> {
    let http = pipeline.http().as_caller(account);
    let started = std::time::Instant::now();
    let answers = futures_util::future::join_all((0..count).map(|i| {
        let http = http.clone();
        async move {
            let body = format!(r#"{{"amountCents":{},"currency":"EUR"}}"#, 100 + i);
            http.post_payment(Some(&format!("burst-{count}-{i}")), &body)
                .await
                .unwrap()
        }
    }))
    .await;
    eprintln!("{count} POSTs answered in {:?}", started.elapsed());
    let mut statuses: HashMap<u16, usize> = HashMap::new();
    for a in &answers {
        *statuses.entry(a.status).or_default() += 1;
    }
    assert_eq!(
        statuses,
        HashMap::from([(201, count)]),
        "every POST of the burst is accepted; first other answer: {:?}",
        answers.iter().find(|a| a.status != 201)
    );
    assert!(answers.iter().all(|a| !a.replayed), "each key ran once");
    let mut ids: Vec<String> = answers
        .iter()
        .map(|a| {
            let body: serde_json::Value = serde_json::from_str(&a.body).unwrap();
            body["paymentId"].as_str().unwrap().to_owned()
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), count, "one payment per key");
    ids
}

/// The account's item in the accounts table, and the names of its attributes, sorted.
async fn account_item(pipeline: &Pipeline, account: &str) -> (Account, Vec<String>) {
    let item = pipeline
        .clients
        .dynamodb
        .get_item()
        .table_name(&pipeline.resources.tables["AccountsTable"].name)
        .key("accountId", AttributeValue::S(account.to_owned()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .expect("the account's item");
    let mut names: Vec<String> = item.keys().cloned().collect();
    names.sort_unstable();
    (Account::of_item(Some(&item)), names)
}

/// 50 concurrent POSTs for one account are all accepted; once the pipeline drains, each payment
/// is charged exactly once, the ledger holds them in the order of their numbers, every number of
/// the account is settled, and the account's item holds its two counters only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_50_payments_of_one_account_is_served_and_charged_in_order() {
    let count = 50;
    let pipeline = Pipeline::start(Options::default()).await.unwrap();
    let account = "acct-burst-50";
    let ids = post_a_burst(&pipeline, account, count).await;
    pipeline
        .drain(Duration::from_secs(300), |_| {})
        .await
        .unwrap();

    // Each payment charged, once, with a number of its own.
    let payments = scan(&pipeline, "PaymentsTable").await;
    assert_eq!(payments.len(), count);
    let mut numbers = Vec::new();
    for p in &payments {
        assert_eq!(s(p, "status"), Some("charged"), "{p:?}");
        numbers.push(n(p, "sequence").expect("every payment is numbered"));
    }
    numbers.sort_unstable();
    numbers.dedup();
    assert_eq!(numbers.len(), count, "no two payments share a number");
    let ledger = scan(&pipeline, "LedgerTable").await;
    assert_eq!(ledger.len(), count, "one ledger entry per payment");
    let mut entries: HashMap<&str, usize> = HashMap::new();
    for e in &ledger {
        *entries.entry(s(e, "paymentId").unwrap()).or_default() += 1;
    }
    assert!(entries.values().all(|&c| c == 1), "charged once each");
    assert!(entries.keys().all(|id| ids.iter().any(|i| i == id)));
    let expected: i64 = (0..count as i64).map(|i| 100 + i).sum();
    let balance = scan(&pipeline, "BalancesTable")
        .await
        .into_iter()
        .find(|b| s(b, "accountId") == Some(account))
        .expect("the account's balance");
    assert_eq!(
        (n(&balance, "balanceCents"), n(&balance, "charges")),
        (Some(expected), Some(count as i64))
    );
    // In the account's order: sorted by number, the charges' times never go back (charges in
    // the same millisecond show no order and pass).
    let mut charges: Vec<(i64, i64)> = ledger
        .iter()
        .map(|e| (n(e, "sequence").unwrap(), n(e, "createdAt").unwrap()))
        .collect();
    charges.sort_unstable();
    if let Some(w) = charges.windows(2).find(|w| w[0].1 > w[1].1) {
        panic!(
            "number {} charged at {} after number {} at {}",
            w[0].0, w[0].1, w[1].0, w[1].1
        );
    }

    // Every number given is settled, and the account item holds its counters only.
    let (state, names) = account_item(&pipeline, account).await;
    assert_eq!(state.settled, state.next, "{state:?}");
    assert!(state.next >= count as u64, "{state:?}");
    assert_eq!(
        names,
        ["accountId", "nextSequence", "settledSequence"],
        "the account item is bounded"
    );
    pipeline.stop().await;
}

/// 200 concurrent POSTs for one account, payment-processor stopped (the 200 payments stay
/// unsettled): all are accepted, each with a number of its own that its number's item names,
/// and the account's item holds its counter only (DynamoDB refuses an item over 400 KB, which
/// would refuse every later payment of the account). Charging in order is the 50-payment test's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_200_payments_of_one_account_is_served_and_leaves_the_account_item_bounded() {
    let count = 200;
    let pipeline = Pipeline::start(Options {
        start_processor: false,
        ..Options::default()
    })
    .await
    .unwrap();
    let account = "acct-burst-200";
    let ids = post_a_burst(&pipeline, account, count).await;
    let (state, names) = account_item(&pipeline, account).await;
    assert_eq!(
        names,
        ["accountId", "nextSequence"],
        "the account item is bounded"
    );
    assert_eq!(state.settled, 0);
    let payments = scan(&pipeline, "PaymentsTable").await;
    assert_eq!(payments.len(), count);
    let mut numbers = Vec::new();
    for p in &payments {
        let id = s(p, "paymentId").unwrap();
        assert!(ids.iter().any(|i| i == id));
        let number = n(p, "sequence").expect("every payment is numbered") as u64;
        assert!(number <= state.next, "{number} was given");
        assert_eq!(
            Holder::read(
                &pipeline.clients.dynamodb,
                &pipeline.resources.tables["AccountsTable"].name,
                account,
                number
            )
            .await
            .unwrap(),
            Holder::Payment(id.to_owned()),
            "number {number}'s item names its payment"
        );
        numbers.push(number);
    }
    numbers.sort_unstable();
    numbers.dedup();
    assert_eq!(numbers.len(), count, "no two payments share a number");
    // Without payment-processor every payment stays accepted, its message on payments.fifo.
    let mut expected = vec![Violation::Undrained {
        queue: "PaymentsQueue".into(),
        messages: count as u64,
    }];
    expected.extend(ids.into_iter().map(|payment_id| Violation::Unsettled {
        payment_id,
        status: "accepted".into(),
    }));
    pipeline.stop_expecting(&expected).await;
}
