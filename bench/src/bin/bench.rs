//! The benchmark driver: provisions tables on the local endpoint, runs each workload through
//! every side (this project in the lease mode, the transactional mode, and the transactional mode
//! with a local cache, `bench-worker`; Powertools, `bench/powertools/bench.py`), directly and
//! through a proxy adding latency, counts each side's instructions per record under callgrind,
//! measures the publisher, and writes the report.
//!
//! `bench [--records N] [--latency-ms MS] [--publisher-messages N] [--out DIR] [--rust-only]
//! [--callgrind-batches SHORT,LONG] [--no-callgrind]` against `AWS_ENDPOINT_URL`; `make bench`
//! runs it with a fresh local endpoint. `bench --render DIR/benchmarks.json [--out DIR]` writes
//! the report and charts again from a run's figures.
//!
//! `--callgrind-batches` (default 5,25): the prefixes of the standard queue's events each side
//! runs under callgrind, on the instant endpoint; `--no-callgrind` skips that part.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bench::render::{DUPLICATES, Report, write_report};
use bench::sides::{BoxError, Run, create_table, run_side, run_to_file, worker, write_events};
use bench::{PublisherResult, Scenario, Side, callgrind, workload};
use lambda_idempotency::publish::{DeduplicationId, Message, MessageGroupId, Publisher};
use local_aws::proxy::{Proxy, ProxyOptions, parse_endpoint};

struct Options {
    records: usize,
    latency_ms: u64,
    publisher_messages: usize,
    out: PathBuf,
    rust_only: bool,
    render: Option<PathBuf>,
    /// Batches of the short and of the long run under callgrind; `None`: no callgrind.
    callgrind: Option<[usize; 2]>,
}

fn options() -> Result<Options, BoxError> {
    let mut o = Options {
        records: 2000,
        latency_ms: 5,
        publisher_messages: 300,
        out: PathBuf::from("docs"),
        rust_only: false,
        render: None,
        callgrind: Some([5, 25]),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--records" => o.records = value()?.parse()?,
            "--latency-ms" => o.latency_ms = value()?.parse()?,
            "--publisher-messages" => o.publisher_messages = value()?.parse()?,
            "--out" => o.out = PathBuf::from(value()?),
            "--rust-only" => o.rust_only = true,
            "--render" => o.render = Some(PathBuf::from(value()?)),
            "--no-callgrind" => o.callgrind = None,
            "--callgrind-batches" => {
                let v = value()?;
                let parsed = v
                    .split_once(',')
                    .and_then(|(a, b)| Some([a.trim().parse().ok()?, b.trim().parse().ok()?]))
                    .filter(|[short, long]| 0 < *short && short < long)
                    .ok_or_else(|| {
                        format!("--callgrind-batches {v}: SHORT,LONG with 0 < SHORT < LONG")
                    })?;
                o.callgrind = Some(parsed);
            }
            other => return Err(format!("unknown argument {other}; see the file's docs").into()),
        }
    }
    Ok(o)
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

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines().next().map(|l| {
                l.split_whitespace()
                    .nth(1)
                    .unwrap_or("0")
                    .parse::<f64>()
                    .unwrap_or(0.0)
                    / 1024.0
                    / 1024.0
            })
        })
        .unwrap_or(0.0);
    format!("{cores} cores ({cpu}), {mem:.0} GiB")
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let o = options()?;
    if let Some(figures) = &o.render {
        let report: Report = serde_json::from_str(
            &std::fs::read_to_string(figures)
                .map_err(|e| format!("cannot read {}: {e}", figures.display()))?,
        )?;
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
    let sides: Vec<Side> = Side::ALL
        .into_iter()
        .filter(|side| !(o.rust_only && *side == Side::Powertools))
        .collect();
    let mut scenarios = Vec::new();
    let mut publishers = Vec::new();
    let floor_table = "bench-floor";
    create_table(&dynamodb, floor_table).await?;
    eprintln!("bench: the SDK's own CPU per request, against an endpoint that answers at once ...");
    // The same events for every side and network: as one JSON document for Python, one event
    // per line for the Rust worker.
    let standard = workload(o.records, DUPLICATES, false, 10, 7);
    for (queue, fifo) in [("standard", false), ("fifo", true)] {
        let w = if fifo {
            workload(o.records, DUPLICATES, true, 10, 7)
        } else {
            standard.clone()
        };
        write_events(&work.join(format!("events-{queue}.json")), &w.events)?;
    }
    let instant = instant_endpoint().await?;
    let (floor_cpu_us, _) = sdk_floor(&instant, floor_table, 500, &work).await?;
    // moto straight and through the proxy; then, to show the client's side alone, an endpoint
    // that answers every request at once, in parallel, through the proxy.
    for (server, latency) in [
        ("moto", 0),
        ("moto", o.latency_ms),
        ("instant", 0),
        ("instant", o.latency_ms),
    ] {
        let upstream = if server == "moto" {
            &endpoint
        } else {
            &instant
        };
        let proxy = Proxy::start(
            parse_endpoint(upstream)?,
            ProxyOptions::with_latency(Duration::from_millis(latency)),
        )
        .await?;
        let url = if latency == 0 {
            upstream.clone()
        } else {
            proxy.url()
        };
        eprintln!("bench: {server}, one PutItem round trip, +{latency} ms each way ...");
        let (_, round_trip_us) = sdk_floor(&url, floor_table, 100, &work).await?;
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
                let result =
                    run_side(side, &Run::new(&url, &events, fifo), &dynamodb, &work).await?;
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
                    o.publisher_messages,
                    latency,
                )
                .await?,
            );
        }
        proxy.shutdown().await;
    }
    let instructions = match o.callgrind {
        Some(batches) => {
            let t = Instant::now();
            let counts =
                callgrind::measure(&sides, &instant, &standard, batches, &dynamodb, &work).await?;
            eprintln!(
                "bench: callgrind took {:.1} minutes",
                t.elapsed().as_secs_f64() / 60.0
            );
            Some(counts)
        }
        None => None,
    };
    let report = Report {
        machine: machine(),
        records: o.records,
        latency_ms: o.latency_ms,
        sdk_cpu_us_per_request: floor_cpu_us,
        scenarios,
        publisher: publishers,
        instructions,
    };
    write_report(&o.out, &report)?;
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}

#[cfg(test)]
mod tests {
    use bench::render::{FIGURES_END, FIGURES_START, embed};

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
