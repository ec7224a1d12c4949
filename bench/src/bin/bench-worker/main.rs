//! One side of the benchmark: this project's batch processor with an idempotency store
//! (DynamoDB, or Redis/Valkey in the lease mode), over a workload file, in a process of its own.
//! Writes a [`bench::SideResult`]. See `bench-worker --help` for the options.
//!
//! The events file has one Lambda event per line (SQS, or with `--source` a DynamoDB stream's,
//! a Kinesis stream's or a Kafka partition's: the same handlers run on their records); each is read and decoded just before its
//! invocation, as the Lambda runtime would, so the process never holds the whole workload (which
//! would show in its peak memory), and the decoding is kept out of the CPU time, like the Python
//! side does.
//!
//! - `--mode lease` (the default): `idempotent`, a conditional write before the handler and one
//!   after it; the handler makes its own `PutItem` into the effects table.
//! - `--mode transactional`: `transactional`, the handler returns that item as the `Put` of a
//!   [`Transaction`] and it commits with the record in one `TransactWriteItems`; the handler
//!   makes no request of its own.
//! - `--mode inline`: `inline`, the handler returns that item as a `NewItem` and the engine
//!   writes it with the idempotency record on it, in one conditional `PutItem` (keyed on the
//!   payment id: the item's own key).
//! - `--mode none`: the floor, the same handler without idempotency: its `PutItem` into the
//!   effects table and nothing else, run again for every redelivery. What exactly once is
//!   measured against.
//! - `--store redis`: the lease mode over [`RedisBackend`] at `REDIS_URL` (the handler still
//!   writes its item to DynamoDB); each round trip to Redis is counted for its record, and by
//!   operation (`acquire`, `complete`, `fail`, ...) with a [`RequestCounter`].
//! - `--cache`: a [`LocalCache`] of 10,000 completed keys for 15 minutes.
//!
//! `bench-worker --sdk-floor N --effects-table E --out FILE`: N sequential `PutItem` calls with
//! the plain SDK client, and the CPU time of each (the floor under any library built on the SDK:
//! run against an endpoint that answers at once, it is the client's own cost per request).

use std::collections::HashSet;
use std::io::BufRead;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use aws_lambda_events::dynamodb::Event as DynamoDbEvent;
use aws_lambda_events::kafka::KafkaEvent;
use aws_lambda_events::kinesis::KinesisEvent;
use aws_lambda_events::sqs::SqsEvent;
use aws_sdk_dynamodb::types::AttributeValue;
use bench::{SideResult, rusage};
use clap::{Parser, ValueEnum};
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{BatchProcessor, EventSource, Record, RecordHandler};
use lambda_idempotency::cache::LocalCache;
use lambda_idempotency::count::RequestCounter;
use lambda_idempotency::store::{DynamoDbBackend, RedisBackend};
use lambda_runtime::{Context, LambdaEvent};
use serde::de::DeserializeOwned;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The local cache of `--cache`: keys, and how long each is kept.
const CACHE_KEYS: usize = 10_000;
const CACHE_TTL: Duration = Duration::from_secs(15 * 60);

mod counting;
mod handlers;

use counting::{CountedConnection, PerDelivery};
use handlers::{DynamoDbSide, floor_handler, lease_handler};

/// The deliveries of first-seen and of redelivered records, in order.
#[derive(Default)]
struct Seen {
    ids: HashSet<String>,
    fresh: Vec<String>,
    duplicates: Vec<String>,
}

/// The idempotency mode of `--mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// A conditional write before the handler and one after it; the handler makes its own
    /// `PutItem`.
    Lease,
    /// The record and the handler's `Put` in one `TransactWriteItems` (DynamoDB only).
    Transactional,
    /// The record on the handler's new item, in its one conditional `PutItem` (DynamoDB only).
    Inline,
    /// No idempotency: the handler's `PutItem` alone (the floor).
    None,
}

/// The event source of `--source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Source {
    /// SQS events.
    Sqs,
    /// DynamoDB stream events: the payment is the new image.
    DynamodbStreams,
    /// Kinesis events: the payment is the data.
    Kinesis,
    /// Kafka events (Amazon MSK): the payment is the value.
    Kafka,
}

/// The idempotency store of `--store`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Store {
    /// `DynamoDbBackend`, on the table of `--idempotency-table` at `AWS_ENDPOINT_URL`.
    Dynamodb,
    /// `RedisBackend`, at `REDIS_URL` (lease mode only).
    Redis,
}

/// One side of the benchmark: this project's batch processor with an idempotency store, over a
/// workload file, in a process of its own; writes its measurements as JSON.
#[derive(Debug, Parser)]
#[command(
    name = "bench-worker",
    version,
    after_help = "Talks to DynamoDB at AWS_ENDPOINT_URL (and to Redis at REDIS_URL with --store redis). \
Started by the driver, `bench`, once per side and scenario.

Exit codes:
  0  every event processed (or the SDK floor measured) and the result written to --out
  1  a request, a record or the output failed (the error is printed)
  2  bad command line (clap's usage error)"
)]
struct Cli {
    /// The events: one Lambda event (JSON) per line, of `--source`.
    #[arg(long, value_name = "FILE.jsonl", required_unless_present = "sdk_floor")]
    events: Option<PathBuf>,
    /// What the events are.
    #[arg(long, value_enum, default_value_t = Source::Sqs)]
    source: Source,
    /// The DynamoDB table of the idempotency records (with `--store dynamodb`).
    #[arg(long, value_name = "TABLE")]
    idempotency_table: Option<String>,
    /// The DynamoDB table the handler writes its item into.
    #[arg(long, value_name = "TABLE")]
    effects_table: String,
    /// Where to write the result (JSON).
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// The idempotency mode.
    #[arg(long, value_enum, default_value_t = Mode::Lease)]
    mode: Mode,
    /// The idempotency store; `redis` reads its URL from REDIS_URL and runs the lease mode.
    #[arg(long, value_enum, default_value_t = Store::Dynamodb)]
    store: Store,
    /// The Redis server, for `--store redis`.
    #[arg(long, env = "REDIS_URL", value_name = "URL", hide_env_values = true)]
    redis_url: Option<String>,
    /// A local cache of 10,000 completed keys for 15 minutes.
    #[arg(long)]
    cache: bool,
    /// The inline handler held as a `BoxRecordHandler` (`.boxed()`), as an app struct holds it.
    #[arg(long)]
    boxed: bool,
    /// Each invocation's deadline, from its start (the Lambda function's timeout).
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    lambda_timeout_ms: u64,
    /// When the driver spawned this process, ns since the Unix epoch: the cold start counts
    /// from there (default: this process's own start).
    #[arg(long, value_name = "NS")]
    started_at_ns: Option<u64>,
    /// Instead of a workload: N sequential `PutItem` calls into `--effects-table` with the plain
    /// SDK client, and the CPU and wall time of each.
    #[arg(long, value_name = "N", conflicts_with_all = ["events", "mode", "store", "cache"])]
    sdk_floor: Option<u32>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    let process_start = SystemTime::now();
    let cli = Cli::parse();
    let started = match cli.started_at_ns {
        Some(ns) => SystemTime::UNIX_EPOCH + Duration::from_nanos(ns),
        None => process_start,
    };
    if let Some(n) = cli.sdk_floor {
        return sdk_floor(n, &cli.effects_table, &cli.out).await;
    }
    if cli.mode != Mode::Lease && cli.store == Store::Redis {
        return Err(format!(
            "--mode {} --store redis: only the lease mode has a Redis store",
            format!("{:?}", cli.mode).to_lowercase()
        )
        .into());
    }
    if cli.mode == Mode::None && cli.cache {
        return Err("--mode none --cache: without idempotency there is nothing to cache".into());
    }
    if cli.boxed && cli.mode != Mode::Inline {
        return Err("--boxed: only the inline mode's handler is measured boxed".into());
    }
    let timeout = Duration::from_millis(cli.lambda_timeout_ms);
    let events_path = cli
        .events
        .clone()
        .ok_or("--events FILE.jsonl is required")?
        .display()
        .to_string();
    let events = std::io::BufReader::new(
        std::fs::File::open(&events_path).map_err(|e| format!("cannot read {events_path}: {e}"))?,
    );
    let effects_table = cli.effects_table.clone();

    let sdk = local_aws::local_sdk_config().await?;
    let counter = PerDelivery::default();
    let dynamodb = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&sdk)
            .interceptor(counter.clone())
            .build(),
    );
    let cache = cli
        .cache
        .then(|| LocalCache::new(NonZeroUsize::new(CACHE_KEYS).unwrap(), CACHE_TTL));
    let mut result = SideResult {
        side: "rust".into(),
        version: format!("lambda-idempotency {}", env!("CARGO_PKG_VERSION")),
        store_mode: match cli.mode {
            Mode::Lease => "lease",
            Mode::Transactional => "transactional",
            Mode::Inline => "inline",
            Mode::None => "none",
        }
        .into(),
        store: match (cli.mode, cli.store) {
            (Mode::None, _) => "none",
            (_, Store::Dynamodb) => "dynamodb",
            (_, Store::Redis) => "redis",
        }
        .into(),
        cache: cache.is_some(),
        ..SideResult::default()
    };
    let invocations = Invocations {
        events,
        events_path: &events_path,
        started,
        timeout,
        result: &mut result,
        seen: Seen::default(),
    };
    let operations = RequestCounter::default();
    let side = Sides {
        cli: &cli,
        dynamodb: &dynamodb,
        effects_table: &effects_table,
        counter: &counter,
        cache: cache.as_ref(),
        operations: &operations,
    };
    let seen = match cli.source {
        Source::Sqs => side.run::<SqsEvent, _>(invocations).await?,
        Source::DynamodbStreams => side.run::<DynamoDbEvent, _>(invocations).await?,
        Source::Kinesis => side.run::<KinesisEvent, _>(invocations).await?,
        Source::Kafka => side.run::<KafkaEvent, _>(invocations).await?,
    };
    let (_, peak_kib) = rusage();
    result.cpu_us_per_record = result.cpu_ms_total * 1000.0 / result.records.max(1) as f64;
    result.peak_rss_mb = peak_kib / 1024.0;
    result.cache_hits = cache.as_ref().map_or(0, LocalCache::hits);
    let counts = counter.0.lock().unwrap();
    // The mean over `deliveries` of one of their counts.
    let mean = |deliveries: &[String], count: &dyn Fn([u32; 3]) -> u32| {
        if deliveries.is_empty() {
            return 0.0;
        }
        deliveries
            .iter()
            .map(|d| f64::from(count(counts.get(d).copied().unwrap_or_default())))
            .sum::<f64>()
            / deliveries.len() as f64
    };
    let (fresh, duplicates) = (&seen.fresh, &seen.duplicates);
    result.duplicate_records = duplicates.len() as u64;
    result.requests_per_fresh_record = mean(fresh, &|[all, _, _]| all);
    result.requests_per_duplicate_record = mean(duplicates, &|[all, _, _]| all);
    result.store_requests_per_fresh_record = mean(fresh, &|[all, handler, _]| all - handler);
    result.store_requests_per_duplicate_record =
        mean(duplicates, &|[all, handler, _]| all - handler);
    result.wcu_per_fresh_record = Some(mean(fresh, &|[_, _, units]| units));
    result.wcu_per_duplicate_record = Some(mean(duplicates, &|[_, _, units]| units));
    result.store_operations = operations.snapshot();
    std::fs::write(&cli.out, serde_json::to_string_pretty(&result)?)?;
    Ok(())
}

/// What every side needs, for the events of any source.
struct Sides<'a> {
    cli: &'a Cli,
    dynamodb: &'a aws_sdk_dynamodb::Client,
    effects_table: &'a str,
    counter: &'a PerDelivery,
    cache: Option<&'a LocalCache>,
    operations: &'a RequestCounter,
}

impl Sides<'_> {
    /// Runs the side of the command line on `invocations`, events of `E`.
    async fn run<E: EventSource + DeserializeOwned, Rd: BufRead>(
        &self,
        invocations: Invocations<'_, Rd>,
    ) -> Result<Seen, BoxError> {
        let cli = self.cli;
        let (dynamodb, effects_table) = (self.dynamodb, self.effects_table);
        Ok(match cli.store {
            _ if cli.mode == Mode::None => {
                invocations
                    .run::<E, _>(&floor_handler(dynamodb, effects_table))
                    .await?
            }
            Store::Redis => {
                let url = cli
                    .redis_url
                    .as_deref()
                    .ok_or("--store redis: REDIS_URL (or --redis-url) is not set")?;
                let connection = ::redis::Client::open(url)
                    .map_err(|e| format!("REDIS_URL: not a Redis URL: {e}"))?
                    .get_connection_manager()
                    .await
                    .map_err(|e| format!("cannot connect to Redis at REDIS_URL: {e}"))?;
                let backend = RedisBackend::new(CountedConnection {
                    inner: connection,
                    per_delivery: self.counter.clone(),
                })
                .with_namespace(format!("bench-{}:", uuid::Uuid::new_v4().simple()))
                .with_counter(self.operations.clone());
                // Up front, as `RedisBackend::connect` does: not a record's round trip.
                backend.load_scripts().await?;
                let store = Idempotency::new(backend);
                match self.cache {
                    Some(cache) => {
                        let store = store.with_local_cache(cache.clone());
                        invocations
                            .run::<E, _>(&lease_handler(dynamodb, effects_table, store))
                            .await?
                    }
                    None => {
                        invocations
                            .run::<E, _>(&lease_handler(dynamodb, effects_table, store))
                            .await?
                    }
                }
            }
            Store::Dynamodb => {
                let table = cli
                    .idempotency_table
                    .clone()
                    .ok_or("--idempotency-table TABLE is required with --store dynamodb")?;
                let store = Idempotency::new(DynamoDbBackend::new(dynamodb.clone(), table));
                let side = DynamoDbSide {
                    dynamodb,
                    effects_table,
                    mode: cli.mode,
                    boxed: cli.boxed,
                };
                match self.cache {
                    Some(cache) => {
                        side.run::<E, _, _>(invocations, store.with_local_cache(cache.clone()))
                            .await?
                    }
                    None => side.run::<E, _, _>(invocations, store).await?,
                }
            }
        })
    }
}

/// The invocations of the workload, one event at a time, as one warm execution environment.
struct Invocations<'a, Rd> {
    events: Rd,
    events_path: &'a str,
    started: SystemTime,
    timeout: Duration,
    result: &'a mut SideResult,
    seen: Seen,
}

impl<Rd: BufRead> Invocations<'_, Rd> {
    /// Runs `handler` on every event (of `E`); fills in the times of the result, and returns
    /// which deliveries were fresh and which duplicates.
    async fn run<E, H>(self, handler: &H) -> Result<Seen, BoxError>
    where
        E: EventSource + DeserializeOwned,
        H: RecordHandler<E::Record>,
    {
        let Invocations {
            events,
            events_path,
            started,
            timeout,
            result,
            mut seen,
        } = self;
        let processor = BatchProcessor::new();
        result.init_ms = SystemTime::now().duration_since(started)?.as_secs_f64() * 1000.0;
        for (i, line) in events.lines().enumerate() {
            let event: E = serde_json::from_str(&line?).map_err(|e| {
                format!(
                    "{events_path}: event {i} is not an event of {}s: {e}",
                    E::Record::KIND
                )
            })?;
            // The batch each record's requests are counted for.
            counting::BATCH.store(i, std::sync::atomic::Ordering::Relaxed);
            let records = event.records();
            for r in &records {
                let id = r.id().unwrap_or_default().into_owned();
                let delivery = counting::delivery(i, &id);
                if seen.ids.insert(id) {
                    seen.fresh.push(delivery)
                } else {
                    seen.duplicates.push(delivery)
                }
            }
            result.records += records.len() as u64;
            drop(records);
            let mut context = Context::default();
            context.deadline = (SystemTime::now() + timeout)
                .duration_since(SystemTime::UNIX_EPOCH)?
                .as_millis() as u64;
            let (cpu_before, _) = rusage();
            let t = Instant::now();
            let report = processor
                .process(&LambdaEvent::new(event, context), handler)
                .await?;
            // Built in the time of the batch, as the runtime does when it answers.
            std::hint::black_box(report.response());
            result.batch_ms.push(t.elapsed().as_secs_f64() * 1000.0);
            result.cpu_ms_total += rusage().0 - cpu_before;
            // A failed record makes the side's figures wrong: the driver stops, and this says why.
            for failed in report.failures() {
                if let Err(e) = &failed.result {
                    eprintln!("bench-worker: record {} failed: {e}", failed.message_id);
                }
            }
            result.failures += report.failures().count() as u64;
            result.batches += 1;
            if i == 0 {
                result.cold_start_ms =
                    SystemTime::now().duration_since(started)?.as_secs_f64() * 1000.0;
            }
        }
        Ok(seen)
    }
}

/// `--sdk-floor`: CPU time per request of the plain SDK client, N `PutItem` calls one after
/// another.
async fn sdk_floor(n: u32, table: &str, out: &Path) -> Result<(), BoxError> {
    let sdk = local_aws::local_sdk_config().await?;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let put = |i: u32| {
        dynamodb
            .put_item()
            .table_name(table)
            .item("id", AttributeValue::S(format!("pay-{i:06}")))
            .item("amountCents", AttributeValue::N(i.to_string()))
            .send()
    };
    put(0).await?; // the first request opens the connection
    let (before, _) = rusage();
    let t = Instant::now();
    for i in 0..n {
        put(i).await?;
    }
    let cpu_us = (rusage().0 - before) * 1000.0 / f64::from(n.max(1));
    let wall_us = t.elapsed().as_secs_f64() * 1e6 / f64::from(n.max(1));
    std::fs::write(
        out,
        serde_json::json!({"requests": n, "cpu_us_per_request": cpu_us, "wall_us_per_request": wall_us})
            .to_string(),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::{Cli, Mode, Store};

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_drivers_flags_parse_and_bad_values_are_refused_naming_the_argument() {
        let base = ["bench-worker", "--effects-table", "E", "--out", "o.json"];
        let with = |extra: &[&str]| {
            let mut args = base.to_vec();
            args.extend_from_slice(extra);
            Cli::try_parse_from(args)
        };
        let cli = with(&[
            "--mode",
            "transactional",
            "--cache",
            "--events",
            "e.jsonl",
            "--idempotency-table",
            "I",
            "--lambda-timeout-ms",
            "600000",
            "--started-at-ns",
            "1700000000000000000",
        ])
        .unwrap();
        assert_eq!(
            (cli.mode, cli.store, cli.cache),
            (Mode::Transactional, Store::Dynamodb, true)
        );
        assert_eq!(cli.lambda_timeout_ms, 600_000);
        let cli = with(&["--events", "e.jsonl", "--store", "redis"]).unwrap();
        assert_eq!((cli.mode, cli.store), (Mode::Lease, Store::Redis));
        assert_eq!(with(&["--sdk-floor", "500"]).unwrap().sdk_floor, Some(500));
        for (extra, named) in [
            (&["--events", "e", "--mode", "eventual"][..], "--mode"),
            (&["--events", "e", "--store", "memcached"], "--store"),
            (
                &["--events", "e", "--lambda-timeout-ms", "soon"],
                "--lambda-timeout-ms",
            ),
            (&["--sdk-floor", "many"], "--sdk-floor"),
            (&[], "--events"),
        ] {
            let error = with(extra).unwrap_err().to_string();
            assert!(error.contains(named), "{extra:?}: {error}");
        }
    }
}
