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
    // Three payments of each of two accounts.
    let accepted = stack
        .accept(payments(6, 2, "managed", |_| String::new()))
        .await
        .unwrap();
    let of = |account: &str| -> Vec<&PaymentRequested> {
        accepted
            .iter()
            .filter(|p| p.account_id == account)
            .collect()
    };
    let (a, b) = (of("acct-000"), of("acct-001"));
    assert_eq!((a.len(), b.len()), (3, 3));
    let app = stack.payment_processor().unwrap();

    // The first account's payments are charged: the warm cache now holds them.
    let first = app.handle_counted(batch("first", &a)).await.unwrap();
    assert!(
        failed_ids(&first.response).is_empty(),
        "{:?}",
        first.response
    );
    assert_eq!(first.counts.processed, 3);

    // Then two invocations at once: the first account's messages again (duplicates, answered by
    // the cache, their PaymentCharged sent again), and the second account's (charged).
    let (again, fresh) = tokio::join!(
        app.handle_counted(batch("again", &a)),
        app.handle_counted(batch("fresh", &b)),
    );
    let (again, fresh) = (again.unwrap(), fresh.unwrap());
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
    // The process's totals hold both.
    assert_eq!((app.cache_hits(), app.receipts_resent()), (3, 3));
}
