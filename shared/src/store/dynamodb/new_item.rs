//! [`NewItem`]: the handler's one new item in the [inline mode](crate::inline) on DynamoDB, a
//! `Put` on the condition that the item does not exist, carrying the idempotency record.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};

/// A new item of one of the handler's tables: what a handler returns in the
/// [inline mode](crate::inline) on DynamoDB. It is a `Put` on the condition that the item does not
/// exist (`attribute_not_exists` of its partition key: [`TransactWriteItem::from`]), which
/// carries the idempotency record: the engine adds the record's attributes (named by
/// [`DynamoDbBackend::inline_attributes`](crate::store::DynamoDbBackend::inline_attributes)) and writes it with one conditional `PutItem`. An item
/// that exists is never rewritten: the record it carries answers, whatever its expiry, and one
/// without a record refuses the write.
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
    sort_key_attribute: Option<String>,
    item: HashMap<String, AttributeValue>,
}

impl NewItem {
    /// An item of `table` whose partition key attribute is `key_attribute`, holding `key`. A
    /// table with a sort key takes it with [`sort_key`](Self::sort_key).
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
            sort_key_attribute: None,
        }
    }

    /// Sets the item's sort key, for a table keyed on a partition key and a sort key: the item is
    /// the one the two name together, and its condition (`attribute_not_exists` of the
    /// partition key) is on that item alone, so items that differ only by sort key are written
    /// one by one. Declared as the sort key (not as an [`attribute`](Self::attribute)), so that
    /// [`InMemoryBackend`](crate::store::InMemoryBackend) keys the item on both too.
    ///
    /// ```
    /// use aws_sdk_dynamodb::types::AttributeValue;
    /// use lambda_idempotency::store::NewItem;
    ///
    /// let line = NewItem::new("orders", "orderId", AttributeValue::S("o-1".into()))
    ///     .sort_key("line", AttributeValue::N("2".into()));
    /// assert_eq!(line.sort_key_attribute(), Some("line"));
    /// assert_eq!(line.item()["line"], AttributeValue::N("2".into()));
    /// ```
    pub fn sort_key(mut self, name: impl Into<String>, value: AttributeValue) -> Self {
        let name = name.into();
        self.item.insert(name.clone(), value);
        self.sort_key_attribute = Some(name);
        self
    }

    /// Adds (or replaces) an attribute. The record's own attribute names
    /// ([`DynamoDbBackend::inline_attributes`](crate::store::DynamoDbBackend::inline_attributes)) are the engine's: a value set under one of them
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

    /// The sort key attribute's name, when [`sort_key`](Self::sort_key) set one.
    pub fn sort_key_attribute(&self) -> Option<&str> {
        self.sort_key_attribute.as_deref()
    }

    /// The item's attributes, its key included.
    pub fn item(&self) -> &HashMap<String, AttributeValue> {
        &self.item
    }
}

/// The item's `Put`, on the condition that it does not exist: `attribute_not_exists` of its
/// partition key.
///
/// ```
/// use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem};
/// use lambda_idempotency::store::NewItem;
///
/// let entry = NewItem::new("ledger", "entryId", AttributeValue::S("p-1".into()));
/// let put = TransactWriteItem::from(entry).put.unwrap();
/// assert_eq!(put.table_name(), "ledger");
/// assert_eq!(put.condition_expression(), Some("attribute_not_exists(#key)"));
/// ```
impl From<NewItem> for TransactWriteItem {
    fn from(item: NewItem) -> Self {
        let put = Put::builder()
            .table_name(item.table)
            .set_item(Some(item.item))
            .condition_expression("attribute_not_exists(#key)")
            .expression_attribute_names("#key", item.key_attribute)
            .build()
            .expect("the table and the item are set");
        TransactWriteItem::builder().put(put).build()
    }
}

/// Why `write` is not the write of one new item that DynamoDB refuses once its item exists (what
/// an [`InlinePut`](crate::inline::InlinePut) must carry), or `None`: a `Put` whose condition is
/// `attribute_not_exists` of one of the attributes it writes, alone or joined by `AND` to
/// others. Anything else could run the work twice: an `Update` applies again once the record on
/// its item has expired, and a `Put` without that condition overwrites an item that carries no
/// record.
pub(super) fn new_item_problem(write: &TransactWriteItem) -> Option<String> {
    let Some(put) = write.put() else {
        return Some(format!(
            "an inline item must be a new item (a `NewItem`: a `Put` on `attribute_not_exists` \
             of its key), not {}: it would apply again once the record on its item expires",
            super::transact_write_items::describe(write)
        ));
    };
    let refuses = put.condition_expression().is_some_and(|condition| {
        // Without `OR` and `NOT`, every term is a conjunct: one `attribute_not_exists` of an
        // attribute the put writes refuses the put once the item exists.
        let keywords = condition
            .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .any(|word| word.eq_ignore_ascii_case("or") || word.eq_ignore_ascii_case("not"));
        let names = put.expression_attribute_names();
        !keywords
            && condition
                .split("attribute_not_exists(")
                .skip(1)
                .filter_map(|rest| rest.split_once(')').map(|(path, _)| path.trim()))
                .any(|path| {
                    let name = names
                        .and_then(|names| names.get(path))
                        .map_or(path, String::as_str);
                    put.item().contains_key(name)
                })
    });
    (!refuses).then(|| {
        format!(
            "an inline item must be a new item (a `NewItem`: a `Put` on `attribute_not_exists` \
             of its key), not {} with the condition {:?}: without it, the put overwrites an item \
             that carries no record",
            super::transact_write_items::describe(write),
            put.condition_expression().unwrap_or("(none)")
        )
    })
}
