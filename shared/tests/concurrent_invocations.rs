//! Several invocations of one consumer at once in one process, as Lambda Managed Instances run
//! them: each invocation's deadline, leases, request counts, metrics, trace id and cache entries
//! stay its own while the invocations interleave.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::batch::{BatchReport, Deduplicated, RecordContext, message};
use lambda_idempotency::cache::LocalCache;
use lambda_idempotency::consumer::Consumer;
use lambda_idempotency::count::RequestCounter;
use lambda_idempotency::metrics::BatchCounts;
use lambda_idempotency::runtime;
use lambda_idempotency::state::{IdempotencyRecord, Put, Status, Update, Updated};
use lambda_idempotency::store::{Backend, InMemoryBackend, StoreError};
use lambda_idempotency::test_util::SqsEventBuilder;
use lambda_runtime::{Context, LambdaEvent};
use tokio::sync::Barrier;

/// The in-memory store, each call counted by one counter shared by every invocation (as the
/// SDK clients' interceptor, or the Redis backend, counts them).
#[derive(Debug, Clone)]
struct Counted {
    inner: Arc<InMemoryBackend>,
    requests: RequestCounter,
}

impl Backend for Counted {
    async fn put(&self, record: &IdempotencyRecord, now_ms: i64) -> Result<Put, StoreError> {
        self.requests.add("put");
        self.inner.put(record, now_ms).await
    }

    async fn get(&self, key: &str, now_ms: i64) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.requests.add("get");
        self.inner.get(key, now_ms).await
    }

    async fn update(&self, key: &str, update: &Update, now_ms: i64) -> Result<Updated, StoreError> {
        self.requests.add("update");
        self.inner.update(key, update, now_ms).await
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.requests.add("delete");
        self.inner.delete(key).await
    }
}

/// What a handler saw of its invocation while the other one was in flight.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    message_id: String,
    request_id: String,
    deadline_ms: Option<i64>,
    trace_id: Option<String>,
    /// Its own record's lease end and owner, read from the store while both invocations held
    /// their leases.
    lease_until_ms: Option<i64>,
    owner: Option<String>,
}

struct Invocation {
    request_id: &'static str,
    trace_id: &'static str,
    deadline_ms: i64,
    /// (message id, body): a body of `"fail"` fails its record.
    messages: Vec<(&'static str, &'static str)>,
}

impl Invocation {
    fn event(&self) -> LambdaEvent<SqsEvent> {
        let mut context = Context::default();
        context.request_id = self.request_id.to_owned();
        context.deadline = u64::try_from(self.deadline_ms).unwrap();
        context.xray_trace_id = Some(self.trace_id.to_owned());
        SqsEventBuilder::new()
            .messages(self.messages.iter().copied())
            .context(context)
            .build()
    }
}

fn now_ms() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

type Report = BatchReport<Deduplicated<String>, SqsEvent>;

/// Runs `invocations` at once, each in its own task with its own request counter, as
/// `run_concurrent`'s workers do.
async fn run_at_once(
    consumer: &Arc<Consumer<Deduplicated<String>>>,
    invocations: &[Invocation],
) -> Vec<(Report, RequestCounter)> {
    let tasks: Vec<_> = invocations
        .iter()
        .map(|invocation| {
            let consumer = consumer.clone();
            let event = invocation.event();
            tokio::spawn(async move {
                let requests = RequestCounter::default();
                let report = requests.scope(consumer.process(&event)).await.unwrap();
                (report, requests)
            })
        })
        .collect();
    let mut done = Vec::new();
    for task in tasks {
        done.push(task.await.unwrap());
    }
    done
}

fn outputs(report: &Report) -> Vec<(String, Result<Deduplicated<String>, String>)> {
    report
        .records
        .iter()
        .map(|r| {
            let result = match &r.result {
                Ok(Deduplicated::Processed(out)) => Ok(Deduplicated::Processed(out.clone())),
                Ok(Deduplicated::Duplicate { stored }) => Ok(Deduplicated::Duplicate {
                    stored: stored.clone(),
                }),
                Err(e) => Err(e.to_string()),
            };
            (r.message_id.clone(), result)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interleaved_invocations_of_one_consumer_keep_their_own_state() {
    let store = Arc::new(InMemoryBackend::default());
    let requests = RequestCounter::default();
    let cache = LocalCache::new(NonZeroUsize::new(100).unwrap(), Duration::from_secs(300));
    // Every record of the first two invocations waits here twice: once all of them hold their
    // leases, and once each has looked at the store, so that none completes before every one
    // has looked.
    let records_in_flight = 5;
    let barrier = Arc::new(Barrier::new(records_in_flight));
    let seen = Arc::new(Mutex::new(Vec::<Seen>::new()));
    let handler = {
        let (store, barrier, seen) = (store.clone(), barrier.clone(), seen.clone());
        message(move |m: SqsMessage, ctx: RecordContext| {
            let (store, barrier, seen) = (store.clone(), barrier.clone(), seen.clone());
            async move {
                barrier.wait().await;
                let record = store
                    .records()
                    .into_iter()
                    .find(|r| r.key.ends_with(&ctx.message_id))
                    .expect("the record's own lease in the store");
                assert_eq!(record.status, Status::InProgress);
                seen.lock().unwrap().push(Seen {
                    message_id: ctx.message_id.clone(),
                    request_id: ctx.request_id.clone(),
                    deadline_ms: ctx.deadline.map(|d| d.epoch_ms()),
                    trace_id: runtime::trace_id(),
                    lease_until_ms: record.lease_until_ms,
                    owner: record.owner,
                });
                barrier.wait().await;
                if m.body.as_deref() == Some("fail") {
                    return Err(std::io::Error::other("the handler's own failure"));
                }
                Ok(format!("{} in {}", ctx.message_id, ctx.request_id))
            }
        })
    };
    let consumer = Arc::new(
        Consumer::builder(Counted {
            inner: store.clone(),
            requests: requests.clone(),
        })
        .with_local_cache(cache.clone())
        .without_backoff()
        .idempotent(handler),
    );

    let now = now_ms();
    let first = [
        Invocation {
            request_id: "request-a",
            trace_id: "Root=1-aaaaaaaa-aaaaaaaaaaaaaaaaaaaaaaaa;Sampled=1",
            deadline_ms: now + 60_000,
            messages: vec![("a-1", "ok"), ("a-2", "fail")],
        },
        Invocation {
            request_id: "request-b",
            trace_id: "Root=1-bbbbbbbb-bbbbbbbbbbbbbbbbbbbbbbbb;Sampled=1",
            deadline_ms: now + 120_000,
            messages: vec![("b-1", "ok"), ("b-2", "ok"), ("b-3", "ok")],
        },
    ];
    let done = run_at_once(&consumer, &first).await;

    // Deadlines, request ids, trace ids and leases: each record saw its own invocation's.
    let mut seen = seen.lock().unwrap().clone();
    seen.sort_by(|x, y| x.message_id.cmp(&y.message_id));
    let owners: std::collections::HashSet<_> = seen.iter().map(|s| s.owner.clone()).collect();
    assert_eq!(
        owners.len(),
        records_in_flight,
        "one owner per attempt: {seen:?}"
    );
    for s in &mut seen {
        assert!(s.owner.take().is_some(), "{s:?}");
    }
    let expected = |invocation: &Invocation, id: &str| Seen {
        message_id: id.to_owned(),
        request_id: invocation.request_id.to_owned(),
        deadline_ms: Some(invocation.deadline_ms),
        trace_id: Some(invocation.trace_id.to_owned()),
        lease_until_ms: Some(invocation.deadline_ms),
        owner: None,
    };
    let [a, b] = &first;
    assert_eq!(
        seen,
        vec![
            expected(a, "a-1"),
            expected(a, "a-2"),
            expected(b, "b-1"),
            expected(b, "b-2"),
            expected(b, "b-3"),
        ]
    );

    // Outputs and metrics: each batch's own.
    let [(report_a, requests_a), (report_b, requests_b)] = &done[..] else {
        panic!("two reports")
    };
    assert_eq!(
        outputs(report_a),
        vec![
            (
                "a-1".to_owned(),
                Ok(Deduplicated::Processed("a-1 in request-a".to_owned()))
            ),
            (
                "a-2".to_owned(),
                Err("handler failed: the handler's own failure (failed attempt 1)".to_owned())
            ),
        ]
    );
    assert_eq!(
        BatchCounts::of(report_a),
        BatchCounts {
            processed: 1,
            failed: 1,
            ..BatchCounts::default()
        }
    );
    assert_eq!(
        BatchCounts::of(report_b),
        BatchCounts {
            processed: 3,
            ..BatchCounts::default()
        }
    );
    let line_a: serde_json::Value =
        serde_json::from_str(&BatchCounts::of(report_a).metrics("Test", "f").to_json(now)).unwrap();
    assert_eq!(
        (line_a["processed"].as_i64(), line_a["failed"].as_i64()),
        (Some(1), Some(1))
    );

    // Request counts: each invocation counted its own (an acquire and a completion or a
    // failure per record), the shared counter both.
    assert_eq!(
        (requests_a.count("put"), requests_a.count("update")),
        (2, 2),
        "{:?}",
        requests_a.snapshot()
    );
    assert_eq!(
        (requests_b.count("put"), requests_b.count("update")),
        (3, 3),
        "{:?}",
        requests_b.snapshot()
    );
    assert_eq!(requests.total(), requests_a.total() + requests_b.total());

    // The cache: two more invocations at once, each with duplicates of the other's keys, are
    // answered from it with the result each key's own invocation stored, and send nothing.
    let requests_before = requests.total();
    let hits_before = cache.hits();
    let again = [
        Invocation {
            request_id: "request-c",
            trace_id: "Root=1-cccccccc-cccccccccccccccccccccccc;Sampled=1",
            deadline_ms: now + 90_000,
            messages: vec![("b-2", "ok"), ("a-1", "ok")],
        },
        Invocation {
            request_id: "request-d",
            trace_id: "Root=1-dddddddd-dddddddddddddddddddddddd;Sampled=1",
            deadline_ms: now + 30_000,
            messages: vec![("b-1", "ok"), ("b-3", "ok")],
        },
    ];
    let done = run_at_once(&consumer, &again).await;
    let duplicate = |id: &str, stored: &str| {
        (
            id.to_owned(),
            Ok(Deduplicated::Duplicate {
                stored: Some(serde_json::to_string(stored).unwrap()),
            }),
        )
    };
    assert_eq!(
        outputs(&done[0].0),
        vec![
            duplicate("b-2", "b-2 in request-b"),
            duplicate("a-1", "a-1 in request-a")
        ]
    );
    assert_eq!(
        outputs(&done[1].0),
        vec![
            duplicate("b-1", "b-1 in request-b"),
            duplicate("b-3", "b-3 in request-b")
        ]
    );
    assert_eq!(cache.hits() - hits_before, 4);
    assert_eq!(
        requests.total(),
        requests_before,
        "every duplicate answered from the cache"
    );
    assert_eq!((done[0].1.total(), done[1].1.total()), (0, 0));
}

/// A request as sent: its `X-Amzn-Trace-Id` and its body.
type Request = (Option<String>, String);

/// Every request sent.
#[derive(Debug, Clone, Default)]
struct Sent(Arc<Mutex<Vec<Request>>>);

impl aws_sdk_sqs::config::Intercept for Sent {
    fn name(&self) -> &'static str {
        "Sent"
    }

    fn read_before_transmit(
        &self,
        context: &aws_sdk_sqs::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &aws_sdk_sqs::config::RuntimeComponents,
        _cfg: &mut aws_sdk_sqs::config::ConfigBag,
    ) -> Result<(), aws_sdk_sqs::error::BoxError> {
        let request = context.request();
        let trace = request.headers().get("x-amzn-trace-id").map(str::to_owned);
        let body = String::from_utf8_lossy(request.body().bytes().unwrap_or_default()).into_owned();
        self.0.lock().unwrap().push((trace, body));
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_sdk_request_carries_the_trace_id_and_counts_of_the_invocation_that_sent_it() {
    use aws_sdk_sqs::operation::send_message::SendMessageOutput;
    use aws_smithy_mocks::{RuleMode, mock, mock_client};

    let send = mock!(aws_sdk_sqs::Client::send_message)
        .sequence()
        .output(|| SendMessageOutput::builder().message_id("m").build())
        .repeatedly()
        .build();
    let sent = Sent::default();
    let clients = RequestCounter::default();
    let sqs = mock_client!(aws_sdk_sqs, RuleMode::MatchAny, [&send], |config| config
        .interceptor(runtime::TraceHeader)
        .interceptor(clients.clone())
        .interceptor(sent.clone()));
    // Both invocations send their first message, then both their second: interleaved.
    let barrier = Arc::new(Barrier::new(2));
    let invocation = |name: &'static str, sends: usize| {
        let (sqs, barrier) = (sqs.clone(), barrier.clone());
        let trace = format!("Root=1-{name}-0000;Sampled=1");
        tokio::spawn(async move {
            let requests = RequestCounter::default();
            let work = async {
                for n in 0..sends {
                    barrier.wait().await;
                    let body = format!("{name}-{n}");
                    sqs.send_message()
                        .queue_url("q")
                        .message_body(body)
                        .send()
                        .await
                        .unwrap();
                }
            };
            requests
                .scope(runtime::with_trace_id(Some(trace), work))
                .await;
            requests.count("SendMessage")
        })
    };
    let (a, b) = (invocation("a", 2), invocation("b", 2));
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    assert_eq!((a, b), (2, 2));
    assert_eq!(clients.count("SendMessage"), 4);
    let requests = sent.0.lock().unwrap().clone();
    assert_eq!(requests.len(), 4, "{requests:?}");
    for (trace, body) in &requests {
        let name = if body.contains("\"a-") { "a" } else { "b" };
        assert_eq!(
            trace.as_deref(),
            Some(format!("Root=1-{name}-0000;Sampled=1").as_str()),
            "{body}"
        );
    }
    // Outside any invocation, no trace header is added.
    sqs.send_message()
        .queue_url("q")
        .message_body("none")
        .send()
        .await
        .unwrap();
    let last = sent.0.lock().unwrap().last().cloned().unwrap();
    assert_eq!(last.0, None, "{last:?}");
}
