//! One whole run, and its report.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use lambda_idempotency::metrics::BatchCounts;
use lambda_idempotency::time::Clock;
use local_aws::runner::Stats;

use crate::checks::{Check, checks};
use crate::invariants::Scope;
use crate::pipeline::{Functions, Options, Pipeline};
use crate::processes::Observed;
use crate::workload::{Fault, Tally, Workload, declaring_faults, failure_switch};

/// Failed attempts before a flaky payment succeeds (below the template's MaxAttempts of 5).
pub const FLAKY_ATTEMPTS: u32 = 2;

/// What a run did and found.
#[derive(Debug)]
pub struct Report {
    /// Client side.
    pub tally: Tally,
    /// Batch counts by function.
    pub counts: BTreeMap<String, BatchCounts>,
    /// Event source statistics by function.
    pub stats: BTreeMap<String, Stats>,
    /// The checks.
    pub checks: Vec<Check>,
    /// Payments a producer sent to the queue a second time.
    pub resent: usize,
    /// `PaymentCharged` events payment-processor sent again for duplicates (the event is sent
    /// at least once; receipt-sender deduplicates).
    pub receipts_resent: u64,
    /// Duplicates payment-processor answered from its warm-container cache, without a request.
    pub cache_hits: u64,
    /// Time to send every payment.
    pub send_time: Duration,
    /// Time from the last answer until the pipeline drained.
    pub drain_time: Duration,
    /// The outbox relay's lag (write to send), median and max in ms, over the charged payments.
    pub relay_lag_ms: Option<(i64, i64)>,
    /// The functions' processes, when they ran as processes: their starts and why any was
    /// replaced (`None`: they ran in the demo's process).
    pub processes: Option<Observed>,
}

impl Report {
    /// True when every check passed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.passed)
    }
}

/// Runs `workload` through a fresh pipeline whose functions run as `functions` says, and checks
/// the outcome. `say` gets progress lines.
pub async fn run(
    workload: &Workload,
    functions: Functions,
    drain_timeout: Duration,
    say: impl Fn(&str) + Sync,
) -> Result<Report, Box<dyn std::error::Error + Send + Sync>> {
    say(match functions {
        Functions::InProcess => {
            "provisioning queues and tables from template.yaml, starting the functions in this process"
        }
        Functions::Processes(_) => {
            "provisioning queues and tables from template.yaml, starting each function as its own process under a Lambda Runtime API"
        }
    });
    let pipeline = Pipeline::start(Options {
        fail_payments: failure_switch(FLAKY_ATTEMPTS),
        functions,
        ..Options::default()
    })
    .await?;
    say(&format!("payments-api listening on {}", pipeline.api_url()));
    let client = pipeline.http();
    let started = Instant::now();
    let step = (workload.payments / 10).max(1);
    let tally = workload
        .run(&client, |done, total| {
            if done % step == 0 || done == total {
                say(&format!("sent {done}/{total} payments"));
            }
        })
        .await;
    let send_time = started.elapsed();
    let mut rng = fastrand::Rng::with_seed(workload.seed);
    let resend: Vec<_> = tally
        .accepted
        .iter()
        .filter(|a| !a.planned.fault.is_fatal() && rng.u32(0..100) < workload.resend_percent)
        .collect();
    let resent = pipeline.resend(&resend, drain_timeout).await?;
    say(&format!(
        "a producer sent {resent} accepted payments to the queue again"
    ));
    let innocent: Vec<_> = tally
        .accepted
        .iter()
        .filter(|a| a.planned.fault == Fault::None)
        .collect();
    let (outside, messages) = crate::outside::messages(&innocent, 3)?;
    let sent_outside = crate::outside::send(&pipeline.payments_publisher(), messages).await?;
    say(&format!(
        "a producer outside the pipeline sent {sent_outside} messages of its own to payments.fifo: \
         {} re-serialized, {} of the next version, {} tampered, {} renumbered, 1 never accepted",
        outside.reserialized.len(),
        outside.next_version.len(),
        usize::from(outside.tampered.is_some()),
        usize::from(outside.renumbered.is_some())
    ));
    let drained_at = Instant::now();
    let drained = pipeline
        .drain(drain_timeout, |left| {
            if left > 0 {
                say(&format!("draining: {left} messages in flight"));
            }
        })
        .await;
    let drain_time = drained_at.elapsed();
    say("payments-reconciler: one pass over what is left accepted, and the audit of every charge");
    let reconciled = reconcile_now(&pipeline).await;
    say(
        "the invariants: every payment settled, each charge's ledger entry and receipt, each balance, \
         no payment failed but those the failure switch failed",
    );
    let scope = declaring_faults(
        Scope::pipeline(),
        tally
            .accepted
            .iter()
            .map(|a| (a.payment_id.as_str(), a.planned.fault)),
    );
    let invariants = pipeline
        .check_invariants(&scope, &[], crate::pipeline::SETTLE_TIMEOUT)
        .await;
    let stored = match &invariants {
        Ok(checked) => {
            let mut stored = crate::checks::Stored::of(&checked.snapshot);
            pipeline
                .count_dead_letters(&mut stored)
                .await
                .map(|()| stored)
        }
        Err(_) => pipeline.stored().await,
    };
    let counts = pipeline.counts();
    let receipts_resent = pipeline.receipts_resent();
    let cache_hits = pipeline.cache_hits();
    let processes = pipeline.observed();
    let stats = pipeline.stop_unchecked().await;
    let mut stored = stored?;
    let relay_lag_ms = crate::checks::relay_lag(&stored);
    let outside_checks = outside.checks(&mut stored);
    let mut checks = checks(&tally, &stored);
    checks.extend(outside_checks);
    checks.extend(reconciler_checks(&reconciled, &stored));
    checks.push(invariants_check(&invariants));
    let duplicates = counts.get("payment-processor").map_or(0, |c| c.duplicates) as usize;
    checks.push(Check {
        name: "every resent payment skipped as a duplicate",
        passed: duplicates >= resent,
        detail: format!("{resent} resent, {duplicates} skipped by payment-processor"),
    });
    checks.insert(
        0,
        Check {
            name: "the pipeline drained",
            passed: drained.is_ok(),
            detail: match &drained {
                Ok(()) => format!("in {:.1} s", drain_time.as_secs_f64()),
                Err(e) => e.to_string(),
            },
        },
    );
    Ok(Report {
        tally,
        counts,
        stats,
        checks,
        resent,
        receipts_resent,
        cache_hits,
        send_time,
        drain_time,
        relay_lag_ms,
        processes,
    })
}

/// The invariant checker's verdict, as one check.
fn invariants_check(
    invariants: &Result<crate::invariants::Checked, Box<dyn std::error::Error + Send + Sync>>,
) -> Check {
    let (passed, detail) = match invariants {
        Ok(checked) => (
            checked.passed(),
            checked.to_string().trim_end().replace('\n', "; "),
        ),
        Err(e) => (false, e.to_string()),
    };
    Check {
        name: "the invariants hold: each payment charged (one ledger entry, one receipt, its amount), or failed as the failure switch made it fail, each balance its ledger's sum, no receipt or entry without its charge",
        passed,
        detail,
    }
}

/// One reconciler pass with no thresholds: everything still accepted is sent again, every charge
/// is audited.
async fn reconcile_now(
    pipeline: &Pipeline,
) -> Result<payments_operations::reconcile::Report, Box<dyn std::error::Error + Send + Sync>> {
    let reconciler =
        pipeline.reconciler(&[("RESEND_AFTER_SECONDS", "0"), ("AUDIT_LAG_SECONDS", "0")])?;
    Ok(reconciler
        .run(lambda_idempotency::time::SystemClock.now_ms() + 1)
        .await?)
}

/// After the drain nothing is left accepted, and the audit finds each charge's one ledger entry
/// and every balance equal to its charges.
fn reconciler_checks(
    reconciled: &Result<
        payments_operations::reconcile::Report,
        Box<dyn std::error::Error + Send + Sync>,
    >,
    stored: &crate::checks::Stored,
) -> Vec<Check> {
    let report = match reconciled {
        Ok(report) => report,
        Err(e) => {
            return vec![Check {
                name: "payments-reconciler ran",
                passed: false,
                detail: e.to_string(),
            }];
        }
    };
    let charged = stored
        .payment_status
        .values()
        .filter(|v| *v == "charged")
        .count();
    let w = &report.waiting;
    vec![
        Check {
            name: "payments-reconciler finds no payment left accepted",
            passed: w.resent.is_empty() && w.marked_failed.is_empty() && w.stuck.is_empty(),
            detail: format!(
                "{} sent again, {} marked failed, {} stuck",
                w.resent.len(),
                w.marked_failed.len(),
                w.stuck.len()
            ),
        },
        Check {
            name: "the audit: each charge has one ledger entry, each balance is its charges' sum",
            passed: report.audit.mismatches.is_empty() && report.audit.audited as usize == charged,
            detail: format!(
                "{} of {charged} charges audited, {} mismatches{}",
                report.audit.audited,
                report.audit.mismatches.len(),
                report
                    .audit
                    .mismatches
                    .first()
                    .map(|m| format!(" (first: {m})"))
                    .unwrap_or_default()
            ),
        },
    ]
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = &self.tally;
        let first_201 = t.count(201) - t.replayed;
        let count = |fault: Fault| {
            t.accepted
                .iter()
                .filter(|a| a.planned.fault == fault)
                .count()
        };
        let (poison, permanent) = (count(Fault::Poison), count(Fault::Permanent));
        writeln!(f, "\n== client (payments-api over HTTP) ==")?;
        writeln!(
            f,
            "  requests               {:>6}   in {:.1} s",
            t.requests,
            self.send_time.as_secs_f64()
        )?;
        writeln!(
            f,
            "  accepted (201)         {:>6}   distinct payments: {}",
            first_201,
            t.accepted.len()
        )?;
        writeln!(f, "  replayed (201, replay) {:>6}", t.replayed)?;
        writeln!(f, "  in progress (409)      {:>6}", t.count(409))?;
        writeln!(f, "  key reused (422)       {:>6}", t.count(422))?;
        writeln!(f, "  invalid (400)          {:>6}", t.count(400))?;
        writeln!(f, "  unavailable (503)      {:>6}", t.count(503))?;
        writeln!(
            f,
            "  other 4xx (401/403/404/405/413/415) {:>3}",
            [401, 403, 404, 405, 413, 415]
                .iter()
                .map(|s| t.count(*s))
                .sum::<usize>()
        )?;
        writeln!(
            f,
            "  injected: {} flaky payments (fail {FLAKY_ATTEMPTS} attempts), {poison} poison payments, {permanent} failing permanently, each with payments of its account behind it",
            count(Fault::Flaky)
        )?;
        writeln!(
            f,
            "  resent by a producer (same payment, new message): {}",
            self.resent
        )?;
        writeln!(
            f,
            "  duplicates payment-processor answered from its warm-container cache (no request): {}",
            self.cache_hits
        )?;
        writeln!(
            f,
            "  PaymentCharged sent again for a duplicate (at least once; receipt-sender deduplicates): {}",
            self.receipts_resent
        )?;
        match self.relay_lag_ms {
            Some((median, max)) => writeln!(
                f,
                "  outbox relay lag (payment written -> sent to payments.fifo): median {median} ms, max {max} ms"
            )?,
            None => writeln!(f, "  outbox relay lag: no payment was charged")?,
        }
        writeln!(f, "\n== functions ==")?;
        match &self.processes {
            Some(_) => writeln!(
                f,
                "  each its own process (its binary from the workspace build, its own main) under \
                 the Lambda Runtime API of `cargo lambda watch --only-lambda-apis`; counts from \
                 the metrics each printed"
            )?,
            None => writeln!(
                f,
                "  in the demo's process (their handlers called directly)"
            )?,
        }
        if let Some(p) = &self.processes {
            let starts: Vec<String> = p
                .starts
                .iter()
                .map(|(function, n)| format!("{function} {n}"))
                .collect();
            writeln!(f, "  processes started: {}", starts.join(", "))?;
        }
        writeln!(
            f,
            "  {:<18} {:>8} {:>9} {:>10} {:>11} {:>8} {:>7} {:>9} {:>9}",
            "function",
            "batches",
            "received",
            "processed",
            "duplicates",
            "retries",
            "errors",
            "timeouts",
            "replaced"
        )?;
        for (name, s) in &self.stats {
            let c = self.counts.get(name).copied().unwrap_or_default();
            let replaced = self.processes.as_ref().map_or_else(
                || "-".to_owned(),
                |p| p.replaced.get(name).map_or(0, Vec::len).to_string(),
            );
            writeln!(
                f,
                "  {:<18} {:>8} {:>9} {:>10} {:>11} {:>8} {:>7} {:>9} {:>9}",
                name,
                s.batches,
                s.records_received,
                c.processed,
                c.duplicates,
                s.records_reported_failed,
                s.invocation_errors + s.invalid_responses,
                s.timeouts,
                replaced
            )?;
        }
        for (name, reasons) in self.processes.iter().flat_map(|p| &p.replaced) {
            for reason in reasons {
                writeln!(f, "  {name} replaced: {reason}")?;
            }
        }
        writeln!(
            f,
            "  dead-lettered payments: {} expected; see the checks",
            poison + permanent
        )?;
        writeln!(f, "\n== checks (from the stored data) ==")?;
        for c in &self.checks {
            writeln!(
                f,
                "  [{}] {}: {}",
                if c.passed { "ok" } else { "FAIL" },
                c.name,
                c.detail
            )?;
        }
        writeln!(
            f,
            "\n{}",
            if self.passed() {
                "ALL CHECKS PASSED"
            } else {
                "SOME CHECKS FAILED"
            }
        )
    }
}
