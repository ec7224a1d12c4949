//! An Amazon MSK (or self-managed Kafka) consumer with idempotency: each stock change on the
//! topic moves its product's stock level, once per record, however often Lambda delivers it.
//!
//! - The effect is not idempotent by itself (`ADD units :delta`): a second run would move the
//!   stock twice. [`ConsumerBuilder::idempotent`] (the lease mode, records in DynamoDB) makes it
//!   run once per record, keyed by default on the record's topic, partition and offset
//!   (`stock-changes-0@4100`), which stay the same when Lambda delivers the partition again.
//! - The records of one Kafka key (a product) in offset order, different
//!   keys concurrently. A failure holds the later records of its key, and the response names each
//!   failed partition's checkpoint, its lowest failed offset, as AWS documents it for Kafka:
//!   `{"itemIdentifier": {"partition": "stock-changes-0", "offset": 4101}}` (the event source
//!   mapping needs `FunctionResponseTypes: [ReportBatchItemFailures]`, in provisioned mode).
//! - A tombstone (a record without a value: the product left the catalogue) reads as `None`.
//! - A change that can never apply (no units, a value that is not a stock change) goes to the
//!   dead-letter queue of `DEAD_LETTER_QUEUE_URL` with the record, its partition, offset and the
//!   reason, and the partition moves past it; so does a record whose `MAX_ATTEMPTS` failed
//!   attempts are used up.
//!
//! [`consumer`] builds it over any backend and any [`Stock`], so that the tests run it in
//! memory.

use std::future::Future;
use std::sync::Arc;

use lambda_idempotency::dynamodb::{AttributeValue, Client};
use lambda_idempotency::prelude::*;
use serde::{Deserialize, Serialize};

/// A record's value: a change of a product's stock.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StockChange {
    /// The change, as its producer named it.
    pub change_id: String,
    /// The product (also the record's key).
    pub sku: String,
    /// Units added (positive) or taken (negative).
    pub delta: i64,
}

/// Why a change was not applied this time (it is retried from the checkpoint).
#[derive(Debug, thiserror::Error)]
pub enum StockError {
    /// A stocktake of the product is running: its changes wait until it ends.
    #[error("product {0} is being counted")]
    Stocktake(String),
    /// DynamoDB refused or failed the update.
    #[error(transparent)]
    DynamoDb(#[from] aws_sdk_dynamodb::Error),
}

impl StockError {
    /// The error as the consumer takes it: DynamoDB unavailable (throttled, timed out, down) is
    /// not the record's fault, a [`TransientError`]: retried without spending an attempt, so an
    /// outage of the table dead-letters nothing. The other variants are the record's own.
    pub fn into_error(self) -> Error {
        match self {
            StockError::DynamoDb(e) => TransientError::new(e).into(),
            other => other.into(),
        }
    }
}

/// What one record came to (stored with its idempotency record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Applied {
    /// The stock moved by this many units.
    Units(i64),
    /// A tombstone: nothing to apply.
    Tombstone,
}

/// The products' stock levels: the effect's one call.
pub trait Stock: Send + Sync + 'static {
    /// Moves the stock of `sku` by `delta` units.
    fn move_units(
        &self,
        sku: &str,
        delta: i64,
    ) -> impl Future<Output = Result<(), StockError>> + Send;
}

/// The stock table (string key `sku`): `ADD units`, refused while the item has `stocktake`.
#[derive(Debug, Clone)]
pub struct StockTable {
    /// The client.
    pub dynamodb: Client,
    /// The table (`STOCK_TABLE`).
    pub table: String,
}

impl Stock for StockTable {
    async fn move_units(&self, sku: &str, delta: i64) -> Result<(), StockError> {
        let update = self
            .dynamodb
            .update_item()
            .table_name(&self.table)
            .key("sku", AttributeValue::S(sku.to_owned()))
            .update_expression("ADD #units :delta")
            .expression_attribute_names("#units", "units")
            .condition_expression("attribute_not_exists(stocktake)")
            .expression_attribute_values(":delta", AttributeValue::N(delta.to_string()))
            .send()
            .await
            .map_err(aws_sdk_dynamodb::Error::from);
        match update {
            Ok(_) => Ok(()),
            Err(aws_sdk_dynamodb::Error::ConditionalCheckFailedException(_)) => {
                Err(StockError::Stocktake(sku.to_owned()))
            }
            Err(other) => Err(StockError::DynamoDb(other)),
        }
    }
}

/// The effect: moves the product's stock; a tombstone (`None`) applies nothing. A change of no
/// units can never apply: a permanent failure, dead-lettered at once with its reason.
pub async fn apply(stock: &impl Stock, change: Option<StockChange>) -> Result<Applied, Error> {
    let Some(change) = change else {
        tracing::info!("tombstone: nothing to apply");
        return Ok(Applied::Tombstone);
    };
    if change.delta == 0 {
        let reason = format!(
            "change {} of {} moves no units",
            change.change_id, change.sku
        );
        return Err(PermanentError::new(reason).into());
    }
    stock
        .move_units(&change.sku, change.delta)
        .await
        .map_err(StockError::into_error)?;
    tracing::info!(
        change_id = change.change_id,
        sku = change.sku,
        delta = change.delta,
        "stock moved"
    );
    Ok(Applied::Units(change.delta))
}

/// The consumer, from `builder` (the environment's in the function, the in-memory backend's in
/// tests), applying each change to `stock`. Keyed on the record's topic, partition and offset
/// (the default): a replay from the checkpoint is a duplicate.
pub fn consumer<B: Backend + 'static>(
    builder: ConsumerBuilder<B>,
    stock: impl Stock,
) -> Consumer<Deduplicated<Applied>, KafkaEvent> {
    let stock = Arc::new(stock);
    // A tombstone's value is JSON null: `None`.
    let handler = json(move |change: Option<StockChange>, _ctx: RecordContext| {
        let stock = stock.clone();
        async move { apply(&*stock, change).await }
    });
    builder.source::<KafkaEvent>().idempotent(handler)
}
