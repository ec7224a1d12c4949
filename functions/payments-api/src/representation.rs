//! How the API shows a payment: the body of `GET /payments/{paymentId}` (the whole payment) and
//! of `POST /payments` (`{paymentId, status}`), read from the payment item.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use payments_model::PaymentStatus;
use serde_json::json;

/// A payment item of the payments table.
pub type Item = HashMap<String, AttributeValue>;

/// The body of `POST /payments`: the payment's id and status.
pub fn created(payment_id: &str, status: &str) -> String {
    json!({"paymentId": payment_id, "status": status}).to_string()
}

/// The body of `GET /payments/{paymentId}`: the payment's fields and status, `failureReason` (the
/// item's `lastError`), `sequence`, and `timestamps` of each state change (`accepted`,
/// `charged`, `failed`, `reopened`, epoch ms, from `createdAt`, `chargedAt`, `failedAt`,
/// `reopenedAt`); what the item does not have is `null`.
pub fn payment(payment_id: &str, item: &Item) -> String {
    let s = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
    let n = |name: &str| {
        item.get(name)
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse::<i64>().ok())
    };
    json!({
        "paymentId": payment_id,
        "accountId": s("accountId"),
        "amountCents": n("amountCents"),
        "currency": s("currency"),
        "description": s("description"),
        "status": s("status"),
        "failureReason": s("lastError"),
        "sequence": n("sequence"),
        "timestamps": {
            "accepted": n("createdAt"),
            "charged": n("chargedAt"),
            "failed": n("failedAt"),
            "reopened": n("reopenedAt"),
        },
    })
    .to_string()
}

/// The item's `status`.
pub fn status(item: &Item) -> Option<&str> {
    item.get("status")
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
}

/// `charged` or `failed`: what a client waiting on the payment waits for.
pub fn is_final(status: &str) -> bool {
    status == PaymentStatus::Charged.as_str() || status == PaymentStatus::Failed.as_str()
}
