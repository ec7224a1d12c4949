//! Lambda's Kinesis event source mapping against moto's Kinesis: the event's shape, a batch
//! retried from the first reported failure, whole on an invalid response, bisected on errors,
//! and given up on (retries used up, records too old) to the on-failure queue with Lambda's
//! invocation record (`KinesisBatchInfo`).

mod common;

use std::time::Duration;

use aws_lambda_events::streams::KinesisEventResponse;

use common::kinesis::*;

#[tokio::test]
async fn kinesis_records_arrive_in_lambda_s_event_shape() {
    let clients = common::clients().await;
    let s = stream(&clients, 1).await;
    let mut sequence_numbers = Vec::new();
    for k in keys(3) {
        sequence_numbers.push(put(&clients, &s, &format!("pk-{k}"), &k).await);
    }
    let seen = Seen::default();
    let running = start(&clients, mapping("shape", &s), &seen, |_, _| {
        Ok(KinesisEventResponse::default())
    });
    running.wait_stream_caught_up("shape", WAIT).await.unwrap();
    let stats = running.stop().await["shape"];
    assert_eq!(stats.stream.records_processed, 3);
    assert_eq!(stats.stream.shards, 1);
    let [event] = seen.events().try_into().unwrap();
    let records = &event.records;
    assert_eq!(records.len(), 3);
    for (i, r) in records.iter().enumerate() {
        let k = &keys(3)[i];
        assert_eq!(String::from_utf8(r.kinesis.data.0.clone()).unwrap(), *k);
        assert_eq!(r.kinesis.partition_key, format!("pk-{k}"));
        assert_eq!(r.kinesis.sequence_number, sequence_numbers[i]);
        assert_eq!(r.kinesis.kinesis_schema_version.as_deref(), Some("1.0"));
        assert!(r.kinesis.approximate_arrival_timestamp.0.timestamp() > 1_700_000_000);
        assert_eq!(
            r.event_id.as_deref(),
            Some(format!("shardId-000000000000:{}", sequence_numbers[i]).as_str())
        );
        assert_eq!(r.event_name.as_deref(), Some("aws:kinesis:record"));
        assert_eq!(r.event_source.as_deref(), Some("aws:kinesis"));
        assert_eq!(r.event_version.as_deref(), Some("1.0"));
        assert_eq!(r.event_source_arn.as_deref(), Some(s.arn.as_str()));
        assert_eq!(r.aws_region.as_deref(), Some("us-east-1"));
        assert_eq!(
            r.invoke_identity_arn.as_deref(),
            Some("arn:aws:iam::123456789012:role/shape")
        );
    }
}

#[tokio::test]
async fn kinesis_a_batch_item_failure_retries_from_that_record_and_not_the_ones_before() {
    let clients = common::clients().await;
    let s = stream(&clients, 1).await;
    for k in keys(6) {
        put(&clients, &s, "pk", &k).await;
    }
    let seen = Seen::default();
    // The first invocation reports r03 and r05 failed; the lowest, r03, is the checkpoint.
    let running = start(
        &clients,
        mapping("partial", &s)
            .batch_size(10)
            .report_batch_item_failures(true),
        &seen,
        |i, batch| {
            Ok(match i {
                0 => failures(&[&batch[4].sequence_number, &batch[2].sequence_number]),
                _ => KinesisEventResponse::default(),
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
async fn kinesis_an_identifier_not_in_the_batch_fails_the_whole_batch() {
    let clients = common::clients().await;
    let s = stream(&clients, 1).await;
    for k in keys(3) {
        put(&clients, &s, "pk", &k).await;
    }
    let seen = Seen::default();
    // An unknown sequence number, an empty one, then the eventID (not the sequence number,
    // which is what Lambda expects for Kinesis).
    let running = start(
        &clients,
        mapping("unknown", &s).report_batch_item_failures(true),
        &seen,
        |i, batch| {
            let event_id = format!("{}:{}", batch[1].shard_id, batch[1].sequence_number);
            Ok(match i {
                0 => failures(&["no-such-sequence-number"]),
                1 => failures(&[""]),
                2 => failures(&[&event_id]),
                _ => KinesisEventResponse::default(),
            })
        },
    );
    running
        .wait_stream_caught_up("unknown", WAIT)
        .await
        .unwrap();
    assert_eq!(seen.batches(), [keys(3), keys(3), keys(3), keys(3)]);
    let stats = running.stop().await["unknown"];
    assert_eq!(stats.invalid_responses, 3);
    assert_eq!(stats.stream.records_processed, 3);
}

#[tokio::test]
async fn kinesis_a_handler_error_with_bisect_retries_halves() {
    let clients = common::clients().await;
    let s = stream(&clients, 1).await;
    for k in keys(8) {
        put(&clients, &s, "pk", &k).await;
    }
    let seen = Seen::default();
    // Any batch holding r06 fails; its retries end after 1.
    let running = start(
        &clients,
        mapping("bisect", &s)
            .batch_size(8)
            .bisect_batch_on_function_error(true)
            .maximum_retry_attempts(Some(1)),
        &seen,
        |_, batch| {
            if batch.iter().any(|r| r.data == "r06") {
                Err("r06 cannot be processed".into())
            } else {
                Ok(KinesisEventResponse::default())
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
async fn kinesis_retries_exhausted_send_one_invocation_record_with_kinesis_batch_info() {
    let clients = common::clients().await;
    let s = stream(&clients, 1).await;
    let on_failure = common::queue(&clients, false, 30).await;
    let mut sequence_numbers = Vec::new();
    for k in keys(5) {
        sequence_numbers.push(put(&clients, &s, "pk", &k).await);
    }
    let seen = Seen::default();
    // Batches of 3: [r01 r02 r03] always fails (r02 is bad); [r04 r05] succeeds.
    let running = start(
        &clients,
        mapping("exhausted", &s)
            .batch_size(3)
            .maximum_retry_attempts(Some(2))
            .on_failure(Some(on_failure.clone())),
        &seen,
        |_, batch| {
            if batch.iter().any(|r| r.data == "r02") {
                Err("bad record".into())
            } else {
                Ok(KinesisEventResponse::default())
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
    assert!(record.get("DDBStreamBatchInfo").is_none(), "{record:#}");
    let info = &record["KinesisBatchInfo"];
    assert_eq!(info["shardId"], "shardId-000000000000");
    assert_eq!(info["startSequenceNumber"], sequence_numbers[0]);
    assert_eq!(info["endSequenceNumber"], sequence_numbers[2]);
    assert_eq!(info["batchSize"], 3);
    assert_eq!(info["streamArn"], s.arn);
    for key in [
        "approximateArrivalOfFirstRecord",
        "approximateArrivalOfLastRecord",
    ] {
        assert!(
            info[key].as_str().is_some_and(|s| s.ends_with('Z')),
            "{key}: {info:#}"
        );
    }
    let stats = running.stop().await["exhausted"];
    assert_eq!(stats.stream.sent_to_on_failure, 1);
    assert_eq!(stats.stream.records_given_up, 3);
    assert_eq!(stats.stream.records_processed, 2);
    assert_eq!(stats.stream.retries, 2);
}

#[tokio::test]
async fn kinesis_records_older_than_the_maximum_age_are_given_up_on() {
    let clients = common::clients().await;
    let s = stream(&clients, 1).await;
    let on_failure = common::queue(&clients, false, 30).await;
    put(&clients, &s, "pk", "r01").await;
    let seen = Seen::default();
    // Retries without limit, but no record older than 1 s is sent again.
    let running = start(
        &clients,
        mapping("aged", &s)
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
    assert_eq!(records[0]["KinesisBatchInfo"]["batchSize"], 1);
    let invocations = seen.batches().len();
    assert!(invocations >= 2, "retried while young: {invocations}");
    running.stop().await;
}
