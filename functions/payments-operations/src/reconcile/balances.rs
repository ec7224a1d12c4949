//! The balances compared with their audited sums ([`super::audit`]): those of the charges a run
//! audited or was not yet far enough past to compare, and every balance in turn.
//!
//! A balance changed outside any charge has no charge to bring it to the audit's attention: so
//! each run also compares the next balances of the balances table (a paged `Scan`, at most
//! `max_per_run` items a run) from where the last run stopped (`reconciler#balances` in the
//! accounts table), and a run that reaches the end starts the next from the first again. Every
//! balance is compared once per sweep: with 1,000 a run every 5 minutes, 288,000 balances a day.

use std::collections::{BTreeSet, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;
use futures_util::stream::{self, StreamExt, TryStreamExt};

use super::audit::{Audit, Mismatch, audited_key, skew_ms};
use super::budget::fair_shares;
use super::charged::{Cursors, keep_whole_instants};
use super::{Budget, ReconcileError, Reconciler};

/// A balance: its account and currency.
pub(super) type BalanceKey = (String, String);

/// An item of DynamoDB.
type Item = HashMap<String, AttributeValue>;

/// The accounts table's key of the sweep's progress: the last balance compared
/// (`afterAccountId`, `afterCurrency`).
pub const SWEEP_KEY: &str = "reconciler#balances";

/// The audit's second cursor: balances compared.
pub(super) const CHECKED_CURSOR: &str = "comparedThrough";

/// Balances read in one page of the sweep.
const SWEEP_PAGE: usize = 100;

/// Audited sums read at once.
const READS_IN_FLIGHT: usize = 16;

impl Reconciler {
    /// Compares the balances with their audited sums, every charge up to `audited_through`
    /// being audited: those `touched` by this run's audit, and those of every charge up to
    /// [`WRITER_CLOCK_SKEW`](super::audit::WRITER_CLOCK_SKEW) before `audited_through` that no run compared after it (a balance
    /// whose last charge the audit was not yet far enough past when it audited it), each shard
    /// its share of `max_per_run` charges of them. Moves the shards' `comparedThrough` after.
    /// Returns the balances compared.
    pub(super) async fn check_balances(
        &self,
        shards: &[(String, Cursors, i64)],
        audited_through: i64,
        mut balances: BTreeSet<BalanceKey>,
        audit: &mut Audit,
    ) -> Result<BTreeSet<BalanceKey>, ReconcileError> {
        let horizon = audited_through.saturating_sub(skew_ms());
        let shares = fair_shares(self.config.max_per_run, shards.len());
        let mut from: Vec<i64> = shards.iter().map(|(_, c, _)| c.checked).collect();
        let mut left = self.config.max_per_run;
        let mut cut = vec![false; shards.len()];
        // Each shard its share first; then what is left to the shards that used all of theirs.
        for pass in 0..2 {
            for (i, (shard, ..)) in shards.iter().enumerate() {
                let limit = if pass == 0 { shares[i] } else { left };
                if from[i] >= horizon || (pass == 1 && !cut[i]) || limit == 0 {
                    continue;
                }
                let mut charges = self.charged(shard, from[i], horizon, limit + 1).await?;
                cut[i] = keep_whole_instants(&mut charges, limit);
                let through = if cut[i] {
                    charges.last().map(|c| c.charged_at)
                } else {
                    Some(horizon)
                };
                left = left.saturating_sub(charges.len());
                if let Some(through) = through.filter(|_| !charges.is_empty()) {
                    from[i] = through;
                }
                balances.extend(charges.into_iter().map(|c| (c.account_id, c.currency)));
            }
        }
        for (account_id, currency) in &balances {
            audit.mismatches.extend(
                self.check_balance(account_id, currency, audited_through)
                    .await?,
            );
        }
        for ((shard, cursors, _), through) in shards.iter().zip(from) {
            if through > cursors.checked {
                self.move_cursor(shard, CHECKED_CURSOR, through).await?;
            }
        }
        Ok(balances)
    }

    /// Compares the next balances of the table, from where the last run's sweep stopped, with
    /// their audited sums (those not in `compared` already), at most `max_per_run` of them,
    /// until `budget` is spent; keeps where it stopped.
    pub(super) async fn sweep_balances(
        &self,
        audited_through: i64,
        compared: &BTreeSet<BalanceKey>,
        budget: &Budget,
        audit: &mut Audit,
    ) -> Result<(), ReconcileError> {
        let table = &self.config.balances_table;
        let cursor = self.reconciler_item(SWEEP_KEY).await?;
        let mut start = match (cursor.get("afterAccountId"), cursor.get("afterCurrency")) {
            (Some(account), Some(currency)) => Some(HashMap::from([
                ("accountId".to_owned(), account.clone()),
                ("currency".to_owned(), currency.clone()),
            ])),
            _ => None,
        };
        let mut left = self.config.max_per_run;
        while left > 0 && !budget.is_spent() {
            let page = self
                .dynamodb
                .scan()
                .table_name(table)
                .consistent_read(true)
                .limit(i32::try_from(left.min(SWEEP_PAGE)).unwrap_or(i32::MAX))
                .set_exclusive_start_key(start.clone())
                .send()
                .await
                .map_err(ReconcileError::dynamodb("Scan", table))?;
            let items = page.items.unwrap_or_default();
            left = left.saturating_sub(items.len().max(1));
            let mismatches: Vec<Option<Mismatch>> = stream::iter(items)
                .filter_map(|item| async move {
                    let key = balance_key(&item)?;
                    (!compared.contains(&key)).then_some((key, item))
                })
                .map(|((account_id, currency), item)| async move {
                    let audited = self.audited_sums(&account_id, &currency).await?;
                    let balance = Balance::of(&item, &audited);
                    Ok::<_, ReconcileError>(
                        balance
                            .disagrees(audited_through)
                            .then(|| balance.mismatch(&account_id, &currency)),
                    )
                })
                .buffered(READS_IN_FLIGHT)
                .try_collect()
                .await?;
            audit.mismatches.extend(mismatches.into_iter().flatten());
            start = page.last_evaluated_key;
            if start.is_none() {
                break;
            }
        }
        self.keep_sweep(start.as_ref()).await
    }

    /// Keeps where the sweep stopped (`None`: it reached the end, the next starts over).
    async fn keep_sweep(&self, after: Option<&Item>) -> Result<(), ReconcileError> {
        let table = &self.config.accounts_table;
        let update = self
            .dynamodb
            .update_item()
            .table_name(table)
            .key("accountId", AttributeValue::S(SWEEP_KEY.to_owned()));
        let update = match after.and_then(|a| Some((a.get("accountId")?, a.get("currency")?))) {
            Some((account, currency)) => update
                .update_expression("SET afterAccountId = :account, afterCurrency = :currency")
                .expression_attribute_values(":account", account.clone())
                .expression_attribute_values(":currency", currency.clone()),
            None => update.update_expression("REMOVE afterAccountId, afterCurrency"),
        };
        update
            .send()
            .await
            .map_err(ReconcileError::dynamodb("UpdateItem", table))?;
        Ok(())
    }

    /// The balance's audited sums (the reconciler's item), read consistently.
    async fn audited_sums(&self, account_id: &str, currency: &str) -> Result<Item, ReconcileError> {
        let table = &self.config.accounts_table;
        Ok(self
            .dynamodb
            .get_item()
            .table_name(table)
            .key("accountId", audited_key(account_id, currency))
            .consistent_read(true)
            .send()
            .await
            .map_err(ReconcileError::dynamodb("GetItem", table))?
            .item
            .unwrap_or_default())
    }

    /// The balance against its audited charges (both read consistently, after the audit's
    /// commits), every charge up to `audited_through` being audited.
    async fn check_balance(
        &self,
        account_id: &str,
        currency: &str,
        audited_through: i64,
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
        let audited = self.audited_sums(account_id, currency).await?;
        let balance = Balance::of(&item, &audited);
        Ok(balance
            .disagrees(audited_through)
            .then(|| balance.mismatch(account_id, currency)))
    }
}

/// A balance item's account and currency.
fn balance_key(item: &Item) -> Option<BalanceKey> {
    match (item.get("accountId"), item.get("currency")) {
        (Some(AttributeValue::S(account)), Some(AttributeValue::S(currency))) => {
            Some((account.clone(), currency.clone()))
        }
        _ => None,
    }
}

/// A balance item, as the audit reads it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Balance {
    /// `balanceCents`: what the charges added.
    balance_cents: i64,
    /// `charges`: how many charges added to it.
    charges: i64,
    /// `auditedCents`: what the audited charges add up to.
    audited_cents: i64,
    /// `auditedCharges`: how many charges were audited.
    audited_charges: i64,
    /// `lastChargedAt`: the `chargedAt` of the last charge that added to it; none on a balance
    /// last charged before charges wrote it.
    last_charged_at: Option<i64>,
}

impl Balance {
    /// The balance item and its audited sums (the reconciler's item, [`AUDITED_PREFIX`](super::audit::AUDITED_PREFIX)).
    fn of(item: &Item, audited: &Item) -> Self {
        let n = |item: &Item, k: &str| match item.get(k) {
            Some(AttributeValue::N(v)) => v.parse::<i64>().ok(),
            _ => None,
        };
        Self {
            balance_cents: n(item, "balanceCents").unwrap_or(0),
            charges: n(item, "charges").unwrap_or(0),
            audited_cents: n(audited, "auditedCents").unwrap_or(0),
            audited_charges: n(audited, "auditedCharges").unwrap_or(0),
            last_charged_at: n(item, "lastChargedAt"),
        }
    }

    /// Whether the balance disagrees with its audited charges, every charge up to
    /// `audited_through` (epoch ms) being audited:
    ///
    /// - more charges audited than it counted: always;
    /// - as many: when the sums differ;
    /// - fewer: once the audit is past its last charge (`lastChargedAt`, with
    ///   [`WRITER_CLOCK_SKEW`](super::audit::WRITER_CLOCK_SKEW)), since every charge that could explain the difference is then
    ///   audited. The difference is a charge that no charged payment explains: an increment
    ///   written outside a charge, or a charge applied twice. A balance last charged before
    ///   `lastChargedAt` was written counts as charged at the epoch.
    fn disagrees(&self, audited_through: i64) -> bool {
        if self.audited_charges >= self.charges {
            return self.audited_charges > self.charges || self.audited_cents != self.balance_cents;
        }
        let last_charged_at = self.last_charged_at.unwrap_or(0);
        last_charged_at.saturating_add(skew_ms()) <= audited_through
    }

    fn mismatch(&self, account_id: &str, currency: &str) -> Mismatch {
        Mismatch::Balance {
            account_id: account_id.to_owned(),
            currency: currency.to_owned(),
            balance_cents: self.balance_cents,
            charges: self.charges,
            audited_cents: self.audited_cents,
            audited_charges: self.audited_charges,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::audit::WRITER_CLOCK_SKEW;
    use super::*;

    fn balance(charges: i64, audited_charges: i64, extra_cents: i64, last: Option<i64>) -> Balance {
        Balance {
            balance_cents: charges * 10 + extra_cents,
            charges,
            audited_cents: audited_charges * 10,
            audited_charges,
            last_charged_at: last,
        }
    }

    #[test]
    fn a_balance_is_compared_once_the_audit_is_past_its_last_charge() {
        let skew = WRITER_CLOCK_SKEW.as_millis() as i64;
        let last = 1_000_000;
        // Every charge audited: the sums must agree, whenever.
        assert!(!balance(3, 3, 0, Some(last)).disagrees(0));
        assert!(balance(3, 3, 1, Some(last)).disagrees(0));
        // More audited than charged: always wrong.
        assert!(balance(2, 3, 0, Some(last)).disagrees(0));
        // Charges not audited yet, the audit not past the last one (with the margin): nothing
        // concluded.
        for through in [0, last - 1, last, last + skew - 1] {
            assert!(
                !balance(4, 3, 0, Some(last)).disagrees(through),
                "{through}"
            );
        }
        // The audit past the last charge: a charge too many (an increment no charged payment
        // explains, or one applied twice) is an over-charge.
        assert!(balance(4, 3, 0, Some(last)).disagrees(last + skew));
        assert!(balance(4, 3, -10, Some(last)).disagrees(last + skew + 60_000));
        // A balance last charged before `lastChargedAt` was written: as if at the epoch.
        assert!(!balance(3, 3, 0, None).disagrees(skew));
        assert!(balance(4, 3, 0, None).disagrees(skew));
        assert!(!balance(4, 3, 0, None).disagrees(skew - 1));
    }
}
