//! The `Parameters` section: values in effect, checked as CloudFormation checks them.

use std::collections::BTreeMap;

use serde_yaml_ng::{Mapping, Value};

use super::{Result, TemplateOptions, invalid, key_str, plain_scalar};

/// A template parameter.
#[derive(Clone, Debug, PartialEq)]
pub struct Parameter {
    /// `Type` (`String`, `Number`, ...).
    pub kind: String,
    /// `Default`, as text.
    pub default: Option<String>,
    /// The value in effect: the override, else the default.
    pub value: Option<String>,
    /// `AllowedValues`, as text.
    pub allowed_values: Vec<String>,
    /// `AllowedPattern` (not checked locally).
    pub allowed_pattern: Option<String>,
    /// `MinValue` (a `Number` parameter's lower bound).
    pub min_value: Option<f64>,
    /// `MaxValue`.
    pub max_value: Option<f64>,
}

pub(super) fn parse_parameters(
    root: &Mapping,
    options: &TemplateOptions,
) -> Result<BTreeMap<String, Parameter>> {
    let mut out = BTreeMap::new();
    if let Some(params) = root.get("Parameters") {
        let params = params
            .as_mapping()
            .ok_or_else(|| invalid("Parameters", "not a mapping"))?;
        for (name, spec) in params {
            let name = key_str(name, "Parameters")?;
            let at = format!("Parameters.{name}");
            let field = |key: &str| spec.get(key).and_then(plain_scalar);
            let kind = field("Type").ok_or_else(|| invalid(&at, "missing Type"))?;
            let default = field("Default");
            let allowed_values = match spec.get("AllowedValues") {
                Some(Value::Sequence(s)) => s.iter().filter_map(plain_scalar).collect(),
                _ => Vec::new(),
            };
            let value = options
                .parameters
                .get(name)
                .cloned()
                .or_else(|| default.clone());
            if let Some(v) = &value {
                check_parameter(&at, &kind, v, spec, &allowed_values)?;
            }
            out.insert(
                name.to_owned(),
                Parameter {
                    kind,
                    default,
                    value,
                    allowed_values,
                    allowed_pattern: field("AllowedPattern"),
                    min_value: spec.get("MinValue").and_then(Value::as_f64),
                    max_value: spec.get("MaxValue").and_then(Value::as_f64),
                },
            );
        }
    }
    if let Some(unknown) = options.parameters.keys().find(|k| !out.contains_key(*k)) {
        return Err(invalid(
            &format!("Parameters.{unknown}"),
            "overridden but not a parameter of the template",
        ));
    }
    Ok(out)
}

fn check_parameter(
    at: &str,
    kind: &str,
    value: &str,
    spec: &Value,
    allowed: &[String],
) -> Result<()> {
    if !allowed.is_empty() && !allowed.iter().any(|a| a == value) {
        return Err(invalid(
            at,
            format!("{value:?} is not one of AllowedValues {allowed:?}"),
        ));
    }
    let bound = |key: &str| spec.get(key).and_then(Value::as_f64);
    if kind == "Number" {
        let n: f64 = value
            .parse()
            .map_err(|_| invalid(at, format!("{value:?} is not a Number")))?;
        if bound("MinValue").is_some_and(|min| n < min)
            || bound("MaxValue").is_some_and(|max| n > max)
        {
            return Err(invalid(at, format!("{value} is out of MinValue/MaxValue")));
        }
    } else {
        let len = value.chars().count() as f64;
        if bound("MinLength").is_some_and(|min| len < min)
            || bound("MaxLength").is_some_and(|max| len > max)
        {
            return Err(invalid(
                at,
                format!("{value:?} is out of MinLength/MaxLength"),
            ));
        }
    }
    Ok(())
}
