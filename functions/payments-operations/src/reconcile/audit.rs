//! The audit of charges against the ledger and the balances, incrementally: each shard of the
//! charged index is read from a cursor (`chargedThrough`, in the accounts table under
//! [`CURSOR_PREFIX`]), and the cursor moves in the same transaction that adds the audited
//! amounts to their balances, so no charge is counted twice or skipped.
//!
//! For a balance, `charges` (added by every charge) and `auditedCharges` (added by the audit)
//! count the same charges once the audit has caught up: then `balanceCents` must equal
//! `auditedCents`. While charges are still unaudited, `auditedCharges` is lower and nothing is
//! concluded; it is never higher.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use payments_model::lifecycle::{self, CHARGED_INDEX, CHARGED_SHARD, LEDGER_BY_PAYMENT_INDEX};

use super::{ReconcileError, Reconciler};

/// The accounts table's key of the audit's cursor of each shard: this prefix and the shard.
pub const CURSOR_PREFIX: &str = "reconciler#charged-";

/// At most this many balances per transaction (DynamoDB's limit is 100 items, one is the cursor).
const BALANCES_PER_TRANSACTION: usize = 99;

/// What the audit did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Audit {
    /// Charges audited.
    pub audited: u64,
    /// What disagrees.
    pub mismatches: Vec<Mismatch>,
}

/// A charge or a balance that disagrees with the ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// A charged payment has not exactly one ledger entry, or not the one it names.
    LedgerEntries {
        /// The payment.
        payment_id: String,
        /// The entry the payment names.
        expected: String,
        /// The entries the ledger has for it.
        found: Vec<String>,
    },
    /// The payment's ledger entry disagrees with it.
    EntryDisagrees {
        /// The payment.
        payment_id: String,
        /// Which fields differ.
        fields: Vec<&'static str>,
    },
    /// A balance is not the sum of its audited charges.
    Balance {
        /// The account.
        account_id: String,
        /// The currency.
        currency: String,
        /// What the balance says, and how many charges it counted.
        balance_cents: i64,
        /// Charges the balance counted.
        charges: i64,
        /// The sum of the audited charges.
        audited_cents: i64,
        /// How many charges were audited.
        audited_charges: i64,
    },
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::LedgerEntries {
                payment_id,
                expected,
                found,
            } => write!(
                f,
                "payment {payment_id} names ledger entry {expected}; the ledger has {found:?} for it"
            ),
            Self::EntryDisagrees { payment_id, fields } => write!(
                f,
                "the ledger entry of payment {payment_id} differs on {}",
                fields.join(", ")
            ),
            Self::Balance {
                account_id,
                currency,
                balance_cents,
                charges,
                audited_cents,
                audited_charges,
            } => write!(
                f,
                "balance {account_id} {currency}: {balance_cents} over {charges} charges; the \
                 ledger's audited charges sum to {audited_cents} over {audited_charges}"
            ),
        }
    }
}

/// A charged payment, as the charged index carries it.
#[derive(Debug, Clone)]
struct Charged {
    payment_id: String,
    charged_at: i64,
    account_id: String,
    amount_cents: i64,
    currency: String,
    ledger_entry_id: String,
}

impl Charged {
    fn of(item: &HashMap<String, AttributeValue>) -> Option<Self> {
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

impl Reconciler {
    /// Audits the charges older than [`Config::audit_lag`](super::Config) that no run audited
    /// yet, at most `max_per_run` of them.
    pub async fn audit(&self, now_ms: i64) -> Result<Audit, ReconcileError> {
        let until = now_ms - i64::try_from(self.config.audit_lag.as_millis()).unwrap_or(i64::MAX);
        let mut audit = Audit::default();
        for shard in lifecycle::shards() {
            let budget = self
                .config
                .max_per_run
                .saturating_sub(audit.audited as usize);
            if budget == 0 {
                break;
            }
            self.audit_shard(&shard, until, budget, &mut audit).await?;
        }
        Ok(audit)
    }

    async fn audit_shard(
        &self,
        shard: &str,
        until: i64,
        budget: usize,
        audit: &mut Audit,
    ) -> Result<(), ReconcileError> {
        let cursor = self.cursor(shard).await?;
        if cursor >= until {
            return Ok(());
        }
        let mut charges = self.charged(shard, cursor, until, budget + 1).await?;
        if charges.len() > budget {
            // Keep whole instants: the cursor moves past every charge of the last one kept.
            let cut = charges[budget].charged_at;
            charges.truncate(budget);
            while charges.last().is_some_and(|c| c.charged_at == cut) {
                charges.pop();
            }
        }
        let mut start = 0;
        while start < charges.len() {
            let end = chunk_end(&charges[start..]) + start;
            let chunk = &charges[start..end];
            let mut entries = Vec::new();
            for charge in chunk {
                entries.extend(self.check_entry(charge).await?);
            }
            let through = chunk.last().expect("a chunk is not empty").charged_at;
            let groups = sums(chunk);
            if !self
                .commit(
                    shard,
                    cursor_value(start, cursor, &charges),
                    through,
                    &groups,
                )
                .await?
            {
                // Another run moved the cursor: it audits these.
                return Ok(());
            }
            audit.audited += chunk.len() as u64;
            audit.mismatches.extend(entries);
            for (account_id, currency) in groups.keys() {
                audit
                    .mismatches
                    .extend(self.check_balance(account_id, currency).await?);
            }
            start = end;
        }
        Ok(())
    }

    async fn cursor(&self, shard: &str) -> Result<i64, ReconcileError> {
        let table = &self.config.accounts_table;
        let item = self
            .dynamodb
            .get_item()
            .table_name(table)
            .key(
                "accountId",
                AttributeValue::S(format!("{CURSOR_PREFIX}{shard}")),
            )
            .consistent_read(true)
            .send()
            .await
            .map_err(ReconcileError::dynamodb("GetItem", table))?
            .item;
        Ok(match item.as_ref().and_then(|i| i.get("chargedThrough")) {
            Some(AttributeValue::N(n)) => n.parse().unwrap_or(0),
            _ => 0,
        })
    }

    /// The charges of `shard` after `after` up to `until`, in `chargedAt` order, at most `limit`.
    async fn charged(
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

    /// The payment's ledger entries: exactly one, the one it names, agreeing with it.
    async fn check_entry(&self, charge: &Charged) -> Result<Option<Mismatch>, ReconcileError> {
        let table = &self.config.ledger_table;
        let entries = self
            .dynamodb
            .query()
            .table_name(table)
            .index_name(LEDGER_BY_PAYMENT_INDEX)
            .key_condition_expression("paymentId = :payment")
            .expression_attribute_values(":payment", AttributeValue::S(charge.payment_id.clone()))
            .send()
            .await
            .map_err(ReconcileError::dynamodb("Query", table))?
            .items
            .unwrap_or_default();
        let ids: Vec<String> = entries
            .iter()
            .filter_map(|e| match e.get("entryId") {
                Some(AttributeValue::S(id)) => Some(id.clone()),
                _ => None,
            })
            .collect();
        if ids.len() != 1 || ids[0] != charge.ledger_entry_id {
            return Ok(Some(Mismatch::LedgerEntries {
                payment_id: charge.payment_id.clone(),
                expected: charge.ledger_entry_id.clone(),
                found: ids,
            }));
        }
        let entry = &entries[0];
        let mut fields = Vec::new();
        if entry.get("accountId") != Some(&AttributeValue::S(charge.account_id.clone())) {
            fields.push("accountId");
        }
        let amount = match entry.get("amountCents") {
            Some(AttributeValue::N(n)) => n.parse::<i64>().ok(),
            _ => None,
        };
        if amount != Some(charge.amount_cents) {
            fields.push("amountCents");
        }
        if entry.get("currency") != Some(&AttributeValue::S(charge.currency.clone())) {
            fields.push("currency");
        }
        Ok((!fields.is_empty()).then(|| Mismatch::EntryDisagrees {
            payment_id: charge.payment_id.clone(),
            fields,
        }))
    }

    /// Adds `groups` to their balances' audited sums and moves the cursor from `from` to
    /// `through`, in one transaction. False when the cursor was moved by another run.
    async fn commit(
        &self,
        shard: &str,
        from: i64,
        through: i64,
        groups: &BTreeMap<(String, String), (i64, i64)>,
    ) -> Result<bool, ReconcileError> {
        let s = |v: &str| AttributeValue::S(v.to_owned());
        let n = |v: i64| AttributeValue::N(v.to_string());
        let mut items: Vec<TransactWriteItem> = groups
            .iter()
            .map(|((account_id, currency), (sum, count))| {
                let update = Update::builder()
                    .table_name(&self.config.balances_table)
                    .key("accountId", s(account_id))
                    .key("currency", s(currency))
                    .update_expression(
                        "SET auditedCents = if_not_exists(auditedCents, :zero) + :sum, \
                         auditedCharges = if_not_exists(auditedCharges, :zero) + :count",
                    )
                    .expression_attribute_values(":zero", n(0))
                    .expression_attribute_values(":sum", n(*sum))
                    .expression_attribute_values(":count", n(*count))
                    .build()
                    .expect("table, key and expression are set");
                TransactWriteItem::builder().update(update).build()
            })
            .collect();
        let cursor = Update::builder()
            .table_name(&self.config.accounts_table)
            .key("accountId", s(&format!("{CURSOR_PREFIX}{shard}")))
            .update_expression("SET chargedThrough = :through")
            .condition_expression(if from == 0 {
                "attribute_not_exists(chargedThrough) OR chargedThrough = :from"
            } else {
                "chargedThrough = :from"
            })
            .expression_attribute_values(":through", n(through))
            .expression_attribute_values(":from", n(from))
            .build()
            .expect("table, key and expression are set");
        items.push(TransactWriteItem::builder().update(cursor).build());
        let table = &self.config.balances_table;
        match self
            .dynamodb
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await
        {
            Ok(_) => Ok(true),
            Err(e) => {
                let e = aws_sdk_dynamodb::Error::from(e);
                if let aws_sdk_dynamodb::Error::TransactionCanceledException(c) = &e
                    && c.cancellation_reasons()
                        .last()
                        .and_then(|r| r.code())
                        .is_some_and(|code| code == "ConditionalCheckFailed")
                {
                    return Ok(false);
                }
                Err(ReconcileError::DynamoDb {
                    operation: "TransactWriteItems",
                    table: table.clone(),
                    source: Box::new(e),
                })
            }
        }
    }

    /// The balance against its audited charges (read consistently, after the audit's commit).
    async fn check_balance(
        &self,
        account_id: &str,
        currency: &str,
    ) -> Result<Option<Mismatch>, ReconcileError> {
        let table = &self.config.balances_table;
        let item = self
            .dynamodb
            .get_item()
            .table_name(table)
            .key("accountId", AttributeValue::S(account_id.to_owned()))
            .key("currency", AttributeValue::S(currency.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(ReconcileError::dynamodb("GetItem", table))?
            .item
            .unwrap_or_default();
        let n = |k: &str| match item.get(k) {
            Some(AttributeValue::N(v)) => v.parse::<i64>().unwrap_or(0),
            _ => 0,
        };
        let (balance_cents, charges) = (n("balanceCents"), n("charges"));
        let (audited_cents, audited_charges) = (n("auditedCents"), n("auditedCharges"));
        let caught_up = audited_charges == charges;
        let wrong = audited_charges > charges || (caught_up && audited_cents != balance_cents);
        Ok(wrong.then(|| Mismatch::Balance {
            account_id: account_id.to_owned(),
            currency: currency.to_owned(),
            balance_cents,
            charges,
            audited_cents,
            audited_charges,
        }))
    }
}

/// The end of the first chunk of `charges`: at most [`BALANCES_PER_TRANSACTION`] balances, cut
/// between two instants (all charges of one `chargedAt` in the same chunk).
fn chunk_end(charges: &[Charged]) -> usize {
    let mut groups = std::collections::BTreeSet::new();
    let mut last_cut = 0;
    for (i, c) in charges.iter().enumerate() {
        if i > 0 && c.charged_at != charges[i - 1].charged_at {
            last_cut = i;
        }
        groups.insert((&c.account_id, &c.currency));
        if groups.len() > BALANCES_PER_TRANSACTION {
            if last_cut > 0 {
                return last_cut;
            }
            // One instant with more balances than a transaction holds: take it whole anyway and
            // let DynamoDB refuse it, rather than skip charges.
            return charges
                .iter()
                .position(|other| other.charged_at != c.charged_at)
                .unwrap_or(charges.len());
        }
    }
    charges.len()
}

/// The cursor before the chunk starting at `start`.
fn cursor_value(start: usize, cursor: i64, charges: &[Charged]) -> i64 {
    if start == 0 {
        cursor
    } else {
        charges[start - 1].charged_at
    }
}

/// Per balance (account, currency): the sum and the count of the charges.
fn sums(charges: &[Charged]) -> BTreeMap<(String, String), (i64, i64)> {
    let mut groups: BTreeMap<(String, String), (i64, i64)> = BTreeMap::new();
    for c in charges {
        let g = groups
            .entry((c.account_id.clone(), c.currency.clone()))
            .or_default();
        g.0 += c.amount_cents;
        g.1 += 1;
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn charge(at: i64, account: &str) -> Charged {
        Charged {
            payment_id: format!("p-{at}-{account}"),
            charged_at: at,
            account_id: account.to_owned(),
            amount_cents: 10,
            currency: "EUR".to_owned(),
            ledger_entry_id: String::new(),
        }
    }

    #[test]
    fn chunks_hold_at_most_99_balances_and_whole_instants() {
        let few: Vec<_> = (0..5).map(|i| charge(i, "a")).collect();
        assert_eq!(chunk_end(&few), 5);
        // 150 accounts, two per instant: the chunk ends at an instant's start, with <= 99.
        let many: Vec<_> = (0..150).map(|i| charge(i / 2, &format!("a{i}"))).collect();
        let end = chunk_end(&many);
        assert_eq!(end, 98);
        assert_ne!(many[end - 1].charged_at, many[end].charged_at);
        // One instant over the limit is taken whole (DynamoDB then refuses it, nothing skipped).
        let crowd: Vec<_> = (0..120)
            .map(|i| charge(if i < 110 { 1 } else { 2 }, &format!("a{i}")))
            .collect();
        assert_eq!(chunk_end(&crowd), 110);
    }

    #[test]
    fn sums_per_balance() {
        let charges = [charge(1, "a"), charge(2, "a"), charge(3, "b")];
        let groups = sums(&charges);
        assert_eq!(groups[&("a".to_owned(), "EUR".to_owned())], (20, 2));
        assert_eq!(groups[&("b".to_owned(), "EUR".to_owned())], (10, 1));
    }
}
