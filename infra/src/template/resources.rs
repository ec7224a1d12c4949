//! Queues and tables.

/// An `AWS::SQS::Queue`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Queue {
    /// The logical id.
    pub logical_id: String,
    /// The queue name, with the [`Naming`](super::Naming) applied.
    pub name: String,
    /// `FifoQueue`.
    pub fifo: bool,
    /// `ContentBasedDeduplication` (FIFO only).
    pub content_based_deduplication: bool,
    /// `VisibilityTimeout` in seconds (default 30).
    pub visibility_timeout: u32,
    /// `MessageRetentionPeriod` in seconds (default 345600, 4 days).
    pub message_retention_period: u32,
    /// `DelaySeconds` (default 0).
    pub delay_seconds: u32,
    /// `ReceiveMessageWaitTimeSeconds`, when set.
    pub receive_message_wait_time_seconds: Option<u32>,
    /// `MaximumMessageSize`, when set.
    pub maximum_message_size: Option<u32>,
    /// `RedrivePolicy`.
    pub redrive: Option<Redrive>,
    /// `RedriveAllowPolicy`: which queues may use this one as their dead-letter queue.
    pub redrive_allow_policy: Option<RedriveAllowPolicy>,
}

/// A queue's `RedrivePolicy`, with the dead-letter queue as a logical id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redrive {
    /// Logical id of the dead-letter queue (from `deadLetterTargetArn: !GetAtt X.Arn`).
    pub dead_letter_queue: String,
    /// `maxReceiveCount`, resolved.
    pub max_receive_count: u32,
}

/// A queue's `RedriveAllowPolicy`, with the source queues as logical ids.
///
/// A source queue is named by `!GetAtt Q.Arn` or by an ARN whose last part is the name of a
/// queue of the template (`!Sub "arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:${QueueNameParameter}"`,
/// the form that avoids a reference cycle); the harness maps it to that queue's local name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedriveAllowPolicy {
    /// `redrivePermission: allowAll`.
    AllowAll,
    /// `redrivePermission: denyAll`: no queue may dead-letter to it.
    DenyAll,
    /// `redrivePermission: byQueue` with `sourceQueueArns` (at most 10).
    ByQueue(Vec<String>),
}

impl RedriveAllowPolicy {
    /// `allowAll`, `denyAll` or `byQueue`.
    pub fn permission(&self) -> &'static str {
        match self {
            Self::AllowAll => "allowAll",
            Self::DenyAll => "denyAll",
            Self::ByQueue(_) => "byQueue",
        }
    }

    /// The attribute's JSON document, each source queue's ARN given by `arn_of` (a logical id
    /// in, an ARN out).
    ///
    /// ```
    /// use local_aws::template::RedriveAllowPolicy;
    /// let policy = RedriveAllowPolicy::ByQueue(vec!["Jobs".into()]);
    /// let doc = policy.document(|id| format!("arn:aws:sqs:us-east-1:123456789012:{id}"));
    /// assert_eq!(doc["redrivePermission"], "byQueue");
    /// assert_eq!(doc["sourceQueueArns"][0], "arn:aws:sqs:us-east-1:123456789012:Jobs");
    /// ```
    pub fn document(&self, arn_of: impl Fn(&str) -> String) -> serde_json::Value {
        match self {
            Self::ByQueue(sources) => serde_json::json!({
                "redrivePermission": self.permission(),
                "sourceQueueArns": sources.iter().map(|s| arn_of(s)).collect::<Vec<_>>(),
            }),
            _ => serde_json::json!({ "redrivePermission": self.permission() }),
        }
    }
}

/// A DynamoDB attribute type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum AttributeType {
    /// `S`
    String,
    /// `N`
    Number,
    /// `B`
    Binary,
}

impl AttributeType {
    /// `S`, `N` or `B`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::String => "S",
            Self::Number => "N",
            Self::Binary => "B",
        }
    }
}

/// A key's role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum KeyType {
    /// Partition key.
    Hash,
    /// Sort key.
    Range,
}

impl KeyType {
    /// `HASH` or `RANGE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hash => "HASH",
            Self::Range => "RANGE",
        }
    }
}

/// One element of a key schema, with its attribute type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyAttribute {
    /// Attribute name.
    pub name: String,
    /// `S`, `N` or `B`.
    pub attribute_type: AttributeType,
    /// `HASH` or `RANGE`.
    pub key_type: KeyType,
}

/// An `AWS::DynamoDB::Table`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    /// The logical id.
    pub logical_id: String,
    /// The table name, with the [`Naming`](super::Naming) applied.
    pub name: String,
    /// The key schema in template order (partition key first), with attribute types.
    pub key_schema: Vec<KeyAttribute>,
    /// The TTL attribute when `TimeToLiveSpecification.Enabled` is true.
    pub ttl_attribute: Option<String>,
    /// `StreamSpecification.StreamViewType`: the table's stream, if it has one.
    pub stream_view_type: Option<StreamViewType>,
    /// `GlobalSecondaryIndexes`, in template order.
    pub global_secondary_indexes: Vec<SecondaryIndex>,
}

/// A global secondary index of a [`Table`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecondaryIndex {
    /// `IndexName`.
    pub name: String,
    /// Its key schema (partition key first), with attribute types.
    pub key_schema: Vec<KeyAttribute>,
    /// What it carries besides the keys.
    pub projection: Projection,
}

/// The attributes a secondary index carries (`Projection`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Projection {
    /// `KEYS_ONLY`: the table's and the index's keys.
    KeysOnly,
    /// `INCLUDE`: the keys and these attributes.
    Include(Vec<String>),
    /// `ALL`: every attribute.
    All,
}

/// What a table's stream records carry (`StreamSpecification.StreamViewType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum StreamViewType {
    /// `KEYS_ONLY`
    KeysOnly,
    /// `NEW_IMAGE`
    NewImage,
    /// `OLD_IMAGE`
    OldImage,
    /// `NEW_AND_OLD_IMAGES`
    NewAndOldImages,
}

impl StreamViewType {
    /// The API's name, e.g. `NEW_IMAGE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::KeysOnly => "KEYS_ONLY",
            Self::NewImage => "NEW_IMAGE",
            Self::OldImage => "OLD_IMAGE",
            Self::NewAndOldImages => "NEW_AND_OLD_IMAGES",
        }
    }

    /// Parses the API's name.
    pub fn parse(name: &str) -> Option<Self> {
        [
            Self::KeysOnly,
            Self::NewImage,
            Self::OldImage,
            Self::NewAndOldImages,
        ]
        .into_iter()
        .find(|t| t.as_str() == name)
    }
}

impl Table {
    /// The partition key.
    pub fn partition_key(&self) -> &KeyAttribute {
        self.key_schema
            .iter()
            .find(|k| k.key_type == KeyType::Hash)
            .expect("validated at parse time: one HASH key")
    }

    /// The sort key, if any.
    pub fn sort_key(&self) -> Option<&KeyAttribute> {
        self.key_schema
            .iter()
            .find(|k| k.key_type == KeyType::Range)
    }
}
