//! The in-memory backend through the shared backend suite (`backend_suite/`, which DynamoDB and
//! Redis run too): unit tests of the transactional mode and of handlers lean on it, so it must
//! follow the same rules as the durable backends.

#[macro_use]
mod backend_suite;

use std::sync::Arc;

use backend_suite::{Operations, Suite};
use lambda_idempotency::count::RequestCounter;
use lambda_idempotency::state::IdempotencyRecord;
use lambda_idempotency::store::{Backend, InMemoryBackend, Put, StoreError, Update, Updated};

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
    async fn get(&self, key: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.counter.add("get");
        self.inner.get(key).await
    }
    async fn update(&self, key: &str, update: &Update) -> Result<Updated, StoreError> {
        self.counter.add(match update {
            Update::Complete { .. } => "complete",
            Update::Fail { .. } => "fail",
            Update::ResetAttempts => "reset_attempts",
        });
        self.inner.update(key, update).await
    }
    fn max_result_bytes(&self, key: &str) -> Option<usize> {
        self.inner.max_result_bytes(key)
    }
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.counter.add("delete");
        self.inner.delete(key).await
    }
    fn identity(&self) -> String {
        self.inner.identity()
    }
}

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
