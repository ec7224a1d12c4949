//! The template's `Conditions`, resource `Condition`s and `Fn::If`.
//!
//! Every condition of the `Conditions` section is evaluated once, before the resources are
//! read, with the condition functions CloudFormation has: `Fn::Equals` (two values: literals,
//! parameters, pseudo parameters, `!Sub`/`!Join` of those, `!FindInMap`), `Fn::Not`, `Fn::And`,
//! `Fn::Or` (2 to 10 conditions) and `Condition` references to other conditions, in long form
//! (`Fn::Equals:`) or short (`!Equals`). Then, in `Resources`, a resource whose
//! `Condition` is false is left out, every `Fn::If` is replaced by the branch its condition
//! picks, and `!Ref AWS::NoValue` removes the key (or list item) it is the value of, as
//! CloudFormation does. So the harness provisions and runs what a deployment with the same
//! parameters would. A condition that names no condition, refers to itself, or uses a function
//! CloudFormation does not allow there is an error.

use std::collections::{BTreeMap, BTreeSet};

use serde_yaml_ng::{Mapping, Value};

use super::parse::Ctx;
use super::{Result, child_at, intrinsic, invalid, key_str};

/// The evaluated `Conditions` section: each condition's name and value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Conditions {
    values: BTreeMap<String, bool>,
}

impl Conditions {
    /// The value of condition `name`, if the template has it.
    pub fn get(&self, name: &str) -> Option<bool> {
        self.values.get(name).copied()
    }

    /// Every condition, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, bool)> {
        self.values.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// Evaluates `section`, the template's `Conditions` (empty when there is none). `ctx`
    /// resolves the values compared by `Fn::Equals` (it knows the parameters and no resource).
    pub(super) fn evaluate(section: Option<&Value>, ctx: &Ctx<'_>) -> Result<Self> {
        let Some(section) = section else {
            return Ok(Self::default());
        };
        let section = section
            .as_mapping()
            .ok_or_else(|| invalid("Conditions", "not a mapping"))?;
        let mut definitions = BTreeMap::new();
        for (name, definition) in section {
            definitions.insert(key_str(name, "Conditions")?.to_owned(), definition);
        }
        let mut evaluator = Evaluator {
            definitions: &definitions,
            ctx,
            values: BTreeMap::new(),
            visiting: BTreeSet::new(),
        };
        for name in definitions.keys() {
            evaluator.condition(name, "Conditions")?;
        }
        Ok(Self {
            values: evaluator.values,
        })
    }

    fn named(&self, name: &Value, at: &str) -> Result<bool> {
        let Value::String(name) = name else {
            return Err(invalid(at, "a condition is named by a string"));
        };
        self.get(name)
            .ok_or_else(|| invalid(at, format!("no condition named {name} in Conditions")))
    }

    /// The resources, without those whose `Condition` is false, with `Fn::If` and
    /// `AWS::NoValue` resolved.
    pub(super) fn resources(&self, resources: &Mapping) -> Result<Mapping> {
        let mut out = Mapping::new();
        for (id, resource) in resources {
            let id_str = key_str(id, "Resources")?;
            let at = format!("Resources.{id_str}");
            if let Some(condition) = resource.get("Condition")
                && !self.named(condition, &format!("{at}.Condition"))?
            {
                continue;
            }
            if let Some(resource) = self.resolve(resource, &at)? {
                out.insert(id.clone(), resource);
            }
        }
        Ok(out)
    }

    /// `value` with every `Fn::If` replaced by its chosen branch; `None` when it is
    /// `!Ref AWS::NoValue` (the caller leaves it out).
    pub(super) fn resolve(&self, value: &Value, at: &str) -> Result<Option<Value>> {
        match intrinsic(value) {
            Some((f, Value::String(name))) if f == "Ref" && name == "AWS::NoValue" => {
                return Ok(None);
            }
            Some((f, arg)) if f == "If" => {
                let Value::Sequence(args) = arg else {
                    return Err(invalid(
                        at,
                        "!If needs [Condition, ValueIfTrue, ValueIfFalse]",
                    ));
                };
                let [condition, if_true, if_false] = args.as_slice() else {
                    return Err(invalid(
                        at,
                        "!If needs [Condition, ValueIfTrue, ValueIfFalse]",
                    ));
                };
                let branch = if self.named(condition, at)? {
                    if_true
                } else {
                    if_false
                };
                return self.resolve(branch, at);
            }
            _ => {}
        }
        Ok(Some(match value {
            Value::Sequence(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    out.extend(self.resolve(item, &format!("{at}[{i}]"))?);
                }
                Value::Sequence(out)
            }
            Value::Mapping(m) => {
                let mut out = Mapping::new();
                for (k, v) in m {
                    if let Some(v) = self.resolve(v, &child_at(at, k))? {
                        out.insert(k.clone(), v);
                    }
                }
                Value::Mapping(out)
            }
            Value::Tagged(t) => {
                let mut t = t.clone();
                t.value = self.resolve(&t.value, at)?.ok_or_else(|| {
                    invalid(at, format!("{}: AWS::NoValue is not a value here", t.tag))
                })?;
                Value::Tagged(t)
            }
            other => other.clone(),
        }))
    }
}

/// Evaluates conditions on demand, each once, refusing cycles.
struct Evaluator<'a, 'c> {
    definitions: &'a BTreeMap<String, &'a Value>,
    ctx: &'a Ctx<'c>,
    values: BTreeMap<String, bool>,
    visiting: BTreeSet<String>,
}

impl Evaluator<'_, '_> {
    fn condition(&mut self, name: &str, at: &str) -> Result<bool> {
        if let Some(value) = self.values.get(name) {
            return Ok(*value);
        }
        let definition = *self
            .definitions
            .get(name)
            .ok_or_else(|| invalid(at, format!("no condition named {name} in Conditions")))?;
        let at = format!("Conditions.{name}");
        if !self.visiting.insert(name.to_owned()) {
            return Err(invalid(
                &at,
                format!("condition {name} refers to itself (directly or through others)"),
            ));
        }
        let value = self.function(definition, &at)?;
        self.visiting.remove(name);
        self.values.insert(name.to_owned(), value);
        Ok(value)
    }

    /// A condition function, or a `Condition` reference.
    fn function(&mut self, v: &Value, at: &str) -> Result<bool> {
        if let Value::Mapping(m) = v
            && m.len() == 1
            && let Some(name) = m.get("Condition")
        {
            return self.reference(name, at);
        }
        let Some((function, arg)) = intrinsic(v) else {
            return Err(invalid(
                at,
                "expected a condition function (Fn::Equals, Fn::Not, Fn::And, Fn::Or) or a Condition",
            ));
        };
        let at = format!("{at}.Fn::{function}");
        match function.as_str() {
            "Condition" => self.reference(arg, &at),
            "Equals" => match arg {
                Value::Sequence(values) if values.len() == 2 => {
                    let a = self.ctx.scalar(&values[0], &format!("{at}[0]"))?;
                    let b = self.ctx.scalar(&values[1], &format!("{at}[1]"))?;
                    Ok(a == b)
                }
                _ => Err(invalid(&at, "!Equals needs [Value1, Value2]")),
            },
            "Not" => match arg {
                Value::Sequence(conditions) if conditions.len() == 1 => {
                    Ok(!self.function(&conditions[0], &format!("{at}[0]"))?)
                }
                _ => Err(invalid(&at, "!Not needs [Condition]")),
            },
            "And" | "Or" => {
                let Value::Sequence(conditions) = arg else {
                    return Err(invalid(
                        &at,
                        format!("!{function} needs a list of conditions"),
                    ));
                };
                if !(2..=10).contains(&conditions.len()) {
                    return Err(invalid(
                        &at,
                        format!(
                            "!{function} takes 2 to 10 conditions, not {}",
                            conditions.len()
                        ),
                    ));
                }
                // Every operand is evaluated (and checked), as CloudFormation validates them all.
                let mut values = Vec::with_capacity(conditions.len());
                for (i, condition) in conditions.iter().enumerate() {
                    values.push(self.function(condition, &format!("{at}[{i}]"))?);
                }
                Ok(if function == "And" {
                    values.iter().all(|v| *v)
                } else {
                    values.iter().any(|v| *v)
                })
            }
            other => Err(invalid(
                &at,
                format!(
                    "{other} is not a condition function (Fn::Equals, Fn::Not, Fn::And, Fn::Or, Condition)"
                ),
            )),
        }
    }

    fn reference(&mut self, name: &Value, at: &str) -> Result<bool> {
        match name {
            Value::String(name) => self.condition(name, at),
            _ => Err(invalid(at, "Condition needs a condition's name")),
        }
    }
}
