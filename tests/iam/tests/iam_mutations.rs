//! The conformance check can fail: every statement of every identity policy in template.yaml
//! (each role's, and each managed policy's attached to no role, the operators'), mutated to
//! grant more than it does, must be reported (by policy and Sid). The check is fed the
//! committed recordings of what each function's code calls (`tests/fixtures/iam-recording.json`,
//! which `tests/tests/iam_conformance.rs` checks against a run on the local endpoint and rewrites
//! with `IAM_RECORDING=write`) and of what each operators' tool calls
//! (`tests/fixtures/operators/POLICY.json`, from `tests/tests/iam_operators.rs`), so this runs
//! without an endpoint. The resource policies' mutations are in iam_resource_mutations.rs.

mod iam_common;

use std::collections::BTreeSet;
use std::fmt;

use iam_conformance::{Effect, Recording, Role, StatementRef, TemplateRoles, conformance};
use local_aws::arn::Arn;

const RECORDING: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/iam-recording.json"
);

/// The recording of the calls made with the managed policy `policy` (an operators' tool's).
fn operators_recording(policy: &str) -> Recording {
    let path = format!(
        "{}/tests/fixtures/operators/{policy}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    Recording::load(&path).unwrap_or_else(|e| {
        panic!("{e}: every managed policy attached to no role has its tool's calls recorded")
    })
}

/// Mutations the check may let through because they grant nothing more by AWS's reference:
/// (policy, Sid, mutation as displayed). Widening the resource of an action without
/// resource-level permissions (`dynamodb:ListStreams`, `sqs:ListQueues`) would be one, but the
/// template already grants those on `*`, so that mutation changes nothing and is not made.
/// Every entry must name a mutation that is made and goes unnoticed.
const HARMLESS: &[(&str, &str, &str)] = &[];

#[derive(Clone, Debug, PartialEq, Eq)]
enum Mutation {
    RemoveCondition,
    /// Condition `c`'s value `v` widened to `*`.
    KeysToStar(usize, usize),
    /// Condition `c`'s value `v` with its literal prefix one character shorter.
    KeysShortened(usize, usize, String),
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
            Self::KeysToStar(c, v) => write!(f, "Condition[{c}] value[{v}] -> *"),
            Self::KeysShortened(c, v, to) => write!(f, "Condition[{c}] value[{v}] -> {to}"),
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

impl Mutation {
    /// The kind, for the counts.
    fn kind(&self) -> &'static str {
        match self {
            Self::RemoveCondition => "remove a condition",
            Self::KeysToStar(..) => "LeadingKeys value -> *",
            Self::KeysShortened(..) => "LeadingKeys prefix shortened",
            Self::ResourceToStar(_) => "resource -> *",
            Self::ResourceToWildcardName(..) => "resource -> wildcard name",
            Self::AddAction(_) => "add an unrelated action",
            Self::ServiceWildcard(_) => "action -> service:*",
            Self::ActionStar => "action -> *",
        }
    }
}

/// `value` with the last character of its literal prefix (before the first wildcard) removed.
fn shortened(value: &str) -> Option<String> {
    let literal = value.find(['*', '?']).unwrap_or(value.len());
    let cut = value[..literal].char_indices().last()?.0;
    Some(format!("{}{}", &value[..cut], &value[literal..]).replace("**", "*"))
        .filter(|s| !s.is_empty() && s != value)
}

fn mutations(role: &Role, index: usize) -> Vec<Mutation> {
    let s = &role.statements[index];
    let mut out = Vec::new();
    if !s.conditions.is_empty() {
        out.push(Mutation::RemoveCondition);
    }
    for (c, condition) in s.conditions.iter().enumerate() {
        for (v, value) in condition.values.iter().enumerate() {
            if value != "*" {
                out.push(Mutation::KeysToStar(c, v));
            }
            if let Some(to) = shortened(value).filter(|to| to != "*") {
                out.push(Mutation::KeysShortened(c, v, to));
            }
        }
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
        Mutation::KeysToStar(c, v) => s.conditions[*c].values[*v] = "*".into(),
        Mutation::KeysShortened(c, v, to) => s.conditions[*c].values[*v] = to.clone(),
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

/// Every statement of the managed policy `policy` attached to no role that the check of its
/// tool's recorded calls reports (findings, grants never used).
fn reported_managed(roles: &TemplateRoles, policy: &str) -> BTreeSet<StatementRef> {
    let recording = operators_recording(policy);
    let calls: Vec<_> = recording
        .calls
        .get(policy)
        .map(|c| c.iter().cloned().collect())
        .unwrap_or_default();
    let report = conformance(policy, &calls, roles.managed_policy(policy).unwrap());
    let mut statements: BTreeSet<_> = report
        .findings
        .iter()
        .map(|f| f.statement.clone())
        .collect();
    statements.extend(report.unused.iter().map(|g| g.statement.clone()));
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
    let operators: Vec<&String> = roles
        .unattached_managed_policies()
        .map(|(id, _)| id)
        .collect();
    assert!(
        operators.contains(&&"PaymentsRedrivePolicy".to_owned())
            && operators.contains(&&"PaymentsReopenPolicy".to_owned()),
        "{operators:?}"
    );
    for policy in operators {
        let recording = operators_recording(policy);
        assert_eq!(
            recording.environment.account_id,
            roles.resource_access.account_id
        );
        let calls: Vec<_> = recording.calls[policy].iter().cloned().collect();
        let report = conformance(policy, &calls, roles.managed_policy(policy).unwrap());
        assert!(report.is_conformant(), "{report}");
    }
}

/// Where a mutated statement is: a role's, or a managed policy's attached to no role.
#[derive(Clone, Copy)]
enum Holder<'a> {
    Role(&'a str),
    Managed(&'a str),
}

#[test]
fn every_mutation_that_grants_more_is_reported_by_policy_and_sid() {
    let recording = Recording::load(RECORDING).unwrap();
    let roles = project(&recording);
    let mut targets: Vec<(Holder<'_>, &Role)> = roles
        .roles
        .iter()
        .map(|(id, r)| (Holder::Role(id), r))
        .collect();
    targets.extend(
        roles
            .unattached_managed_policies()
            .map(|(id, p)| (Holder::Managed(id), p)),
    );
    let mut tally = iam_common::Tally::default();
    for (holder, policy) in targets {
        for (index, statement) in policy.statements.iter().enumerate() {
            if statement.effect != Effect::Allow {
                continue;
            }
            for m in mutations(policy, index) {
                let mut mutated = roles.clone();
                let (name, reported) = match holder {
                    Holder::Role(id) => {
                        apply(mutated.roles.get_mut(id).unwrap(), index, &m);
                        (id, reported(&mutated, id, &recording))
                    }
                    Holder::Managed(id) => {
                        apply(mutated.managed_policies.get_mut(id).unwrap(), index, &m);
                        (id, reported_managed(&mutated, id))
                    }
                };
                let sid = statement.id.sid.as_deref();
                let noticed = reported.contains(&statement.id);
                tally.record(m.kind(), noticed, name, sid, m.to_string());
            }
        }
    }
    let made = tally.made();
    assert!(
        made > 50,
        "only {made} mutations: the template's roles were not read"
    );
    for kind in ["LeadingKeys value -> *", "LeadingKeys prefix shortened"] {
        assert!(
            tally.counts.get(kind).is_some_and(|c| c.0 >= 5),
            "{kind}: {:?}",
            tally.counts
        );
    }
    tally.assert_reported_but("identity policies", HARMLESS);
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
