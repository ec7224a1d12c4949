//! The targets, each computed from the figures of the run and marked met or missed.

use std::fmt::Write as _;

use crate::render::{DUPLICATES, Report, cost, grouped, ratio};
use crate::{Scenario, Side, SideResult, longest_group_mean, workload};

fn mark(met: bool) -> &'static str {
    if met { "met" } else { "missed" }
}

/// The largest of `f` over the scenarios on `endpoint` where `side` ran (NaN without any).
fn worst(
    report: &Report,
    endpoint: &str,
    side: Side,
    f: &dyn Fn(&Scenario, &SideResult) -> f64,
) -> f64 {
    report
        .scenarios
        .iter()
        .filter(|s| s.endpoint == endpoint)
        .filter_map(|s| s.side(side).map(|r| f(s, r)))
        .fold(f64::NAN, f64::max)
}

/// Writes the targets' table.
pub fn targets(md: &mut String, report: &Report) {
    let (scenarios, publishers) = (&report.scenarios, &report.publisher);
    let (latency_ms, floor_cpu_us) = (report.latency_ms, report.sdk_cpu_us_per_request);
    let chain = longest_group_mean(&workload(report.records, DUPLICATES, true, 10, 7));
    let _ = writeln!(
        md,
        "\nThe SDK's own CPU per request (sequential `PutItem`, an endpoint that answers at once): {floor_cpu_us:.0} µs; a fresh record takes 3 requests in the lease mode, 1 in the transactional mode.\n"
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
        let Some(s) = report.find(endpoint, "standard", latency_ms) else {
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
        if let Some(f) = report.find(endpoint, "fifo", latency_ms) {
            let ratio = f.rust.median_ms() / s.rust.median_ms();
            let _ = writeln!(
                md,
                "| FIFO (10 groups) about the same as standard, +{} ms, on {on} | {ratio:.2}x standard (a batch's largest group: {chain:.2} records in a row) | {} |",
                latency_ms,
                mark((0.8..=1.25).contains(&ratio))
            );
        }
    }
    let fresh = worst(report, "moto", Side::Lease, &|_, r| {
        r.store_requests_per_fresh_record
    });
    let duplicate = worst(report, "moto", Side::Lease, &|_, r| {
        r.store_requests_per_duplicate_record
    });
    let _ = writeln!(
        md,
        "| store requests: 2 per fresh record, 1 per duplicate | {fresh:.2}, {duplicate:.2} | {} |",
        mark(fresh <= 2.0 && duplicate <= 1.0)
    );
    transactional(md, report);
    inline(md, report);
    let cold = worst(report, "moto", Side::Lease, &|_, r| r.cold_start_ms);
    let init = worst(report, "moto", Side::Lease, &|_, r| r.init_ms);
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

/// The inline mode against the floor, in every scenario where both ran: within 1.1x in requests
/// and write units per record and in cost per million messages, within 1.25x in CPU per record
/// and batch time (the worst scenario counts).
fn inline(md: &mut String, report: &Report) {
    let pairs: Vec<(&Scenario, &SideResult, &SideResult)> = report
        .scenarios
        .iter()
        .filter_map(|s| Some((s, s.side(Side::Inline)?, s.side(Side::Floor)?)))
        .collect();
    if pairs.is_empty() {
        return;
    }
    let worst = |f: &dyn Fn(&Scenario, &SideResult) -> f64| {
        pairs
            .iter()
            .map(|(s, i, f0)| ratio(f(s, i), f(s, f0)))
            .fold(f64::NAN, f64::max)
    };
    let requests = worst(&|_, r| crate::render::requests_per_record(r));
    let units = worst(&|_, r| r.wcu_per_record(DUPLICATES));
    let dollars = worst(&|s, r| cost(s, r).0);
    let cpu = worst(&|_, r| r.cpu_us_per_record);
    let batch = worst(&|_, r| r.median_ms());
    for (what, x, bound) in [
        ("requests per record", requests, 1.1),
        ("write units per record", units, 1.1),
        ("cost per million messages", dollars, 1.1),
        ("CPU per record", cpu, 1.25),
        ("batch time (median)", batch, 1.25),
    ] {
        let _ = writeln!(
            md,
            "| inline: {what} within {bound}x of the floor's (no idempotency), every scenario | {x:.2}x at worst | {} |",
            mark(x <= bound)
        );
    }
}

/// The transactional mode's targets: requests, batch time, instructions, cost.
fn transactional(md: &mut String, report: &Report) {
    const EPSILON: f64 = 1e-9;
    let (t, cached) = (Side::Transactional, Side::TransactionalCache);
    // Requests, on moto, where a duplicate finds its record.
    let fresh = worst(report, "moto", t, &|_, r| r.requests_per_fresh_record);
    let duplicate = worst(report, "moto", t, &|_, r| r.requests_per_duplicate_record);
    if fresh.is_finite() {
        let _ = writeln!(
            md,
            "| transactional: 1 request per fresh record (the handler's write included), 1 per duplicate, on moto | {fresh:.2}, {duplicate:.2} | {} |",
            mark(fresh <= 1.0 + EPSILON && duplicate <= 1.0 + EPSILON)
        );
    }
    let hit = worst(report, "moto", cached, &|_, r| {
        r.requests_per_duplicate_record
    });
    if hit.is_finite() {
        let hits: u64 = report
            .scenarios
            .iter()
            .filter(|s| s.endpoint == "moto")
            .filter_map(|s| s.side(cached))
            .map(|r| r.cache_hits)
            .sum();
        let _ = writeln!(
            md,
            "| transactional + cache: 0 requests for a duplicate the process has seen, on moto | {hit:.2} ({hits} cache hits in all) | {} |",
            mark(hit <= EPSILON)
        );
    }
    // A standard batch over a network, against one round trip.
    let latency_ms = report.latency_ms;
    if let Some((s, r)) = report
        .find("instant", "standard", latency_ms)
        .and_then(|s| s.side(t).map(|r| (s, r)))
    {
        let x = r.median_ms() / s.round_trip_ms;
        let _ = writeln!(
            md,
            "| transactional: standard batch at +{latency_ms} ms within 1.3x of 1 round trip ({:.1} ms on the instant endpoint) | {:.1} ms, {x:.2}x | {} |",
            s.round_trip_ms,
            r.median_ms(),
            mark(x <= 1.3)
        );
    }
    // Instructions, with the CPU time beside.
    if let Some(counts) = &report.instructions {
        let scenario = report.find("instant", "standard", 0);
        let cpu = |side: Side| {
            scenario
                .and_then(|s| s.side(side))
                .map(|r| r.cpu_us_per_record)
        };
        // The Redis side has no target of its own here: its instructions are in the table above.
        for side in Side::RUST.into_iter().filter(|side| {
            matches!(
                side,
                Side::Lease | Side::Transactional | Side::TransactionalCache
            )
        }) {
            let (Some(mine), Some(theirs)) =
                (counts.per_record(side), counts.per_record(Side::Powertools))
            else {
                continue;
            };
            let x = ratio(mine, theirs);
            let beside = match (cpu(side), cpu(Side::Powertools)) {
                (Some(a), Some(b)) => format!(
                    "; CPU {a:.0} µs against {b:.0} µs per record, 1/{:.1}",
                    1.0 / ratio(a, b)
                ),
                _ => String::new(),
            };
            let mode = match side {
                Side::Lease => "lease mode",
                Side::Transactional => "transactional",
                _ => "transactional + cache",
            };
            let _ = writeln!(
                md,
                "| {mode}: instructions per record at most 1/20 of Powertools' (callgrind, standard +0 ms, instant endpoint) | 1/{:.1} ({} against {}){beside} | {} |",
                1.0 / x,
                grouped(mine),
                grouped(theirs),
                mark(x <= 0.05)
            );
        }
    }
    // Cost, where it is broken down.
    if let Some(s) = report.cost_scenario() {
        let lease = cost(s, &s.rust).0;
        for side in [t, cached] {
            let Some(r) = s.side(side) else {
                continue;
            };
            let mine = cost(s, r).0;
            let change = (mine - lease) / lease * 100.0;
            let how = if change <= 0.0 {
                format!("{:.0} % less", -change)
            } else {
                format!("{change:.0} % more")
            };
            let _ = writeln!(
                md,
                "| {}: cost per million messages below the lease mode's (standard, moto, +{latency_ms} ms) | ${mine:.2} against ${lease:.2}, {how} ({:.2} WCU per record against {:.2}) | {} |",
                if side == t {
                    "transactional"
                } else {
                    "transactional + cache"
                },
                r.wcu_per_record(DUPLICATES),
                s.rust.wcu_per_record(DUPLICATES),
                mark(mine < lease)
            );
        }
    }
}
