//! What AWS documents about the actions the project's roles grant: the resource type each
//! action is authorized on, the narrowest resource a policy can name for a request, and the
//! actions Lambda itself performs with a function's execution role.
//!
//! Resource types are those of the *Service Authorization Reference*
//! (<https://docs.aws.amazon.com/service-authorization/latest/reference/>): *Actions, resources,
//! and condition keys for Amazon DynamoDB* (`list_amazondynamodb.html`), *... for Amazon SQS*
//! (`list_amazonsqs.html`) and *... for Amazon CloudWatch Logs* (`list_amazoncloudwatchlogs.html`).
//! An action whose *Resource types* column is empty has no resource-level permissions: "you must
//! specify all resources (`*`)" in the statement that grants it, and a statement naming an ARN
//! for it grants nothing.

use crate::wildcard::wildcard_match;
use local_aws::arn::Arn;

/// A resource type of the Service Authorization Reference, as far as the project uses them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ResourceType {
    /// `arn:${Partition}:dynamodb:${Region}:${Account}:table/${TableName}`.
    Table,
    /// `.../table/${TableName}/index/${IndexName}`.
    Index,
    /// `.../table/${TableName}/stream/${StreamLabel}`.
    Stream,
    /// `arn:${Partition}:sqs:${Region}:${Account}:${QueueName}`.
    Queue,
    /// `arn:${Partition}:logs:${Region}:${Account}:log-group:${LogGroupName}`.
    LogGroup,
    /// `...:log-group:${LogGroupName}:log-stream:${LogStreamName}`.
    LogStream,
}

use ResourceType::{Index, LogGroup, LogStream, Queue, Stream, Table};

/// The actions the project's roles may grant, with their resource types (empty: no
/// resource-level permissions, the statement's `Resource` must be `*`). An action not listed is
/// reported rather than guessed: add it here, from the reference.
pub const ACTIONS: &[(&str, &[ResourceType])] = &[
    // DynamoDB items.
    ("dynamodb:GetItem", &[Table]),
    ("dynamodb:PutItem", &[Table]),
    ("dynamodb:UpdateItem", &[Table]),
    ("dynamodb:DeleteItem", &[Table]),
    ("dynamodb:ConditionCheckItem", &[Table]),
    ("dynamodb:BatchGetItem", &[Table]),
    ("dynamodb:BatchWriteItem", &[Table]),
    ("dynamodb:Query", &[Table, Index]),
    ("dynamodb:Scan", &[Table, Index]),
    // DynamoDB tables.
    ("dynamodb:DescribeTable", &[Table]),
    ("dynamodb:CreateTable", &[Table]),
    ("dynamodb:DeleteTable", &[Table]),
    ("dynamodb:UpdateTable", &[Table]),
    ("dynamodb:DescribeTimeToLive", &[Table]),
    ("dynamodb:UpdateTimeToLive", &[Table]),
    ("dynamodb:DescribeContinuousBackups", &[Table]),
    ("dynamodb:UpdateContinuousBackups", &[Table]),
    ("dynamodb:ListTables", &[]),
    ("dynamodb:DescribeLimits", &[]),
    ("dynamodb:DescribeEndpoints", &[]),
    // DynamoDB Streams: the three reads act on the stream; ListStreams is not resource-scoped.
    ("dynamodb:DescribeStream", &[Stream]),
    ("dynamodb:GetRecords", &[Stream]),
    ("dynamodb:GetShardIterator", &[Stream]),
    ("dynamodb:ListStreams", &[]),
    // SQS: every queue action acts on the queue (the batch operations are authorized by these).
    ("sqs:SendMessage", &[Queue]),
    ("sqs:ReceiveMessage", &[Queue]),
    ("sqs:DeleteMessage", &[Queue]),
    ("sqs:ChangeMessageVisibility", &[Queue]),
    ("sqs:GetQueueAttributes", &[Queue]),
    ("sqs:SetQueueAttributes", &[Queue]),
    ("sqs:GetQueueUrl", &[Queue]),
    ("sqs:PurgeQueue", &[Queue]),
    ("sqs:CreateQueue", &[Queue]),
    ("sqs:DeleteQueue", &[Queue]),
    ("sqs:ListDeadLetterSourceQueues", &[Queue]),
    ("sqs:ListQueueTags", &[Queue]),
    ("sqs:TagQueue", &[Queue]),
    ("sqs:UntagQueue", &[Queue]),
    ("sqs:StartMessageMoveTask", &[Queue]),
    ("sqs:CancelMessageMoveTask", &[Queue]),
    ("sqs:ListMessageMoveTasks", &[Queue]),
    ("sqs:ListQueues", &[]),
    // CloudWatch Logs, as Lambda writes a function's logs.
    ("logs:CreateLogGroup", &[LogGroup]),
    ("logs:CreateLogStream", &[LogGroup]),
    ("logs:PutLogEvents", &[LogStream]),
    ("logs:DeleteLogGroup", &[LogGroup]),
];

/// DynamoDB actions on items: their requests carry `dynamodb:LeadingKeys` (the partition keys
/// of the items), which a condition can restrict (DynamoDB Developer Guide, *Using IAM policy
/// conditions for fine-grained access control*).
pub const ITEM_ACTIONS: &[&str] = &[
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:ConditionCheckItem",
    "dynamodb:BatchGetItem",
    "dynamodb:BatchWriteItem",
    "dynamodb:Query",
    "dynamodb:Scan",
];

/// What Lambda's event source mapping for a DynamoDB stream does with the function's execution
/// role: the actions of the AWS managed policy `AWSLambdaDynamoDBExecutionRole` (its DynamoDB
/// part; AWS Managed Policy Reference) and of AWS's example policy for a Lambda function on a
/// stream (DynamoDB Developer Guide, *IAM policy to allow an AWS Lambda function to access
/// DynamoDB stream records*).
pub const DYNAMODB_STREAM_SOURCE: &[&str] = &[
    "dynamodb:DescribeStream",
    "dynamodb:GetRecords",
    "dynamodb:GetShardIterator",
    "dynamodb:ListStreams",
];

/// What Lambda's event source mapping for an SQS queue does with the function's execution role:
/// "Lambda needs the following permissions to manage messages in your Amazon SQS queue:
/// `sqs:ReceiveMessage`, `sqs:DeleteMessage`, `sqs:GetQueueAttributes`" (Lambda Developer Guide,
/// *Using Lambda with Amazon SQS*, execution role permissions; the SQS part of the managed policy
/// `AWSLambdaSQSQueueExecutionRole`).
pub const SQS_SOURCE: &[&str] = &[
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage",
    "sqs:GetQueueAttributes",
];

/// An on-failure destination of a stream event source: "Your execution role must have
/// permissions for the destination: For SQS destinations: `sqs:SendMessage`" (Lambda Developer
/// Guide, *Retain discarded records for a DynamoDB event source in Lambda*).
pub const SQS_ON_FAILURE: &[&str] = &["sqs:SendMessage"];

/// What the Lambda platform does with the execution role to write the function's logs to its
/// log group (the managed policy `AWSLambdaBasicExecutionRole` grants these, and
/// `logs:CreateLogGroup`, which a template that creates the log group does not need).
pub const PLATFORM_LOGS: &[&str] = &["logs:CreateLogStream", "logs:PutLogEvents"];

/// The resource types of `action` (matched case-insensitively), if the table knows it.
///
/// ```
/// use iam_conformance::{ResourceType, resource_types};
/// assert_eq!(resource_types("dynamodb:GetRecords"), Some(&[ResourceType::Stream][..]));
/// assert_eq!(resource_types("dynamodb:ListStreams"), Some(&[][..]));
/// assert_eq!(resource_types("dynamodb:ExecuteStatement"), None);
/// ```
pub fn resource_types(action: &str) -> Option<&'static [ResourceType]> {
    ACTIONS
        .iter()
        .find(|(a, _)| a.eq_ignore_ascii_case(action))
        .map(|(_, types)| *types)
}

/// Whether `action` can be granted on specific resources (`Some(false)`: only on `*`).
pub fn is_resource_scoped(action: &str) -> Option<bool> {
    resource_types(action).map(|types| !types.is_empty())
}

/// The narrowest resource pattern a policy can write that allows `action` on `resource` (the
/// ARN a request is evaluated against): `*` for an action without resource-level permissions;
/// for a stream, every stream of its table (`table/NAME/stream/*`: the label is DynamoDB's,
/// new each time the stream is enabled, and AWS's example policy names it so); for a log group
/// or stream, the group with all its streams (`log-group:NAME:*`, its `Arn` attribute);
/// otherwise the resource itself. A grant is as narrow as written when this pattern covers it.
///
/// ```
/// use iam_conformance::narrowest;
/// let stream = "arn:aws:dynamodb:us-east-1:1:table/payments/stream/2024-01-01T00:00:00.000";
/// assert_eq!(narrowest("dynamodb:GetRecords", stream), "arn:aws:dynamodb:us-east-1:1:table/payments/stream/*");
/// assert_eq!(narrowest("dynamodb:ListStreams", "*"), "*");
/// assert_eq!(narrowest("sqs:SendMessage", "arn:aws:sqs:us-east-1:1:q"), "arn:aws:sqs:us-east-1:1:q");
/// ```
pub fn narrowest(action: &str, resource: &str) -> String {
    if is_resource_scoped(action) == Some(false) {
        return "*".into();
    }
    let Ok(arn) = Arn::parse(resource) else {
        return resource.to_owned();
    };
    if let Some((table, _label)) = arn.resource.split_once("/stream/") {
        return arn.with_resource(&format!("{table}/stream/*"));
    }
    if let Some(group) = arn.resource.strip_prefix("log-group:") {
        let name = group.split(':').next().unwrap_or(group);
        return arn.with_resource(&format!("log-group:{name}:*"));
    }
    resource.to_owned()
}

/// Whether a grant's resource pattern is no broader than `narrowest` (a pattern from
/// [`narrowest`], whose only wildcards are `*`): every resource the grant matches, it matches.
pub(crate) fn within(grant_resource: &str, narrowest: &str) -> bool {
    wildcard_match(narrowest, grant_resource, false)
}

/// Why a resource pattern of a resource-scoped action names no particular resource (`*`, a
/// wildcard partition, service, region or account, or a resource name that is only
/// wildcards), if it does not.
///
/// ```
/// use iam_conformance::names_no_resource;
/// assert!(names_no_resource("*").is_some());
/// assert!(names_no_resource("arn:aws:dynamodb:us-east-1:1:table/*").is_some());
/// assert!(names_no_resource("arn:aws:sqs:*:1:q").is_some());
/// assert!(names_no_resource("arn:aws:dynamodb:us-east-1:1:table/payments/stream/*").is_none());
/// assert!(names_no_resource("arn:aws:logs:us-east-1:1:log-group:/aws/lambda/f:*").is_none());
/// ```
pub fn names_no_resource(resource: &str) -> Option<&'static str> {
    let wild = |s: &str| s.contains(['*', '?']);
    if resource == "*" {
        return Some("every resource");
    }
    let Ok(arn) = Arn::parse(resource) else {
        return Some("not an ARN");
    };
    if [arn.partition, arn.service, arn.region, arn.account]
        .iter()
        .any(|p| wild(p))
    {
        return Some("a wildcard partition, service, region or account");
    }
    // The name: a table's up to its first `/`, a log group's up to its first `:`.
    let name = if let Some(rest) = arn.resource.strip_prefix("table/") {
        rest.split('/').next().unwrap_or(rest)
    } else if let Some(rest) = arn.resource.strip_prefix("log-group:") {
        rest.split(':').next().unwrap_or(rest)
    } else {
        arn.resource
    };
    if name.is_empty() || name.chars().all(|c| c == '*' || c == '?') {
        return Some("a resource name that is only wildcards");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_action_is_unique_and_item_actions_are_listed() {
        for (i, (a, _)) in ACTIONS.iter().enumerate() {
            assert!(
                ACTIONS[i + 1..]
                    .iter()
                    .all(|(b, _)| !a.eq_ignore_ascii_case(b)),
                "{a} twice"
            );
        }
        for a in ITEM_ACTIONS
            .iter()
            .chain(DYNAMODB_STREAM_SOURCE)
            .chain(SQS_SOURCE)
            .chain(SQS_ON_FAILURE)
            .chain(PLATFORM_LOGS)
        {
            assert!(resource_types(a).is_some(), "{a}");
        }
    }

    #[test]
    fn narrowest_and_within() {
        let group = "arn:aws:logs:us-east-1:1:log-group:/aws/lambda/f:log-stream:*";
        assert_eq!(
            narrowest("logs:PutLogEvents", group),
            "arn:aws:logs:us-east-1:1:log-group:/aws/lambda/f:*"
        );
        let stream = "arn:aws:dynamodb:us-east-1:1:table/p/stream/*";
        assert!(within(stream, stream));
        assert!(within(
            "arn:aws:dynamodb:us-east-1:1:table/p/stream/2024",
            stream
        ));
        assert!(!within("arn:aws:dynamodb:us-east-1:1:table/*", stream));
        assert!(!within("*", stream));
        assert!(within("*", "*"));
    }
}
