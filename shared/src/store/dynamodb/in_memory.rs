//! A DynamoDB [`NewItem`] written by [`InMemoryBackend`](crate::store::InMemoryBackend): the
//! inline mode's handler runs unchanged in a unit test, on the in-memory backend.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::Value;

use super::NewItem;
use crate::store::MemoryWrite;

/// A put, only where there is no item yet (a new item), under the item's table and the text of
/// its partition key (a string as it is, a number as written) and of its
/// [sort key](NewItem::sort_key) if it has one, its value the item's attributes as one JSON object with sorted keys (strings and
/// numbers as JSON strings and numbers, sets and lists as arrays, maps as objects, binary as an
/// array of bytes), so that a test reads it with
/// [`InMemoryBackend::item`](crate::store::InMemoryBackend::item).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use aws_sdk_dynamodb::types::AttributeValue;
/// use lambda_idempotency::store::{InMemoryBackend, MemoryWrite, NewItem};
///
/// let order = NewItem::new("orders", "orderId", AttributeValue::S("o-1".into()))
///     .attribute("totalCents", AttributeValue::N("500".into()));
/// let write = MemoryWrite::from(order);
/// assert_eq!((write.table.as_str(), write.key.as_str()), ("orders", "o-1"));
/// assert_eq!(write.value, r#"{"orderId":"o-1","totalCents":500}"#);
/// assert!(write.if_absent, "a new item");
/// # });
/// ```
impl From<NewItem> for MemoryWrite {
    fn from(item: NewItem) -> Self {
        let text = |attribute: &str| match item.item().get(attribute) {
            Some(AttributeValue::S(s) | AttributeValue::N(s)) => s.clone(),
            Some(other) => json(other).to_string(),
            None => String::new(),
        };
        let key = text(item.key_attribute());
        let sort_key = item.sort_key_attribute().map(text);
        let value: BTreeMap<&str, Value> = item
            .item()
            .iter()
            .map(|(name, value)| (name.as_str(), json(value)))
            .collect();
        let value = serde_json::to_string(&value).expect("a map of JSON values serializes");
        let write = MemoryWrite::put_if_absent(item.table(), &key, &value);
        match sort_key {
            Some(sort_key) => write.with_sort_key(&sort_key),
            None => write,
        }
    }
}

/// `value` as JSON.
fn json(value: &AttributeValue) -> Value {
    let number = |n: &str| {
        serde_json::from_str::<serde_json::Number>(n)
            .map_or_else(|_| Value::String(n.into()), Value::Number)
    };
    match value {
        AttributeValue::S(s) => Value::String(s.clone()),
        AttributeValue::N(n) => number(n),
        AttributeValue::Bool(b) => Value::Bool(*b),
        AttributeValue::Null(_) => Value::Null,
        AttributeValue::B(b) => bytes(b.as_ref()),
        AttributeValue::Ss(ss) => ss.iter().cloned().map(Value::String).collect(),
        AttributeValue::Ns(ns) => ns.iter().map(|n| number(n)).collect(),
        AttributeValue::Bs(bs) => bs.iter().map(|b| bytes(b.as_ref())).collect(),
        AttributeValue::L(l) => l.iter().map(json).collect(),
        AttributeValue::M(m) => {
            Value::Object(m.iter().map(|(k, v)| (k.clone(), json(v))).collect())
        }
        _ => Value::Null,
    }
}

/// Bytes as a JSON array of numbers.
fn bytes(bytes: &[u8]) -> Value {
    Value::Array(bytes.iter().map(|&byte| Value::from(byte)).collect())
}
