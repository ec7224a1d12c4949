//! A payment's life in the payments table, as every writer sees it: `accepted` (payments-api,
//! or an operator's reopen), then `charged` or `failed` (payment-processor, or the reconciler
//! for a message SQS moved to the dead-letter queue).
//!
//! Two sparse global secondary indexes let the reconciler find work without a scan:
//!
//! - [`ACCEPTED_INDEX`]: a payment is in it while it is `accepted` ([`ACCEPTED_SHARD`] set at
//!   acceptance and by a reopen, removed when it is charged or marked failed), sorted by
//!   [`ACCEPTED_AT`]: the payments waiting longest come first.
//! - [`CHARGED_INDEX`]: every charged payment ([`CHARGED_SHARD`] set by the charge), sorted by
//!   `chargedAt`, carrying the account, amount, currency and ledger entry: the reconciler audits
//!   the charges of each shard from where it stopped.
//!
//! Each index's partition key is one of [`SHARDS`] values derived from the payment id
//! ([`shard`]), so that a busy pipeline's writes spread over several index partitions.
//!
//! Settling a payment is conditioned on the message agreeing with the stored payment
//! ([`agrees_with_accepted`], [`agreement`]), so a message that disagrees with its payment
//! changes nothing. [`mark_failed`] uses the same condition, except that a message of the
//! previous version (no number) fails its payment whatever number the payment holds
//! ([`may_fail`]). A payment charged from the table ahead of its message, which no message
//! stands for, is failed by its number ([`mark_number_failed`]).

use std::collections::HashMap;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::AttributeValue;

use crate::{PaymentRequested, PaymentStatus};

/// How many partitions each reconciler index spreads over.
pub const SHARDS: u32 = 8;

/// The sparse index of payments waiting to be charged (key [`ACCEPTED_SHARD`], [`ACCEPTED_AT`]).
pub const ACCEPTED_INDEX: &str = "accepted";

/// The payment attribute that puts it in [`ACCEPTED_INDEX`].
pub const ACCEPTED_SHARD: &str = "acceptedShard";

/// When the payment was last accepted (epoch ms): by payments-api (its `createdAt`), or by an
/// operator's reopen. [`ACCEPTED_INDEX`]'s sort key.
pub const ACCEPTED_AT: &str = "acceptedAt";

/// The index of charged payments (key [`CHARGED_SHARD`], `chargedAt`).
pub const CHARGED_INDEX: &str = "charged";

/// The payment attribute that puts it in [`CHARGED_INDEX`].
pub const CHARGED_SHARD: &str = "chargedShard";

/// The ledger's index of entries by payment (key `paymentId`): how many entries a payment has.
pub const LEDGER_BY_PAYMENT_INDEX: &str = "byPayment";

/// The shard of a payment in both indexes: a stable hash of its id, `0` to `SHARDS - 1`.
///
/// ```
/// use payments_model::lifecycle::{SHARDS, shard};
///
/// assert_eq!(shard("pay_1"), shard("pay_1"));
/// assert!(shard("pay_1").parse::<u32>().unwrap() < SHARDS);
/// ```
pub fn shard(payment_id: &str) -> String {
    // FNV-1a: stable across versions and platforms (std's hasher is not).
    let hash = payment_id.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    (hash % SHARDS).to_string()
}

/// Every shard value, for a reader of the indexes.
pub fn shards() -> impl Iterator<Item = String> {
    (0..SHARDS).map(|s| s.to_string())
}

/// The condition under which a message may settle its payment: the payment exists, is
/// `accepted`, and has the message's account, amount, currency and number (or no number, for a
/// message and a payment from before accounts were ordered). Its names and values are
/// [`agreement`]'s.
pub fn agrees_with_accepted(payment: &PaymentRequested) -> &'static str {
    match payment.sequence {
        Some(_) => {
            "attribute_exists(paymentId) AND #status = :accepted AND accountId = :account \
             AND amountCents = :amount AND currency = :currency AND #sequence = :sequence"
        }
        None => {
            "attribute_exists(paymentId) AND #status = :accepted AND accountId = :account \
             AND amountCents = :amount AND currency = :currency \
             AND attribute_not_exists(#sequence)"
        }
    }
}

/// The expression attribute names and values of [`agrees_with_accepted`] for `payment`.
pub fn agreement(
    payment: &PaymentRequested,
) -> (HashMap<String, String>, HashMap<String, AttributeValue>) {
    let s = |v: &str| AttributeValue::S(v.to_owned());
    let names = HashMap::from([
        ("#status".to_owned(), "status".to_owned()),
        ("#sequence".to_owned(), "sequence".to_owned()),
    ]);
    let mut values = HashMap::from([
        (":accepted".to_owned(), s(PaymentStatus::Accepted.as_str())),
        (":account".to_owned(), s(&payment.account_id)),
        (
            ":amount".to_owned(),
            AttributeValue::N(payment.amount_cents.to_string()),
        ),
        (":currency".to_owned(), s(&payment.currency)),
    ]);
    if let Some(sequence) = payment.sequence {
        values.insert(
            ":sequence".to_owned(),
            AttributeValue::N(sequence.to_string()),
        );
    }
    (names, values)
}

/// The condition under which a message may mark its payment `failed`, with its names and
/// values: [`agrees_with_accepted`], except for a message without a number (the previous
/// version), which stands for its payment whatever number the payment holds, unless the payment
/// was reopened since (a reopened payment is sent again with its new number: an old copy of its
/// message never fails it again). A charge, which settles the payment's number, is made with the
/// stored number instead.
///
/// ```
/// use payments_model::PaymentRequested;
/// use payments_model::lifecycle::may_fail;
///
/// let previous: PaymentRequested = serde_json::from_str(
///     r#"{"paymentId":"p-1","accountId":"a-1","amountCents":5,"currency":"EUR"}"#,
/// ).unwrap();
/// let (condition, names, _) = may_fail(&previous);
/// assert!(!condition.contains("#sequence") && !names.contains_key("#sequence"));
/// assert!(condition.contains("attribute_not_exists(#reopenedAt)"));
/// ```
pub fn may_fail(
    payment: &PaymentRequested,
) -> (
    &'static str,
    HashMap<String, String>,
    HashMap<String, AttributeValue>,
) {
    let (mut names, values) = agreement(payment);
    if payment.sequence.is_some() {
        return (agrees_with_accepted(payment), names, values);
    }
    names.remove("#sequence");
    names.insert("#reopenedAt".into(), REOPENED_AT.into());
    (
        "attribute_exists(paymentId) AND #status = :accepted AND accountId = :account \
         AND amountCents = :amount AND currency = :currency \
         AND attribute_not_exists(#reopenedAt)",
        names,
        values,
    )
}

/// When an operator last reopened the payment (epoch ms); absent on a payment never reopened.
pub const REOPENED_AT: &str = "reopenedAt";

/// What [`mark_failed`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkedFailed {
    /// The payment is now `failed`, with the reason.
    Marked,
    /// Nothing was written: the message is not an accepted payment's (never accepted,
    /// disagreeing with it, or settled already).
    NotAccepted,
}

/// Marks `payment` `failed` with `reason` (`lastError`, `failedAt` = `now_ms`), on condition
/// that the message agrees with the accepted payment ([`may_fail`]: a message of either version);
/// it leaves [`ACCEPTED_INDEX`]. A failed payment is charged only after an operator reopens it.
pub async fn mark_failed(
    dynamodb: &aws_sdk_dynamodb::Client,
    payments_table: &str,
    payment: &PaymentRequested,
    reason: &str,
    now_ms: i64,
) -> Result<MarkedFailed, SdkError<UpdateItemError>> {
    let (condition, names, values) = may_fail(payment);
    let failing = Failing {
        payment_id: &payment.payment_id,
        condition,
        names,
        values,
    };
    failing
        .write(dynamodb, payments_table, reason, now_ms)
        .await
}

/// Marks the payment that holds number `sequence` of its account `failed` with `reason`, as
/// [`mark_failed`] does, on condition that it is `accepted` under that number, whatever else it
/// holds: for a payment charged from the table ahead of its message (no message to agree with),
/// whose stored values may be what keeps it from being charged.
pub async fn mark_number_failed(
    dynamodb: &aws_sdk_dynamodb::Client,
    payments_table: &str,
    payment_id: &str,
    sequence: u64,
    reason: &str,
    now_ms: i64,
) -> Result<MarkedFailed, SdkError<UpdateItemError>> {
    let failing = Failing {
        payment_id,
        condition: "attribute_exists(paymentId) AND #status = :accepted AND #sequence = :sequence",
        names: HashMap::from([
            ("#status".to_owned(), "status".to_owned()),
            ("#sequence".to_owned(), "sequence".to_owned()),
        ]),
        values: HashMap::from([
            (
                ":accepted".to_owned(),
                AttributeValue::S(PaymentStatus::Accepted.as_str().into()),
            ),
            (
                ":sequence".to_owned(),
                AttributeValue::N(sequence.to_string()),
            ),
        ]),
    };
    failing
        .write(dynamodb, payments_table, reason, now_ms)
        .await
}

/// A payment to mark `failed`, under a condition with its names and values.
struct Failing<'a> {
    payment_id: &'a str,
    condition: &'static str,
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
}

impl Failing<'_> {
    async fn write(
        mut self,
        dynamodb: &aws_sdk_dynamodb::Client,
        payments_table: &str,
        reason: &str,
        now_ms: i64,
    ) -> Result<MarkedFailed, SdkError<UpdateItemError>> {
        self.values.insert(
            ":failed".into(),
            AttributeValue::S(PaymentStatus::Failed.as_str().into()),
        );
        self.values
            .insert(":error".into(), AttributeValue::S(reason.to_owned()));
        self.values
            .insert(":now".into(), AttributeValue::N(now_ms.to_string()));
        self.names.insert("#shard".into(), ACCEPTED_SHARD.into());
        let result = dynamodb
            .update_item()
            .table_name(payments_table)
            .key("paymentId", AttributeValue::S(self.payment_id.to_owned()))
            .update_expression(
                "SET #status = :failed, lastError = :error, failedAt = :now REMOVE #shard",
            )
            .condition_expression(self.condition)
            .set_expression_attribute_names(Some(self.names))
            .set_expression_attribute_values(Some(self.values))
            .send()
            .await;
        match result {
            Ok(_) => Ok(MarkedFailed::Marked),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                Ok(MarkedFailed::NotAccepted)
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_spread_and_stay() {
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..200 {
            seen.insert(shard(&format!("pay_{i}")));
        }
        assert_eq!(seen.len(), SHARDS as usize, "{seen:?}");
        // Pinned: a change of the hash would strand payments in the indexes' old shards.
        assert_eq!(shard("pay_1"), shard("pay_1"));
        assert_eq!(shard(""), (0x811c_9dc5_u32 % SHARDS).to_string());
    }

    #[test]
    fn the_agreement_names_every_placeholder_of_the_condition_and_no_other() {
        for body in [
            r#"{"paymentId":"p","accountId":"a","amountCents":5,"currency":"EUR"}"#,
            r#"{"paymentId":"p","accountId":"a","amountCents":5,"currency":"EUR","sequence":3}"#,
        ] {
            let payment: PaymentRequested = serde_json::from_str(body).unwrap();
            let (names, values) = agreement(&payment);
            let charge = (agrees_with_accepted(&payment), names, values);
            for (condition, names, values) in [charge, may_fail(&payment)] {
                let tokens: std::collections::BTreeSet<&str> = condition
                    .split(|c: char| !(c.is_alphanumeric() || c == '#' || c == ':'))
                    .filter(|t| t.starts_with('#') || t.starts_with(':'))
                    .collect();
                let given: std::collections::BTreeSet<&str> = names
                    .keys()
                    .chain(values.keys())
                    .map(String::as_str)
                    .collect();
                // DynamoDB refuses a name or value the expression does not use.
                assert_eq!(tokens, given, "{body}: {condition}");
            }
        }
    }
}
