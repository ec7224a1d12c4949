//! A DynamoDB stream consumer with idempotency: each order inserted into the orders table adds its
//! total to its customer's spend, once per stream record, however often Lambda delivers the
//! record again.
//!
//! - The effect is not idempotent by itself (`ADD spentCents :n`): a second run would count the
//!   order twice. [`ConsumerBuilder::idempotent`] (the lease mode, records in DynamoDB) makes it
//!   run once per stream record, keyed by default on the record's `eventID`, which stays the same
//!   when Lambda delivers the shard again from a checkpoint.
//! - The records of one customer run in stream order
//!   ([`RecordHandlerExt::ordered_by`]: the customer, read from the new image) and different
//!   customers concurrently. A failure holds the later records of its customer, and the response
//!   names the shard's checkpoint: the lowest failed sequence number, from which Lambda delivers
//!   the shard again (the event source mapping needs `FunctionResponseTypes:
//!   [ReportBatchItemFailures]`). The records after it that succeeded are duplicates then.
//! - An order that can never be counted (its total is not positive, or its image is not an
//!   order) goes to the dead-letter queue of `DEAD_LETTER_QUEUE_URL` with the record, its
//!   sequence number and the reason, and the shard moves past it; so does a record whose
//!   `MAX_ATTEMPTS` failed attempts are used up. A replay of the shard skips it.
//!
//! [`consumer`] builds it over any backend and any [`Customers`], so that the tests run it in
//! memory.

use std::future::Future;
use std::sync::Arc;

use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;
use lambda_idempotency::batch::Record as _;
use lambda_idempotency::dynamodb::{AttributeValue, Client};
use lambda_idempotency::prelude::*;

/// An item of the orders table, as its stream's new image carries it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Order {
    /// The order (the table's key).
    pub order_id: String,
    /// Who placed it: the customer whose spend grows, and the key the records run in order by.
    pub customer_id: String,
    /// The order's total, in cents.
    pub total_cents: i64,
}

/// Why an order's spend was not counted this time (it is retried from the checkpoint).
#[derive(Debug, thiserror::Error)]
pub enum SpendError {
    /// The customer's account is closed: the spend waits until it is reopened.
    #[error("customer {0} is closed")]
    CustomerClosed(String),
    /// The order is above the customer's limit per order (`orderLimitCents`): it waits for a
    /// review to raise the limit, and the customer's later orders wait behind it.
    #[error("order {order_id} is above the order limit of customer {customer_id}")]
    OverLimit {
        /// The order.
        order_id: String,
        /// Its customer.
        customer_id: String,
    },
    /// DynamoDB refused or failed the update.
    #[error(transparent)]
    DynamoDb(#[from] aws_sdk_dynamodb::Error),
}

impl SpendError {
    /// The error as the consumer takes it: DynamoDB unavailable (throttled, timed out, down) is
    /// not the record's fault, a [`TransientError`]: retried without spending an attempt, so an
    /// outage of the table dead-letters nothing. The other variants are the record's own.
    pub fn into_error(self) -> Error {
        match self {
            SpendError::DynamoDb(e) => TransientError::new(e).into(),
            other => other.into(),
        }
    }
}

/// The customers' spend: the effect's one call.
pub trait Customers: Send + Sync + 'static {
    /// Adds `order`'s total to its customer's spend.
    fn add_spend(&self, order: &Order) -> impl Future<Output = Result<(), SpendError>> + Send;
}

/// The customers table (string key `customerId`): `ADD spentCents`, refused while the item has
/// `closed` or an `orderLimitCents` below the order's total.
#[derive(Debug, Clone)]
pub struct CustomersTable {
    /// The client.
    pub dynamodb: Client,
    /// The table (`CUSTOMERS_TABLE`).
    pub table: String,
}

impl Customers for CustomersTable {
    async fn add_spend(&self, order: &Order) -> Result<(), SpendError> {
        let update = self
            .dynamodb
            .update_item()
            .table_name(&self.table)
            .key("customerId", AttributeValue::S(order.customer_id.clone()))
            .update_expression("ADD spentCents :cents")
            .condition_expression(
                "attribute_not_exists(closed) \
                 AND (attribute_not_exists(orderLimitCents) OR orderLimitCents >= :cents)",
            )
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .expression_attribute_values(":cents", AttributeValue::N(order.total_cents.to_string()))
            .send()
            .await
            .map_err(aws_sdk_dynamodb::Error::from);
        match update {
            Ok(_) => Ok(()),
            Err(aws_sdk_dynamodb::Error::ConditionalCheckFailedException(refused)) => {
                let closed = refused
                    .item()
                    .is_some_and(|item| item.contains_key("closed"));
                Err(if closed {
                    SpendError::CustomerClosed(order.customer_id.clone())
                } else {
                    SpendError::OverLimit {
                        order_id: order.order_id.clone(),
                        customer_id: order.customer_id.clone(),
                    }
                })
            }
            Err(other) => Err(SpendError::DynamoDb(other)),
        }
    }
}

/// The customer a stream record's order belongs to: the key its records run in order by.
pub fn customer_of(record: &DynamoDbEventRecord) -> Option<String> {
    record.decode::<Order>().ok().map(|order| order.customer_id)
}

/// The effect: adds the order's total to its customer's spend. Returns the cents counted, which
/// the idempotency record stores. An order of no value can never be counted: a permanent
/// failure, dead-lettered at once with its reason.
pub async fn count_spend(customers: &impl Customers, order: Order) -> Result<i64, Error> {
    if order.total_cents <= 0 {
        let reason = format!(
            "order {} has a total of {} cents",
            order.order_id, order.total_cents
        );
        return Err(PermanentError::new(reason).into());
    }
    customers
        .add_spend(&order)
        .await
        .map_err(SpendError::into_error)?;
    tracing::info!(
        order_id = order.order_id,
        customer_id = order.customer_id,
        cents = order.total_cents,
        "spend counted"
    );
    Ok(order.total_cents)
}

/// The consumer, from `builder` (the environment's in the function, the in-memory backend's in
/// tests), counting each new order's spend into `customers`, in order per customer. Keyed on the
/// record's `eventID` (the default): a replay from the checkpoint is a duplicate.
///
/// An inserted order counts its spend. A modification counts nothing, and so does a delete (a
/// `REMOVE`, or a time to live expiry: `Change::Remove { expired }`), whose payload is the
/// order's keys, never the order: the spend already counted stays.
pub fn consumer<B: Backend + 'static>(
    builder: ConsumerBuilder<B>,
    customers: impl Customers,
) -> Consumer<Deduplicated<i64>, DynamoDbEvent> {
    let customers = Arc::new(customers);
    let handler = record(move |change: DynamoDbEventRecord, ctx: RecordContext| {
        let customers = customers.clone();
        async move {
            if ctx.change != Some(Change::Insert) {
                return Ok(0);
            }
            let order: Order = change.decode().map_err(PermanentError::new)?;
            count_spend(&*customers, order).await
        }
    });
    builder
        .source::<DynamoDbEvent>()
        .idempotent(handler.ordered_by(customer_of))
}
