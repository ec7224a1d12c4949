use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};

use super::{Attributes, Backend, Put, StoreError, Update, Updated, max_result_bytes};
use crate::state::{IdempotencyRecord, Status, truncate_error};

mod carried;
#[cfg(any(test, doc, feature = "test-util"))]
mod in_memory;
mod new_item;
mod single_write;
mod table;
mod transact_write_items;

pub use new_item::NewItem;
pub use table::TableCheck;

/// Idempotency records in a DynamoDB table whose partition key is a string (`id` by default) and
/// whose TTL attribute is `expiration` (see [`Attributes`]).
///
/// Acquiring a key is one conditional `UpdateItem` with
/// `ReturnValuesOnConditionCheckFailure=ALL_OLD`: a duplicate costs that one request and no read.
/// (An update rather than a `PutItem`, so that the failed-attempt count and the last error survive
/// a new attempt.) Expiry is part of the condition: an expired record that the TTL sweeper has not
/// deleted yet is replaced, never honoured.
///
/// A table that does not fit (missing, or keyed otherwise: see [`check_table`](Self::check_table),
/// the cold-start check) makes every request fail with [`StoreError::Misconfigured`], naming the
/// table and what does not match (one `DescribeTable` after the refusal tells what); any other
/// failure is [`StoreError::Request`]. Neither is ever the message's fault: a batch leaves the
/// record for redelivery.
///
/// ```no_run
/// # async fn example() {
/// use lambda_idempotency::{Idempotency, store::DynamoDbBackend};
///
/// let config = aws_config::load_from_env().await;
/// let backend = DynamoDbBackend::new(aws_sdk_dynamodb::Client::new(&config), "idempotency");
/// let store = Idempotency::new(backend).with_key_prefix("payment-processor");
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct DynamoDbBackend {
    pub(super) client: Client,
    table: String,
    attributes: Attributes,
    /// The record's attribute names on an item of the inline mode.
    inline_attributes: Attributes,
}

impl DynamoDbBackend {
    /// A backend on `table`, with the default attribute names.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
            attributes: Attributes::default(),
            inline_attributes: Attributes::inline(),
        }
    }

    /// Uses other attribute names.
    pub fn with_attributes(mut self, attributes: Attributes) -> Self {
        self.attributes = attributes;
        self
    }

    /// Uses other names for the record's attributes on the handler's items in the
    /// [inline mode](crate::inline) (default [`Attributes::inline`]; `key` is not read there: an
    /// item has its own key).
    pub fn with_inline_attributes(mut self, attributes: Attributes) -> Self {
        self.inline_attributes = attributes;
        self
    }

    /// The record's attribute names on the handler's items in the inline mode.
    pub fn inline_attributes(&self) -> &Attributes {
        &self.inline_attributes
    }

    /// The DynamoDB client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The attribute names.
    pub fn attributes(&self) -> &Attributes {
        &self.attributes
    }

    /// Expression attribute names for the placeholders an expression uses (DynamoDB rejects
    /// unused ones).
    pub(super) fn names(&self, placeholders: &[&str]) -> HashMap<String, String> {
        let a = &self.attributes;
        placeholders
            .iter()
            .map(|&p| {
                let attribute = match p {
                    "#key" => &a.key,
                    "#status" => &a.status,
                    "#exp" => &a.expiry,
                    "#lease" => &a.lease,
                    "#hash" => &a.payload_hash,
                    "#attempts" => &a.attempts,
                    "#err" => &a.last_error,
                    "#result" => &a.result,
                    "#omitted" => &a.result_omitted,
                    "#owner" => &a.owner,
                    other => unreachable!("unknown placeholder {other}"),
                };
                (p.to_owned(), attribute.clone())
            })
            .collect()
    }

    pub(super) fn key_value(&self, key: &str) -> HashMap<String, AttributeValue> {
        HashMap::from([(
            self.attributes.key.clone(),
            AttributeValue::S(key.to_owned()),
        )])
    }

    /// Reads an item as a record.
    pub(crate) fn record_from_item(
        &self,
        item: &HashMap<String, AttributeValue>,
    ) -> Result<IdempotencyRecord, StoreError> {
        record_from(&self.attributes, item)
    }
}

/// Reads an item as a record, under the attribute names `a`.
pub(super) fn record_from(
    a: &Attributes,
    item: &HashMap<String, AttributeValue>,
) -> Result<IdempotencyRecord, StoreError> {
    let key = item
        .get(&a.key)
        .and_then(|v| v.as_s().ok())
        .cloned()
        .unwrap_or_default();
    let malformed = |reason: String| StoreError::Malformed {
        key: key.clone(),
        reason,
    };
    let string = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
    let number = |name: &str| -> Result<Option<i64>, StoreError> {
        match item.get(name) {
            None => Ok(None),
            Some(AttributeValue::N(n)) => n
                .parse::<i64>()
                .map(Some)
                .map_err(|_| malformed(format!("`{name}` is not an integer: {n}"))),
            Some(other) => Err(malformed(format!("`{name}` is not a number: {other:?}"))),
        }
    };
    let status_text =
        string(&a.status).ok_or_else(|| malformed(format!("no `{}` attribute", a.status)))?;
    let status = Status::parse(&status_text)
        .ok_or_else(|| malformed(format!("unknown status `{status_text}`")))?;
    Ok(IdempotencyRecord {
        status,
        expires_at: number(&a.expiry)?
            .ok_or_else(|| malformed(format!("no `{}` attribute", a.expiry)))?,
        lease_until_ms: number(&a.lease)?,
        owner: string(&a.owner),
        payload_hash: string(&a.payload_hash).unwrap_or_default(),
        attempts: u32::try_from(number(&a.attempts)?.unwrap_or(0)).unwrap_or(u32::MAX),
        last_error: string(&a.last_error),
        result: string(&a.result),
        result_omitted: matches!(
            item.get(&a.result_omitted),
            Some(AttributeValue::Bool(true))
        ),
        key,
    })
}

pub(super) fn request_error<E, R>(operation: &'static str, err: SdkError<E, R>) -> StoreError
where
    E: std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    // A service error by its code and message; anything else (timeout, connection refused) by
    // its whole chain of causes.
    // Anything that looks like an item's value is cut (`crate::redact`): this text reaches logs
    // and stored errors.
    let message = crate::redact::safe_reason(&match err.code() {
        Some(code) => format!("{code}: {}", err.message().unwrap_or("no message")),
        None => DisplayErrorContext(&err).to_string(),
    });
    StoreError::Request {
        operation,
        message,
        source: Box::new(err),
    }
}

pub(super) fn n(value: impl ToString) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

pub(super) fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

/// True while an attempt's lease holds the record; states [`IdempotencyRecord::is_held`] (a missing lease
/// holds until the record expires). Every conditional write of a record is built on it.
pub(super) const HELD: &str = "(#status = :in_progress AND (#lease >= :now_ms \
     OR (attribute_not_exists(#lease) AND #exp >= :now_s)))";

impl DynamoDbBackend {
    /// One acquire: `fresh` chooses between taking over a live record of the same payload (keeps
    /// its attempts and last error) and replacing any other replaceable record, expired or of
    /// another payload (resets them): the transition [`state::acquire`](crate::state::acquire)
    /// ([`IdempotencyRecord::is_replaceable`] and [`IdempotencyRecord::carries_attempts_to`]) as
    /// conditions.
    async fn acquire(
        &self,
        record: &IdempotencyRecord,
        now_ms: i64,
        fresh: bool,
    ) -> Result<Put, StoreError> {
        let (condition, update) = if fresh {
            (
                format!(
                    "NOT {HELD} AND (#exp < :now_s \
                     OR (#status IN (:in_progress, :failed) AND #hash <> :hash))"
                ),
                "SET #status = :in_progress, #exp = :exp, #lease = :lease, #hash = :hash, \
                 #owner = :owner, #attempts = :zero REMOVE #result, #omitted, #err",
            )
        } else {
            (
                format!(
                    "attribute_not_exists(#key) OR (NOT {HELD} AND #exp >= :now_s AND #hash = :hash \
                     AND (#status = :in_progress OR #status = :failed))"
                ),
                "SET #status = :in_progress, #exp = :exp, #lease = :lease, #hash = :hash, \
                 #owner = :owner, #attempts = if_not_exists(#attempts, :zero) REMOVE #result, #omitted",
            )
        };
        let mut placeholders = vec![
            "#key",
            "#exp",
            "#hash",
            "#status",
            "#lease",
            "#attempts",
            "#result",
            "#omitted",
            "#owner",
        ];
        let mut request = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(self.key_value(&record.key)))
            .update_expression(update)
            .condition_expression(condition)
            .expression_attribute_values(":in_progress", s(Status::InProgress.as_str()))
            .expression_attribute_values(":exp", n(record.expires_at))
            .expression_attribute_values(
                ":lease",
                n(record.lease_until_ms.unwrap_or(record.expires_at * 1000)),
            )
            .expression_attribute_values(":hash", s(&record.payload_hash))
            .expression_attribute_values(":owner", s(record.owner.as_deref().unwrap_or_default()))
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":now_s", n(now_ms.div_euclid(1000)))
            .expression_attribute_values(":now_ms", n(now_ms))
            // Fresh: ALL_OLD, the record replaced (its attempts are 0 now). Else ALL_NEW: the
            // attempts are returned even when `if_not_exists` left them as they were.
            .return_values(if fresh {
                ReturnValue::AllOld
            } else {
                ReturnValue::AllNew
            })
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        if fresh {
            placeholders.retain(|p| *p != "#key");
            placeholders.push("#err");
        }
        request = request.expression_attribute_values(":failed", s(Status::Failed.as_str()));
        let result = request
            .set_expression_attribute_names(Some(self.names(&placeholders)))
            .send()
            .await;
        match result {
            Ok(output) if fresh => {
                let replaced = match output.attributes() {
                    Some(old) if !old.is_empty() => {
                        let old = self.record_from_item(old)?;
                        (!old.is_expired(now_ms)).then_some(old.payload_hash)
                    }
                    _ => None,
                };
                Ok(Put::Written {
                    attempts: 0,
                    replaced,
                })
            }
            Ok(output) => {
                let attempts = output
                    .attributes()
                    .and_then(|a| a.get(&self.attributes.attempts))
                    .and_then(|v| v.as_n().ok())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                Ok(Put::Written {
                    attempts,
                    replaced: None,
                })
            }
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                let UpdateItemError::ConditionalCheckFailedException(failed) = e.err() else {
                    unreachable!()
                };
                match failed.item() {
                    Some(item) => Ok(Put::Exists(self.record_from_item(item)?)),
                    None if fresh => Ok(Put::Exists(IdempotencyRecord {
                        // Deleted between the two requests: report it as held, to be retried.
                        status: Status::InProgress,
                        lease_until_ms: Some(now_ms),
                        ..record.clone()
                    })),
                    None => Err(StoreError::Malformed {
                        key: record.key.clone(),
                        reason: "the conditional write failed but returned no item \
                                 (ReturnValuesOnConditionCheckFailure unsupported?)"
                            .into(),
                    }),
                }
            }
            Err(e) => Err(self.store_error("UpdateItem", e).await),
        }
    }
}

impl Backend for DynamoDbBackend {
    async fn put(&self, record: &IdempotencyRecord, now_ms: i64) -> Result<Put, StoreError> {
        match self.acquire(record, now_ms, false).await? {
            Put::Exists(existing) if existing.is_replaceable(now_ms) => {
                // An expired record the TTL sweeper has not deleted yet (rare), or a failed
                // record of another payload (a corrected message): a second conditional write
                // replaces it and starts its attempts again.
                self.acquire(record, now_ms, true).await
            }
            other => Ok(other),
        }
    }

    async fn get(&self, key: &str, _now_ms: i64) -> Result<Option<IdempotencyRecord>, StoreError> {
        let output = match self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(self.key_value(key)))
            .consistent_read(true)
            .send()
            .await
        {
            Ok(output) => output,
            Err(e) => return Err(self.store_error("GetItem", e).await),
        };
        output
            .item()
            .map(|item| self.record_from_item(item))
            .transpose()
    }

    async fn update(
        &self,
        key: &str,
        update: &Update,
        _now_ms: i64,
    ) -> Result<Updated, StoreError> {
        let request = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(self.key_value(key)));
        // The transition `state::update`: a fenced update applies to the record its owner holds
        // (`IdempotencyRecord::is_owned_by`); a reset to a failed record.
        const HELD: &str = "#status = :in_progress AND #owner = :owner";
        let (request, placeholders): (_, &[&str]) = match update {
            Update::Complete {
                owner,
                expires_at,
                result,
                result_omitted,
                ..
            } => {
                let request = request
                    .condition_expression(HELD)
                    .expression_attribute_values(":in_progress", s(Status::InProgress.as_str()))
                    .expression_attribute_values(":owner", s(owner))
                    .expression_attribute_values(":status", s(Status::Completed.as_str()))
                    .expression_attribute_values(":exp", n(expires_at))
                    .expression_attribute_values(":omitted", AttributeValue::Bool(*result_omitted));
                let request = match result {
                    Some(result) => request
                        .update_expression("SET #status = :status, #exp = :exp, #omitted = :omitted, #result = :result")
                        .expression_attribute_values(":result", s(result)),
                    None => request.update_expression("SET #status = :status, #exp = :exp, #omitted = :omitted REMOVE #result"),
                };
                (
                    request,
                    &["#status", "#owner", "#exp", "#omitted", "#result"],
                )
            }
            Update::Fail {
                owner,
                error,
                counted,
            } => {
                let request = request
                    .condition_expression(HELD)
                    .update_expression("SET #status = :failed, #err = :err ADD #attempts :one")
                    .expression_attribute_values(":in_progress", s(Status::InProgress.as_str()))
                    .expression_attribute_values(":owner", s(owner))
                    .expression_attribute_values(":failed", s(Status::Failed.as_str()))
                    .expression_attribute_values(":err", s(&truncate_error(error)))
                    .expression_attribute_values(":one", n(u32::from(*counted)))
                    .return_values(ReturnValue::UpdatedNew);
                (request, &["#status", "#owner", "#attempts", "#err"])
            }
            Update::ResetAttempts => {
                let request = request
                    .condition_expression("#status = :failed")
                    .update_expression("SET #attempts = :zero")
                    .expression_attribute_values(":failed", s(Status::Failed.as_str()))
                    .expression_attribute_values(":zero", n(0));
                (request, &["#status", "#attempts"])
            }
        };
        match request
            .set_expression_attribute_names(Some(self.names(placeholders)))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await
        {
            Ok(output) => Ok(Updated::Applied {
                attempts: output
                    .attributes()
                    .and_then(|a| a.get(&self.attributes.attempts))
                    .and_then(|v| v.as_n().ok())
                    .and_then(|v| v.parse().ok()),
            }),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                let UpdateItemError::ConditionalCheckFailedException(failed) = e.err() else {
                    unreachable!()
                };
                // An earlier try of this very update was applied, and its answer lost.
                if let Some(item) = failed.item()
                    && let Ok(stored) = self.record_from_item(item)
                    && stored.shows_applied(update)
                {
                    return Ok(Updated::Applied {
                        attempts: Some(stored.attempts),
                    });
                }
                tracing::debug!(
                    key,
                    "idempotency record not updated: it is gone, completed, or held by another attempt"
                );
                Ok(Updated::NotApplied)
            }
            Err(e) => Err(self.store_error("UpdateItem", e).await),
        }
    }

    fn max_result_bytes(&self, key: &str) -> Option<usize> {
        Some(max_result_bytes(&self.attributes, key))
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        match self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(self.key_value(key)))
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => Err(self.store_error("DeleteItem", e).await),
        }
    }
}
