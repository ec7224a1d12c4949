//! The AWS SDK's DynamoDB types a transactional or inline consumer writes with, at the version
//! this crate is built with: a consumer needs no `aws-sdk-dynamodb` dependency of its own, nor to
//! find the version and features that match this crate's.
//!
//! A [`Transaction`](crate::transaction::Transaction) on DynamoDB carries
//! [`TransactWriteItem`]s, built from a [`Put`], an [`Update`], a [`Delete`] or a
//! [`ConditionCheck`] (each builder's `build` fails with a [`BuildError`] when a required field is
//! missing); [`Client`] is what [`DynamoDbBackend::new`](crate::store::DynamoDbBackend::new)
//! takes.
//!
//! ```
//! use lambda_idempotency::dynamodb::{AttributeValue, BuildError, Put, TransactWriteItem, Update};
//! use lambda_idempotency::transaction::Transaction;
//!
//! fn reserve(order: &str, sku: &str) -> Result<Transaction<String, TransactWriteItem>, BuildError> {
//!     let reservation = Put::builder()
//!         .table_name("reservations")
//!         .item("orderId", AttributeValue::S(order.into()))
//!         .build()?;
//!     let take = Update::builder()
//!         .table_name("inventory")
//!         .key("sku", AttributeValue::S(sku.into()))
//!         .update_expression("SET available = available - :one")
//!         .condition_expression("available >= :one")
//!         .expression_attribute_values(":one", AttributeValue::N("1".into()))
//!         .build()?;
//!     Ok(Transaction::new(order.to_owned()).put(reservation).update(take))
//! }
//! # reserve("o-1", "s-1").unwrap();
//! ```

pub use aws_sdk_dynamodb::Client;
pub use aws_sdk_dynamodb::error::BuildError;
pub use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Delete, Put, TransactWriteItem, Update,
};
