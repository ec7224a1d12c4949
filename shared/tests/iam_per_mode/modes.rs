//! The handlers of the modes, and the batches that take each through its paths: through a batch
//! processor with each option ([`run_mode`]), or through a consumer (`crate::consumer`).

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Delete, Put, TransactWriteItem, Update,
};
use lambda_idempotency::Idempotency;
use lambda_idempotency::backoff::VisibilityBackoff;
use lambda_idempotency::batch::{
    BatchProcessor, BatchReport, Deduplicated, RecordContext, RecordError, RecordHandler,
    RecordHandlerExt, json,
};
use lambda_idempotency::cache::LocalCache;
use lambda_idempotency::dead_letter::DeadLetter;
use lambda_idempotency::inline::InlinePut;
use lambda_idempotency::key::KeyConfig;
use lambda_idempotency::redrive_policy::{self, QueueRef, RedriveCheck};
use lambda_idempotency::store::{Backend, NewItem, TransactionalBackend};
use lambda_idempotency::time::Clock;
use lambda_idempotency::transaction::Transaction;
use lambda_runtime::{Context, LambdaEvent};

use crate::run::Run;
use crate::{CARRIED, CARRIED_LOOKUP, INLINE, INLINE_LOOKUP, INLINE_READ, LEASE, TRANSACTIONAL};

/// A message: its key, how many attempts fail before one succeeds, and padding.
#[derive(serde::Deserialize)]
struct Order {
    id: String,
    #[serde(default)]
    fail: u32,
}

fn declined(order: &Order, ctx: &RecordContext) -> Result<(), std::io::Error> {
    if ctx.attempt <= order.fail {
        return Err(std::io::Error::other(format!(
            "declined (attempt {})",
            ctx.attempt
        )));
    }
    Ok(())
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

/// The handler's writes in transactional mode: one of each kind, on items of its key; the
/// `Update` carries the record when `carried`.
fn writes(table: &str, id: &str, carried: bool) -> Transaction<String, TransactWriteItem> {
    let put = Put::builder()
        .table_name(table)
        .item("pk", s(&format!("entry-{id}")))
        .build()
        .unwrap();
    let delete = Delete::builder()
        .table_name(table)
        .key("pk", s(&format!("scratch-{id}")))
        .build()
        .unwrap();
    let check = ConditionCheck::builder()
        .table_name(table)
        .key("pk", s(&format!("account-{id}")))
        .condition_expression("attribute_not_exists(frozen)")
        .build()
        .unwrap();
    let update = Update::builder()
        .table_name(table)
        .key("pk", s(&format!("order-{id}")))
        .update_expression("SET shipped = :yes")
        .expression_attribute_values(":yes", AttributeValue::Bool(true))
        .build()
        .unwrap();
    let transaction = Transaction::new(id.to_owned())
        .put(put)
        .delete(delete)
        .condition_check(check);
    if carried {
        transaction.update_carrying_record(update)
    } else {
        transaction.update(update)
    }
}

/// The lease mode's handler: the order's id.
pub fn lease_handler() -> impl RecordHandler<Output = String> + 'static {
    json(|order: Order, ctx: RecordContext| async move {
        declined(&order, &ctx)?;
        Ok::<_, std::io::Error>(order.id)
    })
}

/// The transactional mode's handler: its [`writes`] on the table `effects`.
pub fn transactional_handler(
    effects: String,
    carried: bool,
) -> impl RecordHandler<Output = Transaction<String, TransactWriteItem>> + 'static {
    json(move |order: Order, ctx: RecordContext| {
        let effects = effects.clone();
        async move {
            declined(&order, &ctx)?;
            Ok::<_, std::io::Error>(writes(&effects, &order.id, carried))
        }
    })
}

/// The inline mode's handler: a receipt, new on the table `effects`, with the record on it.
pub fn inline_handler(
    effects: String,
) -> impl RecordHandler<Output = InlinePut<String, NewItem>> + 'static {
    json(move |order: Order, ctx: RecordContext| {
        let effects = effects.clone();
        async move {
            declined(&order, &ctx)?;
            let receipt = NewItem::new(&effects, "pk", s(&format!("receipt-{}", order.id)))
                .attribute("amount", AttributeValue::N("500".into()));
            Ok::<_, std::io::Error>(InlinePut::new(order.id, receipt))
        }
    })
}

/// The item lookup of the inline and the carried-record modes: the key attributes of the item
/// that carries the key's record (the receipt, or the order its `Update` carries the record on).
pub fn item_lookup(
    effects: String,
    mode: Mode,
) -> impl Fn(&str, &SqsMessage) -> Option<NewItem> + Send + Sync + 'static {
    let kind = match mode {
        Mode::InlineLookup => "receipt",
        Mode::CarriedLookup => "order",
        other => panic!("{other:?} has no item lookup"),
    };
    move |key: &str, _: &SqsMessage| Some(NewItem::new(&effects, "pk", s(&format!("{kind}-{key}"))))
}

/// A mode of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Lease,
    Transactional,
    Carried,
    Inline,
    InlineRead,
    /// The inline mode with its item lookup.
    InlineLookup,
    /// The carried-record mode with its item lookup.
    CarriedLookup,
}

impl Mode {
    pub fn labels(self) -> &'static [&'static str] {
        match self {
            Mode::Lease => LEASE,
            Mode::Transactional => TRANSACTIONAL,
            Mode::Carried => CARRIED,
            Mode::Inline => INLINE,
            Mode::InlineRead => INLINE_READ,
            Mode::InlineLookup => INLINE_LOOKUP,
            Mode::CarriedLookup => CARRIED_LOOKUP,
        }
    }

    /// The mode carries the record on one of the handler's items, and reads that item on a
    /// failure.
    fn looks_up(self) -> bool {
        matches!(self, Mode::InlineLookup | Mode::CarriedLookup)
    }
}

/// What a run adds to its mode.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    pub local_cache: bool,
    pub dead_letters: bool,
    pub backoff: bool,
    pub cold_start: bool,
}

impl Options {
    pub const NONE: Self = Self {
        local_cache: false,
        dead_letters: false,
        backoff: false,
        cold_start: false,
    };
    pub const ALL: Self = Self {
        local_cache: false,
        dead_letters: true,
        backoff: true,
        cold_start: true,
    };
}

/// The attempt budget of [`run_mode`]'s runs with a dead-letter queue.
const BUDGET: u32 = 2;

/// Runs `mode` with `options` under the grants of `labels`: the cold-start checks, then the
/// [`batches`].
pub async fn run_mode(mode: Mode, options: Options, labels: &'static [&'static str]) {
    let run = Run::new(labels).await;
    if options.cold_start {
        let check = run.backend().check_table().await.expect("the table fits");
        assert!(check.warnings.is_empty(), "{:?}", check.warnings);
        let queues = redrive_policy::warn_if_unsafe(
            &run.sqs,
            &QueueRef::Arn(run.source.arn.clone()),
            10,
            BUDGET,
            Duration::from_secs(3600),
            Some(VisibilityBackoff::new(run.sqs.clone()).schedule()),
        )
        .await;
        assert_eq!(
            queues.redrive,
            RedriveCheck::Ok {
                max_receive_count: 64,
                required: 11
            }
        );
        assert!(queues.source.is_some(), "{queues:?}");
        assert!(queues.dead_letter.is_some(), "{queues:?}");
    }
    let mut processor = BatchProcessor::new().with_clock(run.clock.clone() as Arc<dyn Clock>);
    if options.dead_letters {
        processor = processor
            .max_attempts(BUDGET)
            .with_dead_letter(DeadLetter::new(run.sqs.clone(), &run.dead_letter.url));
    }
    if options.backoff {
        processor = processor.with_backoff(VisibilityBackoff::new(run.sqs.clone()));
    }
    let budget = options.dead_letters.then_some(BUDGET);
    if options.local_cache {
        let cache = LocalCache::new(NonZeroUsize::new(100).unwrap(), Duration::from_secs(60));
        let engine = run.engine(run.backend()).with_local_cache(cache);
        deliveries(&run, &processor, mode, engine, budget).await;
    } else {
        deliveries(&run, &processor, mode, run.engine(run.backend()), budget).await;
    }
    run.assert_exactly_the_tables_actions();
}

/// The [`batches`] of [`run_mode`], through `mode`'s wrapper over `engine`.
async fn deliveries<B>(
    run: &Run,
    processor: &BatchProcessor,
    mode: Mode,
    engine: Idempotency<B>,
    budget: Option<u32>,
) where
    B: Backend + TransactionalBackend<Write = TransactWriteItem>,
{
    let keys = KeyConfig::json_pointer("/id");
    let effects = run.effects.clone();
    match mode {
        Mode::Lease => {
            let handler = lease_handler().idempotent(engine).with_keys(keys);
            batches(run, &(processor, &handler), mode, budget).await;
        }
        Mode::Transactional | Mode::Carried => {
            let handler = transactional_handler(effects, mode == Mode::Carried)
                .transactional(engine)
                .with_keys(keys);
            batches(run, &(processor, &handler), mode, budget).await;
        }
        Mode::Inline => {
            let handler = inline_handler(effects).inline(engine).with_keys(keys);
            batches(run, &(processor, &handler), mode, budget).await;
        }
        Mode::InlineRead => {
            let handler = inline_handler(effects)
                .inline(engine)
                .with_keys(keys)
                .with_attempts_read();
            batches(run, &(processor, &handler), mode, budget).await;
        }
        Mode::InlineLookup => {
            let handler = inline_handler(effects.clone())
                .inline(engine)
                .with_keys(keys)
                .with_item_lookup(item_lookup(effects, mode));
            batches(run, &(processor, &handler), mode, budget).await;
        }
        Mode::CarriedLookup => {
            let handler = transactional_handler(effects.clone(), true)
                .transactional(engine)
                .with_keys(keys)
                .with_item_lookup(item_lookup(effects, mode));
            batches(run, &(processor, &handler), mode, budget).await;
        }
    }
}

/// What takes a batch and reports each record: a batch processor with a handler, or a consumer.
pub trait Deliver {
    async fn deliver(&self, records: Vec<SqsMessage>) -> BatchReport<Deduplicated<String>>;
}

impl<H> Deliver for (&BatchProcessor, &H)
where
    H: RecordHandler<Output = Deduplicated<String>>,
{
    async fn deliver(&self, records: Vec<SqsMessage>) -> BatchReport<Deduplicated<String>> {
        let (processor, handler) = *self;
        processor
            .process(&event(records), handler)
            .await
            .expect("the batch is processed")
    }
}

/// The event of a batch of `records`.
pub fn event(records: Vec<SqsMessage>) -> LambdaEvent<SqsEvent> {
    let mut event = SqsEvent::default();
    event.records = records;
    LambdaEvent::new(event, Context::default())
}

/// What each record of a batch came to.
fn outcomes(report: &BatchReport<Deduplicated<String>>) -> BTreeMap<String, &'static str> {
    report
        .records
        .iter()
        .map(|r| {
            let outcome = match (&r.result, r.dead_lettered) {
                (Ok(Deduplicated::Processed(_)), _) => "processed",
                (Ok(Deduplicated::Duplicate { .. }), _) => "duplicate",
                (Err(_), true) => "dead-lettered",
                (Err(e), false) => {
                    assert!(
                        matches!(e, RecordError::Attempt { .. }),
                        "{}: only the handler's own failures: {e:?}",
                        r.message_id
                    );
                    "failed"
                }
            };
            (r.message_id.clone(), outcome)
        })
        .collect()
}

/// Three batches (and, with a budget over two, the failed attempts between them) through `target`
/// that take a mode through a success, a duplicate (another message of the key, and a
/// redelivery), a failure then a success, a record that fails until its attempt `budget` is used
/// up (to the dead-letter queue, with the reset of the key's attempts, when there is one; without,
/// it fails twice), backoff on the failures when there is backoff, and an expired record replaced.
/// With an item lookup, a fourth batch between the second and the third: a message of a key whose
/// item another message wrote fails, and its read of that item answers it as a duplicate.
pub async fn batches(run: &Run, target: &impl Deliver, mode: Mode, budget: Option<u32>) {
    let a = r#"{"id": "a"}"#;
    let b = r#"{"id": "b", "fail": 1}"#;
    // Over 1 KiB with its dead-letter attributes: its copy needs the queue's MaximumMessageSize.
    let d = format!(
        r#"{{"id": "d", "fail": 99, "pad": "{}"}}"#,
        "x".repeat(1500)
    );

    // First deliveries: a success, and two failures (backed off when there is backoff).
    let first = vec![
        run.record("m-a", a, 1).await,
        run.record("m-b", b, 1).await,
        run.record("m-d", &d, 1).await,
    ];
    let report = target.deliver(first).await;
    run.assert_nothing_refused();
    assert_eq!(
        outcomes(&report),
        BTreeMap::from([
            ("m-a".into(), "processed"),
            ("m-b".into(), "failed"),
            ("m-d".into(), "failed"),
        ])
    );

    // The attempts of `d` before its last one.
    let last = budget.unwrap_or(2);
    for receives in 2..last {
        let report = target
            .deliver(vec![run.record("m-d", &d, receives).await])
            .await;
        run.assert_nothing_refused();
        assert_eq!(
            outcomes(&report),
            BTreeMap::from([("m-d".into(), "failed")])
        );
    }

    // Duplicates (another message of the key, and a redelivery), a failed record that now
    // succeeds, and one whose budget is used up.
    let second = vec![
        run.record("m-a2", a, 1).await,
        run.record("m-a", a, 2).await,
        run.record("m-b", b, 2).await,
        run.record("m-d", &d, last).await,
    ];
    let report = target.deliver(second).await;
    run.assert_nothing_refused();
    let used_up = if budget.is_some() {
        "dead-lettered"
    } else {
        "failed"
    };
    assert_eq!(
        outcomes(&report),
        BTreeMap::from([
            ("m-a2".into(), "duplicate"),
            ("m-a".into(), "duplicate"),
            ("m-b".into(), "processed"),
            ("m-d".into(), used_up),
        ])
    );
    let attempts = run
        .stored("d")
        .await
        .and_then(|item| item.get("attempts").and_then(|v| v.as_n().ok()).cloned());
    if budget.is_some() {
        assert_eq!(run.dead_letters().await, [d]);
        assert_eq!(
            attempts.as_deref(),
            Some("0"),
            "the attempts reset after dead-lettering"
        );
    } else {
        assert_eq!(attempts.as_deref(), Some("2"));
    }

    // With an item lookup: a new message of `b`, whose first attempt fails after `m-b` wrote its
    // item. The failure reads the item (a `GetItem` on the effect table), which carries the
    // key's record: a duplicate, not a failure towards the budget.
    if mode.looks_up() {
        let report = target.deliver(vec![run.record("m-b2", b, 1).await]).await;
        run.assert_nothing_refused();
        assert_eq!(
            outcomes(&report),
            BTreeMap::from([("m-b2".into(), "duplicate")])
        );
    }

    // Past the records' expiry: the lease and transactional modes run the key again, its
    // expired record replaced; an item that carries its record (inline) answers for its key
    // whatever the record's expiry, and is never rewritten.
    run.clock.advance(Duration::from_secs(2 * 3600));
    let third = vec![run.record("m-a3", a, 1).await];
    let report = target.deliver(third).await;
    run.assert_nothing_refused();
    let after_expiry = match mode {
        Mode::Inline | Mode::InlineRead | Mode::InlineLookup => "duplicate",
        Mode::Lease | Mode::Transactional | Mode::Carried | Mode::CarriedLookup => "processed",
    };
    assert_eq!(
        outcomes(&report),
        BTreeMap::from([("m-a3".into(), after_expiry)])
    );
}
