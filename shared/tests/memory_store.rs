//! The in-memory backend through the shared backend suite (`backend_suite/`, which DynamoDB and
//! Redis run too): unit tests of the transactional mode and of handlers lean on it, so it must
//! follow the same rules as the durable backends.

#[macro_use]
mod backend_suite;

use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use backend_suite::{InlineOps, Items, Operations, Suite};
use lambda_idempotency::count::RequestCounter;
use lambda_idempotency::state::IdempotencyRecord;
use lambda_idempotency::store::{
    Backend, Commit, Failure, InMemoryBackend, LimitError, MemoryWrite, NewItem, Put, StoreError,
    TransactionalBackend, Update, Updated,
};

/// What each engine operation costs: one call per operation, and one `put` for any replacement.
const MEMORY: Operations = Operations {
    acquire: "put",
    complete: "complete",
    fail: "fail",
    reset_attempts: "reset_attempts",
    get: "get",
    delete: "delete",
    replace: 1,
};

/// The in-memory backend with its calls counted as the suite asserts them.
#[derive(Clone)]
struct Counted {
    inner: Arc<InMemoryBackend>,
    counter: RequestCounter,
}

impl Backend for Counted {
    async fn put(&self, record: &IdempotencyRecord, now_ms: i64) -> Result<Put, StoreError> {
        self.counter.add("put");
        self.inner.put(record, now_ms).await
    }
    async fn get(&self, key: &str, now_ms: i64) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.counter.add("get");
        self.inner.get(key, now_ms).await
    }
    async fn update(&self, key: &str, update: &Update, now_ms: i64) -> Result<Updated, StoreError> {
        self.counter.add(match update {
            Update::Complete { .. } => "complete",
            Update::Fail { .. } => "fail",
            Update::ResetAttempts => "reset_attempts",
        });
        self.inner.update(key, update, now_ms).await
    }
    fn max_result_bytes(&self, key: &str) -> Option<usize> {
        self.inner.max_result_bytes(key)
    }
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.counter.add("delete");
        self.inner.delete(key).await
    }
}

impl TransactionalBackend for Counted {
    type Write = MemoryWrite;
    fn check(
        &self,
        record: &IdempotencyRecord,
        writes: &[MemoryWrite],
        carrier: Option<usize>,
    ) -> Result<(), LimitError> {
        self.inner.check(record, writes, carrier)
    }
    async fn commit(
        &self,
        record: &IdempotencyRecord,
        writes: &[MemoryWrite],
        token: &str,
        now_ms: i64,
    ) -> Result<Commit, StoreError> {
        self.counter.add("commit");
        self.inner.commit(record, writes, token, now_ms).await
    }
    async fn commit_carried(
        &self,
        record: &IdempotencyRecord,
        writes: &[MemoryWrite],
        carrier: usize,
        token: &str,
        now_ms: i64,
    ) -> Result<Commit, StoreError> {
        self.counter.add("commit");
        self.inner
            .commit_carried(record, writes, carrier, token, now_ms)
            .await
    }
    async fn record_failure(
        &self,
        record: &IdempotencyRecord,
        now_ms: i64,
    ) -> Result<Failure, StoreError> {
        self.counter.add("record_failure");
        self.inner.record_failure(record, now_ms).await
    }
    fn new_item_problem(&self, write: &MemoryWrite) -> Option<String> {
        self.inner.new_item_problem(write)
    }
    async fn record_on_item(
        &self,
        key: &str,
        at: &MemoryWrite,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.counter.add("get");
        self.inner.record_on_item(key, at).await
    }
}

/// The inline mode's items: values under the table `effects`.
#[derive(Clone)]
struct Effects(Arc<InMemoryBackend>);

const EFFECTS: &str = "effects";

impl Items<MemoryWrite> for Effects {
    type Write = MemoryWrite;
    fn item(&self, id: &str, value: &str) -> MemoryWrite {
        MemoryWrite::put_if_absent(EFFECTS, id, value)
    }
    fn key(&self, id: &str) -> MemoryWrite {
        MemoryWrite::put_if_absent(EFFECTS, id, "")
    }
    fn put(&self, id: &str, value: &str) -> MemoryWrite {
        MemoryWrite::put(EFFECTS, id, value)
    }
    fn put_if_absent(&self, id: &str, value: &str) -> MemoryWrite {
        MemoryWrite::put_if_absent(EFFECTS, id, value)
    }
    async fn value(&self, id: &str) -> Option<String> {
        self.0.item(EFFECTS, id)
    }
    async fn record(&self, id: &str) -> Option<IdempotencyRecord> {
        self.0.item_record(EFFECTS, id)
    }
    async fn put_foreign(&self, id: &str, value: &str) {
        // A transaction of another key writes the item, without a record on it.
        let mut record = lambda_idempotency::state::table::Before::Completed
            .record(&format!("foreign-{id}"), 0)
            .unwrap();
        record.expires_at = i64::MAX / 2;
        let write = MemoryWrite::put(EFFECTS, id, value);
        let written = self.0.commit(&record, &[write], "token", 0).await.unwrap();
        assert_eq!(written, Commit::Committed);
    }
    fn sorted_item(&self, id: &str, sort: &str, value: &str) -> MemoryWrite {
        // As a handler builds it for DynamoDB, and a unit test runs it in memory.
        NewItem::new(SORTED, "pk", AttributeValue::S(id.into()))
            .sort_key("sk", AttributeValue::S(sort.into()))
            .attribute("value", AttributeValue::S(value.into()))
            .into()
    }
    async fn sorted_value(&self, id: &str, sort: &str) -> Option<String> {
        let item = self.0.item(SORTED, (id, sort))?;
        let item: serde_json::Value = serde_json::from_str(&item).unwrap();
        Some(item["value"].as_str().unwrap().to_owned())
    }
}

/// A table keyed on `pk` and `sk`.
const SORTED: &str = "sorted";

const INLINE: InlineOps = InlineOps {
    put: "commit",
    record_failure: "record_failure",
    get: "get",
    commit: "commit",
    reset_attempts: "reset_attempts",
};

async fn inline_fixture() -> (Suite<Counted>, Effects, InlineOps) {
    let suite = suite().await;
    let effects = Effects(suite.engine.backend().inner.clone());
    (suite, effects, INLINE)
}

inline_suite!(inline_fixture());

async fn suite() -> Suite<Counted> {
    let counter = RequestCounter::default();
    let backend = Counted {
        inner: Arc::new(InMemoryBackend::default()),
        counter: counter.clone(),
    };
    Suite::new(backend, counter, MEMORY)
}

backend_suite!(suite());

#[tokio::test]
async fn follows_the_table_of_transitions_in_transactional_mode() {
    let suite = Suite::new(
        Arc::new(InMemoryBackend::default()),
        RequestCounter::default(),
        MEMORY,
    );
    backend_suite::follows_the_table_of_transitions_in_transactional_mode(&suite).await;
}
