//! A FIFO consumer: each message is a transaction on an account (a deposit, or a withdrawal as a
//! negative amount), applied to the account's balance in the order of its message group, once.
//!
//! - The queue's message group is the account, so an account's transactions arrive in order.
//!   [`BatchProcessor`] runs each group in order, groups concurrently; when a transaction fails
//!   (a withdrawal the balance does not cover), the rest of *its* group is reported failed
//!   without running, so that nothing overtakes it, while the other accounts' groups go on.
//! - The idempotency key comes from the body ([`KeyConfig::json_pointer`] on `/transactionId`),
//!   not the message id: a producer that sends the same transaction twice, as two messages, is
//!   caught too. A transaction id reused with another body is refused, never skipped.
//!
//! [`App::handle`] is a plain async method: the tests call it with the sample event.

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::AttributeValue;
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{BatchProcessor, RecordContext, RecordHandlerExt, json};
use lambda_idempotency::error::TransientError;
use lambda_idempotency::key::KeyConfig;
use lambda_idempotency::store::DynamoDbBackend;
use lambda_runtime::{Error, LambdaEvent};
use serde::Deserialize;

/// A message of the queue: money in or out of an account.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Transaction {
    /// The transaction: the idempotency key.
    pub transaction_id: String,
    /// The account (also the message group).
    pub account_id: String,
    /// Cents: positive for a deposit, negative for a withdrawal.
    pub amount_cents: i64,
}

/// Why a transaction was not applied.
#[derive(Debug, thiserror::Error)]
pub enum TransactionError {
    /// A withdrawal larger than the balance.
    #[error(
        "account {account_id} has less than the {needed_cents} cents that {transaction_id} withdraws"
    )]
    InsufficientFunds {
        /// The transaction.
        transaction_id: String,
        /// The account.
        account_id: String,
        /// What the withdrawal needs.
        needed_cents: i64,
    },
    /// DynamoDB failed.
    #[error(transparent)]
    DynamoDb(#[from] aws_sdk_dynamodb::Error),
}

impl TransactionError {
    /// The error as the processor takes it: DynamoDB unavailable (throttled, timed out, down) is
    /// not the message's fault, a [`TransientError`]: retried without spending an attempt, so an
    /// outage of the table dead-letters nothing. A withdrawal the balance does not cover is the
    /// message's own failure, counted.
    pub fn into_error(self) -> Error {
        match self {
            TransactionError::DynamoDb(e) => TransientError::new(e).into(),
            other => other.into(),
        }
    }
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
    /// `BALANCES_TABLE`: the accounts' balances (string key `accountId`).
    pub balances_table: String,
}

impl Config {
    /// Reads `IDEMPOTENCY_TABLE` and `BALANCES_TABLE`.
    pub fn from_env() -> Result<Self, ConfigError> {
        let var = |name| std::env::var(name).map_err(|_| ConfigError::Missing(name));
        Ok(Self {
            idempotency_table: var("IDEMPOTENCY_TABLE")?,
            balances_table: var("BALANCES_TABLE")?,
        })
    }
}

/// The function's state, built once per execution environment.
#[derive(Debug, Clone)]
pub struct App {
    engine: Idempotency<DynamoDbBackend>,
    dynamodb: aws_sdk_dynamodb::Client,
    balances_table: String,
    processor: BatchProcessor,
}

impl App {
    /// The app over the SDK configuration `sdk`.
    pub fn new(sdk: &aws_config::SdkConfig, config: Config) -> Self {
        let dynamodb = aws_sdk_dynamodb::Client::new(sdk);
        let backend = DynamoDbBackend::new(dynamodb.clone(), config.idempotency_table);
        Self {
            engine: Idempotency::new(backend).with_key_prefix("fifo-consumer"),
            dynamodb,
            balances_table: config.balances_table,
            processor: BatchProcessor::new(),
        }
    }

    /// Handles one FIFO batch: applies each new transaction in its group's order, and reports
    /// the failed ones and those held behind them.
    pub async fn handle(&self, event: LambdaEvent<SqsEvent>) -> Result<SqsBatchResponse, Error> {
        let handler = json(|tx: Transaction, ctx: RecordContext| self.apply_as_record(tx, ctx))
            .idempotent(self.engine.clone())
            .with_keys(KeyConfig::json_pointer("/transactionId"));
        let report = self.processor.process(&event, &handler).await?;
        Ok(report.response())
    }

    /// [`apply`](Self::apply), its error as the processor takes it
    /// ([`TransactionError::into_error`]).
    async fn apply_as_record(&self, tx: Transaction, ctx: RecordContext) -> Result<(), Error> {
        self.apply(tx, ctx)
            .await
            .map_err(TransactionError::into_error)
    }

    /// The effect: adds the amount to the balance; a withdrawal only while the balance covers it.
    async fn apply(&self, tx: Transaction, ctx: RecordContext) -> Result<(), TransactionError> {
        let amount = AttributeValue::N(tx.amount_cents.to_string());
        let mut update = self
            .dynamodb
            .update_item()
            .table_name(&self.balances_table)
            .key("accountId", AttributeValue::S(tx.account_id.clone()))
            .update_expression("ADD balanceCents :amount")
            .expression_attribute_values(":amount", amount);
        if tx.amount_cents < 0 {
            update = update
                .condition_expression("balanceCents >= :needed")
                .expression_attribute_values(
                    ":needed",
                    AttributeValue::N((-tx.amount_cents).to_string()),
                );
        }
        match update.send().await {
            Ok(_) => {}
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                return Err(TransactionError::InsufficientFunds {
                    needed_cents: -tx.amount_cents,
                    transaction_id: tx.transaction_id,
                    account_id: tx.account_id,
                });
            }
            Err(e) => return Err(aws_sdk_dynamodb::Error::from(e).into()),
        }
        tracing::info!(
            message_id = ctx.message_id,
            group_id = ctx.group_id.as_deref(),
            transaction_id = tx.transaction_id,
            amount_cents = tx.amount_cents,
            "transaction applied"
        );
        Ok(())
    }
}
