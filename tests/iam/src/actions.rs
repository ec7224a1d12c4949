//! From a recorded [`Call`] to the IAM requests AWS evaluates for it.
//!
//! The sources are in [`authorizations`]'s documentation.

use crate::call::{Call, ItemKind, LeadingKeys, Resource, Service};

/// One request IAM evaluates.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Authorization {
    /// The action, e.g. `dynamodb:PutItem`.
    pub action: String,
    /// The resource ARN, or `*` for actions without resource-level permissions.
    pub resource: String,
    /// `dynamodb:LeadingKeys` of the request; `None` when the request has no such key (not a
    /// DynamoDB item operation).
    pub leading_keys: Option<LeadingKeys>,
}

/// Why a call has no IAM mapping.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ActionError {
    /// An operation this module does not map.
    #[error("{service}.{operation}: no IAM mapping for this operation")]
    UnknownOperation {
        /// The API.
        service: Service,
        /// The operation.
        operation: String,
    },
    /// The request names no resource where the operation needs one.
    #[error("{operation}: the request names no {what}")]
    MissingResource {
        /// The operation.
        operation: String,
        /// What is missing (`table`, `queue`, `stream`).
        what: &'static str,
    },
    /// A resource the recorder could not resolve to an ARN.
    #[error("{operation}: cannot resolve {field} {value:?} to an ARN")]
    Unresolved {
        /// The operation.
        operation: String,
        /// The parameter.
        field: String,
        /// Its value.
        value: String,
    },
    /// A resource of the wrong kind for the operation (e.g. a transaction item outside a
    /// transaction).
    #[error("{operation}: unexpected resource {resource:?}")]
    Unexpected {
        /// The operation.
        operation: String,
        /// The resource.
        resource: Box<Resource>,
    },
}

/// DynamoDB operations authorized by the action of the same name on the table (or index) they
/// name.
const TABLE_OPERATIONS: &[&str] = &[
    "GetItem",
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "Query",
    "Scan",
    "DescribeTable",
    "CreateTable",
    "DeleteTable",
    "UpdateTable",
    "DescribeTimeToLive",
    "UpdateTimeToLive",
    "DescribeContinuousBackups",
    "UpdateContinuousBackups",
];

/// DynamoDB operations authorized by the action of the same name per table named.
const PER_TABLE_OPERATIONS: &[&str] = &["BatchGetItem", "BatchWriteItem"];

/// DynamoDB operations without resource-level permissions.
const DYNAMODB_ACCOUNT_OPERATIONS: &[&str] = &["ListTables", "DescribeLimits", "DescribeEndpoints"];

/// SQS operations authorized by an action on the queue they name, with the action's name when
/// it differs.
const QUEUE_OPERATIONS: &[(&str, &str)] = &[
    ("SendMessage", "SendMessage"),
    ("SendMessageBatch", "SendMessage"),
    ("ReceiveMessage", "ReceiveMessage"),
    ("DeleteMessage", "DeleteMessage"),
    ("DeleteMessageBatch", "DeleteMessage"),
    ("ChangeMessageVisibility", "ChangeMessageVisibility"),
    ("ChangeMessageVisibilityBatch", "ChangeMessageVisibility"),
    ("GetQueueAttributes", "GetQueueAttributes"),
    ("SetQueueAttributes", "SetQueueAttributes"),
    ("GetQueueUrl", "GetQueueUrl"),
    ("PurgeQueue", "PurgeQueue"),
    ("CreateQueue", "CreateQueue"),
    ("DeleteQueue", "DeleteQueue"),
    ("ListDeadLetterSourceQueues", "ListDeadLetterSourceQueues"),
    ("ListQueueTags", "ListQueueTags"),
    ("TagQueue", "TagQueue"),
    ("UntagQueue", "UntagQueue"),
];

/// The IAM requests AWS evaluates for `call`, in request order; all must be allowed.
///
/// What AWS documents, and this function encodes:
///
/// - SQS: "You cannot set permissions explicitly for `SendMessageBatch`, `DeleteMessageBatch`, or
///   `ChangeMessageVisibilityBatch`. Instead, setting permissions for `SendMessage`,
///   `DeleteMessage`, or `ChangeMessageVisibility` sets permissions for the corresponding batch
///   versions" (SQS Developer Guide, *Amazon SQS batch actions*). Every queue operation is
///   evaluated against the queue's ARN; `ListQueues` against `*`.
/// - DynamoDB transactions: "Permissions for `Put`, `Update`, `Delete`, and `Get` actions are
///   governed by the permissions used for the underlying `PutItem`, `UpdateItem`, `DeleteItem`,
///   and `GetItem` operations. For the `ConditionCheck` action, you can use the
///   `dynamodb:ConditionCheckItem` permission" (DynamoDB Developer Guide, *Using IAM with
///   DynamoDB transactions*): one request per item, on that item's table, with that item's
///   partition key as `dynamodb:LeadingKeys`. There is no `dynamodb:TransactWriteItems` action.
/// - `BatchWriteItem` and `BatchGetItem` are authorized as the actions `dynamodb:BatchWriteItem`
///   and `dynamodb:BatchGetItem` (Service Authorization Reference, *API operations defined by
///   Amazon DynamoDB*), once per table, with the partition keys of that table's requests — not
///   as `PutItem`/`DeleteItem`/`GetItem`.
/// - `ReturnValues`, `ReturnValuesOnConditionCheckFailure` (e.g. `ALL_OLD`),
///   `ReturnConsumedCapacity` and `ReturnItemCollectionMetrics` need no further action: AWS
///   documents no action for them (no `GetItem`), only the condition keys
///   `dynamodb:ReturnValues`/`dynamodb:ReturnConsumedCapacity` that can restrict them within the
///   operation's own action (and AWS's own transaction policy examples grant no read for them).
///   An `UpdateItem` that creates the item needs `dynamodb:UpdateItem` only.
/// - DynamoDB Streams: `DescribeStream`, `GetShardIterator` and `GetRecords` are the actions
///   `dynamodb:DescribeStream` etc. on the stream's ARN (`GetRecords` names its stream through
///   the shard iterator). `dynamodb:ListStreams` has no resource-level permissions (Service
///   Authorization Reference; [`reference`](crate::reference)): it is evaluated against
///   `*`, with or without a `TableName`.
/// - Lambda's event source mappings act with the function's execution role: SQS
///   `ReceiveMessage`, `DeleteMessage`(`Batch`), `GetQueueAttributes` (and
///   `ChangeMessageVisibility`); DynamoDB Streams `DescribeStream`, `GetShardIterator`,
///   `GetRecords`, `ListStreams`; `sqs:SendMessage` to an on-failure destination. All are mapped.
/// - `Query`/`Scan` with `IndexName` are evaluated against the index's ARN
///   (`.../table/NAME/index/INDEX`).
///
/// An operation not listed here is an error ([`ActionError::UnknownOperation`]), never a guess.
///
/// ```
/// use iam_conformance::{authorizations, parse_call, RecorderConfig};
///
/// let config = RecorderConfig::new("us-east-1", "123456789012");
/// let call = parse_call(
///     "AmazonSQS.SendMessageBatch",
///     br#"{"QueueUrl":"http://127.0.0.1:5000/123456789012/receipts","Entries":[]}"#,
///     &config,
/// ).unwrap();
/// let auth = authorizations(&call).unwrap();
/// assert_eq!(auth[0].action, "sqs:SendMessage");
/// assert_eq!(auth[0].resource, "arn:aws:sqs:us-east-1:123456789012:receipts");
/// ```
pub fn authorizations(call: &Call) -> Result<Vec<Authorization>, ActionError> {
    let op = call.operation.as_str();
    let unknown = || ActionError::UnknownOperation {
        service: call.service,
        operation: call.operation.clone(),
    };
    let prefix = call.service.iam_prefix();
    match call.service {
        Service::DynamoDb if matches!(op, "TransactWriteItems" | "TransactGetItems") => {
            tables(call, "table", |item| match item {
                Some(ItemKind::Put) => Some("PutItem"),
                Some(ItemKind::Update) => Some("UpdateItem"),
                Some(ItemKind::Delete) => Some("DeleteItem"),
                Some(ItemKind::ConditionCheck) => Some("ConditionCheckItem"),
                Some(ItemKind::Get) => Some("GetItem"),
                None => None,
            })
        }
        Service::DynamoDb
            if PER_TABLE_OPERATIONS.contains(&op) || TABLE_OPERATIONS.contains(&op) =>
        {
            let all = tables(call, "table", |item| item.is_none().then_some(op))?;
            if TABLE_OPERATIONS.contains(&op) && all.len() != 1 {
                return Err(ActionError::MissingResource {
                    operation: call.operation.clone(),
                    what: "single table",
                });
            }
            Ok(all)
        }
        Service::DynamoDb if DYNAMODB_ACCOUNT_OPERATIONS.contains(&op) => {
            Ok(vec![everything(prefix, op)])
        }
        // Not resource-scoped (reference::ACTIONS): evaluated against `*`, whatever the table.
        Service::DynamoDbStreams if op == "ListStreams" => Ok(vec![everything(prefix, op)]),
        Service::DynamoDbStreams
            if matches!(op, "DescribeStream" | "GetShardIterator" | "GetRecords") =>
        {
            single(call, "stream", &format!("{prefix}:{op}"))
        }
        Service::Sqs if op == "ListQueues" => Ok(vec![everything(prefix, op)]),
        Service::Sqs => {
            let action = QUEUE_OPERATIONS
                .iter()
                .find(|(o, _)| *o == op)
                .map(|(_, a)| *a)
                .ok_or_else(unknown)?;
            single(call, "queue", &format!("{prefix}:{action}"))
        }
        _ => Err(unknown()),
    }
}

fn everything(prefix: &str, op: &str) -> Authorization {
    Authorization {
        action: format!("{prefix}:{op}"),
        resource: "*".into(),
        leading_keys: None,
    }
}

/// One authorization per table entry of `call`, with the action `action_of(item)`; an entry for
/// which it gives `None` is an error.
fn tables<'a>(
    call: &'a Call,
    what: &'static str,
    action_of: impl Fn(Option<ItemKind>) -> Option<&'a str>,
) -> Result<Vec<Authorization>, ActionError> {
    let mut out = Vec::new();
    for resource in &call.resources {
        let Resource::Table {
            item, leading_keys, ..
        } = resource
        else {
            return Err(unexpected(call, resource));
        };
        let (Some(action), Some(arn)) = (action_of(*item), resource.arn()) else {
            return Err(unexpected(call, resource));
        };
        out.push(Authorization {
            action: format!("dynamodb:{action}"),
            resource: arn,
            leading_keys: Some(leading_keys.clone()),
        });
    }
    if out.is_empty() {
        return Err(ActionError::MissingResource {
            operation: call.operation.clone(),
            what,
        });
    }
    Ok(out)
}

/// The one stream or queue `call` names, with `action`.
fn single(
    call: &Call,
    what: &'static str,
    action: &str,
) -> Result<Vec<Authorization>, ActionError> {
    let mut arns = Vec::new();
    for resource in &call.resources {
        match resource {
            Resource::Stream { arn } if what == "stream" => arns.push(arn.clone()),
            Resource::Queue { arn, .. } if what == "queue" => arns.push(arn.clone()),
            Resource::Unresolved { field, value } => {
                return Err(ActionError::Unresolved {
                    operation: call.operation.clone(),
                    field: field.clone(),
                    value: value.clone(),
                });
            }
            other => return Err(unexpected(call, other)),
        }
    }
    arns.dedup();
    match arns.as_slice() {
        [arn] => Ok(vec![Authorization {
            action: action.to_owned(),
            resource: arn.clone(),
            leading_keys: None,
        }]),
        _ => Err(ActionError::MissingResource {
            operation: call.operation.clone(),
            what,
        }),
    }
}

fn unexpected(call: &Call, resource: &Resource) -> ActionError {
    ActionError::Unexpected {
        operation: call.operation.clone(),
        resource: Box::new(resource.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::RecorderConfig;
    use crate::parse::parse_call;

    fn auth(target: &str, body: &str) -> Result<Vec<Authorization>, ActionError> {
        let config = RecorderConfig::new("us-east-1", "123456789012")
            .hash_key("t", "pk")
            .hash_key("u", "pk");
        authorizations(&parse_call(target, body.as_bytes(), &config).unwrap())
    }

    fn actions(a: &[Authorization]) -> Vec<(&str, &str)> {
        a.iter()
            .map(|a| (a.action.as_str(), a.resource.as_str()))
            .collect()
    }

    #[test]
    fn transaction_items_are_authorized_one_by_one() {
        let a = auth(
            "DynamoDB_20120810.TransactWriteItems",
            r#"{"TransactItems":[
                {"ConditionCheck":{"TableName":"t","Key":{"pk":{"S":"1"}}}},
                {"Delete":{"TableName":"u","Key":{"pk":{"S":"2"}}}}]}"#,
        )
        .unwrap();
        assert_eq!(
            actions(&a),
            [
                (
                    "dynamodb:ConditionCheckItem",
                    "arn:aws:dynamodb:us-east-1:123456789012:table/t"
                ),
                (
                    "dynamodb:DeleteItem",
                    "arn:aws:dynamodb:us-east-1:123456789012:table/u"
                )
            ]
        );
        assert_eq!(
            a[1].leading_keys,
            Some(LeadingKeys::Known(vec!["2".into()]))
        );
    }

    #[test]
    fn batches() {
        let a = auth(
            "DynamoDB_20120810.BatchWriteItem",
            r#"{"RequestItems":{"t":[{"PutRequest":{"Item":{"pk":{"S":"1"}}}}]}}"#,
        )
        .unwrap();
        assert_eq!(a[0].action, "dynamodb:BatchWriteItem");
        let a = auth(
            "AmazonSQS.DeleteMessageBatch",
            r#"{"QueueUrl":"http://h:1/123456789012/q","Entries":[]}"#,
        )
        .unwrap();
        assert_eq!(
            actions(&a),
            [("sqs:DeleteMessage", "arn:aws:sqs:us-east-1:123456789012:q")]
        );
        let a = auth(
            "AmazonSQS.ChangeMessageVisibilityBatch",
            r#"{"QueueUrl":"http://h:1/123456789012/q","Entries":[]}"#,
        )
        .unwrap();
        assert_eq!(a[0].action, "sqs:ChangeMessageVisibility");
    }

    #[test]
    fn index_and_streams_and_unknown() {
        let a = auth(
            "DynamoDB_20120810.Query",
            r#"{"TableName":"t","IndexName":"by-date","KeyConditionExpression":"pk = :v","ExpressionAttributeValues":{":v":{"S":"1"}}}"#,
        )
        .unwrap();
        assert_eq!(
            a[0].resource,
            "arn:aws:dynamodb:us-east-1:123456789012:table/t/index/by-date"
        );
        let a = auth(
            "DynamoDBStreams_20120810.ListStreams",
            r#"{"TableName":"t"}"#,
        )
        .unwrap();
        assert_eq!(actions(&a), [("dynamodb:ListStreams", "*")]);
        let a = auth("DynamoDBStreams_20120810.ListStreams", "{}").unwrap();
        assert_eq!(actions(&a), [("dynamodb:ListStreams", "*")]);
        let a = auth(
            "DynamoDBStreams_20120810.DescribeStream",
            r#"{"StreamArn":"arn:aws:dynamodb:us-east-1:1:table/t/stream/x"}"#,
        )
        .unwrap();
        assert_eq!(a[0].action, "dynamodb:DescribeStream");
        assert!(matches!(
            auth("DynamoDB_20120810.ExecuteStatement", "{}"),
            Err(ActionError::UnknownOperation { .. })
        ));
        assert!(matches!(
            auth("AmazonSQS.SendMessage", "{}"),
            Err(ActionError::MissingResource { .. })
        ));
    }
}
