//! One function's calls against its role, both ways.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::iam::actions::authorizations;
use crate::iam::call::{Call, LeadingKeys};
use crate::iam::policy::{Decision, Grant, Role};

/// Actions the Lambda platform performs with the execution role (writing the function's logs),
/// never the function's code: granted, and reported apart as used by the platform.
pub const PLATFORM_ACTIONS: &[&str] = &["logs:CreateLogStream", "logs:PutLogEvents"];

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
    /// (b) Pairs granted that no call exercised (the platform's aside).
    pub unused: Vec<Grant>,
    /// Pairs granted for the Lambda platform ([`PLATFORM_ACTIONS`]): not exercised by code.
    pub platform: Vec<Grant>,
    /// Calls that could not be checked: no IAM mapping, or unknown partition keys where a
    /// condition needs them.
    pub problems: Vec<String>,
}

impl Report {
    /// Whether every call is allowed, every grant used (or the platform's), and nothing was
    /// left unchecked.
    pub fn is_conformant(&self) -> bool {
        self.denied.is_empty() && self.unused.is_empty() && self.problems.is_empty()
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
        for p in &self.problems {
            writeln!(f, "  NOT CHECKED: {p}")?;
        }
        for g in &self.platform {
            writeln!(f, "  used by the platform: {g}")?;
        }
        Ok(())
    }
}

/// `resource`'s last part: a table's name (with `/stream/...`, `/index/...`), a queue's name, a
/// log group's name.
fn short_resource(resource: &str) -> &str {
    let rest = crate::arn::Arn::parse(resource).map_or(resource, |arn| arn.resource);
    let rest = rest.strip_prefix("table/").unwrap_or(rest);
    match rest.strip_prefix("log-group:") {
        Some(group) => group.strip_suffix(":*").unwrap_or(group),
        None => rest,
    }
}

/// Checks `calls` (everything `function` and the event source mappings acting for it sent)
/// against `role`: (a) every request not allowed, with why; (b) every `Allow` pair no request
/// used, except the Lambda platform's log actions, listed apart.
///
/// ```
/// use local_aws::iam::{conformance, parse_call, RecorderConfig, Role, Statement, StatementRef, Effect};
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
    let granted = role.grants();
    let mut used: BTreeSet<usize> = BTreeSet::new();
    let mut operations: BTreeMap<String, usize> = BTreeMap::new();
    let mut denied: Vec<Denial> = Vec::new();
    let mut problems: BTreeSet<String> = BTreeSet::new();
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
            match role.evaluate(&auth.action, &auth.resource, keys) {
                Decision::Allow { statements } => {
                    for (i, g) in granted.iter().enumerate() {
                        if statements.contains(&g.statement)
                            && g.covers(&auth.action, &auth.resource)
                        {
                            used.insert(i);
                        }
                    }
                }
                decision => {
                    let why = decision.to_string();
                    let operation = call.to_string();
                    let keys = keys.unwrap_or_default();
                    let existing = denied.iter_mut().find(|d| {
                        d.operation == operation
                            && d.action == auth.action
                            && d.resource == auth.resource
                            && d.why == why
                    });
                    let d = match existing {
                        Some(d) => d,
                        None => {
                            denied.push(Denial {
                                operation,
                                action: auth.action.clone(),
                                resource: auth.resource.clone(),
                                why,
                                example_keys: Vec::new(),
                                count: 0,
                            });
                            let last = denied.len() - 1;
                            &mut denied[last]
                        }
                    };
                    d.count += 1;
                    for k in keys {
                        if d.example_keys.len() < EXAMPLE_KEYS && !d.example_keys.contains(k) {
                            d.example_keys.push(k.clone());
                        }
                    }
                }
            }
        }
    }
    let is_platform = |g: &Grant| {
        PLATFORM_ACTIONS
            .iter()
            .any(|a| a.eq_ignore_ascii_case(&g.action))
    };
    let platform: Vec<Grant> = granted.iter().filter(|g| is_platform(g)).cloned().collect();
    let unused: Vec<Grant> = granted
        .iter()
        .enumerate()
        .filter(|(i, g)| !used.contains(i) && !is_platform(g))
        .map(|(_, g)| g.clone())
        .collect();
    Report {
        function: function.to_owned(),
        role: role.logical_id.clone(),
        operations,
        granted,
        denied,
        unused,
        platform,
        problems: problems.into_iter().collect(),
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
