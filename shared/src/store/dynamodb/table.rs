//! The idempotency table as DynamoDB describes it: the cold-start check
//! [`DynamoDbBackend::check_table`], and what a refused request says about the table.
//!
//! DynamoDB refuses a request that does not fit a table with the same `ValidationException` it
//! uses for data over a size limit; a table that does not exist is a
//! `ResourceNotFoundException`. Only the size limits are the message's fault (its data is too
//! large, on every try). Everything else is the configuration's or the code's, and
//! [`StoreError::Misconfigured`]: a retry cannot succeed until it is fixed, but the message is
//! not to blame, so it is left for redelivery and never dead-lettered.

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::{
    KeyType, ScalarAttributeType, TableDescription, TimeToLiveStatus, TransactWriteItem,
};

use super::request_error;
use super::{DynamoDbBackend, StoreError};

/// What [`DynamoDbBackend::check_table`] found that does not stop the backend from working.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableCheck {
    /// Each warning names the table; each is logged too.
    pub warnings: Vec<String>,
}

/// The codes of a DynamoDB refusal of a request or of one action of a transaction (as opposed
/// to a failure to run it: throttling, conflicts, an outage, access denied).
const REFUSALS: [&str; 3] = [
    "ValidationException",
    "ValidationError",
    "ResourceNotFoundException",
];

/// True when DynamoDB's `code` refuses the request itself: invalid for the table or for its
/// data, or naming a table that does not exist.
pub(super) fn is_refusal(code: &str) -> bool {
    REFUSALS.contains(&code)
}

/// True when DynamoDB's refusal (`code`, `message`) says that data of the request is over a size
/// limit: an item over 400 KB, a partition key over 2048 bytes, sort keys over 1024, an index key
/// over its limit. That is the message's fault when the data comes from it; every other
/// refusal (a key schema the request does not match, an expression, a missing table) is not.
///
/// Only what DynamoDB's messages say for these limits counts; an unknown message is not a size
/// limit (a wrong "permanent" loses the message to the dead-letter queue, a wrong "retry" only
/// delays it).
pub(super) fn is_size_limit(code: &str, message: &str) -> bool {
    const SIZE_LIMITS: [&str; 4] = [
        // "Item size has exceeded the maximum allowed size", "Item size to update has exceeded
        // the maximum allowed size"
        "item size",
        // "... Size of hashkey has exceeded the maximum size limit of 2048 bytes"
        "size of hashkey",
        // "... Aggregated size of all range keys has exceeded the size limit of 1024 bytes"
        "size of all range keys",
        // "The update expression attempted to update a secondary index key beyond allowed size
        // limits"
        "index key beyond allowed size",
    ];
    let message = message.to_ascii_lowercase();
    matches!(code, "ValidationException" | "ValidationError")
        && SIZE_LIMITS.iter().any(|limit| message.contains(limit))
}

/// The type of a key attribute, as the messages name it.
fn type_name(kind: Option<&ScalarAttributeType>) -> String {
    match kind {
        Some(ScalarAttributeType::S) => "S".into(),
        Some(ScalarAttributeType::N) => "N".into(),
        Some(ScalarAttributeType::B) => "B".into(),
        Some(other) => other.as_str().into(),
        None => "of no declared type".into(),
    }
}

impl DynamoDbBackend {
    /// Checks, at cold start, that the table fits this backend: it exists, its partition key is
    /// the string attribute [`Attributes::key`](crate::store::Attributes::key), and it has no sort key.
    /// One `DescribeTable` (the function's role needs `dynamodb:DescribeTable` on the table),
    /// and one `DescribeTimeToLive` for a warning when the table's TTL is not on
    /// [`Attributes::expiry`](crate::store::Attributes::expiry) (expired records are then never
    /// deleted; the backend ignores them, but they stay, and are billed). The TTL is read only
    /// for the warning: when it cannot be read (`dynamodb:DescribeTimeToLive` not granted, say),
    /// that is a warning too.
    ///
    /// A table that is missing or does not fit is [`StoreError::Misconfigured`], naming the
    /// table and what does not match: nothing can be processed until it is fixed, and a
    /// function should process nothing meanwhile (a [`Consumer`](crate::consumer::Consumer)
    /// fails each batch, which comes back whole; nothing is dead-lettered). Any other failure to
    /// describe it (`dynamodb:DescribeTable` denied, throttled, DynamoDB unreachable) is
    /// [`StoreError::Request`]: the check could not run, which says nothing against the table,
    /// so a function should warn and go on (a consumer does: see
    /// [`ColdStartChecks`](crate::consumer::ColdStartChecks)). Without the check a table that
    /// does not fit fails every record with the same [`StoreError::Misconfigured`], each left
    /// for redelivery.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), lambda_idempotency::store::StoreError> {
    /// use lambda_idempotency::store::DynamoDbBackend;
    ///
    /// let config = aws_config::load_from_env().await;
    /// let backend = DynamoDbBackend::new(aws_sdk_dynamodb::Client::new(&config), "idempotency");
    /// // "idempotency store: table `idempotency` does not fit the backend: its partition key is
    /// // `pk` (S), but the backend writes `id` (S)"
    /// backend.check_table().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn check_table(&self) -> Result<TableCheck, StoreError> {
        if let Some(problem) = self.table_problem().await? {
            return Err(StoreError::Misconfigured {
                table: self.table().to_owned(),
                problem,
            });
        }
        let mut check = TableCheck::default();
        let table = self.table();
        let expiry = &self.attributes().expiry;
        let never_deleted = "expired records are never deleted (the backend ignores them, but \
                             they stay, and are billed)";
        match self
            .client
            .describe_time_to_live()
            .table_name(table)
            .send()
            .await
        {
            Ok(output) => {
                let ttl = output.time_to_live_description();
                let status = ttl.and_then(|t| t.time_to_live_status());
                let attribute = ttl.and_then(|t| t.attribute_name());
                let on = matches!(
                    status,
                    Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling)
                );
                match (on, attribute) {
                    (true, Some(a)) if a == expiry => {}
                    (true, Some(a)) => check.warnings.push(format!(
                        "table `{table}`'s TTL attribute is `{a}`, but the backend writes the \
                         expiry to `{expiry}`: {never_deleted}"
                    )),
                    _ => check.warnings.push(format!(
                        "table `{table}` has no TTL on `{expiry}`: {never_deleted}"
                    )),
                }
            }
            Err(e) => check.warnings.push(format!(
                "could not read table `{table}`'s TTL: {}",
                request_error("DescribeTimeToLive", e)
            )),
        }
        for warning in &check.warnings {
            tracing::warn!(table, "{warning}");
        }
        Ok(check)
    }

    /// What does not fit between the table and the backend (one `DescribeTable`): `None` when
    /// it fits, the problem (naming the table) when it does not or does not exist.
    async fn table_problem(&self) -> Result<Option<String>, StoreError> {
        let table = self.table();
        match self.client.describe_table().table_name(table).send().await {
            Ok(output) => Ok(output
                .table()
                .and_then(|description| self.schema_problem(description))),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_resource_not_found_exception()) =>
            {
                Ok(Some(format!(
                    "table `{table}` does not exist (in this account and region)"
                )))
            }
            Err(e) => Err(request_error("DescribeTable", e)),
        }
    }

    /// What does not match between a table's key schema and the items this backend writes.
    fn schema_problem(&self, description: &TableDescription) -> Option<String> {
        let table = self.table();
        let key = &self.attributes().key;
        let type_of = |name: &str| {
            type_name(
                description
                    .attribute_definitions()
                    .iter()
                    .find(|d| d.attribute_name() == name)
                    .map(|d| d.attribute_type()),
            )
        };
        let mut problems = Vec::new();
        let schema = description.key_schema();
        match schema.iter().find(|k| k.key_type() == &KeyType::Hash) {
            Some(hash) if hash.attribute_name() != key => problems.push(format!(
                "its partition key is `{}` ({}), but the backend writes `{key}` (S)",
                hash.attribute_name(),
                type_of(hash.attribute_name())
            )),
            Some(hash) if type_of(key) != "S" => problems.push(format!(
                "its partition key `{key}` is of type {}, but the backend writes a string (S)",
                type_of(hash.attribute_name())
            )),
            Some(_) => {}
            None => problems.push(format!(
                "it has no partition key, but the backend writes `{key}` (S)"
            )),
        }
        if let Some(range) = schema.iter().find(|k| k.key_type() == &KeyType::Range) {
            problems.push(format!(
                "it has a sort key `{}` ({}), but the backend writes the partition key `{key}` only",
                range.attribute_name(),
                type_of(range.attribute_name())
            ));
        }
        (!problems.is_empty()).then(|| {
            format!(
                "table `{table}` does not fit the backend: {}",
                problems.join("; ")
            )
        })
    }

    /// The error for a failed request on the table (`GetItem`, `UpdateItem`, `DeleteItem`).
    /// A refusal (a `ValidationException`, a missing table) is checked against the table, with
    /// one `DescribeTable`: [`StoreError::Misconfigured`] when the table does not fit, naming
    /// what does not match. Any other failure, or a refusal of a table that fits, is
    /// [`StoreError::Request`].
    pub(super) async fn store_error<E, R>(
        &self,
        operation: &'static str,
        err: SdkError<E, R>,
    ) -> StoreError
    where
        E: std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
        R: std::fmt::Debug + Send + Sync + 'static,
    {
        let Some(code) = err.code().filter(|c| is_refusal(c)).map(str::to_owned) else {
            return request_error(operation, err);
        };
        let said = crate::redact::safe_reason(&format!(
            "{code}: {}",
            err.message().unwrap_or("no message")
        ));
        let table = self.table().to_owned();
        match self.table_problem().await {
            Ok(Some(problem)) => StoreError::Misconfigured { table, problem },
            Ok(None) => request_error(operation, err),
            Err(describe) => StoreError::Misconfigured {
                problem: format!(
                    "table `{table}` refused {operation}: {said} (and it could not be \
                     described: {describe})"
                ),
                table,
            },
        }
    }

    /// The error for a `TransactWriteItems` refused as a whole (a `ValidationException` that is
    /// not about size, or a missing table), which does not say which of its tables refused it:
    /// the idempotency table when it does not fit (one `DescribeTable`), otherwise the tables of
    /// the handler's writes.
    pub(super) async fn transaction_refused(
        &self,
        writes: &[TransactWriteItem],
        code: &str,
        message: &str,
    ) -> StoreError {
        let idempotency = self.table();
        let said = crate::redact::safe_reason(&format!(
            "TransactWriteItems was refused: {code}: {message}"
        ));
        let mut tables: Vec<&str> = writes.iter().filter_map(table_of).collect();
        tables.sort_unstable();
        tables.dedup();
        let named = |tables: &[&str]| {
            tables
                .iter()
                .map(|t| format!("`{t}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self.table_problem().await {
            Ok(Some(problem)) => StoreError::Misconfigured {
                table: idempotency.to_owned(),
                problem: format!("{problem} ({said})"),
            },
            Ok(None) if !tables.is_empty() => StoreError::Misconfigured {
                problem: format!(
                    "{said}. The idempotency table `{idempotency}` fits the backend: a write of \
                     the handler does not fit its table (of {}), or is invalid",
                    named(&tables)
                ),
                table: tables.join(", "),
            },
            Ok(None) => StoreError::Misconfigured {
                table: idempotency.to_owned(),
                problem: format!("{said} (the table `{idempotency}` fits the backend)"),
            },
            Err(describe) => {
                tables.push(idempotency);
                tables.sort_unstable();
                tables.dedup();
                StoreError::Misconfigured {
                    problem: format!(
                        "{said} (by one of {}; the idempotency table could not be described: \
                         {describe})",
                        named(&tables)
                    ),
                    table: tables.join(", "),
                }
            }
        }
    }

    /// The error for one action of a transaction refused for a reason that is not the
    /// message's fault (`index` 0 is the idempotency record, then the handler's writes).
    pub(super) async fn action_refused(
        &self,
        writes: &[TransactWriteItem],
        index: usize,
        code: &str,
        message: &str,
    ) -> StoreError {
        if index == 0 {
            let table = self.table().to_owned();
            let said = format!(
                "table `{table}` refused the idempotency record's write: {code}: {message}"
            );
            return match self.table_problem().await {
                Ok(Some(problem)) => StoreError::Misconfigured {
                    table,
                    problem: format!("{problem} ({said})"),
                },
                _ => StoreError::Misconfigured {
                    table,
                    problem: said,
                },
            };
        }
        let write = writes.get(index - 1);
        let table = write.and_then(table_of).unwrap_or("?").to_owned();
        let operation = write.map_or("an action", operation_of);
        StoreError::Misconfigured {
            problem: format!(
                "table `{table}` refused write {} of the transaction ({operation}): {code}: \
                 {message}",
                index - 1
            ),
            table,
        }
    }
}

/// The table of a transaction's action.
pub(super) fn table_of(write: &TransactWriteItem) -> Option<&str> {
    if let Some(p) = write.put() {
        Some(p.table_name())
    } else if let Some(u) = write.update() {
        Some(u.table_name())
    } else if let Some(d) = write.delete() {
        Some(d.table_name())
    } else {
        write.condition_check().map(|c| c.table_name())
    }
}

/// The kind of a transaction's action.
pub(super) fn operation_of(write: &TransactWriteItem) -> &'static str {
    if write.put().is_some() {
        "Put"
    } else if write.update().is_some() {
        "Update"
    } else if write.delete().is_some() {
        "Delete"
    } else if write.condition_check().is_some() {
        "ConditionCheck"
    } else {
        "an empty action"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_dynamodbs_size_limits_are_size_limits() {
        for message in [
            "Item size has exceeded the maximum allowed size",
            "Item size to update has exceeded the maximum allowed size",
            "One or more parameter values were invalid: Size of hashkey has exceeded the maximum \
             size limit of2048 bytes",
            "One or more parameter values were invalid: Aggregated size of all range keys has \
             exceeded the size limit of 1024 bytes",
            "The update expression attempted to update a secondary index key beyond allowed size \
             limits",
        ] {
            assert!(is_size_limit("ValidationException", message), "{message}");
            assert!(is_size_limit("ValidationError", message), "{message}");
            assert!(!is_size_limit("TransactionConflict", message), "{message}");
        }
        for message in [
            "The provided key element does not match the schema",
            "One or more parameter values were invalid: Missing the key id in the item",
            "One or more parameter values were invalid: Type mismatch for key id expected: N \
             actual: S",
            "Transaction request cannot include multiple operations on one item",
            "Requested resource not found",
            "Validation Exception",
            "Collection size exceeded.",
        ] {
            assert!(!is_size_limit("ValidationException", message), "{message}");
        }
    }
}
