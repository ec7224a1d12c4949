//! The benchmark driver: provisions tables on the local endpoint, runs each workload through
//! both sides (this project, `bench-worker`; Powertools, `bench/powertools/bench.py`), directly
//! and through a proxy adding latency, measures the publisher, and writes the report.
//!
//! `bench [--records N] [--latency-ms MS] [--publisher-messages N] [--out DIR] [--rust-only]` against
//! `AWS_ENDPOINT_URL`; `make bench` runs it with a fresh local endpoint.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use bench::{PublisherResult, Scenario, SideResult, bar_chart, cost_per_million, workload};
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
}

fn options() -> Result<Options, BoxError> {
    let mut o = Options {
        records: 2000,
        latency_ms: 5,
        publisher_messages: 300,
        out: PathBuf::from("docs"),
        rust_only: false,
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
            let exe = std::env::current_exe()?.with_file_name("bench-worker");
            if !exe.exists() {
                return Err(format!(
                    "{} is missing: build it with `cargo build -p bench --bins` (make bench does)",
                    exe.display()
                )
                .into());
            }
            tokio::process::Command::new(exe)
        }
        _ => {
            let root = repo_root();
            let mut c = tokio::process::Command::new(root.join(".venv-bench/bin/python"));
            c.arg(root.join("bench/powertools/bench.py")).arg(if fifo {
                "--fifo"
            } else {
                "--standard"
            });
            c
        }
    };
    let status = command
        .arg("--events")
        .arg(events)
        .args([
            "--idempotency-table",
            &idempotency,
            "--effects-table",
            &effects,
            "--started-at-ns",
            &started,
        ])
        .arg("--out")
        .arg(&out)
        .env("AWS_ENDPOINT_URL", endpoint)
        .status()
        .await?;
    if !status.success() {
        return Err(format!("the {side} side failed: {status}").into());
    }
    let result: SideResult = serde_json::from_str(&std::fs::read_to_string(&out)?)?;
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
    for latency in [0, o.latency_ms] {
        let proxy = Proxy::start(
            parse_endpoint(&endpoint)?,
            ProxyOptions::with_latency(Duration::from_millis(latency)),
        )
        .await?;
        let url = if latency == 0 {
            endpoint.clone()
        } else {
            proxy.url()
        };
        for (queue, fifo) in [("standard", false), ("fifo", true)] {
            let events = work.join(format!("events-{queue}.json"));
            std::fs::write(
                &events,
                serde_json::to_string(&workload(o.records, DUPLICATES, fifo, 10, 7))?,
            )?;
            eprintln!("bench: {queue} queue, +{latency} ms each way: this project ...");
            let rust = run_side("rust", &url, &events, fifo, &dynamodb, &work).await?;
            eprintln!("bench: {queue} queue, +{latency} ms each way: Powertools ...");
            let powertools = if o.rust_only {
                SideResult::default()
            } else {
                run_side("powertools", &url, &events, fifo, &dynamodb, &work).await?
            };
            scenarios.push(Scenario {
                queue: queue.into(),
                latency_ms: latency,
                rust,
                powertools,
            });
        }
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
        proxy.shutdown().await;
    }
    let report = render(&o, &scenarios, &publishers);
    std::fs::write(
        o.out.join("benchmarks.json"),
        serde_json::to_string_pretty(
            &serde_json::json!({"scenarios": scenarios, "publisher": publishers}),
        )?,
    )?;
    let labels: Vec<String> = scenarios
        .iter()
        .map(|s| format!("{} +{}ms", s.queue, s.latency_ms))
        .collect();
    let pick = |f: &dyn Fn(&SideResult) -> f64, rust: bool| -> Vec<f64> {
        scenarios
            .iter()
            .map(|s| f(if rust { &s.rust } else { &s.powertools }))
            .collect()
    };
    std::fs::write(
        o.out.join("benchmarks-batch-latency.svg"),
        bar_chart(
            "Wall time per batch of 10 (median)",
            "ms",
            &labels,
            &pick(&|s| s.median_ms(), true),
            &pick(&|s| s.median_ms(), false),
        ),
    )?;
    std::fs::write(
        o.out.join("benchmarks-cpu.svg"),
        bar_chart(
            "CPU time per record (user + sys)",
            "µs",
            &labels,
            &pick(&|s| s.cpu_us_per_record, true),
            &pick(&|s| s.cpu_us_per_record, false),
        ),
    )?;
    std::fs::write(o.out.join("benchmarks-figures.md"), &report)?;
    println!("{report}");
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}

fn render(o: &Options, scenarios: &[Scenario], publishers: &[PublisherResult]) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "<!-- written by `make bench`; do not edit -->");
    let _ = writeln!(
        md,
        "Machine: {}. Workload: {} records in batches of 10, {:.0} % duplicates of earlier records; FIFO with 10 message groups.\n",
        machine(),
        o.records,
        DUPLICATES * 100.0
    );
    let _ = writeln!(
        md,
        "| scenario | side | batch median ms | batch p99 ms | CPU µs/record | requests/fresh | requests/duplicate | peak MB | cold start ms | $ per million |"
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
                "| {} +{} ms | {name} | {:.2} | {:.2} | {:.0} | {:.2} | {:.2} | {:.1} | {:.0} | {:.2} |",
                s.queue,
                s.latency_ms,
                r.median_ms(),
                r.p99_ms(),
                r.cpu_us_per_record,
                r.requests_per_fresh_record,
                r.requests_per_duplicate_record,
                r.peak_rss_mb,
                r.cold_start_ms,
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
            "| {} +{} ms | {:.3} | {:.3} | {:.3} | {:.3} |",
            s.queue,
            s.latency_ms,
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
        .filter(|s| s.latency_ms > 0 && s.queue == "standard")
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
        "\nCost per million messages (standard queue, +{} ms each way), by service:\n",
        o.latency_ms
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
    md
}
