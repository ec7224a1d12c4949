//! The idempotency record carried by one write of a transaction
//! ([`TransactionalBackend::commit_carried`](crate::store::TransactionalBackend::commit_carried)):
//! its attributes added to that write's item, under the names of
//! [`DynamoDbBackend::inline_attributes`], and its condition to that write's condition.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{
    AttributeValue, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};

use super::{DynamoDbBackend, n, record_from};
use crate::state::IdempotencyRecord;
use crate::store::StoreError;

/// What the record adds to its carrier's condition: the item carries no record, or one that has
/// expired. Only completed records ride on items, and a completed record is replaceable once it
/// has expired: the transition [`state::commit`](crate::state::commit).
const NO_LIVE_RECORD: &str = "(attribute_not_exists(#idem_status) OR #idem_exp < :idem_now_s)";

impl DynamoDbBackend {
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
                .put(self.carrying_put(record, put, now_ms).map_err(|e| {
                    misconfigured(format!("write {carrier} cannot carry the record: {e}"))
                })?)
                .build()
        } else {
            return Err(misconfigured(format!(
                "write {carrier} is a {}: only a Put or an Update can carry the idempotency record",
                super::table::operation_of(write)
            )));
        };
        let mut items = writes.to_vec();
        items[carrier] = carried;
        Ok(items)
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
            .condition_expression(joined(update.condition_expression()))
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| e.to_string())
    }

    /// `put` with the record's attributes on its item and its condition added.
    fn carrying_put(
        &self,
        record: &IdempotencyRecord,
        put: &Put,
        now_ms: i64,
    ) -> Result<Put, String> {
        let a = self.inline_attributes();
        let mut item = put.item().clone();
        for (_, name, value) in self.record_attributes(record) {
            match value {
                Some(value) => item.insert(name.to_owned(), value),
                None => item.remove(name),
            };
        }
        let mut names = put
            .expression_attribute_names()
            .cloned()
            .unwrap_or_default();
        let mut values = put
            .expression_attribute_values()
            .cloned()
            .unwrap_or_default();
        reserved(names.keys().chain(values.keys()))?;
        names.insert("#idem_status".into(), a.status.clone());
        names.insert("#idem_exp".into(), a.expiry.clone());
        values.insert(":idem_now_s".into(), n(now_ms.div_euclid(1000)));
        Put::builder()
            .table_name(put.table_name())
            .set_item(Some(item))
            .condition_expression(joined(put.condition_expression()))
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| e.to_string())
    }

    /// The record a refused carrier's item holds, when it is not replaceable at `now_ms` (its key
    /// set to `record.key`, the idempotency key); `None` when the item carries none, or one that
    /// has expired: then the carrier's own condition refused it.
    pub(super) fn carried_record(
        &self,
        record: &IdempotencyRecord,
        item: Option<&HashMap<String, AttributeValue>>,
        now_ms: i64,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let a = self.inline_attributes();
        let Some(item) = item.filter(|item| item.contains_key(&a.status)) else {
            return Ok(None);
        };
        let held = IdempotencyRecord {
            key: record.key.clone(),
            ..record_from(a, item)?
        };
        Ok((!held.is_replaceable(now_ms)).then_some(held))
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
fn joined(condition: Option<&str>) -> String {
    match condition {
        Some(condition) if !condition.trim().is_empty() => {
            format!("({condition}) AND {NO_LIVE_RECORD}")
        }
        _ => NO_LIVE_RECORD.to_owned(),
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
