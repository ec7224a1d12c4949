//! The benchmark driver: provisions tables on the local endpoint, runs each workload through
//! every side (this project in the lease mode, the transactional mode, and the transactional mode
//! with a local cache, `bench-worker`; the lease mode over Redis; Powertools,
//! `bench/powertools/bench.py`), directly and through a proxy adding latency, counts each side's
//! instructions per record under callgrind, measures the publisher, and writes the report. Then
//! the same payments as a DynamoDB stream, a Kinesis stream and a Kafka partition, through the
//! floor, the lease and inline modes and Powertools' stream and Kafka processors (`--only streams`: those alone).
//!
//! `make bench` runs it with a fresh local endpoint (moto and a Redis server); `bench --help`
//! lists the options. `bench --render DIR/benchmarks.json [--out DIR]` writes the report and
//! charts again from a run's figures.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bench::render::{DUPLICATES, Report, write_report};
use bench::sides::{BoxError, Run, create_table, run_side, run_to_file, worker, write_events};
use bench::streams::{
    STREAM_SIDES, SourceInstructions, StreamReport, StreamSource, stream_workload,
};
use bench::{PublisherResult, Scenario, Side, callgrind, workload};
use clap::{Parser, ValueEnum};
use lambda_idempotency::publish::{DeduplicationId, Message, MessageGroupId, Publisher};
use latency_proxy::{Proxy, ProxyOptions, parse_endpoint};

/// The benchmark driver: the same SQS workload through this project (lease mode, transactional
/// mode, transactional mode with a cache, lease mode over Redis) and AWS Lambda Powertools, on a
/// local endpoint, straight and through a proxy adding latency; writes the report.
#[derive(Debug, Parser)]
#[command(
    name = "bench",
    version,
    after_help = "Environment: AWS_ENDPOINT_URL (the local DynamoDB/SQS endpoint) and REDIS_URL \
(the Redis server of the Redis side; without it that side is skipped, with a warning). \
`make bench` and `make bench-smoke` start both.

Exit codes:
  0  the report was written
  1  a side, a request or the report failed (the error is printed)
  2  bad command line (clap's usage error)"
)]
struct Options {
    /// Records of each workload (batches of 10).
    #[arg(long, value_name = "N", default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..))]
    records: u64,
    /// Latency the proxy adds each way in the slow scenarios, ms.
    #[arg(long, value_name = "MS", default_value_t = 5)]
    latency_ms: u64,
    /// Messages of the publisher's measurement.
    #[arg(long, value_name = "N", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    publisher_messages: u64,
    /// Where to write benchmarks.json, benchmarks-figures.md and the charts (and the figures
    /// into DIR/benchmarks.md, between its markers).
    #[arg(long, value_name = "DIR", default_value = "docs")]
    out: PathBuf,
    /// Skip Powertools.
    #[arg(long)]
    rust_only: bool,
    /// Write the report again from a run's figures, without measuring anything.
    #[arg(long, value_name = "FILE.json")]
    render: Option<PathBuf>,
    /// The prefixes of the standard queue's events (in batches) each side runs under callgrind,
    /// on the instant endpoint: SHORT,LONG with 0 < SHORT < LONG.
    #[arg(long, value_name = "SHORT,LONG", default_value = "5,25", value_parser = parse_batches)]
    callgrind_batches: [usize; 2],
    /// Skip the instruction counts (callgrind needs valgrind).
    #[arg(long, conflicts_with = "callgrind_batches")]
    no_callgrind: bool,
    /// Skip the instruction counts of the stream scenarios only (Powertools takes minutes under
    /// callgrind: `make bench-smoke` skips them).
    #[arg(long)]
    no_stream_callgrind: bool,
    /// Run only these scenarios; the others' figures are kept from DIR/benchmarks.json (--out).
    #[arg(long, value_enum, value_name = "WHAT")]
    only: Option<Only>,
}

/// The scenarios of `--only`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Only {
    /// The SQS queues (standard and FIFO) and the publisher.
    Sqs,
    /// A DynamoDB stream, a Kinesis stream and a Kafka partition.
    Streams,
}

/// `SHORT,LONG`, two batch counts with 0 < SHORT < LONG.
fn parse_batches(v: &str) -> Result<[usize; 2], String> {
    v.split_once(',')
        .and_then(|(a, b)| Some([a.trim().parse().ok()?, b.trim().parse().ok()?]))
        .filter(|[short, long]| 0 < *short && short < long)
        .ok_or_else(|| format!("{v:?} is not SHORT,LONG with 0 < SHORT < LONG (e.g. 5,25)"))
}

/// A proxy adding `latency_ms` each way in front of the Redis server at `url`
/// (`redis://HOST:PORT[/DB]`), and the URL that reaches the server through it.
async fn redis_through_proxy(url: &str, latency_ms: u64) -> Result<(Proxy, String), BoxError> {
    let rest = url
        .strip_prefix("redis://")
        .ok_or_else(|| format!("REDIS_URL {url:?}: only redis://HOST:PORT[/DB] can be proxied"))?;
    let (authority, db) = rest.split_once('/').unwrap_or((rest, ""));
    let upstream = parse_endpoint(authority).map_err(|e| format!("REDIS_URL: {e}"))?;
    let proxy = Proxy::start(
        upstream,
        ProxyOptions::with_latency(Duration::from_millis(latency_ms)),
    )
    .await?;
    let through = format!("redis://{}/{db}", proxy.addr());
    Ok((proxy, through))
}

/// An endpoint that answers every request at once with `{}` (keeping connections alive), for
/// the SDK's own cost per request.
async fn instant_endpoint() -> Result<String, BoxError> {
    use http_body_util::{BodyExt, Full};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let service = hyper::service::service_fn(
        |request: hyper::Request<hyper::body::Incoming>| async move {
            // Read the whole request, as a service would, before answering.
            request.into_body().collect().await?;
            Ok::<_, BoxError>(
                hyper::Response::builder()
                    .header("content-type", "application/x-amz-json-1.0")
                    // The CRC32 of `{}`, which the SDK checks.
                    .header("x-amz-crc32", "2745614147")
                    .body(Full::new(bytes::Bytes::from_static(b"{}")))?,
            )
        },
    );
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            tokio::spawn(connection);
        }
    });
    Ok(url)
}

/// `bench-worker --sdk-floor`: sequential `PutItem` calls against `endpoint`; returns the CPU
/// and wall time per request, µs.
async fn sdk_floor(
    endpoint: &str,
    table: &str,
    requests: u32,
    dir: &Path,
) -> Result<(f64, f64), BoxError> {
    let out = dir.join(format!("floor-{}.json", uuid::Uuid::new_v4().simple()));
    let mut command = tokio::process::Command::new(worker()?);
    command.args([
        "--sdk-floor",
        &requests.to_string(),
        "--effects-table",
        table,
    ]);
    let v: serde_json::Value = serde_json::from_str(
        &run_to_file(command, &out, endpoint, "bench-worker --sdk-floor").await?,
    )?;
    Ok((
        v["cpu_us_per_request"].as_f64().unwrap_or(0.0),
        v["wall_us_per_request"].as_f64().unwrap_or(0.0),
    ))
}

async fn publisher(
    sqs: &aws_sdk_sqs::Client,
    messages: usize,
    latency_ms: u64,
) -> Result<PublisherResult, BoxError> {
    let make_queue = || async {
        let name = format!(
            "bench-{}.fifo",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        let out = sqs
            .create_queue()
            .queue_name(name)
            .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")
            .send()
            .await?;
        Ok::<_, BoxError>(out.queue_url.unwrap_or_default())
    };
    let body = |i: usize| format!(r#"{{"paymentId":"pay-{i}","amountCents":{i}}}"#);
    let queue = make_queue().await?;
    let batch: Vec<Message> = (0..messages)
        .map(|i| {
            Message::fifo(
                MessageGroupId::new(format!("acct-{}", i % 10)).unwrap(),
                DeduplicationId::from_key(&format!("b{i}")),
                body(i),
            )
            .unwrap()
        })
        .collect();
    let t = Instant::now();
    for r in Publisher::new(sqs.clone(), &queue).send_all(batch).await {
        r?;
    }
    let batched = messages as f64 / t.elapsed().as_secs_f64();
    let queue = make_queue().await?;
    let t = Instant::now();
    for i in 0..messages {
        sqs.send_message()
            .queue_url(&queue)
            .message_body(body(i))
            .message_group_id(format!("acct-{}", i % 10))
            .message_deduplication_id(format!("s{i}"))
            .send()
            .await?;
    }
    let single = messages as f64 / t.elapsed().as_secs_f64();
    Ok(PublisherResult {
        latency_ms,
        messages,
        batched_per_second: batched,
        single_per_second: single,
    })
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let o = Options::parse();
    if let Some(figures) = &o.render {
        let report = read_report(figures)?;
        std::fs::create_dir_all(&o.out)?;
        return write_report(&o.out, &report);
    }
    let endpoint = std::env::var("AWS_ENDPOINT_URL").map_err(
        |_| "AWS_ENDPOINT_URL is not set: run `make bench`, which starts a local endpoint",
    )?;
    let sdk = local_aws::local_sdk_config().await?;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let work = std::env::temp_dir().join(format!("bench-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    std::fs::create_dir_all(&o.out)?;
    // What is not measured now is kept from the last run's figures.
    let previous_path = o.out.join("benchmarks.json");
    let previous = match o.only {
        Some(_) if previous_path.exists() => Some(read_report(&previous_path)?),
        _ => None,
    };
    let instant = instant_endpoint().await?;
    let sqs = match o.only {
        Some(Only::Streams) => None,
        _ => Some(measure_sqs(&o, &endpoint, &instant, &dynamodb, &work).await?),
    };
    let streams = match o.only {
        Some(Only::Sqs) => None,
        _ => Some(measure_streams(&o, &endpoint, &instant, &dynamodb, &work).await?),
    };
    write_report(&o.out, &combine(previous, sqs, streams))?;
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}

/// The report of a run that measured `sqs` and `streams` (either may be `None`: not measured),
/// with what it did not measure kept from the `previous` report.
fn combine(previous: Option<Report>, sqs: Option<Report>, streams: Option<StreamReport>) -> Report {
    let kept_streams = previous.as_ref().and_then(|p| p.streams.clone());
    let mut report = sqs.or(previous).unwrap_or_else(|| Report {
        machine: bench::machine(),
        records: 0,
        latency_ms: 0,
        sdk_cpu_us_per_request: 0.0,
        scenarios: Vec::new(),
        publisher: Vec::new(),
        instructions: None,
        streams: None,
    });
    report.streams = streams.or(kept_streams);
    report
}

/// The report at `path`.
fn read_report(path: &Path) -> Result<Report, BoxError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text)
        .map_err(|e| format!("{}: not a benchmark report: {e}", path.display()).into())
}

/// The SQS scenarios: each queue through every side, on moto and on the instant endpoint,
/// straight and through the proxy; the publisher; the instruction counts.
async fn measure_sqs(
    o: &Options,
    endpoint: &str,
    instant: &str,
    dynamodb: &aws_sdk_dynamodb::Client,
    work: &Path,
) -> Result<Report, BoxError> {
    let (records, publisher_messages) = (o.records as usize, o.publisher_messages as usize);
    let redis = std::env::var("REDIS_URL").ok();
    if redis.is_none() {
        eprintln!("bench: REDIS_URL is not set: the Redis side is skipped");
    }
    // The boxed handler is counted by callgrind only: its time is the inline side's.
    let callgrind_sides: Vec<Side> = Side::ALL
        .into_iter()
        .filter(|side| !(o.rust_only && *side == Side::Powertools))
        .filter(|side| redis.is_some() || *side != Side::Redis)
        .collect();
    let sides: Vec<Side> = callgrind_sides
        .iter()
        .copied()
        .filter(|side| *side != Side::InlineBoxed)
        .collect();
    let mut scenarios = Vec::new();
    let mut publishers = Vec::new();
    let floor_table = "bench-floor";
    create_table(dynamodb, floor_table).await?;
    eprintln!("bench: the SDK's own CPU per request, against an endpoint that answers at once ...");
    // The same events for every side and network: as one JSON document for Python, one event
    // per line for the Rust worker.
    let standard = workload(records, DUPLICATES, false, 10, 7);
    for (queue, fifo) in [("standard", false), ("fifo", true)] {
        let w = if fifo {
            workload(records, DUPLICATES, true, 10, 7)
        } else {
            standard.clone()
        };
        write_events(&work.join(format!("events-{queue}.json")), &w.events)?;
    }
    let (floor_cpu_us, _) = sdk_floor(instant, floor_table, 500, work).await?;
    // moto straight and through the proxy; then, to show the client's side alone, an endpoint
    // that answers every request at once, in parallel, through the proxy.
    for (server, latency) in [
        ("moto", 0),
        ("moto", o.latency_ms),
        ("instant", 0),
        ("instant", o.latency_ms),
    ] {
        let upstream = if server == "moto" { endpoint } else { instant };
        let proxy = Proxy::start(
            parse_endpoint(upstream)?,
            ProxyOptions::with_latency(Duration::from_millis(latency)),
        )
        .await?;
        let url = if latency == 0 {
            upstream.to_owned()
        } else {
            proxy.url()
        };
        // The Redis side's store goes through a proxy with the same latency.
        let redis_proxy = match &redis {
            Some(redis) if latency > 0 => {
                let (proxy, url) = redis_through_proxy(redis, latency).await?;
                Some((proxy, url))
            }
            _ => None,
        };
        let redis_url = redis_proxy.as_ref().map(|(_, url)| url.clone());
        eprintln!("bench: {server}, one PutItem round trip, +{latency} ms each way ...");
        let (_, round_trip_us) = sdk_floor(&url, floor_table, 100, work).await?;
        for (queue, fifo) in [("standard", false), ("fifo", true)] {
            let events = work.join(format!("events-{queue}.json"));
            let mut scenario = Scenario {
                endpoint: server.into(),
                queue: queue.into(),
                latency_ms: latency,
                round_trip_ms: round_trip_us / 1000.0,
                ..Scenario::default()
            };
            for &side in &sides {
                eprintln!(
                    "bench: {server}, {queue} queue, +{latency} ms each way: {} ...",
                    side.label()
                );
                let run = Run {
                    redis_url: redis_url.clone(),
                    ..Run::new(&url, &events, fifo)
                };
                let result = run_side(side, &run, dynamodb, work).await?;
                scenario.set(side, result);
            }
            scenarios.push(scenario);
        }
        if server == "moto" {
            let sqs_config = local_aws::sdk_config_for(&url).await;
            eprintln!("bench: publisher, +{latency} ms each way ...");
            publishers.push(
                publisher(
                    &aws_sdk_sqs::Client::new(&sqs_config),
                    publisher_messages,
                    latency,
                )
                .await?,
            );
        }
        proxy.shutdown().await;
        if let Some((proxy, _)) = redis_proxy {
            proxy.shutdown().await;
        }
    }
    let instructions = match (!o.no_callgrind).then_some(o.callgrind_batches) {
        Some(batches) => {
            let t = Instant::now();
            let counts = callgrind::measure(
                &callgrind_sides,
                instant,
                &standard,
                None,
                batches,
                dynamodb,
                work,
            )
            .await?;
            eprintln!(
                "bench: callgrind took {:.1} minutes",
                t.elapsed().as_secs_f64() / 60.0
            );
            Some(counts)
        }
        None => None,
    };
    Ok(Report {
        machine: bench::machine(),
        records,
        latency_ms: o.latency_ms,
        sdk_cpu_us_per_request: floor_cpu_us,
        scenarios,
        publisher: publishers,
        instructions,
        streams: None,
    })
}

/// The stream scenarios: the same payments as a DynamoDB stream, a Kinesis stream and a Kafka
/// partition, with replays from a checkpoint, through [`STREAM_SIDES`] on moto and on the
/// instant endpoint (+0 ms); the instruction counts of each source.
async fn measure_streams(
    o: &Options,
    endpoint: &str,
    instant: &str,
    dynamodb: &aws_sdk_dynamodb::Client,
    work: &Path,
) -> Result<StreamReport, BoxError> {
    let records = o.records as usize;
    let workload = stream_workload(records, DUPLICATES, 10, 7);
    let events = |source: StreamSource| work.join(format!("events-{}.json", source.key()));
    for source in StreamSource::ALL {
        write_events(&events(source), &workload.events(source).events)?;
    }
    let sides: Vec<Side> = STREAM_SIDES
        .into_iter()
        .filter(|side| !(o.rust_only && *side == Side::Powertools))
        .collect();
    let mut scenarios = Vec::new();
    for (server, url) in [("moto", endpoint), ("instant", instant)] {
        for source in StreamSource::ALL {
            let mut scenario = Scenario {
                endpoint: server.into(),
                queue: source.key().into(),
                ..Scenario::default()
            };
            for &side in &sides {
                eprintln!("bench: {server}, {}: {} ...", source.label(), side.label());
                let path = events(source);
                let run = Run {
                    stream: Some(source),
                    ..Run::new(url, &path, false)
                };
                scenario.set(side, run_side(side, &run, dynamodb, work).await?);
            }
            scenarios.push(scenario);
        }
    }
    let mut instructions = Vec::new();
    if !(o.no_callgrind || o.no_stream_callgrind) {
        let t = Instant::now();
        for source in StreamSource::ALL {
            let counts = callgrind::measure(
                &sides,
                instant,
                workload.events(source),
                Some(source),
                o.callgrind_batches,
                dynamodb,
                work,
            )
            .await?;
            instructions.push(SourceInstructions {
                source: source.key().into(),
                counts,
            });
        }
        eprintln!(
            "bench: callgrind of the streams took {:.1} minutes",
            t.elapsed().as_secs_f64() / 60.0
        );
    }
    let command: Vec<String> = std::env::args().skip(1).collect();
    Ok(StreamReport {
        machine: bench::machine(),
        date: chrono::Utc::now().format("%Y-%m-%d").to_string(),
        command: format!("bench {}", command.join(" ")),
        records,
        scenarios,
        instructions,
    })
}

#[cfg(test)]
mod tests {
    use bench::render::{FIGURES_END, FIGURES_START, Report, embed};
    use bench::streams::StreamReport;
    use clap::{CommandFactory, Parser};

    use super::{Only, Options, combine};

    fn sqs_report(machine: &str) -> Report {
        Report {
            machine: machine.into(),
            records: 2000,
            latency_ms: 5,
            sdk_cpu_us_per_request: 200.0,
            scenarios: Vec::new(),
            publisher: Vec::new(),
            instructions: None,
            streams: None,
        }
    }

    fn stream_report(date: &str) -> StreamReport {
        StreamReport {
            date: date.into(),
            ..StreamReport::default()
        }
    }

    #[test]
    fn a_run_keeps_the_figures_it_did_not_measure() {
        let previous = Report {
            streams: Some(stream_report("2026-11-01")),
            ..sqs_report("old machine")
        };
        // --only streams: the SQS figures of the last run, the new stream figures.
        let r = combine(
            Some(previous.clone()),
            None,
            Some(stream_report("2026-11-28")),
        );
        assert_eq!(r.machine, "old machine");
        assert_eq!(r.streams.unwrap().date, "2026-11-28");
        // --only sqs: the new SQS figures, the stream figures of the last run.
        let r = combine(
            Some(previous.clone()),
            Some(sqs_report("new machine")),
            None,
        );
        assert_eq!(r.machine, "new machine");
        assert_eq!(r.streams.unwrap().date, "2026-11-01");
        // Everything: nothing of the last run.
        let r = combine(
            Some(previous),
            Some(sqs_report("new machine")),
            Some(stream_report("2026-11-28")),
        );
        assert_eq!(
            (r.machine.as_str(), r.streams.unwrap().date.as_str()),
            ("new machine", "2026-11-28")
        );
        // --only streams with no report yet: no SQS figures.
        let r = combine(None, None, Some(stream_report("2026-11-28")));
        assert!(r.scenarios.is_empty() && r.instructions.is_none());
        assert_eq!(r.streams.unwrap().date, "2026-11-28");
    }

    #[test]
    fn only_takes_sqs_or_streams() {
        let o = Options::try_parse_from(["bench", "--only", "streams"]).unwrap();
        assert_eq!(o.only, Some(Only::Streams));
        let o =
            Options::try_parse_from(["bench", "--only", "sqs", "--no-stream-callgrind"]).unwrap();
        assert_eq!(o.only, Some(Only::Sqs));
        assert!(o.no_stream_callgrind);
        let error = Options::try_parse_from(["bench", "--only", "kafka"])
            .unwrap_err()
            .to_string();
        assert!(error.contains("--only"), "{error}");
    }

    #[test]
    fn the_command_line_is_consistent() {
        Options::command().debug_assert();
    }

    #[test]
    fn bad_values_are_refused_naming_the_argument() {
        for (args, named) in [
            (&["bench", "--records", "lots"][..], "--records"),
            (&["bench", "--records", "0"], "--records"),
            (
                &["bench", "--callgrind-batches", "25,5"],
                "--callgrind-batches",
            ),
            (
                &["bench", "--callgrind-batches", "5"],
                "--callgrind-batches",
            ),
            (&["bench", "--latency-ms=-1"], "--latency-ms"),
        ] {
            let error = Options::try_parse_from(args).unwrap_err().to_string();
            assert!(error.contains(named), "{args:?}: {error}");
        }
        let error = Options::try_parse_from(["bench", "--frobnicate"])
            .unwrap_err()
            .to_string();
        assert!(error.contains("--frobnicate"), "{error}");
        let o = Options::try_parse_from(["bench", "--callgrind-batches", "1, 2", "--rust-only"])
            .unwrap();
        assert_eq!(o.callgrind_batches, [1, 2]);
        assert!(o.rust_only && !o.no_callgrind);
        assert_eq!((o.records, o.latency_ms), (2000, 5));
    }

    #[test]
    fn figures_go_between_the_markers_and_nowhere_else() {
        let dir = std::env::temp_dir().join(format!("bench-embed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let doc = dir.join("benchmarks.md");
        std::fs::write(
            &doc,
            format!("# Title\n\n{FIGURES_START}\nold figures\n{FIGURES_END}\n\nAfter.\n"),
        )
        .unwrap();
        embed(&doc, "| new | figures |\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(&doc).unwrap(),
            format!("# Title\n\n{FIGURES_START}\n| new | figures |\n{FIGURES_END}\n\nAfter.\n")
        );

        let plain = dir.join("plain.md");
        std::fs::write(&plain, "no markers here\n").unwrap();
        embed(&plain, "| new |\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(&plain).unwrap(),
            "no markers here\n"
        );

        embed(&dir.join("missing.md"), "x").unwrap();
        assert!(!dir.join("missing.md").exists());

        std::fs::write(&doc, format!("{FIGURES_END}\n{FIGURES_START}\n")).unwrap();
        assert!(embed(&doc, "x").is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
