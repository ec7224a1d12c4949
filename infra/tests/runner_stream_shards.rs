//! Shards that moto never makes: DynamoDB closes a stream's shard (every few hours) and opens
//! a child. The mapping finds the child when it looks again, and reads it only after its parent
//! is done, so a key's records stay in order across the split. DynamoDB Streams is mocked here.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::dynamodb::Event;
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
use lambda_runtime::{Error, LambdaEvent};
use local_aws::runner::{
    InProcess, Runner, RunningRunner, StreamEventSourceMapping, StreamOptions,
};
use tokio_util::sync::CancellationToken;

const STREAM: &str =
    "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/2024-01-01T00:00:00.000";

fn record(seq: u32) -> Record {
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

fn shard(id: &str, parent: Option<&str>, range: (&str, Option<&str>)) -> Shard {
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
fn streams_client(split: Arc<AtomicBool>) -> aws_sdk_dynamodbstreams::Client {
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

fn sqs() -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::Config::builder()
            .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
            .region(aws_sdk_sqs::config::Region::new("us-east-1"))
            .build(),
    )
}

fn options() -> StreamOptions {
    StreamOptions {
        poll_interval: Duration::from_millis(10),
        shard_refresh_interval: Duration::from_secs(60),
        retry_base_delay: Duration::from_millis(10),
        retry_max_delay: Duration::from_millis(10),
    }
}

/// Runs the mapping with a handler that logs each record's key when its batch is done; a batch
/// holding `slow` takes 200 ms.
fn start(
    split: &Arc<AtomicBool>,
    seen: &Arc<Mutex<Vec<String>>>,
    slow: &'static str,
) -> RunningRunner {
    let log = Arc::clone(seen);
    Runner::new(sqs())
        .dynamodb_streams(streams_client(Arc::clone(split)))
        .stream_options(options())
        .stream_mapping(
            StreamEventSourceMapping::new("relay", STREAM, Duration::from_secs(5)),
            InProcess::new(move |event: LambdaEvent<Event>| {
                let log = Arc::clone(&log);
                async move {
                    let keys: Vec<String> = event
                        .payload
                        .records
                        .iter()
                        .filter_map(|r| match r.change.keys.get("k") {
                            Some(serde_dynamo::AttributeValue::S(k)) => Some(k.clone()),
                            _ => None,
                        })
                        .collect();
                    if keys.iter().any(|k| k == slow) {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    log.lock().unwrap().extend(keys);
                    Ok::<_, Error>(serde_json::json!({}))
                }
            }),
        )
        .unwrap()
        .start(CancellationToken::new())
}

#[tokio::test]
async fn a_child_shard_waits_for_its_parent() {
    // Both shards listed from the start; the parent's batch is slow. Read together, the child's
    // records would be done first.
    let split = Arc::new(AtomicBool::new(true));
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let running = start(&split, &seen, "r1");
    running
        .wait_stream_caught_up("relay", Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(*seen.lock().unwrap(), ["r1", "r2", "r3", "r4", "r5"]);
    assert_eq!(running.stop().await["relay"].stream.shards, 2);
}

#[tokio::test]
async fn a_child_shard_found_later_is_read_after_its_parent() {
    let split = Arc::new(AtomicBool::new(false));
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let running = start(&split, &seen, "none");
    let wait = Duration::from_secs(10);
    running.wait_stream_caught_up("relay", wait).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), ["r1", "r2", "r3"]);
    assert_eq!(running.stats("relay").stream.shards, 1);

    // A closes and B appears: waiting looks for shards at once (not after the 60 s refresh).
    split.store(true, Ordering::SeqCst);
    running.wait_stream_caught_up("relay", wait).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), ["r1", "r2", "r3", "r4", "r5"]);
    let stats = running.stop().await["relay"];
    assert_eq!(stats.stream.shards, 2);
    assert_eq!(stats.stream.records_processed, 5);
}
