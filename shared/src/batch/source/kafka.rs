//! Kafka (Amazon MSK and self-managed): a record is identified by its topic, partition and
//! offset, ordered by its key, and reported by its partition and offset.

use std::borrow::Cow;
use std::time::SystemTime;

use aws_lambda_events::kafka::{KafkaEvent, KafkaRecord};
use aws_lambda_events::sqs::SqsMessage;
use base64::Engine as _;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use serde::{Deserialize, Serialize};

use super::{EventSource, stream_copy};
use crate::record::{Position, Record};

/// Base64 as Lambda's Kafka events carry it, read leniently, as Python's `b64decode` (which
/// Powertools uses) reads it: AWS's own sample MSK event has a key whose last symbol leaves
/// non-zero bits, and padding may be present or not.
const STANDARD: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// A Kafka record decoded: its key and value (base64 in the event), its headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaMessage {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i64,
    /// The offset.
    pub offset: i64,
    /// The key, if the record has one.
    pub key: Option<Vec<u8>>,
    /// The value; `None` for a tombstone (a record that deletes its key in a compacted topic).
    pub value: Option<Vec<u8>>,
    /// The headers, in order: name and value bytes.
    pub headers: Vec<(String, Vec<u8>)>,
}

impl KafkaMessage {
    /// Decodes `record`'s key and value from base64, and its headers from the bytes Lambda gives
    /// (signed, as Java's). An error names the part that is not base64.
    pub fn decode(record: &KafkaRecord) -> Result<Self, String> {
        let bytes = |part: &str, text: &Option<String>| {
            text.as_deref()
                .map(|t| STANDARD.decode(t))
                .transpose()
                .map_err(|e| format!("the Kafka record's {part} is not base64: {e}"))
        };
        Ok(Self {
            topic: record.topic.clone().unwrap_or_default(),
            partition: record.partition,
            offset: record.offset,
            key: bytes("key", &record.key)?,
            value: bytes("value", &record.value)?,
            headers: record
                .headers
                .iter()
                .flat_map(|header| header.iter())
                .map(|(name, value)| (name.clone(), value.iter().map(|b| *b as u8).collect()))
                .collect(),
        })
    }

    /// True for a tombstone (no value).
    pub fn is_tombstone(&self) -> bool {
        self.value.is_none()
    }

    /// The first header named `name`.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }
}

impl Record for KafkaRecord {
    const KIND: &'static str = "Kafka record";

    fn id(&self) -> Option<Cow<'_, str>> {
        let position = self.position()?;
        Some(Cow::Owned(format!(
            "{}@{}",
            position.shard, position.sequence
        )))
    }

    fn payload(&self) -> Option<Cow<'_, [u8]>> {
        let value = self.value.as_deref()?;
        STANDARD.decode(value).ok().map(Cow::Owned)
    }

    fn sent_at(&self) -> Option<SystemTime> {
        let at = self.timestamp.0;
        (at.timestamp_millis() > 0).then(|| SystemTime::from(at))
    }

    fn order_key(&self) -> Option<Cow<'_, str>> {
        self.key.as_deref().map(Cow::Borrowed)
    }

    fn position(&self) -> Option<Position> {
        Some(Position {
            shard: format!("{}-{}", self.topic.as_deref()?, self.partition),
            sequence: self.offset.to_string(),
        })
    }

    fn dead_letter_copy(&self) -> SqsMessage {
        let body = serde_json::json!({
            "source": "aws:kafka",
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "record": self,
        });
        stream_copy(self.id().as_deref(), body)
    }
}

/// A Kafka event's partial batch response.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaEventResponse {
    /// Every record not done (failed, or held behind a failure) of each partition.
    pub batch_item_failures: Vec<KafkaBatchItemFailure>,
}

/// One reported Kafka record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaBatchItemFailure {
    /// The record.
    pub item_identifier: KafkaItemIdentifier,
}

/// How a Kafka record is named in a partial batch response: an object, not a string, as AWS
/// documents it for Kafka event source mappings
/// (<https://docs.aws.amazon.com/lambda/latest/dg/kafka-retry-configurations.html#kafka-partial-batch-response>:
/// `{"itemIdentifier": {"partition": "topic-partition_number", "offset": 100}}`). A
/// `topic-partition` or an offset that was not in the event fails the whole batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaItemIdentifier {
    /// `topic-partition`, as the event's `records` map names the record's partition
    /// (`payments-0`).
    pub partition: String,
    /// The record's offset (a JSON number).
    pub offset: i64,
}

impl EventSource for KafkaEvent {
    type Record = KafkaRecord;
    type Response = KafkaEventResponse;

    fn records(&self) -> Vec<&KafkaRecord> {
        let mut partitions: Vec<_> = self.records.iter().collect();
        partitions.sort_by(|a, b| a.0.cmp(b.0));
        partitions
            .into_iter()
            .flat_map(|(_, records)| records.iter())
            .collect()
    }

    fn source_arn(&self) -> Option<&str> {
        self.event_source_arn.as_deref()
    }

    /// The cluster, then the topic, partition and offset
    /// (`arn:aws:kafka:...:cluster/payments/abc/payments-0@42`, or
    /// `b-1.example.com:9092,b-2.example.com:9092/payments-0@42` for self-managed Kafka).
    fn record_id<'a>(&'a self, record: &'a KafkaRecord) -> Option<Cow<'a, str>> {
        let id = record.id()?;
        let cluster = [&self.event_source_arn, &self.bootstrap_servers]
            .into_iter()
            .flatten()
            .find(|c| !c.is_empty());
        Some(match cluster {
            Some(cluster) => Cow::Owned(format!("{cluster}/{id}")),
            None => id,
        })
    }

    fn ordered(&self) -> bool {
        true
    }

    fn is_stream() -> bool {
        true
    }

    /// Every record not done, of every partition: each failed record and each held behind a
    /// failure, in partition and offset order (never a dead-lettered one). Right under either
    /// reading of AWS's documentation: a mapping that restarts each partition from the lowest
    /// offset named finds its checkpoint first, and one that retries only the named records
    /// retries all that are not done.
    fn response(failed: &[&KafkaRecord]) -> KafkaEventResponse {
        let mut failed = failed.to_vec();
        failed.sort_by(|a, b| {
            (&a.topic, a.partition, a.offset).cmp(&(&b.topic, b.partition, b.offset))
        });
        failed.dedup_by(|a, b| {
            (&a.topic, a.partition, a.offset) == (&b.topic, b.partition, b.offset)
        });
        KafkaEventResponse {
            batch_item_failures: failed
                .into_iter()
                .map(|record| KafkaBatchItemFailure {
                    item_identifier: KafkaItemIdentifier {
                        partition: format!(
                            "{}-{}",
                            record.topic.as_deref().unwrap_or_default(),
                            record.partition
                        ),
                        offset: record.offset,
                    },
                })
                .collect(),
        }
    }
}
