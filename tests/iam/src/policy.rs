//! Identity policies as a model, and their evaluation for one request.
//!
//! Only what the project's roles use is modelled, and everything else is rejected when parsing
//! (see [`PolicyError`](crate::PolicyError)), so that an evaluation never silently ignores a
//! part of a policy: `Effect` `Allow`/`Deny`, `Action` and `Resource` (a string or a list, with
//! `*`/`?` wildcards), and `Condition` with the operators `ForAllValues:StringLike` and
//! `ForAllValues:StringEquals` on the key `dynamodb:LeadingKeys`.
//!
//! Evaluation follows IAM's logic for identity policies: an explicit deny wins over any allow,
//! an allow wins over the implicit deny. Actions match case-insensitively, resources and
//! condition values case-sensitively. `ForAllValues` holds when every leading key of the request
//! matches one of the condition's values — and, as AWS documents, also when the request has no
//! leading keys at all.

use std::fmt;

use crate::wildcard::wildcard_match;

/// A statement's effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Effect {
    /// `Allow`.
    Allow,
    /// `Deny`.
    Deny,
}

/// Where a statement is: its inline policy, its `Sid` and its position.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StatementRef {
    /// The `PolicyName`.
    pub policy: String,
    /// The `Sid`, if any.
    pub sid: Option<String>,
    /// Its index in the policy's `Statement` list.
    pub index: usize,
}

impl fmt::Display for StatementRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.sid {
            Some(sid) => write!(f, "{}/{sid}", self.policy),
            None => write!(f, "{}/#{}", self.policy, self.index),
        }
    }
}

/// A supported condition operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConditionOperator {
    /// `ForAllValues:StringLike`: every request value matches a pattern (`*`, `?`).
    ForAllValuesStringLike,
    /// `ForAllValues:StringEquals`: every request value equals a value.
    ForAllValuesStringEquals,
}

impl ConditionOperator {
    /// The operator as written in a policy.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ForAllValuesStringLike => "ForAllValues:StringLike",
            Self::ForAllValuesStringEquals => "ForAllValues:StringEquals",
        }
    }

    /// The operator named `name`, if supported.
    pub fn parse(name: &str) -> Option<Self> {
        [Self::ForAllValuesStringLike, Self::ForAllValuesStringEquals]
            .into_iter()
            .find(|o| o.as_str() == name)
    }
}

/// The only condition key supported.
pub(crate) const LEADING_KEYS: &str = "dynamodb:LeadingKeys";

/// One condition on `dynamodb:LeadingKeys`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Condition {
    /// The operator.
    pub operator: ConditionOperator,
    /// The values (patterns for `StringLike`); a request value must match one of them.
    pub values: Vec<String>,
}

impl Condition {
    /// Whether the request's leading keys satisfy it (`None`: the request has no
    /// `dynamodb:LeadingKeys`, which a `ForAllValues` condition lets through).
    pub fn holds(&self, leading_keys: Option<&[String]>) -> bool {
        leading_keys.unwrap_or_default().iter().all(|key| {
            self.values.iter().any(|v| match self.operator {
                ConditionOperator::ForAllValuesStringLike => wildcard_match(v, key, false),
                ConditionOperator::ForAllValuesStringEquals => v == key,
            })
        })
    }
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {LEADING_KEYS} {:?}",
            self.operator.as_str(),
            self.values
        )
    }
}

/// One statement, its intrinsic functions resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Statement {
    /// Where it is.
    pub id: StatementRef,
    /// `Allow` or `Deny`.
    pub effect: Effect,
    /// Action patterns (`dynamodb:UpdateItem`, `dynamodb:Get*`, `*`).
    pub actions: Vec<String>,
    /// Resource ARN patterns (`arn:aws:dynamodb:...:table/t/index/*`, `*`).
    pub resources: Vec<String>,
    /// Conditions, all of which must hold.
    pub conditions: Vec<Condition>,
}

impl Statement {
    /// Whether it applies to `action` on `resource`, conditions aside.
    pub fn matches(&self, action: &str, resource: &str) -> bool {
        self.actions.iter().any(|a| wildcard_match(a, action, true))
            && self
                .resources
                .iter()
                .any(|r| wildcard_match(r, resource, false))
    }

    /// The first condition that does not hold for `leading_keys`.
    pub fn failed_condition(&self, leading_keys: Option<&[String]>) -> Option<&Condition> {
        self.conditions.iter().find(|c| !c.holds(leading_keys))
    }
}

/// An `Allow` statement's pair of one action pattern and one resource pattern.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Grant {
    /// The statement.
    pub statement: StatementRef,
    /// The action pattern.
    pub action: String,
    /// The resource pattern.
    pub resource: String,
    /// The statement's conditions.
    pub conditions: Vec<Condition>,
}

impl Grant {
    /// Whether this pair covers `action` on `resource`.
    pub fn covers(&self, action: &str, resource: &str) -> bool {
        wildcard_match(&self.action, action, true)
            && wildcard_match(&self.resource, resource, false)
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on {}", self.action, self.resource)?;
        for c in &self.conditions {
            write!(f, " if {c}")?;
        }
        write!(f, " ({})", self.statement)
    }
}

/// What IAM decides for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Allowed, by these statements (every `Allow` whose action, resource and conditions match).
    Allow {
        /// The allowing statements.
        statements: Vec<StatementRef>,
    },
    /// Denied by a matching `Deny` statement.
    ExplicitDeny {
        /// The denying statement.
        statement: StatementRef,
    },
    /// No `Allow` applies. `near_misses` are the `Allow` statements that match the action and
    /// resource but whose condition fails, with the condition.
    ImplicitDeny {
        /// Statements whose condition failed.
        near_misses: Vec<(StatementRef, Condition)>,
    },
}

impl Decision {
    /// Whether the request is allowed.
    pub fn is_allowed(&self) -> bool {
        matches!(self, Self::Allow { .. })
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Allow { statements } => {
                let s: Vec<String> = statements.iter().map(ToString::to_string).collect();
                write!(f, "allowed by {}", s.join(", "))
            }
            Self::ExplicitDeny { statement } => write!(f, "explicitly denied by {statement}"),
            Self::ImplicitDeny { near_misses } if near_misses.is_empty() => {
                f.write_str("no Allow statement matches the action and resource")
            }
            Self::ImplicitDeny { near_misses } => {
                let s: Vec<String> = near_misses
                    .iter()
                    .map(|(s, c)| format!("{s} requires {c}"))
                    .collect();
                write!(
                    f,
                    "the condition of the matching Allow fails: {}",
                    s.join("; ")
                )
            }
        }
    }
}

/// An IAM role's inline policies, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Role {
    /// The role's logical id in the template.
    pub logical_id: String,
    /// Every statement of its inline policies, in order.
    pub statements: Vec<Statement>,
}

impl Role {
    /// The decision for `action` on `resource` with the request's `leading_keys` (`None`: the
    /// request has no `dynamodb:LeadingKeys`).
    ///
    /// ```
    /// use iam_conformance::{Decision, Effect, Role, Statement, StatementRef};
    ///
    /// let statement = |effect, sid: &str, action: &str| Statement {
    ///     id: StatementRef { policy: "p".into(), sid: Some(sid.into()), index: 0 },
    ///     effect,
    ///     actions: vec![action.into()],
    ///     resources: vec!["arn:aws:sqs:us-east-1:123456789012:*".into()],
    ///     conditions: vec![],
    /// };
    /// let role = Role {
    ///     logical_id: "R".into(),
    ///     statements: vec![statement(Effect::Allow, "All", "sqs:*"), statement(Effect::Deny, "NoPurge", "sqs:PurgeQueue")],
    /// };
    /// let queue = "arn:aws:sqs:us-east-1:123456789012:q";
    /// assert!(role.evaluate("sqs:SendMessage", queue, None).is_allowed());
    /// assert!(matches!(role.evaluate("sqs:PurgeQueue", queue, None), Decision::ExplicitDeny { .. }));
    /// assert!(!role.evaluate("dynamodb:GetItem", queue, None).is_allowed());
    /// ```
    pub fn evaluate(
        &self,
        action: &str,
        resource: &str,
        leading_keys: Option<&[String]>,
    ) -> Decision {
        let applicable = || {
            self.statements
                .iter()
                .filter(move |s| s.matches(action, resource))
        };
        if let Some(deny) = applicable()
            .filter(|s| s.effect == Effect::Deny)
            .find(|s| s.failed_condition(leading_keys).is_none())
        {
            return Decision::ExplicitDeny {
                statement: deny.id.clone(),
            };
        }
        let mut statements = Vec::new();
        let mut near_misses = Vec::new();
        for s in applicable().filter(|s| s.effect == Effect::Allow) {
            match s.failed_condition(leading_keys) {
                None => statements.push(s.id.clone()),
                Some(c) => near_misses.push((s.id.clone(), c.clone())),
            }
        }
        if statements.is_empty() {
            Decision::ImplicitDeny { near_misses }
        } else {
            Decision::Allow { statements }
        }
    }

    /// Whether a statement that applies to `action` on `resource` has a condition on the
    /// leading keys (then a request whose keys are unknown cannot be decided).
    pub fn conditions_on_leading_keys(&self, action: &str, resource: &str) -> bool {
        self.statements
            .iter()
            .any(|s| s.matches(action, resource) && !s.conditions.is_empty())
    }

    /// Every (action pattern, resource pattern) pair of its `Allow` statements.
    pub fn grants(&self) -> Vec<Grant> {
        let mut out = Vec::new();
        for s in self.statements.iter().filter(|s| s.effect == Effect::Allow) {
            for action in &s.actions {
                for resource in &s.resources {
                    out.push(Grant {
                        statement: s.id.clone(),
                        action: action.clone(),
                        resource: resource.clone(),
                        conditions: s.conditions.clone(),
                    });
                }
            }
        }
        out
    }
}

/// [`Role::evaluate`] as a function: explicit deny > allow > implicit deny.
pub fn evaluate(
    role: &Role,
    action: &str,
    resource_arn: &str,
    leading_keys: Option<&[String]>,
) -> Decision {
    role.evaluate(action, resource_arn, leading_keys)
}
