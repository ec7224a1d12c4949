//! One function's calls against its role, both ways.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::actions::authorizations;
use crate::call::{Call, LeadingKeys};
use crate::error::PolicyError;
use crate::findings::{
    Finding, FindingKind, LEADING_KEYS_TABLES, needed_key_pattern, statement_findings, value_within,
};
use crate::policy::{Decision, Grant, Role};
use crate::reference;
use crate::requirement::{Requirement, Requirer};
use crate::roles::TemplateRoles;

/// How many example partition keys a [`Denial`] keeps.
const EXAMPLE_KEYS: usize = 3;

/// Requests of one kind that the role does not allow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    /// The operation (`DynamoDB.UpdateItem`).
    pub operation: String,
    /// The action evaluated.
    pub action: String,
    /// The resource evaluated.
    pub resource: String,
    /// Why: the decision, e.g. the failing `dynamodb:LeadingKeys` condition.
    pub why: String,
    /// Some of the partition keys of the denied requests.
    pub example_keys: Vec<String>,
    /// How many requests.
    pub count: usize,
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}x): {} on {}",
            self.operation, self.count, self.action, self.resource
        )?;
        if !self.example_keys.is_empty() {
            write!(f, " with leading keys {:?}", self.example_keys)?;
        }
        write!(f, ": {}", self.why)
    }
}

/// One function's calls checked against its role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// The function.
    pub function: String,
    /// Its role's logical id.
    pub role: String,
    /// Operations called (`SQS.SendMessageBatch`), with how many calls.
    pub operations: BTreeMap<String, usize>,
    /// Every `Allow` (action, resource) pair of the role.
    pub granted: Vec<Grant>,
    /// (a) The requests not allowed.
    pub denied: Vec<Denial>,
    /// (b) Pairs granted that neither a call nor a requirement exercised.
    pub unused: Vec<Grant>,
    /// Pairs exercised by the Lambda platform's log writes only.
    pub platform: Vec<Grant>,
    /// Pairs exercised by the function's event source mappings only (their reads, their
    /// on-failure sends).
    pub event_sources: Vec<Grant>,
    /// (c) Statements granting more than written intent allows: wildcards, resources broader
    /// than the requests need, missing or loose `dynamodb:LeadingKeys` conditions.
    pub findings: Vec<Finding>,
    /// Calls that could not be checked: no IAM mapping, or unknown partition keys where a
    /// condition needs them.
    pub problems: Vec<String>,
}

impl Report {
    /// Whether every request is allowed, every grant used, no statement grants more than
    /// needed, and nothing was left unchecked.
    pub fn is_conformant(&self) -> bool {
        self.denied.is_empty()
            && self.unused.is_empty()
            && self.findings.is_empty()
            && self.problems.is_empty()
    }

    /// The header of the table [`markdown_row`](Self::markdown_row) renders a row of.
    pub fn markdown_header() -> &'static str {
        "| function | operations called | actions granted |\n| --- | --- | --- |"
    }

    /// `| function | operations called | actions granted |`: operations with their call counts;
    /// each grant with its resource's short name, its conditions, and a mark when it is the
    /// platform's or never used.
    pub fn markdown_row(&self) -> String {
        let operations: Vec<String> = self
            .operations
            .iter()
            .map(|(op, n)| format!("`{op}` ×{n}"))
            .collect();
        let grants: Vec<String> = self
            .granted
            .iter()
            .map(|g| {
                let mut s = format!("`{}` on `{}`", g.action, short_resource(&g.resource));
                for c in &g.conditions {
                    s.push_str(&format!(
                        " if `{}` {}",
                        c.operator.as_str(),
                        c.values
                            .iter()
                            .map(|v| format!("`{v}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
                if self.platform.contains(g) {
                    s.push_str(" (platform)");
                } else if self.event_sources.contains(g) {
                    s.push_str(" (event source)");
                } else if self.unused.contains(g) {
                    s.push_str(" (**never used**)");
                }
                s
            })
            .collect();
        format!(
            "| {} | {} | {} |",
            self.function,
            operations.join("<br>"),
            grants.join("<br>")
        )
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = if self.is_conformant() {
            "conforms"
        } else {
            "DOES NOT conform"
        };
        writeln!(f, "{} (role {}) {verdict}", self.function, self.role)?;
        let ops: Vec<String> = self
            .operations
            .iter()
            .map(|(op, n)| format!("{op} x{n}"))
            .collect();
        writeln!(f, "  operations called: {}", ops.join(", "))?;
        for d in &self.denied {
            writeln!(f, "  NOT GRANTED: {d}")?;
        }
        for g in &self.unused {
            writeln!(f, "  GRANTED, NEVER USED: {g}")?;
        }
        for finding in &self.findings {
            writeln!(f, "  TOO BROAD: {finding}")?;
        }
        for p in &self.problems {
            writeln!(f, "  NOT CHECKED: {p}")?;
        }
        for g in &self.platform {
            writeln!(f, "  used by the platform: {g}")?;
        }
        for g in &self.event_sources {
            writeln!(f, "  used by an event source mapping: {g}")?;
        }
        Ok(())
    }
}

/// `resource`'s last part: a table's name (with `/stream/...`, `/index/...`), a queue's name, a
/// log group's name.
fn short_resource(resource: &str) -> &str {
    let rest = local_aws::arn::Arn::parse(resource).map_or(resource, |arn| arn.resource);
    let rest = rest.strip_prefix("table/").unwrap_or(rest);
    match rest.strip_prefix("log-group:") {
        Some(group) => group.strip_suffix(":*").unwrap_or(group),
        None => rest,
    }
}

/// Checks `calls` (what `function`'s code sent) against `role`, without anything from the
/// template: (a) every request not allowed, with why; (b) every `Allow` pair no request used;
/// (c) the [statement findings](crate::Finding) of the role and every grant broader than
/// the requests it allows. [`TemplateRoles::conformance`] adds what Lambda does with the role
/// (event sources, logs) and the project's condition rules.
///
/// ```
/// use iam_conformance::{conformance, parse_call, RecorderConfig, Role, Statement, StatementRef, Effect};
///
/// let role = Role { logical_id: "R".into(), statements: vec![Statement {
///     id: StatementRef { policy: "p".into(), sid: Some("Send".into()), index: 0 },
///     effect: Effect::Allow,
///     actions: vec!["sqs:SendMessage".into(), "sqs:DeleteMessage".into()],
///     resources: vec!["arn:aws:sqs:us-east-1:123456789012:q".into()],
///     conditions: vec![],
/// }]};
/// let config = RecorderConfig::new("us-east-1", "123456789012");
/// let call = parse_call("AmazonSQS.SendMessageBatch", br#"{"QueueUrl":"http://h:1/123456789012/q"}"#, &config).unwrap();
/// let report = conformance("f", &[call], &role);
/// assert!(report.denied.is_empty());
/// assert_eq!(report.unused.len(), 1); // sqs:DeleteMessage
/// assert!(!report.is_conformant());
/// ```
pub fn conformance(function: &str, calls: &[Call], role: &Role) -> Report {
    check(
        function,
        calls,
        &[],
        role,
        statement_findings(role, &[], &[]),
    )
}

impl TemplateRoles {
    /// The whole check of the function named `function_name` (its `FunctionName` or logical
    /// id): `calls` are its code's requests; its event source mappings' and the platform's
    /// [requirements](crate::Requirement) come from the template; the statement findings
    /// include the `dynamodb:LeadingKeys` rule of [`LEADING_KEYS_TABLES`] with the key prefix
    /// of every function running with the role.
    pub fn conformance(&self, function_name: &str, calls: &[Call]) -> Result<Report, PolicyError> {
        let f = self.function(function_name)?;
        let role = self.for_function(function_name)?;
        let findings = statement_findings(role, &self.leading_keys_tables(), &self.prefixes(role));
        Ok(check(
            &f.function_name,
            calls,
            &f.requirements,
            role,
            findings,
        ))
    }

    /// The statement findings of the roles no function runs with (operators' roles, say).
    pub fn unattached_role_findings(&self) -> Vec<Finding> {
        let tables = self.leading_keys_tables();
        self.roles
            .values()
            .filter(|r| self.functions.values().all(|f| f.role != r.logical_id))
            .flat_map(|r| statement_findings(r, &tables, &[]))
            .collect()
    }

    fn leading_keys_tables(&self) -> Vec<(String, String)> {
        LEADING_KEYS_TABLES
            .iter()
            .filter_map(|id| {
                self.tables
                    .get(*id)
                    .map(|t| ((*id).to_owned(), t.arn.clone()))
            })
            .collect()
    }

    /// The key prefixes (`NAME#`) of the functions running with `role`.
    fn prefixes(&self, role: &Role) -> Vec<String> {
        self.functions
            .values()
            .filter(|f| f.role == role.logical_id)
            .map(|f| format!("{}#", f.function_name))
            .collect()
    }
}

/// How one grant was used.
#[derive(Default)]
struct Use {
    by_code: bool,
    by_platform: bool,
    by_event_source: bool,
    /// (action, resource) of the requests it allowed.
    requests: BTreeSet<(String, String)>,
    /// The leading keys of the requests it allowed.
    keys: BTreeSet<String>,
}

fn check(
    function: &str,
    calls: &[Call],
    requirements: &[Requirement],
    role: &Role,
    mut findings: Vec<Finding>,
) -> Report {
    let granted = role.grants();
    let mut uses: Vec<Use> = granted.iter().map(|_| Use::default()).collect();
    let mut operations: BTreeMap<String, usize> = BTreeMap::new();
    let mut denied: Vec<Denial> = Vec::new();
    let mut problems: BTreeSet<String> = BTreeSet::new();
    let mut allowed = |operation: String,
                       action: &str,
                       resource: &str,
                       keys: Option<&[String]>,
                       by: Option<&Requirer>,
                       denied: &mut Vec<Denial>| {
        match role.evaluate(action, resource, keys) {
            Decision::Allow { statements } => {
                for (g, u) in granted.iter().zip(uses.iter_mut()) {
                    if statements.contains(&g.statement) && g.covers(action, resource) {
                        match by {
                            None => u.by_code = true,
                            Some(Requirer::Platform) => u.by_platform = true,
                            Some(_) => u.by_event_source = true,
                        }
                        u.requests.insert((action.to_owned(), resource.to_owned()));
                        u.keys.extend(keys.unwrap_or_default().iter().cloned());
                    }
                }
            }
            decision => deny(denied, operation, action, resource, decision, keys),
        }
    };
    for call in calls {
        *operations.entry(call.to_string()).or_default() += 1;
        let auths = match authorizations(call) {
            Ok(a) => a,
            Err(e) => {
                problems.insert(e.to_string());
                continue;
            }
        };
        for auth in auths {
            let keys = match &auth.leading_keys {
                None => None,
                Some(LeadingKeys::Known(k)) => Some(k.as_slice()),
                Some(LeadingKeys::Unknown(why)) => {
                    if role.conditions_on_leading_keys(&auth.action, &auth.resource) {
                        problems.insert(format!(
                            "{call}: {} on {}: a condition needs the leading keys, which are unknown: {why}",
                            auth.action, auth.resource
                        ));
                        continue;
                    }
                    None
                }
            };
            allowed(
                call.to_string(),
                &auth.action,
                &auth.resource,
                keys,
                None,
                &mut denied,
            );
        }
    }
    for r in requirements {
        allowed(
            r.by.to_string(),
            &r.action,
            &r.resource,
            None,
            Some(&r.by),
            &mut denied,
        );
    }
    for (g, u) in granted.iter().zip(&uses) {
        let narrowest: BTreeSet<String> = u
            .requests
            .iter()
            .map(|(action, resource)| reference::narrowest(action, resource))
            .collect();
        if narrowest.iter().any(|n| !reference::within(&g.resource, n)) {
            findings.push(Finding {
                role: role.logical_id.clone(),
                statement: g.statement.clone(),
                kind: FindingKind::Broader {
                    action: g.action.clone(),
                    resource: g.resource.clone(),
                    requested: u
                        .requests
                        .iter()
                        .map(|(_, r)| r.clone())
                        .collect::<BTreeSet<_>>()
                        .into_iter()
                        .collect(),
                    narrowest: narrowest.into_iter().collect(),
                },
            });
        }
    }
    findings.extend(broader_keys(role, &granted, &uses));
    findings.sort();
    findings.dedup();
    let pick = |keep: &dyn Fn(&Use) -> bool| -> Vec<Grant> {
        granted
            .iter()
            .zip(&uses)
            .filter(|(_, u)| keep(u))
            .map(|(g, _)| g.clone())
            .collect()
    };
    Report {
        function: function.to_owned(),
        role: role.logical_id.clone(),
        operations,
        unused: pick(&|u| !u.by_code && !u.by_platform && !u.by_event_source),
        platform: pick(&|u| u.by_platform && !u.by_code),
        event_sources: pick(&|u| u.by_event_source && !u.by_code),
        granted,
        denied,
        findings,
        problems: problems.into_iter().collect(),
    }
}

/// The grants whose requests' leading keys all start with one key prefix, and whose statement
/// does not hold them to it.
fn broader_keys(role: &Role, granted: &[Grant], uses: &[Use]) -> Vec<Finding> {
    let mut out = Vec::new();
    for (g, u) in granted.iter().zip(uses) {
        let Some(needed) = needed_key_pattern(&u.keys) else {
            continue;
        };
        let values: Vec<Option<String>> = if g.conditions.is_empty() {
            vec![None]
        } else {
            g.conditions
                .iter()
                .flat_map(|c| &c.values)
                .filter(|v| !value_within(v, &needed))
                .map(|v| Some(v.clone()))
                .collect()
        };
        for value in values {
            out.push(Finding {
                role: role.logical_id.clone(),
                statement: g.statement.clone(),
                kind: FindingKind::BroaderKeys {
                    action: g.action.clone(),
                    resource: g.resource.clone(),
                    value,
                    needed: needed.clone(),
                },
            });
        }
    }
    out
}

/// Adds a denied request to `denied`, merged with the others of its kind.
fn deny(
    denied: &mut Vec<Denial>,
    operation: String,
    action: &str,
    resource: &str,
    decision: Decision,
    keys: Option<&[String]>,
) {
    let why = decision.to_string();
    let index = match denied.iter().position(|d| {
        d.operation == operation && d.action == action && d.resource == resource && d.why == why
    }) {
        Some(i) => i,
        None => {
            denied.push(Denial {
                operation,
                action: action.to_owned(),
                resource: resource.to_owned(),
                why,
                example_keys: Vec::new(),
                count: 0,
            });
            denied.len() - 1
        }
    };
    let d = &mut denied[index];
    d.count += 1;
    for k in keys.unwrap_or_default() {
        if d.example_keys.len() < EXAMPLE_KEYS && !d.example_keys.contains(k) {
            d.example_keys.push(k.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::short_resource;

    #[test]
    fn short_names() {
        assert_eq!(
            short_resource("arn:aws:dynamodb:us-east-1:1:table/payments"),
            "payments"
        );
        assert_eq!(
            short_resource("arn:aws:dynamodb:us-east-1:1:table/p/stream/2024"),
            "p/stream/2024"
        );
        assert_eq!(short_resource("arn:aws:sqs:us-east-1:1:q.fifo"), "q.fifo");
        assert_eq!(
            short_resource("arn:aws:logs:us-east-1:1:log-group:/aws/lambda/f:*"),
            "/aws/lambda/f"
        );
        assert_eq!(short_resource("*"), "*");
    }
}
