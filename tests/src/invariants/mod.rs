//! The pipeline's invariants, checked on a stack's stored data once the pipeline has drained: at
//! the end of every end-to-end test that runs the pipeline, of the demo, and on demand against
//! `make up` (`make check-invariants`).
//!
//! - every accepted payment ends `charged`, or `failed` with its reason;
//! - a charged payment has exactly one ledger entry, with its amount, and exactly one receipt,
//!   with that amount;
//! - each balance (per account and currency) equals the sum of its ledger entries;
//! - no receipt exists without its charged payment, and no ledger entry without it.
//!
//! A [`Scope`] says which stages ran: a test that drives payments through charging only (no
//! receipt-sender) is checked for the invariants of payments, ledger and balances, not for
//! receipts; one that leaves a queue on purpose names it.
//!
//! [`violations`] finds every violation in a [`Snapshot`] of the tables; [`settle`] waits (a
//! bounded time) until the work queues are empty and the snapshot's violations are the expected
//! ones, and reports what is still pending when they never are.

pub mod settle;

use std::collections::BTreeMap;
use std::fmt;

pub use settle::{Checked, Sources, settle};

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
    /// Why it failed (`lastError`), when it did.
    pub last_error: Option<String>,
    /// When payments-api wrote it (`createdAt`, epoch ms).
    pub created_at: i64,
    /// When payments-publisher's message was accepted by SQS (`queuedAt`, epoch ms), once charged.
    pub queued_at: Option<i64>,
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

/// Which stages of the pipeline ran, hence which invariants apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// Whether receipt-sender ran: a charged payment has its receipt, no receipt exists without
    /// its charged payment.
    pub receipts: bool,
    /// Work queues left holding messages on purpose (logical ids): not required drained.
    pub left: Vec<String>,
}

impl Scope {
    /// The whole pipeline ran: every invariant applies and every work queue drains.
    pub fn pipeline() -> Self {
        Self {
            receipts: true,
            left: Vec::new(),
        }
    }

    /// Payments were charged but receipt-sender never ran: the invariants of payments, ledger
    /// and balances apply; those of receipts do not, and the receipts queue may hold the
    /// charges' events.
    pub fn through_charging() -> Self {
        Self {
            receipts: false,
            left: vec!["ReceiptsQueue".to_owned()],
        }
    }

    /// This scope, with `queue` (a logical id) left holding messages on purpose.
    pub fn leaving(mut self, queue: &str) -> Self {
        self.left.push(queue.to_owned());
        self
    }

    /// Whether `queue` must be drained.
    pub fn drains(&self, queue: &str) -> bool {
        !self.left.iter().any(|q| q == queue)
    }
}

impl Default for Scope {
    fn default() -> Self {
        Self::pipeline()
    }
}

/// One invariant that does not hold, with the ids involved.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Violation {
    /// A work queue still holds messages (visible, in flight or delayed).
    Undrained {
        /// The queue's logical id.
        queue: String,
        /// How many messages.
        messages: u64,
    },
    /// A payment is neither charged nor failed.
    Unsettled {
        /// The payment.
        payment_id: String,
        /// Its status.
        status: String,
    },
    /// A failed payment does not say why.
    FailedWithoutReason {
        /// The payment.
        payment_id: String,
    },
    /// A charged payment has not exactly one ledger entry.
    LedgerEntries {
        /// The payment.
        payment_id: String,
        /// How many it has.
        entries: usize,
    },
    /// A charged payment's ledger entry has another amount or currency.
    LedgerAmount {
        /// The payment.
        payment_id: String,
        /// The payment's amount and currency.
        payment: (i64, String),
        /// The ledger entry's.
        ledger: (i64, String),
    },
    /// A charged payment has not exactly one receipt.
    Receipts {
        /// The payment.
        payment_id: String,
        /// How many it has.
        receipts: usize,
    },
    /// A charged payment's receipt states another amount or currency.
    ReceiptAmount {
        /// The payment.
        payment_id: String,
        /// The payment's amount and currency.
        payment: (i64, String),
        /// The receipt's.
        receipt: (i64, String),
    },
    /// A balance is not the sum of its ledger entries.
    Balance {
        /// The account.
        account: String,
        /// The currency.
        currency: String,
        /// The balance (0 when there is none).
        balance: i64,
        /// The sum of the account's ledger entries in the currency.
        ledger: i64,
    },
    /// A receipt exists for a payment that is not charged (or does not exist: status empty).
    ReceiptWithoutCharge {
        /// The payment.
        payment_id: String,
        /// Its status (empty when there is no such payment).
        status: String,
    },
    /// A ledger entry exists for a payment that is not charged (or does not exist: status
    /// empty).
    LedgerWithoutCharge {
        /// The payment.
        payment_id: String,
        /// Its status (empty when there is no such payment).
        status: String,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Undrained { queue, messages } => {
                write!(f, "{queue} still holds {messages} messages")
            }
            Self::Unsettled { payment_id, status } => {
                write!(f, "{payment_id} is {status:?}, neither charged nor failed")
            }
            Self::FailedWithoutReason { payment_id } => {
                write!(f, "{payment_id} failed without a reason (no lastError)")
            }
            Self::LedgerEntries {
                payment_id,
                entries,
            } => write!(
                f,
                "{payment_id} is charged with {entries} ledger entries, not 1"
            ),
            Self::LedgerAmount {
                payment_id,
                payment,
                ledger,
            } => write!(
                f,
                "{payment_id}: ledger entry of {} {}, the payment is {} {}",
                ledger.0, ledger.1, payment.0, payment.1
            ),
            Self::Receipts {
                payment_id,
                receipts,
            } => write!(f, "{payment_id} is charged with {receipts} receipts, not 1"),
            Self::ReceiptAmount {
                payment_id,
                payment,
                receipt,
            } => write!(
                f,
                "{payment_id}: receipt of {} {}, the payment is {} {}",
                receipt.0, receipt.1, payment.0, payment.1
            ),
            Self::Balance {
                account,
                currency,
                balance,
                ledger,
            } => write!(
                f,
                "balance {account} {currency} is {balance}, its ledger entries add up to {ledger}"
            ),
            Self::ReceiptWithoutCharge { payment_id, status } => {
                write!(f, "a receipt for {payment_id}, which is {}", shown(status))
            }
            Self::LedgerWithoutCharge { payment_id, status } => {
                write!(
                    f,
                    "a ledger entry for {payment_id}, which is {}",
                    shown(status)
                )
            }
        }
    }
}

fn shown(status: &str) -> String {
    if status.is_empty() {
        "not a stored payment".to_owned()
    } else {
        format!("{status}, not charged")
    }
}

const CHARGED: &str = "charged";
const FAILED: &str = "failed";

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
            FAILED => {}
            status => out.push(Violation::Unsettled {
                payment_id,
                status: status.to_owned(),
            }),
        }
    }
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
