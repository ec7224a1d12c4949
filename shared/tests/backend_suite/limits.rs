//! What DynamoDB refuses for the size or the key of the handler's items, and what a foreign item
//! (one that carries no idempotency record) does to a write, for every `TransactionalBackend`:
//! the in-memory backend must answer as DynamoDB does, so that a unit test sees what a function
//! would. Declared with the inline checks (`inline_suite!`).
//!
//! The sizes stay kilobytes away from each limit: backends count an item's bytes a little
//! differently (DynamoDB its attribute names and values, the in-memory backend its key and value).

use lambda_idempotency::inline::InlinePut;
use lambda_idempotency::store::{
    LimitError, MAX_ITEM_BYTES, MAX_TRANSACTION_BYTES, TransactionalBackend,
};
use lambda_idempotency::transaction::{TransactError, Transacted, Transaction};

use super::{InlineOps, Items, Suite};

const KB: usize = 1024;

/// `work`'s answer to the engine.
type Answer<T> = Result<T, std::io::Error>;

/// Asserts that `refused` is a limit found before any request, not counted as an attempt, and
/// that nothing was recorded for `key`.
#[track_caller]
fn refused_before_any_request<T: std::fmt::Debug, B>(
    s: &Suite<B>,
    refused: Result<Transacted<T>, TransactError<std::io::Error>>,
    is_limit: impl Fn(&LimitError) -> bool,
) -> LimitError
where
    B: TransactionalBackend + Clone + 'static,
{
    let error = match refused {
        Err(TransactError::Limit {
            error,
            attempts: None,
        }) => error,
        other => panic!("expected a limit found before any request, got {other:?}"),
    };
    assert!(is_limit(&error), "{error:?}");
    assert_eq!(s.counter.total(), 0, "{:?}", s.counter.snapshot());
    error
}

/// An item over 400 KB is refused before any request, inline and in a transaction, whether
/// the record rides on it or not; an item well within it is written.
pub async fn an_item_over_the_item_limit_is_refused_before_any_request<B, X>(
    s: &Suite<B>,
    items: &X,
    _ops: InlineOps,
) where
    B: TransactionalBackend + Clone + 'static,
    X: Items<B::Write, Write = B::Write>,
{
    let over = "x".repeat(MAX_ITEM_BYTES + KB);
    let e = &s.engine;
    s.counter.reset();
    let put = InlinePut::new((), items.item("big-inline", &over));
    let refused = e
        .put_inline("big-inline", b"1", || async { Answer::Ok(put) })
        .await;
    refused_before_any_request(s, refused, |e| {
        matches!(e, LimitError::ItemTooLarge { index: 0, .. })
    });
    let tx = Transaction::new(())
        .write(items.put("small", "v"))
        .write(items.put("big-tx", &over));
    let refused = e
        .transact("big-tx", b"1", None, || async { Answer::Ok(tx) })
        .await;
    refused_before_any_request(s, refused, |e| {
        matches!(e, LimitError::ItemTooLarge { index: 1, .. })
    });
    assert_eq!(items.value("big-inline").await, None);
    assert_eq!(items.value("small").await, None, "nothing applied");
    assert_eq!(e.get("big-tx").await.unwrap(), None, "not an attempt");

    let within = "x".repeat(MAX_ITEM_BYTES - 8 * KB);
    let put = InlinePut::new((), items.item("fits", &within));
    let written = e
        .put_inline("fits", b"1", || async { Answer::Ok(put) })
        .await;
    assert_eq!(written.unwrap(), Transacted::Committed(()));
    assert_eq!(
        items.value("fits").await.map(|v| v.len()),
        Some(within.len())
    );
}

/// A transaction whose items hold more than 4 MB together is refused before any request,
/// though each item is within its own limit; so is one of more than 100 actions.
pub async fn a_transaction_over_its_total_size_is_refused_before_any_request<B, X>(
    s: &Suite<B>,
    items: &X,
    _ops: InlineOps,
) where
    B: TransactionalBackend + Clone + 'static,
    X: Items<B::Write, Write = B::Write>,
{
    let value = "x".repeat(390 * KB);
    let writes = (MAX_TRANSACTION_BYTES / value.len()) + 1;
    let tx = (0..writes).fold(Transaction::new(()), |tx, i| {
        tx.write(items.put(&format!("bulk-{i}"), &value))
    });
    s.counter.reset();
    let refused = s
        .engine
        .transact("bulk", b"1", None, || async { Answer::Ok(tx) })
        .await;
    refused_before_any_request(
        s,
        refused,
        |e| matches!(e, LimitError::TooLarge { max, .. } if *max == MAX_TRANSACTION_BYTES),
    );
    let tx = (0..100).fold(Transaction::new(()), |tx, i| {
        tx.write(items.put(&format!("many-{i}"), "v"))
    });
    let refused = s
        .engine
        .transact("many", b"1", None, || async { Answer::Ok(tx) })
        .await;
    refused_before_any_request(s, refused, |e| {
        matches!(e, LimitError::TooManyActions { actions: 101, .. })
    });
    assert_eq!(items.value("bulk-0").await, None);
    assert_eq!(items.value("many-0").await, None);
}

/// A result carried on an item is dropped when the item and the result do not fit in one
/// item: the effect is still written, and the record says that its result was not stored.
pub async fn a_carried_result_that_does_not_fit_its_item_is_dropped<B, X>(
    s: &Suite<B>,
    items: &X,
    _ops: InlineOps,
) where
    B: TransactionalBackend + Clone + 'static,
    X: Items<B::Write, Write = B::Write>,
{
    let e = &s.engine;
    let result = "r".repeat(300 * KB);
    // Over the item: a 300 KB item and a 300 KB result.
    let item = "x".repeat(300 * KB);
    let tx = Transaction::new(result.clone())
        .write(items.put("carrier-item", &item))
        .carry_record();
    let committed = e
        .transact("over-item", b"1", None, || async { Answer::Ok(tx) })
        .await;
    assert!(
        matches!(committed, Ok(Transacted::Committed(_))),
        "{:?}",
        committed.err()
    );
    let record = items
        .record("carrier-item")
        .await
        .expect("the record on the item");
    assert_eq!(
        (record.result.map(|r| r.len()), record.result_omitted),
        (None, true),
        "over the item: the result's length, and whether it was omitted"
    );
}

/// Two items of one partition key and two sort keys are two items: each written once, each
/// refusing its own second write.
pub async fn items_that_differ_only_by_sort_key_are_two_items<B, X>(
    s: &Suite<B>,
    items: &X,
    ops: InlineOps,
) where
    B: TransactionalBackend + Clone + 'static,
    X: Items<B::Write>,
{
    let e = &s.engine;
    for (key, sort) in [("sort-a", "a"), ("sort-b", "b")] {
        let put = InlinePut::new(
            (),
            items.sorted_item("order-1", sort, &format!("value-{sort}")),
        );
        let written = e.put_inline(key, b"1", || async { Answer::Ok(put) }).await;
        assert_eq!(
            written.unwrap(),
            Transacted::Committed(()),
            "sort key {sort}"
        );
    }
    assert_eq!(
        items.sorted_value("order-1", "a").await.as_deref(),
        Some("value-a")
    );
    assert_eq!(
        items.sorted_value("order-1", "b").await.as_deref(),
        Some("value-b")
    );
    s.counter.reset();
    let put = InlinePut::new((), items.sorted_item("order-1", "a", "again"));
    let again = e
        .put_inline("sort-a", b"1", || async { Answer::Ok(put) })
        .await;
    assert_eq!(again.unwrap(), Transacted::Duplicate { stored: None });
    s.requests(&[(ops.put, 1)], "the duplicate: one refused write");
    assert_eq!(
        items.sorted_value("order-1", "a").await.as_deref(),
        Some("value-a")
    );
}

/// An item that carries no record (written by another writer): a new item of its key is
/// refused by its condition, inline and in a transaction, and counted as the handler's failure;
/// a `Put` without a condition rewrites it, record carried or not, as DynamoDB's `Put` does.
pub async fn a_foreign_item_refuses_a_new_item_and_a_put_rewrites_it<B, X>(
    s: &Suite<B>,
    items: &X,
    _ops: InlineOps,
) where
    B: TransactionalBackend + Clone + 'static,
    X: Items<B::Write, Write = B::Write>,
{
    let e = &s.engine;
    items.put_foreign("foreign", "theirs").await;
    for carried in [false, true] {
        let key = format!("foreign-new-{carried}");
        let tx = Transaction::new(()).write(items.put_if_absent("foreign", "ours"));
        let tx = if carried { tx.carry_record() } else { tx };
        let refused = e
            .transact(&key, b"1", None, || async { Answer::Ok(tx) })
            .await;
        assert!(
            matches!(
                &refused,
                Err(TransactError::Rejected { rejection, attempts: Some(1) }) if rejection.is_condition()
            ),
            "carried {carried}: {refused:?}"
        );
    }
    assert_eq!(items.value("foreign").await.as_deref(), Some("theirs"));
    assert_eq!(items.record("foreign").await, None);
    let tx = Transaction::new(())
        .write(items.put("foreign", "rewritten"))
        .carry_record();
    let rewritten = e
        .transact("foreign-put", b"1", None, || async { Answer::Ok(tx) })
        .await;
    assert_eq!(rewritten.unwrap(), Transacted::Committed(()));
    assert_eq!(items.value("foreign").await.as_deref(), Some("rewritten"));
    assert!(
        items.record("foreign").await.is_some(),
        "the record rides on it now"
    );
}

/// A stored result is dropped when the transaction's items and the result do not fit in one
/// transaction (each item within its own limit): the effect is still written, and the record
/// says that its result was not stored. Whether the record rides on the last write or is
/// written beside the writes.
pub async fn a_result_over_the_transaction_size_is_dropped<B, X>(
    s: &Suite<B>,
    items: &X,
    _ops: InlineOps,
) where
    B: TransactionalBackend + Clone + 'static,
    X: Items<B::Write, Write = B::Write>,
{
    let e = &s.engine;
    let result = "r".repeat(300 * KB);
    // Ten items of 390 KB and a small one fit in 4 MB; with a 300 KB result they do not.
    let big = "x".repeat(390 * KB);
    for carried in [true, false] {
        let key = format!("over-tx-{carried}");
        let tx = (0..10).fold(Transaction::new(result.clone()), |tx, i| {
            tx.write(items.put(&format!("{key}-{i}"), &big))
        });
        // The last write carries the record.
        let tx = tx.write(items.put(&format!("{key}-small"), "small"));
        let tx = if carried { tx.carry_record() } else { tx };
        let committed = e
            .transact(&key, b"1", None, || async { Answer::Ok(tx) })
            .await;
        assert!(
            matches!(committed, Ok(Transacted::Committed(_))),
            "carried {carried}: {:?}",
            committed.err()
        );
        assert_eq!(
            items.value(&format!("{key}-9")).await.map(|v| v.len()),
            Some(big.len())
        );
        let record = if carried {
            items.record(&format!("{key}-small")).await
        } else {
            e.get(&key).await.unwrap()
        };
        let record = record.expect("the record");
        assert_eq!(
            (record.result.map(|r| r.len()), record.result_omitted),
            (None, true),
            "carried {carried}: the result's length, and whether it was omitted"
        );
    }
}

/// A partition key over 2048 bytes is refused by the store (not found before the request): the
/// inline write as its own rejection, a transaction whole for its size; both permanent and
/// counted as the message's failed attempt.
pub async fn a_key_over_the_key_limit_is_refused<B, X>(s: &Suite<B>, items: &X, _ops: InlineOps)
where
    B: TransactionalBackend + Clone + 'static,
    X: Items<B::Write, Write = B::Write>,
{
    let e = &s.engine;
    let long = "k".repeat(2_049);
    let put = InlinePut::new((), items.item(&long, "v"));
    let refused = e
        .put_inline("long-inline", b"1", || async { Answer::Ok(put) })
        .await;
    assert!(
        matches!(
            &refused,
            Err(TransactError::Rejected { rejection, attempts: Some(1) })
                if rejection.code == "ValidationException" && !rejection.is_condition()
        ),
        "{refused:?}"
    );
    let tx = Transaction::new(())
        .write(items.put("short", "v"))
        .write(items.put(&long, "v"));
    let refused = e
        .transact("long-tx", b"1", None, || async { Answer::Ok(tx) })
        .await;
    assert!(
        matches!(
            &refused,
            Err(TransactError::TooLarge {
                attempts: Some(1),
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(items.value("short").await, None, "nothing applied");
    let within = "k".repeat(2_048);
    let put = InlinePut::new((), items.item(&within, "v"));
    let written = e
        .put_inline("long-fits", b"1", || async { Answer::Ok(put) })
        .await;
    assert_eq!(written.unwrap(), Transacted::Committed(()));
}
