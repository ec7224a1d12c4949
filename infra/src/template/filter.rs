//! Lambda event filtering (`FilterCriteria.Filters[].Pattern`), the subset the harness runs:
//! exact matches on top-level and nested fields.
//!
//! A pattern is a JSON object. Each key names a field of the record (as Lambda delivers it: for
//! a DynamoDB stream, `eventName`, `dynamodb`, ...); its value is either a list of values, one of
//! which the field must equal, or an object matched against the field's own fields. Every key
//! must match (AND); a mapping's patterns are alternatives (OR). A field holding a list matches
//! when one of its elements does; a missing field never matches; numbers compare as numbers.
//!
//! Content filters (`prefix`, `anything-but`, `numeric`, `exists`, `suffix`, `equals-ignore-case`,
//! `wildcard`, `cidr`, `$or`) are rejected with [`FilterError::Unsupported`] rather than ignored,
//! so a local run never lets through what the deployed mapping would drop.

use std::collections::BTreeMap;

use serde_json::Value;

/// Why a pattern cannot be run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    /// The pattern is not JSON.
    #[error("the pattern is not JSON: {0}")]
    NotJson(String),
    /// The pattern (or a nested pattern) is not an object of fields.
    #[error("{0}: a pattern is an object of fields")]
    NotAnObject(String),
    /// An object or a list of values is empty (Lambda rejects those).
    #[error("{0}: empty")]
    Empty(String),
    /// A filter the harness does not run (a content filter, or `$or`).
    #[error(
        "{path}: {found} is not supported by the local harness (only exact-match lists of values, nested in objects)"
    )]
    Unsupported {
        /// Where in the pattern, e.g. `dynamodb.NewImage.status.S`.
        path: String,
        /// What was found there.
        found: String,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Node {
    /// Fields, each with its own pattern.
    Fields(BTreeMap<String, Node>),
    /// One of these values.
    AnyOf(Vec<Value>),
}

/// One filter pattern: each key a field of the record, its value a list of values the field
/// must equal one of, or an object matched against the field's own fields; content filters are
/// refused ([`FilterError::Unsupported`]).
///
/// ```
/// use local_aws::template::FilterPattern;
/// use serde_json::json;
///
/// let inserts = FilterPattern::parse(r#"{"eventName": ["INSERT"]}"#).unwrap();
/// assert!(inserts.matches(&json!({"eventName": "INSERT", "dynamodb": {}})));
/// assert!(!inserts.matches(&json!({"eventName": "MODIFY"})));
///
/// let status = FilterPattern::parse(r#"{"dynamodb": {"NewImage": {"status": {"S": ["accepted"]}}}}"#).unwrap();
/// assert!(status.matches(&json!({"dynamodb": {"NewImage": {"status": {"S": "accepted"}}}})));
/// assert!(!status.matches(&json!({"dynamodb": {"Keys": {}}})));
///
/// assert!(FilterPattern::parse(r#"{"eventName": [{"anything-but": ["REMOVE"]}]}"#).is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterPattern {
    text: String,
    root: BTreeMap<String, Node>,
}

impl FilterPattern {
    /// Parses a pattern, rejecting what the harness does not run.
    pub fn parse(text: &str) -> Result<Self, FilterError> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| FilterError::NotJson(e.to_string()))?;
        match node(&value, "<pattern>")? {
            Node::Fields(root) => Ok(Self {
                text: text.to_owned(),
                root,
            }),
            Node::AnyOf(_) => Err(FilterError::NotAnObject("<pattern>".into())),
        }
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `record` matches.
    pub fn matches(&self, record: &Value) -> bool {
        fields_match(&self.root, record)
    }
}

fn node(value: &Value, path: &str) -> Result<Node, FilterError> {
    match value {
        Value::Object(fields) if fields.is_empty() => Err(FilterError::Empty(path.to_owned())),
        Value::Object(fields) => {
            let mut out = BTreeMap::new();
            for (key, v) in fields {
                let at = if path == "<pattern>" {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                if key.starts_with('$') {
                    return Err(FilterError::Unsupported {
                        path: at,
                        found: key.clone(),
                    });
                }
                out.insert(key.clone(), node(v, &at)?);
            }
            Ok(Node::Fields(out))
        }
        Value::Array(values) if values.is_empty() => Err(FilterError::Empty(path.to_owned())),
        Value::Array(values) => {
            if let Some(other) = values.iter().find(|v| v.is_object() || v.is_array()) {
                return Err(FilterError::Unsupported {
                    path: path.to_owned(),
                    found: other.to_string(),
                });
            }
            Ok(Node::AnyOf(values.clone()))
        }
        scalar => Err(FilterError::Unsupported {
            path: path.to_owned(),
            found: format!("{scalar} (a value must be in a list)"),
        }),
    }
}

fn fields_match(fields: &BTreeMap<String, Node>, record: &Value) -> bool {
    let Value::Object(record) = record else {
        return false;
    };
    fields.iter().all(|(key, pattern)| match record.get(key) {
        None => false,
        Some(value) => node_matches(pattern, value),
    })
}

fn node_matches(pattern: &Node, value: &Value) -> bool {
    match (pattern, value) {
        (_, Value::Array(items)) => items.iter().any(|item| node_matches(pattern, item)),
        (Node::Fields(fields), value) => fields_match(fields, value),
        (Node::AnyOf(options), value) => options.iter().any(|o| equal(o, value)),
    }
}

fn equal(pattern: &Value, value: &Value) -> bool {
    match (pattern, value) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (a, b) => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn exact_matches_and_nesting() {
        let p = FilterPattern::parse(r#"{"eventName": ["INSERT", "MODIFY"], "n": [1]}"#).unwrap();
        assert!(p.matches(&json!({"eventName": "MODIFY", "n": 1.0})));
        assert!(
            !p.matches(&json!({"eventName": "MODIFY"})),
            "every field must match"
        );
        assert!(!p.matches(&json!({"eventName": "REMOVE", "n": 1})));
        assert!(p.matches(&json!({"eventName": ["x", "INSERT"], "n": 1})));
        assert!(!p.matches(&json!("INSERT")));
        let nested = FilterPattern::parse(r#"{"a": {"b": {"c": [null, true]}}}"#).unwrap();
        assert!(nested.matches(&json!({"a": {"b": {"c": null}}})));
        assert!(nested.matches(&json!({"a": {"b": {"c": true}}})));
        assert!(!nested.matches(&json!({"a": {"b": {}}})));
        assert!(!nested.matches(&json!({"a": {"b": "c"}})));
    }

    #[test]
    fn rejects_what_it_does_not_run() {
        let err = |text: &str| FilterPattern::parse(text).unwrap_err();
        assert!(matches!(err("nope"), FilterError::NotJson(_)));
        assert!(matches!(err(r#"["INSERT"]"#), FilterError::NotAnObject(_)));
        assert!(matches!(err("{}"), FilterError::Empty(_)));
        assert!(matches!(err(r#"{"a": []}"#), FilterError::Empty(_)));
        assert!(matches!(
            err(r#"{"a": "x"}"#),
            FilterError::Unsupported { .. }
        ));
        assert_eq!(
            err(r#"{"d": {"N": [{"numeric": [">", 1]}]}}"#),
            FilterError::Unsupported {
                path: "d.N".into(),
                found: r#"{"numeric":[">",1]}"#.into()
            }
        );
        assert!(matches!(
            err(r#"{"$or": [{"a": ["x"]}]}"#),
            FilterError::Unsupported { .. }
        ));
    }
}
