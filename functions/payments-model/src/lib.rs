//! The payments pipeline's model: the payment as the payments table stores it (and as its
//! consumers read it back, [`stored`]), the messages on its queues, its lifecycle and its
//! ordering, and the names of the metrics its functions emit.
//! The functions' configuration is `payments-config`.

use serde::{Deserialize, Serialize};

pub mod lifecycle;
pub mod metrics;
pub mod order;
pub mod stored;

/// Metric namespace of the pipeline ([`metrics::NAMESPACE`]).
pub const METRICS_NAMESPACE: &str = metrics::NAMESPACE;

/// A payment's state, as stored in the payments table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PaymentStatus {
    /// Stored (and relayed to `payments.fifo` by payments-publisher); not charged yet.
    Accepted,
    /// Charged.
    Charged,
    /// Processing gave up (the message went to the dead-letter queue).
    Failed,
}

impl PaymentStatus {
    /// The stored value.
    pub fn as_str(self) -> &'static str {
        match self {
            PaymentStatus::Accepted => "accepted",
            PaymentStatus::Charged => "charged",
            PaymentStatus::Failed => "failed",
        }
    }
}

/// A payment as the payments table stores it: written once by payments-api (the outbox record),
/// relayed by payments-publisher from the table's stream, then updated by payment-processor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentItem {
    /// The payment: derived from the caller and its Idempotency-Key.
    pub payment_id: String,
    /// The account charged (the caller's, from its identity).
    pub account_id: String,
    /// Amount in minor units (> 0).
    pub amount_cents: i64,
    /// ISO 4217 code.
    pub currency: String,
    /// Optional free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// [`PaymentStatus`], as stored.
    pub status: String,
    /// When payments-api stored it (epoch ms).
    pub created_at: i64,
    /// The caller (`sub` of its token) that created it.
    pub caller_id: String,
    /// SHA-256 of the canonical request body: the same key with another body is refused even
    /// after the idempotency record expired.
    pub request_hash: String,
    /// Its place in its account's order ([`order`]): 1 for the account's first payment. Absent
    /// on payments accepted before accounts were ordered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence: Option<u64>,
    /// How many times an operator reopened it after it failed (absent: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reopens: Option<u32>,
}

impl PaymentItem {
    /// The message payments-publisher sends for it.
    pub fn requested(&self) -> PaymentRequested {
        PaymentRequested {
            payment_id: self.payment_id.clone(),
            account_id: self.account_id.clone(),
            amount_cents: self.amount_cents,
            currency: self.currency.clone(),
            description: self.description.clone(),
            sequence: self.sequence,
            unknown: serde_json::Map::new(),
        }
    }
}

/// Body of a message on `payments.fifo`: a payment to charge.
///
/// A tolerant reader: fields it does not know (a newer producer's) are kept in
/// [`unknown`](Self::unknown), never refused, and the optional fields may be missing (an older
/// producer's). What defines the payment (id, account, amount, currency) is required, and
/// payment-processor checks it against the stored payment before charging.
///
/// ```
/// use payments_model::PaymentRequested;
///
/// // The previous version: no sequence.
/// let old: PaymentRequested = serde_json::from_str(
///     r#"{"paymentId":"p-1","accountId":"a-1","amountCents":5,"currency":"EUR"}"#,
/// ).unwrap();
/// assert_eq!(old.sequence, None);
/// // A next version: new fields are read past.
/// let next: PaymentRequested = serde_json::from_str(
///     r#"{"version":3,"paymentId":"p-1","accountId":"a-1","amountCents":5,"currency":"EUR","sequence":2,"channel":{"kind":"web"}}"#,
/// ).unwrap();
/// assert_eq!(next.sequence, Some(2));
/// assert_eq!(next.unknown_fields(), vec!["channel", "version"]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequested {
    /// The payment (derived from the client's Idempotency-Key).
    pub payment_id: String,
    /// The account charged; also the FIFO message group.
    pub account_id: String,
    /// Amount in minor units, > 0.
    pub amount_cents: i64,
    /// ISO 4217 code.
    pub currency: String,
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The payment's place in its account's order ([`order`]); absent in messages of the
    /// previous version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence: Option<u64>,
    /// Fields this version does not know, as sent. Never written back.
    #[serde(flatten, skip_serializing)]
    pub unknown: serde_json::Map<String, serde_json::Value>,
}

impl PaymentRequested {
    /// The names of the fields this version does not know, sorted.
    pub fn unknown_fields(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.unknown.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }
}

/// Body of a message on the `receipts` queue: a payment was charged. Read tolerantly: fields a
/// newer payment-processor adds are ignored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentCharged {
    /// The payment.
    pub payment_id: String,
    /// The account.
    pub account_id: String,
    /// Amount in minor units.
    pub amount_cents: i64,
    /// ISO 4217 code.
    pub currency: String,
    /// The ledger entry written by the charge.
    pub ledger_entry_id: String,
}

/// The receipt id of a payment in the receipts table: `rcpt_<paymentId>`. One payment, one
/// receipt id, whichever event writes it.
///
/// ```
/// assert_eq!(payments_model::receipt_id("pay_42"), "rcpt_pay_42");
/// ```
pub fn receipt_id(payment_id: &str) -> String {
    format!("rcpt_{payment_id}")
}
