//! An Amazon MSK (or self-managed Kafka) consumer with idempotency: each stock change on the
//! topic moves its product's stock level, once per record, however often Lambda delivers it.
//!
//! - The effect is not idempotent by itself (`ADD units :delta`): a second run would move the
//!   stock twice. [`RecordHandlerExt::idempotent`] (the lease mode, records in DynamoDB) makes it
//!   run once per record, keyed by default on the record's topic, partition and offset
//!   (`stock-changes-0@4100`), which stay the same when Lambda delivers the partition again.
//! - [`BatchProcessor`] runs the records of one Kafka key (a product) in offset order, different
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
//! [`App::handle`] is a plain async method: the tests call it with the sample event.

use aws_lambda_events::kafka::KafkaEvent;
use aws_sdk_dynamodb::types::AttributeValue;
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{
    BatchProcessor, KafkaEventResponse, PermanentError, RecordContext, RecordHandlerExt, json,
};
use lambda_idempotency::dead_letter::DeadLetter;
use lambda_idempotency::store::DynamoDbBackend;
use lambda_runtime::{Error, LambdaEvent};
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
    /// `STOCK_TABLE`: the products' stock levels (string key `sku`).
    pub stock_table: String,
    /// `DEAD_LETTER_QUEUE_URL`: where changes that can never apply go, with their reason.
    pub dead_letter_queue_url: String,
    /// `MAX_ATTEMPTS` (5 when unset): failed attempts of a record before it is dead-lettered.
    pub max_attempts: u32,
}

impl Config {
    /// Reads `IDEMPOTENCY_TABLE`, `STOCK_TABLE`, `DEAD_LETTER_QUEUE_URL` and `MAX_ATTEMPTS`.
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
            stock_table: var("STOCK_TABLE")?,
            dead_letter_queue_url: var("DEAD_LETTER_QUEUE_URL")?,
            max_attempts,
        })
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

/// The function's state, built once per execution environment.
#[derive(Debug, Clone)]
pub struct App {
    engine: Idempotency<DynamoDbBackend>,
    dynamodb: aws_sdk_dynamodb::Client,
    stock_table: String,
    processor: BatchProcessor,
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
            engine: Idempotency::new(backend).with_key_prefix("kafka-consumer"),
            dynamodb,
            stock_table: config.stock_table,
            processor: BatchProcessor::new()
                .with_dead_letter(dead_letter)
                .max_attempts(config.max_attempts),
        }
    }

    /// Handles one Kafka batch: applies each new change once, in order per key, and answers with
    /// the checkpoint of each partition where a record failed.
    pub async fn handle(
        &self,
        event: LambdaEvent<KafkaEvent>,
    ) -> Result<KafkaEventResponse, Error> {
        // A tombstone's value is JSON null: `None`.
        let handler = json(
            |change: Option<StockChange>, ctx: RecordContext| async move {
                match change {
                    Some(change) => self.apply(change, ctx).await.map(Applied::Units),
                    None => {
                        tracing::info!(record = ctx.message_id, "tombstone: nothing to apply");
                        Ok(Applied::Tombstone)
                    }
                }
            },
        )
        .idempotent(self.engine.clone());
        let report = self.processor.process(&event, &handler).await?;
        for dead in report.dead_lettered() {
            tracing::warn!(record = dead.message_id, "moved to the dead-letter queue");
        }
        Ok(report.response())
    }

    /// The effect: moves the product's stock, unless a stocktake is running. Returns the units
    /// moved, which the idempotency record stores.
    async fn apply(&self, change: StockChange, ctx: RecordContext) -> Result<i64, Error> {
        if change.delta == 0 {
            let reason = format!(
                "change {} of {} moves no units",
                change.change_id, change.sku
            );
            return Err(PermanentError::new(reason).into());
        }
        let update = self
            .dynamodb
            .update_item()
            .table_name(&self.stock_table)
            .key("sku", AttributeValue::S(change.sku.clone()))
            .update_expression("ADD #units :delta")
            .expression_attribute_names("#units", "units")
            .condition_expression("attribute_not_exists(stocktake)")
            .expression_attribute_values(":delta", AttributeValue::N(change.delta.to_string()))
            .send()
            .await
            .map_err(aws_sdk_dynamodb::Error::from);
        match update {
            Ok(_) => {}
            Err(aws_sdk_dynamodb::Error::ConditionalCheckFailedException(_)) => {
                return Err(StockError::Stocktake(change.sku).into());
            }
            Err(other) => return Err(StockError::DynamoDb(other).into()),
        }
        tracing::info!(
            record = ctx.message_id,
            change_id = change.change_id,
            sku = change.sku,
            delta = change.delta,
            "stock moved"
        );
        Ok(change.delta)
    }
}
