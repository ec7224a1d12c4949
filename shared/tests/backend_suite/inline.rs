//! The inline mode's checks (`lambda_idempotency::inline`), for every `TransactionalBackend`:
//! `memory_store.rs` runs them on the in-memory backend, `dynamodb_store.rs` on DynamoDB (moto).
//!
//! Each check takes the suite's engine, an [`Items`] table (how the backend's new items are
//! built and read back) and the names its requests are counted under ([`InlineOps`]), so that
//! every check also asserts what each operation costs.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{BatchProcessor, RecordContext, RecordHandlerExt, message};
use lambda_idempotency::cache::{CachedBackend, LocalCache};
use lambda_idempotency::error::RecordError;
use lambda_idempotency::inline::InlinePut;
use lambda_idempotency::payload::PayloadHash;
use lambda_idempotency::state::table::{Before, OWN, SAME};
use lambda_idempotency::state::{IdempotencyRecord, Status};
use lambda_idempotency::store::{Commit, TransactionalBackend};
use lambda_idempotency::time::Clock;
use lambda_idempotency::transaction::{Peeked, TransactError, Transacted};
use lambda_runtime::{Context, LambdaEvent};

use super::Suite;

/// The names an inline backend's requests are counted under.
#[derive(Debug, Clone, Copy)]
pub struct InlineOps {
    /// The inline write (DynamoDB: `PutItem`).
    pub put: &'static str,
    /// A failed attempt's record (DynamoDB: `UpdateItem`).
    pub record_failure: &'static str,
    /// A read of the engine's table (DynamoDB: `GetItem`).
    pub get: &'static str,
    /// A transaction (DynamoDB: `TransactWriteItems`).
    pub commit: &'static str,
    /// The reset of a failed record's attempts (DynamoDB: `UpdateItem`).
    pub reset_attempts: &'static str,
}

/// A table of the handler's items, as a backend builds and reads them.
pub trait Items<I>: Sync {
    /// A write of the backend's transactions.
    type Write;
    /// A new item `id` holding `value`.
    fn item(&self, id: &str, value: &str) -> I;
    /// The write that names item `id`, its key alone: what an item lookup gives.
    fn key(&self, id: &str) -> Self::Write;
    /// A transaction's write of item `id` holding `value`, unconditional (a `Put`).
    fn put(&self, id: &str, value: &str) -> Self::Write;
    /// A transaction's write of item `id` holding `value`, only where the item does not exist.
    fn put_if_absent(&self, id: &str, value: &str) -> Self::Write;
    /// The value item `id` holds, if it exists.
    fn value(&self, id: &str) -> impl Future<Output = Option<String>> + Send;
    /// The idempotency record on item `id`, if it carries one.
    fn record(&self, id: &str) -> impl Future<Output = Option<IdempotencyRecord>> + Send;
    /// Writes item `id` holding `value` without a record (as another writer would).
    fn put_foreign(&self, id: &str, value: &str) -> impl Future<Output = ()> + Send;
    /// A new item of partition key `id` and sort key `sort` holding `value`, in a table keyed on
    /// both.
    fn sorted_item(&self, id: &str, sort: &str, value: &str) -> I;
    /// The value the item of partition key `id` and sort key `sort` holds, if it exists.
    fn sorted_value(&self, id: &str, sort: &str) -> impl Future<Output = Option<String>> + Send;
}

/// Declares one `#[tokio::test]` per inline check, each on a fresh fixture from `$fixture` (a
/// future of a [`Suite`], an [`Items`] table and the [`InlineOps`]).
macro_rules! inline_suite {
    ($fixture:expr) => {
        inline_suite!(@checks $fixture;
            inline_a_fresh_item_is_one_write_and_a_duplicate_one_refused_write,
            inline_failures_are_counted_beside_the_item_and_a_corrected_payload_runs,
            inline_an_item_without_a_record_is_refused_as_the_handlers_failure,
            inline_a_retried_write_finds_its_own_record,
            inline_ten_concurrent_writes_of_one_item_write_it_once,
            inline_the_local_cache_answers_a_duplicate_without_a_request,
            inline_a_batch_costs_one_request_per_fresh_record_and_per_duplicate,
            inline_follows_the_on_item_rows_of_the_table,
            inline_an_item_is_never_rewritten_after_its_record_expires,
            a_carried_put_never_rewrites_an_item_that_carries_a_record,
            a_key_completed_in_lease_mode_is_a_duplicate_where_its_item_exists,
            a_key_completed_inline_is_not_seen_by_the_lease_mode,
            a_key_completed_inline_is_a_duplicate_of_a_transaction_refused_by_its_item,
            a_key_completed_by_the_transactional_mode_is_a_duplicate_inline,
            inline_a_key_done_by_another_message_is_a_duplicate_of_a_later_failure,
            a_carried_key_done_by_another_message_is_a_duplicate_of_a_later_failure,
            inline_a_success_after_failures_costs_its_one_write,
            an_inline_item_that_is_not_new_is_refused_before_any_request,
            an_item_over_the_item_limit_is_refused_before_any_request,
            a_transaction_over_its_total_size_is_refused_before_any_request,
            a_carried_result_that_does_not_fit_its_item_is_dropped,
            a_result_over_the_transaction_size_is_dropped,
            a_key_over_the_key_limit_is_refused,
            items_that_differ_only_by_sort_key_are_two_items,
            a_foreign_item_refuses_a_new_item_and_a_put_rewrites_it,
        );
    };
    (@checks $fixture:expr; $($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                let (suite, items, ops) = $fixture.await;
                backend_suite::$check(&suite, &items, ops).await;
            }
        )*
    };
}

/// The suite's engine with a local cache whose entries live `ttl`, and the cache.
pub(super) fn cached<B: TransactionalBackend + Clone + 'static>(
    s: &Suite<B>,
    ttl: Duration,
) -> (Idempotency<CachedBackend<B>>, LocalCache) {
    let cache = LocalCache::new(std::num::NonZeroUsize::new(100).unwrap(), ttl);
    (s.engine.clone().with_local_cache(cache.clone()), cache)
}

/// A handler's work: `item` holding `value`, with output `out-{value}`.
pub(super) fn work<B: TransactionalBackend, X: Items<B::Write>>(
    items: &X,
    id: &str,
    value: &str,
) -> impl FnOnce() -> std::future::Ready<Result<InlinePut<String, B::Write>, std::io::Error>> {
    let put = InlinePut::new(format!("out-{value}"), items.item(id, value));
    move || std::future::ready(Ok(put))
}

fn failing<I>() -> impl FnOnce() -> std::future::Ready<Result<InlinePut<String, I>, std::io::Error>>
{
    || std::future::ready(Err(std::io::Error::other("boom")))
}

pub async fn inline_a_fresh_item_is_one_write_and_a_duplicate_one_refused_write<B, X>(
    s: &Suite<B>,
    items: &X,
    ops: InlineOps,
) where
    B: TransactionalBackend + Clone + 'static,
    X: Items<B::Write>,
{
    let e = &s.engine;
    let first = e
        .put_inline("k", b"{\"n\":1}", work::<B, X>(items, "item-k", "one"))
        .await
        .unwrap();
    assert_eq!(first, Transacted::Committed("out-one".to_owned()));
    s.requests(&[(ops.put, 1)], "a fresh item: one write, the record on it");
    assert_eq!(items.value("item-k").await.as_deref(), Some("one"));
    let record = items
        .record("item-k")
        .await
        .expect("the record rides on the item");
    assert_eq!(record.status, Status::Completed);
    assert_eq!(record.expires_at, s.clock.now_ms() / 1000 + 3600);
    assert_eq!(record.result.as_deref(), Some("\"out-one\""));
    assert_eq!(e.get("k").await.unwrap(), None, "nothing beside the item");
    s.counter.reset();

    // The same payload written otherwise: a duplicate, its item not written again.
    let again = e
        .put_inline("k", b"{ \"n\": 1 }", work::<B, X>(items, "item-k", "two"))
        .await
        .unwrap();
    assert_eq!(
        again,
        Transacted::Duplicate {
            stored: Some("\"out-one\"".into())
        }
    );
    s.requests(&[(ops.put, 1)], "a duplicate: one refused write, no read");
    assert_eq!(items.value("item-k").await.as_deref(), Some("one"));

    let other = e
        .put_inline("k", b"{\"n\":2}", work::<B, X>(items, "item-k", "three"))
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
    s.requests(&[(ops.put, 1)], "a mismatch");
    assert_eq!(items.value("item-k").await.as_deref(), Some("one"));
}

pub async fn inline_failures_are_counted_beside_the_item_and_a_corrected_payload_runs<B, X>(
    s: &Suite<B>,
    items: &X,
    ops: InlineOps,
) where
    B: TransactionalBackend + Clone + 'static,
    X: Items<B::Write>,
{
    let e = &s.engine;
    let hash = PayloadHash::of_bytes(b"{\"n\":1}");
    for attempt in 1..=2 {
        let failed = e.put_inline("f", b"{\"n\":1}", failing::<B::Write>()).await;
        assert!(
            matches!(failed, Err(TransactError::Failed { attempts: Some(a), .. }) if a == attempt),
            "{failed:?}"
        );
        s.requests(
            &[(ops.record_failure, 1)],
            "a failure: one write, in the engine's table",
        );
    }
    let r = e.get("f").await.unwrap().expect("a failed record");
    assert_eq!(
        (r.status, r.attempts, r.last_error.as_deref()),
        (Status::Failed, 2, Some("boom"))
    );
    assert_eq!(e.peek("f", &hash).await.unwrap(), Peeked::Attempts(2));
    s.counter.reset();
    // The same payload again runs, and its item carries the record.
    let done = e
        .put_inline("f", b"{\"n\":1}", work::<B, X>(items, "item-f", "v"))
        .await
        .unwrap();
    assert_eq!(done, Transacted::Committed("out-v".to_owned()));
    s.requests(&[(ops.put, 1)], "the retry that succeeds");
    assert!(items.record("item-f").await.is_some());

    // A corrected payload after a failed one runs; its attempts start again.
    e.put_inline("c", b"{\"bad\":1}", failing::<B::Write>())
        .await
        .unwrap_err();
    let failed = e
        .put_inline("c", b"{\"good\":1}", failing::<B::Write>())
        .await;
    assert!(
        matches!(
            failed,
            Err(TransactError::Failed {
                attempts: Some(1),
                ..
            })
        ),
        "another payload starts its attempts again: {failed:?}"
    );
    let corrected = e
        .put_inline("c", b"{\"good\":1}", work::<B, X>(items, "item-c", "good"))
        .await
        .unwrap();
    assert_eq!(corrected, Transacted::Committed("out-good".to_owned()));
    assert_eq!(items.value("item-c").await.as_deref(), Some("good"));
    // Reset for a redrive: the failed record's attempts, in the engine's table.
    e.put_inline("d", b"1", failing::<B::Write>())
        .await
        .unwrap_err();
    e.reset_attempts("d").await.unwrap();
    assert_eq!(
        e.peek("d", &PayloadHash::of_bytes(b"1")).await.unwrap(),
        Peeked::Attempts(0)
    );
}

pub async fn inline_an_item_without_a_record_is_refused_as_the_handlers_failure<B, X>(
    s: &Suite<B>,
    items: &X,
    ops: InlineOps,
) where
    B: TransactionalBackend + Clone + 'static,
    X: Items<B::Write>,
{
    items.put_foreign("item-o", "theirs").await;
    s.counter.reset();
    let refused = s
        .engine
        .put_inline("o", b"1", work::<B, X>(items, "item-o", "ours"))
        .await;
    match refused {
        Err(TransactError::Rejected {
            rejection,
            attempts: Some(1),
        }) => assert!(rejection.is_condition(), "{rejection}"),
        other => panic!("{other:?}"),
    }
    s.requests(
        &[(ops.put, 1), (ops.record_failure, 1)],
        "the refused write and its failure",
    );
    assert_eq!(items.value("item-o").await.as_deref(), Some("theirs"));
    assert_eq!(items.record("item-o").await, None);
}

pub async fn inline_a_retried_write_finds_its_own_record<B, X>(
    s: &Suite<B>,
    items: &X,
    _ops: InlineOps,
) where
    B: TransactionalBackend + Clone + 'static,
    X: Items<B::Write>,
{
    let now_ms = s.clock.now_ms();
    let mut record = Before::Completed.record("fn#own", now_ms).unwrap();
    record.attempts = 0;
    record.last_error = None;
    let item = items.item("item-own", "v");
    let backend = s.engine.backend();
    assert_eq!(
        backend
            .commit_carried(&record, std::slice::from_ref(&item), 0, "token", now_ms)
            .await
            .unwrap(),
        Commit::Committed
    );
    // An SDK retry of the same write, whose first answer was lost.
    match backend
        .commit_carried(&record, std::slice::from_ref(&item), 0, "token", now_ms)
        .await
        .unwrap()
    {
        Commit::Exists(found) => {
            assert_eq!(found.owner.as_deref(), Some(OWN), "its own owner token");
            assert_eq!(found.key, "fn#own", "under the idempotency key");
            assert_eq!(found.payload_hash, SAME);
        }
        other => panic!("{other:?}"),
    }
}

pub async fn inline_ten_concurrent_writes_of_one_item_write_it_once<B, X>(
    s: &Suite<B>,
    items: &X,
    _ops: InlineOps,
) where
    B: TransactionalBackend + Clone + 'static,
    X: Items<B::Write>,
{
    let engine = Arc::new(s.engine.clone());
    for round in 0..10 {
        let id = format!("race-{round}");
        let tasks: Vec<_> = (0..10)
            .map(|i| {
                let engine = engine.clone();
                let put = InlinePut::new(i, items.item(&id, &i.to_string()));
                let key = id.clone();
                tokio::spawn(async move {
                    engine
                        .put_inline(&key, b"body", || async { Ok::<_, std::io::Error>(put) })
                        .await
                })
            })
            .collect();
        let mut written = Vec::new();
        for task in tasks {
            match task.await.unwrap() {
                Ok(Transacted::Committed(i)) => written.push(i),
                Ok(Transacted::Duplicate { .. }) => {}
                other => panic!("{id}: {other:?}"),
            }
        }
        assert_eq!(written.len(), 1, "{id}");
        assert_eq!(items.value(&id).await, Some(written[0].to_string()), "{id}");
    }
}

pub async fn inline_the_local_cache_answers_a_duplicate_without_a_request<B, X>(
    s: &Suite<B>,
    items: &X,
    ops: InlineOps,
) where
    B: TransactionalBackend + Clone + 'static,
    X: Items<B::Write>,
{
    let (e, cache) = cached(s, Duration::from_secs(60));
    e.put_inline("cached", b"1", work::<B, X>(items, "item-cached", "v"))
        .await
        .unwrap();
    s.requests(&[(ops.put, 1)], "a fresh item");
    let again = e
        .put_inline("cached", b"1", work::<B, X>(items, "item-cached", "w"))
        .await
        .unwrap();
    assert_eq!(
        again,
        Transacted::Duplicate {
            stored: Some("\"out-v\"".into())
        }
    );
    s.requests(&[], "a duplicate the cache knows: no request");
    assert!(matches!(
        e.put_inline("cached", b"2", work::<B, X>(items, "item-cached", "w"))
            .await,
        Err(TransactError::PayloadMismatch { .. })
    ));
    s.requests(&[], "a mismatch the cache knows: no request");
    assert_eq!(cache.hits(), 2);
}

pub async fn inline_a_batch_costs_one_request_per_fresh_record_and_per_duplicate<B, X>(
    s: &Suite<B>,
    items: &X,
    ops: InlineOps,
) where
    B: TransactionalBackend + Clone + 'static,
    X: Items<B::Write> + Clone + Send + 'static,
{
    let table = items.clone();
    let handler = message(move |m: SqsMessage, ctx: RecordContext| {
        let body = m.body.unwrap_or_default();
        let put = InlinePut::new(body.len(), table.item(&format!("batch-{body}"), &body));
        async move {
            if body.contains("fail") {
                return Err(std::io::Error::other(format!(
                    "refused at attempt {}",
                    ctx.attempt
                )));
            }
            Ok(put)
        }
    })
    .inline(s.engine.clone());
    let delivered = |bodies: &[&str], receive_count: u32| {
        let mut event = SqsEvent::default();
        event.records = bodies
            .iter()
            .map(|body| {
                let mut m = SqsMessage::default();
                m.message_id = Some(format!("msg-{body}"));
                m.body = Some((*body).to_owned());
                m.attributes
                    .insert("ApproximateReceiveCount".into(), receive_count.to_string());
                m
            })
            .collect();
        LambdaEvent::new(event, Context::default())
    };
    let records = |bodies: &[&str]| delivered(bodies, 1);
    let event = records(&["a", "b", "c", "d", "e"]);
    let processor = BatchProcessor::new();
    s.counter.reset();
    let report = processor.process(&event, &handler).await.unwrap();
    assert!(report.response().batch_item_failures.is_empty());
    s.requests(&[(ops.put, 5)], "5 fresh records: one write each");
    assert_eq!(items.value("batch-c").await.as_deref(), Some("c"));
    s.counter.reset();
    let report = processor.process(&event, &handler).await.unwrap();
    assert!(
        report
            .records
            .iter()
            .all(|r| matches!(&r.result, Ok(d) if d.is_duplicate()))
    );
    s.requests(&[(ops.put, 5)], "5 duplicates: one refused write each");
    s.counter.reset();
    let report = processor
        .process(&delivered(&["a", "b", "c", "d", "e"], 2), &handler)
        .await
        .unwrap();
    assert!(
        report
            .records
            .iter()
            .all(|r| matches!(&r.result, Ok(d) if d.is_duplicate()))
    );
    s.requests(
        &[(ops.put, 5)],
        "5 redelivered duplicates: one refused write each, no read first",
    );
    s.counter.reset();
    let report = processor
        .process(&records(&["fail"]), &handler)
        .await
        .unwrap();
    assert_eq!(report.response().batch_item_failures.len(), 1);
    s.requests(&[(ops.record_failure, 1)], "a failed record: its failure");
    s.counter.reset();
    let report = processor
        .process(&delivered(&["fail"], 5), &handler)
        .await
        .unwrap();
    match &report.records[0].result {
        Err(RecordError::Attempt { attempts, error }) => {
            assert_eq!(
                *attempts, 2,
                "the store counts the failed attempts without a read before the handler"
            );
            let error = error.to_string();
            assert!(
                error.contains("at attempt 5"),
                "told the receive count: {error}"
            );
        }
        other => panic!("expected the second failed attempt, got {other:?}"),
    }
    s.requests(
        &[(ops.record_failure, 1)],
        "a failed redelivery: its failure alone",
    );

    // With the attempts read, a redelivery reads the engine's table first.
    let reading = message(|_: SqsMessage, ctx: RecordContext| async move {
        Err::<InlinePut<u32, B::Write>, _>(std::io::Error::other(format!(
            "attempt {}",
            ctx.attempt
        )))
    })
    .inline(s.engine.clone())
    .with_attempts_read();
    s.counter.reset();
    let report = processor
        .process(&delivered(&["fail"], 7), &reading)
        .await
        .unwrap();
    match &report.records[0].result {
        Err(RecordError::Attempt { attempts, error }) => {
            assert_eq!(*attempts, 3);
            let error = error.to_string();
            assert!(
                error.contains("attempt 3"),
                "told the store's attempt, not the receive count (7): {error}"
            );
        }
        other => panic!("expected the third failed attempt, got {other:?}"),
    }
    s.requests(
        &[(ops.get, 1), (ops.record_failure, 1)],
        "with the attempts read: the read, then the failure",
    );
}
