//! Failing stream batches against moto's DynamoDB Streams: retried from the first reported
//! failure, whole on an invalid response, bisected on errors, given up on (retries used up,
//! records too old) to the on-failure queue with Lambda's invocation record.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::streams::DynamoDbEventResponse;
use local_aws::template::StreamViewType;

use common::stream::*;

#[tokio::test]
async fn a_batch_item_failure_retries_from_that_record_and_not_the_ones_before() {
    let clients = common::clients().await;
    let t = table(&clients, StreamViewType::NewImage).await;
    for k in keys(6) {
        put(&clients, &t, &k, "v").await;
    }
    let seen = Seen::default();
    // The first invocation reports r03 and r05 failed; the lowest, r03, is the checkpoint.
    let running = start(
        &clients,
        mapping("partial", &t)
            .batch_size(10)
            .report_batch_item_failures(true),
        &seen,
        |i, batch| {
            Ok(match i {
                0 => failures(&[batch[4].1.clone(), batch[2].1.clone()]),
                _ => DynamoDbEventResponse::default(),
            })
        },
    );
    running
        .wait_stream_caught_up("partial", WAIT)
        .await
        .unwrap();
    assert_eq!(
        seen.batches(),
        [keys(6), keys(6)[2..].to_vec()],
        "retried from r03 only"
    );
    let stats = running.stop().await["partial"];
    assert_eq!(stats.batches, 2);
    assert_eq!(stats.records_reported_failed, 2);
    assert_eq!(stats.stream.retries, 1);
    assert_eq!(stats.stream.records_processed, 6);
    assert_eq!(stats.stream.batches_given_up, 0);
}

#[tokio::test]
async fn an_identifier_not_in_the_batch_fails_the_whole_batch() {
    let clients = common::clients().await;
    let t = table(&clients, StreamViewType::NewImage).await;
    for k in keys(3) {
        put(&clients, &t, &k, "v").await;
    }
    let seen = Seen::default();
    let running = start(
        &clients,
        mapping("unknown", &t).report_batch_item_failures(true),
        &seen,
        |i, _| {
            Ok(match i {
                0 => failures(&["no-such-sequence-number".to_owned()]),
                1 => failures(&[String::new()]),
                _ => DynamoDbEventResponse::default(),
            })
        },
    );
    running
        .wait_stream_caught_up("unknown", WAIT)
        .await
        .unwrap();
    assert_eq!(seen.batches(), [keys(3), keys(3), keys(3)]);
    let stats = running.stop().await["unknown"];
    assert_eq!(stats.invalid_responses, 2);
}

#[tokio::test]
async fn a_handler_error_with_bisect_retries_halves() {
    let clients = common::clients().await;
    let t = table(&clients, StreamViewType::NewImage).await;
    for k in keys(8) {
        put(&clients, &t, &k, "v").await;
    }
    let seen = Seen::default();
    // Any batch holding r06 fails; its retries end after 1.
    let running = start(
        &clients,
        mapping("bisect", &t)
            .batch_size(8)
            .bisect_batch_on_function_error(true)
            .maximum_retry_attempts(Some(1)),
        &seen,
        |_, batch| {
            if batch.iter().any(|(k, _)| k == "r06") {
                Err("r06 cannot be processed".into())
            } else {
                Ok(DynamoDbEventResponse::default())
            }
        },
    );
    running.wait_stream_caught_up("bisect", WAIT).await.unwrap();
    let k = keys(8);
    assert_eq!(
        seen.batches(),
        [
            k.clone(),        // fails: split
            k[..4].to_vec(),  // ok
            k[4..].to_vec(),  // fails: split
            k[4..6].to_vec(), // fails: split
            k[4..5].to_vec(), // ok
            k[5..6].to_vec(), // fails, cannot split: a retry
            k[5..6].to_vec(), // fails: retries used up, given up on
            k[6..].to_vec(),  // the shard moves on
        ]
    );
    let stats = running.stop().await["bisect"];
    assert_eq!(stats.stream.bisections, 3);
    assert_eq!(stats.stream.retries, 1);
    assert_eq!(stats.stream.batches_given_up, 1);
    assert_eq!(stats.stream.records_given_up, 1);
    assert_eq!(stats.stream.records_processed, 7);
    assert_eq!(stats.invocation_errors, 5);
}

#[tokio::test]
async fn retries_exhausted_send_one_invocation_record_and_the_shard_moves_on() {
    let clients = common::clients().await;
    let t = table(&clients, StreamViewType::NewImage).await;
    let on_failure = common::queue(&clients, false, 30).await;
    for k in keys(5) {
        put(&clients, &t, &k, "v").await;
    }
    let seen = Seen::default();
    let sequence_numbers: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
    let numbers = Arc::clone(&sequence_numbers);
    // Batches of 3: [r01 r02 r03] always fails (r02 is bad); [r04 r05] succeeds.
    let running = start(
        &clients,
        mapping("exhausted", &t)
            .batch_size(3)
            .maximum_retry_attempts(Some(2))
            .on_failure(Some(on_failure.clone())),
        &seen,
        move |_, batch| {
            numbers.lock().unwrap().extend(batch.iter().cloned());
            if batch.iter().any(|(k, _)| k == "r02") {
                Err("bad record".into())
            } else {
                Ok(DynamoDbEventResponse::default())
            }
        },
    );
    running
        .wait_stream_caught_up("exhausted", WAIT)
        .await
        .unwrap();
    let first = keys(3);
    assert_eq!(
        seen.batches(),
        [first.clone(), first.clone(), first, keys(5)[3..].to_vec()],
        "the first try and 2 retries, then the next batch"
    );
    let records = invocation_records(&clients, &on_failure).await;
    assert_eq!(records.len(), 1, "{records:#?}");
    let record = &records[0];
    let seq = sequence_numbers.lock().unwrap().clone();
    assert_eq!(
        record["requestContext"]["condition"],
        "RetryAttemptsExhausted"
    );
    assert_eq!(record["requestContext"]["approximateInvokeCount"], 3);
    assert_eq!(
        record["requestContext"]["functionArn"],
        "arn:aws:lambda:us-east-1:123456789012:function:exhausted"
    );
    assert_eq!(record["responseContext"]["functionError"], "Unhandled");
    assert_eq!(record["version"], "1.0");
    let info = &record["DDBStreamBatchInfo"];
    assert_eq!(
        info["shardId"].as_str().map(|s| s.starts_with("shardId-")),
        Some(true)
    );
    assert_eq!(info["startSequenceNumber"], seq["r01"]);
    assert_eq!(info["endSequenceNumber"], seq["r03"]);
    assert_eq!(info["batchSize"], 3);
    assert_eq!(info["streamArn"], t.stream_arn.clone().unwrap());
    assert!(
        info["approximateArrivalOfFirstRecord"]
            .as_str()
            .is_some_and(|s| s.ends_with('Z'))
    );
    let stats = running.stop().await["exhausted"];
    assert_eq!(stats.stream.sent_to_on_failure, 1);
    assert_eq!(stats.stream.records_given_up, 3);
    assert_eq!(stats.stream.records_processed, 2);
    assert_eq!(stats.stream.retries, 2);
}

#[tokio::test]
async fn records_older_than_the_maximum_age_are_given_up_on() {
    let clients = common::clients().await;
    let t = table(&clients, StreamViewType::NewImage).await;
    let on_failure = common::queue(&clients, false, 30).await;
    put(&clients, &t, "r01", "v").await;
    let seen = Seen::default();
    // Retries without limit, but no record older than 1 s is sent again.
    let running = start(
        &clients,
        mapping("aged", &t)
            .maximum_record_age(Some(Duration::from_secs(1)))
            .on_failure(Some(on_failure.clone())),
        &seen,
        |_, _| Err("always".into()),
    );
    running.wait_stream_caught_up("aged", WAIT).await.unwrap();
    let records = invocation_records(&clients, &on_failure).await;
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(
        records[0]["requestContext"]["condition"],
        "RecordAgeExceeded"
    );
    let invocations = seen.batches().len();
    assert!(invocations >= 2, "retried while young: {invocations}");
    assert_eq!(
        records[0]["requestContext"]["approximateInvokeCount"],
        invocations
    );
    running.stop().await;
}
