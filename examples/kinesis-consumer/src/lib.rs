//! A Kinesis consumer with idempotency: each meter reading on the stream adds its energy to its
//! meter's total, once per reading, however often Lambda delivers it and even when the producer
//! put it twice.
//!
//! - The effect is not idempotent by itself (`ADD wattHours :n`): a second run would count the
//!   reading twice. [`RecordHandlerExt::idempotent`] (the lease mode, records in DynamoDB) makes it
//!   run once per reading, keyed on the data's `/readingId`
//!   ([`KeyConfig::json_pointer`]): a record Lambda delivers again from a checkpoint is a
//!   duplicate, and so is a reading the producer put again after a lost answer (Kinesis gives
//!   that one a new sequence number, so the default key, the shard and sequence number, would
//!   not catch it).
//! - [`BatchProcessor`] runs the records of one partition key (a meter) in stream order, different
//!   meters concurrently. A failure holds the later readings of its meter, and the response names
//!   the shard's checkpoint: its lowest failed sequence number (the event source mapping needs
//!   `FunctionResponseTypes: [ReportBatchItemFailures]`).
//! - A reading that can never be counted (negative energy, data that is not a reading) goes to
//!   the dead-letter queue of `DEAD_LETTER_QUEUE_URL` with the record, its shard, sequence number
//!   and the reason, and the shard moves past it; so does a record whose `MAX_ATTEMPTS` failed
//!   attempts are used up.
//!
//! [`App::handle`] is a plain async method: the tests call it with the sample event.

use aws_lambda_events::kinesis::KinesisEvent;
use aws_lambda_events::streams::KinesisEventResponse;
use aws_sdk_dynamodb::types::AttributeValue;
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{
    BatchProcessor, PermanentError, RecordContext, RecordHandlerExt, json,
};
use lambda_idempotency::dead_letter::DeadLetter;
use lambda_idempotency::key::KeyConfig;
use lambda_idempotency::store::DynamoDbBackend;
use lambda_runtime::{Error, LambdaEvent};
use serde::Deserialize;

/// A record's data: a meter's reading.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reading {
    /// The reading, as its producer named it: the idempotency key.
    pub reading_id: String,
    /// The meter (the record's partition key): its total grows.
    pub meter_id: String,
    /// The energy measured since the meter's last reading.
    pub watt_hours: i64,
}

/// Why a reading was not counted this time (it is retried from the checkpoint).
#[derive(Debug, thiserror::Error)]
pub enum CountError {
    /// The meter is out of service (`outOfService` set on its item): its readings wait until it
    /// is back.
    #[error("meter {0} is out of service")]
    OutOfService(String),
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
    /// `METERS_TABLE`: the meters' totals (string key `meterId`).
    pub meters_table: String,
    /// `DEAD_LETTER_QUEUE_URL`: where readings that can never be counted go, with their reason.
    pub dead_letter_queue_url: String,
    /// `MAX_ATTEMPTS` (5 when unset): failed attempts of a record before it is dead-lettered.
    pub max_attempts: u32,
}

impl Config {
    /// Reads `IDEMPOTENCY_TABLE`, `METERS_TABLE`, `DEAD_LETTER_QUEUE_URL` and `MAX_ATTEMPTS`.
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
            meters_table: var("METERS_TABLE")?,
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
    meters_table: String,
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
            engine: Idempotency::new(backend).with_key_prefix("kinesis-consumer"),
            dynamodb,
            meters_table: config.meters_table,
            processor: BatchProcessor::new()
                .with_dead_letter(dead_letter)
                .max_attempts(config.max_attempts),
        }
    }

    /// Handles one Kinesis batch: counts each new reading once, in order per meter, and answers
    /// with the shard's checkpoint if a record failed.
    pub async fn handle(
        &self,
        event: LambdaEvent<KinesisEvent>,
    ) -> Result<KinesisEventResponse, Error> {
        let handler = json(|reading: Reading, ctx: RecordContext| self.count(reading, ctx))
            .idempotent(self.engine.clone())
            .with_keys(KeyConfig::json_pointer("/readingId"));
        let report = self.processor.process(&event, &handler).await?;
        for dead in report.dead_lettered() {
            tracing::warn!(record = dead.message_id, "moved to the dead-letter queue");
        }
        Ok(report.response())
    }

    /// The effect: adds the reading to its meter's total, unless the meter is out of service. Returns
    /// the watt-hours counted, which the idempotency record stores.
    async fn count(&self, reading: Reading, ctx: RecordContext) -> Result<i64, Error> {
        if reading.watt_hours < 0 {
            let reason = format!(
                "reading {} of meter {} is negative ({} Wh)",
                reading.reading_id, reading.meter_id, reading.watt_hours
            );
            return Err(PermanentError::new(reason).into());
        }
        let update = self
            .dynamodb
            .update_item()
            .table_name(&self.meters_table)
            .key("meterId", AttributeValue::S(reading.meter_id.clone()))
            .update_expression("ADD wattHours :wh")
            .condition_expression("attribute_not_exists(outOfService)")
            .expression_attribute_values(":wh", AttributeValue::N(reading.watt_hours.to_string()))
            .send()
            .await
            .map_err(aws_sdk_dynamodb::Error::from);
        match update {
            Ok(_) => {}
            Err(aws_sdk_dynamodb::Error::ConditionalCheckFailedException(_)) => {
                return Err(CountError::OutOfService(reading.meter_id).into());
            }
            Err(other) => return Err(CountError::DynamoDb(other).into()),
        }
        tracing::info!(
            record = ctx.message_id,
            reading_id = reading.reading_id,
            meter_id = reading.meter_id,
            watt_hours = reading.watt_hours,
            "reading counted"
        );
        Ok(reading.watt_hours)
    }
}
