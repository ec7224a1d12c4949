use std::collections::HashMap;
use std::sync::Mutex;

use super::{Backend, Put, StoreError, Update};
use crate::record::{Record, Status, truncate_error};

/// A backend that keeps records in this process's memory. **For unit tests only.**
///
/// It is not durable: a Lambda execution environment is recycled at any time and several run at
/// once, so records kept here are lost on a cold start and invisible to concurrent invocations,
/// and every message they should have caught is processed again. Use [`super::DynamoDbBackend`]
/// in functions.
///
/// ```
/// # tokio_test_block_on(async {
/// use lambda_idempotency::{Idempotency, Acquired, store::InMemoryBackend};
///
/// let store = Idempotency::new(InMemoryBackend::default());
/// let Acquired::Started(lease) = store.acquire("k", b"body", None).await.unwrap() else { panic!() };
/// store.complete(&lease, None).await.unwrap();
/// assert!(matches!(store.acquire("k", b"body", None).await, Ok(Acquired::Completed { .. })));
/// # });
/// # fn tokio_test_block_on(f: impl std::future::Future) { tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f); }
/// ```
#[derive(Debug, Default)]
pub struct InMemoryBackend {
    records: Mutex<HashMap<String, Record>>,
}

impl InMemoryBackend {
    /// Every record held, for assertions in tests.
    pub fn records(&self) -> Vec<Record> {
        self.lock().values().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Record>> {
        // A panic while holding the lock cannot leave a half-written record: every write is a
        // single insert or field assignment.
        self.records.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Backend for InMemoryBackend {
    async fn put(&self, record: &Record, now_ms: i64) -> Result<Put, StoreError> {
        let mut records = self.lock();
        let mut new = record.clone();
        if let Some(old) = records.get(&record.key) {
            if !old.is_replaceable_by(&record.payload_hash, now_ms) {
                return Ok(Put::Exists(old.clone()));
            }
            new.attempts = old.attempts;
            new.last_error = old.last_error.clone();
        }
        new.result = None;
        new.result_omitted = false;
        records.insert(new.key.clone(), new);
        Ok(Put::Written)
    }

    async fn get(&self, key: &str) -> Result<Option<Record>, StoreError> {
        Ok(self.lock().get(key).cloned())
    }

    async fn update(&self, key: &str, update: &Update) -> Result<(), StoreError> {
        let mut records = self.lock();
        let Some(record) = records.get_mut(key) else {
            return Ok(());
        };
        match update {
            Update::Complete {
                expires_at,
                result,
                result_omitted,
            } => {
                record.status = Status::Completed;
                record.expires_at = *expires_at;
                record.result = result.clone();
                record.result_omitted = *result_omitted;
            }
            Update::Fail { error } => {
                if record.status != Status::Completed {
                    record.status = Status::Failed;
                    record.attempts += 1;
                    record.last_error = Some(truncate_error(error));
                }
            }
        }
        Ok(())
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.lock().remove(key);
        Ok(())
    }
}
