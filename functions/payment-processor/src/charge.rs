//! A charge's writes: nothing is written here, the transactional mode commits them, the
//! idempotency record riding on the payment's update.

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
use lambda_idempotency::publish::MessageGroupId;
use lambda_idempotency::transaction::Transaction;
use payments_model::{PaymentCharged, PaymentRequested, PaymentStatus, lifecycle, order};

use crate::{ChargeError, Config};

/// A charge: the event it publishes is its stored result, so that a duplicate publishes the
/// same one.
pub type Charge = Transaction<PaymentCharged, TransactWriteItem>;

/// The positions of a charge's writes, in the order [`charge`] gives them.
pub(crate) mod write {
    /// The payment's update, conditioned on the stored payment.
    pub const PAYMENT: usize = 2;
    /// The account's settlement, conditioned on its order.
    pub const ACCOUNT: usize = 3;
}

/// The four writes of a charge, verified against the payments table in the same request:
///
/// 0. the ledger entry (a fresh id);
/// 1. the balance of the account in the payment's currency (an increment, and `lastChargedAt`,
///    the charge's time: the reconciler's audit compares the balance once it is past it);
/// 2. the payment marked `charged` (and moved from the reconciler's accepted index to its
///    charged index), carrying the charge's idempotency record
///    ([`Transaction::carry_record`](lambda_idempotency::transaction::Transaction::carry_record)),
///    on condition that it exists, is `accepted`, and has the message's
///    account, amount, currency and number ([`lifecycle::agrees_with_accepted`]): a message for a payment that was never
///    accepted, or that disagrees with it, or for a payment that failed or is charged already,
///    commits nothing and creates no row;
/// 3. the account's settled number moved to the payment's, on condition that the previous
///    payment of the account is settled ([`order::settle`]); none for a payment accepted before
///    accounts were ordered (the message has no number, and the condition on the payment
///    requires the stored one to have none either).
///
/// `message_id` is the message that led to the charge, `now_ms` the charge's time,
/// `queued_at_ms` when payments-publisher's send reached SQS.
pub fn charge(
    config: &Config,
    payment: &PaymentRequested,
    message_id: &str,
    now_ms: i64,
    queued_at_ms: i64,
) -> Result<Charge, ChargeError> {
    validate(payment)?;
    let entry_id = uuid::Uuid::new_v4().to_string();
    let now = AttributeValue::N(now_ms.to_string());
    let s = |v: &str| AttributeValue::S(v.to_owned());
    let amount = AttributeValue::N(payment.amount_cents.to_string());
    let mut ledger = Put::builder()
        .table_name(&config.ledger_table)
        .item("entryId", s(&entry_id))
        .item("paymentId", s(&payment.payment_id))
        .item("accountId", s(&payment.account_id))
        .item("amountCents", amount.clone())
        .item("currency", s(&payment.currency))
        .item("messageId", s(message_id))
        .item("createdAt", now.clone());
    if let Some(sequence) = payment.sequence {
        ledger = ledger.item("sequence", AttributeValue::N(sequence.to_string()));
    }
    let ledger = ledger.build().expect("table and item are set");
    let balance = Update::builder()
        .table_name(&config.balances_table)
        .key("accountId", s(&payment.account_id))
        .key("currency", s(&payment.currency))
        .update_expression("ADD balanceCents :amount, charges :one SET lastChargedAt = :now")
        .expression_attribute_values(":amount", amount.clone())
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .expression_attribute_values(":now", now.clone())
        .build()
        .expect("table, key and expression are set");
    let (names, values) = lifecycle::agreement(payment);
    let status = Update::builder()
        .table_name(&config.payments_table)
        .key("paymentId", s(&payment.payment_id))
        .update_expression(
            "SET #status = :charged, chargedAt = :now, queuedAt = :queued, ledgerEntryId = :entry, \
             #chargedShard = :shard REMOVE #acceptedShard",
        )
        .condition_expression(lifecycle::agrees_with_accepted(payment))
        .set_expression_attribute_names(Some(names))
        .set_expression_attribute_values(Some(values))
        .expression_attribute_names("#chargedShard", lifecycle::CHARGED_SHARD)
        .expression_attribute_names("#acceptedShard", lifecycle::ACCEPTED_SHARD)
        .expression_attribute_values(":charged", s(PaymentStatus::Charged.as_str()))
        .expression_attribute_values(":now", now)
        .expression_attribute_values(":queued", AttributeValue::N(queued_at_ms.to_string()))
        .expression_attribute_values(":entry", s(&entry_id))
        .expression_attribute_values(":shard", s(&lifecycle::shard(&payment.payment_id)))
        .build()
        .expect("table, key and expression are set");
    let event = PaymentCharged {
        payment_id: payment.payment_id.clone(),
        account_id: payment.account_id.clone(),
        amount_cents: payment.amount_cents,
        currency: payment.currency.clone(),
        ledger_entry_id: entry_id,
    };
    // The payment refuses a second charge (it is no longer `accepted`): it carries the record,
    // so that the charge is its own writes and nothing more.
    let charge = Charge::new(event)
        .put(ledger)
        .update(balance)
        .update_carrying_record(status);
    Ok(match payment.sequence {
        Some(sequence) => charge.update(order::settle(
            &config.accounts_table,
            &payment.account_id,
            sequence,
        )),
        None => charge,
    })
}

/// A payment that can never be charged.
fn validate(payment: &PaymentRequested) -> Result<(), ChargeError> {
    if payment.payment_id.is_empty() || payment.payment_id.len() > 128 {
        return Err(ChargeError::Invalid(format!(
            "paymentId must be 1 to 128 characters; it has {}",
            payment.payment_id.len()
        )));
    }
    if payment.amount_cents <= 0 {
        return Err(ChargeError::Invalid(format!(
            "amountCents {} is not positive",
            payment.amount_cents
        )));
    }
    if payment.currency.len() != 3 || !payment.currency.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(ChargeError::Invalid(format!(
            "currency `{}` is not an ISO 4217 code",
            payment.currency
        )));
    }
    if payment.sequence == Some(0) {
        return Err(ChargeError::Invalid(
            "sequence 0: an account's payments are numbered from 1".into(),
        ));
    }
    MessageGroupId::new(payment.account_id.as_str())
        .map_err(|e| ChargeError::Invalid(format!("accountId: {e}")))?;
    Ok(())
}
