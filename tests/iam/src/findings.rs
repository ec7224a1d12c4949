//! Statements that grant more than written intent allows, read from the statement itself:
//! [`Finding`]s. (Grants broader than the requests they allow are found by
//! [`conformance`](crate::conformance), which knows the requests.)
//!
//! The rules, for every `Allow` statement of every role:
//!
//! - no wildcard in an action (`*`, `dynamodb:*`, `sqs:*Message`): every action is named;
//! - every action is in the [reference table](crate::reference::ACTIONS);
//! - an action without resource-level permissions is granted on `*` only (AWS grants nothing on
//!   a narrower resource), and an action with them never on `*` or on an ARN whose name (or
//!   partition, service, region, account) is only a wildcard;
//! - a statement that allows an item action on a table of [`LEADING_KEYS_TABLES`] carries a
//!   `dynamodb:LeadingKeys` condition whose every value starts with the key prefix of a
//!   function running with the role (`NAME#`), or with some literal prefix for a role no
//!   function runs with.

use std::fmt;

use crate::policy::{Effect, Role, StatementRef};
use crate::reference::{ITEM_ACTIONS, is_resource_scoped, names_no_resource};
use crate::wildcard::wildcard_match;

/// Tables (logical ids) whose items several functions share, each under its own partition key
/// prefix (`FUNCTION#...`, the library's key prefix): every grant of their items must be
/// conditioned on `dynamodb:LeadingKeys`.
pub const LEADING_KEYS_TABLES: &[&str] = &["IdempotencyTable"];

/// A statement granting more than it should.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Finding {
    /// The role's logical id.
    pub role: String,
    /// The statement.
    pub statement: StatementRef,
    /// What is wrong.
    pub kind: FindingKind,
}

/// What is wrong with a statement.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FindingKind {
    /// An action pattern with a wildcard.
    WildcardAction {
        /// The pattern.
        action: String,
    },
    /// An action the reference table does not know.
    UnknownAction {
        /// The action.
        action: String,
    },
    /// An action without resource-level permissions granted on a resource other than `*`.
    NotResourceScoped {
        /// The action.
        action: String,
        /// The resource written.
        resource: String,
    },
    /// A resource-scoped action granted on a pattern that names no resource.
    NamesNoResource {
        /// The action.
        action: String,
        /// The resource written.
        resource: String,
        /// Why.
        why: &'static str,
    },
    /// A resource pattern broader than the narrowest one covering the requests it allows.
    Broader {
        /// The action pattern.
        action: String,
        /// The resource written.
        resource: String,
        /// The resources of the requests it allows (recorded or required).
        requested: Vec<String>,
        /// The narrowest patterns covering them.
        narrowest: Vec<String>,
    },
    /// Item actions on a table of [`LEADING_KEYS_TABLES`] without a `dynamodb:LeadingKeys`
    /// condition.
    MissingCondition {
        /// The table's logical id.
        table: String,
    },
    /// Leading keys broader than the requests it allows need: they all start with one key
    /// prefix (`NAME#`, up to the first `#`), and the statement has no `dynamodb:LeadingKeys`
    /// condition (`value` `None`) or a value not within `needed`.
    BroaderKeys {
        /// The action pattern.
        action: String,
        /// The resource written.
        resource: String,
        /// The condition value not within `needed`; `None`: no condition.
        value: Option<String>,
        /// The narrowest condition value covering the requests' keys (`NAME#*`).
        needed: String,
    },
    /// A `dynamodb:LeadingKeys` value that is not the role's functions' key prefix.
    LooseCondition {
        /// The value.
        value: String,
        /// The prefixes accepted (empty: any literal prefix).
        expected: Vec<String>,
    },
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sid = self.statement.sid.as_deref().unwrap_or("(no Sid)");
        write!(
            f,
            "role {}, Sid {sid} (policy {}, statement {}): ",
            self.role, self.statement.policy, self.statement.index
        )?;
        match &self.kind {
            FindingKind::WildcardAction { action } => {
                write!(f, "the action {action} is a wildcard: name each action")
            }
            FindingKind::UnknownAction { action } => write!(
                f,
                "the action {action} is not in the reference table (tests/iam/src/reference.rs)"
            ),
            FindingKind::NotResourceScoped { action, resource } => write!(
                f,
                "{action} has no resource-level permissions: AWS grants it on Resource \"*\" only, not on {resource}"
            ),
            FindingKind::NamesNoResource {
                action,
                resource,
                why,
            } => write!(f, "{action} on {resource}: names {why}"),
            FindingKind::Broader {
                action,
                resource,
                requested,
                narrowest,
            } => write!(
                f,
                "{action} on {resource} is broader than the requests it allows need: they are on {requested:?}, the narrowest resources covering them {narrowest:?}"
            ),
            FindingKind::BroaderKeys {
                action,
                resource,
                value,
                needed,
            } => match value {
                None => write!(
                    f,
                    "{action} on {resource} allows any leading key, and the requests it allows have keys {needed:?} only: condition it on dynamodb:LeadingKeys"
                ),
                Some(value) => write!(
                    f,
                    "{action} on {resource}: the dynamodb:LeadingKeys value {value:?} is broader than the requests' keys need ({needed:?})"
                ),
            },
            FindingKind::MissingCondition { table } => write!(
                f,
                "grants items of {table} without a dynamodb:LeadingKeys condition"
            ),
            FindingKind::LooseCondition { value, expected } if expected.is_empty() => write!(
                f,
                "the dynamodb:LeadingKeys value {value:?} has no literal prefix"
            ),
            FindingKind::LooseCondition { value, expected } => write!(
                f,
                "the dynamodb:LeadingKeys value {value:?} does not start with the key prefix of the role's functions {expected:?}"
            ),
        }
    }
}

/// The narrowest `dynamodb:LeadingKeys` value covering `keys` when they all start with one key
/// prefix (up to and including the first `#`): `NAME#*`.
pub(crate) fn needed_key_pattern<'k>(keys: impl IntoIterator<Item = &'k String>) -> Option<String> {
    let mut prefixes = keys.into_iter().map(|k| k.find('#').map(|i| &k[..=i]));
    let first = prefixes.next()??;
    prefixes
        .all(|p| p == Some(first))
        .then(|| format!("{first}*"))
}

/// Whether the condition value `value` allows only keys `needed` (`NAME#*`) allows: its literal
/// start (before any wildcard) begins with `needed`'s.
pub(crate) fn value_within(value: &str, needed: &str) -> bool {
    let literal = |s: &str| s.split(['*', '?']).next().unwrap_or_default().to_owned();
    literal(value).starts_with(&literal(needed))
}

/// The statement-level findings of `role`: `tables` the ARNs (with logical ids) of the
/// [`LEADING_KEYS_TABLES`], `prefixes` the key prefixes (`NAME#`) of the functions that run with
/// the role (empty for a role no function runs with).
pub(crate) fn statement_findings(
    role: &Role,
    tables: &[(String, String)],
    prefixes: &[String],
) -> Vec<Finding> {
    let mut out = Vec::new();
    for s in role.statements.iter().filter(|s| s.effect == Effect::Allow) {
        let mut finding = |kind| {
            out.push(Finding {
                role: role.logical_id.clone(),
                statement: s.id.clone(),
                kind,
            })
        };
        for action in &s.actions {
            if action.contains(['*', '?']) {
                finding(FindingKind::WildcardAction {
                    action: action.clone(),
                });
                continue;
            }
            match is_resource_scoped(action) {
                None => finding(FindingKind::UnknownAction {
                    action: action.clone(),
                }),
                Some(false) => {
                    for resource in s.resources.iter().filter(|r| *r != "*") {
                        finding(FindingKind::NotResourceScoped {
                            action: action.clone(),
                            resource: resource.clone(),
                        });
                    }
                }
                Some(true) => {
                    for resource in &s.resources {
                        if let Some(why) = names_no_resource(resource) {
                            finding(FindingKind::NamesNoResource {
                                action: action.clone(),
                                resource: resource.clone(),
                                why,
                            });
                        }
                    }
                }
            }
        }
        let grants_items = ITEM_ACTIONS
            .iter()
            .any(|item| s.actions.iter().any(|a| wildcard_match(a, item, true)));
        if !grants_items {
            continue;
        }
        for (table, arn) in tables {
            if !s.resources.iter().any(|r| wildcard_match(r, arn, false)) {
                continue;
            }
            if s.conditions.is_empty() {
                finding(FindingKind::MissingCondition {
                    table: table.clone(),
                });
                continue;
            }
            for value in s.conditions.iter().flat_map(|c| &c.values) {
                let ok = if prefixes.is_empty() {
                    !value.starts_with(['*', '?'])
                } else {
                    prefixes.iter().any(|p| value.starts_with(p.as_str()))
                };
                if !ok {
                    finding(FindingKind::LooseCondition {
                        value: value.clone(),
                        expected: prefixes.to_vec(),
                    });
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{needed_key_pattern, value_within};

    #[test]
    fn keys_of_one_prefix_need_that_prefix() {
        let keys = |k: &[&str]| k.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let needed = |k: &[&str]| needed_key_pattern(&keys(k));
        assert_eq!(
            needed(&["number #1 of a", "number #12 of b"]).as_deref(),
            Some("number #*")
        );
        assert_eq!(
            needed(&["reconciler#audit"]).as_deref(),
            Some("reconciler#*")
        );
        assert_eq!(needed(&["acct-1", "number #1 of acct-1"]), None);
        assert_eq!(needed(&["a#1", "b#1"]), None);
        assert_eq!(needed(&[]), None);
        assert!(value_within("number #*", "number #*"));
        assert!(value_within("number #1*", "number #*"));
        assert!(!value_within("number *", "number #*"));
        assert!(!value_within("*", "reconciler#*"));
        assert!(!value_within("reconciler*", "reconciler#*"));
    }
}
