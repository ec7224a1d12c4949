//! DynamoDB's item layout and limits as plain data: the idempotency table's attribute names,
//! the size of an item and of a transaction, and the largest result a record can carry.
//!
//! Nothing here needs the AWS SDK, so it is there without the `dynamodb` feature too:
//! [`InMemoryBackend`](super::InMemoryBackend) applies the same limits, so that unit tests see
//! what a function on DynamoDB would.

use crate::state::{IdempotencyRecord, MAX_ERROR_LEN, OWNER_TOKEN_LEN, Status};

/// Largest DynamoDB item: 400 KB, attribute names included.
pub const MAX_ITEM_BYTES: usize = 400 * 1024;

/// Attribute names of the idempotency table. The defaults:
///
/// | field | attribute | type |
/// | --- | --- | --- |
/// | key (partition key) | `id` | S |
/// | status | `status` | S: `IN_PROGRESS`, `COMPLETED`, `FAILED` |
/// | expiry (the table's TTL attribute) | `expiration` | N, epoch seconds |
/// | lease end | `in_progress_expiration` | N, epoch milliseconds |
/// | payload hash | `payload_hash` | S, SHA-256 hex |
/// | failed attempts | `attempts` | N |
/// | last error | `last_error` | S |
/// | stored result | `data` | S, JSON |
/// | result too large to store | `result_omitted` | BOOL |
/// | owner token of the attempt that wrote it last | `owner` | S |
///
/// `id`, `expiration` and `in_progress_expiration` are the names AWS Lambda Powertools uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributes {
    /// Partition key.
    pub key: String,
    /// Status.
    pub status: String,
    /// Expiry (TTL), epoch seconds.
    pub expiry: String,
    /// Lease end, epoch milliseconds.
    pub lease: String,
    /// Payload hash.
    pub payload_hash: String,
    /// Failed attempts.
    pub attempts: String,
    /// Last error.
    pub last_error: String,
    /// Stored result.
    pub result: String,
    /// Result too large to store.
    pub result_omitted: String,
    /// Owner token (fencing).
    pub owner: String,
}

impl Attributes {
    fn all(&self) -> [&str; 10] {
        [
            &self.key,
            &self.status,
            &self.expiry,
            &self.lease,
            &self.payload_hash,
            &self.attempts,
            &self.last_error,
            &self.result,
            &self.result_omitted,
            &self.owner,
        ]
    }
}

impl Attributes {
    /// The record's attribute names on a handler's item in the [inline mode](crate::inline):
    /// each the default name prefixed with `idem_` (`idem_status`, `idem_expiration`,
    /// `idem_payload_hash`, `idem_owner`, `idem_data`, ...), so that they never meet a domain
    /// attribute such as `status`. `key` is not read there (an item has its own key).
    ///
    /// An inline item carries only what a completed record needs: the status, the expiry, the
    /// payload hash, the owner token, and the result when there is one (184 bytes at most
    /// without a result: see [`inline_record_bytes`]).
    pub fn inline() -> Self {
        let d = Self::default();
        let p = |name: &str| format!("idem_{name}");
        Self {
            key: d.key,
            status: p(&d.status),
            expiry: p(&d.expiry),
            lease: p(&d.lease),
            payload_hash: p(&d.payload_hash),
            attempts: p(&d.attempts),
            last_error: p(&d.last_error),
            result: p(&d.result),
            result_omitted: p(&d.result_omitted),
            owner: p(&d.owner),
        }
    }
}

/// The bytes a completed record adds to an item in the inline mode, under `attributes`, before
/// its result: status, expiry (a number of up to 21 bytes), a payload hash of the `json:`
/// scheme, and an owner token. With [`Attributes::inline`]: 184.
pub fn inline_record_bytes(attributes: &Attributes) -> usize {
    const NUMBER: usize = 21;
    attributes.status.len()
        + Status::Completed.as_str().len()
        + attributes.expiry.len()
        + NUMBER
        + attributes.payload_hash.len()
        + "json:".len()
        + 64
        + attributes.owner.len()
        + OWNER_TOKEN_LEN
}

/// The digits of `n` as DynamoDB counts a number: its text.
fn number_bytes(n: i64) -> usize {
    let digits = n
        .unsigned_abs()
        .checked_ilog10()
        .map_or(1, |d| d as usize + 1);
    digits + usize::from(n < 0)
}

/// The bytes a completed `record` adds to the item that carries it (inline, or carried by a
/// write of a transaction), under `attributes` ([`Attributes::inline`]): its status, expiry,
/// payload hash, and its owner, result and `result_omitted` when it has them.
pub(crate) fn carried_record_bytes(attributes: &Attributes, record: &IdempotencyRecord) -> usize {
    let a = attributes;
    let optional = |name: &str, value: Option<&str>| value.map_or(0, |v| name.len() + v.len());
    a.status.len()
        + record.status.as_str().len()
        + a.expiry.len()
        + number_bytes(record.expires_at)
        + a.payload_hash.len()
        + record.payload_hash.len()
        + optional(&a.owner, record.owner.as_deref())
        + optional(&a.result, record.result.as_deref())
        + if record.result_omitted {
            a.result_omitted.len() + 1
        } else {
            0
        }
}

/// The bytes of `record`'s own item in the idempotency table, under `attributes`: what a
/// transaction's action for the record writes when the record is not carried.
#[cfg(any(test, doc, feature = "test-util"))]
pub(crate) fn record_item_bytes(attributes: &Attributes, record: &IdempotencyRecord) -> usize {
    let a = attributes;
    let optional = |name: &str, value: Option<&str>| value.map_or(0, |v| name.len() + v.len());
    let lease = record
        .lease_until_ms
        .map(|ms| a.lease.len() + number_bytes(ms));
    a.key.len()
        + record.key.len()
        + a.status.len()
        + record.status.as_str().len()
        + a.expiry.len()
        + number_bytes(record.expires_at)
        + a.payload_hash.len()
        + record.payload_hash.len()
        + a.attempts.len()
        + number_bytes(i64::from(record.attempts))
        + a.result_omitted.len()
        + 1
        + lease.unwrap_or(0)
        + optional(&a.owner, record.owner.as_deref())
        + optional(&a.result, record.result.as_deref())
        + optional(&a.last_error, record.last_error.as_deref())
}

impl Default for Attributes {
    fn default() -> Self {
        Self {
            key: "id".into(),
            status: "status".into(),
            expiry: "expiration".into(),
            lease: "in_progress_expiration".into(),
            payload_hash: "payload_hash".into(),
            attempts: "attempts".into(),
            last_error: "last_error".into(),
            result: "data".into(),
            result_omitted: "result_omitted".into(),
            owner: "owner".into(),
        }
    }
}

/// The largest result a record of `key` can carry within [`MAX_ITEM_BYTES`], with every other
/// attribute at its largest. DynamoDB counts every attribute's name and value: strings by their
/// UTF-8 bytes, numbers at up to 21 bytes, booleans 1 byte.
pub fn max_result_bytes(attributes: &Attributes, key: &str) -> usize {
    const NUMBER: usize = 21;
    let names: usize = attributes.all().iter().map(|n| n.len()).sum();
    let values = key.len()
        + Status::InProgress.as_str().len()
        + 3 * NUMBER // expiry, lease, attempts
        + 64 // payload hash, SHA-256 hex
        + MAX_ERROR_LEN
        + 1 // result_omitted
        + OWNER_TOKEN_LEN;
    MAX_ITEM_BYTES.saturating_sub(names + values)
}

/// Most actions in one `TransactWriteItems`, the idempotency record's included.
pub const MAX_TRANSACTION_ACTIONS: usize = 100;

/// Most bytes of items in one `TransactWriteItems`: 4 MB.
pub const MAX_TRANSACTION_BYTES: usize = 4 * 1024 * 1024;
