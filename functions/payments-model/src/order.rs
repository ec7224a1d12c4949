//! Each account's payments in the order payments-api accepted them, whatever the transport does.
//!
//! On AWS the payments table's stream has many shards (the table is keyed by payment, so one
//! account's payments spread over them), Lambda reads the shards in parallel and retries each
//! for hours, and `republish` sends payments again: the order in which messages reach
//! `payments.fifo` is not the order of acceptance. So the order is written with the payments,
//! and enforced where they are charged:
//!
//! - **Acceptance** gives each payment the next number of its account, in two steps
//!   ([`append`]), neither of which waits for the account's other payments:
//!   1. the number is taken from the account's counter ([`NEXT`]) by one `UpdateItem ADD`
//!      ([`take_number`]): concurrent payments of one account each get a number of their own
//!      at once, and no condition can fail;
//!   2. the payment is written with its number, in one transaction with the number's own item
//!      in the accounts table ([`number_key`], naming the payment: [`claim`]), on condition that
//!      the number has no item yet.
//!
//!   Numbers never repeat. They may have gaps: a number whose payment was not written (its write
//!   was refused, failed, or the function stopped between the two steps) has no item. The
//!   account item holds its two counters and nothing else, whatever the number of unsettled
//!   payments: each number has an item of its own. A payment whose request began after another's
//!   `201` has a higher number than that one.
//! - **Charging** payment `n` is conditioned on the account's settled number ([`SETTLED`]) being
//!   `n - 1`, and moves it to `n` in the same transaction: payment `n` is never charged before
//!   every lower number is settled (charged, failed, or passed over). A message that arrives
//!   early is not held: payment-processor settles the missing numbers first, from the tables
//!   (the source of truth), then charges it; their own messages, when they come, are
//!   duplicates. A number without an item is settled without a charge once payment-processor
//!   has written its item itself, *voided* ([`void`]), under the condition payments-api's
//!   transaction carries: whichever comes first holds the number. So a gap never holds up its
//!   account, and no payment is ever written with a number that is voided or settled: a
//!   payments-api write that finds its number voided takes another number, a later one
//!   ([`APPEND_TRIES`]).
//!
//! A payment accepted before accounts were ordered has no number, and is charged on its own. An
//! account numbered before numbers had items of their own names its unsettled payments on the
//! account item ([`pending_attribute`]); they are read there, and removed as they settle.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, Put, ReturnValue, TransactWriteItem, Update};

/// The account item's attribute holding the last number given to a payment of the account.
pub const NEXT: &str = "nextSequence";

/// The account item's attribute holding the number of the last settled (charged, failed or
/// passed over) number of the account; absent before its first.
pub const SETTLED: &str = "settledSequence";

/// A number's item: the attribute naming the payment that holds the number.
pub const HOLDER: &str = "paymentId";

/// A number's item: when payment-processor voided the number (epoch ms), on a voided number's
/// item only.
pub const VOIDED_AT: &str = "voidedAt";

/// The key in the accounts table of the item of number `sequence` of `account_id`. An account id
/// never holds a space (it is a FIFO message group id), so the key of a number's item is never
/// an account's; they all begin with `number #` (payment-processor's grant to void numbers is
/// limited to those keys).
///
/// ```
/// assert_eq!(payments_model::order::number_key("acct-1", 7), "number #7 of acct-1");
/// ```
pub fn number_key(account_id: &str, sequence: u64) -> String {
    format!("number #{sequence} of {account_id}")
}

/// The account item's attribute that named the payment numbered `sequence` while it was not
/// settled, before numbers had items of their own: read for such accounts, removed as they
/// settle, never written.
///
/// ```
/// assert_eq!(payments_model::order::pending_attribute(7), "pending7");
/// ```
pub fn pending_attribute(sequence: u64) -> String {
    format!("pending{sequence}")
}

/// The write of number `sequence`'s item naming `payment_id` as its holder: refused (the
/// transaction with it is cancelled) if the number has an item already (voided by
/// payment-processor).
pub fn claim(table: &str, account_id: &str, sequence: u64, payment_id: &str) -> Put {
    number_item(
        table,
        account_id,
        sequence,
        (HOLDER, AttributeValue::S(payment_id.to_owned())),
    )
}

/// The write of number `sequence`'s item voided (no payment holds it) at `now_ms`: refused if the
/// number has an item already (its payment was written first).
pub fn voided(table: &str, account_id: &str, sequence: u64, now_ms: i64) -> Put {
    number_item(
        table,
        account_id,
        sequence,
        (VOIDED_AT, AttributeValue::N(now_ms.to_string())),
    )
}

/// The put of number `sequence`'s item with one attribute, on condition that it has no item:
/// [`claim`] and [`voided`] share it, so that only the first of the two is written.
fn number_item(
    table: &str,
    account_id: &str,
    sequence: u64,
    (name, value): (&str, AttributeValue),
) -> Put {
    Put::builder()
        .table_name(table)
        .item(
            "accountId",
            AttributeValue::S(number_key(account_id, sequence)),
        )
        .item(name, value)
        .condition_expression("attribute_not_exists(accountId)")
        .build()
        .expect("table and item are set")
}

/// The write that settles number `sequence` of `account_id` (its payment charged with it, or
/// failed, or no payment): refused unless number `sequence - 1` is the last settled.
pub fn settle(table: &str, account_id: &str, sequence: u64) -> Update {
    let builder = Update::builder()
        .table_name(table)
        .key("accountId", AttributeValue::S(account_id.to_owned()))
        .update_expression("SET #settled = :settled REMOVE #pending")
        .expression_attribute_names("#settled", SETTLED)
        .expression_attribute_names("#pending", pending_attribute(sequence))
        .expression_attribute_values(":settled", AttributeValue::N(sequence.to_string()));
    let builder = if sequence <= 1 {
        builder.condition_expression("attribute_not_exists(#settled)")
    } else {
        builder
            .condition_expression("#settled = :previous")
            .expression_attribute_values(":previous", AttributeValue::N((sequence - 1).to_string()))
    };
    builder.build().expect("table, key and expression are set")
}

/// Tries of [`take_number`] when the account item is in another transaction (a charge settling
/// one of its numbers) at the same moment: DynamoDB refuses the update, which changed nothing.
pub const TAKE_TRIES: u32 = 8;

/// Takes the next number of `account_id`: one `UpdateItem` adding 1 to its counter ([`NEXT`]),
/// answering the new value. No condition: concurrent payments of the account never refuse
/// each other. A `TransactionConflictException` (the account item is in a charge's transaction
/// at that moment) changed nothing, and is tried again after a short random pause.
pub async fn take_number(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    account_id: &str,
) -> Result<u64, aws_sdk_dynamodb::Error> {
    let mut tries = 0;
    loop {
        tries += 1;
        let result = client
            .update_item()
            .table_name(table)
            .key("accountId", AttributeValue::S(account_id.to_owned()))
            .update_expression("ADD #next :one")
            .expression_attribute_names("#next", NEXT)
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .return_values(ReturnValue::UpdatedNew)
            .send()
            .await;
        match result.map_err(aws_sdk_dynamodb::Error::from) {
            Ok(output) => {
                return output
                    .attributes()
                    .and_then(|a| a.get(NEXT))
                    .and_then(|v| v.as_n().ok())
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| {
                        aws_sdk_dynamodb::Error::InternalServerError(
                            aws_sdk_dynamodb::types::error::InternalServerError::builder()
                                .message(format!(
                                    "the update of the account's counter answered no {NEXT}"
                                ))
                                .build(),
                        )
                    });
            }
            Err(aws_sdk_dynamodb::Error::TransactionConflictException(_)) if tries < TAKE_TRIES => {
                let pause = Duration::from_millis(5 << tries.min(6));
                tokio::time::sleep(pause / 2 + pause.mul_f64(fastrand::f64() / 2.0)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// What [`append`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    /// The payment's write committed with this number.
    Numbered(u64),
    /// The payment's write was refused by its own condition (a payment with its id exists, say):
    /// nothing was written (the number taken stays without an item: a gap).
    Refused,
}

/// Numbers [`append`] takes for one payment, when the one it took was voided meanwhile (by
/// payment-processor, catching up on a later payment of the account) or its items were in
/// another transaction: each try takes a new number, which no other payment has.
pub const APPEND_TRIES: u32 = 5;

/// Writes a payment with the next number of its account: takes a number ([`take_number`]), then
/// commits `payment_write(number)` (the payment's put, or its update when an operator reopens
/// it) and the number's item ([`claim`]) in one transaction. A number voided before the
/// transaction (payment-processor caught up on a later payment meanwhile) cancels it, and the
/// payment takes another number (up to [`APPEND_TRIES`] numbers).
pub async fn append(
    client: &aws_sdk_dynamodb::Client,
    accounts_table: &str,
    account_id: &str,
    payment_id: &str,
    payment_write: impl Fn(u64) -> TransactWriteItem,
) -> Result<Appended, aws_sdk_dynamodb::Error> {
    let mut tries = 0;
    loop {
        tries += 1;
        let number = take_number(client, accounts_table, account_id).await?;
        let written = client
            .transact_write_items()
            .transact_items(payment_write(number))
            .transact_items(
                TransactWriteItem::builder()
                    .put(claim(accounts_table, account_id, number, payment_id))
                    .build(),
            )
            .send()
            .await;
        let cancelled = match written {
            Ok(_) => return Ok(Appended::Numbered(number)),
            Err(SdkError::ServiceError(e))
                if matches!(
                    e.err(),
                    TransactWriteItemsError::TransactionCanceledException(_)
                ) =>
            {
                let TransactWriteItemsError::TransactionCanceledException(cancelled) = e.err()
                else {
                    unreachable!("matched above")
                };
                cancelled.clone()
            }
            Err(e) => return Err(e.into()),
        };
        let code = |i: usize| {
            cancelled
                .cancellation_reasons()
                .get(i)
                .and_then(|r| r.code())
                .unwrap_or_default()
                .to_owned()
        };
        if code(0) == "ConditionalCheckFailed" {
            return Ok(Appended::Refused);
        }
        if tries >= APPEND_TRIES {
            return Err(aws_sdk_dynamodb::Error::TransactionCanceledException(
                cancelled,
            ));
        }
        tracing::info!(
            account_id,
            payment_id,
            number,
            reasons = ?(code(0), code(1)),
            "the payment's number was voided (or its items were busy) before the payment was \
             written: taking another number"
        );
    }
}

/// Who holds a number of an account, as its item says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// This payment was written with the number.
    Payment(String),
    /// payment-processor voided the number: no payment has it.
    Voided,
    /// The number has no item (yet): its payment is being written, or never will be.
    Nobody,
}

impl Holder {
    /// Reads a number's item (an absent item is [`Holder::Nobody`]).
    pub fn of_item(item: Option<&HashMap<String, AttributeValue>>) -> Self {
        match item {
            None => Holder::Nobody,
            Some(item) => match item.get(HOLDER).and_then(|v| v.as_s().ok()) {
                Some(id) => Holder::Payment(id.clone()),
                None => Holder::Voided,
            },
        }
    }

    /// Reads the item of number `sequence` of `account_id`, strongly consistent.
    pub async fn read(
        client: &aws_sdk_dynamodb::Client,
        table: &str,
        account_id: &str,
        sequence: u64,
    ) -> Result<Self, aws_sdk_dynamodb::Error> {
        let output = client
            .get_item()
            .table_name(table)
            .key(
                "accountId",
                AttributeValue::S(number_key(account_id, sequence)),
            )
            .consistent_read(true)
            .send()
            .await?;
        Ok(Self::of_item(output.item()))
    }
}

/// Voids number `sequence` of `account_id` unless a payment holds it: writes its item voided
/// ([`voided`]) at `now_ms`, on condition that it has none. Answers who holds the number now:
/// [`Holder::Voided`], or the payment whose write came first.
pub async fn void(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    account_id: &str,
    sequence: u64,
    now_ms: i64,
) -> Result<Holder, aws_sdk_dynamodb::Error> {
    let put = voided(table, account_id, sequence, now_ms);
    let result = client
        .put_item()
        .set_table_name(Some(put.table_name))
        .set_item(Some(put.item))
        .set_condition_expression(put.condition_expression)
        .send()
        .await;
    match result.map_err(aws_sdk_dynamodb::Error::from) {
        Ok(_) => Ok(Holder::Voided),
        Err(aws_sdk_dynamodb::Error::ConditionalCheckFailedException(_)) => {
            Holder::read(client, table, account_id, sequence).await
        }
        Err(e) => Err(e),
    }
}

/// What an account item says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Account {
    /// The last number given ([`NEXT`]); 0 before the first payment.
    pub next: u64,
    /// The last number settled ([`SETTLED`]); 0 before the first.
    pub settled: u64,
    /// The payments not settled yet, by number, as the account item named them before numbers
    /// had items of their own ([`pending_attribute`]); empty for numbers given since.
    pub pending: HashMap<u64, String>,
}

impl Account {
    /// Reads an account item (an absent item is a fresh account).
    pub fn of_item(item: Option<&HashMap<String, AttributeValue>>) -> Self {
        let Some(item) = item else {
            return Self::default();
        };
        let number = |name: &str| {
            item.get(name)
                .and_then(|v| v.as_n().ok())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        let pending = item
            .iter()
            .filter_map(|(name, value)| {
                let n = name.strip_prefix("pending")?.parse().ok()?;
                Some((n, value.as_s().ok()?.clone()))
            })
            .collect();
        Self {
            next: number(NEXT),
            settled: number(SETTLED),
            pending,
        }
    }

    /// Reads the account item of `account_id`, strongly consistent.
    pub async fn read(
        client: &aws_sdk_dynamodb::Client,
        table: &str,
        account_id: &str,
    ) -> Result<Self, aws_sdk_dynamodb::Error> {
        let output = client
            .get_item()
            .table_name(table)
            .key("accountId", AttributeValue::S(account_id.to_owned()))
            .consistent_read(true)
            .send()
            .await?;
        Ok(Self::of_item(output.item()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_account_item_reads_its_numbers_and_pending_payments() {
        let item = HashMap::from([
            ("accountId".to_owned(), AttributeValue::S("a-1".into())),
            (NEXT.to_owned(), AttributeValue::N("3".into())),
            (SETTLED.to_owned(), AttributeValue::N("1".into())),
            (pending_attribute(2), AttributeValue::S("p-2".into())),
            (pending_attribute(3), AttributeValue::S("p-3".into())),
        ]);
        let account = Account::of_item(Some(&item));
        assert_eq!((account.next, account.settled), (3, 1));
        assert_eq!(account.pending.get(&2).map(String::as_str), Some("p-2"));
        assert_eq!(account.pending.len(), 2);
        assert_eq!(Account::of_item(None), Account::default());
    }

    #[test]
    fn a_number_item_is_claimed_or_voided_by_whoever_comes_first() {
        let claim = claim("accounts", "a-1", 3, "p-3");
        let void = voided("accounts", "a-1", 3, 1_000);
        for put in [&claim, &void] {
            // One key for both, which no account has, and the same condition: one of the two
            // writes wins.
            assert_eq!(
                put.item().get("accountId"),
                Some(&AttributeValue::S("number #3 of a-1".into()))
            );
            assert_eq!(
                put.condition_expression(),
                Some("attribute_not_exists(accountId)")
            );
        }
        assert_eq!(
            Holder::of_item(Some(claim.item())),
            Holder::Payment("p-3".into())
        );
        assert_eq!(Holder::of_item(Some(void.item())), Holder::Voided);
        assert_eq!(Holder::of_item(None), Holder::Nobody);
    }

    #[test]
    fn the_first_settlement_needs_no_earlier_one() {
        assert_eq!(
            settle("accounts", "a-1", 1).condition_expression(),
            Some("attribute_not_exists(#settled)")
        );
        assert_eq!(
            settle("accounts", "a-1", 4)
                .expression_attribute_values()
                .and_then(|v| v.get(":previous")),
            Some(&AttributeValue::N("3".into()))
        );
    }
}
