use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};

use super::{Backend, Put, StoreError, Update};
use crate::record::{Record, Status, truncate_error};

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
        }
    }
}

/// Idempotency records in a DynamoDB table whose partition key is a string (`id` by default) and
/// whose TTL attribute is `expiration` (see [`Attributes`]).
///
/// Acquiring a key is one conditional `UpdateItem` with
/// `ReturnValuesOnConditionCheckFailure=ALL_OLD`: a duplicate costs that one request and no read.
/// (An update rather than a `PutItem`, so that the failed-attempt count and the last error survive
/// a new attempt.) Expiry is part of the condition: an expired record that the TTL sweeper has not
/// deleted yet is replaced, never honoured.
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
    client: Client,
    table: String,
    attributes: Attributes,
}

impl DynamoDbBackend {
    /// A backend on `table`, with the default attribute names.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
            attributes: Attributes::default(),
        }
    }

    /// Uses other attribute names.
    pub fn with_attributes(mut self, attributes: Attributes) -> Self {
        self.attributes = attributes;
        self
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
    fn names(&self, placeholders: &[&str]) -> HashMap<String, String> {
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
                    other => unreachable!("unknown placeholder {other}"),
                };
                (p.to_owned(), attribute.clone())
            })
            .collect()
    }

    fn key_value(&self, key: &str) -> HashMap<String, AttributeValue> {
        HashMap::from([(
            self.attributes.key.clone(),
            AttributeValue::S(key.to_owned()),
        )])
    }

    /// Reads an item as a record.
    pub fn record_from_item(
        &self,
        item: &HashMap<String, AttributeValue>,
    ) -> Result<Record, StoreError> {
        let a = &self.attributes;
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
        Ok(Record {
            status,
            expires_at: number(&a.expiry)?
                .ok_or_else(|| malformed(format!("no `{}` attribute", a.expiry)))?,
            lease_until_ms: number(&a.lease)?.unwrap_or(0),
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
}

fn request_error<E, R>(operation: &'static str, err: SdkError<E, R>) -> StoreError
where
    E: std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    // A service error by its code and message; anything else (timeout, connection refused) by
    // its whole chain of causes.
    let message = match err.code() {
        Some(code) => format!("{code}: {}", err.message().unwrap_or("no message")),
        None => DisplayErrorContext(&err).to_string(),
    };
    StoreError::Request {
        operation,
        message,
        source: Box::new(err),
    }
}

fn n(value: impl ToString) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

impl Backend for DynamoDbBackend {
    async fn put(&self, record: &Record, now_ms: i64) -> Result<Put, StoreError> {
        // Mirrors Record::is_replaceable_by.
        const CONDITION: &str = "attribute_not_exists(#key) OR #exp < :now_s \
             OR (#hash = :hash AND ((#status = :in_progress AND #lease < :now_ms) OR #status = :failed))";
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(self.key_value(&record.key)))
            .update_expression(
                "SET #status = :in_progress, #exp = :exp, #lease = :lease, #hash = :hash, \
                 #attempts = if_not_exists(#attempts, :zero) REMOVE #result, #omitted",
            )
            .condition_expression(CONDITION)
            .set_expression_attribute_names(Some(self.names(&[
                "#key",
                "#exp",
                "#hash",
                "#status",
                "#lease",
                "#attempts",
                "#result",
                "#omitted",
            ])))
            .expression_attribute_values(":in_progress", s(Status::InProgress.as_str()))
            .expression_attribute_values(":failed", s(Status::Failed.as_str()))
            .expression_attribute_values(":exp", n(record.expires_at))
            .expression_attribute_values(":lease", n(record.lease_until_ms))
            .expression_attribute_values(":hash", s(&record.payload_hash))
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":now_s", n(now_ms.div_euclid(1000)))
            .expression_attribute_values(":now_ms", n(now_ms))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(Put::Written),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                let UpdateItemError::ConditionalCheckFailedException(failed) = e.err() else {
                    unreachable!()
                };
                match failed.item() {
                    Some(item) => Ok(Put::Exists(self.record_from_item(item)?)),
                    None => Err(StoreError::Malformed {
                        key: record.key.clone(),
                        reason: "the conditional write failed but returned no item \
                                 (ReturnValuesOnConditionCheckFailure unsupported?)"
                            .into(),
                    }),
                }
            }
            Err(e) => Err(request_error("UpdateItem", e)),
        }
    }

    async fn get(&self, key: &str) -> Result<Option<Record>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(self.key_value(key)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| request_error("GetItem", e))?;
        output
            .item()
            .map(|item| self.record_from_item(item))
            .transpose()
    }

    async fn update(&self, key: &str, update: &Update) -> Result<(), StoreError> {
        let request = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(self.key_value(key)));
        let (request, placeholders): (_, &[&str]) = match update {
            Update::Complete {
                expires_at,
                result,
                result_omitted,
            } => {
                let request = request
                    .condition_expression("attribute_exists(#key)")
                    .expression_attribute_values(":status", s(Status::Completed.as_str()))
                    .expression_attribute_values(":exp", n(expires_at))
                    .expression_attribute_values(":omitted", AttributeValue::Bool(*result_omitted));
                let request = match result {
                    Some(result) => request
                        .update_expression("SET #status = :status, #exp = :exp, #omitted = :omitted, #result = :result")
                        .expression_attribute_values(":result", s(result)),
                    None => request.update_expression("SET #status = :status, #exp = :exp, #omitted = :omitted REMOVE #result"),
                };
                (request, &["#key", "#status", "#exp", "#omitted", "#result"])
            }
            Update::Fail { error } => {
                let request = request
                    .condition_expression("attribute_exists(#key) AND #status <> :completed")
                    .update_expression("SET #status = :failed, #err = :err ADD #attempts :one")
                    .expression_attribute_values(":failed", s(Status::Failed.as_str()))
                    .expression_attribute_values(":completed", s(Status::Completed.as_str()))
                    .expression_attribute_values(":err", s(&truncate_error(error)))
                    .expression_attribute_values(":one", n(1));
                (request, &["#key", "#status", "#attempts", "#err"])
            }
        };
        match request
            .set_expression_attribute_names(Some(self.names(placeholders)))
            .send()
            .await
        {
            Ok(_) => Ok(()),
            // The record is gone, or already completed by another attempt: nothing to change.
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                tracing::debug!(
                    key,
                    "idempotency record not updated: it is gone or already completed"
                );
                Ok(())
            }
            Err(e) => Err(request_error("UpdateItem", e)),
        }
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(self.key_value(key)))
            .send()
            .await
            .map_err(|e| request_error("DeleteItem", e))?;
        Ok(())
    }
}
