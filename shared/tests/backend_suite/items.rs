//! What lives on the handler's items, for every `TransactionalBackend`: an item that carries a record
//! is never rewritten (the inline mode's item, a record carried by a `Put`), whatever the
//! record's expiry; and a key that one mode completed, as another mode on the same key sees it
//! (a rollback, or a mixed deployment). Declared with the inline checks (`inline_suite!`).

use std::time::Duration;

use lambda_idempotency::Acquired;
use lambda_idempotency::payload::PayloadHash;
use lambda_idempotency::state::table::{After, Before, ON_ITEM};
use lambda_idempotency::state::{IdempotencyRecord, Status, classify_on_item};
use lambda_idempotency::store::{Commit, TransactionalBackend};
use lambda_idempotency::time::Clock;
use lambda_idempotency::transaction::{TransactError, Transacted, Transaction};

use super::{InlineOps, Items, Suite, work};

/// A transaction of `write` alone, with output `out-{value}`, its record carried by the write
/// when `carried`.
fn transaction<W: Send>(
    write: W,
    value: &str,
    carried: bool,
) -> impl FnOnce() -> std::future::Ready<Result<Transaction<String, W>, std::io::Error>> + use<W> {
    let tx = Transaction::new(format!("out-{value}")).write(write);
    let tx = if carried { tx.carry_record() } else { tx };
    move || std::future::ready(Ok(tx))
}

/// The item is the user's effect and data: once its record has expired, the same payload is
/// still a duplicate and another payload a mismatch, each one refused write, and neither
/// rewrites the item. The local cache, whose entries never outlive the record, sends them to
/// the store.
pub async fn inline_an_item_is_never_rewritten_after_its_record_expires<B, X>(
    s: &Suite<B>,
    items: &X,
    ops: InlineOps,
) where
    B: TransactionalBackend + Clone + 'static,
    X: Items<B::Write>,
{
    let (e, cache) = super::cached(s, Duration::from_secs(7_200));
    e.put_inline("x", b"1", work::<B, X>(items, "item-x", "old"))
        .await
        .unwrap();
    let written = items.record("item-x").await.unwrap();
    s.clock.advance(Duration::from_secs(3_601));
    s.counter.reset();
    let again = e
        .put_inline("x", b"1", work::<B, X>(items, "item-x", "new"))
        .await
        .unwrap();
    assert_eq!(
        again,
        Transacted::Duplicate {
            stored: Some("\"out-old\"".into())
        }
    );
    s.requests(
        &[(ops.put, 1)],
        "the expired record's duplicate: one refused write",
    );
    let other = e
        .put_inline("x", b"2", work::<B, X>(items, "item-x", "other"))
        .await;
    assert!(
        matches!(
            other,
            Err(TransactError::PayloadMismatch {
                stored: Status::Completed,
                ..
            })
        ),
        "{other:?}"
    );
    s.requests(&[(ops.put, 1)], "another payload: one refused write");
    assert_eq!(items.value("item-x").await.as_deref(), Some("old"));
    assert_eq!(items.record("item-x").await, Some(written), "as written");
    assert_eq!(
        cache.hits(),
        0,
        "an expired record is never answered from the cache"
    );
    // `forget` deletes what the engine's table holds: the item, and its record, stay.
    e.forget("x").await.unwrap();
    let after_forget = e
        .put_inline("x", b"1", work::<B, X>(items, "item-x", "again"))
        .await
        .unwrap();
    assert!(
        matches!(after_forget, Transacted::Duplicate { .. }),
        "{after_forget:?}"
    );
    assert_eq!(items.value("item-x").await.as_deref(), Some("old"));
}

/// The rows of [`ON_ITEM`]: the inline write is the transition `state::commit_on_item`, on the
/// item, and its refusals are classified by `state::classify_on_item`.
pub async fn inline_follows_the_on_item_rows_of_the_table<B, X>(
    s: &Suite<B>,
    items: &X,
    _ops: InlineOps,
) where
    B: TransactionalBackend + Clone + 'static,
    X: Items<B::Write>,
{
    let backend = s.engine.backend();
    let start = s.clock.now_ms();
    for (i, row) in ON_ITEM.iter().enumerate() {
        let key = format!("fn#inline-transition-{i}");
        let id = format!("inline-transition-{i}");
        if row.before != Before::Absent {
            // Written live, and the event sent after it expired (for the expired state).
            let mut live = Before::Completed.record(&key, start).unwrap();
            live.attempts = 0;
            assert_eq!(
                backend
                    .commit_carried(&live, &[items.item(&id, "before")], 0, "token", start)
                    .await
                    .unwrap(),
                Commit::Committed
            );
        }
        let now_ms = match row.before {
            Before::CompletedExpired => start + 2 * 3_600_000,
            _ => start,
        };
        let stored = items.record(&id).await.map(|r| IdempotencyRecord {
            key: key.clone(),
            ..r
        });
        let (_, model) = row.event.apply_on_item(stored.as_ref(), &key, now_ms);
        let new = row.event.new_record(&key, now_ms);
        let after = match backend
            .commit_carried(&new, &[items.item(&id, "event")], 0, "token", now_ms)
            .await
            .unwrap()
        {
            Commit::Committed => After::Completed,
            Commit::Exists(existing) => After::refused(classify_on_item(
                existing,
                &PayloadHash::stored(row.event.payload_hash()),
                now_ms,
            )),
            other => panic!("{row:?}: {other:?}"),
        };
        assert_eq!(after, row.after, "{row:?}: the backend's answer");
        let decided = |r: Option<&IdempotencyRecord>| {
            r.map(|r| {
                (
                    r.status,
                    r.owner.clone(),
                    r.payload_hash.clone(),
                    r.expires_at,
                )
            })
        };
        assert_eq!(
            decided(items.record(&id).await.as_ref()),
            decided(model.as_ref()),
            "{row:?}: the record on the item"
        );
    }
}

/// A record carried by a `Put` follows the inline mode's rule: the item it wrote is never
/// rewritten, whatever the record's expiry.
pub async fn a_carried_put_never_rewrites_an_item_that_carries_a_record<B, X>(
    s: &Suite<B>,
    items: &X,
    ops: InlineOps,
) where
    B: TransactionalBackend + Clone + 'static,
    X: Items<B::Write, Write = B::Write>,
{
    let e = &s.engine;
    let put = |value: &str, carried| transaction(items.put("item-p", value), value, carried);
    let first = e.transact("p", b"1", None, put("old", true)).await.unwrap();
    assert_eq!(first, Transacted::Committed("out-old".to_owned()));
    s.clock.advance(Duration::from_secs(3_601));
    s.counter.reset();
    let again = e.transact("p", b"1", None, put("new", true)).await.unwrap();
    assert_eq!(
        again,
        Transacted::Duplicate {
            stored: Some("\"out-old\"".into())
        }
    );
    s.requests(&[(ops.put, 1)], "one refused write (a commit of one write)");
    let other = e.transact("p", b"2", None, put("other", true)).await;
    assert!(
        matches!(other, Err(TransactError::PayloadMismatch { .. })),
        "{other:?}"
    );
    assert_eq!(items.value("item-p").await.as_deref(), Some("old"));
    assert_eq!(e.get("p").await.unwrap(), None, "nothing recorded beside");
}

/// Lease mode, then inline (a mixed deployment, or a move): the lease mode's record is in the
/// engine's table, and its handler wrote the item without a record. The inline write is refused
/// by the item, and the failure it would record finds the completed record: a duplicate, with
/// its stored result. (Where the lease mode's handler left no such item, the inline write has
/// nothing to refuse it: see `lambda_idempotency::inline`.)
pub async fn a_key_completed_in_lease_mode_is_a_duplicate_where_its_item_exists<B, X>(
    s: &Suite<B>,
    items: &X,
    ops: InlineOps,
) where
    B: TransactionalBackend + Clone + 'static,
    X: Items<B::Write>,
{
    let lease = s.started("leased", b"1", None).await;
    s.engine.complete(&lease, Some("\"leased\"")).await.unwrap();
    refused_by_the_item_and_answered_by_the_table(s, items, ops, "leased", "\"leased\"").await;
}

/// Writes `key`'s item without a record (as another mode's handler did), then asks the inline
/// mode for `key` with payload `1`: the item refuses the write, and the failure it would record
/// finds the completed record in the engine's table: a duplicate with `stored`, for two
/// requests, and the item as it was.
async fn refused_by_the_item_and_answered_by_the_table<B, X>(
    s: &Suite<B>,
    items: &X,
    ops: InlineOps,
    key: &str,
    stored: &str,
) where
    B: TransactionalBackend + Clone + 'static,
    X: Items<B::Write>,
{
    let id = format!("item-{key}");
    items.put_foreign(&id, "before").await;
    s.counter.reset();
    let again = s
        .engine
        .put_inline(key, b"1", work::<B, X>(items, &id, "inline"))
        .await
        .unwrap();
    assert_eq!(
        again,
        Transacted::Duplicate {
            stored: Some(stored.into())
        }
    );
    s.requests(
        &[(ops.put, 1), (ops.record_failure, 1)],
        "the refused write, then the failure that finds the record",
    );
    assert_eq!(items.value(&id).await.as_deref(), Some("before"));
}

/// Inline, then lease mode (a rollback): the lease mode reads only the engine's table, and the
/// record is on the item, so the key is taken again. The limit `lambda_idempotency::inline`
/// states: the lease handler's own write must refuse the item.
pub async fn a_key_completed_inline_is_not_seen_by_the_lease_mode<B, X>(
    s: &Suite<B>,
    items: &X,
    _ops: InlineOps,
) where
    B: TransactionalBackend + Clone + 'static,
    X: Items<B::Write>,
{
    s.engine
        .put_inline(
            "rolled-back",
            b"1",
            work::<B, X>(items, "item-rb", "inline"),
        )
        .await
        .unwrap();
    assert!(matches!(
        s.engine.acquire("rolled-back", b"1", None).await,
        Ok(Acquired::Started(_))
    ));
}

/// Inline, then the transactional mode (a rollback, or a mixed deployment): the transaction's
/// write of the item is refused by its own condition, and the item it returns carries a live
/// record of the same payload: a duplicate, in the one cancelled transaction. Another payload
/// is the write's own rejection, as for any item.
pub async fn a_key_completed_inline_is_a_duplicate_of_a_transaction_refused_by_its_item<B, X>(
    s: &Suite<B>,
    items: &X,
    ops: InlineOps,
) where
    B: TransactionalBackend + Clone + 'static,
    X: Items<B::Write, Write = B::Write>,
{
    let e = &s.engine;
    e.put_inline("mixed", b"1", work::<B, X>(items, "item-m", "inline"))
        .await
        .unwrap();
    s.counter.reset();
    let write = |value: &str| transaction(items.put_if_absent("item-m", value), value, false);
    let again = e.transact("mixed", b"1", None, write("tx")).await.unwrap();
    assert_eq!(
        again,
        Transacted::Duplicate {
            stored: Some("\"out-inline\"".into())
        }
    );
    s.requests(&[(ops.commit, 1)], "one cancelled transaction");
    assert_eq!(e.get("mixed").await.unwrap(), None, "nothing recorded");
    let other = e.transact("mixed", b"2", None, write("other")).await;
    assert!(
        matches!(
            &other,
            Err(TransactError::Rejected { rejection, attempts: Some(1) }) if rejection.is_condition()
        ),
        "{other:?}"
    );
    assert_eq!(items.value("item-m").await.as_deref(), Some("inline"));
}

/// The transactional mode, then inline (a handler moved): its items written before carry no record, and
/// their records are in the engine's table. A duplicate of such a record is refused by the item,
/// and the failure it would record finds the completed record instead: a duplicate, with its
/// stored result.
pub async fn a_key_completed_by_the_transactional_mode_is_a_duplicate_inline<B, X>(
    s: &Suite<B>,
    items: &X,
    ops: InlineOps,
) where
    B: TransactionalBackend + Clone + 'static,
    X: Items<B::Write>,
{
    let now_ms = s.clock.now_ms();
    let mut record = Before::Completed.record("fn#moved", now_ms).unwrap();
    record.payload_hash = PayloadHash::of_bytes(b"1").as_str().to_owned();
    let backend = s.engine.backend();
    let token = "0123456789abcdef0123456789abcdef";
    assert_eq!(
        backend.commit(&record, &[], token, now_ms).await.unwrap(),
        Commit::Committed
    );
    refused_by_the_item_and_answered_by_the_table(s, items, ops, "moved", "42").await;
}
