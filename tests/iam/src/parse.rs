//! Reading a request's resources out of its AWS JSON protocol body.

use serde_json::{Map, Value};

use crate::call::{Call, ItemKind, LeadingKeys, RecorderConfig, Resource, Service};

/// Why a request could not be recorded as a [`Call`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// No `X-Amz-Target` header: not the AWS JSON protocol.
    #[error("a request without X-Amz-Target (not the AWS JSON protocol)")]
    NoTarget,
    /// Not a DynamoDB, DynamoDB Streams or SQS target.
    #[error("{0}: not a DynamoDB, DynamoDB Streams or SQS operation")]
    UnknownTarget(String),
    /// The body is not in memory (a streaming body).
    #[error("{0}: the request body is not in memory")]
    NoBody(String),
    /// The body is not a JSON object, or a parameter has the wrong shape.
    #[error("{operation}: {message}")]
    Malformed {
        /// The operation.
        operation: String,
        /// What is wrong.
        message: String,
    },
}

/// The call a request stands for: `target` is its `X-Amz-Target`, `body` its JSON body.
///
/// ```
/// use iam_conformance::{parse_call, ItemKind, LeadingKeys, RecorderConfig, Resource};
///
/// let config = RecorderConfig::new("us-east-1", "123456789012").hash_key("ledger", "entryId");
/// let body = br#"{"TransactItems":[{"Put":{"TableName":"ledger","Item":{"entryId":{"S":"e1"}}}}]}"#;
/// let call = parse_call("DynamoDB_20120810.TransactWriteItems", body, &config).unwrap();
/// assert_eq!(call.resources, [Resource::Table {
///     name: "ledger".into(),
///     arn: "arn:aws:dynamodb:us-east-1:123456789012:table/ledger".into(),
///     index: None,
///     item: Some(ItemKind::Put),
///     leading_keys: LeadingKeys::Known(vec!["e1".into()]),
/// }]);
/// ```
pub fn parse_call(target: &str, body: &[u8], config: &RecorderConfig) -> Result<Call, RecordError> {
    let (service, operation) =
        Service::from_target(target).ok_or_else(|| RecordError::UnknownTarget(target.into()))?;
    let malformed = |message: String| RecordError::Malformed {
        operation: operation.to_owned(),
        message,
    };
    let body: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Object(Map::new())
    } else {
        serde_json::from_slice(body).map_err(|e| malformed(format!("the body is not JSON: {e}")))?
    };
    let body = body
        .as_object()
        .ok_or_else(|| malformed("the body is not a JSON object".into()))?;
    let resources = match service {
        Service::DynamoDb => dynamodb(operation, body, config),
        Service::DynamoDbStreams => Ok(streams(body, config)),
        Service::Sqs => Ok(sqs(body, config)),
    }
    .map_err(malformed)?;
    Ok(Call {
        service,
        operation: operation.to_owned(),
        resources,
    })
}

fn str_field<'a>(m: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, String> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("{key} is not a string")),
    }
}

fn object<'a>(v: &'a Value, at: &str) -> Result<&'a Map<String, Value>, String> {
    v.as_object()
        .ok_or_else(|| format!("{at} is not an object"))
}

fn array<'a>(v: &'a Value, at: &str) -> Result<&'a Vec<Value>, String> {
    v.as_array().ok_or_else(|| format!("{at} is not an array"))
}

/// The string form of an attribute value as IAM compares it (`S`, `N` or base64 `B`).
fn scalar_attribute(v: &Value) -> Option<String> {
    let m = v.as_object()?;
    ["S", "N", "B"]
        .iter()
        .find_map(|t| m.get(*t).and_then(Value::as_str).map(str::to_owned))
}

/// The partition key value of one item (`Key` or `Item`) on `table`.
fn key_value(config: &RecorderConfig, table: &str, item: Option<&Value>) -> Result<String, String> {
    let attribute = config
        .hash_keys
        .get(table)
        .ok_or_else(|| format!("the hash key of table {table} is not configured"))?;
    let item = item
        .and_then(Value::as_object)
        .ok_or_else(|| format!("no Key/Item for table {table}"))?;
    let value = item
        .get(attribute)
        .ok_or_else(|| format!("the item on {table} has no {attribute}"))?;
    scalar_attribute(value).ok_or_else(|| format!("{table}.{attribute} is not a scalar"))
}

fn leading_keys<'a>(
    config: &RecorderConfig,
    table: &str,
    items: impl IntoIterator<Item = Option<&'a Value>>,
) -> LeadingKeys {
    let mut keys = Vec::new();
    for item in items {
        match key_value(config, table, item) {
            Ok(k) => {
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
            Err(why) => return LeadingKeys::Unknown(why),
        }
    }
    LeadingKeys::Known(keys)
}

fn table_resource(
    config: &RecorderConfig,
    name_or_arn: &str,
    index: Option<&str>,
    item: Option<ItemKind>,
    keys: impl FnOnce(&str) -> LeadingKeys,
) -> Resource {
    let (name, arn) = config.table(name_or_arn);
    let leading_keys = keys(&name);
    Resource::Table {
        name,
        arn,
        index: index.map(str::to_owned),
        item,
        leading_keys,
    }
}

fn dynamodb(
    operation: &str,
    body: &Map<String, Value>,
    config: &RecorderConfig,
) -> Result<Vec<Resource>, String> {
    let mut out = Vec::new();
    if let Some(table) = str_field(body, "TableName")? {
        let index = str_field(body, "IndexName")?;
        out.push(table_resource(
            config,
            table,
            index,
            None,
            |name| match operation {
                "GetItem" | "UpdateItem" | "DeleteItem" => {
                    leading_keys(config, name, [body.get("Key")])
                }
                "PutItem" => leading_keys(config, name, [body.get("Item")]),
                "Query" => query_key(config, name, body),
                "Scan" => LeadingKeys::Unknown("a Scan names no partition key".into()),
                _ => LeadingKeys::Known(Vec::new()),
            },
        ));
    }
    if let Some(items) = body.get("TransactItems") {
        for (i, entry) in array(items, "TransactItems")?.iter().enumerate() {
            let at = format!("TransactItems[{i}]");
            let entry = object(entry, &at)?;
            let (kind, member) = ItemKind::ALL
                .iter()
                .find_map(|k| entry.get(k.member()).map(|m| (*k, m)))
                .ok_or_else(|| format!("{at} has no Put, Update, Delete, ConditionCheck or Get"))?;
            let member = object(member, &format!("{at}.{}", kind.member()))?;
            let table = str_field(member, "TableName")?
                .ok_or_else(|| format!("{at}.{} has no TableName", kind.member()))?;
            let item = match kind {
                ItemKind::Put => member.get("Item"),
                _ => member.get("Key"),
            };
            out.push(table_resource(config, table, None, Some(kind), |name| {
                leading_keys(config, name, [item])
            }));
        }
    }
    if let Some(request_items) = body.get("RequestItems") {
        for (table, requests) in object(request_items, "RequestItems")? {
            let at = format!("RequestItems.{table}");
            let items: Vec<Option<&Value>> = match requests {
                // BatchGetItem: { "Keys": [...] }
                Value::Object(m) => array(
                    m.get("Keys").ok_or_else(|| format!("{at} has no Keys"))?,
                    &format!("{at}.Keys"),
                )?
                .iter()
                .map(Some)
                .collect(),
                // BatchWriteItem: [{ "PutRequest": {"Item"} } | { "DeleteRequest": {"Key"} }]
                Value::Array(a) => a
                    .iter()
                    .map(|r| {
                        r.get("PutRequest")
                            .and_then(|p| p.get("Item"))
                            .or_else(|| r.get("DeleteRequest").and_then(|d| d.get("Key")))
                    })
                    .collect(),
                _ => return Err(format!("{at} is neither an object nor an array")),
            };
            out.push(table_resource(config, table, None, None, |name| {
                leading_keys(config, name, items)
            }));
        }
    }
    Ok(out)
}

/// The partition key value of a `Query`, from an equality on the hash key in its
/// `KeyConditionExpression` (`#pk = :v`, `pk = :v AND ...`).
fn query_key(config: &RecorderConfig, table: &str, body: &Map<String, Value>) -> LeadingKeys {
    let unknown = |why: &str| LeadingKeys::Unknown(format!("Query on {table}: {why}"));
    let Some(attribute) = config.hash_keys.get(table) else {
        return unknown("the hash key of the table is not configured");
    };
    let Some(expression) = body.get("KeyConditionExpression").and_then(Value::as_str) else {
        return unknown("no KeyConditionExpression");
    };
    let names = body.get("ExpressionAttributeNames");
    let values = body.get("ExpressionAttributeValues");
    let lower = expression.to_ascii_lowercase();
    let mut start = 0;
    let mut clauses = Vec::new();
    while let Some(pos) = lower[start..].find(" and ") {
        clauses.push(&expression[start..start + pos]);
        start += pos + 5;
    }
    clauses.push(&expression[start..]);
    for clause in clauses {
        let clause = clause.trim().trim_matches(|c| c == '(' || c == ')').trim();
        let Some((lhs, rhs)) = clause.split_once('=') else {
            continue;
        };
        if lhs.ends_with(['<', '>', '!']) {
            continue;
        }
        let (lhs, rhs) = (lhs.trim(), rhs.trim());
        let name = if lhs.starts_with('#') {
            names.and_then(|n| n.get(lhs)).and_then(Value::as_str)
        } else {
            Some(lhs)
        };
        if name == Some(attribute.as_str()) {
            return match values.and_then(|v| v.get(rhs)).and_then(scalar_attribute) {
                Some(v) => LeadingKeys::Known(vec![v]),
                None => unknown("the partition key's value is not a scalar placeholder"),
            };
        }
    }
    unknown("no equality on the partition key in KeyConditionExpression")
}

fn streams(body: &Map<String, Value>, config: &RecorderConfig) -> Vec<Resource> {
    let mut out = Vec::new();
    // ListStreams may name its table.
    if let Some(name) = body.get("TableName").and_then(Value::as_str) {
        out.push(Resource::Table {
            name: name.to_owned(),
            arn: config.table_arn(name),
            index: None,
            item: None,
            leading_keys: LeadingKeys::Known(Vec::new()),
        });
    }
    if let Some(arn) = body.get("StreamArn").and_then(Value::as_str) {
        out.push(Resource::Stream {
            arn: arn.to_owned(),
        });
    }
    // A shard iterator begins with its stream's ARN (`ARN|1|...`), on AWS and on moto.
    if let Some(iterator) = body.get("ShardIterator").and_then(Value::as_str) {
        out.push(match iterator.split_once('|') {
            Some((arn, _)) if arn.starts_with("arn:") && arn.contains("/stream/") => {
                Resource::Stream {
                    arn: arn.to_owned(),
                }
            }
            _ => Resource::Unresolved {
                field: "ShardIterator".into(),
                value: iterator.chars().take(120).collect(),
            },
        });
    }
    out
}

fn sqs(body: &Map<String, Value>, config: &RecorderConfig) -> Vec<Resource> {
    let mut out = Vec::new();
    if let Some(url) = body.get("QueueUrl").and_then(Value::as_str) {
        out.push(match config.queue_arn_from_url(url) {
            Some(arn) => Resource::Queue {
                arn,
                url: Some(url.to_owned()),
            },
            None => Resource::Unresolved {
                field: "QueueUrl".into(),
                value: url.to_owned(),
            },
        });
    } else if let Some(name) = body.get("QueueName").and_then(Value::as_str) {
        let owner = body.get("QueueOwnerAWSAccountId").and_then(Value::as_str);
        out.push(Resource::Queue {
            arn: config.queue_arn_from_name(name, owner),
            url: None,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> RecorderConfig {
        RecorderConfig::new("us-east-1", "123456789012")
            .hash_key("ledger", "entryId")
            .hash_key("idem", "id")
    }

    #[test]
    fn query_partition_key() {
        let body = br##"{"TableName":"idem","KeyConditionExpression":"#k = :v AND sk > :s",
            "ExpressionAttributeNames":{"#k":"id"},
            "ExpressionAttributeValues":{":v":{"S":"a#1"},":s":{"S":"x"}}}"##;
        let call = parse_call("DynamoDB_20120810.Query", body, &config()).unwrap();
        assert!(matches!(
            &call.resources[0],
            Resource::Table { leading_keys: LeadingKeys::Known(k), .. } if k == &["a#1"]
        ));
    }

    #[test]
    fn batch_write_keys_per_table() {
        let body = br#"{"RequestItems":{"ledger":[
            {"PutRequest":{"Item":{"entryId":{"S":"e1"}}}},
            {"DeleteRequest":{"Key":{"entryId":{"S":"e2"}}}}]}}"#;
        let call = parse_call("DynamoDB_20120810.BatchWriteItem", body, &config()).unwrap();
        assert!(matches!(
            &call.resources[..],
            [Resource::Table { leading_keys: LeadingKeys::Known(k), item: None, .. }] if k == &["e1", "e2"]
        ));
    }

    #[test]
    fn unconfigured_table_has_unknown_keys() {
        let body = br#"{"TableName":"other","Key":{"k":{"S":"v"}}}"#;
        let call = parse_call("DynamoDB_20120810.GetItem", body, &config()).unwrap();
        assert!(matches!(
            &call.resources[0],
            Resource::Table {
                leading_keys: LeadingKeys::Unknown(_),
                ..
            }
        ));
    }

    #[test]
    fn shard_iterators_name_their_stream() {
        let arn = "arn:aws:dynamodb:us-east-1:123456789012:table/p/stream/2024-01-01T00:00:00.000";
        let body = format!(r#"{{"ShardIterator":"{arn}|1|AAAA"}}"#);
        let call = parse_call(
            "DynamoDBStreams_20120810.GetRecords",
            body.as_bytes(),
            &config(),
        )
        .unwrap();
        assert_eq!(call.resources, [Resource::Stream { arn: arn.into() }]);
        let call = parse_call(
            "DynamoDBStreams_20120810.GetRecords",
            br#"{"ShardIterator":"opaque"}"#,
            &config(),
        )
        .unwrap();
        assert!(matches!(call.resources[0], Resource::Unresolved { .. }));
    }
}
