//! The index of charged payments, read per shard from the reconciler's cursors: what the audit
//! ([`super::audit`]), the look for receipts ([`super::receipts`]) and the comparison of
//! balances ([`super::balances`]) share.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use payments_model::lifecycle::{CHARGED_INDEX, CHARGED_SHARD};

use super::audit::{AUDITED_CURSOR, CURSOR_PREFIX, RECEIPTS_CURSOR};
use super::balances::CHECKED_CURSOR;
use super::receipts::RECEIPTS_PENDING;
use super::{ReconcileError, Reconciler};

/// A charged payment, as the charged index carries it.
#[derive(Debug, Clone)]
pub(super) struct Charged {
    pub(super) payment_id: String,
    pub(super) charged_at: i64,
    pub(super) account_id: String,
    pub(super) amount_cents: i64,
    pub(super) currency: String,
    pub(super) ledger_entry_id: String,
}

impl Charged {
    pub(super) fn of(item: &HashMap<String, AttributeValue>) -> Option<Self> {
        let s = |k: &str| match item.get(k) {
            Some(AttributeValue::S(v)) => Some(v.clone()),
            _ => None,
        };
        let n = |k: &str| match item.get(k) {
            Some(AttributeValue::N(v)) => v.parse().ok(),
            _ => None,
        };
        Some(Self {
            payment_id: s("paymentId")?,
            charged_at: n("chargedAt")?,
            account_id: s("accountId")?,
            amount_cents: n("amountCents")?,
            currency: s("currency")?,
            ledger_entry_id: s("ledgerEntryId").unwrap_or_default(),
        })
    }
}

/// A shard's cursors, in its item of the accounts table ([`CURSOR_PREFIX`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Cursors {
    /// `auditedThrough`: every charge of the shard up to this instant is audited.
    pub(super) charged: i64,
    /// `comparedThrough`: the balance of every charge of the shard up to this instant was
    /// compared with the audit past it.
    pub(super) checked: i64,
    /// `receiptsThrough`: every charge of the shard up to this instant has its receipt, or its
    /// `PaymentCharged` was sent again.
    pub(super) receipts: i64,
    /// `receiptsPending`: payments whose `PaymentCharged` was sent again, until their receipt
    /// exists.
    pub(super) pending_receipts: Vec<String>,
}

impl Reconciler {
    /// The shard's cursors.
    pub(super) async fn cursors(&self, shard: &str) -> Result<Cursors, ReconcileError> {
        let item = self
            .reconciler_item(&format!("{CURSOR_PREFIX}{shard}"))
            .await?;
        let n = |k: &str| match item.get(k) {
            Some(AttributeValue::N(n)) => n.parse().unwrap_or(0),
            _ => 0,
        };
        Ok(Cursors {
            charged: n(AUDITED_CURSOR),
            checked: n(CHECKED_CURSOR),
            receipts: n(RECEIPTS_CURSOR),
            pending_receipts: match item.get(RECEIPTS_PENDING) {
                Some(AttributeValue::Ss(ids)) => ids.clone(),
                _ => Vec::new(),
            },
        })
    }

    /// Moves the shard's cursor `name` (`checkedThrough`, `receiptsThrough`) forward to
    /// `through` (never back: a concurrent run may have moved it further).
    pub(super) async fn move_cursor(
        &self,
        shard: &str,
        name: &str,
        through: i64,
    ) -> Result<(), ReconcileError> {
        let table = &self.config.accounts_table;
        let moved = self
            .dynamodb
            .update_item()
            .table_name(table)
            .key("accountId", cursor_key(shard))
            .update_expression("SET #cursor = :through")
            .condition_expression("attribute_not_exists(#cursor) OR #cursor < :through")
            .expression_attribute_names("#cursor", name)
            .expression_attribute_values(":through", AttributeValue::N(through.to_string()))
            .send()
            .await;
        match moved.map_err(aws_sdk_dynamodb::Error::from) {
            Ok(_) | Err(aws_sdk_dynamodb::Error::ConditionalCheckFailedException(_)) => Ok(()),
            Err(e) => Err(ReconcileError::DynamoDb {
                operation: "UpdateItem",
                table: table.clone(),
                source: Box::new(e),
            }),
        }
    }

    /// The charges of `shard` after `after` up to `until`, in `chargedAt` order, at most `limit`.
    pub(super) async fn charged(
        &self,
        shard: &str,
        after: i64,
        until: i64,
        limit: usize,
    ) -> Result<Vec<Charged>, ReconcileError> {
        let table = &self.config.payments_table;
        let mut pages = self
            .dynamodb
            .query()
            .table_name(table)
            .index_name(CHARGED_INDEX)
            .key_condition_expression("#shard = :shard AND chargedAt BETWEEN :after AND :until")
            .expression_attribute_names("#shard", CHARGED_SHARD)
            .expression_attribute_values(":shard", AttributeValue::S(shard.to_owned()))
            .expression_attribute_values(":after", AttributeValue::N((after + 1).to_string()))
            .expression_attribute_values(":until", AttributeValue::N(until.to_string()))
            .into_paginator()
            .items()
            .send();
        let mut found = Vec::new();
        while let Some(item) = pages.next().await {
            let item = item.map_err(ReconcileError::dynamodb("Query", table))?;
            match Charged::of(&item) {
                Some(charge) => found.push(charge),
                None => tracing::warn!(?item, "a charged index item without its fields: skipped"),
            }
            if found.len() >= limit {
                break;
            }
        }
        Ok(found)
    }
}

/// Cuts `charges` (in `chargedAt` order) to at most `budget`, keeping whole instants (a cursor
/// moves past every charge of its instant); true when it cut some.
pub(super) fn keep_whole_instants(charges: &mut Vec<Charged>, budget: usize) -> bool {
    if charges.len() <= budget {
        return false;
    }
    let cut = charges[budget].charged_at;
    charges.truncate(budget);
    while charges.last().is_some_and(|c| c.charged_at == cut) {
        charges.pop();
    }
    true
}

/// The key of a shard's cursors in the accounts table.
pub(super) fn cursor_key(shard: &str) -> AttributeValue {
    AttributeValue::S(format!("{CURSOR_PREFIX}{shard}"))
}
