//! Shards that moto never makes: DynamoDB closes a stream's shard (every few hours) and opens
//! a child. The mapping finds the child when it looks again, and reads it only after its parent
//! is done, so a key's records stay in order across the split. DynamoDB Streams is mocked here.

mod common;

use common::split_stream::{STREAM, client as streams_client};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::dynamodb::Event;
use lambda_runtime::{Error, LambdaEvent};
use local_aws::runner::{
    InProcess, Runner, RunningRunner, StreamEventSourceMapping, StreamOptions,
};
use tokio_util::sync::CancellationToken;

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
