//! A DynamoDB stream whose shard splits, mocked (moto never splits a stream's shard): shard A
//! holds records 1-3 and closes when `split` is set; its child B holds 4 and 5.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use aws_sdk_dynamodbstreams::operation::describe_stream::DescribeStreamOutput;
use aws_sdk_dynamodbstreams::operation::get_records::GetRecordsOutput;
use aws_sdk_dynamodbstreams::operation::get_shard_iterator::GetShardIteratorOutput;
use aws_sdk_dynamodbstreams::operation::list_streams::ListStreamsOutput;
use aws_sdk_dynamodbstreams::primitives::DateTime;
use aws_sdk_dynamodbstreams::types::{
    AttributeValue, OperationType, Record, SequenceNumberRange, Shard, Stream, StreamDescription,
    StreamRecord, StreamViewType,
};
use aws_smithy_mocks::{RuleMode, mock, mock_client};

pub const STREAM: &str =
    "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/2024-01-01T00:00:00.000";

pub fn record(seq: u32) -> Record {
    Record::builder()
        .event_id(format!("e{seq}"))
        .event_name(OperationType::Insert)
        .dynamodb(
            StreamRecord::builder()
                .approximate_creation_date_time(DateTime::from_secs(1_700_000_000))
                .keys("k", AttributeValue::S(format!("r{seq}")))
                .sequence_number(seq.to_string())
                .size_bytes(10)
                .stream_view_type(StreamViewType::KeysOnly)
                .build(),
        )
        .build()
}

pub fn shard(id: &str, parent: Option<&str>, range: (&str, Option<&str>)) -> Shard {
    Shard::builder()
        .shard_id(id)
        .set_parent_shard_id(parent.map(str::to_owned))
        .sequence_number_range(
            SequenceNumberRange::builder()
                .starting_sequence_number(range.0)
                .set_ending_sequence_number(range.1.map(str::to_owned))
                .build(),
        )
        .build()
}

/// A stream whose shard A (records 1-3) closes when `split` is set; its child B has 4 and 5.
/// Before the split, DescribeStream lists A only (open), after it both.
pub fn client(split: Arc<AtomicBool>) -> aws_sdk_dynamodbstreams::Client {
    let list = mock!(aws_sdk_dynamodbstreams::Client::list_streams).then_output(|| {
        ListStreamsOutput::builder()
            .streams(Stream::builder().stream_arn(STREAM).table_name("t").build())
            .build()
    });
    let s = Arc::clone(&split);
    let describe =
        mock!(aws_sdk_dynamodbstreams::Client::describe_stream).then_compute_output(move |_| {
            let closed = s.load(Ordering::SeqCst);
            let mut d = StreamDescription::builder().stream_arn(STREAM);
            if closed {
                d = d.shards(shard("A", None, ("1", Some("3")))).shards(shard(
                    "B",
                    Some("A"),
                    ("4", None),
                ));
            } else {
                d = d.shards(shard("A", None, ("1", None)));
            }
            DescribeStreamOutput::builder()
                .stream_description(d.build())
                .build()
        });
    let iterator =
        mock!(aws_sdk_dynamodbstreams::Client::get_shard_iterator).then_compute_output(|input| {
            GetShardIteratorOutput::builder()
                .shard_iterator(format!("{}-0", input.shard_id().unwrap_or_default()))
                .build()
        });
    let s = Arc::clone(&split);
    let records =
        mock!(aws_sdk_dynamodbstreams::Client::get_records).then_compute_output(move |input| {
            let out = GetRecordsOutput::builder();
            let closed = s.load(Ordering::SeqCst);
            match input.shard_iterator().unwrap_or_default() {
                "A-0" => out
                    .records(record(1))
                    .records(record(2))
                    .records(record(3))
                    .next_shard_iterator("A-1"),
                // The end of A: open until the split, then closed (no next iterator).
                "A-1" if closed => out,
                "A-1" => out.next_shard_iterator("A-1"),
                "B-0" => out
                    .records(record(4))
                    .records(record(5))
                    .next_shard_iterator("B-1"),
                _ => out.next_shard_iterator("B-1"),
            }
            .build()
        });
    mock_client!(
        aws_sdk_dynamodbstreams,
        RuleMode::MatchAny,
        [&list, &describe, &iterator, &records]
    )
}
