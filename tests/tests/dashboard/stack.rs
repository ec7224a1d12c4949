//! The stack's resources and their names, and the AWS metrics published for them.

use std::collections::{BTreeMap, BTreeSet};

use local_aws::template::{Expr, Part, Template, TemplateOptions};
use serde_yaml_ng::Value;

use crate::emf::Metric;

/// The kinds of resource an AWS metric's dimension names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Queue,
    Function,
    Table,
    HttpApi,
}

/// The AWS metrics the template may watch: namespace, the one dimension AWS publishes them
/// under, the kind of resource it names, and the metrics' names (AWS's documentation of each
/// service's CloudWatch metrics).
pub const AWS_METRICS: &[(&str, &str, Kind, &[&str])] = &[
    (
        "AWS/SQS",
        "QueueName",
        Kind::Queue,
        &[
            "ApproximateAgeOfOldestMessage",
            "ApproximateNumberOfMessagesDelayed",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesVisible",
            "NumberOfEmptyReceives",
            "NumberOfMessagesDeleted",
            "NumberOfMessagesReceived",
            "NumberOfMessagesSent",
            "SentMessageSize",
        ],
    ),
    (
        "AWS/Lambda",
        "FunctionName",
        Kind::Function,
        &[
            "ConcurrentExecutions",
            "DeadLetterErrors",
            "DestinationDeliveryFailures",
            "Duration",
            "Errors",
            "Invocations",
            "IteratorAge",
            "Throttles",
        ],
    ),
    (
        "AWS/DynamoDB",
        "TableName",
        Kind::Table,
        &[
            "ConsumedReadCapacityUnits",
            "ConsumedWriteCapacityUnits",
            "ReadThrottleEvents",
            "TransactionConflict",
            "WriteThrottleEvents",
        ],
    ),
    (
        "AWS/ApiGateway",
        "ApiId",
        Kind::HttpApi,
        &["4xx", "5xx", "Count", "IntegrationLatency", "Latency"],
    ),
];

/// What the stack's resources are named: each logical id of a kind and its name.
pub struct Stack {
    template: Template,
    names: BTreeMap<String, (Kind, String)>,
}

impl Stack {
    pub fn project() -> Self {
        let template = Template::load_project(&TemplateOptions::default()).unwrap();
        let mut names = BTreeMap::new();
        for (id, q) in &template.queues {
            names.insert(id.clone(), (Kind::Queue, q.name.clone()));
        }
        for (id, f) in &template.functions {
            names.insert(id.clone(), (Kind::Function, f.name.clone()));
        }
        for (id, t) in &template.tables {
            names.insert(id.clone(), (Kind::Table, t.name.clone()));
        }
        let raw: Value = serde_yaml_ng::from_str(&project_text()).unwrap();
        for (id, r) in raw["Resources"].as_mapping().unwrap() {
            if r["Type"] == "AWS::Serverless::HttpApi" {
                let id = id.as_str().unwrap();
                // Its Ref, the API's id, is known once deployed only.
                names.insert(id.to_owned(), (Kind::HttpApi, format!("${{{id}}}")));
            }
        }
        Self { template, names }
    }

    /// The names of every resource of `kind`, by logical id.
    pub fn of_kind(&self, kind: Kind) -> impl Iterator<Item = (&str, &str)> {
        self.names
            .iter()
            .filter(move |(_, (k, _))| *k == kind)
            .map(|(id, (_, name))| (id.as_str(), name.as_str()))
    }

    /// The text of `expr` as CloudFormation resolves it: a resource's name for its `Ref` (a
    /// queue's for `.QueueName`), a parameter's value; anything else stays `${...}`.
    pub fn resolve(&self, expr: &Expr) -> String {
        let mut text = String::new();
        for part in expr.parts() {
            let resolved = match part {
                Part::Text(t) => Some(t.clone()),
                Part::Ref(id) => match self.names.get(id) {
                    Some((Kind::Queue, _)) => None, // a queue's Ref is its URL
                    Some((_, name)) => Some(name.clone()),
                    None => self.template.parameter(id).map(str::to_owned),
                },
                Part::GetAtt(id, attribute) => match self.names.get(id) {
                    Some((Kind::Queue, name)) if attribute == "QueueName" => Some(name.clone()),
                    _ => None,
                },
            };
            text.push_str(&resolved.unwrap_or_else(|| written(part)));
        }
        text
    }
}

/// A part as `!Sub` writes it: `${Id}`, `${Id.Attribute}`.
fn written(part: &Part) -> String {
    match part {
        Part::Text(t) => t.clone(),
        Part::Ref(r) => format!("${{{r}}}"),
        Part::GetAtt(r, a) => format!("${{{r}.{a}}}"),
    }
}

pub fn project_text() -> String {
    std::fs::read_to_string(Template::project_path()).unwrap()
}

/// Why `m` is no metric CloudWatch has for this stack, if it is not.
pub fn not_published(stack: &Stack, emitted: &BTreeSet<Metric>, m: &Metric) -> Option<String> {
    if !m.namespace.starts_with("AWS/") {
        if emitted.contains(m) {
            return None;
        }
        let same_name: Vec<String> = emitted
            .iter()
            .filter(|e| e.name == m.name)
            .map(ToString::to_string)
            .collect();
        return Some(format!(
            "{m}: no function emits it (emitted under that name: {same_name:?})"
        ));
    }
    let Some((_, dimension, kind, names)) = AWS_METRICS.iter().find(|(ns, ..)| *ns == m.namespace)
    else {
        return Some(format!("{m}: the template watches no such AWS namespace"));
    };
    if !names.contains(&m.name.as_str()) {
        return Some(format!("{m}: {} publishes no {}", m.namespace, m.name));
    }
    let dimensions: Vec<&str> = m.dimensions.keys().map(String::as_str).collect();
    if dimensions != [*dimension] {
        return Some(format!(
            "{m}: {} publishes it under the dimension {dimension} alone",
            m.namespace
        ));
    }
    let value = &m.dimensions[*dimension];
    if !stack.of_kind(*kind).any(|(_, name)| name == value) {
        return Some(format!(
            "{m}: {dimension} {value} is no {kind:?} of the stack"
        ));
    }
    None
}
