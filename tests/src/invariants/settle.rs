//! Reading a stack's tables and queues, and waiting (a bounded time) for the pipeline to drain.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use local_aws::provision::Provisioned;
use local_aws::runner::queue_depth;

use super::{
    Balance, LedgerEntry, Mismatch, Payment, Receipt, Scope, Snapshot, Violation, violations,
};
use crate::checks::Tables;
use crate::stack::BoxError;
use crate::up::env_name;

/// The work queues whose messages must all be consumed once the pipeline drains.
pub const WORK_QUEUES: [&str; 2] = ["PaymentsQueue", "ReceiptsQueue"];

/// The dead-letter queues, whose depth a report shows.
pub const DEAD_LETTER_QUEUES: [&str; 3] = [
    "PaymentsDeadLetterQueue",
    "ReceiptsDeadLetterQueue",
    "PaymentsOutboxDeadLetterQueue",
];

/// How often [`settle`] reads the stack while it waits.
const POLL: Duration = Duration::from_millis(250);

/// Where a stack's data is: its tables, and its queues by logical id.
#[derive(Debug, Clone)]
pub struct Sources {
    /// DynamoDB.
    pub dynamodb: aws_sdk_dynamodb::Client,
    /// SQS.
    pub sqs: aws_sdk_sqs::Client,
    /// The tables.
    pub tables: Tables,
    /// Queue URLs by logical id ([`WORK_QUEUES`] and [`DEAD_LETTER_QUEUES`]).
    pub queues: BTreeMap<String, String>,
}

type Item = HashMap<String, AttributeValue>;

/// Every item of `table`, read consistently, page after page.
pub async fn scan(client: &aws_sdk_dynamodb::Client, table: &str) -> Result<Vec<Item>, String> {
    let mut items = Vec::new();
    let mut start: Option<Item> = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .map_err(|e| {
                format!(
                    "scan {table}: {}",
                    aws_sdk_dynamodb::error::DisplayErrorContext(e)
                )
            })?;
        items.extend(page.items.unwrap_or_default());
        match page.last_evaluated_key {
            Some(key) if !key.is_empty() => start = Some(key),
            _ => return Ok(items),
        }
    }
}

fn s(item: &Item, name: &str) -> String {
    item.get(name)
        .and_then(|v| v.as_s().ok())
        .cloned()
        .unwrap_or_default()
}

fn n(item: &Item, name: &str) -> Option<i64> {
    item.get(name)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
}

impl Snapshot {
    /// Reads the four tables, consistently.
    pub async fn read(client: &aws_sdk_dynamodb::Client, tables: &Tables) -> Result<Self, String> {
        let (payments, ledger, balances, receipts) = futures_util::try_join!(
            scan(client, &tables.payments),
            scan(client, &tables.ledger),
            scan(client, &tables.balances),
            scan(client, &tables.receipts),
        )?;
        let mut snapshot = Snapshot::default();
        for item in payments {
            let payment = Payment {
                account: s(&item, "accountId"),
                amount_cents: n(&item, "amountCents").unwrap_or(0),
                currency: s(&item, "currency"),
                status: s(&item, "status"),
                description: s(&item, "description"),
                last_error: item.get("lastError").and_then(|v| v.as_s().ok()).cloned(),
                created_at: n(&item, "createdAt").unwrap_or(0),
                queued_at: n(&item, "queuedAt"),
                sequence: n(&item, "sequence"),
            };
            snapshot.payments.insert(s(&item, "paymentId"), payment);
        }
        snapshot.ledger = ledger
            .iter()
            .map(|item| LedgerEntry {
                payment_id: s(item, "paymentId"),
                account: s(item, "accountId"),
                amount_cents: n(item, "amountCents").unwrap_or(0),
                currency: s(item, "currency"),
                created_at: n(item, "createdAt").unwrap_or(0),
            })
            .collect();
        for item in balances {
            snapshot.balances.insert(
                (s(&item, "accountId"), s(&item, "currency")),
                Balance {
                    cents: n(&item, "balanceCents").unwrap_or(0),
                    charges: n(&item, "charges").unwrap_or(0),
                },
            );
        }
        snapshot.receipts = receipts
            .iter()
            .map(|item| Receipt {
                payment_id: s(item, "paymentId"),
                account: s(item, "accountId"),
                amount_cents: n(item, "amountCents").unwrap_or(0),
                currency: s(item, "currency"),
            })
            .collect();
        Ok(snapshot)
    }
}

impl Sources {
    /// A provisioned stack's tables and queues.
    pub fn of(clients: &local_aws::Clients, resources: &Provisioned) -> Self {
        let table = |id: &str| resources.tables[id].name.clone();
        Self {
            dynamodb: clients.dynamodb.clone(),
            sqs: clients.sqs.clone(),
            tables: Tables {
                payments: table("PaymentsTable"),
                ledger: table("LedgerTable"),
                balances: table("BalancesTable"),
                receipts: table("ReceiptsTable"),
            },
            queues: WORK_QUEUES
                .iter()
                .chain(&DEAD_LETTER_QUEUES)
                .filter_map(|id| Some((id.to_string(), resources.queues.get(*id)?.url.clone())))
                .collect(),
        }
    }

    /// The stack `make up` exports (`.local/up.env`): each table's name in `PAYMENTS_TABLE`,
    /// `LEDGER_TABLE`, ..., each queue's URL in `PAYMENTS_QUEUE_URL`, ...; `var` looks one up.
    pub fn from_exports(
        sdk: &aws_config::SdkConfig,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, BoxError> {
        let need = |name: &str| {
            var(name).ok_or_else(|| -> BoxError {
                format!("{name} is not set: source the stack's exports (.local/up.env)").into()
            })
        };
        let clients = local_aws::Clients::new(sdk);
        let mut queues = BTreeMap::new();
        for id in WORK_QUEUES.iter().chain(&DEAD_LETTER_QUEUES) {
            queues.insert(id.to_string(), need(&format!("{}_URL", env_name(id)))?);
        }
        Ok(Self {
            dynamodb: clients.dynamodb,
            sqs: clients.sqs,
            tables: Tables {
                payments: need("PAYMENTS_TABLE")?,
                ledger: need("LEDGER_TABLE")?,
                balances: need("BALANCES_TABLE")?,
                receipts: need("RECEIPTS_TABLE")?,
            },
            queues,
        })
    }

    /// Messages in each queue of `ids`: visible, in flight and delayed.
    async fn depths(&self, ids: &[&str]) -> Result<BTreeMap<String, u64>, BoxError> {
        let mut out = BTreeMap::new();
        for id in ids {
            if let Some(url) = self.queues.get(*id) {
                let d = queue_depth(&self.sqs, url).await?;
                out.insert(id.to_string(), d.visible + d.not_visible + d.delayed);
            }
        }
        Ok(out)
    }
}

/// What [`settle`] found.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The tables, as last read.
    pub snapshot: Snapshot,
    /// Every violation found in them, and each work queue still holding messages.
    pub violations: Vec<Violation>,
    /// Found but not expected, expected but not found.
    pub mismatch: Mismatch,
    /// Messages left in each dead-letter queue.
    pub dead_letters: BTreeMap<String, u64>,
    /// How long it waited for the pipeline to drain.
    pub waited: Duration,
    /// Whether it gave up waiting.
    pub timed_out: bool,
}

impl Checked {
    /// True when the violations found are exactly those expected.
    pub fn passed(&self) -> bool {
        self.mismatch.is_empty()
    }

    /// Prints the report; panics with it unless the violations found are exactly those
    /// expected.
    pub fn assert_passed(&self) {
        assert!(
            self.passed(),
            "the pipeline's invariants do not hold as expected: {self}"
        );
        eprintln!("{self}");
    }
}

impl fmt::Display for Checked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let charged = self
            .snapshot
            .payments
            .values()
            .filter(|p| p.status == super::CHARGED)
            .count();
        writeln!(
            f,
            "invariants over {} payments ({charged} charged), {} ledger entries, {} balances, {} receipts: {} violations ({} expected), after {:.1} s{}",
            self.snapshot.payments.len(),
            self.snapshot.ledger.len(),
            self.snapshot.balances.len(),
            self.snapshot.receipts.len(),
            self.violations.len(),
            self.violations.len() + self.mismatch.missing.len() - self.mismatch.unexpected.len(),
            self.waited.as_secs_f64(),
            if self.timed_out {
                " (not as expected when the wait ended)"
            } else {
                ""
            }
        )?;
        let dead: Vec<String> = self
            .dead_letters
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(q, n)| format!("{q} {n}"))
            .collect();
        if !dead.is_empty() {
            writeln!(f, "  dead letters: {}", dead.join(", "))?;
        }
        write!(f, "{}", self.mismatch)
    }
}

/// Waits until the work queues `scope` drains are empty and the stored data's violations of the
/// invariants that apply in `scope` are exactly `expected` (two reads in a row, so that a message between receive and delete is not missed),
/// or until `timeout`; returns what the last read found. A pipeline that never drains is
/// reported by its violations: the queues still holding messages, the payments not settled.
pub async fn settle(
    sources: &Sources,
    scope: &Scope,
    expected: &[Violation],
    timeout: Duration,
) -> Result<Checked, BoxError> {
    let started = Instant::now();
    let mut matched = 0;
    loop {
        let snapshot = Snapshot::read(&sources.dynamodb, &sources.tables).await?;
        let mut found = violations(&snapshot, scope);
        let drained: Vec<&str> = WORK_QUEUES
            .into_iter()
            .filter(|q| scope.drains(q))
            .collect();
        for (queue, messages) in sources.depths(&drained).await? {
            if messages > 0 {
                found.push(Violation::Undrained { queue, messages });
            }
        }
        found.sort();
        let mismatch = Mismatch::between(&found, expected);
        matched = if mismatch.is_empty() { matched + 1 } else { 0 };
        let timed_out = started.elapsed() >= timeout;
        if matched >= 2 || timed_out {
            return Ok(Checked {
                snapshot,
                violations: found,
                mismatch,
                dead_letters: sources.depths(&DEAD_LETTER_QUEUES).await?,
                waited: started.elapsed(),
                timed_out: timed_out && matched < 2,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}
