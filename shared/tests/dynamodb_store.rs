//! The DynamoDB backend against a real endpoint (moto, started by `make test`): the shared
//! backend suite (`backend_suite/`, which Redis runs too), and what is DynamoDB's own: a record
//! written by another tool, the item size limit, configurable attribute names.

#[macro_use]
mod backend_suite;
mod common;

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem};
use backend_suite::{InlineOps, Items, Operations, Suite};
use lambda_idempotency::count::RequestCounter;
use lambda_idempotency::inline::InlinePut;
use lambda_idempotency::state::IdempotencyRecord;
use lambda_idempotency::store::{
    Attributes, Backend, DynamoDbBackend, InMemoryBackend, NewItem, TransactionalBackend, Updated,
};
use lambda_idempotency::time::{Clock, ManualClock};
use lambda_idempotency::transaction::Transaction;
use lambda_idempotency::{AcquireError, Acquired, Idempotency};

/// What each engine operation costs on DynamoDB: one `UpdateItem` per acquire, completion,
/// failure or reset; a second conditional `UpdateItem` to replace an expired record.
const DYNAMODB: Operations = Operations {
    acquire: "UpdateItem",
    complete: "UpdateItem",
    fail: "UpdateItem",
    reset_attempts: "UpdateItem",
    get: "GetItem",
    delete: "DeleteItem",
    replace: 2,
};

/// A fresh table, its client's requests counted.
async fn suite() -> Suite<DynamoDbBackend> {
    let counter = RequestCounter::default();
    let client = common::dynamodb(&counter).await;
    let table = common::create_table(&client, "id", "expiration").await;
    Suite::new(DynamoDbBackend::new(client, table), counter, DYNAMODB)
}

backend_suite!(suite());

/// The inline mode's items: a table keyed on `pk`, each item's value in `value`, read by a
/// client whose requests are not counted.
#[derive(Clone)]
struct Effects {
    client: aws_sdk_dynamodb::Client,
    table: String,
    /// A table keyed on `pk` and `sk`.
    sorted: String,
    /// Reads the record on an item (the inline attribute names, keyed on `pk`).
    reader: DynamoDbBackend,
}

impl Effects {
    async fn item_of(&self, id: &str) -> Option<std::collections::HashMap<String, AttributeValue>> {
        self.client
            .get_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(id.into()))
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .item
    }
}

impl Effects {
    /// A `Put` of item `id` holding `value`, on `condition` if any.
    fn put_write(&self, id: &str, value: &str, condition: Option<&str>) -> TransactWriteItem {
        let put = aws_sdk_dynamodb::types::Put::builder()
            .table_name(&self.table)
            .item("pk", AttributeValue::S(id.into()))
            .item("value", AttributeValue::S(value.into()))
            .set_condition_expression(condition.map(str::to_owned))
            .build()
            .unwrap();
        TransactWriteItem::builder().put(put).build()
    }
}

impl Items<TransactWriteItem> for Effects {
    type Write = TransactWriteItem;
    fn item(&self, id: &str, value: &str) -> TransactWriteItem {
        NewItem::new(&self.table, "pk", AttributeValue::S(id.into()))
            .attribute("value", AttributeValue::S(value.into()))
            .into()
    }
    fn key(&self, id: &str) -> TransactWriteItem {
        NewItem::new(&self.table, "pk", AttributeValue::S(id.into())).into()
    }
    fn put(&self, id: &str, value: &str) -> TransactWriteItem {
        self.put_write(id, value, None)
    }
    fn put_if_absent(&self, id: &str, value: &str) -> TransactWriteItem {
        self.put_write(id, value, Some("attribute_not_exists(pk)"))
    }
    async fn value(&self, id: &str) -> Option<String> {
        let item = self.item_of(id).await?;
        Some(item["value"].as_s().unwrap().clone())
    }
    async fn record(&self, id: &str) -> Option<IdempotencyRecord> {
        let item = self.item_of(id).await?;
        if !item.contains_key(&Attributes::inline().status) {
            return None;
        }
        self.reader.get(id, 0).await.unwrap()
    }
    async fn put_foreign(&self, id: &str, value: &str) {
        self.client
            .put_item()
            .table_name(&self.table)
            .item("pk", AttributeValue::S(id.into()))
            .item("value", AttributeValue::S(value.into()))
            .send()
            .await
            .unwrap();
    }
    fn sorted_item(&self, id: &str, sort: &str, value: &str) -> TransactWriteItem {
        NewItem::new(&self.sorted, "pk", AttributeValue::S(id.into()))
            .sort_key("sk", AttributeValue::S(sort.into()))
            .attribute("value", AttributeValue::S(value.into()))
            .into()
    }
    async fn sorted_value(&self, id: &str, sort: &str) -> Option<String> {
        let item = self
            .client
            .get_item()
            .table_name(&self.sorted)
            .key("pk", AttributeValue::S(id.into()))
            .key("sk", AttributeValue::S(sort.into()))
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .item?;
        Some(item["value"].as_s().unwrap().clone())
    }
}

/// What the inline mode's operations cost on DynamoDB: one `PutItem` per write, one
/// `UpdateItem` per failure.
const INLINE: InlineOps = InlineOps {
    put: "PutItem",
    record_failure: "UpdateItem",
    get: "GetItem",
    commit: "TransactWriteItems",
    reset_attempts: "UpdateItem",
};

async fn inline_fixture() -> (Suite<DynamoDbBackend>, Effects, InlineOps) {
    let suite = suite().await;
    let client = common::dynamodb(&RequestCounter::default()).await;
    let table = common::create_table(&client, "pk", "expires").await;
    let sorted = common::create_sorted_table(&client).await;
    let reader = DynamoDbBackend::new(client.clone(), &table).with_attributes(Attributes {
        key: "pk".into(),
        ..Attributes::inline()
    });
    suite.counter.reset();
    let effects = Effects {
        client,
        table,
        sorted,
        reader,
    };
    (suite, effects, INLINE)
}

inline_suite!(inline_fixture());

#[tokio::test]
async fn inline_refusals_for_the_items_table_are_its_configuration() {
    use lambda_idempotency::store::StoreError;
    use lambda_idempotency::transaction::TransactError;
    let (suite, effects, _) = inline_fixture().await;
    // A table that does not exist, and an item whose key is not the table's.
    let items = [
        NewItem::new("no-such-table", "pk", AttributeValue::S("a".into())),
        NewItem::new(&effects.table, "id", AttributeValue::S("a".into())),
    ];
    for item in items {
        let put = InlinePut::new((), item);
        let refused = suite
            .engine
            .put_inline("cfg", b"1", || async { Ok::<_, std::io::Error>(put) })
            .await;
        assert!(
            matches!(
                &refused,
                Err(TransactError::Store(StoreError::Misconfigured { .. }))
            ),
            "{refused:?}"
        );
    }
    assert_eq!(
        suite.engine.get("cfg").await.unwrap(),
        None,
        "not recorded as an attempt"
    );
    // An item over 400 KB: permanent, found before any request.
    let big = effects.item("big", &"x".repeat(400 * 1024));
    suite.counter.reset();
    let refused = suite
        .engine
        .put_inline("big", b"1", || async {
            Ok::<_, std::io::Error>(InlinePut::new((), big))
        })
        .await;
    assert!(
        matches!(refused, Err(TransactError::Limit { attempts: None, .. })),
        "{refused:?}"
    );
    assert_eq!(suite.counter.total(), 0);
}

#[tokio::test]
async fn an_inline_record_costs_184_bytes_at_most() {
    assert_eq!(
        lambda_idempotency::store::inline_record_bytes(&Attributes::inline()),
        184
    );
}

#[tokio::test]
async fn follows_the_table_of_transitions_in_transactional_mode() {
    backend_suite::follows_the_table_of_transitions_in_transactional_mode(&suite().await).await;
}

async fn started<B: Backend>(e: &Idempotency<B>, key: &str) -> lambda_idempotency::Lease {
    match e.acquire(key, b"body", None).await {
        Ok(Acquired::Started(lease)) => lease,
        other => panic!("expected Started for {key}, got {other:?}"),
    }
}

#[tokio::test]
async fn a_record_without_a_lease_attribute_is_held_until_it_expires() {
    let f = suite().await;
    let clock = Arc::new(ManualClock::new(f.clock.now_ms()));
    let memory = Idempotency::new(InMemoryBackend::default())
        .with_clock(clock.clone())
        .with_key_prefix("fn");
    let dynamodb = f.engine.clone().with_clock(clock.clone());
    let now_s = clock.now_ms() / 1000;
    let client = common::dynamodb(&f.counter).await;
    let table = dynamodb.backend().table().to_owned();
    let s = |v: &str| aws_sdk_dynamodb::types::AttributeValue::S(v.into());
    let hash = lambda_idempotency::payload::PayloadHash::raw(b"body").to_string();
    client
        .put_item()
        .table_name(&table)
        .item("id", s("fn#foreign"))
        .item("status", s("IN_PROGRESS"))
        .item("payload_hash", s(&hash))
        .item(
            "expiration",
            aws_sdk_dynamodb::types::AttributeValue::N((now_s + 100).to_string()),
        )
        .send()
        .await
        .unwrap();
    let mut record = dynamodb.get("foreign").await.unwrap().unwrap();
    assert_eq!(record.lease_until_ms, None);
    record.key = "fn#foreign".into();
    memory.backend().put(&record, clock.now_ms()).await.unwrap();
    for e in [&dynamodb as &dyn AcquireProbe, &memory] {
        assert!(
            matches!(e.probe("foreign").await, Ok(Acquired::InProgress { .. })),
            "the condition and the code agree: held until the record expires"
        );
    }
    clock.advance(Duration::from_secs(101));
    for e in [&dynamodb as &dyn AcquireProbe, &memory] {
        assert!(matches!(e.probe("foreign").await, Ok(Acquired::Started(_))));
    }
}

/// `acquire` on either backend, behind one type.
trait AcquireProbe {
    fn probe<'a>(
        &'a self,
        key: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Acquired, AcquireError>> + 'a>>;
}

impl<B: Backend> AcquireProbe for Idempotency<B> {
    fn probe<'a>(
        &'a self,
        key: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Acquired, AcquireError>> + 'a>>
    {
        Box::pin(self.acquire(key, b"body", None))
    }
}

#[tokio::test]
async fn a_result_at_the_size_limit_is_stored_beside_the_longest_last_error() {
    let f = suite().await;
    let e = &f.engine;
    let lease = started(e, "boundary").await;
    e.fail(&lease, &"e".repeat(5_000)).await.unwrap();
    let stored = e.get("boundary").await.unwrap().unwrap();
    assert_eq!(
        stored.last_error.as_ref().map(String::len),
        Some(lambda_idempotency::state::MAX_ERROR_LEN)
    );
    let lease = started(e, "boundary").await;
    let max = e.backend().max_result_bytes(lease.stored_key()).unwrap();
    let result = format!("\"{}\"", "x".repeat(max - 2));
    assert!(matches!(
        e.complete(&lease, Some(&result)).await,
        Ok(Updated::Applied { .. })
    ));
    assert_eq!(
        e.acquire("boundary", b"body", None).await.unwrap(),
        Acquired::Duplicate {
            result: Some(result),
            result_omitted: false
        },
        "a result of exactly the limit is stored"
    );
    let lease = started(e, "boundary-2").await;
    let over = format!("\"{}\"", "x".repeat(max - 1));
    e.complete(&lease, Some(&over)).await.unwrap();
    assert_eq!(
        e.acquire("boundary-2", b"body", None).await.unwrap(),
        Acquired::Duplicate {
            result: None,
            result_omitted: true
        },
        "one byte more is not stored, and the completion still succeeds"
    );
}

#[tokio::test]
async fn attribute_names_are_configurable() {
    let counter = RequestCounter::default();
    let client = common::dynamodb(&counter).await;
    let table = common::create_table(&client, "pk", "ttl").await;
    let attributes = Attributes {
        key: "pk".into(),
        expiry: "ttl".into(),
        status: "state".into(),
        ..Attributes::default()
    };
    let e =
        Idempotency::new(DynamoDbBackend::new(client.clone(), &table).with_attributes(attributes));
    let lease = started(&e, "k").await;
    e.complete(&lease, Some("1")).await.unwrap();
    let item = client
        .get_item()
        .table_name(&table)
        .key("pk", aws_sdk_dynamodb::types::AttributeValue::S("k".into()))
        .send()
        .await
        .unwrap()
        .item
        .expect("stored under the configured key attribute");
    assert_eq!(item["state"].as_s().unwrap(), "COMPLETED");
    let ttl: i64 = item["ttl"].as_n().unwrap().parse().unwrap();
    let now = lambda_idempotency::time::SystemClock.now_ms() / 1000;
    assert!(
        (now + 1_555_199..=now + 1_555_201).contains(&ttl),
        "default expiry is 18 days: {ttl} vs {now}"
    );
}

/// The requests of one run of every mode: the lease mode's work and its duplicate, an inline
/// item and its duplicate, a transaction and its duplicate, a read and a forget; by the
/// DynamoDB request's name.
async fn every_mode<B>(engine: &Idempotency<B>, table: &str) -> [(&'static str, u64); 5]
where
    B: TransactionalBackend,
    B::Write: From<NewItem>,
{
    let item = |id: &str| NewItem::new(table, "pk", AttributeValue::S(id.into()));
    for _ in 0..2 {
        let work = || async { Ok::<_, std::io::Error>(1) };
        engine.run("lease", b"1", None, work).await.unwrap();
        let put = InlinePut::new(2, item("inline"));
        engine
            .put_inline("inline", b"1", || async { Ok::<_, std::io::Error>(put) })
            .await
            .unwrap();
        let tx = Transaction::new(3).write(item("tx-a")).write(item("tx-b"));
        engine
            .transact("tx", b"1", None, || async { Ok::<_, std::io::Error>(tx) })
            .await
            .unwrap();
    }
    engine.get("lease").await.unwrap().unwrap();
    engine.forget("lease").await.unwrap();
    [
        ("GetItem", 0),
        ("PutItem", 0),
        ("UpdateItem", 0),
        ("TransactWriteItems", 0),
        ("DeleteItem", 0),
    ]
}

#[tokio::test]
async fn the_in_memory_request_count_is_what_dynamodb_is_sent() {
    let f = suite().await;
    let client = common::dynamodb(&RequestCounter::default()).await;
    let table = common::create_table(&client, "pk", "expires").await;
    f.counter.reset();
    let mut sent = every_mode(&f.engine, &table).await;
    let counted = f.counter.snapshot();
    for (name, n) in &mut sent {
        *n = counted.get(*name).copied().unwrap_or(0);
    }
    let memory = Arc::new(InMemoryBackend::default());
    every_mode(&Idempotency::new(memory.clone()), &table).await;
    let r = memory.requests();
    let answered = [
        ("GetItem", r.get),
        ("PutItem", r.put),
        ("UpdateItem", r.update),
        ("TransactWriteItems", r.transact),
        ("DeleteItem", r.delete),
    ];
    assert_eq!(answered, sent, "DynamoDB: {counted:?}");
    assert_eq!(
        sent,
        [
            ("GetItem", 1),
            ("PutItem", 2),
            ("UpdateItem", 3),
            ("TransactWriteItems", 2),
            ("DeleteItem", 1)
        ]
    );
}
