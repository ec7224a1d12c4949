//! The hot item, simulated: how many charges per second one account's balance takes when every
//! charge is a transaction that writes it, with DynamoDB's per-item limits modelled over the
//! in-memory backend, in virtual time.
//!
//! DynamoDB serves one item from one partition, and a partition takes at most 1,000 write units
//! per second; a write in a transaction costs 2 units per KB, a standard write 1. Two
//! transactions on one item at the same moment conflict (`TransactionConflict`): the second is
//! cancelled. [`HotItem`] wraps a backend and applies that to each commit: a commit takes one
//! round trip, an item is held by a transaction for a short window while it is applied, and each
//! item's write units refill at 1,000 per second. What it refuses comes back as
//! [`Commit::Contended`], which the engine tries again with its backoff, as it does on AWS.
//!
//! [`simulate`] runs the library's transactional engine, as payment-processor runs it, with
//! `writers` invocations at once, each a batch of records that all charge the same account.
//! Under tokio's paused clock the round trips and the backoff take virtual time only, so a test
//! measures a second of DynamoDB in milliseconds.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{BatchProcessor, RecordContext, RecordHandlerExt, json};
use lambda_idempotency::key::KeyConfig;
use lambda_idempotency::state::IdempotencyRecord;
use lambda_idempotency::store::{
    Backend, Commit, Failure, InMemoryBackend, LimitError, MemoryWrite, Put, StoreError,
    TransactionalBackend, Update, Updated,
};
use lambda_idempotency::transaction::Transaction;
use lambda_runtime::{Context, LambdaEvent};
use tokio::time::Instant;

/// DynamoDB's limits on one item, and the network, as the simulation models them.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Write units one partition (so one item) takes per second: 1,000.
    pub units_per_second: f64,
    /// Write units each item of a transaction costs (items up to 1 KB): 2; a standard write: 1.
    pub units_per_item: f64,
    /// One request's round trip (from a Lambda function in the table's region).
    pub round_trip: Duration,
    /// How long a transaction holds its items while it is applied: another transaction on one of
    /// them meanwhile is cancelled.
    pub held: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            units_per_second: 1_000.0,
            units_per_item: 2.0,
            round_trip: Duration::from_millis(10),
            held: Duration::from_millis(1),
        }
    }
}

/// One item's state: its write units left, and until when a transaction holds it.
#[derive(Debug, Clone, Copy)]
struct Item {
    units: f64,
    refilled: Instant,
    held_until: Instant,
}

/// A backend whose commits meet DynamoDB's per-item limits ([`Limits`]).
#[derive(Debug)]
pub struct HotItem<B> {
    inner: B,
    limits: Limits,
    items: Mutex<HashMap<String, Item>>,
    refusals: Mutex<Refusals>,
}

/// What [`HotItem`] refused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refusals {
    /// Commits cancelled for another transaction on one of their items.
    pub conflicts: u64,
    /// Commits refused for an item's write units.
    pub throttled: u64,
}

impl<B> HotItem<B> {
    /// `inner` under `limits`.
    pub fn new(inner: B, limits: Limits) -> Self {
        Self {
            inner,
            limits,
            items: Mutex::default(),
            refusals: Mutex::default(),
        }
    }

    /// What was refused so far.
    pub fn refusals(&self) -> Refusals {
        *self.refusals.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the write units of `keys` at `now`, or says why not.
    fn admit(&self, keys: &[String], now: Instant) -> Result<(), &'static str> {
        let l = self.limits;
        let mut items = self.items.lock().unwrap_or_else(|e| e.into_inner());
        for key in keys {
            // No burst credit: the steady state.
            let item = items.entry(key.clone()).or_insert(Item {
                units: l.units_per_item,
                refilled: now,
                held_until: now,
            });
            let refill = now.duration_since(item.refilled).as_secs_f64() * l.units_per_second;
            item.units = (item.units + refill).min(l.units_per_second);
            item.refilled = now;
            if item.held_until > now {
                return Err("TransactionConflict: another transaction holds one of its items");
            }
            if item.units < l.units_per_item {
                return Err("ThrottlingException: the item's partition is out of write units");
            }
        }
        for key in keys {
            if let Some(item) = items.get_mut(key) {
                item.units -= l.units_per_item;
                item.held_until = now + l.held;
            }
        }
        Ok(())
    }
}

impl<B: Backend> Backend for HotItem<B> {
    async fn put(&self, record: &IdempotencyRecord, now_ms: i64) -> Result<Put, StoreError> {
        self.inner.put(record, now_ms).await
    }

    async fn get(&self, key: &str, now_ms: i64) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.inner.get(key, now_ms).await
    }

    async fn update(&self, key: &str, update: &Update, now_ms: i64) -> Result<Updated, StoreError> {
        self.inner.update(key, update, now_ms).await
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.inner.delete(key).await
    }
}

impl<B: TransactionalBackend<Write = MemoryWrite>> TransactionalBackend for HotItem<B> {
    type Write = MemoryWrite;

    fn check(
        &self,
        record: &IdempotencyRecord,
        writes: &[MemoryWrite],
        carrier: Option<usize>,
    ) -> Result<(), LimitError> {
        self.inner.check(record, writes, carrier)
    }

    async fn commit(
        &self,
        record: &IdempotencyRecord,
        writes: &[MemoryWrite],
        token: &str,
        now_ms: i64,
    ) -> Result<Commit, StoreError> {
        // The request reaches DynamoDB half a round trip later, and its answer comes back after
        // the other half.
        tokio::time::sleep(self.limits.round_trip / 2).await;
        let mut keys = vec![format!("idempotency/{}", record.key)];
        keys.extend(writes.iter().map(|w| format!("{}/{}", w.table, w.key)));
        let admitted = self.admit(&keys, Instant::now());
        let answer = match admitted {
            Ok(()) => self.inner.commit(record, writes, token, now_ms).await,
            Err(reason) => {
                let mut refusals = self.refusals.lock().unwrap_or_else(|e| e.into_inner());
                if reason.starts_with("TransactionConflict") {
                    refusals.conflicts += 1;
                } else {
                    refusals.throttled += 1;
                }
                Ok(Commit::Contended {
                    reason: reason.to_owned(),
                })
            }
        };
        tokio::time::sleep(self.limits.round_trip / 2).await;
        answer
    }

    async fn record_failure(
        &self,
        record: &IdempotencyRecord,
        now_ms: i64,
    ) -> Result<Failure, StoreError> {
        tokio::time::sleep(self.limits.round_trip).await;
        self.inner.record_failure(record, now_ms).await
    }
}

/// What one simulation found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Simulated {
    /// Charges committed.
    pub charged: u64,
    /// Records that failed for contention and came back in a later batch.
    pub redelivered: u64,
    /// Virtual time they took, s.
    pub seconds: f64,
    /// Charges per second.
    pub per_second: f64,
    /// What the hot item refused on the way.
    pub refusals: Refusals,
}

/// `writers` invocations at once (1: a FIFO message group, which Lambda processes one batch at a
/// time), each processing `batches` batches of 10 records that all charge one account, through
/// the transactional engine over the in-memory backend under `limits`. A record whose commit
/// still meets contention after the engine's tries fails and comes back in the writer's next
/// batch, as SQS redelivers it (the visibility timeout's wait left out), until every charge is
/// committed. Run it under tokio's paused clock (`#[tokio::test(start_paused = true)]`): the
/// time it reports is virtual.
pub async fn simulate(limits: Limits, queue: Queue, writers: usize, batches: usize) -> Simulated {
    let backend = Arc::new(HotItem::new(InMemoryBackend::default(), limits));
    let engine = Idempotency::new(backend.clone());
    let handler = json(|p: Charge, _ctx: RecordContext| async move {
        Ok::<_, std::io::Error>(
            Transaction::new(()).write(MemoryWrite::put("balances", "acct-hot", &p.id)),
        )
    })
    .transactional(engine)
    .with_keys(KeyConfig::json_pointer("/id"));
    let handler = &handler;
    let started = Instant::now();
    let runs = (0..writers).map(|w| async move {
        let processor = BatchProcessor::new();
        let mut waiting: std::collections::VecDeque<(String, u32)> =
            (0..batches * 10).map(|i| (format!("{w}-{i}"), 1)).collect();
        let (mut charged, mut redelivered) = (0, 0);
        while !waiting.is_empty() {
            let batch: Vec<(String, u32)> = waiting.drain(..waiting.len().min(10)).collect();
            let mut event = SqsEvent::default();
            event.records = batch.iter().map(|(id, n)| message(queue, id, *n)).collect();
            let report = processor
                .process(&LambdaEvent::new(event, Context::default()), handler)
                .await
                .expect("a batch is processed");
            for (record, (id, n)) in report.records.iter().zip(batch) {
                if record.result.is_ok() {
                    charged += 1;
                } else {
                    redelivered += 1;
                    waiting.push_back((id, n + 1));
                }
            }
        }
        (charged, redelivered)
    });
    let (charged, redelivered) = futures_util::future::join_all(runs)
        .await
        .into_iter()
        .fold((0, 0), |(c, r), (c1, r1)| (c + c1, r + r1));
    let seconds = started.elapsed().as_secs_f64();
    Simulated {
        charged,
        redelivered,
        seconds,
        per_second: charged as f64 / seconds,
        refusals: backend.refusals(),
    }
}

#[derive(serde::Deserialize)]
struct Charge {
    id: String,
}

/// The queue the charges come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queue {
    /// A FIFO queue, the account's charges in one message group: a batch's records run one
    /// after another.
    Fifo,
    /// A standard queue: a batch's records run at once.
    Standard,
}

fn message(queue: Queue, id: &str, receives: u32) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some(format!("m-{id}"));
    m.receipt_handle = Some(format!("rh-{id}-{receives}"));
    m.body = Some(format!(r#"{{"id":"pay-{id}"}}"#));
    m.attributes
        .insert("ApproximateReceiveCount".into(), receives.to_string());
    m.event_source_arn = Some(match queue {
        Queue::Fifo => {
            m.attributes
                .insert("MessageGroupId".into(), "acct-hot".into());
            "arn:aws:sqs:us-east-1:123456789012:payments.fifo".into()
        }
        Queue::Standard => "arn:aws:sqs:us-east-1:123456789012:payments".into(),
    });
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_message_group_is_bound_by_its_round_trips() {
        // One invocation at a time: each record's transaction waits for the one before it.
        let s = simulate(Limits::default(), Queue::Fifo, 1, 20).await;
        eprintln!("{s:?}");
        assert_eq!(s.charged, 200);
        assert_eq!(
            s.refusals,
            Refusals::default(),
            "one writer meets no contention"
        );
        // 10 ms per record: 100 charges per second, far below the item's limit.
        assert!((90.0..=101.0).contains(&s.per_second), "{s:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn many_writers_on_one_item_reach_its_write_units_and_no_further() {
        // 40 invocations at once charging one account (a standard queue, or 40 groups writing one
        // balance): the item takes 1,000 units per second, 2 per transaction: 500 charges/s.
        let s = simulate(Limits::default(), Queue::Standard, 40, 5).await;
        eprintln!("{s:?}");
        assert_eq!(s.charged, 2_000, "every charge commits in the end: {s:?}");
        assert!(s.per_second <= 505.0, "above the item's write units: {s:?}");
        assert!(s.per_second >= 350.0, "far below the item's limit: {s:?}");
        assert!(s.refusals.throttled > 0, "the units ran out: {s:?}");
        assert!(s.refusals.conflicts > 0, "writers met on the item: {s:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_standard_write_doubles_the_hot_item_figure() {
        // The same writers with 1 unit per write (a write outside a transaction): 1,000/s.
        let limits = Limits {
            units_per_item: 1.0,
            held: Duration::ZERO,
            ..Limits::default()
        };
        let s = simulate(limits, Queue::Standard, 40, 5).await;
        eprintln!("{s:?}");
        assert_eq!(s.charged, 2_000, "{s:?}");
        assert!(s.per_second <= 1_010.0, "{s:?}");
        assert!(s.per_second >= 600.0, "{s:?}");
    }
}
