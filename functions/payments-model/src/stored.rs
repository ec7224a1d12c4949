//! A payment as the payments table holds it, read by the consumers that verify their messages
//! against it: payment-processor (a refused charge reads why) and receipt-sender (an event is
//! acted on only for a charged payment, with the payment's values).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use crate::{PaymentRequested, PaymentStatus};

/// A payment as the payments table holds it. Every attribute but the id is optional: an item
/// written by hand, or by another version, may lack any of them, and a reader compares what is
/// there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPayment {
    /// The payment.
    pub payment_id: String,
    /// Its account.
    pub account_id: Option<String>,
    /// Its amount.
    pub amount_cents: Option<i64>,
    /// Its currency.
    pub currency: Option<String>,
    /// Its free text, as the payment's own message carries it.
    pub description: Option<String>,
    /// Its status, as stored.
    pub status: Option<String>,
    /// Its place in its account's order.
    pub sequence: Option<u64>,
    /// Why it failed, when it did.
    pub last_error: Option<String>,
    /// The ledger entry of its charge, once charged (written with the entry, in the charge's
    /// transaction).
    pub ledger_entry_id: Option<String>,
}

impl StoredPayment {
    /// Reads an item of the payments table.
    pub fn of_item(payment_id: &str, item: &HashMap<String, AttributeValue>) -> Self {
        let s = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
        let n = |name: &str| item.get(name).and_then(|v| v.as_n().ok());
        Self {
            payment_id: payment_id.to_owned(),
            account_id: s("accountId"),
            amount_cents: n("amountCents").and_then(|v| v.parse().ok()),
            currency: s("currency"),
            description: s("description"),
            status: s("status"),
            sequence: n("sequence").and_then(|v| v.parse().ok()),
            last_error: s("lastError"),
            ledger_entry_id: s("ledgerEntryId"),
        }
    }

    /// Reads `payment_id` from `payments_table`, strongly consistent: a write acknowledged
    /// before the read (a charge) is seen.
    pub async fn read(
        dynamodb: &aws_sdk_dynamodb::Client,
        payments_table: &str,
        payment_id: &str,
    ) -> Result<Option<Self>, aws_sdk_dynamodb::Error> {
        let output = dynamodb
            .get_item()
            .table_name(payments_table)
            .key("paymentId", AttributeValue::S(payment_id.to_owned()))
            .consistent_read(true)
            .send()
            .await?;
        Ok(output.item().map(|item| Self::of_item(payment_id, item)))
    }

    /// The message the payment's own producer would send for it, description included.
    pub fn requested(&self) -> PaymentRequested {
        PaymentRequested {
            payment_id: self.payment_id.clone(),
            account_id: self.account_id.clone().unwrap_or_default(),
            amount_cents: self.amount_cents.unwrap_or_default(),
            currency: self.currency.clone().unwrap_or_default(),
            description: self.description.clone(),
            sequence: self.sequence,
            unknown: serde_json::Map::new(),
        }
    }

    /// True when its stored status is `status`.
    pub fn is(&self, status: PaymentStatus) -> bool {
        self.status.as_deref() == Some(status.as_str())
    }
}
