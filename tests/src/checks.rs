//! The checks of a run, made on the stored data: payments, ledger, balances, receipts and
//! dead-letter queues.

use std::collections::{BTreeMap, HashMap};

use crate::workload::{Accepted, Tally};

/// Names of the tables a run checks.
#[derive(Debug, Clone)]
pub struct Tables {
    /// Payments.
    pub payments: String,
    /// Ledger entries.
    pub ledger: String,
    /// Balances.
    pub balances: String,
    /// Receipts.
    pub receipts: String,
}

/// What the tables hold after a run.
#[derive(Debug, Default, Clone)]
pub struct Stored {
    /// Payment id to status.
    pub payment_status: HashMap<String, String>,
    /// Payment id to the number of ledger entries.
    pub ledger_entries: HashMap<String, usize>,
    /// Payment id to when it was charged (its first ledger entry's `createdAt`, epoch ms).
    pub charged_at: HashMap<String, i64>,
    /// Payment id to the relay's lag: from payments-api's write (`createdAt`) to SQS accepting
    /// payments-publisher's send (`queuedAt`, the message's `SentTimestamp`), in ms. Only
    /// payments that reached payment-processor's charge have one.
    pub relay_lag_ms: HashMap<String, i64>,
    /// (account, currency) to (balance in minor units, charges): one balance per account and
    /// currency.
    pub balances: BTreeMap<(String, String), (i64, i64)>,
    /// Payment id to the number of receipts.
    pub receipts: HashMap<String, usize>,
    /// Messages in the payments dead-letter queue.
    pub dead_lettered_payments: usize,
    /// The payment id and the reason of each message in the payments dead-letter queue.
    pub dead_letters: Vec<(String, String)>,
    /// Messages in the receipts dead-letter queue.
    pub dead_lettered_receipts: usize,
}

use crate::invariants::Snapshot;
pub use crate::invariants::settle::scan;

impl Stored {
    /// Reads the tables (and takes the dead-letter counts as given).
    pub async fn read(client: &aws_sdk_dynamodb::Client, tables: &Tables) -> Result<Self, String> {
        Ok(Self::of(&Snapshot::read(client, tables).await?))
    }

    /// What `snapshot` holds, counted (the dead-letter counts left at zero).
    pub fn of(snapshot: &Snapshot) -> Self {
        let mut stored = Stored::default();
        for (id, p) in &snapshot.payments {
            if let Some(queued_at) = p.queued_at {
                stored
                    .relay_lag_ms
                    .insert(id.clone(), queued_at - p.created_at);
            }
            stored.payment_status.insert(id.clone(), p.status.clone());
        }
        for e in &snapshot.ledger {
            let first = stored
                .charged_at
                .entry(e.payment_id.clone())
                .or_insert(e.created_at);
            *first = (*first).min(e.created_at);
            *stored
                .ledger_entries
                .entry(e.payment_id.clone())
                .or_default() += 1;
        }
        for (key, b) in &snapshot.balances {
            stored.balances.insert(key.clone(), (b.cents, b.charges));
        }
        for r in &snapshot.receipts {
            *stored.receipts.entry(r.payment_id.clone()).or_default() += 1;
        }
        stored
    }

    /// The balance of `account` in `currency`: (minor units, charges).
    pub fn balance(&self, account: &str, currency: &str) -> Option<(i64, i64)> {
        self.balances
            .get(&(account.to_owned(), currency.to_owned()))
            .copied()
    }
}

/// One check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What is checked.
    pub name: &'static str,
    /// Whether it holds.
    pub passed: bool,
    /// The evidence (counts, or the first offenders).
    pub detail: String,
}

fn check(name: &'static str, offenders: Vec<String>, ok_detail: String) -> Check {
    Check {
        name,
        passed: offenders.is_empty(),
        detail: if offenders.is_empty() {
            ok_detail
        } else {
            let shown: Vec<_> = offenders.iter().take(5).cloned().collect();
            format!("{} offenders, e.g. {}", offenders.len(), shown.join("; "))
        },
    }
}

/// Every check of a run.
pub fn checks(tally: &Tally, stored: &Stored) -> Vec<Check> {
    let (poison, charged): (Vec<_>, Vec<_>) = tally
        .accepted
        .iter()
        .partition(|a| a.planned.fault.is_fatal());
    let ledger = |id: &str| stored.ledger_entries.get(id).copied().unwrap_or(0);
    let status = |id: &str| {
        stored
            .payment_status
            .get(id)
            .cloned()
            .unwrap_or_else(|| "missing".into())
    };

    let mut out = vec![check(
        "every HTTP answer kept the API's contract",
        tally.unexpected.clone(),
        format!("{} requests", tally.requests),
    )];
    out.push(check(
        "every accepted payment charged exactly once",
        charged
            .iter()
            .filter(|a| ledger(&a.payment_id) != 1 || status(&a.payment_id) != "charged")
            .map(|a| {
                format!(
                    "{}: {} ledger entries, status {}",
                    a.payment_id,
                    ledger(&a.payment_id),
                    status(&a.payment_id)
                )
            })
            .collect(),
        format!("{} payments, one ledger entry each", charged.len()),
    ));
    // One balance per account and currency: the sum of the account's charged payments in that
    // currency, never an amount of another currency.
    let mut expected: BTreeMap<(String, String), (i64, i64)> = BTreeMap::new();
    for a in &charged {
        let key = (a.planned.account.clone(), a.planned.currency.to_owned());
        let e = expected.entry(key).or_default();
        e.0 += a.planned.amount_cents;
        e.1 += 1;
    }
    let mut balances: Vec<&(String, String)> =
        expected.keys().chain(stored.balances.keys()).collect();
    balances.sort();
    balances.dedup();
    let accounts = expected
        .keys()
        .map(|(account, _)| account)
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    out.push(check(
        "each balance equals the sum of its payments",
        balances
            .iter()
            .filter(|key| expected.get(**key) != stored.balances.get(**key))
            .map(|key| {
                format!(
                    "{} {}: expected {:?}, stored {:?} (minor units, charges)",
                    key.0,
                    key.1,
                    expected.get(*key),
                    stored.balances.get(*key)
                )
            })
            .collect(),
        format!(
            "{} balances, one per account and currency ({accounts} accounts)",
            expected.len()
        ),
    ));
    let mut poison_offenders: Vec<String> = poison
        .iter()
        .filter(|a| ledger(&a.payment_id) != 0 || status(&a.payment_id) != "failed")
        .map(|a| {
            format!(
                "{}: {} ledger entries, status {}",
                a.payment_id,
                ledger(&a.payment_id),
                status(&a.payment_id)
            )
        })
        .collect();
    if stored.dead_lettered_payments != poison.len() {
        poison_offenders.push(format!(
            "{} messages in the payments dead-letter queue, {} failing payments",
            stored.dead_lettered_payments,
            poison.len()
        ));
    }
    if stored.dead_lettered_receipts != 0 {
        poison_offenders.push(format!(
            "{} receipts dead-lettered",
            stored.dead_lettered_receipts
        ));
    }
    out.push(no_innocent_dead_lettered(&poison, stored));
    out.push(charged_in_send_order(&charged, stored));
    out.push(check(
        "failing payments dead-lettered, never charged, marked failed",
        poison_offenders,
        format!("{} dead-lettered", stored.dead_lettered_payments),
    ));
    let known: std::collections::HashSet<&str> = tally
        .accepted
        .iter()
        .map(|a| a.payment_id.as_str())
        .collect();
    out.push(check(
        "nothing stored that no client asked for",
        stored
            .payment_status
            .keys()
            .chain(stored.ledger_entries.keys())
            .chain(stored.receipts.keys())
            .filter(|id| !known.contains(id.as_str()))
            .map(|id| format!("unknown payment {id}"))
            .collect(),
        format!("{} payments stored", stored.payment_status.len()),
    ));
    out
}

/// The relay's lag over the charged payments: (median, max) in ms, `None` without any.
pub fn relay_lag(stored: &Stored) -> Option<(i64, i64)> {
    let mut lags: Vec<i64> = stored.relay_lag_ms.values().copied().collect();
    lags.sort_unstable();
    Some((*lags.get(lags.len() / 2)?, *lags.last()?))
}

/// The payments dead-letter queue holds exactly the failing payments, once each: no payment that
/// never failed was moved there with one that did (as SQS does when a message blocked behind a
/// failing one of its group reaches the queue's maxReceiveCount).
fn no_innocent_dead_lettered(failing: &[&Accepted], stored: &Stored) -> Check {
    let failing_ids: HashMap<&str, &Accepted> = failing
        .iter()
        .map(|a| (a.payment_id.as_str(), *a))
        .collect();
    let mut in_queue: HashMap<&str, usize> = HashMap::new();
    for (id, _) in &stored.dead_letters {
        *in_queue.entry(id.as_str()).or_default() += 1;
    }
    let mut offenders: Vec<String> = in_queue
        .iter()
        .filter(|(id, _)| !failing_ids.contains_key(*id))
        .map(|(id, n)| format!("{id} never failed, {n} in the dead-letter queue"))
        .collect();
    offenders.sort();
    for a in failing {
        let n = in_queue.get(a.payment_id.as_str()).copied().unwrap_or(0);
        if n != 1 {
            offenders.push(format!(
                "{} ({:?}, {} #{}): {n} in the dead-letter queue",
                a.payment_id, a.planned.fault, a.planned.account, a.planned.position
            ));
        }
    }
    check(
        "no innocent payment dead-lettered",
        offenders,
        format!(
            "the dead-letter queue holds the {} failing payments only",
            failing.len()
        ),
    )
}

/// Each account's payments were charged in the order they were sent, which is the order
/// payments-api accepted them (each account sends one after another), failing payments aside. Charges in the same millisecond show no order and pass.
fn charged_in_send_order(charged: &[&Accepted], stored: &Stored) -> Check {
    let mut by_account: BTreeMap<&str, Vec<(i64, usize, &str)>> = BTreeMap::new();
    for a in charged {
        if let Some(at) = stored.charged_at.get(&a.payment_id) {
            by_account
                .entry(a.planned.account.as_str())
                .or_default()
                .push((*at, a.planned.position, a.payment_id.as_str()));
        }
    }
    let mut offenders = Vec::new();
    for (account, mut charges) in by_account.iter_mut().map(|(a, c)| (*a, std::mem::take(c))) {
        charges.sort();
        if let Some(w) = charges.windows(2).find(|w| w[0].1 > w[1].1) {
            let lag = |id: &str| stored.relay_lag_ms.get(id).copied();
            offenders.push(format!(
                "{account}: #{} ({}, relayed after {:?} ms) charged before #{} ({}, relayed after {:?} ms)",
                w[0].1,
                w[0].2,
                lag(w[0].2),
                w[1].1,
                w[1].2,
                lag(w[1].2)
            ));
        }
    }
    check(
        "each account charged in acceptance order",
        offenders,
        format!("{} accounts", by_account.len()),
    )
}
