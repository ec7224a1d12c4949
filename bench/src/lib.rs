//! The benchmark: the same SQS workload through this project's batch processor with the
//! DynamoDB idempotency store, and through AWS Lambda Powertools for Python
//! (`BatchProcessor` + `idempotent_function` on a `DynamoDBPersistenceLayer`), against one local
//! DynamoDB endpoint, directly and through a proxy that adds latency.
//!
//! Each side runs as a process of its own (`bench-worker`, in the lease mode, the transactional
//! mode, and the transactional mode with a local cache; and `bench/powertools/bench.py`), so that
//! CPU time, peak memory and cold start are measured the same way for all.
//!
//! [`sides`] starts the sides, [`callgrind`] counts their instructions, [`render`] and
//! [`targets`] write the report.

pub mod callgrind;
pub mod capacity;
pub mod package;
pub mod render;
pub mod sides;
pub mod streams;
pub mod targets;

pub use render::bar_chart;
pub use sides::{Side, machine};

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The workload: Lambda SQS events, as Lambda would deliver them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Workload {
    /// The events, in delivery order.
    pub events: Vec<Value>,
}

/// Generates `records` records in batches of 10, `duplicate_share` of them redeliveries of
/// records of earlier batches (same message id and body); FIFO with `groups` message groups when
/// `fifo`.
pub fn workload(
    records: usize,
    duplicate_share: f64,
    fifo: bool,
    groups: usize,
    seed: u64,
) -> Workload {
    let mut rng = fastrand::Rng::with_seed(seed);
    let queue = if fifo { "bench.fifo" } else { "bench" };
    let arn = format!("arn:aws:sqs:us-east-1:123456789012:{queue}");
    let mut sent: Vec<(String, String, String)> = Vec::new(); // (message id, body, group)
    let mut events = Vec::new();
    let mut made = 0;
    let mut delivery = 0;
    let mut sequence: u128 = 18_849_496_460_467_696_128;
    while made < records {
        let n = (records - made).min(10);
        let earlier = sent.len();
        let mut batch = Vec::with_capacity(n);
        let mut ids_in_batch = HashSet::new();
        for _ in 0..n {
            let duplicate = earlier > 0 && rng.f64() < duplicate_share;
            let (id, body, group) = if duplicate {
                // A redelivery of a record of an earlier batch, never twice in one batch.
                let mut pick = sent[rng.usize(0..earlier)].clone();
                while ids_in_batch.contains(&pick.0) {
                    pick = sent[rng.usize(0..earlier)].clone();
                }
                pick
            } else {
                let i = sent.len();
                let group = format!("acct-{:02}", i % groups.max(1));
                let body = json!({"paymentId": format!("pay-{i:06}"), "accountId": group, "amountCents": 100 + (i % 9_900)}).to_string();
                let entry = (uuid::Uuid::new_v4().to_string(), body, group);
                sent.push(entry.clone());
                entry
            };
            ids_in_batch.insert(id.clone());
            delivery += 1;
            sequence += 1;
            let mut attributes = json!({
                "ApproximateReceiveCount": if duplicate { "2" } else { "1" },
                "SentTimestamp": "1700000000000",
                "SenderId": "AIDAIO23YVJENQZJOL4VO",
                "ApproximateFirstReceiveTimestamp": "1700000000001",
            });
            if fifo {
                attributes["MessageGroupId"] = json!(group);
                attributes["MessageDeduplicationId"] = json!(id);
                attributes["SequenceNumber"] = json!(sequence.to_string());
            }
            batch.push(json!({
                "messageId": id,
                "receiptHandle": format!("rh-{delivery}"),
                "body": body,
                "attributes": attributes,
                "messageAttributes": {},
                "md5OfBody": "00000000000000000000000000000000",
                "eventSource": "aws:sqs",
                "eventSourceARN": arn,
                "awsRegion": "us-east-1",
            }));
        }
        // FIFO: Lambda delivers a group's messages in order; keep each group's records together.
        if fifo {
            batch.sort_by(|a, b| {
                a["attributes"]["MessageGroupId"]
                    .as_str()
                    .cmp(&b["attributes"]["MessageGroupId"].as_str())
            });
        }
        made += n;
        events.push(json!({ "Records": batch }));
    }
    Workload { events }
}

/// The mean, over a FIFO workload's batches, of the number of records of a batch's largest
/// message group: the records of a group run one after another, so this is a batch's critical
/// path in records.
pub fn longest_group_mean(workload: &Workload) -> f64 {
    let mut total = 0usize;
    for event in &workload.events {
        let mut groups = std::collections::HashMap::<&str, usize>::new();
        for r in event["Records"].as_array().into_iter().flatten() {
            *groups
                .entry(r["attributes"]["MessageGroupId"].as_str().unwrap_or(""))
                .or_default() += 1;
        }
        total += groups.values().copied().max().unwrap_or(0);
    }
    total as f64 / workload.events.len().max(1) as f64
}

/// What one side measured; `bench/powertools/bench.py` writes the same shape.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SideResult {
    /// `rust` or `powertools`.
    pub side: String,
    /// The library version.
    #[serde(default)]
    pub version: String,
    /// Records processed.
    pub records: u64,
    /// Of those, deliveries of a record delivered before (absent from older runs).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub duplicate_records: u64,
    /// Batches processed.
    pub batches: u64,
    /// Wall time of each batch, ms.
    pub batch_ms: Vec<f64>,
    /// User + system CPU time of the process while processing, ms.
    pub cpu_ms_total: f64,
    /// The same per record, µs.
    pub cpu_us_per_record: f64,
    /// Peak resident memory, MB.
    pub peak_rss_mb: f64,
    /// From process start to the first batch answered, ms.
    pub cold_start_ms: f64,
    /// Of that, from process start to the handler ready (the Lambda init phase), ms.
    #[serde(default)]
    pub init_ms: f64,
    /// DynamoDB requests per first-seen record.
    pub requests_per_fresh_record: f64,
    /// DynamoDB requests per redelivered record.
    pub requests_per_duplicate_record: f64,
    /// Of those per first-seen record, the idempotency store's (the rest are the handler's).
    #[serde(default)]
    pub store_requests_per_fresh_record: f64,
    /// Of those per redelivered record, the idempotency store's.
    #[serde(default)]
    pub store_requests_per_duplicate_record: f64,
    /// DynamoDB write request units per first-seen record, counted per request by
    /// [`write_units`]. `None`: not counted, every request being a single write of an item under
    /// 1 KB, one unit (Powertools' side, and runs from before this was counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wcu_per_fresh_record: Option<f64>,
    /// The same per redelivered record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wcu_per_duplicate_record: Option<f64>,
    /// This project's mode: `lease` or `transactional` (empty for Powertools).
    #[serde(default)]
    pub store_mode: String,
    /// The idempotency store: `dynamodb` or `redis` (empty for Powertools and older runs:
    /// DynamoDB).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub store: String,
    /// The store's round trips by operation (`acquire`, `complete`, `fail`, ...), counted by
    /// the Redis backend's `RequestCounter`; empty for DynamoDB.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub store_operations: std::collections::BTreeMap<String, u64>,
    /// Whether the local cache of completed keys was on.
    #[serde(default)]
    pub cache: bool,
    /// Records answered by the local cache, without a request.
    #[serde(default)]
    pub cache_hits: u64,
    /// Records reported failed (must be 0).
    pub failures: u64,
}

impl SideResult {
    /// Median batch time, ms.
    pub fn median_ms(&self) -> f64 {
        percentile(&self.batch_ms, 0.5)
    }

    /// 99th percentile batch time, ms.
    pub fn p99_ms(&self) -> f64 {
        percentile(&self.batch_ms, 0.99)
    }

    /// Mean batch time, ms.
    pub fn mean_ms(&self) -> f64 {
        if self.batch_ms.is_empty() {
            return 0.0;
        }
        self.batch_ms.iter().sum::<f64>() / self.batch_ms.len() as f64
    }

    /// Write request units per first-seen record: as counted, or one per request.
    pub fn wcu_per_fresh(&self) -> f64 {
        self.wcu_per_fresh_record
            .unwrap_or(self.requests_per_fresh_record)
    }

    /// Write request units per redelivered record: as counted, or one per request.
    pub fn wcu_per_duplicate(&self) -> f64 {
        self.wcu_per_duplicate_record
            .unwrap_or(self.requests_per_duplicate_record)
    }

    /// Write request units per record, with `duplicate_share` of the records redeliveries.
    pub fn wcu_per_record(&self, duplicate_share: f64) -> f64 {
        (1.0 - duplicate_share) * self.wcu_per_fresh() + duplicate_share * self.wcu_per_duplicate()
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A DynamoDB write request, for its on-demand write request units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteRequest {
    /// `PutItem`, `UpdateItem`, `DeleteItem`, conditional or not, whether its condition holds
    /// or not (a failed condition is billed too).
    Single,
    /// `TransactWriteItems` with this many actions.
    Transaction {
        /// Actions in the transaction.
        items: usize,
    },
    /// Anything else (a read, a table operation): no write units.
    Other,
}

/// On-demand write request units of one request whose items are all under 1 KB, as the
/// benchmark's are: 1 for a single write; 2 per item for a transaction (a transactional write
/// costs two units per KB of each item). A cancelled transaction (a duplicate in the
/// transactional mode: its record's condition fails) is counted the same, 2 per item: AWS does
/// not clearly document what a cancelled transaction is billed, so this is an upper bound.
pub fn write_units(request: WriteRequest) -> u32 {
    match request {
        WriteRequest::Single => 1,
        WriteRequest::Transaction { items } => 2 * items as u32,
        WriteRequest::Other => 0,
    }
}

/// The `q` quantile (nearest rank) of `values`.
pub fn percentile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// User + system CPU time of this process, and its peak resident memory in KiB.
pub fn rusage() -> (f64, f64) {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1000.0 + t.tv_usec as f64 / 1000.0;
    (
        ms(usage.ru_utime) + ms(usage.ru_stime),
        usage.ru_maxrss as f64,
    )
}

/// One scenario: every side on one workload and network.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Scenario {
    /// `moto` (the local AWS endpoint), or `instant` (an endpoint that accepts every request at
    /// once, in parallel, without storing anything: the client's side alone).
    #[serde(default)]
    pub endpoint: String,
    /// `standard` or `fifo`.
    pub queue: String,
    /// Added latency each way, ms (0: straight to the endpoint).
    pub latency_ms: u64,
    /// One `PutItem` round trip on this network, one request at a time (the mean of 100), ms.
    #[serde(default)]
    pub round_trip_ms: f64,
    /// The same handler with no idempotency (absent from runs before it was measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor: Option<SideResult>,
    /// This project, lease mode (its default).
    pub rust: SideResult,
    /// Powertools for AWS Lambda (Python).
    pub powertools: SideResult,
    /// This project, transactional mode (absent from runs before it was measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transactional: Option<SideResult>,
    /// This project, transactional mode with the local cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transactional_cache: Option<SideResult>,
    /// This project, inline mode (absent from runs before it was measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<SideResult>,
    /// This project, lease mode over Redis (absent when no Redis server was given, and from
    /// runs before it was measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis: Option<SideResult>,
}

impl Scenario {
    /// What `side` measured, if it ran.
    pub fn side(&self, side: Side) -> Option<&SideResult> {
        let result = match side {
            Side::Floor => self.floor.as_ref(),
            Side::Lease => Some(&self.rust),
            Side::Powertools => Some(&self.powertools),
            Side::Transactional => self.transactional.as_ref(),
            Side::TransactionalCache => self.transactional_cache.as_ref(),
            Side::Inline => self.inline.as_ref(),
            Side::Redis => self.redis.as_ref(),
            // Counted by callgrind only.
            Side::InlineBoxed => None,
        };
        result.filter(|r| r.records > 0)
    }

    /// Records what `side` measured.
    pub fn set(&mut self, side: Side, result: SideResult) {
        match side {
            Side::Floor => self.floor = Some(result),
            Side::Lease => self.rust = result,
            Side::Powertools => self.powertools = result,
            Side::Transactional => self.transactional = Some(result),
            Side::TransactionalCache => self.transactional_cache = Some(result),
            Side::Inline => self.inline = Some(result),
            Side::Redis => self.redis = Some(result),
            Side::InlineBoxed => {}
        }
    }

    /// The sides that ran, in table order.
    pub fn sides(&self) -> impl Iterator<Item = (Side, &SideResult)> {
        Side::ALL
            .into_iter()
            .filter_map(|side| self.side(side).map(|r| (side, r)))
    }

    /// `standard +5 ms`, with ` (instant endpoint)` when not on moto.
    pub fn label(&self) -> String {
        let mut label = format!("{} +{} ms", self.queue, self.latency_ms);
        if self.endpoint == "instant" {
            label.push_str(" (instant endpoint)");
        }
        label
    }
}

/// Publisher throughput.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PublisherResult {
    /// Added latency each way, ms.
    pub latency_ms: u64,
    /// Messages sent in each run.
    pub messages: usize,
    /// `Publisher::send_all` (SendMessageBatch, 10 entries, several calls in flight).
    pub batched_per_second: f64,
    /// One `SendMessage` per message, one after another.
    pub single_per_second: f64,
}

/// Public us-east-1 on-demand prices, as published on the AWS pricing pages in November 2024
/// (after the DynamoDB on-demand price cut of 2024-11-01).
pub struct Prices;

impl Prices {
    /// Lambda, arm64, per GB-second.
    pub const LAMBDA_GB_SECOND: f64 = 0.000_013_333_4;
    /// Lambda, per request.
    pub const LAMBDA_REQUEST: f64 = 0.20 / 1e6;
    /// DynamoDB on-demand, per write request unit.
    pub const DYNAMODB_WRITE: f64 = 0.625 / 1e6;
    /// SQS FIFO, per request.
    pub const SQS_FIFO_REQUEST: f64 = 0.50 / 1e6;
    /// SQS standard, per request.
    pub const SQS_STANDARD_REQUEST: f64 = 0.40 / 1e6;
}

/// Lambda's CPU share: 1,769 MB of memory get one vCPU-second per second, less memory a
/// proportional share.
pub const LAMBDA_MB_PER_VCPU: f64 = 1769.0;

/// Dollars per million messages for one side of a scenario: Lambda GB-seconds at `memory_mb`
/// for the time a batch takes (the measured wall time, or, when longer, the measured CPU time
/// stretched by Lambda's CPU share at that memory size: at 128 MB a function gets 7 % of a
/// vCPU), one Lambda request per batch of 10, the DynamoDB write request units of the measured
/// requests ([`SideResult::wcu_per_record`], see [`write_units`]) with the given duplicate
/// share, and the SQS requests of the event source mapping (a receive and a delete per
/// batch of 10) and of the producer (one send per message).
pub fn cost_per_million(
    side: &SideResult,
    memory_mb: f64,
    duplicate_share: f64,
    fifo: bool,
) -> (f64, [f64; 3]) {
    let wall = side.mean_ms() / 1000.0 / 10.0;
    let cpu = side.cpu_us_per_record / 1e6 / (memory_mb / LAMBDA_MB_PER_VCPU).min(1.0);
    let seconds_per_message = wall.max(cpu);
    let lambda = seconds_per_message * memory_mb / 1024.0 * Prices::LAMBDA_GB_SECOND
        + Prices::LAMBDA_REQUEST / 10.0;
    let dynamodb = side.wcu_per_record(duplicate_share) * Prices::DYNAMODB_WRITE;
    let sqs_request = if fifo {
        Prices::SQS_FIFO_REQUEST
    } else {
        Prices::SQS_STANDARD_REQUEST
    };
    let sqs = (1.0 + 0.1 + 0.1) * sqs_request;
    let parts = [lambda * 1e6, dynamodb * 1e6, sqs * 1e6];
    (parts.iter().sum(), parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_have_the_asked_shape() {
        let w = workload(2000, 0.2, true, 10, 1);
        assert_eq!(w.events.len(), 200);
        let records: Vec<&Value> = w
            .events
            .iter()
            .flat_map(|e| e["Records"].as_array().unwrap())
            .collect();
        assert_eq!(records.len(), 2000);
        let ids: HashSet<&str> = records
            .iter()
            .map(|r| r["messageId"].as_str().unwrap())
            .collect();
        let duplicates = 2000 - ids.len();
        assert!((300..500).contains(&duplicates), "{duplicates} duplicates");
        for e in &w.events {
            let batch: Vec<&str> = e["Records"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["messageId"].as_str().unwrap())
                .collect();
            let unique: HashSet<_> = batch.iter().collect();
            assert_eq!(unique.len(), batch.len(), "no duplicate within a batch");
        }
        let groups: HashSet<&str> = records
            .iter()
            .map(|r| r["attributes"]["MessageGroupId"].as_str().unwrap())
            .collect();
        assert_eq!(groups.len(), 10);
        let event: aws_lambda_events::sqs::SqsEvent =
            serde_json::from_value(w.events[0].clone()).unwrap();
        assert_eq!(event.records.len(), 10);
    }

    #[test]
    fn the_longest_group_is_counted_per_batch() {
        let w = workload(2000, 0.0, true, 10, 1);
        assert_eq!(longest_group_mean(&w), 1.0);
        let w = workload(2000, 0.2, true, 10, 1);
        let mean = longest_group_mean(&w);
        assert!(mean > 1.0 && mean <= 3.0, "{mean}");
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    #[test]
    fn costs_add_up() {
        let side = SideResult {
            batch_ms: vec![100.0; 10],
            requests_per_fresh_record: 3.0,
            requests_per_duplicate_record: 1.0,
            ..SideResult::default()
        };
        let (total, [lambda, dynamodb, sqs]) = cost_per_million(&side, 128.0, 0.2, false);
        // 10 ms per message at 1/8 GB, plus 0.1 request: 1,000,000 * (0.01 * 0.125 * 0.0000133334 + 0.02e-6)
        assert!((lambda - 0.0367).abs() < 0.001, "{lambda}");
        assert!((dynamodb - 1.625).abs() < 1e-9, "{dynamodb}");
        assert!((sqs - 0.48).abs() < 1e-9, "{sqs}");
        assert!((total - (lambda + dynamodb + sqs)).abs() < 1e-9);

        // 1 ms of CPU per record at 128 MB (1769/128 slower): 13.8 ms per message, more than
        // the 10 ms of wall time.
        let cpu_bound = SideResult {
            cpu_us_per_record: 1000.0,
            ..side
        };
        let (_, [lambda, _, _]) = cost_per_million(&cpu_bound, 128.0, 0.2, false);
        let expected = 1e6 * (0.001 * 1769.0 / 128.0 * 0.125 * 0.0000133334 + 0.02e-6);
        assert!((lambda - expected).abs() < 1e-6, "{lambda} {expected}");
    }

    #[test]
    fn a_transaction_costs_two_units_per_item_cancelled_or_not() {
        assert_eq!(write_units(WriteRequest::Single), 1);
        assert_eq!(write_units(WriteRequest::Other), 0);
        // The record and the handler's Put.
        let fresh = write_units(WriteRequest::Transaction { items: 2 });
        assert_eq!(fresh, 4);

        // Transactional: one request per record, fresh (committed) or duplicate (cancelled,
        // counted as 2 units per item, the upper bound).
        let transactional = SideResult {
            batch_ms: vec![100.0; 10],
            requests_per_fresh_record: 1.0,
            requests_per_duplicate_record: 1.0,
            wcu_per_fresh_record: Some(f64::from(fresh)),
            wcu_per_duplicate_record: Some(f64::from(fresh)),
            ..SideResult::default()
        };
        assert_eq!(transactional.wcu_per_record(0.2), 4.0);
        let (_, [_, dynamodb, _]) = cost_per_million(&transactional, 128.0, 0.2, false);
        assert!((dynamodb - 2.5).abs() < 1e-9, "{dynamodb}");

        // A duplicate answered by the local cache costs nothing.
        let cached = SideResult {
            requests_per_duplicate_record: 0.0,
            wcu_per_duplicate_record: Some(0.0),
            ..transactional
        };
        let (_, [_, dynamodb, _]) = cost_per_million(&cached, 128.0, 0.2, false);
        assert!((dynamodb - 0.8 * 4.0 * 0.625).abs() < 1e-9, "{dynamodb}");

        // Not counted (Powertools): one unit per request.
        let lease = SideResult {
            requests_per_fresh_record: 3.0,
            requests_per_duplicate_record: 1.0,
            ..SideResult::default()
        };
        assert!((lease.wcu_per_record(0.2) - 2.6).abs() < 1e-9);
    }

    #[test]
    fn scenarios_list_the_sides_that_ran() {
        let ran = |records| SideResult {
            records,
            ..SideResult::default()
        };
        let mut s = Scenario::default();
        s.set(Side::Lease, ran(10));
        s.set(Side::TransactionalCache, ran(10));
        s.set(Side::Powertools, ran(0));
        let sides: Vec<Side> = s.sides().map(|(side, _)| side).collect();
        assert_eq!(sides, [Side::Lease, Side::TransactionalCache]);
        for side in Side::ALL {
            assert_eq!(Side::from_key(side.key()), Some(side));
        }
    }
}
