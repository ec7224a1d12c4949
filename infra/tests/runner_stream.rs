//! The DynamoDB stream event source mapping against moto's DynamoDB Streams: records delivered
//! in order from TRIM_HORIZON or LATEST, filtered, retried from the first reported failure,
//! bisected on errors, given up on to the on-failure queue with Lambda's invocation record.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::dynamodb::Event;
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use aws_sdk_dynamodb::types::AttributeValue;
use lambda_runtime::{Error, LambdaEvent};
use local_aws::Clients;
use local_aws::provision::{ProvisionedQueue, ProvisionedTable};
use local_aws::runner::{
    InProcess, Runner, RunningRunner, StreamEventSourceMapping, StreamOptions,
};
use local_aws::template::{
    AttributeType, FilterPattern, KeyAttribute, KeyType, StartingPosition, StreamViewType, Table,
};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(20);

/// Fast local pacing: tests wait milliseconds, not seconds.
fn fast() -> StreamOptions {
    StreamOptions {
        poll_interval: Duration::from_millis(20),
        shard_refresh_interval: Duration::from_millis(200),
        retry_base_delay: Duration::from_millis(10),
        retry_max_delay: Duration::from_millis(50),
    }
}

/// A table (key `k`) with a stream of `view`.
async fn table(clients: &Clients, view: StreamViewType) -> ProvisionedTable {
    let model = Table {
        logical_id: "T".into(),
        name: common::unique_name("st", false),
        key_schema: vec![KeyAttribute {
            name: "k".into(),
            attribute_type: AttributeType::String,
            key_type: KeyType::Hash,
        }],
        ttl_attribute: None,
        stream_view_type: Some(view),
    };
    let table = local_aws::provision::create_table(&clients.dynamodb, &model)
        .await
        .expect("create the table");
    assert!(table.stream_arn.is_some(), "{table:?}");
    table
}

async fn put(clients: &Clients, table: &ProvisionedTable, key: &str, value: &str) {
    clients
        .dynamodb
        .put_item()
        .table_name(&table.name)
        .item("k", AttributeValue::S(key.into()))
        .item("v", AttributeValue::S(value.into()))
        .send()
        .await
        .expect("PutItem");
}

async fn delete(clients: &Clients, table: &ProvisionedTable, key: &str) {
    clients
        .dynamodb
        .delete_item()
        .table_name(&table.name)
        .key("k", AttributeValue::S(key.into()))
        .send()
        .await
        .expect("DeleteItem");
}

fn keys(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("r{i:02}")).collect()
}

/// Every batch every invocation saw: the keys, in order.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Vec<String>>>>);

impl Seen {
    fn record(&self, event: &Event) -> Vec<(String, String)> {
        let batch: Vec<(String, String)> = event
            .records
            .iter()
            .map(|r| {
                let key = match r.change.keys.get("k") {
                    Some(serde_dynamo::AttributeValue::S(k)) => k.clone(),
                    other => panic!("no key: {other:?}"),
                };
                (key, r.change.sequence_number.clone().unwrap_or_default())
            })
            .collect();
        self.0
            .lock()
            .unwrap()
            .push(batch.iter().map(|(k, _)| k.clone()).collect());
        batch
    }

    fn batches(&self) -> Vec<Vec<String>> {
        self.0.lock().unwrap().clone()
    }

    fn flat(&self) -> Vec<String> {
        self.batches().concat()
    }
}

fn failures(sequence_numbers: &[String]) -> DynamoDbEventResponse {
    let mut response = DynamoDbEventResponse::default();
    for s in sequence_numbers {
        let mut f = DynamoDbBatchItemFailure::default();
        f.item_identifier = Some(s.clone());
        response.batch_item_failures.push(f);
    }
    response
}

/// Runs `mapping` with a handler that records each batch and answers `respond(invocation
/// index, batch of (key, sequence number))`.
fn start(
    clients: &Clients,
    mapping: StreamEventSourceMapping,
    seen: &Seen,
    respond: impl Fn(usize, &[(String, String)]) -> Result<DynamoDbEventResponse, String>
    + Send
    + Sync
    + 'static,
) -> RunningRunner {
    let (seen, respond) = (seen.clone(), Arc::new(respond));
    Runner::from_clients(clients)
        .stream_options(fast())
        .stream_mapping(
            mapping,
            InProcess::new(move |event: LambdaEvent<Event>| {
                let (seen, respond) = (seen.clone(), Arc::clone(&respond));
                async move {
                    let index = seen.batches().len();
                    let batch = seen.record(&event.payload);
                    respond(index, &batch).map_err(Error::from)
                }
            }),
        )
        .expect("a runner with a streams client")
        .start(CancellationToken::new())
}

fn mapping(name: &str, table: &ProvisionedTable) -> StreamEventSourceMapping {
    StreamEventSourceMapping::new(
        name,
        table.stream_arn.as_deref().unwrap(),
        Duration::from_secs(5),
    )
}

/// The invocation records on the on-failure queue.
async fn invocation_records(clients: &Clients, queue: &ProvisionedQueue) -> Vec<serde_json::Value> {
    common::receive_all(clients, &queue.url)
        .await
        .iter()
        .map(|b| serde_json::from_str(b).unwrap())
        .collect()
}

#[tokio::test]
async fn records_written_before_the_mapping_starts_are_all_delivered_in_order() {
    let clients = common::clients().await;
    let t = table(&clients, StreamViewType::NewImage).await;
    for k in keys(25) {
        put(&clients, &t, &k, "before").await;
    }
    let seen = Seen::default();
    let events: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
    let shapes = Arc::clone(&events);
    let running = Runner::from_clients(&clients)
        .stream_options(fast())
        .stream_mapping(
            mapping("trim", &t).batch_size(10),
            InProcess::new(move |event: LambdaEvent<serde_json::Value>| {
                let shapes = Arc::clone(&shapes);
                async move {
                    shapes.lock().unwrap().push(event.payload);
                    Ok::<_, Error>(serde_json::json!(null))
                }
            }),
        )
        .unwrap()
        .start(CancellationToken::new());
    running.wait_stream_caught_up("trim", WAIT).await.unwrap();
    let events = events.lock().unwrap().clone();
    let typed: Vec<Event> = events
        .iter()
        .map(|e| serde_json::from_value(e.clone()).expect("the aws_lambda_events type"))
        .collect();
    for e in &typed {
        seen.record(e);
    }
    // All 25, once each, in write order, in batches of at most BatchSize.
    assert_eq!(seen.flat(), keys(25));
    assert!(
        seen.batches().iter().all(|b| b.len() <= 10),
        "{:?}",
        seen.batches()
    );
    // The record as Lambda sends it.
    let record = &events[0]["Records"][0];
    assert_eq!(record["eventName"], "INSERT");
    assert_eq!(record["eventVersion"], "1.1");
    assert_eq!(record["eventSource"], "aws:dynamodb");
    assert_eq!(record["awsRegion"], clients.region());
    assert_eq!(record["eventSourceARN"], t.stream_arn.clone().unwrap());
    assert!(record["eventID"].as_str().is_some_and(|id| !id.is_empty()));
    let change = &record["dynamodb"];
    assert_eq!(change["Keys"], serde_json::json!({"k": {"S": "r01"}}));
    assert_eq!(
        change["NewImage"],
        serde_json::json!({"k": {"S": "r01"}, "v": {"S": "before"}})
    );
    assert_eq!(change["StreamViewType"], "NEW_IMAGE");
    assert!(change["SequenceNumber"].as_str().is_some());
    assert!(change["SizeBytes"].as_i64().is_some_and(|n| n > 0));
    assert!(
        change["ApproximateCreationDateTime"]
            .as_i64()
            .is_some_and(|t| t > 1_600_000_000)
    );
    assert!(change.get("OldImage").is_none());
    let stats = running.stop().await["trim"];
    assert_eq!(stats.stream.records_read, 25);
    assert_eq!(stats.stream.records_processed, 25);
    assert_eq!(stats.stream.shards, 1);
    assert_eq!(stats.records_received, 25);
}

#[tokio::test]
async fn latest_delivers_only_what_is_written_after_the_start() {
    let clients = common::clients().await;
    let t = table(&clients, StreamViewType::KeysOnly).await;
    put(&clients, &t, "old", "x").await;
    let seen = Seen::default();
    let running = start(
        &clients,
        mapping("latest", &t).starting_position(StartingPosition::Latest),
        &seen,
        |_, _| Ok(DynamoDbEventResponse::default()),
    );
    // Once the mapping has read its shard, what comes next is new.
    running.wait_stream_caught_up("latest", WAIT).await.unwrap();
    put(&clients, &t, "new", "y").await;
    running.wait_stream_caught_up("latest", WAIT).await.unwrap();
    assert_eq!(seen.flat(), ["new"]);
    running.stop().await;
}

#[tokio::test]
async fn the_insert_filter_drops_modify_and_remove() {
    let clients = common::clients().await;
    let t = table(&clients, StreamViewType::NewAndOldImages).await;
    put(&clients, &t, "a", "1").await; // INSERT
    put(&clients, &t, "a", "2").await; // MODIFY
    put(&clients, &t, "b", "1").await; // INSERT
    delete(&clients, &t, "a").await; // REMOVE
    put(&clients, &t, "c", "1").await; // INSERT
    let seen = Seen::default();
    let inserts = FilterPattern::parse(r#"{"eventName": ["INSERT"]}"#).unwrap();
    let running = start(
        &clients,
        mapping("filtered", &t).filters(vec![inserts]),
        &seen,
        |_, _| Ok(DynamoDbEventResponse::default()),
    );
    running
        .wait_stream_caught_up("filtered", WAIT)
        .await
        .unwrap();
    assert_eq!(seen.flat(), ["a", "b", "c"]);
    let stats = running.stop().await["filtered"];
    assert_eq!(stats.stream.records_read, 5);
    assert_eq!(stats.stream.records_filtered, 2);
    assert_eq!(stats.stream.records_processed, 3);
}

#[tokio::test]
async fn a_nested_filter_matches_on_the_new_image() {
    let clients = common::clients().await;
    let t = table(&clients, StreamViewType::NewImage).await;
    put(&clients, &t, "a", "keep").await;
    put(&clients, &t, "b", "drop").await;
    put(&clients, &t, "c", "keep").await;
    let seen = Seen::default();
    let keep =
        FilterPattern::parse(r#"{"dynamodb": {"NewImage": {"v": {"S": ["keep"]}}}}"#).unwrap();
    let running = start(
        &clients,
        mapping("nested", &t).filters(vec![keep]),
        &seen,
        |_, _| Ok(DynamoDbEventResponse::default()),
    );
    running.wait_stream_caught_up("nested", WAIT).await.unwrap();
    assert_eq!(seen.flat(), ["a", "c"]);
    running.stop().await;
}

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

#[tokio::test]
async fn one_batch_at_a_time_per_shard_in_order_through_failures() {
    let clients = common::clients().await;
    let t = table(&clients, StreamViewType::NewImage).await;
    #[derive(Default)]
    struct Log {
        invocations: usize,
        in_flight: usize,
        most_in_flight: usize,
        processed: Vec<String>,
    }
    let log: Arc<Mutex<Log>> = Arc::default();
    let handler_log = Arc::clone(&log);
    // Every third invocation fails as a whole (after a pause, while later records are
    // waiting); the others succeed. The shard must neither skip ahead nor run two at once.
    let running = Runner::from_clients(&clients)
        .stream_options(fast())
        .stream_mapping(
            mapping("ordered", &t).batch_size(4),
            InProcess::new(move |event: LambdaEvent<Event>| {
                let log = Arc::clone(&handler_log);
                async move {
                    let invocation = {
                        let mut l = log.lock().unwrap();
                        l.in_flight += 1;
                        l.most_in_flight = l.most_in_flight.max(l.in_flight);
                        l.invocations += 1;
                        l.invocations
                    };
                    tokio::time::sleep(Duration::from_millis(15)).await;
                    let mut l = log.lock().unwrap();
                    l.in_flight -= 1;
                    if invocation % 3 == 0 {
                        return Err(Error::from("transient"));
                    }
                    for r in &event.payload.records {
                        match r.change.keys.get("k") {
                            Some(serde_dynamo::AttributeValue::S(k)) => l.processed.push(k.clone()),
                            other => panic!("{other:?}"),
                        }
                    }
                    Ok(serde_json::json!({}))
                }
            }),
        )
        .unwrap()
        .start(CancellationToken::new());
    let all = keys(30);
    for (i, k) in all.iter().enumerate() {
        put(&clients, &t, k, "v").await;
        if i % 10 == 9 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    running
        .wait_stream_caught_up("ordered", WAIT)
        .await
        .unwrap();
    {
        let log = log.lock().unwrap();
        assert_eq!(log.most_in_flight, 1, "two batches of one shard at once");
        assert_eq!(log.processed, all, "processed once each, in write order");
        assert!(log.invocations >= 10, "{}", log.invocations);
    }
    let stats = running.stop().await["ordered"];
    assert!(stats.stream.retries >= 3, "{stats:?}");
}

#[tokio::test]
async fn stopping_the_runner_stops_the_stream_pollers() {
    let clients = common::clients().await;
    let t = table(&clients, StreamViewType::NewImage).await;
    put(&clients, &t, "r01", "v").await;
    let seen = Seen::default();
    // A batch that fails forever, retried every 50 ms: stop must not wait for it.
    let running = start(&clients, mapping("stop", &t), &seen, |_, _| {
        Err("forever".into())
    });
    assert!(
        running
            .wait_for("stop", |s| s.stream.retries >= 2, WAIT)
            .await
    );
    let stopped = tokio::time::timeout(Duration::from_secs(5), running.stop()).await;
    let stats = stopped.expect("the pollers stop")["stop"];
    let invocations = seen.batches().len();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        seen.batches().len(),
        invocations,
        "no invocation after stop"
    );
    assert_eq!(stats.batches as usize, invocations);
}
