//! The conformance check can fail: every statement of every role in template.yaml, mutated to
//! grant more than it does, must be reported (by role and Sid). The check is fed the committed
//! recording of what each function's code calls (`tests/fixtures/iam-recording.json`, which
//! `tests/tests/iam_conformance.rs` checks against a run on the local endpoint and rewrites with
//! `IAM_RECORDING=write`), so this runs without an endpoint.

use std::collections::BTreeSet;
use std::fmt;

use iam_conformance::{Effect, Recording, Role, StatementRef, TemplateRoles};
use local_aws::arn::Arn;

const RECORDING: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/iam-recording.json"
);

/// Mutations the check may let through because they grant nothing more by AWS's reference:
/// (role, Sid, mutation as displayed). Widening the resource of an action without
/// resource-level permissions (`dynamodb:ListStreams`, `sqs:ListQueues`) would be one, but the
/// template already grants those on `*`, so that mutation changes nothing and is not made.
/// Every entry must name a mutation that is made and goes unnoticed.
///
/// Two entries are not harmless, and are listed so that the gap stays visible: the condition
/// rule covers the shared idempotency table (`LEADING_KEYS_TABLES`), so the
/// `dynamodb:LeadingKeys` conditions on the accounts table (the reconciler's audit cursors,
/// `reconciler#*`; payment-processor's voided numbers, `number #*`) are not required by it, and
/// removing either goes unnoticed.
const HARMLESS: &[(&str, &str, &str)] = &[
    (
        "PaymentsReconcilerRole",
        "AuditCursors",
        "remove the Condition",
    ),
    (
        "PaymentProcessorRole",
        "VoidNumbers",
        "remove the Condition",
    ),
];

#[derive(Clone, Debug, PartialEq, Eq)]
enum Mutation {
    RemoveCondition,
    ResourceToStar(usize),
    ResourceToWildcardName(usize, String),
    AddAction(&'static str),
    ServiceWildcard(String),
    ActionStar,
}

impl fmt::Display for Mutation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::RemoveCondition => f.write_str("remove the Condition"),
            Self::ResourceToStar(i) => write!(f, "Resource[{i}] -> *"),
            Self::ResourceToWildcardName(i, r) => write!(f, "Resource[{i}] -> {r}"),
            Self::AddAction(a) => write!(f, "add the action {a}"),
            Self::ServiceWildcard(a) => write!(f, "Action -> {a}"),
            Self::ActionStar => f.write_str("Action -> *"),
        }
    }
}

/// An unrelated action of each service, granted by no statement of the project.
const UNRELATED: &[(&str, &str)] = &[
    ("dynamodb", "dynamodb:DeleteTable"),
    ("sqs", "sqs:PurgeQueue"),
    ("logs", "logs:DeleteLogGroup"),
];

/// `resource` with its name widened to a wildcard (`table/*`, a queue `*`, `log-group:*`).
fn wildcard_name(resource: &str) -> Option<String> {
    let arn = Arn::parse(resource).ok()?;
    let widened = if arn.resource.starts_with("table/") {
        "table/*"
    } else if arn.resource.starts_with("log-group:") {
        "log-group:*"
    } else {
        "*"
    };
    let out = arn.with_resource(widened);
    (out != resource).then_some(out)
}

fn mutations(role: &Role, index: usize) -> Vec<Mutation> {
    let s = &role.statements[index];
    let mut out = Vec::new();
    if !s.conditions.is_empty() {
        out.push(Mutation::RemoveCondition);
    }
    for (i, r) in s.resources.iter().enumerate() {
        if r != "*" {
            out.push(Mutation::ResourceToStar(i));
        }
        if let Some(w) = wildcard_name(r) {
            out.push(Mutation::ResourceToWildcardName(i, w));
        }
    }
    let service = s.actions[0]
        .split(':')
        .next()
        .unwrap_or_default()
        .to_owned();
    if let Some((_, action)) = UNRELATED.iter().find(|(svc, _)| *svc == service)
        && !s.actions.iter().any(|a| a == action)
    {
        out.push(Mutation::AddAction(action));
    }
    out.push(Mutation::ServiceWildcard(format!("{service}:*")));
    out.push(Mutation::ActionStar);
    out
}

fn apply(role: &mut Role, index: usize, m: &Mutation) {
    let s = &mut role.statements[index];
    match m {
        Mutation::RemoveCondition => s.conditions.clear(),
        Mutation::ResourceToStar(i) => s.resources[*i] = "*".into(),
        Mutation::ResourceToWildcardName(i, r) => s.resources[*i] = r.clone(),
        Mutation::AddAction(a) => s.actions.push((*a).to_owned()),
        Mutation::ServiceWildcard(a) => s.actions = vec![a.clone()],
        Mutation::ActionStar => s.actions = vec!["*".into()],
    }
}

/// Every statement of `role` the check reports (findings, grants never used), checking the
/// functions that run with it, or the role alone when none does.
fn reported(roles: &TemplateRoles, role: &str, recording: &Recording) -> BTreeSet<StatementRef> {
    let mut statements = BTreeSet::new();
    for f in roles.functions.values().filter(|f| f.role == role) {
        let calls: Vec<_> = recording
            .calls
            .get(&f.function_name)
            .map(|c| c.iter().cloned().collect())
            .unwrap_or_default();
        let report = roles.conformance(&f.function_name, &calls).unwrap();
        statements.extend(report.findings.iter().map(|f| f.statement.clone()));
        statements.extend(report.unused.iter().map(|g| g.statement.clone()));
    }
    for finding in roles.unattached_role_findings() {
        if finding.role == role {
            statements.insert(finding.statement);
        }
    }
    statements
}

fn project(recording: &Recording) -> TemplateRoles {
    TemplateRoles::load_project(&recording.environment).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_template_as_written_conforms() {
    let recording = Recording::load(RECORDING).unwrap();
    let roles = project(&recording);
    for f in roles.functions.values() {
        let calls: Vec<_> = recording.calls[&f.function_name].iter().cloned().collect();
        let report = roles.conformance(&f.function_name, &calls).unwrap();
        assert!(report.is_conformant(), "{report}");
    }
    assert_eq!(roles.unattached_role_findings(), []);
}

#[test]
fn every_mutation_that_grants_more_is_reported_by_role_and_sid() {
    let recording = Recording::load(RECORDING).unwrap();
    let roles = project(&recording);
    let mut unnoticed = Vec::new();
    let mut made = 0;
    for (role_id, role) in &roles.roles {
        for (index, statement) in role.statements.iter().enumerate() {
            if statement.effect != Effect::Allow {
                continue;
            }
            for m in mutations(role, index) {
                made += 1;
                let mut mutated = roles.clone();
                let target = mutated.roles.get_mut(role_id).unwrap();
                apply(target, index, &m);
                let sid = statement.id.sid.as_deref().unwrap_or("(no Sid)");
                if !reported(&mutated, role_id, &recording).contains(&statement.id) {
                    unnoticed.push((role_id.clone(), sid.to_owned(), m.to_string()));
                }
            }
        }
    }
    assert!(
        made > 50,
        "only {made} mutations: the template's roles were not read"
    );
    let allowed: Vec<(String, String, String)> = HARMLESS
        .iter()
        .map(|(r, s, m)| ((*r).to_owned(), (*s).to_owned(), (*m).to_owned()))
        .collect();
    let failures: Vec<String> = unnoticed
        .iter()
        .filter(|u| !allowed.contains(u))
        .map(|(r, s, m)| format!("role {r}, Sid {s}: {m}"))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {made} mutations not reported:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let stale: Vec<_> = allowed.iter().filter(|a| !unnoticed.contains(a)).collect();
    assert!(
        stale.is_empty(),
        "allow-listed but reported or not made: {stale:?}"
    );
}

#[test]
fn list_streams_belongs_on_star_and_get_records_does_not() {
    let recording = Recording::load(RECORDING).unwrap();
    let roles = project(&recording);
    let role_id = &roles.function("payments-publisher").unwrap().role;
    let calls: Vec<_> = recording.calls["payments-publisher"]
        .iter()
        .cloned()
        .collect();
    let index_of = |sid: &str| {
        roles.roles[role_id]
            .statements
            .iter()
            .position(|s| s.id.sid.as_deref() == Some(sid))
            .unwrap()
    };
    let (list, read) = (index_of("ListStreams"), index_of("ReadPaymentsStream"));
    assert_eq!(roles.roles[role_id].statements[list].resources, ["*"]);

    // GetRecords on `*`: too broad, by the reference's resource type (the stream).
    let mut wide = roles.clone();
    wide.roles.get_mut(role_id).unwrap().statements[read].resources = vec!["*".into()];
    let report = wide.conformance("payments-publisher", &calls).unwrap();
    let text = report.to_string();
    assert!(
        text.contains("Sid ReadPaymentsStream") && text.contains("dynamodb:GetRecords on *"),
        "{text}"
    );

    // ListStreams on the table's streams: AWS grants nothing there.
    let mut scoped = roles.clone();
    let streams = roles.roles[role_id].statements[read].resources[0].clone();
    scoped.roles.get_mut(role_id).unwrap().statements[list].resources = vec![streams];
    let report = scoped.conformance("payments-publisher", &calls).unwrap();
    assert!(
        report
            .denied
            .iter()
            .any(|d| d.action == "dynamodb:ListStreams" && d.resource == "*"),
        "{report}"
    );
    assert!(
        report.to_string().contains("no resource-level permissions"),
        "{report}"
    );
}
