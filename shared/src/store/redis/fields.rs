//! A record as a Redis hash: the field names, and reading the hash (or a script's reply) back as
//! a [`IdempotencyRecord`].
//!
//! | field | value |
//! | --- | --- |
//! | `status` | `IN_PROGRESS`, `COMPLETED`, `FAILED` |
//! | `expiration` | expiry, epoch seconds |
//! | `in_progress_expiration` | lease end, epoch milliseconds |
//! | `payload_hash` | SHA-256 hex |
//! | `owner` | owner token of the attempt that wrote it last |
//! | `attempts` | failed attempts |
//! | `last_error` | last error (absent when none) |
//! | `data` | stored result, JSON (absent when none) |
//! | `result_omitted` | `1` when a result was too large to store (absent otherwise) |
//!
//! The names are those of the DynamoDB backend's default [`Attributes`](crate::store::Attributes).
//! The Lua scripts (`*.lua` beside this file) spell them too.

use std::collections::HashMap;

use ::redis::Value;

use crate::state::{IdempotencyRecord, Status};
use crate::store::StoreError;

pub(super) const STATUS: &str = "status";
pub(super) const EXPIRY: &str = "expiration";
pub(super) const LEASE: &str = "in_progress_expiration";
pub(super) const PAYLOAD_HASH: &str = "payload_hash";
pub(super) const OWNER: &str = "owner";
pub(super) const ATTEMPTS: &str = "attempts";
pub(super) const LAST_ERROR: &str = "last_error";
pub(super) const RESULT: &str = "data";
pub(super) const RESULT_OMITTED: &str = "result_omitted";

/// Every field a record may have.
#[cfg(test)]
pub(super) const FIELDS: [&str; 9] = [
    STATUS,
    EXPIRY,
    LEASE,
    PAYLOAD_HASH,
    OWNER,
    ATTEMPTS,
    LAST_ERROR,
    RESULT,
    RESULT_OMITTED,
];

/// Reads the fields of `key`'s hash as a record.
pub(super) fn record_from_fields(
    key: &str,
    fields: &HashMap<String, String>,
) -> Result<IdempotencyRecord, StoreError> {
    let malformed = |reason: String| StoreError::Malformed {
        key: key.to_owned(),
        reason,
    };
    let text = |name: &str| fields.get(name).cloned();
    let integer = |name: &str| -> Result<Option<i64>, StoreError> {
        fields
            .get(name)
            .map(|v| {
                v.parse::<i64>()
                    .map_err(|_| malformed(format!("`{name}` is not an integer: {v:?}")))
            })
            .transpose()
    };
    let status_text = text(STATUS).ok_or_else(|| malformed(format!("no `{STATUS}` field")))?;
    let status = Status::parse(&status_text)
        .ok_or_else(|| malformed(format!("unknown status `{status_text}`")))?;
    Ok(IdempotencyRecord {
        key: key.to_owned(),
        status,
        expires_at: integer(EXPIRY)?.ok_or_else(|| malformed(format!("no `{EXPIRY}` field")))?,
        lease_until_ms: integer(LEASE)?,
        owner: text(OWNER),
        payload_hash: text(PAYLOAD_HASH).unwrap_or_default(),
        attempts: u32::try_from(integer(ATTEMPTS)?.unwrap_or(0)).unwrap_or(u32::MAX),
        last_error: text(LAST_ERROR),
        result: text(RESULT),
        result_omitted: fields.get(RESULT_OMITTED).is_some_and(|v| v == "1"),
    })
}

/// What a script answered: `{1, attempts}` (applied) or `{0, ...}` (not applied), the rest of a
/// reply not applied returned as it is.
pub(super) enum Reply {
    Applied { attempts: u32, rest: Vec<Value> },
    NotApplied { rest: Vec<Value> },
}

/// Reads a script's reply.
pub(super) fn reply(key: &str, script: &str, value: Value) -> Result<Reply, StoreError> {
    let unexpected = |value: &dyn std::fmt::Debug| StoreError::Malformed {
        key: key.to_owned(),
        reason: format!("unexpected reply from the `{script}` script: {value:?}"),
    };
    let Value::Array(items) = value else {
        return Err(unexpected(&value));
    };
    let mut items = items.into_iter();
    match (items.next(), items.next()) {
        (Some(Value::Int(1)), Some(Value::Int(attempts))) => Ok(Reply::Applied {
            attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
            rest: items.collect(),
        }),
        (Some(Value::Int(0)), second) => Ok(Reply::NotApplied {
            rest: second.into_iter().chain(items).collect(),
        }),
        (first, second) => Err(unexpected(&(first, second))),
    }
}

/// Reads a flat `field, value, ...` array (`HGETALL`'s reply, returned by the acquire script) as
/// a map.
pub(super) fn field_map(key: &str, value: Value) -> Result<HashMap<String, String>, StoreError> {
    let malformed = |reason: String| StoreError::Malformed {
        key: key.to_owned(),
        reason,
    };
    let Value::Array(items) = value else {
        return Err(malformed(format!(
            "expected the record's fields, got {value:?}"
        )));
    };
    let text = |value: Value| match value {
        Value::BulkString(bytes) => {
            String::from_utf8(bytes).map_err(|e| malformed(format!("a field is not UTF-8: {e}")))
        }
        Value::SimpleString(s) => Ok(s),
        Value::Int(n) => Ok(n.to_string()),
        other => Err(malformed(format!("unexpected field value {other:?}"))),
    };
    if items.len() % 2 != 0 {
        return Err(malformed(format!(
            "odd number of field names and values ({})",
            items.len()
        )));
    }
    let mut map = HashMap::with_capacity(items.len() / 2);
    let mut items = items.into_iter();
    while let (Some(name), Some(value)) = (items.next(), items.next()) {
        map.insert(text(name)?, text(value)?);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn reads_a_complete_record() {
        let fields = field_map(
            "k",
            Value::Array(
                [
                    (STATUS, "COMPLETED"),
                    (EXPIRY, "100"),
                    (LEASE, "50000"),
                    (PAYLOAD_HASH, "h"),
                    (OWNER, "o"),
                    (ATTEMPTS, "2"),
                    (LAST_ERROR, "boom"),
                    (RESULT, "{}"),
                    (RESULT_OMITTED, "1"),
                ]
                .into_iter()
                .flat_map(|(n, v)| [bulk(n), bulk(v)])
                .collect(),
            ),
        )
        .unwrap();
        let r = record_from_fields("k", &fields).unwrap();
        assert_eq!(
            r,
            IdempotencyRecord {
                key: "k".into(),
                status: Status::Completed,
                expires_at: 100,
                lease_until_ms: Some(50_000),
                owner: Some("o".into()),
                payload_hash: "h".into(),
                attempts: 2,
                last_error: Some("boom".into()),
                result: Some("{}".into()),
                result_omitted: true,
            }
        );
    }

    #[test]
    fn names_what_is_malformed() {
        let fields = HashMap::from([(STATUS.to_owned(), "DONE".to_owned())]);
        let err = record_from_fields("k", &fields).unwrap_err();
        assert!(err.to_string().contains("unknown status `DONE`"), "{err}");
        let fields = HashMap::from([
            (STATUS.to_owned(), "FAILED".to_owned()),
            (EXPIRY.to_owned(), "soon".to_owned()),
        ]);
        let err = record_from_fields("k", &fields).unwrap_err();
        assert!(
            err.to_string().contains("`expiration` is not an integer"),
            "{err}"
        );
        assert!(field_map("k", Value::Array(vec![bulk("a")])).is_err());
    }

    #[test]
    fn reads_script_replies() {
        let applied = reply(
            "k",
            "fail",
            Value::Array(vec![Value::Int(1), Value::Int(3)]),
        );
        assert!(matches!(applied, Ok(Reply::Applied { attempts: 3, .. })));
        let held = reply(
            "k",
            "acquire",
            Value::Array(vec![Value::Int(0), Value::Array(vec![])]),
        );
        assert!(matches!(held, Ok(Reply::NotApplied { rest }) if rest.len() == 1));
        assert!(reply("k", "fail", Value::Okay).is_err());
        assert!(reply("k", "fail", Value::Array(vec![Value::Int(7)])).is_err());
    }
}
