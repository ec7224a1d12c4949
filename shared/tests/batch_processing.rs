//! Batch processing without AWS: partial responses, FIFO groups, panics, bodies, deadlines,
//! and the invariants of the response over random batches.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{
    BatchError, BatchProcessor, RecordContext, RecordError, RecordHandlerExt, json, message,
};
use lambda_idempotency::state::IdempotencyRecord;
use lambda_idempotency::store::{Backend, InMemoryBackend, Put, StoreError, Update, Updated};
use lambda_idempotency::time::Deadline;
use lambda_runtime::{Context, LambdaEvent};
use proptest::prelude::*;

fn record(id: &str, body: &str, group: Option<&str>) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some(id.into());
    m.body = Some(body.into());
    m.attributes
        .insert("ApproximateReceiveCount".into(), "1".into());
    if let Some(g) = group {
        m.attributes.insert("MessageGroupId".into(), g.into());
        m.event_source_arn = Some("arn:aws:sqs:us-east-1:123456789012:q.fifo".into());
    } else {
        m.event_source_arn = Some("arn:aws:sqs:us-east-1:123456789012:q".into());
    }
    m
}

fn event(records: Vec<SqsMessage>) -> LambdaEvent<SqsEvent> {
    let mut e = SqsEvent::default();
    e.records = records;
    LambdaEvent::new(e, Context::default())
}

fn with_deadline(mut event: LambdaEvent<SqsEvent>, from_now: Duration) -> LambdaEvent<SqsEvent> {
    event.context.deadline = Deadline::from(SystemTime::now() + from_now).epoch_ms() as u64;
    event
}

fn failed_ids(response: &aws_lambda_events::sqs::SqsBatchResponse) -> Vec<String> {
    response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect()
}

/// A sample event of `tests/data/` (in the shape AWS sends, see its README).
fn sample_path(name: &str) -> String {
    format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn read_sample(name: &str) -> SqsEvent {
    let path = sample_path(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path} is not an SqsEvent: {e}"))
}

#[tokio::test]
async fn only_failed_records_are_reported() {
    let handler = message(|m, _| async move {
        match m.body.as_deref() {
            Some("fail") => Err("refused"),
            _ => Ok(()),
        }
    });
    let e = event(vec![
        record("a", "ok", None),
        record("b", "fail", None),
        record("c", "ok", None),
    ]);
    let report = BatchProcessor::new().process(&e, &handler).await.unwrap();
    assert_eq!(failed_ids(&report.response()), ["b"]);
}

#[tokio::test]
async fn a_panic_fails_only_its_record() {
    let handler = message(|m, _| async move {
        if m.body.as_deref() == Some("panic") {
            panic!("handler bug");
        }
        Ok::<_, std::io::Error>(())
    });
    let e = event(vec![
        record("a", "ok", None),
        record("b", "panic", None),
        record("c", "ok", None),
    ]);
    let report = BatchProcessor::new().process(&e, &handler).await.unwrap();
    assert_eq!(failed_ids(&report.response()), ["b"]);
    let err = report.records[1].result.as_ref().unwrap_err();
    assert!(
        matches!(err, RecordError::Panicked(m) if m == "handler bug"),
        "{err}"
    );
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Payment {
    #[allow(dead_code)]
    amount: i64,
}

#[tokio::test]
async fn a_malformed_body_fails_its_record_with_the_message_id_and_cause() {
    let handler = json(|_p: Payment, _| async { Ok::<_, std::io::Error>(()) });
    let e = event(vec![
        record("good", r#"{"amount":1}"#, None),
        record("not-json", "{oops", None),
        record("wrong-shape", r#"{"amount":"ten"}"#, None),
    ]);
    let report = BatchProcessor::new().process(&e, &handler).await.unwrap();
    assert_eq!(failed_ids(&report.response()), ["not-json", "wrong-shape"]);
    let text = report.records[2].result.as_ref().unwrap_err().to_string();
    assert!(
        text.contains("wrong-shape") && text.contains("Payment") && text.contains("invalid type"),
        "{text}"
    );
}

#[tokio::test]
async fn a_record_without_message_id_fails_the_invocation() {
    let mut nameless = record("x", "ok", None);
    nameless.message_id = None;
    let handler = message(|_, _| async { Ok::<_, std::io::Error>(()) });
    let e = event(vec![record("a", "ok", None), nameless]);
    let err = BatchProcessor::new()
        .process(&e, &handler)
        .await
        .unwrap_err();
    assert!(matches!(err, BatchError::MissingMessageId { index: 1 }));
    assert!(err.to_string().contains("no messageId"));
}

#[tokio::test]
async fn an_empty_batch_succeeds() {
    let handler = message(|_, _| async { Ok::<_, std::io::Error>(()) });
    let report = BatchProcessor::new()
        .process(&event(vec![]), &handler)
        .await
        .unwrap();
    assert!(report.response().batch_item_failures.is_empty());
}

#[tokio::test]
async fn fifo_failure_blocks_its_group_only() {
    let ran = Arc::new(Mutex::new(Vec::new()));
    let log = ran.clone();
    let handler = message(move |m, _| {
        let log = log.clone();
        async move {
            log.lock().unwrap().push(m.message_id.clone().unwrap());
            if m.body.as_deref() == Some("fail") {
                Err("refused")
            } else {
                Ok(())
            }
        }
    });
    let e = event(vec![
        record("a1", "ok", Some("A")),
        record("b1", "ok", Some("B")),
        record("a2", "fail", Some("A")),
        record("b2", "ok", Some("B")),
        record("a3", "ok", Some("A")),
        record("b3", "ok", Some("B")),
    ]);
    let report = BatchProcessor::new().process(&e, &handler).await.unwrap();
    assert_eq!(failed_ids(&report.response()), ["a2", "a3"]);
    assert!(
        !ran.lock().unwrap().contains(&"a3".to_string()),
        "a3 must not run after a2 failed"
    );
    assert!(matches!(
        report.records[4].result,
        Err(RecordError::GroupBlocked { ref group_id, ref failed }) if group_id == "A" && failed == "a2"
    ));

    // Strict order: everything after the first failure fails.
    ran.lock().unwrap().clear();
    let report = BatchProcessor::new()
        .strict_order(true)
        .process(&e, &handler)
        .await
        .unwrap();
    assert_eq!(failed_ids(&report.response()), ["a2", "b2", "a3", "b3"]);
    assert_eq!(*ran.lock().unwrap(), ["a1", "b1", "a2"]);
}

#[tokio::test]
async fn records_not_started_near_the_deadline_fail() {
    let handler = message(|_, _| async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok::<_, std::io::Error>(())
    });
    let records = (0..4)
        .map(|i| record(&format!("m{i}"), "ok", Some("G")))
        .collect();
    // 1.5 s left, start margin 1 s: the first record starts, finishes after 300 ms, the
    // second at 1.2 s left, ... then the margin is reached.
    let e = with_deadline(event(records), Duration::from_millis(1500));
    let processor = BatchProcessor::new()
        .start_margin(Duration::from_secs(1))
        .stop_margin(Duration::from_millis(250))
        .finish_margin(Duration::from_millis(100));
    let report = processor.process(&e, &handler).await.unwrap();
    let failed = failed_ids(&report.response());
    assert!(!failed.is_empty() && failed.len() < 4, "{failed:?}");
    assert!(
        report
            .records
            .iter()
            .filter(|r| r.result.is_ok())
            .all(|r| !failed.contains(&r.message_id))
    );
    assert!(matches!(
        report.records[3].result,
        Err(RecordError::GroupBlocked { .. } | RecordError::DeadlineNear { .. })
    ));
}

#[tokio::test]
async fn records_running_at_the_deadline_are_cancelled_and_reported() {
    let handler = message(|m, _| async move {
        if m.body.as_deref() == Some("slow") {
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        Ok::<_, std::io::Error>(())
    });
    let e = with_deadline(
        event(vec![
            record("fast", "ok", None),
            record("slow", "slow", None),
        ]),
        Duration::from_millis(2600),
    );
    let started = std::time::Instant::now();
    let report = BatchProcessor::new().process(&e, &handler).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(failed_ids(&report.response()), ["slow"]);
    assert!(matches!(
        report.records[1].result,
        Err(RecordError::DeadlineReached { .. })
    ));
}

#[tokio::test]
async fn sample_events_go_through_the_processor() {
    for (file, fifo) in [("sqs-event.json", false), ("sqs-fifo-event.json", true)] {
        let sample = read_sample(file);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let handler = message(move |m, ctx: RecordContext| {
            let log = log.clone();
            async move {
                log.lock().unwrap().push((
                    m.body.clone().unwrap(),
                    ctx.group_id.clone(),
                    ctx.receive_count,
                ));
                Ok::<_, std::io::Error>(())
            }
        });
        let report = BatchProcessor::new()
            .process(
                &LambdaEvent::new(sample.clone(), Context::default()),
                &handler,
            )
            .await
            .unwrap();
        assert!(report.response().batch_item_failures.is_empty(), "{file}");
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), sample.records.len());
        assert_eq!(seen[0].1.is_some(), fifo, "{file}: group id");
        assert!(seen[0].2 >= 1, "{file}: receive count");
    }
    // The FIFO sample deserializes into its typed body.
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct SamplePayment {
        payment_id: String,
        amount_cents: i64,
    }
    let got = Arc::new(Mutex::new(None));
    let out = got.clone();
    let handler = json(move |p: SamplePayment, _| {
        let out = out.clone();
        async move {
            *out.lock().unwrap() = Some((p.payment_id, p.amount_cents));
            Ok::<_, std::io::Error>(())
        }
    });
    let sample = read_sample("sqs-fifo-event.json");
    BatchProcessor::new()
        .process(&LambdaEvent::new(sample, Context::default()), &handler)
        .await
        .unwrap();
    assert_eq!(*got.lock().unwrap(), Some(("pay-001".to_string(), 10000)));
}

#[test]
fn sample_batch_response_matches_the_wire_format() {
    let path = sample_path("sqs-batch-response.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let expected: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut response = aws_lambda_events::sqs::SqsBatchResponse::default();
    for id in ["id2", "id4"] {
        let mut f = aws_lambda_events::sqs::BatchItemFailure::default();
        f.item_identifier = id.into();
        response.batch_item_failures.push(f);
    }
    assert_eq!(serde_json::to_value(&response).unwrap(), expected);
}

/// A backend whose every request fails, as when DynamoDB is unreachable.
#[derive(Debug)]
struct Unreachable;

fn unreachable() -> StoreError {
    StoreError::Request {
        operation: "UpdateItem",
        message: "connection refused".into(),
        source: "connection refused".into(),
    }
}

impl Backend for Unreachable {
    async fn put(&self, _: &IdempotencyRecord, _: i64) -> Result<Put, StoreError> {
        Err(unreachable())
    }
    async fn get(&self, _: &str, _: i64) -> Result<Option<IdempotencyRecord>, StoreError> {
        Err(unreachable())
    }
    async fn update(&self, _: &str, _: &Update, _: i64) -> Result<Updated, StoreError> {
        Err(unreachable())
    }
    async fn delete(&self, _: &str) -> Result<(), StoreError> {
        Err(unreachable())
    }
}

#[tokio::test]
async fn an_unreachable_store_fails_records_and_never_runs_them() {
    let ran = Arc::new(Mutex::new(0));
    let count = ran.clone();
    let handler = message(move |_, _| {
        let count = count.clone();
        async move {
            *count.lock().unwrap() += 1;
            Ok::<_, std::io::Error>(())
        }
    })
    .idempotent(Idempotency::new(Unreachable));
    let e = event(vec![record("a", "x", None), record("b", "y", None)]);
    let report = BatchProcessor::new().process(&e, &handler).await.unwrap();
    assert_eq!(failed_ids(&report.response()), ["a", "b"]);
    assert_eq!(*ran.lock().unwrap(), 0);
    assert!(matches!(
        report.records[0].result,
        Err(RecordError::Store(_))
    ));
}

#[tokio::test]
async fn idempotent_handler_skips_duplicates_and_rejects_reused_keys() {
    let ran = Arc::new(Mutex::new(Vec::new()));
    let log = ran.clone();
    let handler = message(move |m, _| {
        let log = log.clone();
        async move {
            log.lock().unwrap().push(m.body.clone().unwrap());
            Ok::<_, std::io::Error>(m.body.unwrap().len())
        }
    })
    .idempotent(Idempotency::new(InMemoryBackend::default()))
    .with_keys(lambda_idempotency::key::KeyConfig::json_pointer("/id"));
    let processor = BatchProcessor::new().concurrency(1);
    let first = event(vec![
        record("m1", r#"{"id":"p1","n":1}"#, None),
        record("m2", r#"{"id":"p1","n":1}"#, None),
    ]);
    let report = processor.process(&first, &handler).await.unwrap();
    assert!(report.response().batch_item_failures.is_empty());
    assert_eq!(
        ran.lock().unwrap().len(),
        1,
        "second send of the same business key is skipped"
    );
    assert!(matches!(report.records[1].result, Ok(ref d) if d.is_duplicate()));

    let reuse = event(vec![record("m3", r#"{"id":"p1","n":2}"#, None)]);
    let report = processor.process(&reuse, &handler).await.unwrap();
    assert_eq!(failed_ids(&report.response()), ["m3"]);
    assert!(matches!(
        report.records[0].result,
        Err(RecordError::PayloadMismatch { .. })
    ));
    let no_key = event(vec![record("m4", r#"{"n":2}"#, None)]);
    let report = processor.process(&no_key, &handler).await.unwrap();
    let text = report.records[0].result.as_ref().unwrap_err().to_string();
    assert!(text.contains("m4") && text.contains("/id"), "{text}");
}

#[tokio::test]
async fn standard_records_run_concurrently_up_to_the_limit() {
    let state = Arc::new(Mutex::new((0usize, 0usize))); // (running, peak)
    let s = state.clone();
    let handler = message(move |_, _| {
        let s = s.clone();
        async move {
            {
                let mut g = s.lock().unwrap();
                g.0 += 1;
                g.1 = g.1.max(g.0);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            s.lock().unwrap().0 -= 1;
            Ok::<_, std::io::Error>(())
        }
    });
    let records = (0..10)
        .map(|i| record(&format!("m{i}"), "ok", None))
        .collect();
    BatchProcessor::new()
        .concurrency(3)
        .process(&event(records), &handler)
        .await
        .unwrap();
    assert_eq!(state.lock().unwrap().1, 3);
}

/// What each record does in a generated batch.
#[derive(Debug, Clone, Copy)]
enum Fate {
    Succeed,
    Fail,
    Panic,
    BadBody,
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![6 => Just(Fate::Succeed), 2 => Just(Fate::Fail), 1 => Just(Fate::Panic), 1 => Just(Fate::BadBody)]
}

fn run_batch(
    fifo: bool,
    strict: bool,
    spec: &[(u8, Fate)],
) -> (Vec<String>, Vec<String>, HashMap<String, Fate>) {
    let records: Vec<SqsMessage> = spec
        .iter()
        .enumerate()
        .map(|(i, (group, fate))| {
            let body = match fate {
                Fate::Succeed => r#"{"amount":1}"#,
                Fate::Fail => r#"{"amount":-1}"#,
                Fate::Panic => r#"{"amount":0}"#,
                Fate::BadBody => "{",
            };
            let group = format!("g{group}");
            record(&format!("id-{i}"), body, fifo.then_some(group.as_str()))
        })
        .collect();
    let fates = records
        .iter()
        .zip(spec)
        .map(|(r, (_, f))| (r.message_id.clone().unwrap(), *f))
        .collect();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let log = ran.clone();
    #[derive(serde::Deserialize)]
    struct Body {
        amount: i64,
    }
    let handler = json(move |b: Body, ctx: RecordContext| {
        let log = log.clone();
        async move {
            log.lock().unwrap().push(ctx.message_id.clone());
            match b.amount {
                0 => panic!("generated panic"),
                a if a < 0 => Err("generated failure"),
                _ => Ok(()),
            }
        }
    });
    let response = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(
            BatchProcessor::new()
                .strict_order(strict)
                .concurrency(4)
                .process(&event(records), &handler),
        )
        .unwrap()
        .response();
    let ran = ran.lock().unwrap().clone();
    (failed_ids(&response), ran, fates)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn standard_batches_report_exactly_the_failures(spec in proptest::collection::vec((0u8..1, fate()), 0..30)) {
        let (failed, _, fates) = run_batch(false, false, &spec);
        let ids: HashSet<_> = fates.keys().cloned().collect();
        let expected: HashSet<String> = fates.iter().filter(|(_, f)| !matches!(f, Fate::Succeed)).map(|(id, _)| id.clone()).collect();
        prop_assert!(failed.iter().all(|id| !id.is_empty() && ids.contains(id)));
        prop_assert_eq!(failed.iter().cloned().collect::<HashSet<_>>(), expected);
        prop_assert_eq!(failed.len(), failed.iter().collect::<HashSet<_>>().len(), "no id reported twice");
    }

    #[test]
    fn fifo_batches_stop_each_group_at_its_first_failure(
        spec in proptest::collection::vec((0u8..4, fate()), 0..30),
        strict in any::<bool>(),
    ) {
        let (failed, ran, fates) = run_batch(true, strict, &spec);
        let failed: HashSet<_> = failed.into_iter().collect();
        let mut blocked_groups: HashSet<u8> = HashSet::new();
        let mut stopped = false;
        for (i, (group, fate)) in spec.iter().enumerate() {
            let id = format!("id-{i}");
            prop_assert!(fates.contains_key(&id));
            let blocked = if strict { stopped } else { blocked_groups.contains(group) };
            if blocked {
                prop_assert!(failed.contains(&id), "{} after a failure must be reported", id);
                prop_assert!(!ran.contains(&id), "{} after a failure must not run", id);
            } else if matches!(fate, Fate::Succeed) {
                prop_assert!(!failed.contains(&id), "{} succeeded and must not be reported", id);
            } else {
                prop_assert!(failed.contains(&id), "{} failed and must be reported", id);
                blocked_groups.insert(*group);
                stopped = true;
            }
        }
        // Within each group, records ran in batch order.
        for g in 0u8..4 {
            let order: Vec<usize> = ran.iter().map(|id| id[3..].parse::<usize>().unwrap()).filter(|&i| spec[i].0 == g).collect();
            prop_assert!(order.windows(2).all(|w| w[0] < w[1]), "group {} ran out of order: {:?}", g, order);
        }
    }
}

#[tokio::test]
async fn a_deadline_that_is_no_epoch_time_is_no_deadline() {
    // `cargo lambda watch` gives every invocation the deadline 600000: ten minutes after 1970.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let seen = seen.clone();
        message(move |m, ctx: RecordContext| {
            let seen = seen.clone();
            async move {
                seen.lock()
                    .unwrap()
                    .push((m.message_id.clone(), ctx.deadline));
                Ok::<_, std::convert::Infallible>(())
            }
        })
    };
    let mut e = event(vec![record("a", "ok", None), record("b", "ok", None)]);
    e.context.deadline = 600_000;
    let report = BatchProcessor::new().process(&e, &handler).await.unwrap();
    assert!(failed_ids(&report.response()).is_empty());
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2, "both records ran");
    assert!(
        seen.iter().all(|(_, deadline)| deadline.is_none()),
        "{seen:?}"
    );
}
