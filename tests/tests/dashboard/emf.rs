//! The metrics the functions emit: their EMF lines, built by the code each handler prints them
//! with, read as CloudWatch reads them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

use lambda_idempotency::metrics::{BatchCounts, Metrics};
use serde_json::Value as Json;

/// A metric as CloudWatch keys it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Metric {
    pub namespace: String,
    pub name: String,
    pub dimensions: BTreeMap<String, String>,
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dimensions: Vec<String> = self
            .dimensions
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        write!(
            f,
            "{} {} {{{}}}",
            self.namespace,
            self.name,
            dimensions.join(", ")
        )
    }
}

/// Where the functions print their EMF lines (file, and the statement, trimmed): each prints
/// the line [`emitted_lines`] builds with the same code.
pub const EMITTERS: &[(&str, &str)] = &[
    (
        "functions/payments-api/src/lib.rs",
        "outcome.metrics().emit();",
    ),
    (
        "functions/payment-processor/src/lib.rs",
        "handled.metrics().emit();",
    ),
    (
        "functions/receipt-sender/src/lib.rs",
        "metrics(&counts).emit();",
    ),
    (
        "functions/payments-publisher/src/lib.rs",
        "relayed.metrics().emit();",
    ),
    (
        "functions/payments-operations/src/reconcile/mod.rs",
        "report.metrics().emit();",
    ),
];

/// Each statement of the functions' sources that prints an EMF line (`.emit()`), as
/// [`EMITTERS`] lists them.
pub fn emit_calls() -> Vec<(String, String)> {
    fn walk(dir: &Path, root: &Path, found: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, root, found);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let file = path.strip_prefix(root).unwrap().display().to_string();
                for line in std::fs::read_to_string(&path).unwrap().lines() {
                    let code = line.trim();
                    if code.contains(".emit()") && !code.starts_with("//") {
                        found.push((file.clone(), code.to_owned()));
                    }
                }
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    walk(&root.join("functions"), &root, &mut found);
    found.sort();
    found
}

/// The EMF line of each way a function emits metrics ([`EMITTERS`]), built by the code its
/// handler prints it with: payments-api's (and payments-reader's) for every outcome,
/// payment-processor's, receipt-sender's and payments-publisher's for a batch, the
/// reconciler's for a run.
pub fn emitted_lines() -> Vec<String> {
    let mut lines: Vec<Metrics> = payments_api::Outcome::ALL
        .into_iter()
        .map(payments_api::Outcome::metrics)
        .collect();
    let handled = payment_processor::Handled {
        response: Default::default(),
        counts: BatchCounts::default(),
        cache_hits: 0,
        receipts_resent: 0,
        failed_ahead: 0,
    };
    lines.push(handled.metrics());
    lines.push(receipt_sender::metrics(&BatchCounts::default()));
    lines.push(payments_publisher::Relayed::default().metrics());
    lines.push(payments_operations::reconcile::Report::default().metrics());
    lines.iter().map(|m| m.to_json(1_700_000_000_000)).collect()
}

/// The metrics an EMF line makes: each metric of each directive, under each of its dimension
/// sets, with the dimensions' values from the line.
pub fn emf_metrics(line: &str) -> Result<Vec<Metric>, String> {
    let root: Json = serde_json::from_str(line).map_err(|e| format!("{line}: {e}"))?;
    let bad = |what: &str| format!("{line}: {what}");
    let directives = root["_aws"]["CloudWatchMetrics"]
        .as_array()
        .ok_or_else(|| bad("no _aws.CloudWatchMetrics"))?;
    let mut metrics = Vec::new();
    for directive in directives {
        let namespace = directive["Namespace"]
            .as_str()
            .ok_or_else(|| bad("a directive without Namespace"))?;
        let sets = directive["Dimensions"]
            .as_array()
            .ok_or_else(|| bad("a directive without Dimensions"))?;
        for set in sets {
            let mut dimensions = BTreeMap::new();
            for name in set.as_array().ok_or_else(|| bad("a dimension set"))? {
                let name = name.as_str().ok_or_else(|| bad("a dimension name"))?;
                let value = root[name]
                    .as_str()
                    .ok_or_else(|| bad(&format!("dimension {name} has no text value")))?;
                dimensions.insert(name.to_owned(), value.to_owned());
            }
            for m in directive["Metrics"]
                .as_array()
                .ok_or_else(|| bad("a directive without Metrics"))?
            {
                let name = m["Name"].as_str().ok_or_else(|| bad("a metric's Name"))?;
                if !root[name].is_number() {
                    return Err(bad(&format!("metric {name} has no number")));
                }
                metrics.push(Metric {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                    dimensions: dimensions.clone(),
                });
            }
        }
    }
    Ok(metrics)
}

pub fn emitted() -> BTreeSet<Metric> {
    let lines = emitted_lines();
    lines
        .iter()
        .flat_map(|line| emf_metrics(line).unwrap())
        .collect()
}
