//! The Redis / Valkey backend (feature `redis`).

mod fields;
mod script;

use std::fmt;

use ::redis::aio::{ConnectionLike, ConnectionManager};
use ::redis::{RedisError, Value};

use self::fields::{Reply, field_map, record_from_fields, reply};
use self::script::SCRIPTS;
use super::{Backend, Put, StoreError, Update, Updated};
use crate::count::RequestCounter;
use crate::state::{IdempotencyRecord, truncate_error};

/// The namespace of [`RedisBackend`]'s keys unless told otherwise: a record of key `k` is the
/// hash `idempotency:k`.
pub const DEFAULT_NAMESPACE: &str = "idempotency:";

/// Idempotency records in Redis or Valkey: one hash per key, expired by the server.
///
/// Every operation is one round trip. Acquiring, completing, failing and resetting a record are
/// each one Lua script (`EVALSHA`), so the transitions of [`crate::state`] ([`state::acquire`](crate::state::acquire), [`state::update`](crate::state::update)) and the fencing
/// of [`Update::Complete`] and [`Update::Fail`] are evaluated atomically on the server, exactly as
/// the DynamoDB backend's condition expressions state them; a duplicate gets the stored record in
/// the acquire's own reply. Reading is one `HGETALL`, deleting one `DEL`.
///
/// **Expiry.** Each record carries `PEXPIREAT` at the end of its expiry second (or of its lease,
/// when that is later), so the server deletes it when it stops counting: no sweeper, no stale
/// records. Whether a record still counts is decided by the caller's clock (the `now` the engine
/// passes), as with DynamoDB, where an expired item the TTL sweeper has not deleted yet is
/// replaced, never honoured. Where DynamoDB keeps an expired item for up to a few days (and
/// [`Backend::get`] still returns it), Redis has deleted it: `get` returns `None`. The server's
/// clock decides the deletion: keep the clocks of Lambda and the server in step (NTP does).
///
/// **What differs from DynamoDB.**
/// - No item size limit ([`Backend::max_result_bytes`] is `None` unless set with
///   [`with_max_result_bytes`](Self::with_max_result_bytes)): Redis strings go to 512 MB, and a
///   stored result costs memory.
/// - Durability is the server's: with asynchronous replication, a failover can lose the last
///   writes (a record just acquired or completed), and a duplicate then runs again. Use a
///   server that does not evict keys (`maxmemory-policy noeviction`): an evicted record is a
///   duplicate processed twice.
/// - Expiry replaces an expired record in the same round trip (DynamoDB takes a second request).
/// - It does **not** implement [`TransactionalBackend`](super::TransactionalBackend): Redis
///   cannot commit the record together with the handler's writes in DynamoDB tables, so the
///   transactional mode is DynamoDB-only and does not compile over this backend.
///
/// **Requests per record:** a fresh record costs 2 round trips (acquire, complete), a duplicate 1
/// (acquire), a failure 2 (acquire, fail). Give a [`RequestCounter`] with
/// [`with_counter`](Self::with_counter) to count them by operation (`acquire`, `complete`,
/// `fail`, `reset_attempts`, `HGETALL`, `DEL`, `SCRIPT LOAD`): a script the server no longer
/// knows is sent again whole, and that second round trip is counted too.
///
/// The connection is a [`ConnectionManager`] (reconnects by itself) by default; any
/// [`ConnectionLike`] that is `Clone` works, a
/// [`MultiplexedConnection`](::redis::aio::MultiplexedConnection) for one.
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use lambda_idempotency::{Idempotency, store::RedisBackend};
///
/// let backend = RedisBackend::connect("redis://127.0.0.1:6379").await?
///     .with_namespace("payments:");
/// let store = Idempotency::new(backend).with_key_prefix("payment-processor");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisBackend<C = ConnectionManager> {
    connection: C,
    namespace: String,
    max_result_bytes: Option<usize>,
    counter: Option<RequestCounter>,
}

impl<C> fmt::Debug for RedisBackend<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("namespace", &self.namespace)
            .field("max_result_bytes", &self.max_result_bytes)
            .field("counter", &self.counter)
            .finish_non_exhaustive()
    }
}

/// Why [`RedisBackend::connect`] could not give a backend.
#[derive(Debug, thiserror::Error)]
pub enum RedisConnectError {
    /// The URL is not a Redis URL (`redis://host:port[/db]`, `rediss://` with TLS, `unix://`).
    #[error("invalid Redis URL `{url}`: {source}")]
    InvalidUrl {
        /// The URL, its password hidden.
        url: String,
        /// What the client said.
        #[source]
        source: RedisError,
    },
    /// The server could not be reached (or refused the credentials).
    #[error("could not connect to Redis at `{url}`: {source}")]
    Connect {
        /// The URL, its password hidden.
        url: String,
        /// What the client said.
        #[source]
        source: RedisError,
    },
    /// The server refused the backend's Lua scripts (scripting disabled?).
    #[error("Redis at `{url}` did not load the idempotency scripts: {source}")]
    LoadScripts {
        /// The URL, its password hidden.
        url: String,
        /// What went wrong.
        #[source]
        source: StoreError,
    },
}

/// `url` with the password (anything between `://` and the last `@`) replaced by `***`.
fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme + 3 => {
            format!("{}***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

impl RedisBackend<ConnectionManager> {
    /// Connects to the server at `url` (`redis://127.0.0.1:6379`, `redis://:password@host/2`,
    /// `rediss://...` for TLS where the `redis` crate's TLS feature is enabled) with a
    /// [`ConnectionManager`], and loads the scripts ([`load_scripts`](Self::load_scripts)).
    pub async fn connect(url: &str) -> Result<Self, RedisConnectError> {
        let client =
            ::redis::Client::open(url).map_err(|source| RedisConnectError::InvalidUrl {
                url: redacted(url),
                source,
            })?;
        let config = ::redis::aio::ConnectionManagerConfig::new().set_number_of_retries(2);
        let connection = client
            .get_connection_manager_with_config(config)
            .await
            .map_err(|source| RedisConnectError::Connect {
                url: redacted(url),
                source,
            })?;
        let backend = Self::new(connection);
        backend
            .load_scripts()
            .await
            .map_err(|source| RedisConnectError::LoadScripts {
                url: redacted(url),
                source,
            })?;
        Ok(backend)
    }
}

impl<C> RedisBackend<C>
where
    C: ConnectionLike + Clone + Send + Sync,
{
    /// A backend on an open connection, in namespace [`DEFAULT_NAMESPACE`]. Nothing is sent: the
    /// scripts are loaded on first use (that first call takes one more round trip), or up front
    /// with [`load_scripts`](Self::load_scripts).
    pub fn new(connection: C) -> Self {
        Self {
            connection,
            namespace: DEFAULT_NAMESPACE.to_owned(),
            max_result_bytes: None,
            counter: None,
        }
    }

    /// Puts every key under `namespace` (prepended as it is: `tenant-a:` gives
    /// `tenant-a:<key>`), so that several applications share a server; `""` for none. The
    /// engine's [key prefix](crate::Idempotency::with_key_prefix) comes after it.
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// Stores results of at most `bytes` (larger ones are not stored, as with DynamoDB's item
    /// limit: the record says a result was omitted).
    pub fn with_max_result_bytes(mut self, bytes: usize) -> Self {
        self.max_result_bytes = Some(bytes);
        self
    }

    /// Counts every round trip in `counter`, by operation (see the type's docs).
    pub fn with_counter(mut self, counter: RequestCounter) -> Self {
        self.counter = Some(counter);
        self
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The Redis key of the record of `key` (the namespace, then the key).
    pub fn redis_key(&self, key: &str) -> String {
        format!("{}{key}", self.namespace)
    }

    /// The connection (a clone of it: they share the underlying one).
    pub fn connection(&self) -> C {
        self.connection.clone()
    }

    /// Loads the scripts into the server's script cache, in one round trip (`SCRIPT LOAD`
    /// pipelined), so that each is then sent by its SHA-1 alone.
    pub async fn load_scripts(&self) -> Result<(), StoreError> {
        let mut pipe = ::redis::pipe();
        for script in SCRIPTS.all() {
            pipe.cmd("SCRIPT").arg("LOAD").arg(script.source);
        }
        self.count("SCRIPT LOAD");
        pipe.query_async::<Vec<String>>(&mut self.connection.clone())
            .await
            .map_err(|e| request_error("SCRIPT LOAD", e))?;
        Ok(())
    }

    fn count(&self, operation: &str) {
        if let Some(counter) = &self.counter {
            counter.add(operation);
        }
    }

    async fn run_script(
        &self,
        script: &script::Script,
        key: &str,
        args: &[&str],
    ) -> Result<Reply, StoreError> {
        let value = script
            .run(
                &mut self.connection.clone(),
                self.counter.as_ref(),
                &self.redis_key(key),
                args,
            )
            .await
            .map_err(|e| request_error(script.name, e))?;
        reply(key, script.name, value)
    }
}

/// When the server may drop a record: once it has expired (after its expiry second) and no lease
/// holds it, epoch milliseconds.
fn drop_at_ms(expires_at: i64, lease_until_ms: Option<i64>) -> i64 {
    let expired = expires_at.saturating_add(1).saturating_mul(1000);
    lease_until_ms.map_or(expired, |lease| expired.max(lease.saturating_add(1)))
}

fn request_error(operation: &'static str, err: RedisError) -> StoreError {
    StoreError::Request {
        operation,
        message: err.to_string(),
        source: Box::new(err),
    }
}

impl<C> Backend for RedisBackend<C>
where
    C: ConnectionLike + Clone + Send + Sync,
{
    async fn put(&self, record: &IdempotencyRecord, now_ms: i64) -> Result<Put, StoreError> {
        let lease = record
            .lease_until_ms
            .unwrap_or(record.expires_at.saturating_mul(1000));
        let args = [
            now_ms.to_string(),
            now_ms.div_euclid(1000).to_string(),
            record.expires_at.to_string(),
            lease.to_string(),
            record.payload_hash.clone(),
            record.owner.clone().unwrap_or_default(),
            drop_at_ms(record.expires_at, Some(lease)).to_string(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        match self
            .run_script(&SCRIPTS.acquire, &record.key, &args)
            .await?
        {
            Reply::Applied { attempts, rest } => Ok(Put::Written {
                attempts,
                replaced: match rest.into_iter().next() {
                    Some(Value::BulkString(hash)) => {
                        Some(String::from_utf8_lossy(&hash).into_owned())
                    }
                    _ => None,
                },
            }),
            Reply::NotApplied { rest } => {
                let stored = rest.into_iter().next().unwrap_or(Value::Nil);
                let fields = field_map(&record.key, stored)?;
                Ok(Put::Exists(record_from_fields(&record.key, &fields)?))
            }
        }
    }

    async fn get(&self, key: &str, _now_ms: i64) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.count("HGETALL");
        let value: Value = ::redis::cmd("HGETALL")
            .arg(self.redis_key(key))
            .query_async(&mut self.connection.clone())
            .await
            .map_err(|e| request_error("HGETALL", e))?;
        // RESP3 answers a map; RESP2 a flat array.
        let value = match value {
            Value::Map(pairs) => {
                Value::Array(pairs.into_iter().flat_map(|(k, v)| [k, v]).collect())
            }
            other => other,
        };
        let fields = field_map(key, value)?;
        if fields.is_empty() {
            return Ok(None);
        }
        record_from_fields(key, &fields).map(Some)
    }

    async fn update(
        &self,
        key: &str,
        update: &Update,
        _now_ms: i64,
    ) -> Result<Updated, StoreError> {
        let reply = match update {
            Update::Complete {
                owner,
                expires_at,
                result,
                result_omitted,
                ..
            } => {
                let expiry = expires_at.to_string();
                let drop_at = drop_at_ms(*expires_at, None).to_string();
                let mut args = vec![
                    owner.as_str(),
                    expiry.as_str(),
                    drop_at.as_str(),
                    if *result_omitted { "1" } else { "0" },
                ];
                args.extend(result.as_deref());
                self.run_script(&SCRIPTS.complete, key, &args).await?
            }
            Update::Fail {
                owner,
                error,
                counted,
            } => {
                let error = truncate_error(error);
                let increment = if *counted { "1" } else { "0" };
                self.run_script(
                    &SCRIPTS.fail,
                    key,
                    &[owner.as_str(), error.as_str(), increment],
                )
                .await?
            }
            Update::ResetAttempts => self.run_script(&SCRIPTS.reset_attempts, key, &[]).await?,
        };
        Ok(match reply {
            Reply::Applied { attempts, .. } => Updated::Applied {
                attempts: Some(attempts),
            },
            Reply::NotApplied { .. } => {
                tracing::debug!(
                    key,
                    "idempotency record not updated: it is gone, completed, or held by another attempt"
                );
                Updated::NotApplied
            }
        })
    }

    fn max_result_bytes(&self, _key: &str) -> Option<usize> {
        self.max_result_bytes
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.count("DEL");
        ::redis::cmd("DEL")
            .arg(self.redis_key(key))
            .query_async::<i64>(&mut self.connection.clone())
            .await
            .map_err(|e| request_error("DEL", e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_dropped_after_its_expiry_second_or_its_lease() {
        assert_eq!(drop_at_ms(100, None), 101_000);
        assert_eq!(drop_at_ms(100, Some(50_000)), 101_000);
        assert_eq!(drop_at_ms(100, Some(200_000)), 200_001);
        assert_eq!(drop_at_ms(i64::MAX, None), i64::MAX);
    }

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(
            redacted("redis://user:secret@host:6379/0"),
            "redis://***@host:6379/0"
        );
        assert_eq!(redacted("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(redacted("not a url"), "not a url");
    }
}
