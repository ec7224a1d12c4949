//! A commit of one write that carries its record (the [inline mode](crate::inline)) as one
//! conditional `PutItem` or `UpdateItem`: a single write is atomic by itself, and DynamoDB bills
//! it as the item alone, where a transaction bills each item twice.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
    Update,
};

use super::carried::CarriedPut;
use super::table::is_refusal;
use super::transact_write_items::RecordAt;
use super::{DynamoDbBackend, request_error};
use crate::state::IdempotencyRecord;
use crate::store::{Commit, StoreError};

/// A single write's refusal, read as the one cancellation reason of a transaction of that write:
/// one reading of refusals for both ([`DynamoDbBackend::cancelled`]).
enum Refusal {
    /// The refusal, as a cancellation reason.
    Reason(CancellationReason),
    /// The item is in a running transaction.
    Contended(String),
}

impl DynamoDbBackend {
    /// Sends `write`, the one write of a commit, with `record` on it (`writes[carrier]`, which
    /// must be 0), as one `PutItem` or `UpdateItem`, and reads the answer as [`commit_carried`]
    /// does.
    ///
    /// [`commit_carried`]: crate::store::TransactionalBackend::commit_carried
    pub(super) async fn write_one(
        &self,
        record: &IdempotencyRecord,
        write: &TransactWriteItem,
        carrier: usize,
        now_ms: i64,
    ) -> Result<Commit, StoreError> {
        let writes = std::slice::from_ref(write);
        let refusal = match write.put() {
            // A put's parts go straight into the request.
            Some(put) if carrier == 0 => {
                let carried =
                    self.carried_put(record, put)
                        .map_err(|e| StoreError::Misconfigured {
                            table: put.table_name().to_owned(),
                            problem: format!("write 0 cannot carry the record: {e}"),
                        })?;
                self.put_one(put.table_name(), carried).await?
            }
            // An update (or a carrier the store cannot take: its error) as a transaction's.
            _ => {
                let mut carrying = self.carrying(record, writes, carrier, now_ms)?;
                let Some(update) = carrying.pop().and_then(|w| w.update) else {
                    unreachable!("`carrying` lets only a Put or an Update carry the record")
                };
                self.update_one(update).await?
            }
        };
        match refusal {
            None => Ok(Commit::Committed),
            Some(Refusal::Contended(reason)) => Ok(Commit::Contended { reason }),
            Some(Refusal::Reason(reason)) => {
                self.cancelled(record, writes, &[reason], RecordAt::On(0), now_ms)
                    .await
            }
        }
    }

    async fn put_one(
        &self,
        table: &str,
        carried: CarriedPut,
    ) -> Result<Option<Refusal>, StoreError> {
        let result = self
            .client
            .put_item()
            .table_name(table)
            .set_item(Some(carried.item))
            .condition_expression(carried.condition)
            .set_expression_attribute_names(Some(carried.names))
            .set_expression_attribute_values(carried.values)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        answered("PutItem", result, |e| match e {
            PutItemError::ConditionalCheckFailedException(failed) => failed.item.clone(),
            _ => None,
        })
    }

    async fn update_one(&self, update: Update) -> Result<Option<Refusal>, StoreError> {
        let Update {
            key,
            update_expression,
            table_name,
            condition_expression,
            expression_attribute_names,
            expression_attribute_values,
            ..
        } = update;
        let result = self
            .client
            .update_item()
            .table_name(table_name)
            .set_key(Some(key))
            .update_expression(update_expression)
            .set_condition_expression(condition_expression)
            .set_expression_attribute_names(expression_attribute_names)
            .set_expression_attribute_values(expression_attribute_values)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        answered("UpdateItem", result, |e| match e {
            UpdateItemError::ConditionalCheckFailedException(failed) => failed.item.clone(),
            _ => None,
        })
    }
}

/// A single write's answer: `None` when it was applied, its [`Refusal`], or the error of a
/// request that did not run. `item_of` reads the item a refusal by its condition returns.
fn answered<O, E, R>(
    operation: &'static str,
    result: Result<O, SdkError<E, R>>,
    item_of: impl FnOnce(&E) -> Option<HashMap<String, AttributeValue>>,
) -> Result<Option<Refusal>, StoreError>
where
    E: std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    match result {
        Ok(_) => Ok(None),
        Err(SdkError::ServiceError(e)) => match refusal(e.err(), item_of(e.err())) {
            Some(refusal) => Ok(Some(refusal)),
            None => Err(request_error(operation, SdkError::ServiceError(e))),
        },
        Err(e) => Err(request_error(operation, e)),
    }
}

/// A single write's refusal by its condition, a running transaction, its data or its table, as
/// a transaction's cancellation reason names it; `None` for any other error (a failure to run
/// the request).
fn refusal(
    error: &impl ProvideErrorMetadata,
    item: Option<HashMap<String, AttributeValue>>,
) -> Option<Refusal> {
    let code = match error.code()? {
        "ConditionalCheckFailedException" => "ConditionalCheckFailed",
        "TransactionConflictException" => {
            let said = error
                .message()
                .unwrap_or("the item is in a running transaction");
            return Some(Refusal::Contended(crate::redact::safe_reason(&format!(
                "TransactionConflict: {said}"
            ))));
        }
        code if is_refusal(code) || code == "ResourceNotFoundException" => code,
        _ => return None,
    };
    Some(Refusal::Reason(
        CancellationReason::builder()
            .code(code)
            .set_message(error.message().map(str::to_owned))
            .set_item(item)
            .build(),
    ))
}
