//! A DynamoDB stream consumer with idempotency: each order inserted into the orders table adds its
//! total to its customer's spend, once per stream record, however often Lambda delivers the
//! record again.
//!
//! - The effect is not idempotent by itself (`ADD spentCents :n`): a second run would count the
//!   order twice. [`RecordHandlerExt::idempotent`] (the lease mode, records in DynamoDB) makes it
//!   run once per stream record, keyed by default on the record's `eventID`, which stays the same
//!   when Lambda delivers the shard again from a checkpoint.
//! - [`BatchProcessor`] runs the records of one customer in stream order
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
//! [`App::handle`] is a plain async method: the tests call it with the sample event.

use aws_lambda_events::dynamodb::{Event, EventRecord};
use aws_lambda_events::streams::DynamoDbEventResponse;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{
    BatchProcessor, Change, PermanentError, Record, RecordContext, RecordHandlerExt, record,
};
use lambda_idempotency::dead_letter::DeadLetter;
use lambda_idempotency::store::DynamoDbBackend;
use lambda_runtime::{Error, LambdaEvent};
use serde::Deserialize;

/// An item of the orders table, as its stream's new image carries it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
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

/// Why the function cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A required environment variable is not set.
    #[error("the environment variable {0} is not set")]
    Missing(&'static str),
    /// `MAX_ATTEMPTS` is not a whole number of at least 1.
    #[error("MAX_ATTEMPTS is {0:?}: give a whole number of at least 1")]
    MaxAttempts(String),
}

/// The function's settings, from its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `IDEMPOTENCY_TABLE`: the idempotency records (string key `id`, TTL on `expiration`).
    pub idempotency_table: String,
    /// `CUSTOMERS_TABLE`: the customers' spend (string key `customerId`).
    pub customers_table: String,
    /// `DEAD_LETTER_QUEUE_URL`: where records that can never be counted go, with their reason.
    pub dead_letter_queue_url: String,
    /// `MAX_ATTEMPTS` (5 when unset): failed attempts of a record before it is dead-lettered.
    pub max_attempts: u32,
}

impl Config {
    /// Reads `IDEMPOTENCY_TABLE`, `CUSTOMERS_TABLE`, `DEAD_LETTER_QUEUE_URL` and `MAX_ATTEMPTS`.
    pub fn from_env() -> Result<Self, ConfigError> {
        let var = |name| std::env::var(name).map_err(|_| ConfigError::Missing(name));
        let max_attempts = match std::env::var("MAX_ATTEMPTS") {
            Err(_) => 5,
            Ok(text) => match text.parse() {
                Ok(n) if n >= 1 => n,
                _ => return Err(ConfigError::MaxAttempts(text)),
            },
        };
        Ok(Self {
            idempotency_table: var("IDEMPOTENCY_TABLE")?,
            customers_table: var("CUSTOMERS_TABLE")?,
            dead_letter_queue_url: var("DEAD_LETTER_QUEUE_URL")?,
            max_attempts,
        })
    }
}

/// The function's state, built once per execution environment.
#[derive(Debug, Clone)]
pub struct App {
    engine: Idempotency<DynamoDbBackend>,
    dynamodb: aws_sdk_dynamodb::Client,
    customers_table: String,
    processor: BatchProcessor,
}

/// The customer a stream record's order belongs to: the key its records run in order by.
pub fn customer_of(record: &EventRecord) -> Option<String> {
    record.decode::<Order>().ok().map(|order| order.customer_id)
}

impl App {
    /// The app over the SDK configuration `sdk`.
    pub fn new(sdk: &aws_config::SdkConfig, config: Config) -> Self {
        let dynamodb = aws_sdk_dynamodb::Client::new(sdk);
        let backend = DynamoDbBackend::new(dynamodb.clone(), config.idempotency_table);
        let dead_letter =
            DeadLetter::new(aws_sdk_sqs::Client::new(sdk), config.dead_letter_queue_url);
        Self {
            // The prefix lets one idempotency table serve several functions.
            engine: Idempotency::new(backend).with_key_prefix("dynamodb-stream-consumer"),
            dynamodb,
            customers_table: config.customers_table,
            processor: BatchProcessor::new()
                .with_dead_letter(dead_letter)
                .max_attempts(config.max_attempts),
        }
    }

    /// Handles one batch of the orders table's stream: counts each new order's spend once, in
    /// order per customer, and answers with the shard's checkpoint if a record failed.
    pub async fn handle(&self, event: LambdaEvent<Event>) -> Result<DynamoDbEventResponse, Error> {
        // Keyed on the record's eventID (the default): a replay from the checkpoint is a duplicate.
        let handler = record(|change: EventRecord, ctx: RecordContext| self.on_change(change, ctx))
            .ordered_by(customer_of)
            .idempotent(self.engine.clone());
        let report = self.processor.process(&event, &handler).await?;
        for dead in report.dead_lettered() {
            tracing::warn!(record = dead.message_id, "moved to the dead-letter queue");
        }
        Ok(report.response())
    }

    /// An inserted order counts its spend. A modification counts nothing, and so does a delete
    /// (a `REMOVE`, or a time to live expiry: `Change::Remove { expired }`), whose payload is the
    /// order's keys, never the order: the spend already counted stays.
    async fn on_change(&self, change: EventRecord, ctx: RecordContext) -> Result<i64, Error> {
        if ctx.change != Some(Change::Insert) {
            return Ok(0);
        }
        let order: Order = change.decode().map_err(PermanentError::new)?;
        self.count_spend(order, ctx).await
    }

    /// The effect: adds the order's total to its customer's spend, unless the customer is closed
    /// or the order is above the customer's limit per order.
    /// Returns the cents counted, which the idempotency record stores.
    async fn count_spend(&self, order: Order, ctx: RecordContext) -> Result<i64, Error> {
        if order.total_cents <= 0 {
            let reason = format!(
                "order {} has a total of {} cents",
                order.order_id, order.total_cents
            );
            return Err(PermanentError::new(reason).into());
        }
        let update = self
            .dynamodb
            .update_item()
            .table_name(&self.customers_table)
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
            Ok(_) => {}
            Err(aws_sdk_dynamodb::Error::ConditionalCheckFailedException(refused)) => {
                let closed = refused
                    .item()
                    .is_some_and(|item| item.contains_key("closed"));
                return Err(if closed {
                    SpendError::CustomerClosed(order.customer_id)
                } else {
                    SpendError::OverLimit {
                        order_id: order.order_id,
                        customer_id: order.customer_id,
                    }
                }
                .into());
            }
            Err(other) => return Err(SpendError::DynamoDb(other).into()),
        }
        tracing::info!(
            record = ctx.message_id,
            order_id = order.order_id,
            customer_id = order.customer_id,
            cents = order.total_cents,
            "spend counted"
        );
        Ok(order.total_cents)
    }
}
