//! The template's `Mappings` and `Fn::FindInMap`.
//!
//! CloudFormation has no arithmetic, so a value derived from a parameter (a queue's
//! `maxReceiveCount` from `MaxAttempts`) is written as a table keyed by the parameter's value and
//! looked up with `!FindInMap [Map, !Ref Param, Name]`. Every `FindInMap` whose keys are known at
//! parse time (literals, parameters, pseudo parameters, other `FindInMap`s) is replaced by the
//! value it finds before the resources are read, so provisioning and `--verify` see the derived
//! value. A key that is not in the map is an error here, as it would fail the deployment; so is a
//! parameter with `AllowedValues` used as a key when one of its allowed values is missing from the
//! map (cfn-lint does not check that).

use std::collections::BTreeMap;

use serde_yaml_ng::{Mapping, Value};

use super::{
    PSEUDO, Parameter, Result, TemplateOptions, child_at, intrinsic, invalid, key_str,
    plain_scalar, pseudo,
};

/// One value of a map: a string, or a list of strings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MapValue {
    /// A scalar, as text.
    Text(String),
    /// A list of scalars.
    List(Vec<String>),
}

/// The `Mappings` section: mapping name, then top-level key, then second-level key.
///
/// ```
/// use local_aws::template::{MapValue, Template, TemplateOptions};
///
/// let template = Template::load_project(&TemplateOptions::default()).unwrap();
/// let backstop = template.mappings.get("RedriveBackstop", "5", "BatchSize10");
/// assert_eq!(backstop, Some(&MapValue::Text("65".into())));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mappings {
    maps: BTreeMap<String, BTreeMap<String, BTreeMap<String, MapValue>>>,
}

impl Mappings {
    /// The value at `map.key.name`, if there is one.
    pub fn get(&self, map: &str, key: &str, name: &str) -> Option<&MapValue> {
        self.maps.get(map)?.get(key)?.get(name)
    }

    /// The names of the mappings.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.maps.keys().map(String::as_str)
    }

    /// Reads the `Mappings` section of `root` (empty when there is none).
    pub(super) fn parse(root: &Mapping) -> Result<Self> {
        let mut maps = BTreeMap::new();
        let Some(section) = root.get("Mappings") else {
            return Ok(Self { maps });
        };
        let section = section
            .as_mapping()
            .ok_or_else(|| invalid("Mappings", "not a mapping"))?;
        for (name, map) in section {
            let name = key_str(name, "Mappings")?;
            let at = format!("Mappings.{name}");
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric()) {
                return Err(invalid(&at, "a mapping's name is alphanumeric (A-Za-z0-9)"));
            }
            let map = map
                .as_mapping()
                .ok_or_else(|| invalid(&at, "not a mapping"))?;
            let mut keys = BTreeMap::new();
            for (key, names) in map {
                let key = literal_key(key, &at)?;
                let at = format!("{at}.{key}");
                let names = names
                    .as_mapping()
                    .ok_or_else(|| invalid(&at, "not a mapping of names to values"))?;
                let mut values = BTreeMap::new();
                for (n, v) in names {
                    let n = literal_key(n, &at)?;
                    let at = format!("{at}.{n}");
                    let value = match v {
                        Value::Sequence(items) => MapValue::List(
                            items
                                .iter()
                                .map(|i| {
                                    plain_scalar(i)
                                        .ok_or_else(|| invalid(&at, "a list of literals only"))
                                })
                                .collect::<Result<_>>()?,
                        ),
                        v => MapValue::Text(plain_scalar(v).ok_or_else(|| {
                            invalid(&at, "a literal or a list of literals (no functions)")
                        })?),
                    };
                    values.insert(n, value);
                }
                keys.insert(key, values);
            }
            maps.insert(name.to_owned(), keys);
        }
        Ok(Self { maps })
    }

    /// `value` with every `FindInMap` in it replaced by what it finds.
    pub(super) fn resolve(&self, value: &Value, env: &Env<'_>, at: &str) -> Result<Value> {
        if let Some((function, arg)) = intrinsic(value)
            && function == "FindInMap"
        {
            return Ok(match self.find(arg, env, at)? {
                MapValue::Text(t) => Value::String(t.clone()),
                MapValue::List(l) => {
                    Value::Sequence(l.iter().cloned().map(Value::String).collect())
                }
            });
        }
        Ok(match value {
            Value::Sequence(items) => Value::Sequence(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| self.resolve(v, env, &format!("{at}[{i}]")))
                    .collect::<Result<_>>()?,
            ),
            Value::Mapping(m) => {
                let mut out = Mapping::new();
                for (k, v) in m {
                    out.insert(k.clone(), self.resolve(v, env, &child_at(at, k))?);
                }
                Value::Mapping(out)
            }
            Value::Tagged(t) => {
                let mut t = t.clone();
                t.value = self.resolve(&t.value, env, at)?;
                Value::Tagged(t)
            }
            other => other.clone(),
        })
    }

    fn find(&self, arg: &Value, env: &Env<'_>, at: &str) -> Result<&MapValue> {
        let Value::Sequence(args) = arg else {
            return Err(invalid(
                at,
                "!FindInMap needs [MapName, TopLevelKey, SecondLevelKey]",
            ));
        };
        if args.len() != 3 {
            return Err(invalid(
                at,
                "!FindInMap needs [MapName, TopLevelKey, SecondLevelKey] (a default value is not supported by the local harness)",
            ));
        }
        let map_name = self.key(&args[0], env, at)?;
        let map = self
            .maps
            .get(&map_name)
            .ok_or_else(|| invalid(at, format!("!FindInMap: no mapping {map_name}")))?;
        let name = self.key(&args[2], env, at)?;
        // A parameter as the key: each of its allowed values must be in the map, so that no
        // allowed value can fail a deployment.
        if let Some((_, Value::String(param))) = intrinsic(&args[1]).filter(|(f, _)| f == "Ref")
            && let Some(p) = env.parameters.get(param)
        {
            for allowed in &p.allowed_values {
                if map.get(allowed).and_then(|k| k.get(&name)).is_none() {
                    return Err(invalid(
                        at,
                        format!(
                            "!FindInMap: {param} allows {allowed}, which has no {name} in mapping {map_name}"
                        ),
                    ));
                }
            }
        }
        let key = self.key(&args[1], env, at)?;
        map.get(&key).and_then(|k| k.get(&name)).ok_or_else(|| {
            invalid(
                at,
                format!("!FindInMap: mapping {map_name} has no {key}.{name}"),
            )
        })
    }

    /// A key argument: a literal, a parameter or pseudo parameter, or a nested `FindInMap`.
    fn key(&self, v: &Value, env: &Env<'_>, at: &str) -> Result<String> {
        if let Some(s) = plain_scalar(v) {
            return Ok(s);
        }
        match intrinsic(v) {
            Some((f, Value::String(name))) if f == "Ref" => {
                if let Some(p) = env.parameters.get(name) {
                    return p.value.clone().ok_or_else(|| {
                        invalid(at, format!("parameter {name} has no Default and no value"))
                    });
                }
                if PSEUDO.contains(&name.as_str()) {
                    let o = env.options;
                    return Ok(pseudo(name, &o.region, &o.account_id, &o.stack_name));
                }
                Err(invalid(
                    at,
                    format!(
                        "!FindInMap: !Ref {name} is not a parameter (keys are known before any resource exists)"
                    ),
                ))
            }
            Some((f, arg)) if f == "FindInMap" => match self.find(arg, env, at)? {
                MapValue::Text(t) => Ok(t.clone()),
                MapValue::List(_) => Err(invalid(at, "!FindInMap: a key cannot be a list")),
            },
            _ => Err(invalid(
                at,
                "!FindInMap: a key must be a literal, !Ref to a parameter, or !FindInMap",
            )),
        }
    }
}

/// What a `FindInMap` key can refer to.
pub(super) struct Env<'a> {
    pub(super) parameters: &'a BTreeMap<String, Parameter>,
    pub(super) options: &'a TemplateOptions,
}

fn literal_key(key: &Value, at: &str) -> Result<String> {
    plain_scalar(key).ok_or_else(|| invalid(at, "a key must be a literal"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Mappings> {
        let doc: Value = serde_yaml_ng::from_str(yaml).unwrap();
        Mappings::parse(doc.as_mapping().unwrap())
    }

    #[test]
    fn values_are_literals_or_lists_of_literals() {
        let m = parse("Mappings:\n  M:\n    '1': { A: x, B: [y, 2] }\n").unwrap();
        assert_eq!(m.get("M", "1", "A"), Some(&MapValue::Text("x".into())));
        assert_eq!(
            m.get("M", "1", "B"),
            Some(&MapValue::List(vec!["y".into(), "2".into()]))
        );
        assert_eq!(m.get("M", "2", "A"), None);
        assert!(parse("Mappings:\n  M:\n    k: { A: !Ref P }\n").is_err());
        assert!(parse("Mappings:\n  Bad-Name:\n    k: { A: x }\n").is_err());
        assert!(parse("Mappings:\n  M:\n    k: x\n").is_err());
    }
}
