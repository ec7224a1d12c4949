//! [`TransactionalBackend`] for [`DynamoDbBackend`]: the record and the handler's writes in one
//! `TransactWriteItems`.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, Put as PutAction, ReturnValue,
    ReturnValuesOnConditionCheckFailure, TransactWriteItem,
};

use super::table::{is_refusal, is_size_limit, operation_of, table_of};
use super::{DynamoDbBackend, HELD, n, request_error, s};
use crate::state::{IdempotencyRecord, Status, truncate_error};
use crate::store::{
    Commit, Failure, LimitError, MAX_ITEM_BYTES, MAX_TRANSACTION_ACTIONS, MAX_TRANSACTION_BYTES,
    StoreError, TransactionalBackend,
};

/// Cancellation codes that say the transaction could not run now, and may run if tried again.
const CONTENDED: [&str; 4] = [
    "TransactionConflict",
    "ThrottlingError",
    "ProvisionedThroughputExceeded",
    "RequestLimitExceeded",
];

/// The condition under which a commit writes its record: the transition
/// [`state::commit`](crate::state::commit) ([`IdempotencyRecord::is_replaceable`]).
pub(super) fn replaceable() -> String {
    format!(
        "attribute_not_exists(#key) OR (NOT {HELD} \
         AND (#exp < :now_s OR #status IN (:in_progress, :failed)))"
    )
}

impl DynamoDbBackend {
    /// `record` as an item of the table.
    fn record_item(&self, record: &IdempotencyRecord) -> HashMap<String, AttributeValue> {
        let a = self.attributes();
        let mut item = HashMap::from([
            (a.key.clone(), s(&record.key)),
            (a.status.clone(), s(record.status.as_str())),
            (a.expiry.clone(), n(record.expires_at)),
            (a.payload_hash.clone(), s(&record.payload_hash)),
            (a.attempts.clone(), n(record.attempts)),
            (
                a.result_omitted.clone(),
                AttributeValue::Bool(record.result_omitted),
            ),
        ]);
        let optional = [
            (&a.lease, record.lease_until_ms.map(n)),
            (&a.owner, record.owner.as_deref().map(s)),
            (&a.result, record.result.as_deref().map(s)),
            (&a.last_error, record.last_error.as_deref().map(s)),
        ];
        for (name, value) in optional {
            if let Some(value) = value {
                item.insert(name.clone(), value);
            }
        }
        item
    }

    /// The conditional put of a commit's record.
    fn record_put(&self, record: &IdempotencyRecord, now_ms: i64) -> TransactWriteItem {
        let put = PutAction::builder()
            .table_name(self.table())
            .set_item(Some(self.record_item(record)))
            .condition_expression(replaceable())
            .set_expression_attribute_names(Some(
                self.names(&["#key", "#status", "#lease", "#exp"]),
            ))
            .expression_attribute_values(":in_progress", s(Status::InProgress.as_str()))
            .expression_attribute_values(":failed", s(Status::Failed.as_str()))
            .expression_attribute_values(":now_ms", n(now_ms))
            .expression_attribute_values(":now_s", n(now_ms.div_euclid(1000)))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .expect("table, item and condition are set");
        TransactWriteItem::builder().put(put).build()
    }

    /// Reads the cancellation reasons of a commit: the record's first (index 0), then the
    /// handler's writes.
    ///
    /// In this order: the record's own condition failed ([`Commit::Exists`]); the transaction
    /// met another or throttling ([`Commit::Contended`]); an action refused for a reason that is
    /// not the message's ([`StoreError::Misconfigured`]: a key schema, a type, an expression, a
    /// missing table, an unknown code); an item over DynamoDB's size limit ([`Commit::TooLarge`]
    /// for the record, [`Commit::Rejected`] for a write); a write's own condition
    /// ([`Commit::Rejected`]).
    ///
    /// With the record carried by a write ([`RecordAt::On`]), the writes are the actions from
    /// index 0, and the carrier's refusal is [`Commit::Exists`] when the item it returns carries
    /// a record that answers for the key ([`carried_record`](Self::carried_record): any record
    /// on a `Put`'s item), a [`Commit::Rejected`] of the carrier otherwise (its own condition).
    ///
    /// Before the rest, a write refused by its own condition whose item (returned with
    /// `ALL_OLD`, which every write asks for) carries a live record of `record`'s payload is
    /// [`Commit::Exists`]: the work was done by a write whose record rode on that item (the key
    /// completed inline, or carried, before this mode took it over).
    pub(super) async fn cancelled(
        &self,
        record: &IdempotencyRecord,
        writes: &[TransactWriteItem],
        reasons: &[CancellationReason],
        at: RecordAt,
        now_ms: i64,
    ) -> Result<Commit, StoreError> {
        let code = |r: &CancellationReason| r.code().unwrap_or("None").to_owned();
        // Anything that looks like an item's value is cut (`crate::redact`): this text reaches
        // logs, stored errors and dead-letter copies.
        let message = |r: &CancellationReason| {
            crate::redact::safe_reason(r.message().unwrap_or("no message"))
        };
        let first_write = match at {
            RecordAt::First => 1,
            RecordAt::On(carrier) => {
                let whole = writes.get(carrier).is_some_and(|w| w.put().is_some());
                if let Some(refused) = reasons.get(carrier)
                    && refused.code() == Some("ConditionalCheckFailed")
                    && let Some(held) =
                        self.carried_record(record, refused.item(), whole, now_ms)?
                {
                    return Ok(Commit::Exists(held));
                }
                0
            }
        };
        for refused in reasons.iter().skip(first_write) {
            if refused.code() == Some("ConditionalCheckFailed")
                && let Some(done) = self.record_on(&record.key, refused.item())?
                && !done.is_expired(now_ms)
                && done.payload_hash == record.payload_hash
            {
                return Ok(Commit::Exists(done));
            }
        }
        if first_write == 1
            && let Some(first) = reasons.first()
            && first.code() == Some("ConditionalCheckFailed")
        {
            return match first.item() {
                Some(item) => Ok(Commit::Exists(self.record_from_item(item)?)),
                None => Err(StoreError::Malformed {
                    key: record.key.clone(),
                    reason: "the record's condition failed but no item was returned \
                             (ReturnValuesOnConditionCheckFailure unsupported?)"
                        .into(),
                }),
            };
        }
        if let Some(r) = reasons
            .iter()
            .find(|r| CONTENDED.contains(&r.code().unwrap_or_default()))
        {
            return Ok(Commit::Contended {
                reason: format!("{}: {}", code(r), message(r)),
            });
        }
        let refused: Vec<(usize, &CancellationReason)> = reasons
            .iter()
            .enumerate()
            .filter(|(_, r)| r.code().is_some_and(|c| c != "None"))
            .collect();
        // Neither the write's own condition nor its data over a size limit: not the message.
        if let Some(&(i, r)) = refused.iter().find(|(_, r)| {
            r.code() != Some("ConditionalCheckFailed") && !is_size_limit(&code(r), &message(r))
        }) {
            return Err(self
                .action_refused(writes, i + 1 - first_write, &code(r), &message(r))
                .await);
        }
        let first = refused
            .iter()
            .find(|(_, r)| r.code() != Some("ConditionalCheckFailed"))
            .or(refused.first());
        match first {
            Some(&(0, r)) if first_write == 1 => Ok(Commit::TooLarge {
                message: format!("the idempotency record: {}: {}", code(r), message(r)),
            }),
            Some(&(i, r)) => Ok(Commit::Rejected {
                index: i - first_write,
                write: writes
                    .get(i - first_write)
                    .map(describe)
                    .unwrap_or_default(),
                code: code(r),
                message: message(r),
            }),
            None => Err(StoreError::Malformed {
                key: record.key.clone(),
                reason: format!(
                    "the transaction was cancelled without a reason for any action: {:?}",
                    reasons.iter().map(code).collect::<Vec<_>>()
                ),
            }),
        }
    }

    /// One failure update: `fresh` chooses between a live record of the same payload (its
    /// attempts go up by one) and any other replaceable record, expired or of another payload
    /// (they start again at 1): the transition [`state::record_failure`](crate::state::record_failure)
    /// ([`IdempotencyRecord::is_replaceable`] and [`IdempotencyRecord::carries_attempts_to`]).
    ///
    /// Fenced by the attempt's owner token: a record this attempt's failure wrote already (an
    /// SDK retry of this request, whose first answer was lost) refuses the update, and its
    /// refusal ([`IdempotencyRecord::shows_failure_of`]) answers with the stored count.
    async fn fail_once(
        &self,
        record: &IdempotencyRecord,
        now_ms: i64,
        fresh: bool,
    ) -> Result<Option<Failure>, StoreError> {
        let (condition, attempts) = if fresh {
            (
                format!(
                    "NOT {HELD} AND (#exp < :now_s \
                     OR (#status IN (:in_progress, :failed) AND #hash <> :hash))"
                ),
                "#attempts = :one",
            )
        } else {
            (
                format!(
                    "attribute_not_exists(#key) OR (NOT {HELD} AND #exp >= :now_s \
                     AND #hash = :hash AND #status <> :completed \
                     AND NOT (#status = :failed AND #owner = :owner))"
                ),
                "#attempts = if_not_exists(#attempts, :zero) + :one",
            )
        };
        let mut placeholders = vec![
            "#status",
            "#lease",
            "#exp",
            "#hash",
            "#attempts",
            "#err",
            "#owner",
            "#result",
            "#omitted",
        ];
        if !fresh {
            placeholders.push("#key");
        }
        let mut request = self
            .client
            .update_item()
            .table_name(self.table())
            .set_key(Some(self.key_value(&record.key)))
            .condition_expression(condition)
            .update_expression(format!(
                "SET #status = :failed, #err = :err, #exp = :exp, #hash = :hash, \
                 #owner = :owner, {attempts} REMOVE #lease, #result, #omitted"
            ))
            .set_expression_attribute_names(Some(self.names(&placeholders)))
            .expression_attribute_values(":in_progress", s(Status::InProgress.as_str()))
            .expression_attribute_values(":failed", s(Status::Failed.as_str()))
            .expression_attribute_values(
                ":err",
                s(&truncate_error(
                    record.last_error.as_deref().unwrap_or("failed"),
                )),
            )
            .expression_attribute_values(":exp", n(record.expires_at))
            .expression_attribute_values(":hash", s(&record.payload_hash))
            .expression_attribute_values(":owner", s(record.owner.as_deref().unwrap_or_default()))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":now_ms", n(now_ms))
            .expression_attribute_values(":now_s", n(now_ms.div_euclid(1000)))
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        if !fresh {
            request = request
                .expression_attribute_values(":completed", s(Status::Completed.as_str()))
                .expression_attribute_values(":zero", n(0));
        }
        let result = request.send().await;
        match result {
            Ok(output) => Ok(Some(Failure::Recorded {
                attempts: output
                    .attributes()
                    .and_then(|a| a.get(&self.attributes().attempts))
                    .and_then(|v| v.as_n().ok())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(1),
            })),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                let UpdateItemError::ConditionalCheckFailedException(failed) = e.err() else {
                    unreachable!()
                };
                match failed.item().map(|item| self.record_from_item(item)) {
                    // This attempt's failure, recorded by an earlier try: counted once.
                    Some(Ok(stored)) if stored.shows_failure_of(record.owner.as_deref()) => {
                        Ok(Some(Failure::Recorded {
                            attempts: stored.attempts,
                        }))
                    }
                    Some(stored) => Ok(Some(Failure::Exists(stored?))),
                    // Deleted between the two requests.
                    None => Ok(None),
                }
            }
            Err(e) => Err(self.store_error("UpdateItem", e).await),
        }
    }
}

impl TransactionalBackend for DynamoDbBackend {
    type Write = TransactWriteItem;

    fn check(
        &self,
        record: &IdempotencyRecord,
        writes: &[TransactWriteItem],
        carrier: Option<usize>,
    ) -> Result<(), LimitError> {
        let actions = writes.len() + usize::from(carrier.is_none());
        if actions > MAX_TRANSACTION_ACTIONS {
            return Err(LimitError::TooManyActions {
                actions,
                max: MAX_TRANSACTION_ACTIONS,
            });
        }
        let mut bytes = match carrier {
            None => item_bytes(&self.record_item(record)),
            Some(_) => 0,
        };
        for (index, write) in writes.iter().enumerate() {
            let mut item = write_bytes(write);
            if carrier == Some(index) {
                item += self.carried_bytes(record);
            }
            if item > MAX_ITEM_BYTES {
                return Err(LimitError::ItemTooLarge {
                    index,
                    write: describe(write),
                    bytes: item,
                    max: MAX_ITEM_BYTES,
                });
            }
            bytes += item;
        }
        if bytes > MAX_TRANSACTION_BYTES {
            return Err(LimitError::TooLarge {
                bytes,
                max: MAX_TRANSACTION_BYTES,
            });
        }
        Ok(())
    }

    async fn commit(
        &self,
        record: &IdempotencyRecord,
        writes: &[TransactWriteItem],
        token: &str,
        now_ms: i64,
    ) -> Result<Commit, StoreError> {
        let mut items = Vec::with_capacity(writes.len() + 1);
        items.push(self.record_put(record, now_ms));
        items.extend(writes.iter().map(returning_old_item));
        self.transact(record, writes, items, RecordAt::First, token, now_ms)
            .await
    }

    async fn commit_carried(
        &self,
        record: &IdempotencyRecord,
        writes: &[TransactWriteItem],
        carrier: usize,
        token: &str,
        now_ms: i64,
    ) -> Result<Commit, StoreError> {
        if let [only] = writes {
            // The inline mode: one write, atomic by itself, for the item's write units alone.
            return self.write_one(record, only, carrier, now_ms).await;
        }
        let items = self.carrying(record, writes, carrier, now_ms)?;
        let items = items.iter().map(returning_old_item).collect();
        self.transact(record, writes, items, RecordAt::On(carrier), token, now_ms)
            .await
    }

    async fn record_failure(
        &self,
        record: &IdempotencyRecord,
        now_ms: i64,
    ) -> Result<Failure, StoreError> {
        // The update of a live record of this payload; of any other replaceable record
        // (attempts start again); and, should that one be deleted between the two, the first
        // update once more (it now finds none).
        for fresh in [false, true, false] {
            match self.fail_once(record, now_ms, fresh).await? {
                Some(Failure::Exists(existing)) if !fresh && existing.is_replaceable(now_ms) => {}
                Some(failure) => return Ok(failure),
                None => {}
            }
        }
        Err(StoreError::Malformed {
            key: record.key.clone(),
            reason: "the record changed under every try to record a failure".into(),
        })
    }

    fn new_item_problem(&self, write: &TransactWriteItem) -> Option<String> {
        super::new_item::new_item_problem(write)
    }

    async fn record_on_item(
        &self,
        key: &str,
        at: &TransactWriteItem,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.read_carried(key, at).await
    }
}

/// Where a commit's record is among the actions of its transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RecordAt {
    /// An action of its own, the first; the writes follow it.
    First,
    /// On the write at this index of the writes, which are the actions.
    On(usize),
}

impl DynamoDbBackend {
    /// Sends `items`, the actions of a commit of `record` with `writes`, and reads the answer.
    async fn transact(
        &self,
        record: &IdempotencyRecord,
        writes: &[TransactWriteItem],
        items: Vec<TransactWriteItem>,
        at: RecordAt,
        token: &str,
        now_ms: i64,
    ) -> Result<Commit, StoreError> {
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .client_request_token(token)
            .send()
            .await;
        match result {
            Ok(_) => Ok(Commit::Committed),
            Err(SdkError::ServiceError(e)) => match e.err() {
                TransactWriteItemsError::TransactionCanceledException(cancelled) => {
                    self.cancelled(record, writes, cancelled.cancellation_reasons(), at, now_ms)
                        .await
                }
                TransactWriteItemsError::TransactionInProgressException(_) => {
                    Ok(Commit::Contended {
                        reason: "TransactionInProgress: a try with this token is still running"
                            .into(),
                    })
                }
                // Refused as a whole before any action ran: for the size of the message's
                // data (permanent), or for a table or the code (not the message: retried by
                // redelivery once fixed).
                other
                    if other.code().is_some_and(is_refusal)
                        || other.is_resource_not_found_exception() =>
                {
                    let code = other.code().unwrap_or("ResourceNotFoundException");
                    let message = other.message().unwrap_or("no message");
                    if is_size_limit(code, message) {
                        Ok(Commit::TooLarge {
                            message: crate::redact::safe_reason(&format!("{code}: {message}")),
                        })
                    } else {
                        Err(self.transaction_refused(writes, code, message).await)
                    }
                }
                _ => Err(request_error(
                    "TransactWriteItems",
                    SdkError::ServiceError(e),
                )),
            },
            Err(e) => Err(request_error("TransactWriteItems", e)),
        }
    }
}

/// `write`, its refusal by its own condition returning the item (`ALL_OLD`, at no cost): an item
/// that carries a record of this work answers the commit ([`DynamoDbBackend::cancelled`]).
fn returning_old_item(write: &TransactWriteItem) -> TransactWriteItem {
    let old = Some(ReturnValuesOnConditionCheckFailure::AllOld);
    let mut write = write.clone();
    if let Some(put) = &mut write.put {
        put.return_values_on_condition_check_failure = old;
    } else if let Some(update) = &mut write.update {
        update.return_values_on_condition_check_failure = old;
    } else if let Some(delete) = &mut write.delete {
        delete.return_values_on_condition_check_failure = old;
    } else if let Some(check) = &mut write.condition_check {
        check.return_values_on_condition_check_failure = old;
    }
    write
}

/// A write as an error names it: operation, table and the names (never the values) of its key or
/// item attributes.
pub(crate) fn describe(write: &TransactWriteItem) -> String {
    // Attribute names only: an item's values may be personal data, and this text reaches logs,
    // stored errors and dead-letter copies.
    let operation = operation_of(write);
    let Some(table) = table_of(write) else {
        return operation.to_owned();
    };
    let (what, mut names): (&str, Vec<&str>) = match write.put() {
        Some(p) => ("attributes", p.item().keys().map(String::as_str).collect()),
        None => (
            "key",
            key_of(write)
                .into_iter()
                .flat_map(HashMap::keys)
                .map(String::as_str)
                .collect(),
        ),
    };
    if names.is_empty() {
        return format!("{operation} on table `{table}`");
    }
    names.sort_unstable();
    let more = names.len().saturating_sub(6);
    names.truncate(6);
    let more = if more > 0 {
        format!(", and {more} more")
    } else {
        String::new()
    };
    format!(
        "{operation} on table `{table}` ({what} {}{more})",
        names.join(", ")
    )
}

/// The key of an update, a delete or a condition check.
fn key_of(write: &TransactWriteItem) -> Option<&HashMap<String, AttributeValue>> {
    if let Some(u) = write.update() {
        Some(u.key())
    } else if let Some(d) = write.delete() {
        Some(d.key())
    } else {
        write.condition_check().map(|c| c.key())
    }
}

/// The bytes of a write's item as far as the request shows them: a put's whole item; an
/// update's key and new values; a delete's or a check's key.
fn write_bytes(write: &TransactWriteItem) -> usize {
    match write.put() {
        Some(p) => item_bytes(p.item()),
        None => {
            key_of(write).map_or(0, item_bytes)
                + write
                    .update()
                    .and_then(|u| u.expression_attribute_values())
                    .map_or(0, values_bytes)
        }
    }
}

/// An item's size as DynamoDB counts it: each attribute's name and value.
pub(crate) fn item_bytes(item: &HashMap<String, AttributeValue>) -> usize {
    item.iter().map(|(k, v)| k.len() + value_bytes(v)).sum()
}

fn values_bytes(values: &HashMap<String, AttributeValue>) -> usize {
    values.values().map(value_bytes).sum()
}

/// A value's size as DynamoDB counts it (numbers at their text length, an upper bound).
pub(super) fn value_bytes(value: &AttributeValue) -> usize {
    match value {
        AttributeValue::S(v) | AttributeValue::N(v) => v.len(),
        AttributeValue::B(v) => v.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::Ss(v) | AttributeValue::Ns(v) => v.iter().map(String::len).sum(),
        AttributeValue::Bs(v) => v.iter().map(|b| b.as_ref().len()).sum(),
        AttributeValue::L(v) => 3 + v.iter().map(|e| 1 + value_bytes(e)).sum::<usize>(),
        AttributeValue::M(v) => {
            3 + v
                .iter()
                .map(|(k, e)| 1 + k.len() + value_bytes(e))
                .sum::<usize>()
        }
        _ => 0,
    }
}
