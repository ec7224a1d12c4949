//! The metrics the functions emit: their EMF lines, built by the code each handler prints them
//! with, read as CloudWatch reads them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

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

/// The EMF line of each way a function emits metrics, built by the code its handler prints it
/// with: payments-api's (and payments-reader's) for every outcome, payment-processor's,
/// receipt-sender's and payments-publisher's for a batch, the reconciler's for a run.
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
