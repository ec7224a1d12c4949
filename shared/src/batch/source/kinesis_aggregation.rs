//! Kinesis records aggregated by the Kinesis Producer Library (KPL): one Kinesis record whose
//! data packs many user records. Its format: the 4 bytes `F3 89 9A C2`, a protobuf
//! `AggregatedRecord` (a table of partition keys, a table of explicit hash keys, and the user
//! records, each naming its keys by their index in the tables), then the 16-byte MD5 of the
//! protobuf bytes.
//!
//! [`KinesisEvent`]'s [`EventSource::expand`](super::EventSource::expand) unpacks each
//! aggregate into its user records, each a [`KinesisEventRecord`] of its own: the enclosing
//! record's sequence number (what Lambda checkpoints by: the user records of one aggregate share
//! it), its own partition key and data, and an `eventID` that ends with its sub-sequence number
//! (its index in the aggregate: `shardId-000000000000:4959...:2`), from which its id (and so its
//! default idempotency key) is taken. An aggregate that cannot be unpacked stays one record,
//! which [`Record::malformed`](crate::record::Record::malformed) fails as poison with the reason
//! ([`AggregateError`]). Without the feature `kinesis-aggregation`, every aggregate fails so,
//! with [`AggregateError::FeatureOff`].

use aws_lambda_events::kinesis::{KinesisEvent, KinesisEventRecord};

/// The first bytes of a KPL aggregate.
pub(crate) const MAGIC: [u8; 4] = [0xF3, 0x89, 0x9A, 0xC2];
/// The MD5 checksum that ends an aggregate.
#[cfg(feature = "kinesis-aggregation")]
const DIGEST_LEN: usize = 16;

/// Why a Kinesis record that starts as a KPL aggregate does (its data begins with the KPL's
/// magic bytes) cannot be unpacked: the record fails as a permanent failure
/// ([`RecordError::Permanent`](crate::error::RecordError::Permanent), whose error downcasts to
/// this), and with a dead-letter queue it is moved there whole, as it arrived.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AggregateError {
    /// Too short to hold the magic bytes, a message and its checksum.
    #[error("corrupt KPL aggregate: {len} bytes, too few for its magic bytes and MD5 checksum")]
    TooShort {
        /// The data's length.
        len: usize,
    },
    /// The MD5 checksum does not match the message (a record corrupted or cut).
    #[error("corrupt KPL aggregate: its MD5 checksum does not match its content")]
    Checksum,
    /// The message is not a protobuf `AggregatedRecord`.
    #[error("corrupt KPL aggregate: its protobuf does not decode: {0}")]
    Protobuf(String),
    /// A user record names a partition key beyond the aggregate's table.
    #[error(
        "corrupt KPL aggregate: user record {record} names partition key {index} of a table of {table}"
    )]
    PartitionKeyIndex {
        /// The user record's index in the aggregate.
        record: usize,
        /// The index it names.
        index: u64,
        /// The table's length.
        table: usize,
    },
    /// A user record names an explicit hash key beyond the aggregate's table.
    #[error(
        "corrupt KPL aggregate: user record {record} names explicit hash key {index} of a table of {table}"
    )]
    ExplicitHashKeyIndex {
        /// The user record's index in the aggregate.
        record: usize,
        /// The index it names.
        index: u64,
        /// The table's length.
        table: usize,
    },
    /// The aggregate holds no user record.
    #[error("corrupt KPL aggregate: it holds no user record")]
    Empty,
    /// The library was built without the feature that unpacks aggregates.
    #[error(
        "a KPL aggregate (data starting with F3 89 9A C2): this build of lambda-idempotency \
         leaves out the feature `kinesis-aggregation`, which unpacks its user records"
    )]
    FeatureOff,
}

/// True when `data` starts as a KPL aggregate.
pub(crate) fn is_aggregate(data: &[u8]) -> bool {
    data.starts_with(&MAGIC)
}

/// `id` (`shardId-...:<sequence number>`) with `record`'s sub-sequence number appended
/// (`:<sub-sequence number>`) when it is a user record that [`expand`] unpacked: the last part of
/// its `eventID` (`shardId-...:<sequence number>:<sub-sequence number>`).
pub(crate) fn with_sub_sequence(record: &KinesisEventRecord, mut id: String) -> String {
    let sub = record
        .event_id
        .as_deref()
        .and_then(|id| id.split_once(':'))
        .and_then(|(_shard, rest)| rest.split_once(':'))
        .map(|(_sequence, sub)| sub);
    if let Some(sub) = sub {
        id.push(':');
        id.push_str(sub);
    }
    id
}

/// Why `record` cannot be processed: an aggregate that does not unpack (or any aggregate,
/// without the feature). `None` for an ordinary record and for a whole aggregate.
pub(crate) fn malformed(record: &KinesisEventRecord) -> Option<AggregateError> {
    let data = &record.kinesis.data.0;
    if !is_aggregate(data) {
        return None;
    }
    #[cfg(feature = "kinesis-aggregation")]
    return unpack(data).err();
    #[cfg(not(feature = "kinesis-aggregation"))]
    Some(AggregateError::FeatureOff)
}

/// `event` with each aggregate unpacked into its user records, in their order, or `None` when
/// no record is an aggregate that unpacks (nothing to change). An aggregate that does not unpack
/// stays as it is.
#[cfg(feature = "kinesis-aggregation")]
pub(crate) fn expand(event: &KinesisEvent) -> Option<KinesisEvent> {
    let records = &event.records;
    let unpacked: Vec<Option<Vec<UserRecord>>> = records
        .iter()
        .map(|r| {
            let data = &r.kinesis.data.0;
            is_aggregate(data).then(|| unpack(data).ok()).flatten()
        })
        .collect();
    if unpacked.iter().all(Option::is_none) {
        return None;
    }
    let mut out = Vec::with_capacity(records.len());
    for (record, users) in records.iter().zip(unpacked) {
        let Some(users) = users else {
            out.push(record.clone());
            continue;
        };
        // The enclosing record without its data: each user record is a copy with its own.
        let mut template = record.clone();
        template.kinesis.data.0 = Vec::new();
        let id = template.event_id.clone().unwrap_or_else(|| {
            format!(
                "{}:{}",
                crate::record::Record::position(record)
                    .map(|p| p.shard)
                    .unwrap_or_default(),
                record.kinesis.sequence_number
            )
        });
        for (sub, user) in users.into_iter().enumerate() {
            let mut r = template.clone();
            r.event_id = Some(format!("{id}:{sub}"));
            r.kinesis.partition_key = user.partition_key;
            r.kinesis.data.0 = user.data;
            out.push(r);
        }
    }
    let mut expanded = KinesisEvent::default();
    expanded.records = out;
    Some(expanded)
}

/// Without the feature nothing unpacks: each aggregate fails as
/// [`AggregateError::FeatureOff`].
#[cfg(not(feature = "kinesis-aggregation"))]
pub(crate) fn expand(_event: &KinesisEvent) -> Option<KinesisEvent> {
    None
}

/// One user record of an aggregate.
#[cfg(feature = "kinesis-aggregation")]
#[derive(Debug)]
struct UserRecord {
    partition_key: String,
    data: Vec<u8>,
}

/// The protobuf messages of the format (`messages.proto` of the KPL). A user record's tags
/// (field 4) are skipped: nothing here reads them.
#[cfg(feature = "kinesis-aggregation")]
mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct AggregatedRecord {
        #[prost(string, repeated, tag = "1")]
        pub(super) partition_key_table: Vec<String>,
        #[prost(string, repeated, tag = "2")]
        pub(super) explicit_hash_key_table: Vec<String>,
        #[prost(message, repeated, tag = "3")]
        pub(super) records: Vec<Record>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Record {
        #[prost(uint64, required, tag = "1")]
        pub(super) partition_key_index: u64,
        #[prost(uint64, optional, tag = "2")]
        pub(super) explicit_hash_key_index: Option<u64>,
        #[prost(bytes = "vec", required, tag = "3")]
        pub(super) data: Vec<u8>,
    }
}

/// The user records of aggregate `data` (which starts with [`MAGIC`]).
#[cfg(feature = "kinesis-aggregation")]
fn unpack(data: &[u8]) -> Result<Vec<UserRecord>, AggregateError> {
    use md5::{Digest, Md5};
    use prost::Message;

    let len = data.len();
    if len < MAGIC.len() + DIGEST_LEN {
        return Err(AggregateError::TooShort { len });
    }
    let (message, digest) = data[MAGIC.len()..].split_at(len - MAGIC.len() - DIGEST_LEN);
    if Md5::digest(message).as_slice() != digest {
        return Err(AggregateError::Checksum);
    }
    let aggregate = proto::AggregatedRecord::decode(message)
        .map_err(|e| AggregateError::Protobuf(e.to_string()))?;
    if aggregate.records.is_empty() {
        return Err(AggregateError::Empty);
    }
    let keys = aggregate.partition_key_table;
    let hash_keys = aggregate.explicit_hash_key_table.len();
    aggregate
        .records
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            if let Some(index) = r.explicit_hash_key_index
                && index >= hash_keys as u64
            {
                return Err(AggregateError::ExplicitHashKeyIndex {
                    record: i,
                    index,
                    table: hash_keys,
                });
            }
            let partition_key = usize::try_from(r.partition_key_index)
                .ok()
                .and_then(|k| keys.get(k))
                .ok_or(AggregateError::PartitionKeyIndex {
                    record: i,
                    index: r.partition_key_index,
                    table: keys.len(),
                })?;
            Ok(UserRecord {
                partition_key: partition_key.clone(),
                data: r.data,
            })
        })
        .collect()
}

/// An aggregate of `records` (partition key, data), as the KPL writes it: each distinct
/// partition key once in the table.
#[cfg(all(feature = "kinesis-aggregation", feature = "test-util"))]
pub(crate) fn encode<'a>(records: impl IntoIterator<Item = (&'a str, Vec<u8>)>) -> Vec<u8> {
    let mut aggregate = proto::AggregatedRecord::default();
    for (key, data) in records {
        let index = match aggregate.partition_key_table.iter().position(|k| k == key) {
            Some(i) => i,
            None => {
                aggregate.partition_key_table.push(key.to_owned());
                aggregate.partition_key_table.len() - 1
            }
        };
        aggregate.records.push(proto::Record {
            partition_key_index: index as u64,
            explicit_hash_key_index: None,
            data,
        });
    }
    framed(&aggregate)
}

/// `aggregate` as the KPL frames it: the magic bytes, the message, its MD5.
#[cfg(all(feature = "kinesis-aggregation", any(test, feature = "test-util")))]
fn framed(aggregate: &proto::AggregatedRecord) -> Vec<u8> {
    use md5::{Digest, Md5};
    use prost::Message;

    let message = aggregate.encode_to_vec();
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&message);
    out.extend_from_slice(&Md5::digest(&message));
    out
}

#[cfg(all(test, feature = "kinesis-aggregation"))]
mod tests {
    use super::*;
    use md5::{Digest, Md5};

    fn one_record(partition_key_index: u64, explicit: Option<u64>) -> proto::AggregatedRecord {
        proto::AggregatedRecord {
            partition_key_table: vec!["a".into()],
            explicit_hash_key_table: vec![],
            records: vec![proto::Record {
                partition_key_index,
                explicit_hash_key_index: explicit,
                data: b"x".to_vec(),
            }],
        }
    }

    #[test]
    fn each_corruption_is_named() {
        assert_eq!(
            unpack(&MAGIC).unwrap_err(),
            AggregateError::TooShort { len: 4 }
        );
        let mut bad_sum = framed(&one_record(0, None));
        *bad_sum.last_mut().unwrap() ^= 1;
        assert_eq!(unpack(&bad_sum).unwrap_err(), AggregateError::Checksum);
        assert_eq!(
            unpack(&framed(&one_record(1, None))).unwrap_err(),
            AggregateError::PartitionKeyIndex {
                record: 0,
                index: 1,
                table: 1
            }
        );
        assert_eq!(
            unpack(&framed(&one_record(0, Some(0)))).unwrap_err(),
            AggregateError::ExplicitHashKeyIndex {
                record: 0,
                index: 0,
                table: 0
            }
        );
        assert_eq!(
            unpack(&framed(&proto::AggregatedRecord::default())).unwrap_err(),
            AggregateError::Empty
        );
        // A message that is not protobuf, with a checksum that matches it.
        let junk = [0xFF_u8; 3];
        let mut not_proto = MAGIC.to_vec();
        not_proto.extend_from_slice(&junk);
        not_proto.extend_from_slice(&Md5::digest(junk));
        assert!(
            matches!(unpack(&not_proto), Err(AggregateError::Protobuf(_))),
            "{:?}",
            unpack(&not_proto)
        );
    }

    #[test]
    fn what_is_encoded_unpacks_with_its_keys_in_order() {
        let data = framed(&proto::AggregatedRecord {
            partition_key_table: vec!["a".into(), "b".into()],
            explicit_hash_key_table: vec!["123".into()],
            records: vec![
                proto::Record {
                    partition_key_index: 1,
                    explicit_hash_key_index: Some(0),
                    data: b"1".to_vec(),
                },
                proto::Record {
                    partition_key_index: 0,
                    explicit_hash_key_index: None,
                    data: Vec::new(),
                },
            ],
        });
        let users = unpack(&data).unwrap();
        let got: Vec<_> = users
            .iter()
            .map(|u| (u.partition_key.as_str(), u.data.as_slice()))
            .collect();
        assert_eq!(got, [("b", &b"1"[..]), ("a", &b""[..])]);
    }
}

#[cfg(test)]
mod feature_tests {
    use super::*;

    fn aggregate_record() -> KinesisEventRecord {
        let mut record = KinesisEventRecord::default();
        record.kinesis.sequence_number = "100".into();
        record.kinesis.data.0 = [&MAGIC[..], &[0; 20]].concat();
        record
    }

    #[test]
    fn the_error_of_a_build_without_the_feature_names_it() {
        let message = AggregateError::FeatureOff.to_string();
        assert!(message.contains("`kinesis-aggregation`"), "{message}");
    }

    #[test]
    fn a_record_without_the_magic_bytes_is_never_malformed() {
        let mut record = aggregate_record();
        record.kinesis.data.0[0] = b'{';
        assert_eq!(malformed(&record), None);
        let mut event = KinesisEvent::default();
        event.records.push(record);
        assert!(expand(&event).is_none());
    }
}
