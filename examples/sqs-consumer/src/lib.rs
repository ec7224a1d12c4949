//! A standard-queue consumer with idempotency: each `OrderPlaced` message awards the customer
//! loyalty points, once, however often SQS delivers it.
//!
//! - The effect is not idempotent by itself (`ADD points :n`): a second run would award the
//!   points twice. [`RecordHandlerExt::idempotent`] makes it run once per message id.
//! - [`BatchProcessor`] runs the records concurrently and answers with a partial batch
//!   response: only the failed records go back to the queue (the event source mapping needs
//!   `FunctionResponseTypes: [ReportBatchItemFailures]`).
//! - The idempotency records live in the DynamoDB table named by `IDEMPOTENCY_TABLE`.
//!
//! [`App::handle`] is a plain async method: the tests call it with the sample event.

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use aws_sdk_dynamodb::types::AttributeValue;
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{BatchProcessor, RecordContext, RecordHandlerExt, json};
use lambda_idempotency::error::TransientError;
use lambda_idempotency::store::DynamoDbBackend;
use lambda_runtime::{Error, LambdaEvent};
use serde::Deserialize;

/// A message of the queue: an order was placed.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OrderPlaced {
    /// The order.
    pub order_id: String,
    /// Who placed it: the customer whose points grow.
    pub customer_id: String,
    /// The order's total, in cents: one point per whole unit.
    pub total_cents: i64,
}

/// Why the function cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A required environment variable is not set.
    #[error("the environment variable {0} is not set (it names a DynamoDB table)")]
    Missing(&'static str),
}

/// The function's settings, from its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `IDEMPOTENCY_TABLE`: the idempotency records (string key `id`, TTL on `expiration`).
    pub idempotency_table: String,
    /// `POINTS_TABLE`: the customers' points (string key `customerId`).
    pub points_table: String,
}

impl Config {
    /// Reads `IDEMPOTENCY_TABLE` and `POINTS_TABLE`.
    pub fn from_env() -> Result<Self, ConfigError> {
        let var = |name| std::env::var(name).map_err(|_| ConfigError::Missing(name));
        Ok(Self {
            idempotency_table: var("IDEMPOTENCY_TABLE")?,
            points_table: var("POINTS_TABLE")?,
        })
    }
}

/// The function's state, built once per execution environment.
#[derive(Debug, Clone)]
pub struct App {
    engine: Idempotency<DynamoDbBackend>,
    dynamodb: aws_sdk_dynamodb::Client,
    points_table: String,
    processor: BatchProcessor,
}

impl App {
    /// The app over the SDK configuration `sdk`.
    pub fn new(sdk: &aws_config::SdkConfig, config: Config) -> Self {
        let dynamodb = aws_sdk_dynamodb::Client::new(sdk);
        let backend = DynamoDbBackend::new(dynamodb.clone(), config.idempotency_table);
        Self {
            // The prefix lets one idempotency table serve several functions.
            engine: Idempotency::new(backend).with_key_prefix("sqs-consumer"),
            dynamodb,
            points_table: config.points_table,
            processor: BatchProcessor::new(),
        }
    }

    /// Handles one SQS batch: awards the points of each new message, skips the messages seen
    /// before, and reports the records that failed.
    pub async fn handle(&self, event: LambdaEvent<SqsEvent>) -> Result<SqsBatchResponse, Error> {
        // Keyed on the message id (the default): a redelivery is a duplicate.
        let handler = json(|order: OrderPlaced, ctx: RecordContext| self.award_points(order, ctx))
            .idempotent(self.engine.clone());
        let report = self.processor.process(&event, &handler).await?;
        Ok(report.response())
    }

    /// The effect: adds the order's points to its customer. Returns the points awarded, which
    /// the idempotency record stores.
    async fn award_points(&self, order: OrderPlaced, ctx: RecordContext) -> Result<i64, Error> {
        let points = order.total_cents / 100;
        self.dynamodb
            .update_item()
            .table_name(&self.points_table)
            .key("customerId", AttributeValue::S(order.customer_id.clone()))
            .update_expression("ADD points :points")
            .expression_attribute_values(":points", AttributeValue::N(points.to_string()))
            .send()
            .await
            // DynamoDB unavailable (throttled, timed out, down) is not the message's fault: a
            // `TransientError` is retried without spending an attempt, so an outage of the table
            // dead-letters nothing.
            .map_err(|e| TransientError::new(aws_sdk_dynamodb::Error::from(e)))?;
        tracing::info!(
            message_id = ctx.message_id,
            order_id = order.order_id,
            customer_id = order.customer_id,
            points,
            "points awarded"
        );
        Ok(points)
    }
}
