//! Who can reach each resource, by its resource policy and the callers' identity policies:
//! [`ResourceAccess`] (the template's queue policies, key policies and trust policies, with what
//! they guard), and the checks of [`TemplateRoles`] that compare each one, caller by caller,
//! with what the template's roles need ([`AccessFinding`]s):
//!
//! - [`queue_senders`](TemplateRoles::queue_senders): a queue's policy lets through exactly the
//!   principals whose identity policies grant `sqs:SendMessage` on it (the template's roles, and
//!   the principals outside the template given, such as the operators' role with the operators'
//!   managed policies); requests without a principal (a service's) only where SQS moves messages
//!   (a redrive policy's dead-letter target); and allows nothing.
//! - [`key_users`](TemplateRoles::key_users): a key policy lets the account administer the key
//!   (its root, which delegates to the principals' IAM policies), the services that publish to an SNS topic encrypted with it (a
//!   CloudWatch alarm's actions) use it (`kms:Decrypt`, `kms:GenerateDataKey*`, what SNS
//!   documents), and nobody else do anything.
//! - [`trust`](TemplateRoles::trust): a role may be assumed by Lambda (`sts:AssumeRole`) when a
//!   function runs with it, and by nobody else in any way.
//!
//! Each check probes callers (the template's roles, every principal a policy names, a role of
//! another account, the account's root, a role of the account the template does not know,
//! services, an anonymous caller) and actions, and reports every caller whose access differs
//! from what is needed.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_yaml_ng::Value;

use crate::cfn::{Resolver, get_att_target, intrinsic, key};
use crate::error::PolicyError;
use crate::policy::Role;
use crate::resource_policy::{
    Attachment, Caller, Principal, PrincipalOperator, ResourceDecision, ResourcePolicy, account_of,
    resource_statements,
};
use crate::roles::{TemplateRoles, items};

/// An account other than the stack's, for the probes.
const OTHER_ACCOUNT: &str = "210987654321";

/// The services probed besides those the policies name.
const SERVICES: &[&str] = &[
    "cloudwatch.amazonaws.com",
    "events.amazonaws.com",
    "lambda.amazonaws.com",
    "s3.amazonaws.com",
    "sns.amazonaws.com",
];

/// The SQS actions probed for an `Allow` in a queue policy.
const SQS_ACTIONS: &[&str] = &[
    "sqs:SendMessage",
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage",
    "sqs:PurgeQueue",
    "sqs:SetQueueAttributes",
];

/// The KMS actions probed on a key.
const KMS_ACTIONS: &[&str] = &[
    "kms:Decrypt",
    "kms:GenerateDataKey",
    "kms:GenerateDataKeyWithoutPlaintext",
    "kms:Encrypt",
    "kms:ReEncryptFrom",
    "kms:CreateGrant",
    "kms:DescribeKey",
    "kms:DisableKey",
    "kms:PutKeyPolicy",
    "kms:ScheduleKeyDeletion",
];

/// What a service publishing to an encrypted SNS topic needs of its key (SNS's documentation:
/// `kms:Decrypt` and `kms:GenerateDataKey*`), among [`KMS_ACTIONS`].
const KEY_USER_ACTIONS: &[&str] = &[
    "kms:Decrypt",
    "kms:GenerateDataKey",
    "kms:GenerateDataKeyWithoutPlaintext",
];

/// The STS actions probed on a role's trust policy.
const STS_ACTIONS: &[&str] = &[
    "sts:AssumeRole",
    "sts:AssumeRoleWithWebIdentity",
    "sts:AssumeRoleWithSAML",
    "sts:TagSession",
];

/// The service that assumes a function's role.
const LAMBDA: &str = "lambda.amazonaws.com";

/// A queue of the template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueTarget {
    /// Its ARN.
    pub arn: String,
    /// Whether SQS moves messages to it (some queue's redrive policy names it).
    pub moved_to: bool,
}

/// The template's resource policies and what they guard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceAccess {
    /// The stack's partition.
    pub partition: String,
    /// The stack's account.
    pub account_id: String,
    /// Queue policies, key policies and trust policies, by the logical id holding them.
    pub policies: BTreeMap<String, ResourcePolicy>,
    /// Queues by logical id.
    pub queues: BTreeMap<String, QueueTarget>,
    /// KMS keys by logical id, each with the services that use it.
    pub keys: BTreeMap<String, BTreeSet<String>>,
    /// Roles by logical id, with their ARNs.
    pub role_arns: BTreeMap<String, String>,
}

/// A principal outside the template, with its identity policies: the role an operator attaches
/// the operators' managed policies to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutsidePrincipal {
    /// Its ARN.
    pub arn: String,
    /// Its identity policies' statements.
    pub identity: Role,
}

/// A caller whose access to a resource differs from what is needed.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AccessFinding {
    /// The logical id of the policy's holder (queue policy, key, role); of the queue when no
    /// policy guards it.
    pub policy: String,
    /// The caller.
    pub caller: Caller,
    /// The action.
    pub action: String,
    /// What is wrong.
    pub why: String,
}

impl fmt::Display for AccessFinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} for {}: {}",
            self.policy, self.action, self.caller, self.why
        )
    }
}

/// Reads the resource-side of the template from its `resources`.
pub(crate) fn read(resolver: &Resolver<'_>) -> Result<ResourceAccess, PolicyError> {
    let env = resolver.env();
    let mut access = ResourceAccess {
        partition: env.partition.clone(),
        account_id: env.account_id.clone(),
        policies: BTreeMap::new(),
        queues: BTreeMap::new(),
        keys: BTreeMap::new(),
        role_arns: BTreeMap::new(),
    };
    let mut dead_letter_targets = BTreeSet::new();
    // Topics by the key encrypting them; the services publishing to each topic.
    let mut topic_keys: BTreeMap<String, String> = BTreeMap::new();
    let mut publishers: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (id, resource) in resolver.resources() {
        let id = key(id, "Resources")?;
        let at = format!("Resources.{id}.Properties");
        let properties = resource.get("Properties");
        let property = |name: &str| properties.and_then(|p| p.get(name));
        let kind = resource.get("Type").and_then(Value::as_str).unwrap_or("");
        // A policy left out is one with no statement (a role nobody may assume).
        let mut policy = |document: Option<&Value>, name: &str, attachment| {
            let statements = match document {
                Some(d) => resource_statements(d, id, resolver, &format!("{at}.{name}"))?,
                None => Vec::new(),
            };
            access.policies.insert(
                id.to_owned(),
                ResourcePolicy {
                    logical_id: id.to_owned(),
                    attachment,
                    statements,
                },
            );
            Ok::<_, PolicyError>(())
        };
        match kind {
            "AWS::SQS::QueuePolicy" => {
                let queues = property("Queues")
                    .map(items)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|q| {
                        referenced(q).ok_or_else(|| {
                            PolicyError::unsupported(
                                &format!("{at}.Queues"),
                                "a queue named other than by !Ref of a template queue",
                            )
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                policy(
                    property("PolicyDocument"),
                    "PolicyDocument",
                    Attachment::Queues(queues),
                )?;
            }
            "AWS::KMS::Key" => {
                policy(
                    property("KeyPolicy"),
                    "KeyPolicy",
                    Attachment::Key(id.to_owned()),
                )?;
                access.keys.insert(id.to_owned(), BTreeSet::new());
            }
            "AWS::IAM::Role" => {
                policy(
                    property("AssumeRolePolicyDocument"),
                    "AssumeRolePolicyDocument",
                    Attachment::Trust(id.to_owned()),
                )?;
                let arn = resolver.get_att(id, "Arn", &at)?;
                access.role_arns.insert(id.to_owned(), arn);
            }
            "AWS::SQS::Queue" => {
                let arn = resolver.get_att(id, "Arn", &at)?;
                access.queues.insert(
                    id.to_owned(),
                    QueueTarget {
                        arn,
                        moved_to: false,
                    },
                );
                if let Some(target) = property("RedrivePolicy")
                    .and_then(|r| r.get("deadLetterTargetArn"))
                    .and_then(referenced)
                {
                    dead_letter_targets.insert(target);
                }
            }
            "AWS::SNS::Topic" => {
                if let Some(key) = property("KmsMasterKeyId").and_then(referenced) {
                    topic_keys.insert(id.to_owned(), key);
                }
            }
            "AWS::CloudWatch::Alarm" => {
                for list in ["AlarmActions", "OKActions", "InsufficientDataActions"] {
                    for topic in property(list)
                        .map(items)
                        .unwrap_or_default()
                        .into_iter()
                        .filter_map(referenced)
                    {
                        publishers
                            .entry(topic)
                            .or_default()
                            .insert("cloudwatch.amazonaws.com".to_owned());
                    }
                }
            }
            "AWS::S3::BucketPolicy"
            | "AWS::SNS::TopicPolicy"
            | "AWS::SQS::QueueInlinePolicy"
            | "AWS::SNS::TopicInlinePolicy" => {
                return Err(PolicyError::unsupported(
                    &at,
                    format!("a resource policy ({kind})"),
                ));
            }
            _ => {}
        }
    }
    for target in dead_letter_targets {
        if let Some(q) = access.queues.get_mut(&target) {
            q.moved_to = true;
        }
    }
    for (topic, key) in topic_keys {
        let services = publishers.remove(&topic).unwrap_or_default();
        if let Some(users) = access.keys.get_mut(&key) {
            users.extend(services);
        }
    }
    Ok(access)
}

/// The logical id of a `!Ref X` or `!GetAtt X.Arn`.
fn referenced(v: &Value) -> Option<String> {
    match intrinsic(v)? {
        (f, Value::String(id)) if f == "Ref" => Some(id.clone()),
        (f, arg) if f == "GetAtt" => get_att_target(arg).map(|(id, _)| id),
        _ => None,
    }
}

/// Whether `policies` (those guarding one resource) decide `caller`'s `action` on `resource`:
/// (denied, allowed).
fn decide<'p>(
    policies: impl Iterator<Item = &'p ResourcePolicy> + Clone,
    caller: &Caller,
    action: &str,
    resource: &str,
) -> (bool, bool) {
    let decisions: Vec<ResourceDecision> = policies
        .map(|p| p.decide(caller, action, resource))
        .collect();
    let denied = decisions
        .iter()
        .any(|d| matches!(d, ResourceDecision::Deny(_)));
    let allowed = !denied
        && decisions
            .iter()
            .any(|d| matches!(d, ResourceDecision::Allow(_)));
    (denied, allowed)
}

impl ResourceAccess {
    /// Callers without identity policies: the account's root and a role of the account the
    /// template does not know, another account's role and root, services (those probed and
    /// those the policies name), an anonymous caller.
    fn strangers(&self) -> Vec<Caller> {
        let (p, a) = (&self.partition, &self.account_id);
        let mut out: BTreeSet<Caller> = SERVICES
            .iter()
            .map(|s| Caller::Service((*s).to_owned()))
            .collect();
        out.extend([
            Caller::Arn(format!("arn:{p}:iam::{a}:root")),
            Caller::Arn(format!("arn:{p}:iam::{a}:role/not-in-the-template")),
            Caller::Arn(format!("arn:{p}:iam::{OTHER_ACCOUNT}:root")),
            Caller::Arn(format!("arn:{p}:iam::{OTHER_ACCOUNT}:role/someone")),
            Caller::Anonymous,
        ]);
        // Every principal the policies name, in a Principal or an exact ARN of a condition.
        for s in self.policies.values().flat_map(|p| &p.statements) {
            for principal in &s.principals {
                match principal {
                    Principal::Service(name) => out.insert(Caller::Service(name.clone())),
                    Principal::Aws(arn) => out.insert(Caller::Arn(arn.clone())),
                    Principal::Any => false,
                };
            }
            for c in s
                .conditions
                .iter()
                .filter(|c| c.operator != PrincipalOperator::Null)
            {
                out.extend(
                    c.values
                        .iter()
                        .filter(|v| !v.contains(['*', '?']))
                        .map(|v| Caller::Arn(v.clone())),
                );
            }
        }
        out.into_iter().collect()
    }

    fn guarding<'a>(
        &'a self,
        matches: impl Fn(&Attachment) -> bool + Clone + 'a,
    ) -> impl Iterator<Item = &'a ResourcePolicy> + Clone + 'a {
        self.policies
            .values()
            .filter(move |p| matches(&p.attachment))
    }
}

impl TemplateRoles {
    /// Every queue's senders, caller by caller: its policy lets through exactly the principals
    /// whose identity policies grant `sqs:SendMessage` on it (the roles, and `outside`: the
    /// principals outside the template, with their own identity policies), requests without a
    /// principal only where SQS moves messages (a redrive policy's dead-letter target), and
    /// allows nothing.
    pub fn queue_senders(&self, outside: &[OutsidePrincipal]) -> Vec<AccessFinding> {
        let access = &self.resource_access;
        let mut callers: Vec<(Caller, Option<&Role>)> = self
            .roles
            .iter()
            .filter_map(|(id, role)| {
                let arn = access.role_arns.get(id)?;
                Some((Caller::Arn(arn.clone()), Some(role)))
            })
            .collect();
        callers.extend(
            outside
                .iter()
                .map(|o| (Caller::Arn(o.arn.clone()), Some(&o.identity))),
        );
        let strangers: Vec<Caller> = access
            .strangers()
            .into_iter()
            .filter(|c| callers.iter().all(|(known, _)| known != c))
            .collect();
        callers.extend(strangers.into_iter().map(|c| (c, None)));
        let mut out = Vec::new();
        for (queue_id, queue) in &access.queues {
            let guarding = access
                .guarding(move |a| matches!(a, Attachment::Queues(q) if q.contains(queue_id)));
            let holder = || {
                let ids: Vec<&str> = guarding.clone().map(|p| p.logical_id.as_str()).collect();
                if ids.is_empty() {
                    queue_id.clone()
                } else {
                    ids.join("+")
                }
            };
            let mut finding = |caller: &Caller, action: &str, why: String| {
                out.push(AccessFinding {
                    policy: holder(),
                    caller: caller.clone(),
                    action: action.to_owned(),
                    why,
                })
            };
            for (caller, identity) in &callers {
                for action in SQS_ACTIONS {
                    if decide(guarding.clone(), caller, action, &queue.arn).1 {
                        finding(
                            caller,
                            action,
                            format!(
                                "the policy of {queue_id} allows it: a queue policy only narrows who sends"
                            ),
                        );
                    }
                }
                let action = "sqs:SendMessage";
                let (denied, _) = decide(guarding.clone(), caller, action, &queue.arn);
                let granted = identity
                    .is_some_and(|role| role.evaluate(action, &queue.arn, None).is_allowed());
                let why = match caller {
                    Caller::Service(_) | Caller::Anonymous if queue.moved_to && denied => Some(
                        "a request without a principal is denied, and SQS's own move to this dead-letter queue is one",
                    ),
                    Caller::Service(_) | Caller::Anonymous if !queue.moved_to && !denied => Some(
                        "not denied to a request without a principal, on a queue SQS moves nothing to",
                    ),
                    Caller::Service(_) | Caller::Anonymous => None,
                    Caller::Arn(_) if granted && denied => {
                        Some("denied, though its identity policies grant the send")
                    }
                    Caller::Arn(_) if !granted && !denied => Some(
                        "not denied, though no identity policy of it grants the send: only the queue's senders may be let through",
                    ),
                    Caller::Arn(_) => None,
                };
                if let Some(why) = why {
                    finding(caller, action, format!("on {queue_id}: {why}"));
                }
            }
        }
        out
    }

    /// Every key policy against its key's users: the account administers the key (its root, which
    /// delegates to IAM), the services publishing to an SNS topic encrypted with it use it
    /// (`kms:Decrypt`, `kms:GenerateDataKey*`), nobody else does anything.
    pub fn key_users(&self) -> Vec<AccessFinding> {
        let access = &self.resource_access;
        let mut out = Vec::new();
        for (key_id, users) in &access.keys {
            let guarding = access.guarding(move |a| matches!(a, Attachment::Key(k) if k == key_id));
            for caller in access.strangers() {
                for action in KMS_ACTIONS {
                    let (_, allowed) = decide(guarding.clone(), &caller, action, "*");
                    let needed = match &caller {
                        // The account's root stands for its principals: IAM decides for them.
                        Caller::Arn(arn) => account_of(arn) == Some(access.account_id.as_str()),
                        Caller::Service(s) => {
                            users.contains(s) && KEY_USER_ACTIONS.contains(action)
                        }
                        Caller::Anonymous => false,
                    };
                    let why = match (allowed, needed) {
                        (true, false) => {
                            "allowed, and not needed: only the account administers the key, and its users use it"
                        }
                        (false, true) => "needed, and not allowed",
                        _ => continue,
                    };
                    out.push(AccessFinding {
                        policy: key_id.clone(),
                        caller: caller.clone(),
                        action: (*action).to_owned(),
                        why: why.to_owned(),
                    });
                }
            }
        }
        out
    }

    /// Every role's trust policy: Lambda may assume a role a function runs with
    /// (`sts:AssumeRole`), nobody else may assume any role in any way.
    pub fn trust(&self) -> Vec<AccessFinding> {
        let access = &self.resource_access;
        let mut out = Vec::new();
        for (role_id, arn) in &access.role_arns {
            let guarding =
                access.guarding(move |a| matches!(a, Attachment::Trust(r) if r == role_id));
            let runs_functions = self.functions.values().any(|f| &f.role == role_id);
            for caller in access.strangers() {
                for action in STS_ACTIONS {
                    let (_, allowed) = decide(guarding.clone(), &caller, action, arn);
                    let needed = runs_functions
                        && *action == "sts:AssumeRole"
                        && caller == Caller::Service(LAMBDA.to_owned());
                    let why = match (allowed, needed) {
                        (true, false) => {
                            "allowed, and not needed: only Lambda assumes a function's role"
                        }
                        (false, true) => {
                            "needed by the functions running with the role, and not allowed"
                        }
                        _ => continue,
                    };
                    out.push(AccessFinding {
                        policy: role_id.clone(),
                        caller: caller.clone(),
                        action: (*action).to_owned(),
                        why: why.to_owned(),
                    });
                }
            }
        }
        out
    }

    /// [`queue_senders`](Self::queue_senders), [`key_users`](Self::key_users) and
    /// [`trust`](Self::trust) together.
    pub fn resource_policy_findings(&self, outside: &[OutsidePrincipal]) -> Vec<AccessFinding> {
        let mut out = self.queue_senders(outside);
        out.extend(self.key_users());
        out.extend(self.trust());
        out
    }

    /// The principal that the template's managed policies attached to no role are for (the
    /// operators' role, named by the caller): `arn` with all their statements.
    pub fn unattached_policies_holder(&self, arn: impl Into<String>) -> OutsidePrincipal {
        let statements = self
            .unattached_managed_policies()
            .flat_map(|(_, p)| p.statements.iter().cloned())
            .collect();
        OutsidePrincipal {
            arn: arn.into(),
            identity: Role {
                logical_id: "(outside the template)".into(),
                statements,
            },
        }
    }
}
