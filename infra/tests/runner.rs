//! The runner deletes exactly what real Lambda deletes: everything on success, the records not
//! reported failed with ReportBatchItemFailures, nothing on an error, a timeout or an invalid
//! response; SQS then redelivers and, after maxReceiveCount, dead-letters.

mod common;
/// The Invoke API, draining and the template's mappings.
#[path = "runner/invoke_and_template.rs"]
mod invoke_and_template;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use bytes::Bytes;
use lambda_runtime::{Error, LambdaEvent};
use local_aws::gateway::{Gateway, GatewayOptions};
use local_aws::provision::ProvisionedQueue;
use local_aws::runner::{
    DrainError, EventSourceMapping, HttpInvoker, InProcess, Invocation, InvokeFuture, Invoker,
    Runner, RunningRunner, Stats,
};
use local_aws::template::HttpRoute;
use tokio_util::sync::CancellationToken;

/// One record as a handler saw it.
#[derive(Clone, Debug)]
struct Seen {
    invocation: usize,
    message_id: String,
    body: String,
    receive_count: u32,
}

/// Every record every invocation saw, in order.
#[derive(Clone, Default)]
struct Log {
    seen: Arc<Mutex<Vec<Seen>>>,
    invocations: Arc<AtomicUsize>,
}

impl Log {
    /// Records the batch; returns the invocation's index (0 = first).
    fn record(&self, records: &[SqsMessage]) -> usize {
        let invocation = self.invocations.fetch_add(1, Ordering::SeqCst);
        let mut seen = self.seen.lock().unwrap();
        for r in records {
            seen.push(Seen {
                invocation,
                message_id: r.message_id.clone().unwrap(),
                body: r.body.clone().unwrap(),
                receive_count: r.attributes["ApproximateReceiveCount"].parse().unwrap(),
            });
        }
        invocation
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Receive counts by body, in the order seen.
    fn counts(&self) -> BTreeMap<String, Vec<u32>> {
        let mut out: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for s in self.seen() {
            out.entry(s.body).or_default().push(s.receive_count);
        }
        out
    }
}

fn failures<'a>(ids: impl IntoIterator<Item = &'a str>) -> SqsBatchResponse {
    let mut response = SqsBatchResponse::default();
    for id in ids {
        let mut f = BatchItemFailure::default();
        f.item_identifier = id.to_owned();
        response.batch_item_failures.push(f);
    }
    response
}

fn start(
    clients: &local_aws::Clients,
    mapping: EventSourceMapping,
    invoker: impl Invoker,
) -> RunningRunner {
    Runner::new(clients.sqs.clone())
        .wait_time_seconds(1)
        .mapping(mapping, invoker)
        .start(CancellationToken::new())
}

async fn drain_and_stop(running: RunningRunner, queue: &ProvisionedQueue, name: &str) -> Stats {
    running
        .wait_drained(&[queue.url.as_str()], Duration::from_secs(15))
        .await
        .unwrap_or_else(|e| panic!("{e}; stats {:?}", running.all_stats()));
    running.stop().await[name]
}

#[tokio::test]
async fn success_deletes_every_record() {
    let clients = common::clients().await;
    let queue = common::queue(&clients, false, 30).await;
    common::send(&clients, &queue, None, &["1", "2", "3", "4", "5"]).await;
    let log = Log::default();
    let l = log.clone();
    let running = start(
        &clients,
        EventSourceMapping::new("ok", &queue, Duration::from_secs(5)),
        InProcess::new(move |e: LambdaEvent<SqsEvent>| {
            l.record(&e.payload.records);
            async { Ok::<_, Error>(SqsBatchResponse::default()) }
        }),
    );
    let stats = drain_and_stop(running, &queue, "ok").await;
    assert_eq!(stats.records_received, 5);
    assert_eq!(stats.records_deleted, 5);
    assert_eq!(
        stats.records_reported_failed + stats.whole_batch_failures() + stats.delete_errors,
        0
    );
    assert!((1..=5).contains(&stats.batches));
    assert!(log.seen().iter().all(|s| s.receive_count == 1));
}

#[tokio::test]
async fn reported_failures_stay_and_come_back() {
    let clients = common::clients().await;
    let (queue, dlq) = common::queue_with_dlq(&clients, false, 1, 5).await;
    common::send(&clients, &queue, None, &["ok-1", "fail-1", "ok-2"]).await;
    let log = Log::default();
    let l = log.clone();
    let running = start(
        &clients,
        EventSourceMapping::new("partial", &queue, Duration::from_secs(5)).maximum_concurrency(1),
        InProcess::new(move |e: LambdaEvent<SqsEvent>| {
            l.record(&e.payload.records);
            // Fail "fail-*" on its first receive only.
            let failed: Vec<String> = e
                .payload
                .records
                .iter()
                .filter(|r| {
                    r.body.as_deref().unwrap().starts_with("fail")
                        && r.attributes["ApproximateReceiveCount"] == "1"
                })
                .map(|r| r.message_id.clone().unwrap())
                .collect();
            async move { Ok::<_, Error>(failures(failed.iter().map(String::as_str))) }
        }),
    );
    let stats = drain_and_stop(running, &queue, "partial").await;
    let counts = log.counts();
    assert_eq!(counts["fail-1"], [1, 2], "{counts:?}");
    assert_eq!(counts["ok-1"], [1]);
    assert_eq!(counts["ok-2"], [1]);
    assert_eq!(stats.records_reported_failed, 1);
    assert_eq!(stats.records_deleted, 3);
    assert_eq!(stats.whole_batch_failures(), 0);
    assert_eq!(common::depth(&clients, &dlq.url).await, 0);
}

/// Returns `first` for the first invocation, `{}` after; logs what it saw.
struct RawResponses {
    first: &'static str,
    log: Log,
}

impl Invoker for RawResponses {
    fn invoke(&self, invocation: Invocation) -> InvokeFuture<'_> {
        let event: SqsEvent = serde_json::from_value(invocation.payload).unwrap();
        let n = self.log.record(&event.records);
        Box::pin(async move {
            Ok(Bytes::from_static(
                if n == 0 { self.first } else { "{}" }.as_bytes(),
            ))
        })
    }
}

/// The first batch must come back whole: every record of invocation 0 is seen again.
fn assert_first_batch_redelivered(log: &Log) {
    let seen = log.seen();
    let first: Vec<&Seen> = seen.iter().filter(|s| s.invocation == 0).collect();
    assert!(!first.is_empty());
    for s in first {
        assert!(
            seen.iter()
                .any(|t| t.message_id == s.message_id && t.receive_count == 2),
            "{} was not redelivered: {seen:?}",
            s.body
        );
    }
}

#[tokio::test]
async fn an_invalid_response_leaves_the_whole_batch() {
    let clients = common::clients().await;
    let cases = [
        r#"{"batchItemFailures":[{"itemIdentifier":"not-a-message-id-of-the-batch"}]}"#,
        r#"{"batchItemFailures":[{"itemIdentifier":""}]}"#,
        r#"{"batchItemFailures":[{"itemIdentifier":null}]}"#,
        "this is not JSON",
    ];
    let runs = cases.into_iter().map(|first| {
        let clients = clients.clone();
        async move {
            let queue = common::queue(&clients, false, 1).await;
            common::send(&clients, &queue, None, &["a", "b", "c"]).await;
            let log = Log::default();
            let running = start(
                &clients,
                EventSourceMapping::new("invalid", &queue, Duration::from_secs(5))
                    .maximum_concurrency(1),
                RawResponses {
                    first,
                    log: log.clone(),
                },
            );
            let stats = drain_and_stop(running, &queue, "invalid").await;
            assert_first_batch_redelivered(&log);
            assert_eq!(stats.invalid_responses, 1, "{first}");
            assert_eq!(stats.records_deleted, 3, "{first}");
        }
    });
    futures_util::future::join_all(runs).await;
}

#[tokio::test]
async fn an_error_or_a_panic_leaves_the_whole_batch() {
    let clients = common::clients().await;
    let runs = [false, true].map(|panic| {
        let clients = clients.clone();
        async move {
            let queue = common::queue(&clients, false, 1).await;
            common::send(&clients, &queue, None, &["a", "b"]).await;
            let log = Log::default();
            let l = log.clone();
            let running = start(
                &clients,
                EventSourceMapping::new("err", &queue, Duration::from_secs(5))
                    .maximum_concurrency(1),
                InProcess::new(move |e: LambdaEvent<SqsEvent>| {
                    let n = l.record(&e.payload.records);
                    async move {
                        if n == 0 && panic {
                            panic!("boom");
                        }
                        if n == 0 {
                            return Err(Error::from("database unavailable"));
                        }
                        Ok(SqsBatchResponse::default())
                    }
                }),
            );
            let stats = drain_and_stop(running, &queue, "err").await;
            assert_first_batch_redelivered(&log);
            assert_eq!(stats.invocation_errors, 1);
            assert_eq!(stats.records_deleted, 2);
        }
    });
    futures_util::future::join_all(runs).await;
}

#[tokio::test]
async fn a_timeout_leaves_the_whole_batch() {
    let clients = common::clients().await;
    let queue = common::queue(&clients, false, 1).await;
    common::send(&clients, &queue, None, &["slow"]).await;
    let log = Log::default();
    let l = log.clone();
    let finished = Arc::new(AtomicUsize::new(0));
    let f = finished.clone();
    let running = start(
        &clients,
        EventSourceMapping::new("slow", &queue, Duration::from_millis(400)).maximum_concurrency(1),
        InProcess::new(move |e: LambdaEvent<SqsEvent>| {
            let n = l.record(&e.payload.records);
            let f = f.clone();
            async move {
                if n == 0 {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                }
                f.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Error>(SqsBatchResponse::default())
            }
        }),
    );
    let stats = drain_and_stop(running, &queue, "slow").await;
    assert_eq!(log.counts()["slow"], [1, 2]);
    assert_eq!(stats.timeouts, 1);
    assert_eq!(stats.records_deleted, 1);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        finished.load(Ordering::SeqCst),
        1,
        "the timed-out invocation was not aborted"
    );
}

#[tokio::test]
async fn records_failing_max_receive_count_times_land_in_the_dead_letter_queue() {
    let clients = common::clients().await;
    let (queue, dlq) = common::queue_with_dlq(&clients, false, 1, 2).await;
    common::send(&clients, &queue, None, &["poison"]).await;
    let log = Log::default();
    let l = log.clone();
    let running = start(
        &clients,
        EventSourceMapping::new("poison", &queue, Duration::from_secs(5)).maximum_concurrency(1),
        InProcess::new(move |e: LambdaEvent<SqsEvent>| {
            l.record(&e.payload.records);
            let ids: Vec<String> = e
                .payload
                .records
                .iter()
                .map(|r| r.message_id.clone().unwrap())
                .collect();
            async move { Ok::<_, Error>(failures(ids.iter().map(String::as_str))) }
        }),
    );
    let stats = drain_and_stop(running, &queue, "poison").await;
    assert_eq!(log.counts()["poison"], [1, 2]);
    assert_eq!(stats.records_reported_failed, 2);
    assert_eq!(stats.records_deleted, 0);
    assert_eq!(common::receive_all(&clients, &dlq.url).await, ["poison"]);
}

#[tokio::test]
async fn without_report_batch_item_failures_success_deletes_everything() {
    let clients = common::clients().await;
    let queue = common::queue(&clients, false, 1).await;
    common::send(&clients, &queue, None, &["a", "b"]).await;
    let log = Log::default();
    let l = log.clone();
    let running = start(
        &clients,
        EventSourceMapping::new("plain", &queue, Duration::from_secs(5))
            .report_batch_item_failures(false),
        InProcess::new(move |e: LambdaEvent<SqsEvent>| {
            l.record(&e.payload.records);
            let ids: Vec<String> = e
                .payload
                .records
                .iter()
                .map(|r| r.message_id.clone().unwrap())
                .collect();
            // Ignored: the mapping does not report batch item failures.
            async move { Ok::<_, Error>(failures(ids.iter().map(String::as_str))) }
        }),
    );
    let stats = drain_and_stop(running, &queue, "plain").await;
    assert_eq!(stats.records_deleted, 2);
    assert_eq!(stats.records_reported_failed, 0);
    assert!(log.seen().iter().all(|s| s.receive_count == 1));
}

/// Tracks how many invocations run at once, overall and per message group.
#[derive(Clone, Default)]
struct InFlight {
    now: Arc<Mutex<BTreeMap<String, usize>>>,
    max_total: Arc<AtomicUsize>,
    max_per_key: Arc<AtomicUsize>,
}

impl InFlight {
    fn enter(&self, keys: &[String]) {
        let mut now = self.now.lock().unwrap();
        for k in keys {
            *now.entry(k.clone()).or_default() += 1;
            self.max_per_key.fetch_max(now[k], Ordering::SeqCst);
        }
        let total = now.values().sum::<usize>();
        self.max_total.fetch_max(total, Ordering::SeqCst);
    }

    fn leave(&self, keys: &[String]) {
        let mut now = self.now.lock().unwrap();
        for k in keys {
            *now.get_mut(k).unwrap() -= 1;
        }
    }
}

#[tokio::test]
async fn batch_size_and_maximum_concurrency_are_honoured() {
    let clients = common::clients().await;
    let queue = common::queue(&clients, false, 30).await;
    let bodies: Vec<String> = (0..12).map(|i| format!("m{i}")).collect();
    common::send(
        &clients,
        &queue,
        None,
        &bodies.iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .await;
    let log = Log::default();
    let in_flight = InFlight::default();
    let (l, f) = (log.clone(), in_flight.clone());
    let running = start(
        &clients,
        EventSourceMapping::new("sized", &queue, Duration::from_secs(5))
            .batch_size(3)
            .maximum_concurrency(2),
        InProcess::new(move |e: LambdaEvent<SqsEvent>| {
            l.record(&e.payload.records);
            let keys = vec![e.context.request_id.clone()];
            let f = f.clone();
            async move {
                f.enter(&keys);
                tokio::time::sleep(Duration::from_millis(300)).await;
                f.leave(&keys);
                Ok::<_, Error>(SqsBatchResponse::default())
            }
        }),
    );
    let stats = drain_and_stop(running, &queue, "sized").await;
    assert_eq!(stats.records_deleted, 12);
    let mut per_invocation: BTreeMap<usize, usize> = BTreeMap::new();
    for s in log.seen() {
        *per_invocation.entry(s.invocation).or_default() += 1;
    }
    assert!(
        per_invocation.values().all(|n| *n <= 3),
        "{per_invocation:?}"
    );
    assert_eq!(in_flight.max_total.load(Ordering::SeqCst), 2);
}

/// A function's reserved concurrency bounds its invocations across all its mappings: two queues
/// with 3 pollers each, reserved concurrency 1, never two invocations at once; both drain.
#[tokio::test]
async fn reserved_concurrency_bounds_every_mapping_of_the_function() {
    let clients = common::clients().await;
    let (a, b) = (
        common::queue(&clients, false, 30).await,
        common::queue(&clients, false, 30).await,
    );
    common::send(&clients, &a, None, &["a1", "a2", "a3", "a4"]).await;
    common::send(&clients, &b, None, &["b1", "b2", "b3", "b4"]).await;
    let in_flight = InFlight::default();
    let handler = |f: InFlight| {
        InProcess::new(move |e: LambdaEvent<SqsEvent>| {
            let keys = vec![e.context.request_id.clone()];
            let f = f.clone();
            async move {
                f.enter(&keys);
                tokio::time::sleep(Duration::from_millis(150)).await;
                f.leave(&keys);
                Ok::<_, Error>(SqsBatchResponse::default())
            }
        })
    };
    let mapping = |queue: &ProvisionedQueue| {
        let mut m = EventSourceMapping::new("reserved", queue, Duration::from_secs(5))
            .batch_size(1)
            .maximum_concurrency(3);
        m.reserved_concurrency = Some(1);
        m
    };
    let running = Runner::new(clients.sqs.clone())
        .wait_time_seconds(1)
        .mapping(mapping(&a), handler(in_flight.clone()))
        .mapping(mapping(&b), handler(in_flight.clone()))
        .start(CancellationToken::new());
    running
        .wait_drained(&[a.url.as_str(), b.url.as_str()], Duration::from_secs(30))
        .await
        .unwrap();
    let stats = running.stop().await["reserved"];
    assert_eq!(stats.records_deleted, 8);
    assert_eq!(
        in_flight.max_total.load(Ordering::SeqCst),
        1,
        "never more invocations at once than the reserved concurrency"
    );
}

#[tokio::test]
async fn fifo_groups_run_in_order_one_batch_at_a_time() {
    let clients = common::clients().await;
    let queue = common::queue(&clients, true, 30).await;
    for i in 0..4 {
        for group in ["g1", "g2"] {
            common::send(&clients, &queue, Some(group), &[&format!("{group}-{i}")]).await;
        }
    }
    let log = Log::default();
    let in_flight = InFlight::default();
    let (l, f) = (log.clone(), in_flight.clone());
    let running = start(
        &clients,
        EventSourceMapping::new("fifo", &queue, Duration::from_secs(5))
            .batch_size(1)
            .maximum_concurrency(5),
        InProcess::new(move |e: LambdaEvent<SqsEvent>| {
            l.record(&e.payload.records);
            let groups: Vec<String> = e
                .payload
                .records
                .iter()
                .map(|r| r.attributes["MessageGroupId"].clone())
                .collect();
            let f = f.clone();
            async move {
                f.enter(&groups);
                tokio::time::sleep(Duration::from_millis(150)).await;
                f.leave(&groups);
                Ok::<_, Error>(SqsBatchResponse::default())
            }
        }),
    );
    let stats = drain_and_stop(running, &queue, "fifo").await;
    assert_eq!(stats.records_deleted, 8);
    assert_eq!(
        in_flight.max_per_key.load(Ordering::SeqCst),
        1,
        "a group had two batches in flight"
    );
    assert_eq!(
        in_flight.max_total.load(Ordering::SeqCst),
        2,
        "the two groups did not run in parallel"
    );
    for group in ["g1", "g2"] {
        let order: Vec<String> = log
            .seen()
            .into_iter()
            .map(|s| s.body)
            .filter(|b| b.starts_with(group))
            .collect();
        assert_eq!(
            order,
            (0..4).map(|i| format!("{group}-{i}")).collect::<Vec<_>>()
        );
    }
}
