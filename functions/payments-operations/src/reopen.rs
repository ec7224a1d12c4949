//! Reopening: the only way a `failed` payment is charged.
//!
//! A payment its client was told `failed` is final: payment-processor refuses to charge it on any
//! later delivery or redrive. When an operator has fixed the cause and decided the payment must
//! go through after all, [`Reopener::reopen`] sets it back to `accepted`, records who reopened it,
//! when and why (`reopenedBy`, `reopenedAt`, `reopenReason`, `reopens`; its failure's reason and
//! time stay), gives it the next number of its account (it goes after the account's payments
//! accepted since: [`payments_model::order`]), and sends it to `payments.fifo` with the relay's
//! message ([`payment_message`]) and a deduplication id of its own. The `reopen` binary wraps
//! it; what it calls is granted by the template's `PaymentsReopenPolicy`.
//!
//! Should the send fail, the payment is `accepted` and payments-reconciler sends it.
//!
//! ```no_run
//! # async fn f() -> Result<(), payments_operations::reopen::ReopenError> {
//! use payments_operations::reopen::{Reopener, Reopening, Tables};
//!
//! let sdk = payments_operations::sdk_config().await;
//! let reopener = Reopener::new(
//!     aws_sdk_dynamodb::Client::new(&sdk),
//!     aws_sdk_sqs::Client::new(&sdk),
//!     Tables { payments: "payments".into(), accounts: "payments-accounts".into() },
//!     "https://sqs.us-east-1.amazonaws.com/123456789012/payments.fifo",
//! );
//! let reopened = reopener.reopen(&Reopening {
//!     payment_id: "pay_123".into(),
//!     operator: "alice".into(),
//!     reason: "card issuer outage over".into(),
//! }).await?;
//! println!("number {} of its account", reopened.sequence);
//! # Ok(()) }
//! ```

use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use lambda_idempotency::publish::Publisher;
use payments_model::order::{self, Appended};
use payments_model::{PaymentItem, PaymentStatus, lifecycle};
use payments_publisher::{now_ms, payment_message};

/// The tables a reopening writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tables {
    /// The payments table.
    pub payments: String,
    /// The accounts table (each account's order).
    pub accounts: String,
}

/// Reopens failed payments: the tables it writes and the payments queue it sends to.
#[derive(Debug, Clone)]
pub struct Reopener {
    dynamodb: aws_sdk_dynamodb::Client,
    payments: Publisher,
    tables: Tables,
}

/// An operator's decision to charge a failed payment after all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reopening {
    /// The payment.
    pub payment_id: String,
    /// Who decides (recorded as `reopenedBy`).
    pub operator: String,
    /// Why (recorded as `reopenReason`).
    pub reason: String,
}

/// A payment reopened and sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reopened {
    /// Its new number in its account's order.
    pub sequence: u64,
    /// How many times it has been reopened, this time included.
    pub reopens: u32,
}

/// Why a payment was not reopened, or not sent.
#[derive(Debug, thiserror::Error)]
pub enum ReopenError {
    /// No such payment.
    #[error("no payment {0}")]
    NotFound(String),
    /// The payment is not `failed` (only a failed payment is reopened).
    #[error("payment {payment_id} is {status}, not failed: nothing to reopen")]
    NotFailed {
        /// The payment.
        payment_id: String,
        /// Its status.
        status: String,
    },
    /// The stored item is not a payment item.
    #[error("payment {payment_id} is not a payment item: {reason}")]
    Malformed {
        /// The payment.
        payment_id: String,
        /// Why.
        reason: String,
    },
    /// A table could not be read or written.
    #[error("the payments or accounts table failed: {0}")]
    Table(#[from] aws_sdk_dynamodb::Error),
    /// The payment is reopened (`accepted`), but its message was not sent: payments-reconciler
    /// sends it.
    #[error(
        "payment {payment_id} is reopened but was not sent ({reason}): payments-reconciler sends it within minutes"
    )]
    NotSent {
        /// The payment.
        payment_id: String,
        /// Why.
        reason: String,
    },
}

impl Reopener {
    /// A reopener over these clients, writing `tables` and sending to `payments_queue_url`.
    pub fn new(
        dynamodb: aws_sdk_dynamodb::Client,
        sqs: aws_sdk_sqs::Client,
        tables: Tables,
        payments_queue_url: impl Into<String>,
    ) -> Self {
        Self {
            dynamodb,
            payments: Publisher::new(sqs, payments_queue_url),
            tables,
        }
    }

    /// Reopens a failed payment and sends it (see the [module](self)).
    pub async fn reopen(&self, reopening: &Reopening) -> Result<Reopened, ReopenError> {
        let (dynamodb, payments_table, accounts_table) = (
            &self.dynamodb,
            self.tables.payments.as_str(),
            self.tables.accounts.as_str(),
        );
        let id = &reopening.payment_id;
        let item = dynamodb
            .get_item()
            .table_name(payments_table)
            .key("paymentId", AttributeValue::S(id.clone()))
            .consistent_read(true)
            .send()
            .await
            .map_err(aws_sdk_dynamodb::Error::from)?
            .item
            .ok_or_else(|| ReopenError::NotFound(id.clone()))?;
        let mut payment: PaymentItem =
            serde_dynamo::aws_sdk_dynamodb_1::from_item(item).map_err(|e| {
                ReopenError::Malformed {
                    payment_id: id.clone(),
                    reason: e.to_string(),
                }
            })?;
        if payment.status != PaymentStatus::Failed.as_str() {
            return Err(ReopenError::NotFailed {
                payment_id: id.clone(),
                status: payment.status,
            });
        }
        let reopens = payment.reopens.unwrap_or(0) + 1;
        let s = |v: &str| AttributeValue::S(v.to_owned());
        let reopen = |sequence: u64| {
            let update = Update::builder()
                .table_name(payments_table)
                .key("paymentId", s(id))
                .update_expression(
                    "SET #status = :accepted, #sequence = :sequence, reopens = :reopens, \
                     reopenedAt = :now, reopenedBy = :operator, reopenReason = :reason, \
                     #acceptedShard = :shard, #acceptedAt = :now",
                )
                .expression_attribute_names("#acceptedShard", lifecycle::ACCEPTED_SHARD)
                .expression_attribute_names("#acceptedAt", lifecycle::ACCEPTED_AT)
                .expression_attribute_values(":shard", s(&lifecycle::shard(id)))
                .condition_expression(if reopens == 1 {
                    "#status = :failed AND attribute_not_exists(reopens)"
                } else {
                    "#status = :failed AND reopens = :previous"
                })
                .expression_attribute_names("#status", "status")
                .expression_attribute_names("#sequence", "sequence")
                .expression_attribute_values(":accepted", s(PaymentStatus::Accepted.as_str()))
                .expression_attribute_values(":failed", s(PaymentStatus::Failed.as_str()))
                .expression_attribute_values(":sequence", AttributeValue::N(sequence.to_string()))
                .expression_attribute_values(":reopens", AttributeValue::N(reopens.to_string()))
                .expression_attribute_values(":now", AttributeValue::N(now_ms().to_string()))
                .expression_attribute_values(":operator", s(&reopening.operator))
                .expression_attribute_values(":reason", s(&reopening.reason));
            let update = if reopens == 1 {
                update
            } else {
                update.expression_attribute_values(
                    ":previous",
                    AttributeValue::N((reopens - 1).to_string()),
                )
            };
            TransactWriteItem::builder()
                .update(update.build().expect("table, key and expression are set"))
                .build()
        };
        let sequence =
            match order::append(dynamodb, accounts_table, &payment.account_id, id, reopen).await? {
                Appended::Numbered(sequence) => sequence,
                Appended::Refused => {
                    return Err(ReopenError::NotFailed {
                        payment_id: id.clone(),
                        status: "changed by someone else meanwhile".into(),
                    });
                }
            };
        tracing::info!(
            payment_id = id,
            sequence,
            reopens,
            operator = reopening.operator,
            "payment reopened"
        );
        payment.status = PaymentStatus::Accepted.as_str().to_owned();
        payment.sequence = Some(sequence);
        payment.reopens = Some(reopens);
        let not_sent = |reason: String| ReopenError::NotSent {
            payment_id: id.clone(),
            reason,
        };
        let message = payment_message(&payment).map_err(|e| not_sent(e.to_string()))?;
        self.payments
            .send(message)
            .await
            .map_err(|e| not_sent(e.to_string()))?;
        Ok(Reopened { sequence, reopens })
    }
}
