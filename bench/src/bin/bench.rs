//! The benchmark driver: provisions tables on the local endpoint, runs each workload through
//! both sides (this project, `bench-worker`; Powertools, `bench/powertools/bench.py`), directly
//! and through a proxy adding latency, measures the publisher, and writes the report.
//!
//! `bench [--records N] [--latency-ms MS] [--publisher-messages N] [--out DIR] [--rust-only]` against
//! `AWS_ENDPOINT_URL`; `make bench` runs it with a fresh local endpoint. `bench --render
//! DIR/benchmarks.json [--out DIR]` writes the report and charts again from a run's figures.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use bench::{
    PublisherResult, Scenario, SideResult, bar_chart, cost_per_million, longest_group_mean,
    workload,
};
use lambda_idempotency::publish::{DeduplicationId, Message, MessageGroupId, Publisher};
use local_aws::proxy::{Proxy, ProxyOptions, parse_endpoint};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const DUPLICATES: f64 = 0.2;
const MEMORY_MB: f64 = 128.0;

struct Options {
    records: usize,
    latency_ms: u64,
    publisher_messages: usize,
    out: PathBuf,
    rust_only: bool,
    render: Option<PathBuf>,
}

/// Everything a run measured: `benchmarks.json`.
#[derive(serde::Serialize, serde::Deserialize)]
struct Report {
    machine: String,
    records: usize,
    latency_ms: u64,
    /// The SDK's own CPU time per `PutItem`, against an endpoint that answers at once.
    sdk_cpu_us_per_request: f64,
    scenarios: Vec<Scenario>,
    publisher: Vec<PublisherResult>,
}

fn options() -> Result<Options, BoxError> {
    let mut o = Options {
        records: 2000,
        latency_ms: 5,
        publisher_messages: 300,
        out: PathBuf::from("docs"),
        rust_only: false,
        render: None,
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
            other => return Err(format!("unknown argument {other}; see the file's docs").into()),
        }
    }
    Ok(o)
}

async fn create_table(dynamodb: &aws_sdk_dynamodb::Client, name: &str) -> Result<(), BoxError> {
    dynamodb
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(ScalarAttributeType::S)
                .build()?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(KeyType::Hash)
                .build()?,
        )
        .send()
        .await?;
    Ok(())
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("bench/ is in the workspace")
        .to_path_buf()
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

/// Runs `command` against `endpoint` with `--out out`, and reads what it wrote there.
async fn run_to_file(
    mut command: tokio::process::Command,
    out: &Path,
    endpoint: &str,
    what: &str,
) -> Result<String, BoxError> {
    let status = command
        .arg("--out")
        .arg(out)
        .env("AWS_ENDPOINT_URL", endpoint)
        .status()
        .await?;
    if !status.success() {
        return Err(format!("{what} failed: {status}").into());
    }
    Ok(std::fs::read_to_string(out)?)
}

fn worker() -> Result<PathBuf, BoxError> {
    let exe = std::env::current_exe()?.with_file_name("bench-worker");
    if !exe.exists() {
        return Err(format!(
            "{} is missing: build it with `cargo build -p bench --bins` (make bench does)",
            exe.display()
        )
        .into());
    }
    Ok(exe)
}

/// Runs one side in a process of its own and reads its result.
async fn run_side(
    side: &str,
    endpoint: &str,
    events: &Path,
    fifo: bool,
    dynamodb: &aws_sdk_dynamodb::Client,
    dir: &Path,
) -> Result<SideResult, BoxError> {
    let run = uuid::Uuid::new_v4().simple().to_string();
    let (idempotency, effects) = (
        format!("bench-{side}-idem-{}", &run[..8]),
        format!("bench-{side}-effects-{}", &run[..8]),
    );
    create_table(dynamodb, &idempotency).await?;
    create_table(dynamodb, &effects).await?;
    let out = dir.join(format!("{side}-{}.json", &run[..8]));
    let started = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)?
        .as_nanos()
        .to_string();
    let mut command = match side {
        "rust" => {
            let mut c = tokio::process::Command::new(worker()?);
            // The same events, one per line, read one at a time.
            c.arg("--events").arg(events.with_extension("jsonl"));
            c
        }
        _ => {
            let root = repo_root();
            let mut c = tokio::process::Command::new(root.join(".venv-bench/bin/python"));
            c.arg(root.join("bench/powertools/bench.py"))
                .arg(if fifo { "--fifo" } else { "--standard" })
                .arg("--events")
                .arg(events);
            c
        }
    };
    command.args([
        "--idempotency-table",
        &idempotency,
        "--effects-table",
        &effects,
        "--started-at-ns",
        &started,
    ]);
    let result: SideResult = serde_json::from_str(
        &run_to_file(command, &out, endpoint, &format!("the {side} side")).await?,
    )?;
    if result.failures > 0 {
        return Err(format!(
            "the {side} side reported {} failed records",
            result.failures
        )
        .into());
    }
    Ok(result)
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
    let mut scenarios = Vec::new();
    let mut publishers = Vec::new();
    let floor_table = "bench-floor";
    create_table(&dynamodb, floor_table).await?;
    eprintln!("bench: the SDK's own CPU per request, against an endpoint that answers at once ...");
    // The same events for every network: as one JSON document for Python, one event per line
    // for the Rust worker.
    for (queue, fifo) in [("standard", false), ("fifo", true)] {
        let events = work.join(format!("events-{queue}.json"));
        let w = workload(o.records, DUPLICATES, fifo, 10, 7);
        let mut lines = String::new();
        for e in &w.events {
            lines.push_str(&serde_json::to_string(e)?);
            lines.push('\n');
        }
        std::fs::write(events.with_extension("jsonl"), lines)?;
        std::fs::write(&events, serde_json::to_string(&w)?)?;
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
            eprintln!("bench: {server}, {queue} queue, +{latency} ms each way: this project ...");
            let rust = run_side("rust", &url, &events, fifo, &dynamodb, &work).await?;
            eprintln!("bench: {server}, {queue} queue, +{latency} ms each way: Powertools ...");
            let powertools = if o.rust_only {
                SideResult::default()
            } else {
                run_side("powertools", &url, &events, fifo, &dynamodb, &work).await?
            };
            scenarios.push(Scenario {
                endpoint: server.into(),
                queue: queue.into(),
                latency_ms: latency,
                round_trip_ms: round_trip_us / 1000.0,
                rust,
                powertools,
            });
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
    let report = Report {
        machine: machine(),
        records: o.records,
        latency_ms: o.latency_ms,
        sdk_cpu_us_per_request: floor_cpu_us,
        scenarios,
        publisher: publishers,
    };
    write_report(&o.out, &report)?;
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}

/// Writes `benchmarks.json`, `benchmarks-figures.md` and the charts into `out`.
fn write_report(out: &Path, report: &Report) -> Result<(), BoxError> {
    let scenarios = &report.scenarios;
    std::fs::write(
        out.join("benchmarks.json"),
        serde_json::to_string_pretty(report)?,
    )?;
    let labels: Vec<String> = scenarios
        .iter()
        .map(|s| {
            let short = if s.queue == "standard" { "std" } else { "fifo" };
            let instant = if s.endpoint == "instant" {
                " inst."
            } else {
                ""
            };
            format!("{short} +{}ms{instant}", s.latency_ms)
        })
        .collect();
    let pick = |f: &dyn Fn(&SideResult) -> f64, rust: bool| -> Vec<f64> {
        scenarios
            .iter()
            .map(|s| f(if rust { &s.rust } else { &s.powertools }))
            .collect()
    };
    std::fs::write(
        out.join("benchmarks-batch-latency.svg"),
        bar_chart(
            "Wall time per batch of 10 (median)",
            "ms",
            &labels,
            &pick(&|s| s.median_ms(), true),
            &pick(&|s| s.median_ms(), false),
        ),
    )?;
    std::fs::write(
        out.join("benchmarks-cpu.svg"),
        bar_chart(
            "CPU time per record (user + sys)",
            "µs",
            &labels,
            &pick(&|s| s.cpu_us_per_record, true),
            &pick(&|s| s.cpu_us_per_record, false),
        ),
    )?;
    let figures = render(report);
    std::fs::write(out.join("benchmarks-figures.md"), &figures)?;
    embed(&out.join("benchmarks.md"), &figures)?;
    println!("{figures}");
    Ok(())
}

/// Where a document shows the figures of the last run.
const FIGURES_START: &str = "<!-- figures: start -->";
const FIGURES_END: &str = "<!-- figures: end -->";

/// Puts `figures` between the markers of the document at `path`, when it has them.
fn embed(path: &Path, figures: &str) -> Result<(), BoxError> {
    let Ok(doc) = std::fs::read_to_string(path) else {
        return Ok(());
    };
    let (Some(start), Some(end)) = (doc.find(FIGURES_START), doc.find(FIGURES_END)) else {
        return Ok(());
    };
    if end < start {
        return Err(format!("{}: the figures' end marker comes first", path.display()).into());
    }
    let updated = format!("{}{FIGURES_START}\n{figures}{}", &doc[..start], &doc[end..]);
    std::fs::write(path, updated)?;
    Ok(())
}

fn render(report: &Report) -> String {
    let (scenarios, publishers) = (&report.scenarios, &report.publisher);
    let mut md = String::new();
    let _ = writeln!(md, "<!-- written by `make bench`; do not edit -->");
    let _ = writeln!(
        md,
        "Machine: {}. Workload: {} records in batches of 10, {:.0} % duplicates of earlier records; FIFO with 10 message groups.\n",
        report.machine,
        report.records,
        DUPLICATES * 100.0
    );
    let _ = writeln!(
        md,
        "| scenario | side | batch median ms | batch p99 ms | CPU µs/record | requests/fresh (store's) | requests/duplicate (store's) | peak MB | cold start ms (init) | $ per million |"
    );
    let _ = writeln!(
        md,
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for s in scenarios {
        for (name, r) in [("this project", &s.rust), ("Powertools", &s.powertools)] {
            let (cost, _) = cost_per_million(r, MEMORY_MB, DUPLICATES, s.queue == "fifo");
            let _ = writeln!(
                md,
                "| {} | {name} | {:.2} | {:.2} | {:.0} | {:.2} ({:.2}) | {:.2} ({:.2}) | {:.1} | {:.0} ({:.0}) | {:.2} |",
                s.label(),
                r.median_ms(),
                r.p99_ms(),
                r.cpu_us_per_record,
                r.requests_per_fresh_record,
                r.store_requests_per_fresh_record,
                r.requests_per_duplicate_record,
                r.store_requests_per_duplicate_record,
                r.peak_rss_mb,
                r.cold_start_ms,
                r.init_ms,
                cost
            );
        }
    }
    let _ = writeln!(
        md,
        "\nRatios, this project / Powertools, in the same run:\n"
    );
    let _ = writeln!(
        md,
        "| scenario | batch median | CPU per record | peak memory | cold start |"
    );
    let _ = writeln!(md, "| --- | ---: | ---: | ---: | ---: |");
    for s in scenarios {
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
        let _ = writeln!(
            md,
            "| {} | {:.3} | {:.3} | {:.3} | {:.3} |",
            s.label(),
            ratio(s.rust.median_ms(), s.powertools.median_ms()),
            ratio(s.rust.cpu_us_per_record, s.powertools.cpu_us_per_record),
            ratio(s.rust.peak_rss_mb, s.powertools.peak_rss_mb),
            ratio(s.rust.cold_start_ms, s.powertools.cold_start_ms)
        );
    }
    let _ = writeln!(
        md,
        "\nPublisher, {} messages to a FIFO queue (10 groups):\n",
        publishers.first().map_or(0, |p| p.messages)
    );
    let _ = writeln!(
        md,
        "| latency each way | batched (messages/s) | one SendMessage per message (messages/s) | ratio |"
    );
    let _ = writeln!(md, "| ---: | ---: | ---: | ---: |");
    for p in publishers {
        let _ = writeln!(
            md,
            "| {} ms | {:.0} | {:.0} | {:.1} |",
            p.latency_ms,
            p.batched_per_second,
            p.single_per_second,
            p.batched_per_second / p.single_per_second
        );
    }
    let breakdown: HashMap<&str, [f64; 3]> = scenarios
        .iter()
        .filter(|s| s.endpoint == "moto" && s.latency_ms > 0 && s.queue == "standard")
        .flat_map(|s| {
            [
                (
                    "this project",
                    cost_per_million(&s.rust, MEMORY_MB, DUPLICATES, false).1,
                ),
                (
                    "Powertools",
                    cost_per_million(&s.powertools, MEMORY_MB, DUPLICATES, false).1,
                ),
            ]
        })
        .collect();
    let _ = writeln!(
        md,
        "\nCost per million messages (standard queue, moto, +{} ms each way), by service:\n",
        report.latency_ms
    );
    let _ = writeln!(md, "| side | Lambda | DynamoDB | SQS | total |");
    let _ = writeln!(md, "| --- | ---: | ---: | ---: | ---: |");
    for (name, [l, d, q]) in [
        ("this project", breakdown.get("this project")),
        ("Powertools", breakdown.get("Powertools")),
    ]
    .into_iter()
    .filter_map(|(n, b)| b.map(|b| (n, *b)))
    {
        let _ = writeln!(
            md,
            "| {name} | ${l:.2} | ${d:.2} | ${q:.2} | ${:.2} |",
            l + d + q
        );
    }
    targets(&mut md, report);
    md
}

/// The targets, each with what was measured and whether it was met.
fn targets(md: &mut String, report: &Report) {
    let (scenarios, publishers) = (&report.scenarios, &report.publisher);
    let (latency_ms, floor_cpu_us) = (report.latency_ms, report.sdk_cpu_us_per_request);
    let chain = longest_group_mean(&workload(report.records, DUPLICATES, true, 10, 7));
    let mark = |met: bool| if met { "met" } else { "missed" };
    let find = |endpoint: &str, queue: &str, latency: u64| {
        scenarios
            .iter()
            .find(|s| s.endpoint == endpoint && s.queue == queue && s.latency_ms == latency)
    };
    let _ = writeln!(
        md,
        "\nThe SDK's own CPU per request (sequential `PutItem`, an endpoint that answers at once): {floor_cpu_us:.0} µs; a fresh record takes 3 requests.\n"
    );
    let _ = writeln!(md, "| target | measured | |");
    let _ = writeln!(md, "| --- | --- | --- |");
    for (endpoint, on) in [("moto", "moto"), ("instant", "the instant endpoint")] {
        let cpu = scenarios
            .iter()
            .filter(|s| s.endpoint == endpoint)
            .map(|s| s.rust.cpu_us_per_record / s.powertools.cpu_us_per_record)
            .fold(f64::NAN, f64::max);
        if cpu.is_finite() {
            let _ = writeln!(
                md,
                "| CPU per record at most 1/20 of Powertools', on {on} | 1/{:.1} at worst | {} |",
                1.0 / cpu,
                mark(cpu <= 0.05)
            );
        }
    }
    for (endpoint, on) in [("moto", "moto"), ("instant", "the instant endpoint")] {
        let Some(s) = find(endpoint, "standard", latency_ms) else {
            continue;
        };
        let bound = 3.0 * s.round_trip_ms;
        let _ = writeln!(
            md,
            "| standard batch at +{} ms within 1.3x of 3 round trips ({bound:.1} ms on {on}) | {:.1} ms, {:.2}x | {} |",
            latency_ms,
            s.rust.median_ms(),
            s.rust.median_ms() / bound,
            mark(s.rust.median_ms() <= 1.3 * bound)
        );
        let speedup = s.powertools.median_ms() / s.rust.median_ms();
        let _ = writeln!(
            md,
            "| standard batch at +{} ms at least 8x faster than Powertools, on {on} | {speedup:.1}x | {} |",
            latency_ms,
            mark(speedup >= 8.0)
        );
        if let Some(f) = find(endpoint, "fifo", latency_ms) {
            let ratio = f.rust.median_ms() / s.rust.median_ms();
            let _ = writeln!(
                md,
                "| FIFO (10 groups) about the same as standard, +{} ms, on {on} | {ratio:.2}x standard (a batch's largest group: {chain:.2} records in a row) | {} |",
                latency_ms,
                mark((0.8..=1.25).contains(&ratio))
            );
        }
    }
    let on_moto = || scenarios.iter().filter(|s| s.endpoint == "moto");
    let (fresh, duplicate) = on_moto().fold((0.0_f64, 0.0_f64), |(f, d), s| {
        (
            f.max(s.rust.store_requests_per_fresh_record),
            d.max(s.rust.store_requests_per_duplicate_record),
        )
    });
    let _ = writeln!(
        md,
        "| store requests: 2 per fresh record, 1 per duplicate | {fresh:.2}, {duplicate:.2} | {} |",
        mark(fresh <= 2.0 && duplicate <= 1.0)
    );
    let worst = |f: &dyn Fn(&Scenario) -> f64, endpoint: &str| {
        scenarios
            .iter()
            .filter(|s| s.endpoint == endpoint)
            .map(f)
            .fold(0.0_f64, f64::max)
    };
    let (cold, init) = (
        worst(&|s| s.rust.cold_start_ms, "moto"),
        worst(&|s| s.rust.init_ms, "moto"),
    );
    let _ = writeln!(
        md,
        "| cold start at most 50 ms, on moto | {cold:.0} ms, of which init {init:.0} ms | {} |",
        mark(cold <= 50.0)
    );
    for s in scenarios.iter().filter(|s| s.endpoint == "instant") {
        let cold = s.rust.cold_start_ms;
        let _ = writeln!(
            md,
            "| cold start at most 50 ms, {} | {cold:.0} ms, of which init {:.0} ms | {} |",
            s.label(),
            s.rust.init_ms,
            mark(cold <= 50.0)
        );
    }
    let peak = scenarios
        .iter()
        .map(|s| s.rust.peak_rss_mb)
        .fold(0.0_f64, f64::max);
    let _ = writeln!(
        md,
        "| peak memory at most 32 MB | {peak:.1} MB | {} |",
        mark(peak <= 32.0)
    );
    for p in publishers {
        let ratio = p.batched_per_second / p.single_per_second;
        let _ = writeln!(
            md,
            "| publisher at least 8x one SendMessage per message, +{} ms | {ratio:.1}x | {} |",
            p.latency_ms,
            mark(ratio >= 8.0)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
