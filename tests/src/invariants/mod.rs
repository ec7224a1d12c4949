//! The pipeline's invariants, checked on a stack's stored data once the pipeline has drained: at
//! the end of every end-to-end test that runs the pipeline, of the demo, and on demand against
//! `make up` (`make check-invariants`).
//!
//! - every accepted payment ends `charged`, or `failed` with its reason;
//! - a charged payment has exactly one ledger entry, with its amount, and exactly one receipt,
//!   with that amount;
//! - each balance (per account and currency) equals the sum of its ledger entries;
//! - no receipt exists without its charged payment, and no ledger entry without it;
//! - a ledger entry and a receipt name their payment's account;
//! - an account's payments are charged in the order of their numbers (`sequence`);
//! - no payment failed for what is not its fault: a crash, an outage or a timeout (a reason of
//!   [`INNOCENT_REASONS`]);
//! - no payment failed unless the test made it fail and declared it, with the kind of its
//!   failure ([`Scope::declaring`], [`Failure`]: a poison message, a budget used up by the
//!   handler's own failures): a failed payment not declared, one failed for another reason than
//!   its declared one, and a declared one charged are each a violation. A scope declares no
//!   failure unless the test does.
//!
//! A [`Scope`] says which stages ran: a test that drives payments through charging only (no
//! receipt-sender) is checked for the invariants of payments, ledger and balances, not for
//! receipts; one that leaves a queue on purpose names it.
//!
//! [`violations`] finds every violation in a [`Snapshot`] of the tables; [`settle`] waits (a
//! bounded time) until the work queues are empty and the snapshot's violations are the expected
//! ones, and reports what is still pending when they never are.

mod scope;
pub mod settle;
mod violation;

use std::collections::BTreeMap;
use std::fmt;

pub use scope::{Failure, Scope};
pub use settle::{Checked, Sources, settle};
pub use violation::Violation;

/// A payment as the checks read it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Payment {
    /// Its account.
    pub account: String,
    /// Its amount, in minor units of `currency`.
    pub amount_cents: i64,
    /// Its currency.
    pub currency: String,
    /// Its status (empty when the item has none).
    pub status: String,
    /// Its description (empty when it has none): where the failure switch finds its markers.
    pub description: String,
    /// Why it failed (`lastError`), when it did.
    pub last_error: Option<String>,
    /// When payments-api wrote it (`createdAt`, epoch ms).
    pub created_at: i64,
    /// When payments-publisher's message was accepted by SQS (`queuedAt`, epoch ms), once charged.
    pub queued_at: Option<i64>,
    /// Its number in its account's order (`sequence`), when it has one.
    pub sequence: Option<i64>,
}

/// A ledger entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerEntry {
    /// Its payment.
    pub payment_id: String,
    /// The account charged.
    pub account: String,
    /// The amount charged, in minor units of `currency`.
    pub amount_cents: i64,
    /// Its currency.
    pub currency: String,
    /// When it was written (epoch ms).
    pub created_at: i64,
}

/// A balance.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Balance {
    /// The balance, in minor units.
    pub cents: i64,
    /// How many charges it adds up.
    pub charges: i64,
}

/// A receipt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Receipt {
    /// Its payment.
    pub payment_id: String,
    /// The account it names.
    pub account: String,
    /// The amount it states, in minor units of `currency`.
    pub amount_cents: i64,
    /// Its currency.
    pub currency: String,
}

/// What a stack's tables hold: payments, ledger, balances and receipts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Payments by id.
    pub payments: BTreeMap<String, Payment>,
    /// Every ledger entry.
    pub ledger: Vec<LedgerEntry>,
    /// Balances by (account, currency).
    pub balances: BTreeMap<(String, String), Balance>,
    /// Every receipt.
    pub receipts: Vec<Receipt>,
}

pub(crate) const CHARGED: &str = "charged";
const FAILED: &str = "failed";

/// What a failed payment's reason says when the failure was not the payment's fault: SQS's own
/// move to the dead-letter queue after crashes or timeouts (as an earlier reconciler recorded
/// it: one move no longer fails a payment, its message is sent back), a service unavailable, a
/// timeout.
pub const INNOCENT_REASONS: [&str; 3] = [
    "moved to the dead-letter queue by SQS",
    "unavailable",
    "timed out",
];

/// Every violation in `snapshot` of the invariants that apply in `scope`, sorted.
pub fn violations(snapshot: &Snapshot, scope: &Scope) -> Vec<Violation> {
    let mut ledger: BTreeMap<&str, Vec<&LedgerEntry>> = BTreeMap::new();
    for e in &snapshot.ledger {
        ledger.entry(e.payment_id.as_str()).or_default().push(e);
    }
    let mut receipts: BTreeMap<&str, Vec<&Receipt>> = BTreeMap::new();
    for r in &snapshot.receipts {
        receipts.entry(r.payment_id.as_str()).or_default().push(r);
    }
    let mut out = Vec::new();
    for (id, p) in &snapshot.payments {
        let payment_id = id.clone();
        match p.status.as_str() {
            CHARGED => {
                if let Some(declared) = scope.declared(id, p) {
                    out.push(Violation::NotFailed {
                        payment_id: payment_id.clone(),
                        declared,
                        status: CHARGED.to_owned(),
                    });
                }
                let amount = (p.amount_cents, p.currency.clone());
                let entries = ledger.get(id.as_str()).map_or(&[][..], Vec::as_slice);
                if entries.len() != 1 {
                    out.push(Violation::LedgerEntries {
                        payment_id: payment_id.clone(),
                        entries: entries.len(),
                    });
                }
                for e in entries {
                    let charged = (e.amount_cents, e.currency.clone());
                    if charged != amount {
                        out.push(Violation::LedgerAmount {
                            payment_id: payment_id.clone(),
                            payment: amount.clone(),
                            ledger: charged,
                        });
                    }
                }
                let sent = receipts.get(id.as_str()).map_or(&[][..], Vec::as_slice);
                if scope.receipts && sent.len() != 1 {
                    out.push(Violation::Receipts {
                        payment_id: payment_id.clone(),
                        receipts: sent.len(),
                    });
                }
                for r in sent.iter().filter(|_| scope.receipts) {
                    let stated = (r.amount_cents, r.currency.clone());
                    if stated != amount {
                        out.push(Violation::ReceiptAmount {
                            payment_id: payment_id.clone(),
                            payment: amount.clone(),
                            receipt: stated,
                        });
                    }
                }
            }
            FAILED if p.last_error.as_deref().is_none_or(str::is_empty) => {
                out.push(Violation::FailedWithoutReason { payment_id });
            }
            FAILED => {
                let reason = p.last_error.clone().unwrap_or_default();
                if INNOCENT_REASONS.iter().any(|r| reason.contains(r)) {
                    out.push(Violation::FailedInnocent {
                        payment_id: payment_id.clone(),
                        reason: reason.clone(),
                    });
                }
                match scope.declared(id, p) {
                    None => out.push(Violation::UndeclaredFailure { payment_id, reason }),
                    Some(declared) if !declared.explains(&reason) => {
                        out.push(Violation::FailedOtherwise {
                            payment_id,
                            declared,
                            reason,
                        });
                    }
                    Some(_) => {}
                }
            }
            status => out.push(Violation::Unsettled {
                payment_id,
                status: status.to_owned(),
            }),
        }
    }
    not_stored(snapshot, scope, &mut out);
    wrong_accounts(snapshot, scope, &mut out);
    charge_order(snapshot, &mut out);
    let status = |id: &str| {
        snapshot
            .payments
            .get(id)
            .map(|p| p.status.clone())
            .unwrap_or_default()
    };
    for id in ledger.keys().filter(|id| status(id) != CHARGED) {
        out.push(Violation::LedgerWithoutCharge {
            payment_id: (*id).to_owned(),
            status: status(id),
        });
    }
    for id in receipts
        .keys()
        .filter(|id| scope.receipts && status(id) != CHARGED)
    {
        out.push(Violation::ReceiptWithoutCharge {
            payment_id: (*id).to_owned(),
            status: status(id),
        });
    }
    let mut sums: BTreeMap<(String, String), i64> = BTreeMap::new();
    for e in &snapshot.ledger {
        *sums
            .entry((e.account.clone(), e.currency.clone()))
            .or_default() += e.amount_cents;
    }
    for key in snapshot.balances.keys() {
        sums.entry(key.clone()).or_default();
    }
    for ((account, currency), sum) in sums {
        let balance = snapshot
            .balances
            .get(&(account.clone(), currency.clone()))
            .map_or(0, |b| b.cents);
        if balance != sum {
            out.push(Violation::Balance {
                account,
                currency,
                balance,
                ledger: sum,
            });
        }
    }
    out.sort();
    out
}

/// Payments the test made fail that are not stored at all.
fn not_stored(snapshot: &Snapshot, scope: &Scope, out: &mut Vec<Violation>) {
    for (id, declared) in &scope.failures {
        if !snapshot.payments.contains_key(id) {
            out.push(Violation::NotFailed {
                payment_id: id.clone(),
                declared: *declared,
                status: String::new(),
            });
        }
    }
}

/// Ledger entries and receipts that name another account than their payment's.
fn wrong_accounts(snapshot: &Snapshot, scope: &Scope, out: &mut Vec<Violation>) {
    let named = snapshot
        .ledger
        .iter()
        .map(|e| ("ledger entry", &e.payment_id, &e.account))
        .chain(
            snapshot
                .receipts
                .iter()
                .filter(|_| scope.receipts)
                .map(|r| ("receipt", &r.payment_id, &r.account)),
        );
    for (of, payment_id, account) in named {
        if let Some(p) = snapshot.payments.get(payment_id)
            && p.account != *account
        {
            out.push(Violation::WrongAccount {
                payment_id: payment_id.clone(),
                of,
                payment: p.account.clone(),
                named: account.clone(),
            });
        }
    }
}

/// Pairs of charged payments of one account whose ledger entries are in the opposite order of
/// their numbers (each pair of neighbours by number).
fn charge_order(snapshot: &Snapshot, out: &mut Vec<Violation>) {
    let mut by_account: BTreeMap<&str, Vec<(i64, &str, i64)>> = BTreeMap::new();
    for e in &snapshot.ledger {
        if let Some(p) = snapshot.payments.get(&e.payment_id)
            && p.status == CHARGED
            && let Some(sequence) = p.sequence
        {
            by_account.entry(p.account.as_str()).or_default().push((
                sequence,
                e.payment_id.as_str(),
                e.created_at,
            ));
        }
    }
    for (account, mut charges) in by_account {
        charges.sort();
        for pair in charges.windows(2) {
            let [(_, lower, lower_at), (_, higher, higher_at)] = pair else {
                continue;
            };
            if lower_at > higher_at {
                out.push(Violation::ChargeOrder {
                    account: account.to_owned(),
                    lower: (*lower).to_owned(),
                    higher: (*higher).to_owned(),
                });
            }
        }
    }
}

/// What differs between the violations found and those expected.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mismatch {
    /// Found, not expected.
    pub unexpected: Vec<Violation>,
    /// Expected, not found.
    pub missing: Vec<Violation>,
}

impl Mismatch {
    /// The difference between `found` and `expected` (as multisets).
    pub fn between(found: &[Violation], expected: &[Violation]) -> Self {
        let mut missing = expected.to_vec();
        let mut unexpected = Vec::new();
        for v in found {
            match missing.iter().position(|m| m == v) {
                Some(at) => {
                    missing.remove(at);
                }
                None => unexpected.push(v.clone()),
            }
        }
        Self {
            unexpected,
            missing,
        }
    }

    /// True when the violations found are exactly those expected.
    pub fn is_empty(&self) -> bool {
        self.unexpected.is_empty() && self.missing.is_empty()
    }
}

/// How many violations of each side a report shows.
const SHOWN: usize = 25;

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (label, list) in [
            ("violated", &self.unexpected),
            ("expected, not found", &self.missing),
        ] {
            for v in list.iter().take(SHOWN) {
                writeln!(f, "  {label}: {v}")?;
            }
            if list.len() > SHOWN {
                writeln!(f, "  {label}: {} more", list.len() - SHOWN)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
