//! The transactional mode: each message reserves stock for an order, and the reservation, the
//! stock decrement and the idempotency record commit together, in one `TransactWriteItems`.
//!
//! - The handler makes no writes: it *returns* them in a [`Transaction`] (a `Put` of the
//!   reservation, an `Update` of the stock with its own condition, `available >= quantity`).
//! - [`RecordHandlerExt::transactional`] adds the idempotency record, written completed, with
//!   the condition that no record holds the key: one request per order, no in-progress state, no
//!   lease, and no window in which a crash could apply the writes twice. A duplicate cancels the
//!   transaction, which returns the stored record: nothing is written.
//! - When the stock is short, the stock's condition cancels everything: no reservation, no
//!   decrement, the record fails naming the write, and the message comes back (a later delivery
//!   runs again, once there is stock).
//!
//! The key is the order id from the body. [`App::handle`] is a plain async method: the tests
//! call it with the sample event.

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{BatchProcessor, RecordContext, RecordHandlerExt, json};
// The SDK's types at lambda-idempotency's version: no aws-sdk-dynamodb dependency of our own.
use lambda_idempotency::dynamodb::{
    AttributeValue, BuildError, Client, Put, TransactWriteItem, Update,
};
use lambda_idempotency::key::KeyConfig;
use lambda_idempotency::store::DynamoDbBackend;
use lambda_idempotency::transaction::Transaction;
use lambda_runtime::{Error, LambdaEvent};
use serde::Deserialize;

/// A message of the queue: reserve stock for an order.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReserveStock {
    /// The order: the idempotency key, and the reservation's key.
    pub order_id: String,
    /// The article.
    pub sku: String,
    /// How many.
    pub quantity: u32,
}

/// Why the function cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A required environment variable is not set.
    #[error("the environment variable {0} is not set (it names a DynamoDB table)")]
    Missing(&'static str),
}

/// The function's settings, from its environment. The three tables must be in one account and
/// region: they are written in one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `IDEMPOTENCY_TABLE`: the idempotency records (string key `id`, TTL on `expiration`).
    pub idempotency_table: String,
    /// `INVENTORY_TABLE`: the stock (string key `sku`, number `available`).
    pub inventory_table: String,
    /// `RESERVATIONS_TABLE`: the reservations (string key `orderId`).
    pub reservations_table: String,
}

impl Config {
    /// Reads `IDEMPOTENCY_TABLE`, `INVENTORY_TABLE` and `RESERVATIONS_TABLE`.
    pub fn from_env() -> Result<Self, ConfigError> {
        let var = |name| std::env::var(name).map_err(|_| ConfigError::Missing(name));
        Ok(Self {
            idempotency_table: var("IDEMPOTENCY_TABLE")?,
            inventory_table: var("INVENTORY_TABLE")?,
            reservations_table: var("RESERVATIONS_TABLE")?,
        })
    }
}

/// The function's state, built once per execution environment.
#[derive(Debug, Clone)]
pub struct App {
    engine: Idempotency<DynamoDbBackend>,
    config: Config,
    processor: BatchProcessor,
}

impl App {
    /// The app over the SDK configuration `sdk`.
    pub fn new(sdk: &aws_config::SdkConfig, config: Config) -> Self {
        let dynamodb = Client::new(sdk);
        let backend = DynamoDbBackend::new(dynamodb, config.idempotency_table.clone());
        Self {
            engine: Idempotency::new(backend).with_key_prefix("transactional"),
            config,
            processor: BatchProcessor::new(),
        }
    }

    /// Handles one SQS batch: commits each new reservation with its record, and reports the
    /// records that failed.
    pub async fn handle(&self, event: LambdaEvent<SqsEvent>) -> Result<SqsBatchResponse, Error> {
        let handler = json(|order: ReserveStock, ctx: RecordContext| self.reserve(order, ctx))
            .transactional(self.engine.clone())
            .with_keys(KeyConfig::json_pointer("/orderId"));
        let report = self.processor.process(&event, &handler).await?;
        Ok(report.response())
    }

    /// The reservation, as writes: nothing is written here. The output (the order id) is
    /// stored as the record's result.
    async fn reserve(
        &self,
        order: ReserveStock,
        _ctx: RecordContext,
    ) -> Result<Transaction<String, TransactWriteItem>, BuildError> {
        let quantity = AttributeValue::N(order.quantity.to_string());
        let reservation = Put::builder()
            .table_name(&self.config.reservations_table)
            .item("orderId", AttributeValue::S(order.order_id.clone()))
            .item("sku", AttributeValue::S(order.sku.clone()))
            .item("quantity", quantity.clone())
            .build()?;
        let take = Update::builder()
            .table_name(&self.config.inventory_table)
            .key("sku", AttributeValue::S(order.sku))
            .update_expression("SET available = available - :quantity")
            .condition_expression("available >= :quantity")
            .expression_attribute_values(":quantity", quantity)
            .build()?;
        Ok(Transaction::new(order.order_id)
            .put(reservation)
            .update(take))
    }
}
