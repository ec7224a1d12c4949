//! The idempotency record carried by one write of a transaction
//! ([`TransactionalBackend::commit_carried`](crate::store::TransactionalBackend::commit_carried)):
//! its attributes added to that write's item, under the names of
//! [`DynamoDbBackend::inline_attributes`], and its condition to that write's condition.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{
    AttributeValue, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};

use super::{DynamoDbBackend, n, record_from, s};
use crate::state::IdempotencyRecord;
use crate::store::StoreError;

/// What the record adds to an `Update` carrier's condition: the item carries no record, or one
/// that has expired. Only completed records ride on items, and a completed record is replaceable
/// once it has expired: the transition [`state::commit`](crate::state::commit). An update changes
/// its item, it does not replace it: past the record's expiry, the carrier's own condition
/// decides whether the work runs again.
const NO_LIVE_RECORD: &str = "(attribute_not_exists(#idem_status) OR #idem_exp < :idem_now_s)";

/// What the record adds to a `Put` carrier's condition: the item carries no record at all. A put
/// writes its item whole, and an item that carries a record (the work's effect) is never
/// rewritten, whatever the record's expiry: the transition
/// [`state::commit_on_item`](crate::state::commit_on_item). An item without a record is for the
/// put's own condition (`attribute_not_exists` of its key, for a new item): a `Put` does not say
/// which of its attributes are the key.
const NO_RECORD: &str = "attribute_not_exists(#idem_status)";

/// A `Put` that carries the record, in parts: what a `PutItem` or a transaction's `Put` sends.
pub(super) struct CarriedPut {
    /// The item, the record's attributes on it.
    pub(super) item: HashMap<String, AttributeValue>,
    /// The put's condition and the record's.
    pub(super) condition: String,
    /// The put's names and the record's.
    pub(super) names: HashMap<String, String>,
    /// The put's values, if any.
    pub(super) values: Option<HashMap<String, AttributeValue>>,
}

impl DynamoDbBackend {
    /// The completed record's attributes on an item (an inline record, or one carried by a
    /// write of a transaction): each with the placeholder a carried update names it by, its name
    /// ([`DynamoDbBackend::inline_attributes`]) and its value, `None` where the record has none
    /// (no owner, no result, a result not omitted).
    pub(super) fn record_attributes(
        &self,
        record: &IdempotencyRecord,
    ) -> [(&'static str, &str, Option<AttributeValue>); 6] {
        let a = self.inline_attributes();
        [
            ("idem_status", &a.status, Some(s(record.status.as_str()))),
            ("idem_exp", &a.expiry, Some(n(record.expires_at))),
            ("idem_hash", &a.payload_hash, Some(s(&record.payload_hash))),
            ("idem_owner", &a.owner, record.owner.as_deref().map(s)),
            ("idem_data", &a.result, record.result.as_deref().map(s)),
            (
                "idem_omitted",
                &a.result_omitted,
                record.result_omitted.then_some(AttributeValue::Bool(true)),
            ),
        ]
    }

    /// The bytes `record`'s attributes add to the item that carries it.
    pub(super) fn carried_bytes(&self, record: &IdempotencyRecord) -> usize {
        crate::store::dynamodb_layout::carried_record_bytes(self.inline_attributes(), record)
    }

    /// The actions of a commit whose record rides on `writes[carrier]`: the writes, the
    /// carrier's with the record's attributes and condition added, and its refusal returning
    /// the item (`ALL_OLD`). Only a `Put` or an `Update` can carry it.
    pub(super) fn carrying(
        &self,
        record: &IdempotencyRecord,
        writes: &[TransactWriteItem],
        carrier: usize,
        now_ms: i64,
    ) -> Result<Vec<TransactWriteItem>, StoreError> {
        let misconfigured = |problem: String| StoreError::Misconfigured {
            table: writes
                .get(carrier)
                .and_then(super::table::table_of)
                .unwrap_or_default()
                .to_owned(),
            problem,
        };
        let write = writes.get(carrier).ok_or_else(|| {
            misconfigured(format!(
                "the record is to ride on write {carrier}, but the transaction has {} writes",
                writes.len()
            ))
        })?;
        let carried = if let Some(update) = write.update() {
            TransactWriteItem::builder()
                .update(self.carrying_update(record, update, now_ms).map_err(|e| {
                    misconfigured(format!("write {carrier} cannot carry the record: {e}"))
                })?)
                .build()
        } else if let Some(put) = write.put() {
            TransactWriteItem::builder()
                .put(self.carrying_put(record, put).map_err(|e| {
                    misconfigured(format!("write {carrier} cannot carry the record: {e}"))
                })?)
                .build()
        } else {
            return Err(misconfigured(format!(
                "write {carrier} is a {}: only a Put or an Update can carry the idempotency record",
                super::table::operation_of(write)
            )));
        };
        let mut carried = Some(carried);
        Ok(writes
            .iter()
            .enumerate()
            .map(|(i, write)| match carried.take_if(|_| i == carrier) {
                Some(carried) => carried,
                None => write.clone(),
            })
            .collect())
    }

    /// `update` with the record's attributes set (its result removed when it has none) and its
    /// condition added.
    fn carrying_update(
        &self,
        record: &IdempotencyRecord,
        update: &Update,
        now_ms: i64,
    ) -> Result<Update, String> {
        let mut names = update
            .expression_attribute_names()
            .cloned()
            .unwrap_or_default();
        let mut values = update
            .expression_attribute_values()
            .cloned()
            .unwrap_or_default();
        reserved(names.keys().chain(values.keys()))?;
        let mut set = Vec::new();
        let mut remove = Vec::new();
        for (placeholder, name, value) in self.record_attributes(record) {
            names.insert(format!("#{placeholder}"), name.to_owned());
            match value {
                Some(value) => {
                    set.push(format!("#{placeholder} = :{placeholder}"));
                    values.insert(format!(":{placeholder}"), value);
                }
                None => remove.push(format!("#{placeholder}")),
            }
        }
        values.insert(":idem_now_s".into(), n(now_ms.div_euclid(1000)));
        let expression = with_clause(update.update_expression(), "SET", &set.join(", "));
        let expression = with_clause(&expression, "REMOVE", &remove.join(", "));
        Update::builder()
            .table_name(update.table_name())
            .set_key(Some(update.key().clone()))
            .update_expression(expression)
            .condition_expression(joined(update.condition_expression(), NO_LIVE_RECORD))
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| e.to_string())
    }

    /// `put` with the record's attributes on its item and its condition added.
    fn carrying_put(&self, record: &IdempotencyRecord, put: &Put) -> Result<Put, String> {
        let carried = self.carried_put(record, put)?;
        Put::builder()
            .table_name(put.table_name())
            .set_item(Some(carried.item))
            .condition_expression(carried.condition)
            .set_expression_attribute_names(Some(carried.names))
            .set_expression_attribute_values(carried.values)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| e.to_string())
    }

    /// What a `Put` that carries `record` writes: its item with the record's attributes, and its
    /// condition with the record's ([`NO_RECORD`]).
    pub(super) fn carried_put(
        &self,
        record: &IdempotencyRecord,
        put: &Put,
    ) -> Result<CarriedPut, String> {
        let names = put.expression_attribute_names();
        let values = put.expression_attribute_values();
        reserved(
            names
                .into_iter()
                .flat_map(HashMap::keys)
                .chain(values.into_iter().flat_map(HashMap::keys)),
        )?;
        let mut item = put.item().clone();
        for (_, name, value) in self.record_attributes(record) {
            match value {
                Some(value) => item.insert(name.to_owned(), value),
                None => item.remove(name),
            };
        }
        let mut names = names.cloned().unwrap_or_default();
        names.insert(
            "#idem_status".into(),
            self.inline_attributes().status.clone(),
        );
        Ok(CarriedPut {
            item,
            condition: joined(put.condition_expression(), NO_RECORD),
            names,
            // DynamoDB refuses an empty map of values.
            values: values.filter(|v| !v.is_empty()).cloned(),
        })
    }

    /// The record a refused carrier's item holds (its key set to `record.key`, the idempotency
    /// key), when it answers for the key: on the item of a `Put` (`whole`), any record, whatever
    /// its expiry ([`state::commit_on_item`](crate::state::commit_on_item)); on an updated item,
    /// a record that is not replaceable at `now_ms`, or an expired one of `record`'s payload (the
    /// carrier's own condition refused the work, done before). `None` when the item carries
    /// none, or an expired record of another payload: then the carrier's own condition refused
    /// it.
    pub(super) fn carried_record(
        &self,
        record: &IdempotencyRecord,
        item: Option<&HashMap<String, AttributeValue>>,
        whole: bool,
        now_ms: i64,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let Some(held) = self.record_on(&record.key, item)? else {
            return Ok(None);
        };
        let answers =
            whole || !held.is_replaceable(now_ms) || held.payload_hash == record.payload_hash;
        Ok(answers.then_some(held))
    }

    /// The record `item` carries, if any, its key set to `key` (the idempotency key).
    pub(super) fn record_on(
        &self,
        key: &str,
        item: Option<&HashMap<String, AttributeValue>>,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let a = self.inline_attributes();
        let Some(item) = item.filter(|item| item.contains_key(&a.status)) else {
            return Ok(None);
        };
        Ok(Some(IdempotencyRecord {
            key: key.to_owned(),
            ..record_from(a, item)?
        }))
    }
}

impl DynamoDbBackend {
    /// The record on the item `at` names ([`TransactionalBackend::record_on_item`]): one
    /// strongly consistent `GetItem` of its key (an update's, a delete's or a check's key; a
    /// put's item, which then holds its key attributes alone), the record's key set to `key`.
    ///
    /// [`TransactionalBackend::record_on_item`]: crate::store::TransactionalBackend::record_on_item
    pub(super) async fn read_carried(
        &self,
        key: &str,
        at: &TransactWriteItem,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let (table, item_key) = if let Some(put) = at.put() {
            (put.table_name(), put.item())
        } else if let Some(update) = at.update() {
            (update.table_name(), update.key())
        } else if let Some(delete) = at.delete() {
            (delete.table_name(), delete.key())
        } else if let Some(check) = at.condition_check() {
            (check.table_name(), check.key())
        } else {
            return Ok(None);
        };
        let output = self
            .client()
            .get_item()
            .table_name(table)
            .set_key(Some(item_key.clone()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| super::request_error("GetItem", e))?;
        self.record_on(key, output.item())
    }
}

/// Refuses a carrier whose own placeholders use the record's (`#idem_`, `:idem_`).
fn reserved<'a>(mut placeholders: impl Iterator<Item = &'a String>) -> Result<(), String> {
    match placeholders.find(|p| p.starts_with("#idem_") || p.starts_with(":idem_")) {
        Some(p) => Err(format!(
            "its placeholder `{p}` is one of the record's (`#idem_...`, `:idem_...`)"
        )),
        None => Ok(()),
    }
}

/// The carrier's own condition, if any, and the record's.
fn joined(condition: Option<&str>, record: &str) -> String {
    match condition {
        Some(condition) if !condition.trim().is_empty() => format!("({condition}) AND {record}"),
        _ => record.to_owned(),
    }
}

/// `expression` with `items` added to its `keyword` clause (`SET`, `REMOVE`), or with that
/// clause added when it has none. A clause keyword is a word of its own, in any case; a
/// placeholder (`#set`, `:remove`) is not one.
fn with_clause(expression: &str, keyword: &str, items: &str) -> String {
    if items.is_empty() {
        return expression.to_owned();
    }
    // A word goes on through these; a keyword is a whole word, and a clause's keyword is
    // followed by a path, never by `=` (an attribute named `remove` in `SET remove = :r`).
    let in_word = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'#' | b':' | b'.');
    let upper = expression.to_ascii_uppercase();
    let bytes = upper.as_bytes();
    let mut from = 0;
    while let Some(at) = upper[from..].find(keyword).map(|i| i + from) {
        let end = at + keyword.len();
        let starts = at == 0 || !in_word(bytes[at - 1]);
        let ends = bytes.get(end).is_some_and(|&b| !in_word(b))
            && !upper[end..].trim_start().starts_with('=');
        if starts && ends {
            let rest = expression[end..].trim_start();
            return format!("{}{keyword} {items}, {rest}", &expression[..at]);
        }
        from = end;
    }
    format!("{} {keyword} {items}", expression.trim_end())
        .trim_start()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::with_clause;
    use crate::state::{IdempotencyRecord, Status};
    use crate::store::dynamodb::transact_write_items::value_bytes;

    #[tokio::test]
    async fn the_carried_bytes_are_the_record_attributes_bytes() {
        let config = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .build();
        let backend = super::DynamoDbBackend::new(aws_sdk_dynamodb::Client::from_conf(config), "t");
        let base = IdempotencyRecord {
            key: "k".into(),
            status: Status::Completed,
            expires_at: 1_700_000_000,
            lease_until_ms: None,
            owner: Some("0123456789abcdef0123456789abcdef".into()),
            payload_hash: "sha256:abc".into(),
            attempts: 0,
            last_error: None,
            result: Some("{\"a\":1}".into()),
            result_omitted: false,
        };
        let records = [
            base.clone(),
            IdempotencyRecord {
                owner: None,
                result: None,
                result_omitted: true,
                expires_at: 0,
                ..base.clone()
            },
            IdempotencyRecord {
                expires_at: -5,
                ..base
            },
        ];
        for record in records {
            let built: usize = backend
                .record_attributes(&record)
                .iter()
                .filter_map(|(_, name, value)| Some(name.len() + value_bytes(value.as_ref()?)))
                .sum();
            assert_eq!(backend.carried_bytes(&record), built, "{record:?}");
        }
    }

    #[test]
    fn a_clause_gains_the_items_or_is_added() {
        assert_eq!(
            with_clause("SET a = :a REMOVE b", "SET", "#x = :x"),
            "SET #x = :x, a = :a REMOVE b"
        );
        assert_eq!(
            with_clause("set a = :a remove b", "REMOVE", "#d"),
            "set a = :a REMOVE #d, b"
        );
        assert_eq!(
            with_clause("ADD balance :amount", "SET", "#x = :x"),
            "ADD balance :amount SET #x = :x"
        );
        assert_eq!(
            with_clause("SET #set = :remove", "REMOVE", "#d"),
            "SET #set = :remove REMOVE #d"
        );
        assert_eq!(with_clause("SET a = :a", "REMOVE", ""), "SET a = :a");
        assert_eq!(
            with_clause("SET remove = :r", "REMOVE", "#d"),
            "SET remove = :r REMOVE #d",
            "an attribute named like a keyword is not its clause"
        );
        assert_eq!(
            with_clause("SET a = :a\nREMOVE\tb", "REMOVE", "#d"),
            "SET a = :a\nREMOVE #d, b"
        );
    }
}
