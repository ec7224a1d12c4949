//! The resource policies' checks can fail: every statement of every resource policy in
//! template.yaml (each queue's policy, the KMS key's policy, each role's trust policy), mutated
//! to let more callers in than it does, must be reported for that policy by the check of who
//! reaches the resource ([`TemplateRoles::resource_policy_findings`]: queue senders against
//! the roles granted the send, key users against the services publishing to the encrypted
//! topic, trust against the functions). Runs without an endpoint.

mod iam_common;

use std::fmt;

use iam_conformance::{
    Caller, Effect, Environment, OutsidePrincipal, Principal, PrincipalCondition,
    PrincipalOperator, ResourceStatement, TemplateRoles,
};

const ACCOUNT: &str = "123456789012";

fn project() -> TemplateRoles {
    let env = Environment::new("us-east-1", ACCOUNT).attribute(
        "PaymentsTable",
        "StreamArn",
        "arn:aws:dynamodb:us-east-1:123456789012:table/payments/stream/2024-01-01T00:00:00.000",
    );
    TemplateRoles::load_project(&env).unwrap_or_else(|e| panic!("{e}"))
}

/// The operators' role (the template's `PaymentsQueueOperatorRoleName`), holding the managed
/// policies attached to no role.
fn operators(roles: &TemplateRoles) -> Vec<OutsidePrincipal> {
    let name = &roles.parameters["PaymentsQueueOperatorRoleName"];
    vec![roles.unattached_policies_holder(format!("arn:aws:iam::{ACCOUNT}:role/{name}"))]
}

/// Mutations the checks may let through because they let no more callers in: (policy holder,
/// Sid, mutation as displayed). Every entry must name a mutation that is made and goes
/// unnoticed.
///
/// - `kms:*` -> `*` on the account's statement of the key policy: a key policy governs its key
///   only, so `*` there is `kms:*`.
const HARMLESS: &[(&str, &str, &str)] = &[("AlarmTopicKey", "AccountAdministers", "Action -> *")];

#[derive(Clone, Debug, PartialEq, Eq)]
enum Mutation {
    // Any statement.
    PrincipalToAny,
    ActionStar,
    ServiceWildcard(String),
    AddAction(String),
    ResourceToStar(usize),
    // An Allow's.
    RemoveCondition(usize),
    // A Deny's.
    RemoveStatement,
    EffectToAllow,
    ActionElsewhere(usize, String),
    ResourceElsewhere(usize, String),
    PrincipalToAccount,
    AddException(usize, String),
    ExceptPrincipalless,
}

impl fmt::Display for Mutation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PrincipalToAny => f.write_str("Principal -> *"),
            Self::ActionStar => f.write_str("Action -> *"),
            Self::ServiceWildcard(a) => write!(f, "Action -> {a}"),
            Self::AddAction(a) => write!(f, "add the action {a}"),
            Self::ResourceToStar(i) => write!(f, "Resource[{i}] -> *"),
            Self::RemoveCondition(c) => write!(f, "remove Condition[{c}]"),
            Self::RemoveStatement => f.write_str("remove the statement"),
            Self::EffectToAllow => f.write_str("Effect -> Allow"),
            Self::ActionElsewhere(i, a) => write!(f, "Action[{i}] -> {a}"),
            Self::ResourceElsewhere(i, r) => write!(f, "Resource[{i}] -> {r}"),
            Self::PrincipalToAccount => f.write_str("Principal -> this account"),
            Self::AddException(c, arn) => write!(f, "Condition[{c}] excepts {arn}"),
            Self::ExceptPrincipalless => f.write_str(
                "add Null aws:PrincipalArn false (requests without a principal excepted)",
            ),
        }
    }
}

impl Mutation {
    fn kind(&self) -> &'static str {
        match self {
            Self::PrincipalToAny => "Allow: principal -> *",
            Self::ActionStar => "Allow: action -> *",
            Self::ServiceWildcard(_) => "Allow: action -> service:*",
            Self::AddAction(_) => "Allow: add an unrelated action",
            Self::ResourceToStar(_) => "Allow: resource -> *",
            Self::RemoveCondition(_) => "Allow: remove a condition",
            Self::RemoveStatement => "Deny: remove the statement",
            Self::EffectToAllow => "Deny: effect -> Allow",
            Self::ActionElsewhere(..) => "Deny: action narrowed",
            Self::ResourceElsewhere(..) => "Deny: resource narrowed",
            Self::PrincipalToAccount => "Deny: principal narrowed to the account",
            Self::AddException(..) => "Deny: aws:PrincipalArn exception added",
            Self::ExceptPrincipalless => "Deny: requests without a principal excepted",
        }
    }
}

/// An unrelated action of each service, granted by no statement of the project.
fn unrelated(service: &str) -> String {
    match service {
        "kms" => "kms:ScheduleKeyDeletion",
        "sts" => "sts:TagSession",
        "sqs" => "sqs:PurgeQueue",
        other => panic!("no unrelated action for {other}"),
    }
    .to_owned()
}

fn service_of(s: &ResourceStatement) -> String {
    s.actions[0]
        .split(':')
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// The ARNs a `Deny`'s exception list could be widened with: every role of the template, a
/// wildcard over the account's roles, the account's root.
fn exceptions(roles: &TemplateRoles) -> Vec<String> {
    let mut out: Vec<String> = roles.resource_access.role_arns.values().cloned().collect();
    out.push(format!("arn:aws:iam::{ACCOUNT}:role/*"));
    out.push(format!("arn:aws:iam::{ACCOUNT}:root"));
    out
}

fn mutations(s: &ResourceStatement, exceptions: &[String]) -> Vec<Mutation> {
    let service = service_of(s);
    let mut out = Vec::new();
    match s.effect {
        Effect::Allow => {
            if s.principals != [Principal::Any] {
                out.push(Mutation::PrincipalToAny);
            }
            if s.actions != ["*"] {
                out.push(Mutation::ActionStar);
            }
            let wildcard = format!("{service}:*");
            if s.actions != [wildcard.as_str()] {
                out.push(Mutation::ServiceWildcard(wildcard));
            }
            let extra = unrelated(&service);
            if !s.actions.iter().any(|a| *a == extra || a.ends_with(":*")) {
                out.push(Mutation::AddAction(extra));
            }
            for (i, r) in s.resources.iter().enumerate() {
                if r != "*" {
                    out.push(Mutation::ResourceToStar(i));
                }
            }
            out.extend((0..s.conditions.len()).map(Mutation::RemoveCondition));
        }
        Effect::Deny => {
            out.push(Mutation::RemoveStatement);
            out.push(Mutation::EffectToAllow);
            for i in 0..s.actions.len() {
                out.push(Mutation::ActionElsewhere(i, unrelated(&service)));
            }
            for (i, r) in s.resources.iter().enumerate() {
                out.push(Mutation::ResourceElsewhere(i, format!("{r}-elsewhere")));
            }
            if s.principals.contains(&Principal::Any) {
                out.push(Mutation::PrincipalToAccount);
            }
            for (c, condition) in s.conditions.iter().enumerate() {
                if matches!(
                    condition.operator,
                    PrincipalOperator::ArnNotEquals | PrincipalOperator::ArnNotLike
                ) {
                    for arn in exceptions.iter().filter(|a| !condition.values.contains(a)) {
                        out.push(Mutation::AddException(c, arn.clone()));
                    }
                }
            }
            if !s
                .conditions
                .iter()
                .any(|c| c.operator == PrincipalOperator::Null)
            {
                out.push(Mutation::ExceptPrincipalless);
            }
        }
    }
    out
}

fn apply(s: &mut ResourceStatement, m: &Mutation) -> bool {
    match m {
        Mutation::PrincipalToAny => s.principals = vec![Principal::Any],
        Mutation::ActionStar => s.actions = vec!["*".into()],
        Mutation::ServiceWildcard(a) => s.actions = vec![a.clone()],
        Mutation::AddAction(a) => s.actions.push(a.clone()),
        Mutation::ResourceToStar(i) => s.resources[*i] = "*".into(),
        Mutation::RemoveCondition(c) => {
            s.conditions.remove(*c);
        }
        Mutation::RemoveStatement => return false,
        Mutation::EffectToAllow => s.effect = Effect::Allow,
        Mutation::ActionElsewhere(i, a) => s.actions[*i] = a.clone(),
        Mutation::ResourceElsewhere(i, r) => s.resources[*i] = r.clone(),
        Mutation::PrincipalToAccount => {
            s.principals = vec![Principal::Aws(format!("arn:aws:iam::{ACCOUNT}:root"))]
        }
        Mutation::AddException(c, arn) => s.conditions[*c].values.push(arn.clone()),
        Mutation::ExceptPrincipalless => s.conditions.push(PrincipalCondition {
            operator: PrincipalOperator::Null,
            values: vec!["false".into()],
        }),
    }
    true
}

#[test]
fn the_template_as_written_lets_in_exactly_who_needs_it() {
    let roles = project();
    let findings = roles.resource_policy_findings(&operators(&roles));
    let text: Vec<String> = findings.iter().map(ToString::to_string).collect();
    assert!(findings.is_empty(), "{}", text.join("\n"));
    // What the checks cover: every queue guarded, the key, every role's trust policy.
    let access = &roles.resource_access;
    for queue in [
        "PaymentsQueue",
        "PaymentsDeadLetterQueue",
        "ReceiptsQueue",
        "ReceiptsDeadLetterQueue",
        "PaymentsOutboxDeadLetterQueue",
    ] {
        assert!(access.queues.contains_key(queue), "{queue}");
    }
    assert_eq!(
        access
            .keys
            .get("AlarmTopicKey")
            .map(|u| u.iter().map(String::as_str).collect::<Vec<_>>()),
        Some(vec!["cloudwatch.amazonaws.com"])
    );
    assert!(access.queues["PaymentsDeadLetterQueue"].moved_to);
    assert!(!access.queues["PaymentsQueue"].moved_to);
    assert_eq!(
        access.role_arns.len(),
        roles.roles.len(),
        "every role's trust policy is read"
    );
}

#[test]
fn a_queue_without_a_policy_and_an_operator_without_the_send_are_reported() {
    let roles = project();
    // The operators' role without its managed policies: it is let through, and granted nothing.
    let findings = roles.queue_senders(&[]);
    assert!(
        findings.iter().any(|f| f.policy == "PaymentsQueuePolicy"
            && matches!(&f.caller, Caller::Arn(a) if a.ends_with(":role/payments-operator"))),
        "{findings:?}"
    );
    // Every queue policy gone: each queue is reported for callers no role lets send.
    let mut bare = roles.clone();
    bare.resource_access
        .policies
        .retain(|_, p| !matches!(p.attachment, iam_conformance::Attachment::Queues(_)));
    let findings = bare.queue_senders(&operators(&roles));
    for queue in bare.resource_access.queues.keys() {
        assert!(
            findings.iter().any(|f| &f.policy == queue),
            "{queue}: {findings:?}"
        );
    }
}

#[test]
fn every_mutation_that_lets_more_in_is_reported_for_its_policy() {
    let roles = project();
    let outside = operators(&roles);
    let exceptions = exceptions(&roles);
    let mut tally = iam_common::Tally::default();
    for (holder, policy) in &roles.resource_access.policies {
        let kind = match policy.attachment {
            iam_conformance::Attachment::Queues(_) => "queue policy",
            iam_conformance::Attachment::Key(_) => "key policy",
            iam_conformance::Attachment::Trust(_) => "trust policy",
        };
        for (index, statement) in policy.statements.iter().enumerate() {
            for m in mutations(statement, &exceptions) {
                let mut mutated = roles.clone();
                let statements = &mut mutated
                    .resource_access
                    .policies
                    .get_mut(holder)
                    .unwrap()
                    .statements;
                if !apply(&mut statements[index], &m) {
                    statements.remove(index);
                }
                let reported = mutated
                    .resource_policy_findings(&outside)
                    .iter()
                    .any(|f| f.policy.split('+').any(|p| p == holder));
                let kind = format!("{kind}: {}", m.kind());
                let sid = statement.id.sid.as_deref();
                tally.record(&kind, reported, holder, sid, m.to_string());
            }
        }
    }
    for kind in ["queue policy", "key policy", "trust policy"] {
        assert!(
            tally.counts.keys().any(|k| k.starts_with(kind)),
            "no {kind} mutated: {:?}",
            tally.counts
        );
    }
    tally.assert_reported_but("resource policies", HARMLESS);
}
