//! [`InlineBackend`] for [`DynamoDbBackend`]: the handler's one new item with the idempotency
//! record on it, in one conditional `PutItem`.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};

use super::table::{is_refusal, is_size_limit};
use super::transact_write_items::item_bytes;
use super::{DynamoDbBackend, n, record_from, request_error, s};
use crate::state::IdempotencyRecord;
use crate::store::{Commit, InlineBackend, LimitError, MAX_ITEM_BYTES, StoreError};

/// A new item of one of the handler's tables: what a handler returns in the
/// [inline mode](crate::inline) on DynamoDB. The engine adds the idempotency record's attributes
/// (named by [`DynamoDbBackend::inline_attributes`]) and writes it with one conditional
/// `PutItem`: only where the item does not exist. An item that exists is never rewritten: the
/// record it carries answers, whatever its expiry, and one without a record refuses the write.
///
/// ```
/// use aws_sdk_dynamodb::types::AttributeValue;
/// use lambda_idempotency::store::NewItem;
///
/// let entry = NewItem::new("ledger", "entryId", AttributeValue::S("p-1".into()))
///     .attribute("amountCents", AttributeValue::N("500".into()));
/// assert_eq!((entry.table(), entry.key_attribute()), ("ledger", "entryId"));
/// assert_eq!(entry.item().len(), 2);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct NewItem {
    table: String,
    key_attribute: String,
    item: HashMap<String, AttributeValue>,
}

impl NewItem {
    /// An item of `table` whose partition key attribute is `key_attribute`, holding `key`. (A
    /// sort key, if the table has one, is an [`attribute`](Self::attribute) like any other: the
    /// condition on the partition key alone is on the item the whole key names.)
    pub fn new(
        table: impl Into<String>,
        key_attribute: impl Into<String>,
        key: AttributeValue,
    ) -> Self {
        let key_attribute = key_attribute.into();
        Self {
            table: table.into(),
            item: HashMap::from([(key_attribute.clone(), key)]),
            key_attribute,
        }
    }

    /// Adds (or replaces) an attribute. The record's own attribute names
    /// ([`DynamoDbBackend::inline_attributes`]) are the engine's: a value set under one of them
    /// is overwritten.
    pub fn attribute(mut self, name: impl Into<String>, value: AttributeValue) -> Self {
        self.item.insert(name.into(), value);
        self
    }

    /// The table.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The partition key attribute's name.
    pub fn key_attribute(&self) -> &str {
        &self.key_attribute
    }

    /// The item's attributes, its key included.
    pub fn item(&self) -> &HashMap<String, AttributeValue> {
        &self.item
    }

    /// The write as an error names it: the table and the key's name (never a value).
    fn describe(&self) -> String {
        format!(
            "PutItem on table `{}` (key {})",
            self.table, self.key_attribute
        )
    }
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

    /// `item` with `record` on it: the completed record's status, expiry, payload hash, owner
    /// token, and its result when there is one.
    fn inline_item(
        &self,
        record: &IdempotencyRecord,
        item: &NewItem,
    ) -> HashMap<String, AttributeValue> {
        let mut attributes = item.item.clone();
        for (_, name, value) in self.record_attributes(record) {
            if let Some(value) = value {
                attributes.insert(name.to_owned(), value);
            }
        }
        attributes
    }

    /// What a refused inline write found on the item: its record, or no record at all.
    fn found(
        &self,
        record: &IdempotencyRecord,
        item: &NewItem,
        stored: Option<&HashMap<String, AttributeValue>>,
    ) -> Result<Commit, StoreError> {
        let a = self.inline_attributes();
        match stored {
            Some(stored) if stored.contains_key(&a.status) => {
                Ok(Commit::Exists(IdempotencyRecord {
                    key: record.key.clone(),
                    ..record_from(a, stored)?
                }))
            }
            Some(_) => Ok(Commit::Rejected {
                index: 0,
                write: item.describe(),
                code: "ConditionalCheckFailed".into(),
                message: "the item exists and carries no idempotency record".into(),
            }),
            None => Err(StoreError::Malformed {
                key: record.key.clone(),
                reason: "the inline write's condition failed but no item was returned \
                         (ReturnValuesOnConditionCheckFailure unsupported?)"
                    .into(),
            }),
        }
    }
}

impl InlineBackend for DynamoDbBackend {
    type Item = NewItem;

    fn check_item(&self, record: &IdempotencyRecord, item: &NewItem) -> Result<(), LimitError> {
        let bytes = item_bytes(&self.inline_item(record, item));
        if bytes > MAX_ITEM_BYTES {
            return Err(LimitError::ItemTooLarge {
                index: 0,
                write: item.describe(),
                bytes,
                max: MAX_ITEM_BYTES,
            });
        }
        Ok(())
    }

    async fn put_inline(
        &self,
        record: &IdempotencyRecord,
        item: &NewItem,
        _now_ms: i64,
    ) -> Result<Commit, StoreError> {
        // The transition `state::commit_on_item`: the item is written only where it does not
        // exist; the refusal returns it, and the record it carries (if any) answers.
        let result = self
            .client
            .put_item()
            .table_name(&item.table)
            .set_item(Some(self.inline_item(record, item)))
            .condition_expression("attribute_not_exists(#key)")
            .expression_attribute_names("#key", &item.key_attribute)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let e = match result {
            Ok(_) => return Ok(Commit::Committed),
            Err(SdkError::ServiceError(e)) => e,
            Err(e) => return Err(request_error("PutItem", e)),
        };
        match e.err() {
            PutItemError::ConditionalCheckFailedException(failed) => {
                self.found(record, item, failed.item())
            }
            PutItemError::TransactionConflictException(conflict) => Ok(Commit::Contended {
                reason: crate::redact::safe_reason(&format!(
                    "TransactionConflict: {}",
                    conflict
                        .message()
                        .unwrap_or("the item is in a running transaction")
                )),
            }),
            other
                if other.code().is_some_and(is_refusal)
                    || other.is_resource_not_found_exception() =>
            {
                let code = other.code().unwrap_or("ResourceNotFoundException");
                let message = crate::redact::safe_reason(other.message().unwrap_or("no message"));
                if is_size_limit(code, &message) {
                    // The message's own data: permanent.
                    return Ok(Commit::Rejected {
                        index: 0,
                        write: item.describe(),
                        code: code.to_owned(),
                        message,
                    });
                }
                // The item's table, or the code: never the message's fault.
                Err(StoreError::Misconfigured {
                    problem: format!(
                        "table `{}` refused the inline write ({}): {code}: {message}",
                        item.table,
                        item.describe()
                    ),
                    table: item.table.clone(),
                })
            }
            _ => Err(request_error("PutItem", SdkError::ServiceError(e))),
        }
    }
}
