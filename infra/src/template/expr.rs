//! Values that may refer to resources ([`Expr`]), and the intrinsic functions that build them.

use std::fmt;

use serde_yaml_ng::{Mapping, Value};

use super::{Result, invalid};

/// One piece of an [`Expr`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// Literal text.
    Text(String),
    /// `!Ref X` (X a resource or an `AWS::*` pseudo parameter).
    Ref(String),
    /// `!GetAtt X.Attribute`.
    GetAtt(String, String),
}

/// A value that may refer to resources, e.g. an environment variable: `!Ref PaymentsQueue`
/// (the queue URL), `!Sub "${PaymentsTable}-x"`. Parameters are already substituted.
///
/// ```
/// use local_aws::template::{Part, Template, TemplateOptions};
///
/// let template = Template::load_project(&TemplateOptions::default()).unwrap();
/// let env = &template.functions["PaymentsPublisherFunction"].environment;
/// assert_eq!(env["PAYMENTS_QUEUE_URL"].parts(), &[Part::Ref("PaymentsQueue".into())]);
/// assert_eq!(env["IDEMPOTENCY_TTL_SECONDS"].as_literal(), Some("1555200"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expr {
    parts: Vec<Part>,
}

impl Expr {
    /// A literal.
    pub fn literal(text: impl Into<String>) -> Self {
        Self {
            parts: vec![Part::Text(text.into())],
        }
    }

    /// The parts, adjacent texts merged.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// The text, when nothing in it refers to a resource or pseudo parameter.
    pub fn as_literal(&self) -> Option<&str> {
        match self.parts.as_slice() {
            [] => Some(""),
            [Part::Text(t)] => Some(t),
            _ => None,
        }
    }

    /// Parses a value (a scalar, `Ref`, `Fn::GetAtt`, `Fn::Sub` or `Fn::Join`, long or short
    /// form) without resolving anything; `at` is where it is, for the error.
    pub fn parse(v: &Value, at: &str) -> Result<Self> {
        parse_expr(v, at).map(Self::from_parts)
    }

    pub(super) fn from_parts(parts: Vec<Part>) -> Self {
        let mut merged: Vec<Part> = Vec::with_capacity(parts.len());
        for part in parts {
            match (merged.last_mut(), part) {
                (_, Part::Text(t)) if t.is_empty() => {}
                (Some(Part::Text(prev)), Part::Text(t)) => prev.push_str(&t),
                (_, part) => merged.push(part),
            }
        }
        Self { parts: merged }
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for part in &self.parts {
            match part {
                Part::Text(t) => f.write_str(t)?,
                Part::Ref(r) => write!(f, "${{{r}}}")?,
                Part::GetAtt(r, a) => write!(f, "${{{r}.{a}}}")?,
            }
        }
        Ok(())
    }
}

// ------------------------------------------------------------------------------------------------
// parsing

pub(super) fn key_str<'a>(key: &'a Value, at: &str) -> Result<&'a str> {
    match key {
        Value::String(s) => Ok(s),
        _ => Err(invalid(at, "a key is not a string")),
    }
}

/// Where the value under `key` of the mapping at `at` is, for error messages.
pub(super) fn child_at(at: &str, key: &Value) -> String {
    match key {
        Value::String(k) => format!("{at}.{k}"),
        _ => at.to_owned(),
    }
}

/// A plain (untagged) scalar as text.
pub(super) fn plain_scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

pub(super) const PSEUDO: &[&str] = &[
    "AWS::Region",
    "AWS::AccountId",
    "AWS::StackName",
    "AWS::StackId",
    "AWS::Partition",
    "AWS::URLSuffix",
    "AWS::NoValue",
];

/// The intrinsic function of a tagged value (`!Ref`) or a one-key mapping (`Ref:`), by its
/// short name (`Ref`, `GetAtt`, `Sub`, `Join`, ...).
pub fn intrinsic(v: &Value) -> Option<(String, &Value)> {
    let short = |name: &str| {
        let name = name.trim_start_matches('!');
        name.strip_prefix("Fn::").unwrap_or(name).to_owned()
    };
    match v {
        Value::Tagged(t) => Some((short(&t.tag.to_string()), &t.value)),
        Value::Mapping(m) if m.len() == 1 => {
            let (k, v) = m.iter().next()?;
            let Value::String(k) = k else { return None };
            (k == "Ref" || k.starts_with("Fn::")).then(|| (short(k), v))
        }
        _ => None,
    }
}

/// Parses a value into parts, without resolving anything.
pub(super) fn parse_expr(v: &Value, at: &str) -> Result<Vec<Part>> {
    if let Some(s) = plain_scalar(v) {
        return Ok(vec![Part::Text(s)]);
    }
    let Some((function, arg)) = intrinsic(v) else {
        return Err(invalid(at, "expected a scalar or an intrinsic function"));
    };
    match function.as_str() {
        "Ref" => match arg {
            Value::String(name) => Ok(vec![Part::Ref(name.clone())]),
            _ => Err(invalid(at, "!Ref needs a name")),
        },
        "GetAtt" => {
            let (resource, attribute) = match arg {
                Value::String(s) => s
                    .split_once('.')
                    .map(|(r, a)| (r.to_owned(), a.to_owned()))
                    .ok_or_else(|| invalid(at, "!GetAtt needs Resource.Attribute"))?,
                Value::Sequence(s) if s.len() == 2 => match (&s[0], &s[1]) {
                    (Value::String(r), Value::String(a)) => (r.clone(), a.clone()),
                    _ => return Err(invalid(at, "!GetAtt needs [Resource, Attribute]")),
                },
                _ => return Err(invalid(at, "!GetAtt needs Resource.Attribute")),
            };
            Ok(vec![Part::GetAtt(resource, attribute)])
        }
        "Sub" => {
            let (text, vars) = match arg {
                Value::String(s) => (s.as_str(), None),
                Value::Sequence(s) if s.len() == 2 => match (&s[0], &s[1]) {
                    (Value::String(t), Value::Mapping(m)) => (t.as_str(), Some(m)),
                    _ => return Err(invalid(at, "!Sub needs a string or [string, variables]")),
                },
                _ => return Err(invalid(at, "!Sub needs a string or [string, variables]")),
            };
            parse_sub(text, vars, at)
        }
        "Join" => {
            let Value::Sequence(s) = arg else {
                return Err(invalid(at, "!Join needs [delimiter, [values]]"));
            };
            let (Some(Value::String(delimiter)), Some(Value::Sequence(items)), 2) =
                (s.first(), s.get(1), s.len())
            else {
                return Err(invalid(at, "!Join needs [delimiter, [values]]"));
            };
            let mut parts = Vec::new();
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    parts.push(Part::Text(delimiter.clone()));
                }
                parts.extend(parse_expr(item, at)?);
            }
            Ok(parts)
        }
        other => Err(invalid(
            at,
            format!("intrinsic function {other} is not supported by the local harness"),
        )),
    }
}

fn parse_sub(text: &str, vars: Option<&Mapping>, at: &str) -> Result<Vec<Part>> {
    let mut parts = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        parts.push(Part::Text(rest[..start].to_owned()));
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| invalid(at, format!("unclosed ${{ in !Sub {text:?}")))?;
        let name = after[..end].trim();
        if let Some(literal) = name.strip_prefix('!') {
            parts.push(Part::Text(format!("${{{literal}}}")));
        } else if let Some(value) = vars.and_then(|m| m.get(name)) {
            parts.extend(parse_expr(value, at)?);
        } else if let Some((resource, attribute)) =
            name.split_once('.').filter(|_| !name.starts_with("AWS::"))
        {
            parts.push(Part::GetAtt(resource.to_owned(), attribute.to_owned()));
        } else {
            parts.push(Part::Ref(name.to_owned()));
        }
        rest = &after[end + 1..];
    }
    parts.push(Part::Text(rest.to_owned()));
    Ok(parts)
}

/// The value of a pseudo parameter.
pub(crate) fn pseudo(name: &str, region: &str, account_id: &str, stack_name: &str) -> String {
    match name {
        "AWS::Region" => region.to_owned(),
        "AWS::AccountId" => account_id.to_owned(),
        "AWS::StackName" => stack_name.to_owned(),
        "AWS::StackId" => format!(
            "arn:aws:cloudformation:{region}:{account_id}:stack/{stack_name}/00000000-0000-0000-0000-000000000000"
        ),
        "AWS::Partition" => "aws".to_owned(),
        "AWS::URLSuffix" => "amazonaws.com".to_owned(),
        _ => String::new(),
    }
}
