//! How API Gateway hands a JWT's claims to the integration: `requestContext.authorizer.jwt.claims`
//! is a map of strings (`aws_lambda_events`' `ApiGatewayRequestAuthorizerJwtDescription::claims`
//! is a `HashMap<String, String>`), so every claim that is not a string is written as one:
//!
//! | Claim in the token | In `claims` |
//! |---|---|
//! | `"alice"` | `alice` |
//! | `1767225600`, `1.5` | `1767225600`, `1.5` |
//! | `true` | `true` |
//! | `["admin", "ops"]` | `[admin ops]` (brackets, space-separated, strings unquoted) |
//! | `null` | left out |
//! | `{"a": 1}` | `map[a:1]` |
//!
//! Strings, numbers, booleans and arrays are written as API Gateway was observed to write them
//! (Cognito's `cognito:groups` arrives as `[admin ops]`; `exp` as `1767225600`); `null`s are
//! left out likewise. Nested objects are not documented: they follow the same Go-style printing
//! as arrays (`map[key:value]`, keys sorted), which is an inference.

use std::collections::HashMap;

use serde_json::{Map, Value};

/// Every claim as API Gateway writes it into `jwt.claims`; `null` claims are left out.
pub(crate) fn stringify(claims: &Map<String, Value>) -> HashMap<String, String> {
    claims
        .iter()
        .filter(|(_, value)| !value.is_null())
        .map(|(name, value)| (name.clone(), render(value)))
        .collect()
}

/// One claim value, Go-`fmt` style (how API Gateway prints non-string claims).
fn render(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "<nil>".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(render).collect();
            format!("[{}]", items.join(" "))
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by_key(|(k, _)| *k);
            let entries: Vec<String> = entries
                .into_iter()
                .map(|(k, v)| format!("{k}:{}", render(v)))
                .collect();
            format!("map[{}]", entries.join(" "))
        }
    }
}

/// The token's scopes: `scp`, else `scope`; each a space-separated string or an array.
/// `None` when the token has neither.
pub(crate) fn scopes(claims: &Map<String, Value>) -> Option<Vec<String>> {
    ["scp", "scope"]
        .iter()
        .find_map(|name| match claims.get(*name)? {
            Value::String(s) => Some(s.split_whitespace().map(str::to_owned).collect()),
            Value::Array(items) => Some(items.iter().map(render).collect()),
            _ => None,
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn non_string_claims_are_written_as_strings() {
        let claims = json!({
            "sub": "alice",
            "exp": 1767225600,
            "ratio": 1.5,
            "admin": true,
            "cognito:groups": ["admin", "ops"],
            "nested": {"b": [1, 2], "a": "x"},
            "gone": null,
        });
        let strings = stringify(claims.as_object().unwrap());
        assert_eq!(strings["sub"], "alice");
        assert_eq!(strings["exp"], "1767225600");
        assert_eq!(strings["ratio"], "1.5");
        assert_eq!(strings["admin"], "true");
        assert_eq!(strings["cognito:groups"], "[admin ops]");
        assert_eq!(strings["nested"], "map[a:x b:[1 2]]");
        assert!(!strings.contains_key("gone"));
        assert_eq!(strings.len(), 6);
    }

    #[test]
    fn scopes_from_scp_or_scope() {
        let s = |v: Value| scopes(v.as_object().unwrap());
        assert_eq!(s(json!({"scope": "a  b"})).unwrap(), ["a", "b"]);
        assert_eq!(s(json!({"scp": ["c"], "scope": "a"})).unwrap(), ["c"]);
        assert_eq!(s(json!({"sub": "x"})), None);
    }
}
