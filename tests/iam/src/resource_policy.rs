//! Resource-based policies as a model: a queue's `AWS::SQS::QueuePolicy`, a KMS key's
//! `KeyPolicy`, a role's trust policy (`AssumeRolePolicyDocument`), and their evaluation for one
//! caller.
//!
//! As with identity policies, only what the project writes is modelled and everything else is
//! rejected when parsing: `Principal` (`"*"`, `AWS`, `Service`), `Action`, `Resource` (none in a
//! trust policy: the role itself), and conditions on `aws:PrincipalArn` with the operators
//! `ArnEquals`, `ArnLike`, `ArnNotEquals`, `ArnNotLike` and `Null`. As AWS documents, a negated
//! operator holds when the request has no `aws:PrincipalArn` (a service acting on its own, an
//! anonymous request), a positive one does not, and `Null: "true"` holds exactly then.

use std::fmt;

use serde_yaml_ng::{Mapping, Value};

use crate::cfn::{Resolver, key};
use crate::error::PolicyError;
use crate::policy::{Effect, StatementRef};
use crate::roles::{each_statement, mapping, sid_and_effect};
use crate::wildcard::wildcard_match;

/// The only condition key supported in a resource policy.
const PRINCIPAL_ARN: &str = "aws:PrincipalArn";

/// Who a statement is about.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Principal {
    /// `"*"` (or `AWS: "*"`): everyone, anonymous requests included.
    Any,
    /// `AWS: ARN`: that principal; an account's root (`arn:...:iam::ACCOUNT:root`, or the bare
    /// account id) stands for every principal of the account.
    Aws(String),
    /// `Service: NAME` (`cloudwatch.amazonaws.com`).
    Service(String),
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Any => f.write_str("*"),
            Self::Aws(arn) => write!(f, "AWS {arn}"),
            Self::Service(s) => write!(f, "Service {s}"),
        }
    }
}

/// Who makes a request.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Caller {
    /// A principal of IAM (a role, a user, an account's root), by ARN.
    Arn(String),
    /// An AWS service acting on its own (no `aws:PrincipalArn`).
    Service(String),
    /// An anonymous request (no `aws:PrincipalArn`).
    Anonymous,
}

impl Caller {
    fn principal_arn(&self) -> Option<&str> {
        match self {
            Self::Arn(arn) => Some(arn),
            Self::Service(_) | Self::Anonymous => None,
        }
    }
}

impl fmt::Display for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Arn(arn) => f.write_str(arn),
            Self::Service(s) => write!(f, "the service {s}"),
            Self::Anonymous => f.write_str("an anonymous caller"),
        }
    }
}

impl Principal {
    /// Whether the statement's principal is `caller`.
    pub fn matches(&self, caller: &Caller) -> bool {
        match (self, caller) {
            (Self::Any, _) => true,
            (Self::Aws(p), Caller::Arn(arn)) => {
                p == arn || account_root(p).is_some_and(|account| account_of(arn) == Some(account))
            }
            (Self::Service(s), Caller::Service(c)) => s.eq_ignore_ascii_case(c),
            _ => false,
        }
    }
}

/// The account whose root `principal` names (`arn:...:iam::ACCOUNT:root`, or `ACCOUNT`).
fn account_root(principal: &str) -> Option<&str> {
    if principal.len() == 12 && principal.bytes().all(|b| b.is_ascii_digit()) {
        return Some(principal);
    }
    let rest = principal.strip_suffix(":root")?;
    rest.rsplit_once(":iam::").map(|(_, account)| account)
}

/// The account of an IAM ARN (`arn:PARTITION:iam::ACCOUNT:...`).
pub fn account_of(arn: &str) -> Option<&str> {
    let mut parts = arn.splitn(6, ':');
    let (_, _, service, _, account) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    (service == "iam").then_some(account)
}

/// A condition operator of a resource policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PrincipalOperator {
    /// `ArnEquals` (wildcards allowed, as in `ArnLike`).
    ArnEquals,
    /// `ArnLike`.
    ArnLike,
    /// `ArnNotEquals`.
    ArnNotEquals,
    /// `ArnNotLike`.
    ArnNotLike,
    /// `Null`: `"true"` when the key is absent, `"false"` when present.
    Null,
}

impl PrincipalOperator {
    const ALL: [Self; 5] = [
        Self::ArnEquals,
        Self::ArnLike,
        Self::ArnNotEquals,
        Self::ArnNotLike,
        Self::Null,
    ];

    /// The operator as written in a policy.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ArnEquals => "ArnEquals",
            Self::ArnLike => "ArnLike",
            Self::ArnNotEquals => "ArnNotEquals",
            Self::ArnNotLike => "ArnNotLike",
            Self::Null => "Null",
        }
    }
}

/// One condition on `aws:PrincipalArn`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PrincipalCondition {
    /// The operator.
    pub operator: PrincipalOperator,
    /// The values (ARN patterns; `"true"`/`"false"` for `Null`).
    pub values: Vec<String>,
}

impl PrincipalCondition {
    /// Whether it holds for a request whose `aws:PrincipalArn` is `arn`.
    pub fn holds(&self, arn: Option<&str>) -> bool {
        let any = |arn: &str| self.values.iter().any(|v| wildcard_match(v, arn, false));
        match (self.operator, arn) {
            (PrincipalOperator::Null, arn) => self
                .values
                .iter()
                .all(|v| (v.eq_ignore_ascii_case("true")) == arn.is_none()),
            (PrincipalOperator::ArnEquals | PrincipalOperator::ArnLike, Some(arn)) => any(arn),
            (PrincipalOperator::ArnEquals | PrincipalOperator::ArnLike, None) => false,
            (PrincipalOperator::ArnNotEquals | PrincipalOperator::ArnNotLike, Some(arn)) => {
                !any(arn)
            }
            (PrincipalOperator::ArnNotEquals | PrincipalOperator::ArnNotLike, None) => true,
        }
    }
}

/// One statement of a resource policy, its intrinsic functions resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceStatement {
    /// Where it is (`policy`: the logical id of the resource holding the policy).
    pub id: StatementRef,
    /// `Allow` or `Deny`.
    pub effect: Effect,
    /// Its principals (any of which it applies to).
    pub principals: Vec<Principal>,
    /// Action patterns.
    pub actions: Vec<String>,
    /// Resource patterns (`["*"]` in a trust policy, which names none).
    pub resources: Vec<String>,
    /// Conditions on `aws:PrincipalArn`, all of which must hold.
    pub conditions: Vec<PrincipalCondition>,
}

impl ResourceStatement {
    /// Whether it applies to `caller`'s `action` on `resource`.
    pub fn applies(&self, caller: &Caller, action: &str, resource: &str) -> bool {
        self.principals.iter().any(|p| p.matches(caller))
            && self.actions.iter().any(|a| wildcard_match(a, action, true))
            && self
                .resources
                .iter()
                .any(|r| wildcard_match(r, resource, false))
            && self
                .conditions
                .iter()
                .all(|c| c.holds(caller.principal_arn()))
    }
}

/// What a resource policy decides for one request, on its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResourceDecision {
    /// A `Deny` applies.
    Deny(StatementRef),
    /// An `Allow` applies, and no `Deny`.
    Allow(StatementRef),
    /// Neither: the caller's identity policies decide.
    NotApplicable,
}

/// What a resource policy is attached to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Attachment {
    /// An `AWS::SQS::QueuePolicy`, on these queues (logical ids).
    Queues(Vec<String>),
    /// The `KeyPolicy` of the `AWS::KMS::Key` of this logical id.
    Key(String),
    /// The trust policy of the `AWS::IAM::Role` of this logical id.
    Trust(String),
}

/// A resource policy of the template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourcePolicy {
    /// The logical id of the resource holding it (the queue policy, the key, the role).
    pub logical_id: String,
    /// What it is attached to.
    pub attachment: Attachment,
    /// Its statements.
    pub statements: Vec<ResourceStatement>,
}

impl ResourcePolicy {
    /// The decision for `caller`'s `action` on `resource`: a `Deny` wins over an `Allow`.
    pub fn decide(&self, caller: &Caller, action: &str, resource: &str) -> ResourceDecision {
        let applying = |effect| {
            self.statements
                .iter()
                .find(|s| s.effect == effect && s.applies(caller, action, resource))
        };
        if let Some(s) = applying(Effect::Deny) {
            return ResourceDecision::Deny(s.id.clone());
        }
        match applying(Effect::Allow) {
            Some(s) => ResourceDecision::Allow(s.id.clone()),
            None => ResourceDecision::NotApplicable,
        }
    }
}

/// The statements of the resource policy `document`, held by `logical_id`.
pub(crate) fn resource_statements(
    document: &Value,
    logical_id: &str,
    resolver: &Resolver<'_>,
    at: &str,
) -> Result<Vec<ResourceStatement>, PolicyError> {
    each_statement(document, at, |s, index, at| {
        resource_statement(s, logical_id, index, resolver, at)
    })
}

fn resource_statement(
    s: &Mapping,
    policy: &str,
    index: usize,
    resolver: &Resolver<'_>,
    at: &str,
) -> Result<ResourceStatement, PolicyError> {
    let supported = [
        "Sid",
        "Effect",
        "Principal",
        "Action",
        "Resource",
        "Condition",
    ];
    let (sid, effect) = sid_and_effect(s, &supported, resolver, at)?;
    let field = |name: &str| {
        s.get(name)
            .ok_or_else(|| PolicyError::invalid(at, format!("no {name}")))
    };
    let resources = match s.get("Resource") {
        Some(r) => resolver.strings(r, &format!("{at}.Resource"))?,
        None => vec!["*".to_owned()],
    };
    let conditions = match s.get("Condition") {
        Some(c) => principal_conditions(c, resolver, &format!("{at}.Condition"))?,
        None => Vec::new(),
    };
    Ok(ResourceStatement {
        id: StatementRef {
            policy: policy.to_owned(),
            sid,
            index,
        },
        effect,
        principals: principals(field("Principal")?, resolver, &format!("{at}.Principal"))?,
        actions: resolver.strings(field("Action")?, &format!("{at}.Action"))?,
        resources,
        conditions,
    })
}

fn principals(v: &Value, resolver: &Resolver<'_>, at: &str) -> Result<Vec<Principal>, PolicyError> {
    if v.as_str() == Some("*") {
        return Ok(vec![Principal::Any]);
    }
    let mut out = Vec::new();
    for (kind, values) in mapping(Some(v), at)? {
        let kind = key(kind, at)?;
        let at = format!("{at}.{kind}");
        for value in resolver.strings(values, &at)? {
            out.push(match kind {
                "AWS" if value == "*" => Principal::Any,
                "AWS" => Principal::Aws(value),
                "Service" => Principal::Service(value),
                other => {
                    return Err(PolicyError::unsupported(
                        &at,
                        format!("the principal type {other}"),
                    ));
                }
            });
        }
    }
    Ok(out)
}

fn principal_conditions(
    c: &Value,
    resolver: &Resolver<'_>,
    at: &str,
) -> Result<Vec<PrincipalCondition>, PolicyError> {
    let mut out = Vec::new();
    for (operator, keys) in mapping(Some(c), at)? {
        let operator = key(operator, at)?;
        let at = format!("{at}.{operator}");
        let parsed = PrincipalOperator::ALL
            .into_iter()
            .find(|o| o.as_str() == operator)
            .ok_or_else(|| {
                PolicyError::unsupported(&at, format!("the condition operator {operator}"))
            })?;
        for (condition_key, values) in mapping(Some(keys), &at)? {
            let condition_key = key(condition_key, &at)?;
            if !condition_key.eq_ignore_ascii_case(PRINCIPAL_ARN) {
                return Err(PolicyError::unsupported(
                    &at,
                    format!("the condition key {condition_key}"),
                ));
            }
            out.push(PrincipalCondition {
                operator: parsed,
                values: resolver.strings(values, &format!("{at}.{condition_key}"))?,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(operator: PrincipalOperator, values: &[&str]) -> PrincipalCondition {
        PrincipalCondition {
            operator,
            values: values.iter().map(|v| (*v).to_owned()).collect(),
        }
    }

    #[test]
    fn negated_operators_hold_without_a_principal_arn_and_null_tells_which() {
        let role = "arn:aws:iam::123456789012:role/r";
        let not = condition(PrincipalOperator::ArnNotEquals, &[role]);
        assert!(not.holds(None));
        assert!(!not.holds(Some(role)));
        assert!(not.holds(Some("arn:aws:iam::123456789012:role/other")));
        let like = condition(
            PrincipalOperator::ArnLike,
            &["arn:aws:iam::123456789012:role/*"],
        );
        assert!(like.holds(Some(role)) && !like.holds(None));
        let present = condition(PrincipalOperator::Null, &["false"]);
        assert!(present.holds(Some(role)) && !present.holds(None));
    }

    #[test]
    fn an_account_root_stands_for_the_account() {
        let root = Principal::Aws("arn:aws:iam::123456789012:root".into());
        assert!(root.matches(&Caller::Arn("arn:aws:iam::123456789012:role/r".into())));
        assert!(!root.matches(&Caller::Arn("arn:aws:iam::210987654321:role/r".into())));
        assert!(!root.matches(&Caller::Anonymous));
        let service = Principal::Service("cloudwatch.amazonaws.com".into());
        assert!(service.matches(&Caller::Service("cloudwatch.amazonaws.com".into())));
        assert!(!service.matches(&Caller::Service("sns.amazonaws.com".into())));
    }
}
