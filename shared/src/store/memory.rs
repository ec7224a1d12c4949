use std::collections::HashMap;
use std::sync::Mutex;

use super::{Backend, Put, StoreError, Update, Updated};
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
        new.attempts = 0;
        new.last_error = None;
        if let Some(old) = records.get(&record.key) {
            if !old.is_replaceable_by(&record.payload_hash, now_ms) {
                return Ok(Put::Exists(old.clone()));
            }
            if !old.is_expired(now_ms) {
                new.attempts = old.attempts;
                new.last_error = old.last_error.clone();
            }
        }
        new.result = None;
        new.result_omitted = false;
        let attempts = new.attempts;
        records.insert(new.key.clone(), new);
        Ok(Put::Written { attempts })
    }

    async fn get(&self, key: &str) -> Result<Option<Record>, StoreError> {
        Ok(self.lock().get(key).cloned())
    }

    async fn update(&self, key: &str, update: &Update) -> Result<Updated, StoreError> {
        let mut records = self.lock();
        let Some(record) = records.get_mut(key) else {
            return Ok(Updated::NotApplied);
        };
        let held_by = |record: &Record, owner: &str| {
            record.status == Status::InProgress && record.owner.as_deref() == Some(owner)
        };
        match update {
            Update::Complete {
                owner,
                expires_at,
                result,
                result_omitted,
            } => {
                if !held_by(record, owner) {
                    return Ok(Updated::NotApplied);
                }
                record.status = Status::Completed;
                record.expires_at = *expires_at;
                record.result = result.clone();
                record.result_omitted = *result_omitted;
            }
            Update::Fail { owner, error } => {
                if !held_by(record, owner) {
                    return Ok(Updated::NotApplied);
                }
                record.status = Status::Failed;
                record.attempts += 1;
                record.last_error = Some(truncate_error(error));
            }
            Update::ResetAttempts => {
                if record.status != Status::Failed {
                    return Ok(Updated::NotApplied);
                }
                record.attempts = 0;
            }
        }
        Ok(Updated::Applied {
            attempts: Some(record.attempts),
        })
    }

    /// The same limit as [`super::DynamoDbBackend`] with its default attribute names, so that
    /// unit tests see what a function would.
    fn max_result_bytes(&self, key: &str) -> Option<usize> {
        Some(super::max_result_bytes(&super::Attributes::default(), key))
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.lock().remove(key);
        Ok(())
    }
}
