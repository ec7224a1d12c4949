//! The violations the checker reports, each with the ids involved.

use std::fmt;

use super::Failure;

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
    /// A payment failed for what is not its fault: a crash, an outage or a timeout.
    FailedInnocent {
        /// The payment.
        payment_id: String,
        /// Its reason.
        reason: String,
    },
    /// A payment failed that the test did not make fail ([`Scope::declaring`]).
    UndeclaredFailure {
        /// The payment.
        payment_id: String,
        /// Its reason.
        reason: String,
    },
    /// A payment the test made fail failed for another reason than the one declared.
    FailedOtherwise {
        /// The payment.
        payment_id: String,
        /// The failure the test declared.
        declared: Failure,
        /// Its reason.
        reason: String,
    },
    /// A payment the test made fail is charged, or is not a stored payment (status empty).
    NotFailed {
        /// The payment.
        payment_id: String,
        /// The failure the test declared.
        declared: Failure,
        /// Its status.
        status: String,
    },
    /// A ledger entry or a receipt names another account than its payment's.
    WrongAccount {
        /// The payment.
        payment_id: String,
        /// `"ledger entry"` or `"receipt"`.
        of: &'static str,
        /// The payment's account.
        payment: String,
        /// The account the entry or receipt names.
        named: String,
    },
    /// Two payments of an account were charged against the order of their numbers.
    ChargeOrder {
        /// The account.
        account: String,
        /// The payment with the lower number, charged later.
        lower: String,
        /// The payment with the higher number, charged first.
        higher: String,
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
            Self::FailedInnocent { payment_id, reason } => write!(
                f,
                "{payment_id} failed for what is not its fault (a crash, an outage or a timeout): {reason}"
            ),
            Self::UndeclaredFailure { payment_id, reason } => write!(
                f,
                "{payment_id} failed, and the test declared no failure of it: {reason}"
            ),
            Self::FailedOtherwise {
                payment_id,
                declared,
                reason,
            } => write!(
                f,
                "{payment_id} failed, not for {declared} as the test declared: {reason}"
            ),
            Self::NotFailed {
                payment_id,
                declared,
                status,
            } => write!(
                f,
                "{payment_id} was to fail for {declared}, and is {}",
                if status.is_empty() {
                    "not a stored payment"
                } else {
                    status
                }
            ),
            Self::WrongAccount {
                payment_id,
                of,
                payment,
                named,
            } => write!(
                f,
                "{payment_id}: its {of} names account {named}, the payment's is {payment}"
            ),
            Self::ChargeOrder {
                account,
                lower,
                higher,
            } => write!(
                f,
                "account {account}: {higher} was charged before {lower}, which has a lower number"
            ),
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
