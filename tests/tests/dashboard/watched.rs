//! What the template watches: each alarm's metrics, and what its dashboard shows.

use std::collections::BTreeMap;

use local_aws::template::Expr;
use serde_json::Value as Json;
use serde_yaml_ng::{Mapping, Value};

use crate::emf::Metric;
use crate::stack::Stack;

/// Where a metric is watched: a dashboard widget or an alarm.
pub struct Watched {
    pub by: String,
    pub metric: Metric,
}

/// The metric of an alarm, or of a `MetricStat` of its metric math: namespace, name and
/// dimensions (`- Name: n, Value: v`, each value resolved).
fn alarm_metric(stack: &Stack, by: &str, m: &Value) -> Result<Watched, String> {
    let text = |key: &str| {
        m[key]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("{by}: no {key}"))
    };
    let mut dimensions = BTreeMap::new();
    for d in m["Dimensions"].as_sequence().into_iter().flatten() {
        let name = d["Name"].as_str().ok_or_else(|| format!("{by}: a Name"))?;
        let value = Expr::parse(&d["Value"], by).map_err(|e| format!("{by}: {e}"))?;
        dimensions.insert(name.to_owned(), stack.resolve(&value));
    }
    Ok(Watched {
        by: by.to_owned(),
        metric: Metric {
            namespace: text("Namespace")?,
            name: text("MetricName")?,
            dimensions,
        },
    })
}

/// Each alarm's metrics: its own, or those of its metric math.
pub fn alarm_metrics(stack: &Stack, resources: &Mapping) -> Vec<Result<Watched, String>> {
    let mut watched = Vec::new();
    for (id, r) in resources {
        let id = id.as_str().unwrap_or_default();
        if r["Type"] != "AWS::CloudWatch::Alarm" {
            continue;
        }
        let props = &r["Properties"];
        match props["Metrics"].as_sequence() {
            Some(queries) => {
                for q in queries.iter().filter(|q| q.get("MetricStat").is_some()) {
                    watched.push(alarm_metric(stack, id, &q["MetricStat"]["Metric"]));
                }
            }
            None => watched.push(alarm_metric(stack, id, props)),
        }
    }
    watched
}

/// The dashboard's body, its `!Sub` resolved, parsed.
fn dashboard_body(stack: &Stack, id: &str, r: &Value) -> Result<Json, String> {
    let expr = Expr::parse(&r["Properties"]["DashboardBody"], id).map_err(|e| e.to_string())?;
    serde_json::from_str(&stack.resolve(&expr)).map_err(|e| format!("{id}: DashboardBody: {e}"))
}

/// One entry of a metric widget's `metrics`: `[namespace, name, dimension, value, ...,
/// {options}]`, or `None` for a metric math expression (`[{"expression": ...}]`).
fn widget_metric(by: &str, entry: &Json) -> Result<Option<Metric>, String> {
    let items = entry
        .as_array()
        .ok_or_else(|| format!("{by}: a metric is not an array: {entry}"))?;
    if items.first().is_some_and(|i| i.get("expression").is_some()) {
        return Ok(None);
    }
    let texts: Vec<&str> = items.iter().map_while(Json::as_str).collect();
    if texts.contains(&"...") || texts.contains(&".") {
        return Err(format!(
            "{by}: {entry} repeats the metric before it (\"...\"): write each metric whole"
        ));
    }
    let [namespace, name, dimensions @ ..] = texts.as_slice() else {
        return Err(format!("{by}: {entry} has no namespace and name"));
    };
    if dimensions.len() % 2 != 0 {
        return Err(format!("{by}: {entry}: a dimension without its value"));
    }
    Ok(Some(Metric {
        namespace: (*namespace).to_owned(),
        name: (*name).to_owned(),
        dimensions: dimensions
            .chunks(2)
            .map(|d| (d[0].to_owned(), d[1].to_owned()))
            .collect(),
    }))
}

/// What the dashboards show: each metric widget's metrics, and the alarm widgets' alarms
/// (`${Id.Arn}`, as written).
#[derive(Default)]
pub struct Shown {
    pub metrics: Vec<Watched>,
    pub alarms: Vec<String>,
}

pub fn dashboards(stack: &Stack, resources: &Mapping, findings: &mut Vec<String>) -> Shown {
    let mut shown = Shown::default();
    let ids: Vec<&str> = resources
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::CloudWatch::Dashboard")
        .filter_map(|(id, _)| id.as_str())
        .collect();
    if ids.len() != 1 {
        findings.push(format!("{} dashboards, not one: {ids:?}", ids.len()));
    }
    for id in ids {
        let body = match dashboard_body(stack, id, &resources[id]) {
            Ok(body) => body,
            Err(e) => {
                findings.push(e);
                continue;
            }
        };
        let widgets = body["widgets"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        findings.extend(overlaps(id, widgets));
        for widget in widgets {
            let props = &widget["properties"];
            let by = format!("{id} widget {}", props["title"]);
            match widget["type"].as_str() {
                Some("metric") => {
                    if props["region"] != "${AWS::Region}" {
                        findings.push(format!("{by}: its region is not the stack's"));
                    }
                    for entry in props["metrics"].as_array().into_iter().flatten() {
                        match widget_metric(&by, entry) {
                            Ok(Some(metric)) => shown.metrics.push(Watched {
                                by: by.clone(),
                                metric,
                            }),
                            Ok(None) => {}
                            Err(e) => findings.push(e),
                        }
                    }
                }
                Some("alarm") => shown.alarms.extend(
                    props["alarms"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|a| a.as_str().unwrap_or_default().to_owned()),
                ),
                Some("text") => {}
                other => findings.push(format!("{by}: widget type {other:?}")),
            }
        }
    }
    shown
}

/// The widgets that leave the dashboard's 24 columns or cover another one.
fn overlaps(id: &str, widgets: &[Json]) -> Vec<String> {
    let area = |w: &Json| -> Option<[u64; 4]> {
        let n = |k: &str| w[k].as_u64();
        Some([n("x")?, n("y")?, n("width")?, n("height")?])
    };
    let mut findings = Vec::new();
    let mut placed: Vec<(usize, [u64; 4])> = Vec::new();
    for (i, w) in widgets.iter().enumerate() {
        let Some([x, y, width, height]) = area(w).filter(|[x, _, w, _]| x + w <= 24) else {
            findings.push(format!("{id}: widget {i} is not within the 24 columns"));
            continue;
        };
        for (j, [x2, y2, w2, h2]) in &placed {
            if x < x2 + w2 && *x2 < x + width && y < y2 + h2 && *y2 < y + height {
                findings.push(format!("{id}: widget {i} covers widget {j}"));
            }
        }
        placed.push((i, [x, y, width, height]));
    }
    findings
}
