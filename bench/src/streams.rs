//! The stream benchmark: the payments of the SQS workload as a DynamoDB stream, a Kinesis stream
//! and a Kafka topic's partition, delivered in batches of 10 as Lambda delivers them, with replays
//! from a checkpoint (what a stream redelivers), through the floor, this project and Powertools'
//! `BatchProcessor(event_type=DynamoDBStreams / KinesisDataStreams / Kafka)`.
//!
//! [`stream_workload`] makes the events; the driver runs them through [`STREAM_SIDES`];
//! [`StreamReport`] holds the figures (`benchmarks.json`'s `streams`) and [`render`] writes
//! the section of `benchmarks.md` between [`STREAM_FIGURES_START`] and [`STREAM_FIGURES_END`].

use std::fmt::Write as _;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::callgrind::Instructions;
use crate::render::{grouped, ratio};
use crate::{Scenario, Side, SideResult, Workload};

/// A stream the benchmark reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StreamSource {
    /// A DynamoDB stream (`aws_lambda_events::dynamodb::Event`): each payment an `INSERT` of an
    /// item keyed on its payment id, its new image read through `serde_dynamo`.
    DynamodbStreams,
    /// A Kinesis data stream (`KinesisEvent`): each payment's JSON as a record's data, its
    /// account as the partition key.
    Kinesis,
    /// A Kafka topic's partition through an Amazon MSK event source mapping (`KafkaEvent`): each
    /// payment's JSON as a record's value, its account as the key (both base64), its payment id
    /// as a header.
    Kafka,
}

impl StreamSource {
    /// All three, in the order of the tables.
    pub const ALL: [StreamSource; 3] = [
        StreamSource::DynamodbStreams,
        StreamSource::Kinesis,
        StreamSource::Kafka,
    ];

    /// Its name in files, on command lines (`bench-worker --source`, `bench.py --source`) and in
    /// `Scenario::queue`.
    pub fn key(self) -> &'static str {
        match self {
            StreamSource::DynamodbStreams => "dynamodb-streams",
            StreamSource::Kinesis => "kinesis",
            StreamSource::Kafka => "kafka",
        }
    }

    /// The source named `key`.
    pub fn from_key(key: &str) -> Option<StreamSource> {
        StreamSource::ALL.into_iter().find(|s| s.key() == key)
    }

    /// Its name in the tables.
    pub fn label(self) -> &'static str {
        match self {
            StreamSource::DynamodbStreams => "DynamoDB stream",
            StreamSource::Kinesis => "Kinesis",
            StreamSource::Kafka => "Kafka",
        }
    }
}

/// The sides of the stream scenarios: the floor, this project's lease and inline modes, and
/// Powertools.
pub const STREAM_SIDES: [Side; 4] = [Side::Floor, Side::Lease, Side::Inline, Side::Powertools];

/// The DynamoDB stream of the events.
pub const DYNAMODB_STREAM_ARN: &str =
    "arn:aws:dynamodb:us-east-1:123456789012:table/payments/stream/2026-01-01T00:00:00.000";
/// The Kinesis stream of the events.
pub const KINESIS_STREAM_ARN: &str = "arn:aws:kinesis:us-east-1:123456789012:stream/payments";
/// The Amazon MSK cluster of the Kafka events.
pub const KAFKA_CLUSTER_ARN: &str =
    "arn:aws:kafka:us-east-1:123456789012:cluster/payments/a1b2c3d4-5678-90ab-cdef-1234567890ab-1";
/// The Kafka topic of the events (one partition, 0).
pub const KAFKA_TOPIC: &str = "payments";

/// One record of the stream: a payment, at its position.
#[derive(Debug, Clone)]
struct Entry {
    payment: String,
    account: String,
    amount_cents: usize,
    /// Its index in the stream, from 0: its sequence number is made from it.
    index: usize,
    /// The DynamoDB stream record's `eventID` (32 hex digits, as AWS gives them).
    event_id: String,
}

/// The same deliveries as a DynamoDB stream's events, a Kinesis stream's and a Kafka
/// partition's.
#[derive(Debug, Clone)]
pub struct StreamWorkload {
    /// The DynamoDB stream events, in delivery order.
    pub dynamodb: Workload,
    /// The Kinesis events, in delivery order.
    pub kinesis: Workload,
    /// The Kafka events, in delivery order.
    pub kafka: Workload,
}

impl StreamWorkload {
    /// The events of `source`.
    pub fn events(&self, source: StreamSource) -> &Workload {
        match source {
            StreamSource::DynamodbStreams => &self.dynamodb,
            StreamSource::Kinesis => &self.kinesis,
            StreamSource::Kafka => &self.kafka,
        }
    }
}

/// `records` deliveries of one shard in batches of 10: the payments of the SQS workload (one
/// per stream record, of `accounts` accounts in turn), and, about `duplicate_share` of them,
/// records delivered again because a batch was retried from a checkpoint: a batch then starts
/// 1 to 9 records before the end of the previous one (Lambda restarts a shard at the lowest
/// sequence number reported failed, and delivers everything after it again), so a replay is a
/// run of consecutive records, in order, never twice in one batch.
pub fn stream_workload(
    records: usize,
    duplicate_share: f64,
    accounts: usize,
    seed: u64,
) -> StreamWorkload {
    let mut rng = fastrand::Rng::with_seed(seed);
    // A replay takes back 5 records on average: a share of 0.2 is 2 records of each batch of
    // 10, a replay in 2 batches of 5.
    let replay_chance = (duplicate_share * 10.0 / 5.0).clamp(0.0, 1.0);
    let mut log: Vec<Entry> = Vec::new();
    let mut batches: Vec<std::ops::Range<usize>> = Vec::new();
    let (mut delivered, mut next) = (0, 0);
    while delivered < records {
        let n = (records - delivered).min(10);
        let start = if next > 0 && rng.f64() < replay_chance {
            next - rng.usize(1..=9).min(next)
        } else {
            next
        };
        while log.len() < start + n {
            let index = log.len();
            log.push(Entry {
                payment: format!("pay-{index:06}"),
                account: format!("acct-{:02}", index % accounts.max(1)),
                amount_cents: 100 + (index % 9_900),
                index,
                event_id: format!("{:032x}", rng.u128(..)),
            });
        }
        batches.push(start..start + n);
        next = next.max(start + n);
        delivered += n;
    }
    let records = |batch: &std::ops::Range<usize>, record: &dyn Fn(&Entry) -> Value| {
        log[batch.clone()].iter().map(record).collect::<Vec<_>>()
    };
    let events = |record: &dyn Fn(&Entry) -> Value| -> Workload {
        Workload {
            events: batches
                .iter()
                .map(|batch| json!({ "Records": records(batch, record) }))
                .collect(),
        }
    };
    StreamWorkload {
        dynamodb: events(&dynamodb_record),
        kinesis: events(&kinesis_record),
        kafka: Workload {
            events: batches
                .iter()
                .map(|batch| kafka_event(records(batch, &kafka_record)))
                .collect(),
        },
    }
}

/// The payment's JSON: the SQS workload's message body.
fn body(e: &Entry) -> Value {
    json!({"paymentId": e.payment, "accountId": e.account, "amountCents": e.amount_cents})
}

/// A DynamoDB stream record as Lambda delivers it (the shape of AWS's sample event): the
/// `INSERT` of the payment's item, keyed on `paymentId`, with its new image.
fn dynamodb_record(e: &Entry) -> Value {
    json!({
        "eventID": e.event_id,
        "eventName": "INSERT",
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": {
            "ApproximateCreationDateTime": 1_790_000_000 + e.index / 10,
            "Keys": {"paymentId": {"S": e.payment}},
            "NewImage": {
                "paymentId": {"S": e.payment},
                "accountId": {"S": e.account},
                "amountCents": {"N": e.amount_cents.to_string()},
            },
            // 28 digits, as AWS's are; increasing along the shard.
            "SequenceNumber": format!("44215845000000000{:011}", e.index),
            "SizeBytes": 96,
            "StreamViewType": "NEW_IMAGE",
        },
        "eventSourceARN": DYNAMODB_STREAM_ARN,
    })
}

/// A Kinesis record as Lambda delivers it (the shape of AWS's sample event): the payment's JSON,
/// base64, partitioned by account.
fn kinesis_record(e: &Entry) -> Value {
    // 56 digits, as AWS's are; increasing along the shard.
    let sequence = format!(
        "4959033827149025660855969253836157109592157598{:010}",
        e.index
    );
    json!({
        "kinesis": {
            "kinesisSchemaVersion": "1.0",
            "partitionKey": e.account,
            "sequenceNumber": sequence,
            "data": STANDARD.encode(body(e).to_string()),
            "approximateArrivalTimestamp": 1_790_000_000.0 + (e.index / 10) as f64,
        },
        "eventSource": "aws:kinesis",
        "eventVersion": "1.0",
        "eventID": format!("shardId-000000000000:{sequence}"),
        "eventName": "aws:kinesis:record",
        "invokeIdentityArn": "arn:aws:iam::123456789012:role/payments-consumer",
        "awsRegion": "us-east-1",
        "eventSourceARN": KINESIS_STREAM_ARN,
    })
}

/// A Kafka event as Lambda's Amazon MSK event source mapping delivers it (the shape of AWS's
/// sample event): the records under their `topic-partition`.
fn kafka_event(records: Vec<Value>) -> Value {
    json!({
        "eventSource": "aws:kafka",
        "eventSourceArn": KAFKA_CLUSTER_ARN,
        "bootstrapServers": "b-1.payments.a1b2c3.c1.kafka.us-east-1.amazonaws.com:9098",
        "records": { format!("{KAFKA_TOPIC}-0"): records },
    })
}

/// A Kafka record as Lambda delivers it: the payment's JSON as the value and its account as the
/// key, both base64; its payment id as a header (bytes, as Lambda gives them).
fn kafka_record(e: &Entry) -> Value {
    json!({
        "topic": KAFKA_TOPIC,
        "partition": 0,
        "offset": e.index,
        "timestamp": 1_790_000_000_000u64 + (e.index / 10) as u64 * 1000,
        "timestampType": "CREATE_TIME",
        "key": STANDARD.encode(&e.account),
        "value": STANDARD.encode(body(e).to_string()),
        "headers": [{ "paymentId": e.payment.bytes().collect::<Vec<u8>>() }],
    })
}

/// What the stream scenarios measured: `benchmarks.json`'s `streams`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StreamReport {
    /// Cores, CPU and memory.
    pub machine: String,
    /// The day of the run (UTC, `YYYY-MM-DD`).
    pub date: String,
    /// The driver's command line.
    pub command: String,
    /// Deliveries of each source's workload.
    pub records: usize,
    /// Every scenario (`queue`: the source's [`StreamSource::key`]), each with the sides of
    /// [`STREAM_SIDES`].
    pub scenarios: Vec<Scenario>,
    /// Instructions per record of each source, by callgrind (empty when skipped).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instructions: Vec<SourceInstructions>,
}

/// Callgrind's counts on one source's events.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SourceInstructions {
    /// [`StreamSource::key`].
    pub source: String,
    /// The counts.
    pub counts: Instructions,
}

impl StreamReport {
    /// The scenario of `source` on `endpoint` at `latency` ms.
    pub fn find(&self, source: StreamSource, endpoint: &str, latency: u64) -> Option<&Scenario> {
        self.scenarios
            .iter()
            .find(|s| s.queue == source.key() && s.endpoint == endpoint && s.latency_ms == latency)
    }

    /// Callgrind's counts on `source`'s events.
    pub fn instructions(&self, source: StreamSource) -> Option<&Instructions> {
        self.instructions
            .iter()
            .find(|i| i.source == source.key())
            .map(|i| &i.counts)
    }
}

/// Where `benchmarks.md` shows the stream figures of the last run.
pub const STREAM_FIGURES_START: &str = "<!-- stream figures: start -->";
/// Where they end.
pub const STREAM_FIGURES_END: &str = "<!-- stream figures: end -->";

/// `v` with `decimals`, or `-` when unknown.
fn show(v: Option<f64>, decimals: usize) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.decimals$}"),
        _ => "-".into(),
    }
}

/// The stream figures, in Markdown.
pub fn render(report: &StreamReport) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "<!-- written by `bench` (make bench, or bench --only streams); do not edit -->"
    );
    let _ = writeln!(
        md,
        "Run of {} (`{}`). Machine: {}. Workload: {} deliveries of one shard in batches of 10, the SQS workload's payments (10 accounts), {} of them replays from a checkpoint.\n",
        report.date,
        report.command,
        report.machine,
        report.records,
        replays(report)
    );
    let _ = writeln!(
        md,
        "| source | side | instructions/record | / floor | / Powertools | requests/record (moto) | / floor | CPU µs/record (moto) | CPU µs/record (instant) | / Powertools |"
    );
    let _ = writeln!(
        md,
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for source in StreamSource::ALL {
        let counts = report.instructions(source);
        let per_record = |side: Side| counts.and_then(|c| c.per_record(side));
        let moto = report.find(source, "moto", 0);
        let instant = report.find(source, "instant", 0);
        let requests = |side: Side| moto.and_then(|s| s.side(side)).map(requests_per_record);
        let cpu = |scenario: Option<&Scenario>, side: Side| {
            scenario
                .and_then(|s| s.side(side))
                .map(|r| r.cpu_us_per_record)
        };
        for side in STREAM_SIDES {
            if moto.and_then(|s| s.side(side)).is_none() && per_record(side).is_none() {
                continue;
            }
            let of = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| ratio(a, b));
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                source.label(),
                side.label(),
                per_record(side).map_or("-".into(), grouped),
                show(of(per_record(side), per_record(Side::Floor)), 2),
                show(of(per_record(side), per_record(Side::Powertools)), 3),
                show(requests(side), 2),
                show(of(requests(side), requests(Side::Floor)), 2),
                show(cpu(moto, side), 0),
                show(cpu(instant, side), 0),
                show(of(cpu(instant, side), cpu(instant, Side::Powertools)), 3),
            );
        }
    }
    let _ = writeln!(
        md,
        "\nEach scenario in full (requests per first delivery and per replayed record, the idempotency store's in brackets; no peak memory: a Rust worker reports the driver's, which holds both workloads (Linux keeps the larger resident size across the spawn)):\n"
    );
    let _ = writeln!(
        md,
        "| scenario | side | batch median ms | batch p99 ms | CPU µs/record | requests/fresh (store's) | requests/replayed (store's) | WCU/record | cold start ms |"
    );
    let _ = writeln!(
        md,
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for s in &report.scenarios {
        let source = StreamSource::from_key(&s.queue).map_or(s.queue.as_str(), |s| s.label());
        let instant = if s.endpoint == "instant" {
            " (instant endpoint)"
        } else {
            ""
        };
        for (side, r) in s.sides() {
            let _ = writeln!(
                md,
                "| {source} +{} ms{instant} | {} | {:.2} | {:.2} | {:.0} | {:.2} ({:.2}) | {:.2} ({:.2}) | {:.2} | {:.0} |",
                s.latency_ms,
                side.label(),
                r.median_ms(),
                r.p99_ms(),
                r.cpu_us_per_record,
                r.requests_per_fresh_record,
                r.store_requests_per_fresh_record,
                r.requests_per_duplicate_record,
                r.store_requests_per_duplicate_record,
                r.wcu_per_record(replay_share(s)),
                r.cold_start_ms,
            );
        }
    }
    if let Some(counts) = report.instructions.first().map(|i| &i.counts) {
        let [short, long] = counts.batches;
        let _ = writeln!(
            md,
            "\nInstructions per record: callgrind, on the instant endpoint, the first {long} batches of each source less the first {short} ({} records); CPU per record: getrusage, moto and the instant endpoint at +0 ms. Requests per record: first deliveries and replays in the workload's proportion.",
            counts.records[1].saturating_sub(counts.records[0])
        );
    }
    md
}

/// The share of a side's deliveries that were replays.
fn replayed(r: &SideResult) -> f64 {
    r.duplicate_records as f64 / r.records.max(1) as f64
}

/// The share of a scenario's deliveries that were replays (the same for every side).
fn replay_share(s: &Scenario) -> f64 {
    s.sides().next().map_or(0.0, |(_, r)| replayed(r))
}

/// Requests per delivery: first deliveries and replays in the workload's proportion.
pub fn requests_per_record(r: &SideResult) -> f64 {
    let share = replayed(r);
    r.requests_per_fresh_record * (1.0 - share) + r.requests_per_duplicate_record * share
}

/// `"412 (20.6 %)"`: how many deliveries of the workload were replays.
fn replays(report: &StreamReport) -> String {
    let share = report.scenarios.first().map_or(0.0, replay_share);
    format!(
        "{:.0} ({:.1} %)",
        share * report.records as f64,
        share * 100.0
    )
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use lambda_idempotency::batch::KafkaMessage;

    use super::*;

    #[test]
    fn a_stream_workload_replays_from_checkpoints_in_the_shapes_lambda_delivers() {
        let w = stream_workload(2000, 0.2, 10, 7);
        for source in StreamSource::ALL {
            let events = &w.events(source).events;
            assert_eq!(events.len(), 200);
            let mut seen = HashSet::new();
            let (mut deliveries, mut replays) = (0, 0);
            let mut last_end = 0u64;
            for event in events {
                let records = match source {
                    StreamSource::Kafka => event["records"]["payments-0"].as_array().unwrap(),
                    _ => event["Records"].as_array().unwrap(),
                };
                let sequences: Vec<u64> = records
                    .iter()
                    .map(|r| {
                        let s = match source {
                            StreamSource::DynamodbStreams => &r["dynamodb"]["SequenceNumber"],
                            StreamSource::Kinesis => &r["kinesis"]["sequenceNumber"],
                            StreamSource::Kafka => return r["offset"].as_u64().unwrap(),
                        };
                        let s = s.as_str().unwrap();
                        s[s.len() - 10..].parse().unwrap()
                    })
                    .collect();
                // A batch is a run of consecutive records of the shard, starting at or before
                // where the last one ended (a replay from a checkpoint).
                assert!(
                    sequences.windows(2).all(|w| w[1] == w[0] + 1),
                    "{sequences:?}"
                );
                assert!(sequences[0] <= last_end, "a gap before {sequences:?}");
                last_end = last_end.max(sequences[sequences.len() - 1] + 1);
                for r in records {
                    deliveries += 1;
                    let id = match source {
                        StreamSource::Kafka => r["offset"].to_string(),
                        _ => r["eventID"].as_str().unwrap().to_owned(),
                    };
                    if !seen.insert(id) {
                        replays += 1;
                    }
                }
            }
            assert_eq!(deliveries, 2000);
            assert!((300..500).contains(&replays), "{replays} replays");
        }
        // The shapes of aws_lambda_events, which the Rust side reads them as.
        let dynamodb: aws_lambda_events::dynamodb::Event =
            serde_json::from_value(w.dynamodb.events[0].clone()).unwrap();
        assert_eq!(dynamodb.records.len(), 10);
        assert_eq!(dynamodb.records[0].event_name, "INSERT");
        assert_eq!(dynamodb.records[0].event_id.len(), 32);
        let kinesis: aws_lambda_events::kinesis::KinesisEvent =
            serde_json::from_value(w.kinesis.events[0].clone()).unwrap();
        let data: Value = serde_json::from_slice(&kinesis.records[3].kinesis.data.0).unwrap();
        assert_eq!(data["paymentId"], "pay-000003");
        assert_eq!(kinesis.records[3].kinesis.partition_key, "acct-03");
        assert_eq!(kinesis.records[3].kinesis.sequence_number.len(), 56);
        let kafka: aws_lambda_events::kafka::KafkaEvent =
            serde_json::from_value(w.kafka.events[0].clone()).unwrap();
        let message = KafkaMessage::decode(&kafka.records["payments-0"][3]).unwrap();
        let value: Value = serde_json::from_slice(message.value.as_deref().unwrap()).unwrap();
        assert_eq!(value["paymentId"], "pay-000003");
        assert_eq!(message.key.as_deref(), Some(&b"acct-03"[..]));
        assert_eq!(message.header("paymentId"), Some(&b"pay-000003"[..]));
        assert_eq!((message.partition, message.offset), (0, 3));
        // The same payments in all three.
        assert_eq!(
            dynamodb.records[3].change.new_image["paymentId"],
            serde_dynamo::AttributeValue::S("pay-000003".into())
        );
    }

    #[test]
    fn sources_are_named_one_way() {
        for source in StreamSource::ALL {
            assert_eq!(StreamSource::from_key(source.key()), Some(source));
            assert_eq!(
                serde_json::to_value(source).unwrap(),
                Value::String(source.key().into())
            );
        }
        assert_eq!(StreamSource::from_key("sqs"), None);
    }
}
