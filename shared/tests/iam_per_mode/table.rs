//! The table, as the crate documents it in `src/iam.rs`: its rows, what it grants a set of its
//! labels, the options a consumer has by default, and the policy snippet's grants.

use std::collections::BTreeSet;

/// The source of the `iam` module: its docs hold the table.
const IAM_DOCS: &str = include_str!("../../src/iam.rs");

/// The lines of the `iam` module's docs, trimmed.
fn doc_lines() -> impl Iterator<Item = &'static str> {
    IAM_DOCS
        .lines()
        .map(|l| l.strip_prefix("//!").unwrap_or(l).trim())
}

/// The table's header row.
const HEADER: &str = "| Mode or option | Action | Resource | Why |";

/// A resource of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resource {
    IdempotencyTable,
    EffectTables,
    SourceQueue,
    DeadLetterQueue,
    PublishersQueue,
}

impl Resource {
    /// The resource a cell of the table names; `None` for `none`.
    fn parse(cell: &str) -> Option<Self> {
        match cell {
            "idempotency table" => Some(Self::IdempotencyTable),
            "effect tables" => Some(Self::EffectTables),
            "source queue" => Some(Self::SourceQueue),
            "dead-letter queue" => Some(Self::DeadLetterQueue),
            "publisher's queue" => Some(Self::PublishersQueue),
            "none" => None,
            other => panic!("the IAM table names an unknown resource {other:?}"),
        }
    }
}

/// An action on a resource: what IAM is asked for.
pub type Grant = (String, Resource);

/// A row of the table: a mode or option, and the action it needs on a resource (none for a row
/// that says `none`).
#[derive(Debug)]
pub struct Row {
    pub label: String,
    pub grant: Option<Grant>,
}

/// The rows of the table in the `iam` module's docs.
pub fn table() -> Vec<Row> {
    let mut lines = doc_lines().skip_while(|l| *l != HEADER);
    assert_eq!(lines.next(), Some(HEADER), "the IAM table is in src/iam.rs");
    assert!(lines.next().is_some_and(|l| l.starts_with("| ---")));
    let rows: Vec<Row> = lines
        .take_while(|l| l.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
            let [label, action, resource, why] = cells[..] else {
                panic!("an IAM table row has four cells: {line}");
            };
            assert!(!why.is_empty(), "every row says why: {line}");
            let resource = Resource::parse(resource);
            let grant = match (action, resource) {
                ("none", _) => None,
                (action, Some(resource)) => {
                    let action = action
                        .strip_prefix('`')
                        .and_then(|a| a.strip_suffix('`'))
                        .filter(|a| {
                            a.split_once(':').is_some_and(|(service, name)| {
                                matches!(service, "dynamodb" | "sqs")
                                    && name.chars().all(|c| c.is_ascii_alphabetic())
                            })
                        })
                        .unwrap_or_else(|| {
                            panic!("one action per row, as `service:Action`: {line}")
                        });
                    Some((action.to_owned(), resource))
                }
                (_, None) => panic!("an action needs a resource: {line}"),
            };
            Row {
                label: label.to_owned(),
                grant,
            }
        })
        .collect();
    assert!(rows.len() > 20, "the whole table was read: {rows:?}");
    rows
}

/// What the table grants a function with these modes and options.
pub fn granted(labels: &[&str]) -> BTreeSet<Grant> {
    let rows = table();
    for label in labels {
        assert!(
            rows.iter().any(|r| r.label == *label),
            "the IAM table has no row for {label:?}"
        );
    }
    rows.into_iter()
        .filter(|r| labels.contains(&r.label.as_str()))
        .filter_map(|r| r.grant)
        .collect()
}

/// The grants of the policy snippet in the `iam` module's docs (the common inline consumer), by
/// the resources of the table; the logs' statement left out.
pub fn snippet_grants() -> BTreeSet<Grant> {
    let lines: Vec<&str> = IAM_DOCS
        .lines()
        .map(|l| {
            l.strip_prefix("//! ")
                .unwrap_or(l.trim_start_matches("//!"))
        })
        .skip_while(|l| *l != "```yaml")
        .skip(1)
        .take_while(|l| *l != "```")
        .collect();
    assert!(!lines.is_empty(), "the policy snippet is in src/iam.rs");
    let mut grants = BTreeSet::new();
    let (mut actions, mut listing) = (Vec::<String>::new(), false);
    for line in lines {
        let line = line.split(" #").next().unwrap_or("").trim();
        if let Some(list) = line.strip_prefix("Action:") {
            let list = list.trim().trim_start_matches('[').trim_end_matches(']');
            actions = list
                .split(',')
                .map(|a| a.trim().to_owned())
                .filter(|a| !a.is_empty())
                .collect();
            listing = actions.is_empty();
        } else if listing && let Some(action) = line.strip_prefix("- ") {
            actions.push(action.to_owned());
        } else if let Some(resource) = line.strip_prefix("Resource:") {
            listing = false;
            let resource = match resource.trim() {
                "!GetAtt IdempotencyTable.Arn" => Resource::IdempotencyTable,
                "!GetAtt ItemsTable.Arn" => Resource::EffectTables,
                "!GetAtt Queue.Arn" => Resource::SourceQueue,
                "!GetAtt DeadLetterQueue.Arn" => Resource::DeadLetterQueue,
                "\"*\"" => {
                    assert!(
                        actions.iter().all(|a| a.starts_with("logs:")),
                        "{actions:?}"
                    );
                    continue;
                }
                other => panic!("the snippet names an unknown resource {other:?}"),
            };
            grants.extend(actions.drain(..).map(|a| (a, resource)));
        } else {
            listing = false;
        }
    }
    grants
}

/// How the paragraph of the `iam` module's docs that names a consumer's default options begins.
const CONSUMER_DEFAULTS: &str = "A consumer of `Consumer::from_env`";

/// The options a consumer has by default (with a dead-letter queue), as the `iam` module's docs
/// name them: the labels in bold of the paragraph that begins with [`CONSUMER_DEFAULTS`].
pub fn consumer_defaults() -> Vec<String> {
    let paragraph = doc_lines()
        .skip_while(|l| !l.starts_with(CONSUMER_DEFAULTS))
        .take_while(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        !paragraph.is_empty(),
        "src/iam.rs has a paragraph that begins with {CONSUMER_DEFAULTS:?}"
    );
    let labels: Vec<String> = paragraph
        .split("**")
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    assert!(
        paragraph.matches("**").count() % 2 == 0 && !labels.is_empty(),
        "the consumer's options are in bold: {paragraph}"
    );
    labels
}
