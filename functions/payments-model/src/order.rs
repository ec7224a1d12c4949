//! Each account's payments in the order payments-api accepted them, whatever the transport does.
//!
//! On AWS the payments table's stream has many shards (the table is keyed by payment, so one
//! account's payments spread over them), Lambda reads the shards in parallel and retries each
//! for hours, and `republish` sends payments again: the order in which messages reach
//! `payments.fifo` is not the order of acceptance. So the order is written with the payments,
//! and enforced where they are charged:
//!
//! - **Acceptance** gives each payment the next number of its account: one item per account in
//!   the accounts table holds the last number given ([`NEXT`]) and, until the payment is
//!   settled, which payment has each number ([`pending_attribute`]). The account item and the
//!   payment are written in one transaction, conditioned on the number read
//!   ([`allocate`]), so the numbers have no gaps and no repeats.
//! - **Charging** payment `n` is conditioned on the account's settled number ([`SETTLED`]) being
//!   `n - 1`, and moves it to `n` in the same transaction: payment `n` is never charged before
//!   payment `n - 1` is settled (charged or failed). A message that arrives early is not held:
//!   payment-processor settles the missing predecessors first, from the payments table (the
//!   source of truth), then charges it; their own messages, when they come, are duplicates.
//!
//! A payment accepted before accounts were ordered has no number, and is charged on its own.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};

/// The account item's attribute holding the last number given to a payment of the account.
pub const NEXT: &str = "nextSequence";

/// The account item's attribute holding the number of the last settled (charged or failed)
/// payment of the account; absent before its first.
pub const SETTLED: &str = "settledSequence";

/// The account item's attribute naming the payment numbered `sequence`, while it is not settled.
///
/// ```
/// assert_eq!(payments_model::order::pending_attribute(7), "pending7");
/// ```
pub fn pending_attribute(sequence: u64) -> String {
    format!("pending{sequence}")
}

/// The write that gives `payment_id` number `last + 1` of `account_id`: refused (the
/// transaction with it is cancelled) unless the account's last number is still `last`.
pub fn allocate(table: &str, account_id: &str, payment_id: &str, last: u64) -> Update {
    let builder = Update::builder()
        .table_name(table)
        .key("accountId", AttributeValue::S(account_id.to_owned()))
        .update_expression("SET #next = :next, #pending = :payment")
        .expression_attribute_names("#next", NEXT)
        .expression_attribute_names("#pending", pending_attribute(last + 1))
        .expression_attribute_values(":next", AttributeValue::N((last + 1).to_string()))
        .expression_attribute_values(":payment", AttributeValue::S(payment_id.to_owned()));
    let builder = if last == 0 {
        builder.condition_expression("attribute_not_exists(#next)")
    } else {
        builder
            .condition_expression("#next = :last")
            .expression_attribute_values(":last", AttributeValue::N(last.to_string()))
    };
    builder.build().expect("table, key and expression are set")
}

/// The write that settles payment `sequence` of `account_id` (charged with it, or failed):
/// refused unless payment `sequence - 1` is the last settled.
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

/// What [`append`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    /// The payment's write committed with this number.
    Numbered(u64),
    /// The payment's write was refused by its own condition (a payment with its id exists, say):
    /// nothing was written.
    Refused,
}

/// Tries of [`append`] when other payments of the account are numbered at the same time.
pub const APPEND_TRIES: u32 = 5;

/// Writes a payment with the next number of its account: reads the account's last number
/// (strongly consistent), then commits `payment_write(number)` (the payment's put, or its update
/// when an operator reopens it) with [`allocate`] in one transaction. Another payment numbered
/// meanwhile cancels it, and it numbers again (up to [`APPEND_TRIES`] times).
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
        let last = Account::read(client, accounts_table, account_id)
            .await?
            .next;
        let written = client
            .transact_write_items()
            .transact_items(payment_write(last + 1))
            .transact_items(
                TransactWriteItem::builder()
                    .update(allocate(accounts_table, account_id, payment_id, last))
                    .build(),
            )
            .send()
            .await;
        let cancelled = match written {
            Ok(_) => return Ok(Appended::Numbered(last + 1)),
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
            reasons = ?(code(0), code(1)),
            "the account's order moved on while the payment was written: numbering again"
        );
    }
}

/// What an account item says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Account {
    /// The last number given ([`NEXT`]); 0 before the first payment.
    pub next: u64,
    /// The last number settled ([`SETTLED`]); 0 before the first.
    pub settled: u64,
    /// The payments not settled yet, by number.
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
    fn the_first_number_and_the_first_settlement_need_no_earlier_one() {
        let first = allocate("accounts", "a-1", "p-1", 0);
        assert_eq!(
            first.condition_expression(),
            Some("attribute_not_exists(#next)")
        );
        let third = allocate("accounts", "a-1", "p-3", 2);
        assert_eq!(third.condition_expression(), Some("#next = :last"));
        assert_eq!(
            third
                .expression_attribute_names()
                .and_then(|n| n.get("#pending"))
                .map(String::as_str),
            Some("pending3")
        );
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
