//! A Kinesis shard split on moto: the parent shard is read to its end before its children, so a
//! partition key's records stay in order across the split, and each record is delivered once.

mod common;

use std::time::Duration;

use aws_lambda_events::kinesis::KinesisEvent;
use aws_lambda_events::streams::KinesisEventResponse;
use local_aws::Clients;
use local_aws::provision::ProvisionedKinesisStream;

use common::kinesis::*;

const PARENT: &str = "shardId-000000000000";

async fn split(clients: &Clients, s: &ProvisionedKinesisStream) {
    clients
        .kinesis
        .split_shard()
        .stream_arn(&s.arn)
        .shard_to_split(PARENT)
        .new_starting_hash_key((1u128 << 127).to_string())
        .send()
        .await
        .expect("SplitShard");
}

/// Writes `data` under partition keys `a`, `b`, `c`, ... in turn.
async fn put_all(clients: &Clients, s: &ProvisionedKinesisStream, data: &[String]) {
    for (i, d) in data.iter().enumerate() {
        let key = char::from(b'a' + (i % 8) as u8).to_string();
        put(clients, s, &key, d).await;
    }
}

#[tokio::test]
async fn kinesis_a_child_shard_is_read_only_after_its_parent_ends() {
    let clients = common::clients().await;
    let s = stream(&clients, 1).await;
    let k = keys(12);
    put_all(&clients, &s, &k[..4]).await;
    split(&clients, &s).await;
    put_all(&clients, &s, &k[4..]).await;
    let seen = Seen::default();
    // The parent and both children are listed from the start; the parent's batch is slow. Read
    // together, the children's records would be done first.
    let from_parent = |e: &KinesisEvent| {
        e.records.iter().any(|r| {
            r.event_id
                .as_deref()
                .is_some_and(|id| id.starts_with(PARENT))
        })
    };
    let running = start_paced(
        &clients,
        mapping("split", &s),
        &seen,
        move |e| {
            if from_parent(e) {
                Duration::from_millis(300)
            } else {
                Duration::ZERO
            }
        },
        |_, _| Ok(KinesisEventResponse::default()),
    );
    running.wait_stream_caught_up("split", WAIT).await.unwrap();
    let flat = seen.flat();
    let data: Vec<&str> = flat.iter().map(|r| r.data.as_str()).collect();
    assert_eq!(data[..4], ["r01", "r02", "r03", "r04"], "{flat:#?}");
    assert!(flat[..4].iter().all(|r| r.shard_id == PARENT), "{flat:#?}");
    assert!(flat[4..].iter().all(|r| r.shard_id != PARENT), "{flat:#?}");
    let mut sorted = data.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, k, "each record once");
    let stats = running.stop().await["split"];
    assert_eq!(stats.stream.shards, 3);
    assert_eq!(stats.stream.records_processed, 12);
}

#[tokio::test]
async fn kinesis_a_split_while_reading_moves_on_to_the_children() {
    let clients = common::clients().await;
    let s = stream(&clients, 1).await;
    let k = keys(10);
    put_all(&clients, &s, &k[..3]).await;
    let seen = Seen::default();
    let running = start(&clients, mapping("resplit", &s), &seen, |_, _| {
        Ok(KinesisEventResponse::default())
    });
    running
        .wait_stream_caught_up("resplit", WAIT)
        .await
        .unwrap();
    assert_eq!(seen.batches(), [k[..3].to_vec()]);

    // The parent closes at its end; what is written next goes to the children, which the
    // mapping finds when it looks again (waiting looks at once).
    split(&clients, &s).await;
    put_all(&clients, &s, &k[3..]).await;
    running
        .wait_stream_caught_up("resplit", WAIT)
        .await
        .unwrap();
    let flat = seen.flat();
    let mut data: Vec<&str> = flat.iter().map(|r| r.data.as_str()).collect();
    data.sort_unstable();
    assert_eq!(data, k, "each record once: {flat:#?}");
    assert!(flat[3..].iter().all(|r| r.shard_id != PARENT), "{flat:#?}");
    let stats = running.stop().await["resplit"];
    assert_eq!(stats.stream.shards, 3);
    assert_eq!(stats.stream.records_processed, 10);
}

#[tokio::test]
async fn kinesis_a_merged_shard_is_read_only_after_both_its_parents_end() {
    let clients = common::clients().await;
    let s = stream(&clients, 2).await;
    let (first, second) = (PARENT, "shardId-000000000001");
    // Two records in each parent (by explicit hash key), then the merge, then three in the child.
    for (i, data) in ["r01", "r02", "r03", "r04"].iter().enumerate() {
        let hash = if i % 2 == 0 { 0u128 } else { 1u128 << 127 };
        clients
            .kinesis
            .put_record()
            .stream_arn(&s.arn)
            .partition_key("k")
            .explicit_hash_key(hash.to_string())
            .data(aws_sdk_kinesis::primitives::Blob::new(*data))
            .send()
            .await
            .expect("PutRecord");
    }
    clients
        .kinesis
        .merge_shards()
        .stream_arn(&s.arn)
        .shard_to_merge(first)
        .adjacent_shard_to_merge(second)
        .send()
        .await
        .expect("MergeShards");
    put_all(&clients, &s, &keys(7)[4..]).await;
    let seen = Seen::default();
    // The adjacent parent's batch is slow: the child would be read before it ends if it waited
    // for its first parent only.
    let running = start_paced(
        &clients,
        mapping("merged", &s),
        &seen,
        move |e: &KinesisEvent| {
            let from = |shard: &str| {
                e.records.iter().any(|r| {
                    r.event_id
                        .as_deref()
                        .is_some_and(|id| id.starts_with(shard))
                })
            };
            if from(second) {
                Duration::from_millis(500)
            } else if from(first) {
                Duration::from_millis(50)
            } else {
                Duration::ZERO
            }
        },
        |_, _| Ok(KinesisEventResponse::default()),
    );
    running.wait_stream_caught_up("merged", WAIT).await.unwrap();
    let flat = seen.flat();
    let mut parents: Vec<&str> = flat[..4].iter().map(|r| r.data.as_str()).collect();
    parents.sort_unstable();
    assert_eq!(parents, ["r01", "r02", "r03", "r04"], "{flat:#?}");
    let child: Vec<&str> = flat[4..].iter().map(|r| r.data.as_str()).collect();
    assert_eq!(child, ["r05", "r06", "r07"], "{flat:#?}");
    assert!(
        flat[4..]
            .iter()
            .all(|r| r.shard_id == "shardId-000000000002"),
        "{flat:#?}"
    );
    let stats = running.stop().await["merged"];
    assert_eq!(stats.stream.shards, 3);
}
