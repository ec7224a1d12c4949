//! A Kinesis consumer with idempotency: each meter reading on the stream adds its energy to its
//! meter's total, once per reading, however often Lambda delivers it and even when the producer
//! put it twice.
//!
//! - The effect is not idempotent by itself (`ADD wattHours :n`): a second run would count the
//!   reading twice. The lease mode ([`ConsumerBuilder::idempotent`], records in DynamoDB) makes
//!   it run once per reading, keyed on the data's `/readingId`: a record Lambda delivers again
//!   from a checkpoint is a duplicate, and so is a reading the producer put again after a lost
//!   answer (Kinesis gives that one a new sequence number, so the default key, the shard and
//!   sequence number, would not catch it).
//! - The records of one partition key (a meter) run in stream order, different meters
//!   concurrently. A failure holds the later readings of its meter, and the response names the
//!   shard's checkpoint: its lowest failed sequence number.
//! - A reading that can never be counted (negative energy, data that is not a reading) goes to
//!   the dead-letter queue of `DEAD_LETTER_QUEUE_URL` with the record, its shard, sequence number
//!   and the reason, and the shard moves past it; so does a record whose `MAX_ATTEMPTS` failed
//!   attempts are used up.
//!
//! [`consumer`] builds it over any backend and any [`Meters`], so that the tests run it in
//! memory.

use std::future::Future;
use std::sync::Arc;

use lambda_idempotency::dynamodb::{AttributeValue, Client};
use lambda_idempotency::prelude::*;

/// A record's data: a meter's reading.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
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
    /// The meter is out of service: its readings wait until it is back.
    #[error("meter {0} is out of service")]
    OutOfService(String),
    /// DynamoDB refused or failed the update.
    #[error(transparent)]
    DynamoDb(#[from] aws_sdk_dynamodb::Error),
}

impl CountError {
    /// The error as the consumer takes it: DynamoDB unavailable (throttled, timed out, down) is
    /// not the record's fault, a [`TransientError`]: retried without spending an attempt, so an
    /// outage of the table dead-letters nothing. The other variants are the record's own.
    pub fn into_error(self) -> Error {
        match self {
            CountError::DynamoDb(e) => TransientError::new(e).into(),
            other => other.into(),
        }
    }
}

/// The meters' totals: the effect's one call.
pub trait Meters: Send + Sync + 'static {
    /// Adds `watt_hours` to the total of `meter_id`.
    fn add(
        &self,
        meter_id: &str,
        watt_hours: i64,
    ) -> impl Future<Output = Result<(), CountError>> + Send;
}

/// The meters table (string key `meterId`): `ADD wattHours`, refused while the item has
/// `outOfService`.
#[derive(Debug, Clone)]
pub struct MetersTable {
    /// The client.
    pub dynamodb: Client,
    /// The table (`METERS_TABLE`).
    pub table: String,
}

impl Meters for MetersTable {
    async fn add(&self, meter_id: &str, watt_hours: i64) -> Result<(), CountError> {
        let update = self
            .dynamodb
            .update_item()
            .table_name(&self.table)
            .key("meterId", AttributeValue::S(meter_id.to_owned()))
            .update_expression("ADD wattHours :wh")
            .condition_expression("attribute_not_exists(outOfService)")
            .expression_attribute_values(":wh", AttributeValue::N(watt_hours.to_string()))
            .send()
            .await
            .map_err(aws_sdk_dynamodb::Error::from);
        match update {
            Ok(_) => Ok(()),
            Err(aws_sdk_dynamodb::Error::ConditionalCheckFailedException(_)) => {
                Err(CountError::OutOfService(meter_id.to_owned()))
            }
            Err(other) => Err(CountError::DynamoDb(other)),
        }
    }
}

/// The effect: adds the reading to its meter's total. Returns the watt-hours counted, which the
/// idempotency record stores. A negative reading can never be counted: a permanent failure,
/// dead-lettered at once with its reason.
pub async fn count(meters: &impl Meters, reading: Reading) -> Result<i64, Error> {
    if reading.watt_hours < 0 {
        let reason = format!(
            "reading {} of meter {} is negative ({} Wh)",
            reading.reading_id, reading.meter_id, reading.watt_hours
        );
        return Err(PermanentError::new(reason).into());
    }
    meters
        .add(&reading.meter_id, reading.watt_hours)
        .await
        .map_err(CountError::into_error)?;
    tracing::info!(
        reading_id = reading.reading_id,
        meter_id = reading.meter_id,
        watt_hours = reading.watt_hours,
        "reading counted"
    );
    Ok(reading.watt_hours)
}

/// The consumer, from `builder` (the environment's in the function, the in-memory backend's in
/// tests), counting readings into `meters`, keyed on the data's `/readingId`.
pub fn consumer<B: Backend + 'static>(
    builder: ConsumerBuilder<B>,
    meters: impl Meters,
) -> Consumer<Deduplicated<i64>, KinesisEvent> {
    let meters = Arc::new(meters);
    let handler = json(move |reading: Reading, _ctx: RecordContext| {
        let meters = meters.clone();
        async move { count(&*meters, reading).await }
    });
    builder
        .source::<KinesisEvent>()
        .with_keys(KeyConfig::json_pointer("/readingId"))
        .idempotent(handler)
}
