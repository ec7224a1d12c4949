//! Stream and Kafka events for tests: [`StreamEventBuilder`] builds a DynamoDB stream, Kinesis
//! or Kafka event as Lambda delivers it, from records given as an order key and a JSON payload.

use aws_lambda_events::dynamodb::Event as DynamoDbEvent;
use aws_lambda_events::kafka::KafkaEvent;
use aws_lambda_events::kinesis::KinesisEvent;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};

/// The Kinesis stream of the events built.
pub const KINESIS_STREAM_ARN: &str = "arn:aws:kinesis:us-east-1:123456789012:stream/payments";
/// The DynamoDB stream of the events built.
pub const DYNAMODB_STREAM_ARN: &str =
    "arn:aws:dynamodb:us-east-1:123456789012:table/payments/stream/2026-01-01T00:00:00.000";
/// The Kafka topic of the events built.
pub const KAFKA_TOPIC: &str = "payments";

#[derive(Debug, Clone)]
struct Entry {
    shard: String,
    key: Option<String>,
    payload: Option<Value>,
    /// A Kinesis record's data other than its payload's JSON: a KPL aggregate.
    data: Option<Vec<u8>>,
    sequence: u128,
}

/// Builds the same records as a DynamoDB stream event ([`dynamodb`](Self::dynamodb)), a Kinesis
/// event ([`kinesis`](Self::kinesis)) or a Kafka event ([`kafka`](Self::kafka)).
///
/// [`record`](Self::record) adds a record of an order key (a DynamoDB item's partition key
/// `pk`, a Kinesis partition key, a Kafka key) and a JSON payload (the new image, the data, the
/// value) to the current shard ([`shard`](Self::shard); `shardId-000000000000`, partition 0 for
/// Kafka), with the next sequence number (offset) of that shard, or [`at`](Self::at) the one
/// given.
///
/// ```
/// use lambda_idempotency::test_util::StreamEventBuilder;
/// use serde_json::json;
///
/// let events = StreamEventBuilder::new()
///     .record("acct-1", json!({"paymentId": "p-1"}))
///     .record("acct-2", json!({"paymentId": "p-2"}));
/// let kinesis = events.kinesis();
/// assert_eq!(kinesis.payload.records[1].kinesis.partition_key, "acct-2");
/// let kafka = events.kafka();
/// assert_eq!(kafka.payload.records["payments-0"].len(), 2);
/// ```
#[derive(Debug, Clone)]
pub struct StreamEventBuilder {
    shard: String,
    entries: Vec<Entry>,
    context: Context,
}

impl Default for StreamEventBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl StreamEventBuilder {
    /// No records, shard `shardId-000000000000`, the default [`Context`] (no deadline).
    pub fn new() -> Self {
        Self {
            shard: "0".to_owned(),
            entries: Vec::new(),
            context: Context::default(),
        }
    }

    /// The records added next are of shard (partition) `n`.
    pub fn shard(mut self, n: u32) -> Self {
        self.shard = n.to_string();
        self
    }

    /// The event's context (its deadline, say).
    pub fn context(mut self, context: Context) -> Self {
        self.context = context;
        self
    }

    /// Adds a record of `key` with `payload`.
    pub fn record(mut self, key: impl Into<String>, payload: Value) -> Self {
        let sequence = self.next_sequence();
        self.entries.push(Entry {
            shard: self.shard.clone(),
            key: Some(key.into()),
            payload: Some(payload),
            data: None,
            sequence,
        });
        self
    }

    /// Adds a Kinesis record that aggregates `records` (each a partition key and a JSON
    /// payload) as the Kinesis Producer Library does: one record, of the first one's partition
    /// key, whose data is the KPL's aggregate of them (feature `kinesis-aggregation`). Only
    /// [`kinesis`](Self::kinesis) builds it: [`dynamodb`](Self::dynamodb) and
    /// [`kafka`](Self::kafka) panic on it.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use aws_lambda_events::kinesis::KinesisEventRecord;
    /// use lambda_idempotency::batch::{BatchProcessor, RecordContext, json};
    /// use lambda_idempotency::test_util::StreamEventBuilder;
    /// use serde_json::{Value, json};
    ///
    /// let event = StreamEventBuilder::new()
    ///     .aggregate([("acct-1", json!({"n": 1})), ("acct-2", json!({"n": 2}))])
    ///     .kinesis();
    /// let handler = json(|_v: Value, _ctx: RecordContext| async { Ok::<_, std::io::Error>(()) });
    /// let report = BatchProcessor::new().process(&event, &handler).await.unwrap();
    /// let ids: Vec<_> = report.records.iter().map(|r| r.message_id.as_str()).collect();
    /// // Each user record's id: the stream's ARN, the shard, the enclosing sequence number and
    /// // its sub-sequence number.
    /// let stream = "arn:aws:kinesis:us-east-1:123456789012:stream/payments";
    /// assert_eq!(ids, [format!("{stream}/shardId-000000000000:100:0"), format!("{stream}/shardId-000000000000:100:1")]);
    /// # });
    /// ```
    #[cfg(feature = "kinesis-aggregation")]
    pub fn aggregate<K: Into<String>>(
        mut self,
        records: impl IntoIterator<Item = (K, Value)>,
    ) -> Self {
        let records: Vec<(String, Value)> =
            records.into_iter().map(|(k, v)| (k.into(), v)).collect();
        let data = crate::batch::source::kinesis_aggregation::encode(
            records
                .iter()
                .map(|(k, v)| (k.as_str(), v.to_string().into_bytes())),
        );
        let sequence = self.next_sequence();
        self.entries.push(Entry {
            shard: self.shard.clone(),
            key: records.first().map(|(k, _)| k.clone()),
            payload: None,
            data: Some(data),
            sequence,
        });
        self
    }

    /// Adds a Kafka tombstone of `key` (a record without a value; elsewhere, without a payload).
    pub fn tombstone(mut self, key: impl Into<String>) -> Self {
        let sequence = self.next_sequence();
        self.entries.push(Entry {
            shard: self.shard.clone(),
            key: Some(key.into()),
            payload: None,
            data: None,
            sequence,
        });
        self
    }

    /// Sets the sequence number (offset) of the last record added.
    pub fn at(mut self, sequence: u128) -> Self {
        if let Some(last) = self.entries.last_mut() {
            last.sequence = sequence;
        }
        self
    }

    fn next_sequence(&self) -> u128 {
        self.entries
            .iter()
            .filter(|e| e.shard == self.shard)
            .map(|e| e.sequence + 1)
            .max()
            .unwrap_or(100)
    }

    /// The records as a DynamoDB stream event: `INSERT`s of items `{pk: key, ...payload}`.
    pub fn dynamodb(&self) -> LambdaEvent<DynamoDbEvent> {
        let records: Vec<Value> = self
            .entries
            .iter()
            .map(|e| {
                assert!(e.data.is_none(), "a KPL aggregate is a Kinesis record only");
                let key = json!({"pk": {"S": e.key.clone().unwrap_or_default()}});
                let mut image = match &e.payload {
                    Some(payload) => serde_dynamo::to_item::<_, serde_dynamo::Item>(payload)
                        .ok()
                        .and_then(|item| serde_json::to_value(item).ok())
                        .unwrap_or_else(|| json!({})),
                    None => json!({}),
                };
                if let Some(image) = image.as_object_mut() {
                    image.insert("pk".into(), key["pk"].clone());
                }
                json!({
                    "eventID": format!("{}-{}", e.shard, e.sequence),
                    "eventName": "INSERT",
                    "eventVersion": "1.1",
                    "eventSource": "aws:dynamodb",
                    "awsRegion": "us-east-1",
                    "eventSourceARN": DYNAMODB_STREAM_ARN,
                    "dynamodb": {
                        "ApproximateCreationDateTime": 1_790_000_000.0,
                        "Keys": key,
                        "NewImage": image,
                        "SequenceNumber": e.sequence.to_string(),
                        "SizeBytes": 100,
                        "StreamViewType": "NEW_IMAGE",
                    },
                })
            })
            .collect();
        let event =
            serde_json::from_value(json!({ "Records": records })).expect("a DynamoDB stream event");
        LambdaEvent::new(event, self.context.clone())
    }

    /// The records as a Kinesis event: data = the payload's JSON.
    pub fn kinesis(&self) -> LambdaEvent<KinesisEvent> {
        let records: Vec<Value> = self
            .entries
            .iter()
            .map(|e| {
                let data = match &e.data {
                    Some(data) => data.clone(),
                    None => e.payload.as_ref().map(Value::to_string).unwrap_or_default().into_bytes(),
                };
                json!({
                    "kinesis": {
                        "kinesisSchemaVersion": "1.0",
                        "partitionKey": e.key,
                        "sequenceNumber": e.sequence.to_string(),
                        "data": STANDARD.encode(data),
                        "approximateArrivalTimestamp": 1_790_000_000.0,
                    },
                    "eventSource": "aws:kinesis",
                    "eventVersion": "1.0",
                    "eventID": format!("shardId-{:012}:{}", e.shard.parse::<u64>().unwrap_or(0), e.sequence),
                    "eventName": "aws:kinesis:record",
                    "invokeIdentityArn": "arn:aws:iam::123456789012:role/consumer",
                    "awsRegion": "us-east-1",
                    "eventSourceARN": KINESIS_STREAM_ARN,
                })
            })
            .collect();
        let event = serde_json::from_value(json!({ "Records": records })).expect("a Kinesis event");
        LambdaEvent::new(event, self.context.clone())
    }

    /// The records as an Amazon MSK event of topic [`KAFKA_TOPIC`]: key and value base64.
    pub fn kafka(&self) -> LambdaEvent<KafkaEvent> {
        let mut partitions = serde_json::Map::new();
        for e in &self.entries {
            assert!(e.data.is_none(), "a KPL aggregate is a Kinesis record only");
            let name = format!("{KAFKA_TOPIC}-{}", e.shard);
            let record = json!({
                "topic": KAFKA_TOPIC,
                "partition": e.shard.parse::<i64>().unwrap_or(0),
                "offset": e.sequence as i64,
                "timestamp": 1_790_000_000_000_i64,
                "timestampType": "CREATE_TIME",
                "key": e.key.as_ref().map(|k| STANDARD.encode(k)),
                "value": e.payload.as_ref().map(|p| STANDARD.encode(p.to_string())),
                "headers": [],
            });
            partitions
                .entry(name)
                .or_insert_with(|| json!([]))
                .as_array_mut()
                .expect("an array")
                .push(record);
        }
        let event = serde_json::from_value(json!({
            "eventSource": "aws:kafka",
            "eventSourceArn": "arn:aws:kafka:us-east-1:123456789012:cluster/payments/abc",
            "bootstrapServers": "b-1.payments.kafka.us-east-1.amazonaws.com:9092",
            "records": partitions,
        }))
        .expect("a Kafka event");
        LambdaEvent::new(event, self.context.clone())
    }
}
