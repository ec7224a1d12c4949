//! CloudWatch [Embedded Metric Format](https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html)
//! lines: a JSON object printed to stdout, which Lambda's log pipeline turns into metrics with no
//! API call.
//!
//! ```
//! use lambda_idempotency::metrics::Metrics;
//!
//! let line = Metrics::new("Payments")
//!     .dimension("function", "payment-processor")
//!     .count("processed", 8)
//!     .count("duplicate", 2)
//!     .to_json(1_700_000_000_000);
//! let v: serde_json::Value = serde_json::from_str(&line).unwrap();
//! assert_eq!(v["processed"], 8);
//! assert_eq!(v["_aws"]["CloudWatchMetrics"][0]["Namespace"], "Payments");
//! ```

use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value, json};

use crate::batch::{BatchReport, Deduplicated, EventSource};
use crate::error::RecordError;
use crate::key::KeyError;
use crate::time::{Clock, SystemClock};

static ENABLED: AtomicBool = AtomicBool::new(true);

/// The dimension [`BatchCounts::metrics`] puts the function's name in.
pub const FUNCTION_DIMENSION: &str = "function";
/// [`BatchCounts::processed`]'s metric.
pub const PROCESSED: &str = "processed";
/// [`BatchCounts::duplicates`]'s metric.
pub const DUPLICATE: &str = "duplicate";
/// [`BatchCounts::failed`]'s metric.
pub const FAILED: &str = "failed";
/// [`BatchCounts::dead_lettered`]'s metric: records moved to the dead-letter queue, a failure
/// that needs a person (alarm on it).
pub const DEAD_LETTERED: &str = "dead_lettered";

/// The namespace of the metrics the library emits itself ([`KEY_MISSING`]).
pub const LIBRARY_NAMESPACE: &str = "LambdaIdempotency";

/// The metric of records whose key pointer (`IDEMPOTENCY_KEY`, [`KeyConfig::json_pointer`])
/// found nothing in their message, which a [`Consumer`](crate::consumer::Consumer) emits for
/// each batch that has one, in [`LIBRARY_NAMESPACE`] with the function's name in
/// [`FUNCTION_DIMENSION`]: an alarm on it (`> 0`) tells a typo in the pointer within minutes
/// (each such record is logged too, with the message's field names).
///
/// [`KeyConfig::json_pointer`]: crate::key::KeyConfig::json_pointer
pub const KEY_MISSING: &str = "KeyMissing";

/// The [`KEY_MISSING`] metric of a batch, `None` when every key was found.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use lambda_idempotency::batch::{BatchProcessor, message};
/// use lambda_idempotency::metrics;
/// use lambda_idempotency::test_util::sqs_event;
///
/// let handler = message(|_m, _ctx| async { Ok::<_, std::io::Error>(()) });
/// let report = BatchProcessor::new().process(&sqs_event([("m-1", "{}")]), &handler).await.unwrap();
/// assert!(metrics::key_missing(&report, "orders").is_none());
/// # });
/// ```
pub fn key_missing<T, E: EventSource>(
    report: &BatchReport<T, E>,
    function: &str,
) -> Option<Metrics> {
    let missing = report
        .records
        .iter()
        .filter(|r| {
            matches!(
                r.result,
                Err(RecordError::Key {
                    source: KeyError::Missing(_),
                    ..
                })
            )
        })
        .count() as u64;
    (missing > 0).then(|| {
        Metrics::new(LIBRARY_NAMESPACE)
            .dimension(FUNCTION_DIMENSION, function)
            .count(KEY_MISSING, missing)
    })
}

/// Turns [`Metrics::emit`] on or off for the whole process (on by default). For local runs and
/// tests, where stdout is for people.
// Not API: the payments pipeline's local runs and tests turn the lines off.
#[doc(hidden)]
pub fn set_enabled(enabled: bool) {
    ENABLED.store(enabled, Ordering::Relaxed);
}

/// One EMF line under construction.
#[derive(Debug, Clone, PartialEq)]
pub struct Metrics {
    namespace: String,
    dimensions: Vec<(String, String)>,
    values: Vec<(String, f64, &'static str)>,
}

impl Metrics {
    /// Metrics in `namespace`.
    pub fn new(namespace: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            dimensions: Vec::new(),
            values: Vec::new(),
        }
    }

    /// Adds a dimension (all metrics of the line share it).
    pub fn dimension(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.dimensions.push((name.into(), value.into()));
        self
    }

    /// Adds a `Count` metric.
    pub fn count(mut self, name: impl Into<String>, value: u64) -> Self {
        self.values.push((name.into(), value as f64, "Count"));
        self
    }

    /// Adds a metric in milliseconds.
    pub fn milliseconds(mut self, name: impl Into<String>, value: f64) -> Self {
        self.values.push((name.into(), value, "Milliseconds"));
        self
    }

    /// The value of a metric added before, if any.
    pub fn value(&self, name: &str) -> Option<f64> {
        self.values
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, v, _)| *v)
    }

    /// The EMF JSON line, stamped `timestamp_ms` (epoch milliseconds).
    pub fn to_json(&self, timestamp_ms: i64) -> String {
        let mut root = Map::new();
        root.insert(
            "_aws".into(),
            json!({
                "Timestamp": timestamp_ms,
                "CloudWatchMetrics": [{
                    "Namespace": self.namespace,
                    "Dimensions": [self.dimensions.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>()],
                    "Metrics": self.values.iter().map(|(n, _, unit)| json!({"Name": n, "Unit": unit})).collect::<Vec<_>>(),
                }],
            }),
        );
        for (name, value) in &self.dimensions {
            root.insert(name.clone(), Value::String(value.clone()));
        }
        for (name, value, _) in &self.values {
            let number = if value.fract() == 0.0 && value.abs() < 9.0e15 {
                json!(*value as i64)
            } else {
                json!(value)
            };
            root.insert(name.clone(), number);
        }
        Value::Object(root).to_string()
    }

    /// Prints the line to stdout, where Lambda's log pipeline picks it up (unless turned off
    /// with [`set_enabled`]).
    pub fn emit(&self) {
        if ENABLED.load(Ordering::Relaxed) {
            println!("{}", self.to_json(SystemClock.now_ms()));
        }
    }
}

/// How a batch of an [`Idempotent`](crate::batch::Idempotent) handler went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchCounts {
    /// Records whose handler ran and succeeded.
    pub processed: u64,
    /// Records skipped as duplicates of completed work.
    pub duplicates: u64,
    /// Records reported failed (to be redelivered).
    pub failed: u64,
    /// Records that failed permanently and were moved to the dead-letter queue.
    pub dead_lettered: u64,
}

impl BatchCounts {
    /// Counts the records of `report`.
    pub fn of<T, E: EventSource>(report: &BatchReport<Deduplicated<T>, E>) -> Self {
        let mut counts = Self::default();
        for r in &report.records {
            match &r.result {
                Ok(Deduplicated::Processed(_)) => counts.processed += 1,
                Ok(Deduplicated::Duplicate { .. }) => counts.duplicates += 1,
                Err(_) if r.dead_lettered => counts.dead_lettered += 1,
                Err(_) => counts.failed += 1,
            }
        }
        counts
    }

    /// These counts as metrics ([`PROCESSED`], [`DUPLICATE`], [`FAILED`], [`DEAD_LETTERED`]),
    /// with the function's name in [`FUNCTION_DIMENSION`].
    pub fn metrics(&self, namespace: &str, function: &str) -> Metrics {
        Metrics::new(namespace)
            .dimension(FUNCTION_DIMENSION, function)
            .count(PROCESSED, self.processed)
            .count(DUPLICATE, self.duplicates)
            .count(FAILED, self.failed)
            .count(DEAD_LETTERED, self.dead_lettered)
    }
}
