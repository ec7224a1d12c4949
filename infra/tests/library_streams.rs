//! The library's stream processor end to end, under the local event source mapping: on moto's
//! DynamoDB stream, a failure in the middle of a batch is retried from its checkpoint and nothing
//! that succeeded runs twice; across a shard split (a parent and a child shard, DynamoDB Streams
//! mocked, as moto never splits), a key's records take effect in order and once.

mod common;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::dynamodb::{Event, EventRecord};
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{
    BatchProcessor, RecordContext, RecordError, RecordHandlerExt, record,
};
use lambda_idempotency::store::DynamoDbBackend;
use lambda_runtime::{Error, LambdaEvent};
use local_aws::Clients;
use local_aws::runner::{InProcess, Runner};
use local_aws::template::{AttributeType, KeyAttribute, KeyType, StreamViewType, Table};
use tokio_util::sync::CancellationToken;

use common::stream::*;

/// The engine's table, on the local endpoint.
async fn engine(clients: &Clients) -> Idempotency<DynamoDbBackend> {
    let model = Table {
        logical_id: "Idempotency".into(),
        name: common::unique_name("idem", false),
        key_schema: vec![KeyAttribute {
            name: "id".into(),
            attribute_type: AttributeType::String,
            key_type: KeyType::Hash,
        }],
        ttl_attribute: None,
        stream_view_type: None,
        global_secondary_indexes: Vec::new(),
    };
    let table = local_aws::provision::create_table(&clients.dynamodb, &model)
        .await
        .expect("create the idempotency table");
    Idempotency::new(DynamoDbBackend::new(clients.dynamodb.clone(), table.name))
}

/// The item's key (`k`) of a stream record.
fn key_of(r: &EventRecord) -> String {
    match r.change.keys.get("k") {
        Some(serde_dynamo::AttributeValue::S(k)) => k.clone(),
        _ => String::new(),
    }
}

/// Effects in order, and the invocations' responses.
#[derive(Default, Clone)]
struct Effects {
    done: Arc<Mutex<Vec<String>>>,
    tries: Arc<Mutex<Vec<String>>>,
    responses: Arc<Mutex<Vec<Vec<String>>>>,
}

/// The function: the library's processor over the stream's event, each record idempotent on the
/// DynamoDB engine, `fail_once` failing on its first try; with `one_account`, every record is of
/// one account and they run in order by it (else by the item's key, the stream's own order key).
fn function(
    engine: Idempotency<DynamoDbBackend>,
    effects: &Effects,
    fail_once: &'static str,
    one_account: bool,
) -> impl local_aws::runner::Invoker + use<> {
    let e = effects.clone();
    let handler = Arc::new(
        record(move |r: EventRecord, _ctx: RecordContext| {
            let e = e.clone();
            async move {
                let key = key_of(&r);
                let first = {
                    let mut tries = e.tries.lock().unwrap();
                    tries.push(key.clone());
                    tries.iter().filter(|k| **k == key).count() == 1
                };
                if key == fail_once && first {
                    return Err(RecordError::handler(format!("{key} failed once")));
                }
                e.done.lock().unwrap().push(key.clone());
                Ok(key)
            }
        })
        .idempotent(engine)
        .ordered_by(move |r: &EventRecord| {
            if one_account {
                Some("account".to_owned())
            } else {
                Some(key_of(r))
            }
        }),
    );
    let responses = effects.responses.clone();
    InProcess::new(move |event: LambdaEvent<Event>| {
        let (handler, responses) = (handler.clone(), responses.clone());
        async move {
            let report = BatchProcessor::new().process(&event, &*handler).await?;
            let response = report.response();
            responses.lock().unwrap().push(
                response
                    .batch_item_failures
                    .iter()
                    .filter_map(|f| f.item_identifier.clone())
                    .collect(),
            );
            Ok::<_, Error>(response)
        }
    })
}

#[tokio::test]
async fn a_failure_in_the_middle_of_a_batch_is_retried_from_its_checkpoint_and_nothing_runs_twice()
{
    let clients = common::clients().await;
    let t = table(&clients, StreamViewType::NewImage).await;
    for k in keys(6) {
        put(&clients, &t, &k, "v").await;
    }
    let effects = Effects::default();
    let running = Runner::from_clients(&clients)
        .stream_options(fast())
        .stream_mapping(
            mapping("library", &t)
                .batch_size(10)
                .report_batch_item_failures(true),
            function(engine(&clients).await, &effects, "r02", false),
        )
        .expect("a runner with a streams client")
        .start(CancellationToken::new());
    running
        .wait_stream_caught_up("library", WAIT)
        .await
        .unwrap();
    let stats = running.stop().await["library"];
    // The first invocation reported r02's sequence number alone; the retry from it ran r02, and
    // found r03..r05 done.
    let responses = effects.responses.lock().unwrap().clone();
    assert_eq!(responses.len(), 2, "{responses:?}");
    assert_eq!(responses[0].len(), 1, "{responses:?}");
    assert!(responses[1].is_empty(), "{responses:?}");
    assert_eq!(stats.stream.retries, 1);
    let mut done = effects.done.lock().unwrap().clone();
    done.sort();
    assert_eq!(done, keys(6), "each effect once");
}

#[tokio::test]
async fn across_a_shard_split_each_record_takes_effect_once_and_in_order() {
    let clients = common::clients().await;
    let engine = engine(&clients).await;
    let split = Arc::new(AtomicBool::new(true));
    let effects = Effects::default();
    // Every record is of one account. Record r2 of the parent fails once: r3 waits behind it, and
    // the child's records until the parent is done.
    let running = Runner::new(clients.sqs.clone())
        .dynamodb_streams(common::split_stream::client(split.clone()))
        .stream_options(fast())
        .stream_mapping(
            local_aws::runner::StreamEventSourceMapping::new(
                "split",
                common::split_stream::STREAM,
                Duration::from_secs(5),
            )
            .report_batch_item_failures(true),
            function(engine, &effects, "r2", true),
        )
        .unwrap()
        .start(CancellationToken::new());
    running.wait_stream_caught_up("split", WAIT).await.unwrap();
    let stats = running.stop().await["split"];
    assert_eq!(stats.stream.shards, 2);
    assert_eq!(
        *effects.done.lock().unwrap(),
        ["r1", "r2", "r3", "r4", "r5"],
        "once each, the parent's before the child's"
    );
}

#[derive(serde::Deserialize)]
struct Payment {
    id: String,
}

#[tokio::test]
async fn on_kinesis_a_failed_record_holds_its_key_and_the_retry_from_the_checkpoint_runs_nothing_twice()
 {
    use aws_lambda_events::kinesis::KinesisEvent;
    use lambda_idempotency::batch::json;

    let clients = common::clients().await;
    let stream = common::kinesis::stream(&clients, 1).await;
    // Two accounts, interleaved; a-2 fails on its first try.
    for (account, id) in [
        ("a", "a-1"),
        ("b", "b-1"),
        ("a", "a-2"),
        ("b", "b-2"),
        ("a", "a-3"),
    ] {
        common::kinesis::put(&clients, &stream, account, &format!(r#"{{"id":"{id}"}}"#)).await;
    }
    let effects = Effects::default();
    let e = effects.clone();
    let handler = Arc::new(
        json(move |p: Payment, _ctx: RecordContext| {
            let e = e.clone();
            async move {
                let first = {
                    let mut tries = e.tries.lock().unwrap();
                    tries.push(p.id.clone());
                    tries.iter().filter(|k| **k == p.id).count() == 1
                };
                if p.id == "a-2" && first {
                    return Err(RecordError::handler("a-2 failed once"));
                }
                e.done.lock().unwrap().push(p.id.clone());
                Ok(p.id)
            }
        })
        .idempotent(engine(&clients).await),
    );
    let responses = effects.responses.clone();
    let running = Runner::from_clients(&clients)
        .stream_options(fast())
        .stream_mapping(
            common::kinesis::mapping("kinesis-library", &stream)
                .batch_size(10)
                .report_batch_item_failures(true),
            InProcess::new(move |event: LambdaEvent<KinesisEvent>| {
                let (handler, responses) = (handler.clone(), responses.clone());
                async move {
                    let report = BatchProcessor::new().process(&event, &*handler).await?;
                    let response = report.response();
                    responses.lock().unwrap().push(
                        response
                            .batch_item_failures
                            .iter()
                            .filter_map(|f| f.item_identifier.clone())
                            .collect(),
                    );
                    Ok::<_, Error>(response)
                }
            }),
        )
        .expect("a runner with a Kinesis client")
        .start(CancellationToken::new());
    running
        .wait_stream_caught_up("kinesis-library", WAIT)
        .await
        .unwrap();
    running.stop().await;
    // a-3 waited behind a-2 (its key); b's records ran in the first invocation and were
    // duplicates in the retry from a-2's checkpoint.
    let done = effects.done.lock().unwrap().clone();
    let of = |account: &str| -> Vec<String> {
        done.iter()
            .filter(|id| id.starts_with(account))
            .cloned()
            .collect()
    };
    assert_eq!(of("a-"), ["a-1", "a-2", "a-3"], "{done:?}");
    assert_eq!(of("b-"), ["b-1", "b-2"], "{done:?}");
    assert_eq!(done.len(), 5, "each effect once: {done:?}");
    let responses = effects.responses.lock().unwrap().clone();
    assert_eq!(responses.len(), 2, "{responses:?}");
    assert_eq!(responses[0].len(), 1, "the checkpoint alone: {responses:?}");
    assert!(responses[1].is_empty(), "{responses:?}");
}
