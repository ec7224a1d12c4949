//! The report of a run: `benchmarks.json`, the figures in Markdown (embedded into
//! `benchmarks.md` between its markers), and the charts.

use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::callgrind::Instructions;
use crate::sides::BoxError;
use crate::streams::{STREAM_FIGURES_END, STREAM_FIGURES_START, StreamReport};
use crate::{PublisherResult, Scenario, Side, SideResult, cost_per_million};

/// The share of the workload's records that are redeliveries.
pub const DUPLICATES: f64 = 0.2;

/// The Lambda function's memory, for its cost (the template's).
pub const MEMORY_MB: f64 = 128.0;

/// Everything a run measured: `benchmarks.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// Cores, CPU and memory.
    pub machine: String,
    /// Records of each workload.
    pub records: usize,
    /// The latency added each way in the scenarios through the proxy, ms.
    pub latency_ms: u64,
    /// The SDK's own CPU time per `PutItem`, against an endpoint that answers at once.
    pub sdk_cpu_us_per_request: f64,
    /// Every scenario, each with every side.
    pub scenarios: Vec<Scenario>,
    /// The publisher's throughput.
    pub publisher: Vec<PublisherResult>,
    /// Instructions per record, by callgrind (absent when skipped, and from older runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<Instructions>,
    /// The stream scenarios (absent when not measured; a run of them alone keeps the SQS
    /// figures of the last full run, and a run of SQS alone the stream figures).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streams: Option<StreamReport>,
}

impl Report {
    /// The scenario on `endpoint` with `queue` at `latency` ms, if measured.
    pub fn find(&self, endpoint: &str, queue: &str, latency: u64) -> Option<&Scenario> {
        self.scenarios
            .iter()
            .find(|s| s.endpoint == endpoint && s.queue == queue && s.latency_ms == latency)
    }

    /// The scenario whose costs are broken down: standard queue, moto, with latency.
    pub fn cost_scenario(&self) -> Option<&Scenario> {
        self.scenarios
            .iter()
            .find(|s| s.endpoint == "moto" && s.latency_ms > 0 && s.queue == "standard")
    }
}

/// `n`, rounded, with a comma every three digits: `12,708,393`.
pub fn grouped(n: f64) -> String {
    let digits = format!("{:.0}", n.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0.0 && digits != "0" {
        out.insert(0, '-');
    }
    out
}

/// `a / b`, or NaN without `b`.
pub fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { f64::NAN }
}

/// Dollars per million messages of `side` in `scenario`, and by service.
pub fn cost(scenario: &Scenario, side: &SideResult) -> (f64, [f64; 3]) {
    cost_per_million(side, MEMORY_MB, DUPLICATES, scenario.queue == "fifo")
}

/// Whether DynamoDB's pricing applies to `side`'s store: not to Redis, whose server is paid by
/// the hour and not by the request.
pub fn priced(side: &SideResult) -> bool {
    side.store != "redis"
}

/// What the tables show for a DynamoDB figure of a side over Redis.
pub const NOT_APPLICABLE: &str = "n/a¹";

/// The footnote of [`NOT_APPLICABLE`].
pub const REDIS_FOOTNOTE: &str = "¹ Redis side: its store's requests are round trips to Redis (`acquire`, `complete`, ...; the handler's own `PutItem` still goes to DynamoDB). DynamoDB's write units and its price per request do not apply to a Redis server, paid by the hour for its instance whatever the requests, so neither WCU nor a cost per million messages is shown.";

/// Writes `benchmarks.json`, `benchmarks-figures.md` and the charts into `out`, and the figures
/// into `out/benchmarks.md` between its markers (the stream figures between theirs).
pub fn write_report(out: &Path, report: &Report) -> Result<(), BoxError> {
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
    let series = |f: &dyn Fn(&SideResult) -> f64| -> Vec<(&str, Vec<f64>)> {
        Side::ALL
            .into_iter()
            .filter(|side| scenarios.iter().any(|s| s.side(*side).is_some()))
            .map(|side| {
                let values = scenarios
                    .iter()
                    .map(|s| s.side(side).map_or(0.0, f))
                    .collect();
                (side.label(), values)
            })
            .collect()
    };
    std::fs::write(
        out.join("benchmarks-batch-latency.svg"),
        bar_chart(
            "Wall time per batch of 10 (median)",
            "ms",
            &labels,
            &series(&|s| s.median_ms()),
        ),
    )?;
    std::fs::write(
        out.join("benchmarks-cpu.svg"),
        bar_chart(
            "CPU time per record (user + sys)",
            "µs",
            &labels,
            &series(&|s| s.cpu_us_per_record),
        ),
    )?;
    let figures = render(report);
    std::fs::write(out.join("benchmarks-figures.md"), &figures)?;
    embed(&out.join("benchmarks.md"), &figures)?;
    println!("{figures}");
    if let Some(streams) = &report.streams {
        let figures = crate::streams::render(streams);
        embed_between(
            &out.join("benchmarks.md"),
            STREAM_FIGURES_START,
            STREAM_FIGURES_END,
            &figures,
        )?;
        println!("{figures}");
    }
    Ok(())
}

/// Where a document shows the figures of the last run.
pub const FIGURES_START: &str = "<!-- figures: start -->";
/// Where they end.
pub const FIGURES_END: &str = "<!-- figures: end -->";

/// Puts `figures` between the figures' markers of the document at `path`, when it has them.
pub fn embed(path: &Path, figures: &str) -> Result<(), BoxError> {
    embed_between(path, FIGURES_START, FIGURES_END, figures)
}

/// Puts `text` between the markers `start_marker` and `end_marker` of the document at `path`,
/// when it has them.
pub fn embed_between(
    path: &Path,
    start_marker: &str,
    end_marker: &str,
    text: &str,
) -> Result<(), BoxError> {
    let Ok(doc) = std::fs::read_to_string(path) else {
        return Ok(());
    };
    let (Some(start), Some(end)) = (doc.find(start_marker), doc.find(end_marker)) else {
        return Ok(());
    };
    if end < start {
        return Err(format!(
            "{}: the end marker `{end_marker}` comes first",
            path.display()
        )
        .into());
    }
    let updated = format!("{}{start_marker}\n{text}{}", &doc[..start], &doc[end..]);
    std::fs::write(path, updated)?;
    Ok(())
}

/// The figures, in Markdown.
pub fn render(report: &Report) -> String {
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
        "| scenario | side | batch median ms | batch p99 ms | CPU µs/record | requests/fresh (store's) | requests/duplicate (store's) | WCU/record | peak MB | cold start ms (init) | $ per million |"
    );
    let _ = writeln!(
        md,
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for s in scenarios {
        for (side, r) in s.sides() {
            let _ = writeln!(
                md,
                "| {} | {} | {:.2} | {:.2} | {:.0} | {:.2} ({:.2}) | {:.2} ({:.2}) | {} | {:.1} | {:.0} ({:.0}) | {} |",
                s.label(),
                side.label(),
                r.median_ms(),
                r.p99_ms(),
                r.cpu_us_per_record,
                r.requests_per_fresh_record,
                r.store_requests_per_fresh_record,
                r.requests_per_duplicate_record,
                r.store_requests_per_duplicate_record,
                if priced(r) {
                    format!("{:.2}", r.wcu_per_record(DUPLICATES))
                } else {
                    NOT_APPLICABLE.into()
                },
                r.peak_rss_mb,
                r.cold_start_ms,
                r.init_ms,
                if priced(r) {
                    format!("{:.2}", cost(s, r).0)
                } else {
                    NOT_APPLICABLE.into()
                }
            );
        }
    }
    let redis_ran = scenarios.iter().any(|s| s.sides().any(|(_, r)| !priced(r)));
    if redis_ran {
        let _ = writeln!(md, "\n{REDIS_FOOTNOTE}");
        redis_operations(&mut md, report);
    }
    let _ = writeln!(md, "\nRatios to Powertools, in the same run:\n");
    let _ = writeln!(
        md,
        "| scenario | side | batch median | CPU per record | peak memory | cold start |"
    );
    let _ = writeln!(md, "| --- | --- | ---: | ---: | ---: | ---: |");
    for s in scenarios {
        let Some(p) = s.side(Side::Powertools) else {
            continue;
        };
        for (side, r) in s.sides().filter(|(side, _)| *side != Side::Powertools) {
            let _ = writeln!(
                md,
                "| {} | {} | {:.3} | {:.3} | {:.3} | {:.3} |",
                s.label(),
                side.label(),
                ratio(r.median_ms(), p.median_ms()),
                ratio(r.cpu_us_per_record, p.cpu_us_per_record),
                ratio(r.peak_rss_mb, p.peak_rss_mb),
                ratio(r.cold_start_ms, p.cold_start_ms)
            );
        }
    }
    floor_ratios(&mut md, report);
    instructions(&mut md, report);
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
    if let Some(s) = report.cost_scenario() {
        let _ = writeln!(
            md,
            "\nCost per million messages (standard queue, moto, +{} ms each way), by service:\n",
            report.latency_ms
        );
        let _ = writeln!(
            md,
            "| side | Lambda | DynamoDB | SQS | total | exactly once costs (over the floor) |"
        );
        let _ = writeln!(md, "| --- | ---: | ---: | ---: | ---: | ---: |");
        let floor = s.side(Side::Floor).map(|f| cost(s, f).0);
        for (side, r) in s.sides() {
            if !priced(r) {
                let _ = writeln!(
                    md,
                    "| {} | {n} | {n} | {n} | {n} | {n} |",
                    side.label(),
                    n = NOT_APPLICABLE
                );
                continue;
            }
            let (total, [l, d, q]) = cost(s, r);
            let over = match floor {
                Some(_) if side == Side::Floor => "-".to_owned(),
                Some(f) => format!("${:.2} ({:.2}x)", total - f, ratio(total, f)),
                None => NOT_APPLICABLE.into(),
            };
            let _ = writeln!(
                md,
                "| {} | ${l:.2} | ${d:.2} | ${q:.2} | ${total:.2} | {over} |",
                side.label()
            );
        }
    }
    crate::targets::targets(&mut md, report);
    md
}

/// The Redis side's round trips by operation (its `RequestCounter`), per record, in each
/// scenario.
fn redis_operations(md: &mut String, report: &Report) {
    let _ = writeln!(
        md,
        "\nThe Redis side's round trips by operation, per record (the backend's `RequestCounter`; scripts are loaded before the first event):\n"
    );
    let _ = writeln!(
        md,
        "| scenario | operations per record | round trips per record |"
    );
    let _ = writeln!(md, "| --- | --- | ---: |");
    for s in &report.scenarios {
        let Some(r) = s.side(Side::Redis) else {
            continue;
        };
        let records = r.records.max(1) as f64;
        let by_operation: Vec<String> = r
            .store_operations
            .iter()
            .map(|(operation, n)| format!("`{operation}` {:.2}", *n as f64 / records))
            .collect();
        let _ = writeln!(
            md,
            "| {} | {} | {:.2} |",
            s.label(),
            by_operation.join(", "),
            r.store_operations.values().sum::<u64>() as f64 / records
        );
    }
}

/// Requests per record, fresh and duplicate ones in the workload's proportion.
pub fn requests_per_record(r: &SideResult) -> f64 {
    r.requests_per_fresh_record * (1.0 - DUPLICATES) + r.requests_per_duplicate_record * DUPLICATES
}

/// Each side's ratios to the floor (the same handler without idempotency), in each scenario:
/// what exactly once costs.
fn floor_ratios(md: &mut String, report: &Report) {
    if !report
        .scenarios
        .iter()
        .any(|s| s.side(Side::Floor).is_some())
    {
        return;
    }
    let _ = writeln!(
        md,
        "\nRatios to the floor, the same handler with no idempotency (its `PutItem` for every delivery, duplicates included), in the same run:\n"
    );
    let _ = writeln!(
        md,
        "| scenario | side | batch median | CPU per record | requests per fresh record | requests per record | WCU per record | $ per million |"
    );
    let _ = writeln!(
        md,
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for s in &report.scenarios {
        let Some(f) = s.side(Side::Floor) else {
            continue;
        };
        for (side, r) in s.sides().filter(|(side, _)| *side != Side::Floor) {
            let priced_ratio = |a: f64, b: f64| {
                if priced(r) {
                    format!("{:.2}", ratio(a, b))
                } else {
                    NOT_APPLICABLE.into()
                }
            };
            let _ = writeln!(
                md,
                "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} |",
                s.label(),
                side.label(),
                ratio(r.median_ms(), f.median_ms()),
                ratio(r.cpu_us_per_record, f.cpu_us_per_record),
                ratio(r.requests_per_fresh_record, f.requests_per_fresh_record),
                ratio(requests_per_record(r), requests_per_record(f)),
                priced_ratio(r.wcu_per_record(DUPLICATES), f.wcu_per_record(DUPLICATES)),
                priced_ratio(cost(s, r).0, cost(s, f).0),
            );
        }
    }
}

/// The instructions per record, with the CPU time per record of the same scenario beside.
fn instructions(md: &mut String, report: &Report) {
    let Some(counts) = &report.instructions else {
        return;
    };
    let scenario = report.find("instant", "standard", 0);
    let cpu = |side: Side| {
        scenario
            .and_then(|s| s.side(side))
            .map(|r| r.cpu_us_per_record)
    };
    let [short, long] = counts.batches;
    let _ = writeln!(
        md,
        "\nInstructions per record (callgrind; standard queue, instant endpoint, +0 ms; the first {long} batches less the first {short}, {} records), and the CPU time per record of the same scenario (getrusage):\n",
        counts.records[1].saturating_sub(counts.records[0])
    );
    let _ = writeln!(
        md,
        "| side | instructions/record | / floor | / Powertools | CPU µs/record | / Powertools |"
    );
    let _ = writeln!(md, "| --- | ---: | ---: | ---: | ---: | ---: |");
    let powertools = counts.per_record(Side::Powertools);
    let floor = counts.per_record(Side::Floor);
    for side in Side::ALL {
        let Some(per_record) = counts.per_record(side) else {
            continue;
        };
        let show = |v: Option<f64>, decimals: usize| match v {
            Some(v) if v.is_finite() => format!("{v:.decimals$}"),
            _ => "-".into(),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} |",
            side.label(),
            grouped(per_record),
            show(floor.map(|f| ratio(per_record, f)), 2),
            show(powertools.map(|p| ratio(per_record, p)), 3),
            show(cpu(side), 0),
            show(
                cpu(side)
                    .zip(cpu(Side::Powertools))
                    .map(|(a, b)| ratio(a, b)),
                3
            ),
        );
    }
}

/// The colour of each series of a chart, in order.
const COLOURS: [&str; 6] = [
    "#868e96", "#d9480f", "#f59f00", "#2f9e44", "#ae3ec9", "#1c7ed6",
];

/// A grouped bar chart (SVG) of one figure per scenario: one bar per series (a name and a value
/// per label) in each group.
pub fn bar_chart(
    title: &str,
    unit: &str,
    labels: &[String],
    series: &[(&str, Vec<f64>)],
) -> String {
    let (h, left, bottom, top) = (380.0, 70.0, 80.0, 40.0);
    let bars = series.len().max(1) as f64;
    let w = ((40.0 + 28.0 * bars) * labels.len() as f64 + left + 20.0).max(760.0);
    let max = series
        .iter()
        .flat_map(|(_, values)| values.iter().copied())
        .fold(0.0_f64, f64::max)
        .max(1e-9)
        * 1.1;
    let plot_h = h - bottom - top;
    let group_w = (w - left - 20.0) / labels.len().max(1) as f64;
    let bar_w = group_w * 0.8 / bars;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/><text x="{}" y="22" text-anchor="middle" font-size="15">{title}</text>"#,
        w / 2.0
    );
    for i in 0..=4 {
        let v = max * i as f64 / 4.0;
        let y = h - bottom - plot_h * i as f64 / 4.0;
        let _ = write!(
            svg,
            r##"<line x1="{left}" y1="{y}" x2="{}" y2="{y}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{v:.1}</text>"##,
            w - 20.0,
            left - 6.0,
            y + 4.0
        );
    }
    let _ = write!(
        svg,
        r#"<text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">{unit}</text>"#,
        h / 2.0,
        h / 2.0
    );
    for (i, label) in labels.iter().enumerate() {
        let x0 = left + group_w * i as f64 + group_w * 0.1;
        for (j, (_, values)) in series.iter().enumerate() {
            let value = values.get(i).copied().unwrap_or(0.0);
            let bh = plot_h * value / max;
            let x = x0 + j as f64 * bar_w;
            let y = h - bottom - bh;
            let _ = write!(
                svg,
                r#"<rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{bh:.1}" fill="{}"/><text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="9">{value:.0}</text>"#,
                bar_w - 2.0,
                COLOURS[j % COLOURS.len()],
                x + bar_w / 2.0,
                y - 3.0
            );
        }
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{label}</text>"#,
            x0 + group_w * 0.4,
            h - bottom + 18.0
        );
    }
    // The legend, in one row; about 7 px per character.
    let mut x = left;
    for (j, (name, _)) in series.iter().enumerate() {
        let _ = write!(
            svg,
            r#"<rect x="{x}" y="{}" width="12" height="12" fill="{}"/><text x="{}" y="{}">{name}</text>"#,
            h - 34.0,
            COLOURS[j % COLOURS.len()],
            x + 18.0,
            h - 24.0
        );
        x += 18.0 + 7.0 * name.chars().count() as f64 + 24.0;
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_side_is_measured_against_the_floor() {
        let side = |batch_ms: f64, cpu: f64, fresh: f64| SideResult {
            batch_ms: vec![batch_ms; 10],
            records: 100,
            batches: 10,
            cpu_us_per_record: cpu,
            requests_per_fresh_record: fresh,
            requests_per_duplicate_record: 1.0,
            wcu_per_fresh_record: Some(fresh),
            wcu_per_duplicate_record: Some(1.0),
            ..SideResult::default()
        };
        let mut scenario = Scenario {
            endpoint: "moto".into(),
            queue: "standard".into(),
            ..Scenario::default()
        };
        scenario.set(Side::Floor, side(10.0, 100.0, 1.0));
        scenario.set(Side::Lease, side(25.0, 300.0, 3.0));
        let report = Report {
            machine: "test".into(),
            records: 100,
            latency_ms: 0,
            sdk_cpu_us_per_request: 0.0,
            scenarios: vec![scenario],
            publisher: Vec::new(),
            instructions: None,
            streams: None,
        };
        let mut md = String::new();
        floor_ratios(&mut md, &report);
        let row = md
            .lines()
            .find(|l| l.contains("| this project |"))
            .unwrap_or_else(|| panic!("no row for the lease mode:\n{md}"));
        // Batch time 2.5x, CPU 3x, 3 requests per fresh record against 1; with 20 % duplicates
        // (1 request each on both sides), 2.6 requests per record against 1.
        assert!(
            row.starts_with("| standard +0 ms | this project | 2.50 | 3.00 | 3.00 | 2.60 |"),
            "{row}"
        );
        assert!(
            !md.contains("| no idempotency (the floor) |"),
            "the floor against itself:\n{md}"
        );
        // Without a floor, no table.
        let mut without = report;
        without.scenarios[0].floor = None;
        let mut md = String::new();
        floor_ratios(&mut md, &without);
        assert!(md.is_empty(), "{md}");
    }

    #[test]
    fn large_numbers_are_grouped_by_thousands() {
        assert_eq!(grouped(12_708_393.4), "12,708,393");
        assert_eq!(grouped(999.0), "999");
        assert_eq!(grouped(1000.0), "1,000");
        assert_eq!(grouped(0.2), "0");
        assert_eq!(grouped(-45_000.0), "-45,000");
    }
}
