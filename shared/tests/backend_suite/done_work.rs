//! A key whose work is done is never dead-lettered for a later failure, in every mode and
//! whatever the order of deliveries, and a success costs its write alone. Each sequence is
//! delivered through the batch processor with an attempt budget of 5:
//!
//! - message A fails four times, message B (the same body, another message id) succeeds on its
//!   first delivery, then message C (the same body again) fails once;
//! - message A fails four times, its fifth delivery writes the item and its invocation ends
//!   before the message is deleted, then its sixth delivery fails.
//!
//! The lease mode's checks run on every backend (`backend_suite!`); the inline and carried
//! modes' on the backends that have them (`inline_suite!`), which read the message's item on the
//! failure path ([`Inline::with_item_lookup`](lambda_idempotency::batch::Inline::with_item_lookup)).

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::batch::{
    BatchProcessor, Deduplicated, RecordContext, RecordHandler, RecordHandlerExt, message,
};
use lambda_idempotency::error::RecordError;
use lambda_idempotency::inline::InlinePut;
use lambda_idempotency::key::KeyConfig;
use lambda_idempotency::store::{Backend, StoreError, TransactionalBackend};
use lambda_idempotency::transaction::{TransactError, Transaction};
use lambda_runtime::{Context, LambdaEvent};

use super::{InlineOps, Items, Suite};

/// Every message of these sequences carries this body, keyed on `/order`.
const BODY: &str = r#"{"order":"o-1"}"#;

/// The item of the checks that write one item.
const ITEM: &str = "item-o-1";

/// Message `id`, delivered for the `receives`-th time.
fn delivery(id: &str, receives: u32) -> LambdaEvent<SqsEvent> {
    let mut m = SqsMessage::default();
    m.message_id = Some(id.into());
    m.body = Some(BODY.into());
    m.attributes
        .insert("ApproximateReceiveCount".into(), receives.to_string());
    let mut event = SqsEvent::default();
    event.records = vec![m];
    LambdaEvent::new(event, Context::default())
}

/// What a delivery gave: `Ok(true)` a duplicate, `Ok(false)` processed, `Err(attempts)` a failed
/// attempt (at 5, the budget is used up and the record dead-lettered).
async fn deliver<H, T>(handler: &H, id: &str, receives: u32) -> Result<bool, u32>
where
    H: RecordHandler<Output = Deduplicated<T>>,
{
    let report = BatchProcessor::new()
        .max_attempts(5)
        .process(&delivery(id, receives), handler)
        .await
        .unwrap();
    match &report.records[0].result {
        Ok(done) => Ok(done.is_duplicate()),
        Err(RecordError::Attempt { attempts, .. }) => Err(*attempts),
        Err(other) => panic!("{id}, receive {receives}: {other:?}"),
    }
}

/// Message A fails four times: its attempts count 1 to 4.
async fn a_fails_four_times<H, T>(handler: &H)
where
    H: RecordHandler<Output = Deduplicated<T>>,
{
    for receive in 1..=4 {
        assert_eq!(deliver(handler, "m-a", receive).await, Err(receive));
    }
}

/// The first sequence: A fails four times, B succeeds, C fails once and is a duplicate, for
/// `failure` (the requests of C's failure).
async fn done_by_another_message<B, H, T>(s: &Suite<B>, handler: &H, failure: &[(&str, u64)])
where
    B: Backend + Clone + 'static,
    H: RecordHandler<Output = Deduplicated<T>>,
{
    a_fails_four_times(handler).await;
    assert_eq!(deliver(handler, "m-b", 1).await, Ok(false), "B runs");
    s.counter.reset();
    assert_eq!(
        deliver(handler, "m-c", 1).await,
        Ok(true),
        "C's failure, after B did the work, is a duplicate: not a fifth attempt"
    );
    s.requests(failure, "C's failure, answered by the work done");
}

/// The second sequence: A fails four times, its fifth delivery writes its effect and the
/// invocation ends before the message is deleted (SQS delivers it again), then its sixth
/// delivery fails and is a duplicate; so is C's failure after it.
async fn done_before_the_invocation_ended<H, T>(handler: &H)
where
    H: RecordHandler<Output = Deduplicated<T>>,
{
    a_fails_four_times(handler).await;
    assert_eq!(
        deliver(handler, "m-a", 5).await,
        Ok(false),
        "the fifth runs"
    );
    assert_eq!(
        deliver(handler, "m-a", 6).await,
        Ok(true),
        "the sixth delivery's failure is a duplicate: not a fifth attempt"
    );
    assert_eq!(deliver(handler, "m-c", 1).await, Ok(true));
}

/// Fails unless message `m-b`, or the fifth receive of `m-a`, delivers it: `work` then.
fn succeeds_once<W>(m: &SqsMessage, ctx: &RecordContext, work: W) -> Result<W, std::io::Error> {
    let id = m.message_id.as_deref().unwrap_or_default();
    match (id, ctx.receive_count) {
        ("m-b", _) | ("m-a", 5) => Ok(work),
        _ => Err(std::io::Error::other(format!(
            "{id}, receive {} failed",
            ctx.receive_count
        ))),
    }
}

/// The lease mode: the record is completed in the engine's table, where a later attempt finds
/// it before its handler runs (one refused acquire).
pub async fn a_key_done_by_another_message_is_a_duplicate_of_a_later_failure<B>(s: &Suite<B>)
where
    B: Backend + Clone + 'static,
{
    let handler =
        message(|m: SqsMessage, ctx: RecordContext| async move { succeeds_once(&m, &ctx, ()) })
            .idempotent(s.engine.clone())
            .with_keys(KeyConfig::json_pointer("/order"));
    done_by_another_message(s, &handler, &[(s.ops.acquire, 1)]).await;
    let handler =
        message(|m: SqsMessage, ctx: RecordContext| async move { succeeds_once(&m, &ctx, ()) })
            .idempotent(s.engine.clone().with_key_prefix("again"))
            .with_keys(KeyConfig::json_pointer("/order"));
    done_before_the_invocation_ended(&handler).await;
}

/// The inline mode, its item found by the lookup: C's failure costs the read of the item, and
/// records nothing.
pub async fn inline_a_key_done_by_another_message_is_a_duplicate_of_a_later_failure<B, X>(
    s: &Suite<B>,
    items: &X,
    ops: InlineOps,
) where
    B: TransactionalBackend + Clone + 'static,
    X: Items<B::Write, Write = B::Write> + Clone + Send + 'static,
{
    // Each sequence on its own key (prefix) and item (`item-{prefix}-{order}`).
    let handler = |prefix: &'static str| {
        let (table, lookup) = (items.clone(), items.clone());
        message(move |m: SqsMessage, ctx: RecordContext| {
            let put = InlinePut::new((), table.item(&format!("item-{prefix}-o-1"), "v"));
            async move { succeeds_once(&m, &ctx, put) }
        })
        .inline(s.engine.clone().with_key_prefix(prefix))
        .with_keys(KeyConfig::json_pointer("/order"))
        .with_item_lookup(move |key: &str, _: &SqsMessage| {
            Some(lookup.key(&format!("item-{prefix}-{key}")))
        })
    };
    done_by_another_message(s, &handler("one"), &[(ops.get, 1)]).await;
    done_before_the_invocation_ended(&handler("two")).await;
}

/// A record carried by a `Put` of the transactional mode, its item found by the lookup.
pub async fn a_carried_key_done_by_another_message_is_a_duplicate_of_a_later_failure<B, X>(
    s: &Suite<B>,
    items: &X,
    ops: InlineOps,
) where
    B: TransactionalBackend + Clone + 'static,
    X: Items<B::Write, Write = B::Write> + Clone + Send + 'static,
{
    let handler = |prefix: &'static str| {
        let (table, lookup) = (items.clone(), items.clone());
        let item = format!("carried-{prefix}");
        let at = item.clone();
        message(move |m: SqsMessage, ctx: RecordContext| {
            let tx = Transaction::new(())
                .write(table.put_if_absent(&item, "v"))
                .carry_record();
            async move { succeeds_once(&m, &ctx, tx) }
        })
        .transactional(s.engine.clone().with_key_prefix(prefix))
        .with_keys(KeyConfig::json_pointer("/order"))
        .with_item_lookup(move |_: &str, _: &SqsMessage| Some(lookup.key(&at)))
    };
    // C is a first delivery: it goes straight to its handler, whose failure reads the item.
    done_by_another_message(s, &handler("one"), &[(ops.get, 1)]).await;
    done_before_the_invocation_ended(&handler("two")).await;
}

/// A success after failed attempts costs its one write: nothing ends the count.
pub async fn inline_a_success_after_failures_costs_its_one_write<B, X>(
    s: &Suite<B>,
    items: &X,
    ops: InlineOps,
) where
    B: TransactionalBackend + Clone + 'static,
    X: Items<B::Write, Write = B::Write> + Clone + Send + 'static,
{
    let table = items.clone();
    let handler = message(move |m: SqsMessage, ctx: RecordContext| {
        let put = InlinePut::new((), table.item(ITEM, "v"));
        async move { succeeds_once(&m, &ctx, put) }
    })
    .inline(s.engine.clone())
    .with_keys(KeyConfig::json_pointer("/order"));
    a_fails_four_times(&handler).await;
    s.counter.reset();
    assert_eq!(deliver(&handler, "m-a", 5).await, Ok(false));
    s.requests(
        &[(ops.put, 1)],
        "a success after four failures: its write alone",
    );
}

/// An inline item that is not a new item (a put without its condition) is refused before any
/// request, as the code's error: nothing written, no attempt counted, never dead-lettered.
pub async fn an_inline_item_that_is_not_new_is_refused_before_any_request<B, X>(
    s: &Suite<B>,
    items: &X,
    _ops: InlineOps,
) where
    B: TransactionalBackend + Clone + 'static,
    X: Items<B::Write, Write = B::Write> + Clone + Send + 'static,
{
    let overwrite = items.put(ITEM, "v");
    let refused = s
        .engine
        .put_inline("k", b"1", || async {
            Ok::<_, std::io::Error>(InlinePut::new((), overwrite))
        })
        .await;
    match refused {
        Err(TransactError::Store(StoreError::Misconfigured { problem, .. })) => {
            assert!(problem.contains("new item"), "{problem}");
        }
        other => panic!("{other:?}"),
    }
    s.requests(&[], "a refusal before any request");
    assert_eq!(items.value(ITEM).await, None, "nothing written");
    let table = items.clone();
    let handler = message(move |_: SqsMessage, _: RecordContext| {
        let put = InlinePut::new((), table.put(ITEM, "v"));
        async move { Ok::<_, std::io::Error>(put) }
    })
    .inline(s.engine.clone());
    let report = BatchProcessor::new()
        .max_attempts(1)
        .process(&delivery("m-1", 1), &handler)
        .await
        .unwrap();
    let record = &report.records[0];
    assert!(
        matches!(
            &record.result,
            Err(RecordError::Store(StoreError::Misconfigured { .. }))
        ),
        "{:?}",
        record.result
    );
    assert!(
        !record.dead_lettered && record.is_reported(),
        "left for redelivery"
    );
}
