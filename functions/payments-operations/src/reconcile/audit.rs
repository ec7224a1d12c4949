//! The audit of charges against the ledger and the balances, incrementally: each shard of the
//! charged index is read from a cursor (`auditedThrough`, in the accounts table under
//! [`CURSOR_PREFIX`]), and the cursor moves in the same transaction that adds the audited
//! amounts to the balance's audited sums, so no charge is counted twice or skipped. The audited
//! sums are the reconciler's own items of the accounts table (`auditedCents`,
//! `auditedCharges` under [`AUDITED_PREFIX`]), never the balance item: the reconciler reads the
//! balances and cannot write them (its policy in template.yaml).
//!
//! For a balance, `charges` (added by every charge) and `auditedCharges` (added by the audit)
//! count the same charges once the audit has audited every charge of the balance: then
//! `balanceCents` must equal `auditedCents`. Each charge also sets the balance's
//! `lastChargedAt` (its `chargedAt`); once every shard's audit is past that instant (with
//! [`WRITER_CLOCK_SKEW`]), `charges` must equal `auditedCharges`: more is a charge that no
//! charged payment explains (an over-charge), and is reported like any other difference. Before
//! that instant, fewer audited charges are charges in flight and nothing is concluded; more is
//! always wrong.
//!
//! The balances compared in a run are those of the charges it audited, those of the charges up
//! to [`WRITER_CLOCK_SKEW`] before where the audit stands that no run compared after it
//! (`comparedThrough`, a second cursor per shard: a balance whose last charge was too recent
//! when audited is compared in a later run), and the next of every balance in turn
//! ([`super::balances`]): a balance changed outside any charge is seen too.
//!
//! Each shard has its share of `max_per_run` ([`fair_shares`]): a hot shard cannot take a
//! whole run from the others; what a shard leaves unused goes to the shards that used theirs.
//! Each run starts at another shard ([`shards_in_turn`]), so that a run whose time budget ends
//! before its last shards never leaves the same ones behind.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use payments_model::lifecycle::{self, LEDGER_BY_PAYMENT_INDEX};

use super::balances::BalanceKey;
use super::budget::{fair_shares, shards_in_turn};
use super::charged::{Charged, cursor_key, keep_whole_instants};
use super::{Budget, ReconcileError, Reconciler};

/// The accounts table's key of the cursors of each shard of the charged index (the audit's, and
/// the look for receipts'): this prefix and the shard.
pub const CURSOR_PREFIX: &str = "reconciler#charged-";

/// The cursor of the look for receipts ([`super::receipts`]), beside the audit's.
pub(super) const RECEIPTS_CURSOR: &str = "receiptsThrough";

/// The audit's cursor: charges audited. (Named anew when the audited sums left the balance
/// items: the audit starts over into its own items.)
pub(super) const AUDITED_CURSOR: &str = "auditedThrough";

/// The accounts table's key of a balance's audited sums: this prefix, the currency, `#` and the
/// account.
pub const AUDITED_PREFIX: &str = "reconciler#audited#";

/// How far apart the clocks of two writers of one balance may be: charges of one account are
/// made one after the other (its message group), each stamping `lastChargedAt` with its own
/// clock, so the last one written is the latest up to this. A balance is compared with its
/// audited charges only once the audit is this far past its `lastChargedAt`.
pub const WRITER_CLOCK_SKEW: Duration = Duration::from_secs(5);

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

impl Reconciler {
    /// Audits the charges older than [`Config::audit_lag`](super::Config) that no run audited
    /// yet, at most `max_per_run` of them; then compares with their audited sums the balances
    /// charged since the last run (see the module). No time limit: see
    /// [`Reconciler::audit_within`].
    pub async fn audit(&self, now_ms: i64) -> Result<Audit, ReconcileError> {
        self.audit_within(now_ms, &Budget::unlimited()).await
    }

    /// [`Reconciler::audit`] until `budget` is spent: it stops between two transactions, and
    /// the next run goes on from the cursors.
    pub async fn audit_within(
        &self,
        now_ms: i64,
        budget: &Budget,
    ) -> Result<Audit, ReconcileError> {
        let until = now_ms - i64::try_from(self.config.audit_lag.as_millis()).unwrap_or(i64::MAX);
        let mut audit = Audit::default();
        let mut touched = BTreeSet::new();
        let mut shards = Vec::new();
        let names = shards_in_turn(now_ms);
        // Each shard its share first; then what is left to the shards that used all of theirs.
        for (shard, share) in names.into_iter().zip(fair_shares(
            self.config.max_per_run,
            lifecycle::SHARDS as usize,
        )) {
            let cursors = self.cursors(&shard).await?;
            let through = if budget.is_spent() {
                cursors.charged
            } else {
                self.audit_shard(
                    &shard,
                    (cursors.charged, until),
                    share,
                    budget,
                    &mut audit,
                    &mut touched,
                )
                .await?
            };
            shards.push((shard, cursors, through));
        }
        for (shard, _, through) in &mut shards {
            let left = self
                .config
                .max_per_run
                .saturating_sub(audit.audited as usize);
            if left == 0 || budget.is_spent() {
                break;
            }
            if *through < until {
                *through = self
                    .audit_shard(
                        shard,
                        (*through, until),
                        left,
                        budget,
                        &mut audit,
                        &mut touched,
                    )
                    .await?;
            }
        }
        // Every charge of every shard up to here is audited.
        let audited_through = shards.iter().map(|(.., through)| *through).min();
        if !budget.is_spent() {
            let compared = self
                .check_balances(&shards, audited_through.unwrap_or(0), touched, &mut audit)
                .await?;
            self.sweep_balances(audited_through.unwrap_or(0), &compared, budget, &mut audit)
                .await?;
        }
        Ok(audit)
    }

    /// Audits the charges of `shard` after `cursor` up to `until`, at most `limit` of them,
    /// until `budget` is spent; returns the instant up to which every charge of the shard is
    /// audited, and adds the balances it audited charges of to `touched`.
    async fn audit_shard(
        &self,
        shard: &str,
        (cursor, until): (i64, i64),
        limit: usize,
        budget: &Budget,
        audit: &mut Audit,
        touched: &mut BTreeSet<BalanceKey>,
    ) -> Result<i64, ReconcileError> {
        if cursor >= until {
            return Ok(cursor);
        }
        let mut charges = self.charged(shard, cursor, until, limit + 1).await?;
        let whole = !keep_whole_instants(&mut charges, limit);
        let mut start = 0;
        while start < charges.len() {
            if budget.is_spent() {
                return Ok(cursor_value(start, cursor, &charges));
            }
            let end = chunk_end(&charges[start..]) + start;
            let chunk = &charges[start..end];
            let mut entries = Vec::new();
            for charge in chunk {
                entries.extend(self.check_entry(charge).await?);
            }
            let through = chunk.last().expect("a chunk is not empty").charged_at;
            let from = cursor_value(start, cursor, &charges);
            let groups = sums(chunk);
            if !self.commit(shard, from, through, &groups).await? {
                // Another run moved the cursor: it audits these.
                return Ok(from);
            }
            audit.audited += chunk.len() as u64;
            audit.mismatches.extend(entries);
            touched.extend(groups.into_keys());
            start = end;
        }
        // Every charge up to `until` was read (the charged index has them all by then: the
        // audit's lag), unless the budget cut them.
        Ok(if whole {
            until
        } else {
            charges.last().map_or(cursor, |c| c.charged_at)
        })
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
        let n = |v: i64| AttributeValue::N(v.to_string());
        let mut items: Vec<TransactWriteItem> = groups
            .iter()
            .map(|((account_id, currency), (sum, count))| {
                let update = Update::builder()
                    .table_name(&self.config.accounts_table)
                    .key("accountId", audited_key(account_id, currency))
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
            .key("accountId", cursor_key(shard))
            .update_expression("SET #cursor = :through")
            .condition_expression(if from == 0 {
                "attribute_not_exists(#cursor) OR #cursor = :from"
            } else {
                "#cursor = :from"
            })
            .expression_attribute_names("#cursor", AUDITED_CURSOR)
            .expression_attribute_values(":through", n(through))
            .expression_attribute_values(":from", n(from))
            .build()
            .expect("table, key and expression are set");
        items.push(TransactWriteItem::builder().update(cursor).build());
        let table = &self.config.accounts_table;
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

/// The key of a balance's audited sums in the accounts table ([`AUDITED_PREFIX`]).
pub(super) fn audited_key(account_id: &str, currency: &str) -> AttributeValue {
    AttributeValue::S(format!("{AUDITED_PREFIX}{currency}#{account_id}"))
}

/// [`WRITER_CLOCK_SKEW`] in milliseconds.
pub(super) fn skew_ms() -> i64 {
    i64::try_from(WRITER_CLOCK_SKEW.as_millis()).unwrap_or(i64::MAX)
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
