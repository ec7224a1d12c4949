//! What a recorded request is: a [`Call`] on a [`Service`], the [`Resource`]s it names and the
//! partition keys it uses ([`LeadingKeys`]), and the [`RecorderConfig`] that turns names into
//! ARNs.

use std::collections::BTreeMap;
use std::fmt;

use local_aws::arn::{self, Arn};

/// The AWS API a request went to.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Service {
    /// DynamoDB (`DynamoDB_20120810.*`).
    DynamoDb,
    /// DynamoDB Streams (`DynamoDBStreams_20120810.*`); its IAM actions are `dynamodb:*`.
    DynamoDbStreams,
    /// SQS (`AmazonSQS.*`).
    Sqs,
}

impl Service {
    /// The IAM service prefix of its actions: `dynamodb` (for DynamoDB Streams too) or `sqs`.
    pub fn iam_prefix(self) -> &'static str {
        match self {
            Self::DynamoDb | Self::DynamoDbStreams => "dynamodb",
            Self::Sqs => "sqs",
        }
    }

    /// The service and the operation named by an `X-Amz-Target` header value.
    ///
    /// ```
    /// use iam_conformance::Service;
    /// assert_eq!(Service::from_target("AmazonSQS.SendMessageBatch"), Some((Service::Sqs, "SendMessageBatch")));
    /// assert_eq!(Service::from_target("DynamoDBStreams_20120810.GetRecords"), Some((Service::DynamoDbStreams, "GetRecords")));
    /// assert_eq!(Service::from_target("Kinesis_20131202.PutRecord"), None);
    /// ```
    pub fn from_target(target: &str) -> Option<(Self, &str)> {
        let (prefix, operation) = target.split_once('.')?;
        let service = if prefix.starts_with("DynamoDBStreams_") {
            Self::DynamoDbStreams
        } else if prefix.starts_with("DynamoDB_") {
            Self::DynamoDb
        } else if prefix == "AmazonSQS" {
            Self::Sqs
        } else {
            return None;
        };
        (!operation.is_empty()).then_some((service, operation))
    }
}

impl fmt::Display for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::DynamoDb => "DynamoDB",
            Self::DynamoDbStreams => "DynamoDBStreams",
            Self::Sqs => "SQS",
        })
    }
}

/// The kind of one item of `TransactWriteItems`/`TransactGetItems` (the member naming it).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum ItemKind {
    /// `Put`.
    Put,
    /// `Update`.
    Update,
    /// `Delete`.
    Delete,
    /// `ConditionCheck`.
    ConditionCheck,
    /// `Get` (`TransactGetItems`).
    Get,
}

impl ItemKind {
    pub(crate) const ALL: [Self; 5] = [
        Self::Put,
        Self::Update,
        Self::Delete,
        Self::ConditionCheck,
        Self::Get,
    ];

    /// The member name in the request (`Put`, `Update`, ...).
    pub fn member(self) -> &'static str {
        match self {
            Self::Put => "Put",
            Self::Update => "Update",
            Self::Delete => "Delete",
            Self::ConditionCheck => "ConditionCheck",
            Self::Get => "Get",
        }
    }
}

/// The partition key values a request uses on a table: IAM's `dynamodb:LeadingKeys`.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum LeadingKeys {
    /// These values (empty when the request names no item, e.g. `DescribeTable`).
    Known(Vec<String>),
    /// Not derived from the request (the reason), e.g. a table whose hash key is not configured.
    Unknown(String),
}

/// A resource named by a request.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Resource {
    /// A DynamoDB table (or one of its indexes).
    Table {
        /// Table name.
        name: String,
        /// Table ARN (`arn:aws:dynamodb:REGION:ACCOUNT:table/NAME`).
        arn: String,
        /// The index (`IndexName` of a `Query`/`Scan`).
        index: Option<String>,
        /// The transaction item this entry is, for `TransactWriteItems`/`TransactGetItems`.
        item: Option<ItemKind>,
        /// The partition key values used on this table (by this item).
        leading_keys: LeadingKeys,
    },
    /// A DynamoDB stream (`...:table/NAME/stream/LABEL`).
    Stream {
        /// Stream ARN.
        arn: String,
    },
    /// An SQS queue.
    Queue {
        /// Queue ARN (`arn:aws:sqs:REGION:ACCOUNT:NAME`).
        arn: String,
        /// The URL the request used, if it used one.
        url: Option<String>,
    },
    /// A parameter that names a resource the recorder could not turn into an ARN.
    Unresolved {
        /// The request parameter (`ShardIterator`, `QueueUrl`, ...).
        field: String,
        /// Its value.
        value: String,
    },
}

impl Resource {
    /// The ARN IAM evaluates (an index's ARN for a table entry with an index).
    pub fn arn(&self) -> Option<String> {
        match self {
            Self::Table {
                arn, index: None, ..
            }
            | Self::Stream { arn }
            | Self::Queue { arn, .. } => Some(arn.clone()),
            Self::Table {
                arn,
                index: Some(index),
                ..
            } => Some(format!("{arn}/index/{index}")),
            Self::Unresolved { .. } => None,
        }
    }
}

/// One request as sent (per operation call, not per retry attempt).
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Call {
    /// The API.
    pub service: Service,
    /// The operation (`UpdateItem`, `SendMessageBatch`, ...).
    pub operation: String,
    /// The resources it names, in request order.
    pub resources: Vec<Resource>,
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.service, self.operation)
    }
}

/// What the recorder needs to turn names into ARNs and items into partition keys.
///
/// ```
/// use iam_conformance::RecorderConfig;
/// let config = RecorderConfig::new("us-east-1", "123456789012").hash_key("payments", "paymentId");
/// assert_eq!(config.table_arn("payments"), "arn:aws:dynamodb:us-east-1:123456789012:table/payments");
/// assert_eq!(
///     config.queue_arn_from_url("http://127.0.0.1:5000/123456789012/receipts").as_deref(),
///     Some("arn:aws:sqs:us-east-1:123456789012:receipts"),
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecorderConfig {
    /// The ARN partition (`aws`).
    pub partition: String,
    /// The region of table and queue ARNs.
    pub region: String,
    /// The account of table ARNs (queue URLs carry their own).
    pub account_id: String,
    /// Partition key (HASH) attribute by table name.
    pub hash_keys: BTreeMap<String, String>,
}

impl RecorderConfig {
    /// For `region` and `account_id` (partition `aws`), with no tables.
    pub fn new(region: impl Into<String>, account_id: impl Into<String>) -> Self {
        Self {
            partition: "aws".into(),
            region: region.into(),
            account_id: account_id.into(),
            hash_keys: BTreeMap::new(),
        }
    }

    /// Table `table` (its physical name) has the partition key `attribute`.
    pub fn hash_key(mut self, table: impl Into<String>, attribute: impl Into<String>) -> Self {
        self.hash_keys.insert(table.into(), attribute.into());
        self
    }

    /// The ARN of the table `name`.
    pub fn table_arn(&self, name: &str) -> String {
        arn::table(&self.partition, &self.region, &self.account_id, name)
    }

    /// The ARN of the queue at `url` (`http(s)://HOST[:PORT]/ACCOUNT/NAME`); the region is the
    /// host's for `sqs.REGION.amazonaws.com`, the configured one otherwise (a local endpoint).
    pub fn queue_arn_from_url(&self, url: &str) -> Option<String> {
        let rest = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"))?;
        let (host, path) = rest.split_once('/')?;
        let mut segments = path.trim_end_matches('/').split('/');
        let (Some(account), Some(name), None) = (segments.next(), segments.next(), segments.next())
        else {
            return None;
        };
        if account.is_empty() || name.is_empty() {
            return None;
        }
        let host = host.split(':').next().unwrap_or(host);
        let region = host
            .strip_prefix("sqs.")
            .and_then(|h| h.strip_suffix(".amazonaws.com"))
            .filter(|r| !r.is_empty() && !r.contains('.'))
            .unwrap_or(&self.region);
        Some(arn::queue(&self.partition, region, account, name))
    }

    pub(crate) fn queue_arn_from_name(&self, name: &str, owner: Option<&str>) -> String {
        let account = owner.unwrap_or(&self.account_id);
        arn::queue(&self.partition, &self.region, account, name)
    }

    /// Name and ARN of a `TableName` parameter, which may be either.
    pub(crate) fn table(&self, name_or_arn: &str) -> (String, String) {
        match Arn::parse(name_or_arn)
            .ok()
            .and_then(|a| a.resource.strip_prefix("table/"))
        {
            Some(name) => (name.to_owned(), name_or_arn.to_owned()),
            None => (name_or_arn.to_owned(), self.table_arn(name_or_arn)),
        }
    }
}
