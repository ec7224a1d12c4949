//! payment-processor on Lambda Managed Instances: several invocations run at once in one process,
//! on one `App`, and each counts its own metrics (`cacheHits`, `receiptsResent`, `failedAhead`),
//! never another's.

use std::time::Duration;

use payments_e2e::Stack;
use payments_e2e::faults::{event, failed_ids};
use payments_e2e::sqs_records::fifo_record;
use payments_e2e::stack::payments;
use payments_model::PaymentRequested;

fn batch(
    tag: &str,
    payments: &[&PaymentRequested],
) -> lambda_runtime::LambdaEvent<aws_lambda_events::sqs::SqsEvent> {
    let records = payments
        .iter()
        .map(|p| {
            let body = serde_json::to_string(p).unwrap();
            fifo_record(&format!("{tag}-{}", p.payment_id), &body, &p.account_id, 1)
        })
        .collect();
    event(records, Duration::from_secs(60))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invocations_at_once_in_one_process_each_count_their_own_metrics() {
    let stack = Stack::provision(&[]).await.unwrap();
    // Three payments of each of three accounts; the third account's first can never be charged
    // (a currency that is no ISO 4217 code).
    let mut all = payments(9, 3, "managed", |_| String::new());
    all[2].currency = "EURO".into();
    let accepted = stack.accept(all).await.unwrap();
    let of = |account: &str| -> Vec<&PaymentRequested> {
        accepted
            .iter()
            .filter(|p| p.account_id == account)
            .collect()
    };
    let (a, b, c) = (of("acct-000"), of("acct-001"), of("acct-002"));
    assert_eq!((a.len(), b.len(), c.len()), (3, 3, 3));
    let app = stack.payment_processor().unwrap();

    // The first account's payments are charged: the warm cache now holds them.
    let first = app.handle_counted(batch("first", &a)).await.unwrap();
    assert!(
        failed_ids(&first.response).is_empty(),
        "{:?}",
        first.response
    );
    assert_eq!(first.counts.processed, 3);

    // Then three invocations at once: the first account's messages again (duplicates, answered
    // by the cache, their PaymentCharged sent again), the second account's (charged), and the
    // third account's last payment's (its first payment failed ahead of its message, the
    // second charged ahead of its message, then its own).
    let (again, fresh, ahead) = tokio::join!(
        app.handle_counted(batch("again", &a)),
        app.handle_counted(batch("fresh", &b)),
        app.handle_counted(batch("ahead", &c[2..])),
    );
    let (again, fresh, ahead) = (again.unwrap(), fresh.unwrap(), ahead.unwrap());
    assert!(
        failed_ids(&ahead.response).is_empty(),
        "{:?}",
        ahead.response
    );
    assert_eq!(
        (
            ahead.counts.processed,
            ahead.cache_hits,
            ahead.receipts_resent,
            ahead.failed_ahead
        ),
        (1, 0, 0, 1),
        "the catch-up's invocation counts the payment it failed ahead, and nothing of the others"
    );
    assert!(
        failed_ids(&again.response).is_empty(),
        "{:?}",
        again.response
    );
    assert!(
        failed_ids(&fresh.response).is_empty(),
        "{:?}",
        fresh.response
    );
    assert_eq!(
        (
            again.counts.duplicates,
            again.cache_hits,
            again.receipts_resent
        ),
        (3, 3, 3),
        "the duplicates' invocation counts its own cache hits and resent events"
    );
    assert_eq!(
        (
            fresh.counts.processed,
            fresh.cache_hits,
            fresh.receipts_resent,
            fresh.failed_ahead
        ),
        (3, 0, 0, 0),
        "the charges' invocation counts none of the other's"
    );
    // The process's totals hold them all.
    assert_eq!(
        (app.cache_hits(), app.receipts_resent(), app.failed_ahead()),
        (3, 3, 1)
    );
}
