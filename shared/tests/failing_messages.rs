//! A failing message never costs the messages behind it their place: attempts counted by the
//! store, dead-lettering inside the group loop, the dead-letter hook, deadline-safe completion,
//! one report per message id, and the invariants of the response over random batches. No AWS:
//! the dead-letter queue is a mocked SQS client, the store the in-memory backend.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::batch::{
    BatchProcessor, DeadLettered, Deduplicated, PermanentError, RecordContext, RecordError,
    RecordHandlerExt, json,
};
use lambda_idempotency::dead_letter::DeadLetter;
use lambda_idempotency::key::KeyConfig;
use lambda_idempotency::state::{IdempotencyRecord, Status};
use lambda_idempotency::store::{Backend, InMemoryBackend, Put, StoreError, Update, Updated};
use lambda_idempotency::time::Deadline;
use lambda_idempotency::{Acquired, Idempotency};
use lambda_runtime::{Context, LambdaEvent};
use proptest::prelude::*;

const FIFO_ARN: &str = "arn:aws:sqs:us-east-1:123456789012:q.fifo";
const STANDARD_ARN: &str = "arn:aws:sqs:us-east-1:123456789012:q";

fn record(id: &str, body: &str, group: Option<&str>, receives: u32) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some(id.into());
    m.receipt_handle = Some(format!("rh-{id}"));
    m.body = Some(body.into());
    m.attributes
        .insert("ApproximateReceiveCount".into(), receives.to_string());
    match group {
        Some(g) => {
            m.attributes.insert("MessageGroupId".into(), g.into());
            m.event_source_arn = Some(FIFO_ARN.into());
        }
        None => m.event_source_arn = Some(STANDARD_ARN.into()),
    }
    m
}

fn event(records: Vec<SqsMessage>) -> LambdaEvent<SqsEvent> {
    let mut e = SqsEvent::default();
    e.records = records;
    LambdaEvent::new(e, Context::default())
}

fn reported(report_response: aws_lambda_events::sqs::SqsBatchResponse) -> Vec<String> {
    report_response
        .batch_item_failures
        .into_iter()
        .map(|f| f.item_identifier)
        .collect()
}

use common::{Sent, dead_letter_queue};

#[derive(serde::Deserialize)]
struct Payment {
    id: String,
    amount: i64,
}

/// Contexts the handler ran with, by payment id.
type Runs = Arc<Mutex<Vec<(String, RecordContext)>>>;

/// amount > 0: charged; -1: transient failure; -2: permanent failure; 0: panic.
async fn charge(
    runs: Runs,
    p: Payment,
    ctx: RecordContext,
) -> Result<i64, Box<dyn std::error::Error + Send + Sync>> {
    runs.lock().unwrap().push((p.id.clone(), ctx));
    match p.amount {
        0 => panic!("generated panic"),
        -1 => Err("declined, try later".into()),
        a if a < 0 => Err(PermanentError::new("invalid payment").into()),
        a => Ok(a),
    }
}

fn body(id: &str, amount: i64) -> String {
    format!(r#"{{"id":"{id}","amount":{amount}}}"#)
}

#[tokio::test]
async fn followers_of_a_failing_message_keep_their_attempts_and_run_once_it_is_dead_lettered() {
    let store = Idempotency::new(Arc::new(InMemoryBackend::default()));
    let runs = Runs::default();
    let hooked: Arc<Mutex<Vec<DeadLettered>>> = Arc::default();
    let (r, h) = (runs.clone(), hooked.clone());
    let handler = json(move |p: Payment, ctx| charge(r.clone(), p, ctx))
        .on_dead_letter(move |dead| {
            h.lock().unwrap().push(dead);
            async {}
        })
        .idempotent(store.clone())
        .with_keys(KeyConfig::json_pointer("/id"));
    let sent = Sent::default();
    let processor = BatchProcessor::new()
        .with_dead_letter(dead_letter_queue(&sent))
        .max_attempts(3);
    // SQS hands out the whole group on every receive: the followers' receive counts grow with
    // the poison message's.
    let batch = |receives: u32| {
        event(vec![
            record("m-poison", &body("poison", -1), Some("acct"), receives),
            record("m-f1", &body("f1", 10), Some("acct"), receives),
            record("m-f2", &body("f2", 20), Some("acct"), receives),
        ])
    };
    for receives in 1..=2 {
        let report = processor.process(&batch(receives), &handler).await.unwrap();
        assert_eq!(reported(report.response()), ["m-poison", "m-f1", "m-f2"]);
        assert!(matches!(
            report.records[1].result,
            Err(RecordError::GroupBlocked { .. })
        ));
    }
    assert!(
        store.get("f1").await.unwrap().is_none(),
        "a blocked follower never touched its record"
    );
    let report = processor.process(&batch(3), &handler).await.unwrap();
    assert!(
        reported(report.response()).is_empty(),
        "the poison message is in the dead-letter queue, the followers ran: {:?}",
        report.records
    );
    assert_eq!(report.dead_lettered().count(), 1);
    assert_eq!(sent.lock().unwrap().len(), 1);
    let runs = runs.lock().unwrap().clone();
    let order: Vec<_> = runs.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(order, ["poison", "poison", "poison", "f1", "f2"]);
    let attempts: Vec<_> = runs
        .iter()
        .map(|(_, c)| (c.attempt, c.receive_count))
        .collect();
    assert_eq!(
        attempts,
        [(1, 1), (2, 2), (3, 3), (1, 3), (1, 3)],
        "(attempt, receive count): the followers' third receive is their first attempt"
    );
    let hooked = hooked.lock().unwrap().clone();
    assert_eq!(hooked.len(), 1);
    assert_eq!(hooked[0].ctx.message_id, "m-poison");
    assert_eq!(hooked[0].attempts, Some(3));
    assert!(!hooked[0].permanent);
    let poison = store.get("poison").await.unwrap().unwrap();
    assert_eq!(
        (poison.status, poison.attempts),
        (Status::Failed, 0),
        "a redriven message starts a new budget"
    );
    assert_eq!(
        store.get("f1").await.unwrap().unwrap().status,
        Status::Completed
    );
}

#[tokio::test]
async fn a_permanent_error_at_the_head_is_dead_lettered_at_once_and_the_group_runs_on() {
    let runs = Runs::default();
    let r = runs.clone();
    let handler = json(move |p: Payment, ctx| charge(r.clone(), p, ctx))
        .idempotent(Idempotency::new(InMemoryBackend::default()))
        .with_keys(KeyConfig::json_pointer("/id"));
    let sent = Sent::default();
    let processor = BatchProcessor::new()
        .with_dead_letter(dead_letter_queue(&sent))
        .max_attempts(5);
    let report = processor
        .process(
            &event(vec![
                record("m1", &body("bad", -2), Some("g"), 1),
                record("m2", &body("bad2", -2), Some("g"), 1),
                record("m3", &body("ok", 5), Some("g"), 1),
            ]),
            &handler,
        )
        .await
        .unwrap();
    assert!(reported(report.response()).is_empty());
    assert_eq!(report.dead_lettered().count(), 2);
    assert_eq!(runs.lock().unwrap().len(), 3, "every record ran once");
}

#[tokio::test]
async fn a_failed_dead_letter_send_blocks_the_group() {
    let runs = Runs::default();
    let r = runs.clone();
    let handler = json(move |p: Payment, ctx| charge(r.clone(), p, ctx));
    let sent = Sent::default();
    let processor = BatchProcessor::new().with_dead_letter(dead_letter_queue(&sent));
    let report = processor
        .process(
            &event(vec![
                record("m1", &body("undeliverable", -2), Some("g"), 1),
                record("m2", &body("ok", 5), Some("g"), 1),
            ]),
            &handler,
        )
        .await
        .unwrap();
    assert_eq!(reported(report.response()), ["m1", "m2"]);
    assert_eq!(report.dead_lettered().count(), 0);
    assert!(matches!(
        report.records[1].result,
        Err(RecordError::GroupBlocked { .. })
    ));
    assert_eq!(runs.lock().unwrap().len(), 1, "the follower did not run");
}

#[tokio::test]
async fn without_a_store_the_budget_goes_by_the_receive_count() {
    let runs = Runs::default();
    let r = runs.clone();
    let handler = json(move |p: Payment, ctx| charge(r.clone(), p, ctx));
    let sent = Sent::default();
    let processor = BatchProcessor::new()
        .with_dead_letter(dead_letter_queue(&sent))
        .max_attempts(4);
    let e = event(vec![
        record("m1", &body("a", -1), None, 3),
        record("m2", &body("b", -1), None, 4),
    ]);
    let report = processor.process(&e, &handler).await.unwrap();
    assert_eq!(reported(report.response()), ["m1"]);
    assert_eq!(report.dead_lettered().next().unwrap().message_id, "m2");
}

#[tokio::test]
async fn a_message_id_repeated_in_one_event_runs_and_is_reported_once() {
    let runs = Runs::default();
    let r = runs.clone();
    let handler = json(move |p: Payment, ctx| charge(r.clone(), p, ctx));
    let e = event(vec![
        record("m1", &body("a", -1), None, 1),
        record("m1", &body("a", -1), None, 1),
        record("m2", &body("b", 1), None, 1),
    ]);
    let report = BatchProcessor::new().process(&e, &handler).await.unwrap();
    assert_eq!(reported(report.response()), ["m1"]);
    assert_eq!(runs.lock().unwrap().len(), 2);
    assert!(matches!(
        report.records[1].result,
        Err(RecordError::Repeated { first_index: 0 })
    ));
}

#[tokio::test]
async fn records_with_the_same_key_run_one_after_the_other() {
    let handler = json(|p: Payment, _ctx: RecordContext| async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok::<_, std::io::Error>(p.amount)
    })
    .idempotent(Idempotency::new(InMemoryBackend::default()))
    .with_keys(KeyConfig::json_pointer("/id"));
    // Two messages of one payment (a producer resend): without the key's lock, the second would
    // find the first in progress and fail.
    let e = event(vec![
        record("m1", &body("same", 7), None, 1),
        record("m2", &body("same", 7), None, 1),
    ]);
    let report = BatchProcessor::new().process(&e, &handler).await.unwrap();
    assert!(
        reported(report.response()).is_empty(),
        "{:?}",
        report.records
    );
    let duplicates = report.successes().filter(|(_, d)| d.is_duplicate()).count();
    assert_eq!(duplicates, 1);
}

/// A backend whose updates (completion, failure) take `delay`.
#[derive(Debug)]
struct SlowUpdates {
    inner: InMemoryBackend,
    delay: Duration,
}

impl Backend for SlowUpdates {
    async fn put(&self, record: &IdempotencyRecord, now_ms: i64) -> Result<Put, StoreError> {
        self.inner.put(record, now_ms).await
    }
    async fn get(&self, key: &str, now_ms: i64) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.inner.get(key, now_ms).await
    }
    async fn update(&self, key: &str, update: &Update, now_ms: i64) -> Result<Updated, StoreError> {
        tokio::time::sleep(self.delay).await;
        self.inner.update(key, update, now_ms).await
    }
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.inner.delete(key).await
    }
}

#[tokio::test]
async fn the_stop_margin_cancels_the_handler_never_the_completion_that_follows_it() {
    let store = Idempotency::new(Arc::new(SlowUpdates {
        inner: InMemoryBackend::default(),
        delay: Duration::from_millis(800),
    }));
    let handler = json(|_p: Payment, _ctx: RecordContext| async {
        // Done 300 ms before the stop margin; its completion write takes 800 ms and crosses it.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        Ok::<_, std::io::Error>(1)
    })
    .idempotent(store.clone())
    .with_keys(KeyConfig::json_pointer("/id"));
    let mut e = event(vec![record("m1", &body("p", 1), None, 1)]);
    e.context.deadline =
        Deadline::from(SystemTime::now() + Duration::from_secs(3)).epoch_ms() as u64;
    let processor = BatchProcessor::new()
        .start_margin(Duration::from_millis(2000))
        .stop_margin(Duration::from_millis(1500))
        .finish_margin(Duration::from_millis(200));
    let report = processor.process(&e, &handler).await.unwrap();
    assert!(matches!(
        report.records[0].result,
        Ok(Deduplicated::Processed(1))
    ));
    let record = store.get("p").await.unwrap().unwrap();
    assert_eq!(
        record.status,
        Status::Completed,
        "the effect happened and is recorded"
    );
}

#[tokio::test]
async fn a_handler_past_the_stop_margin_is_cancelled_and_its_failure_recorded() {
    let store = Idempotency::new(Arc::new(InMemoryBackend::default()));
    let handler = json(|_p: Payment, _ctx: RecordContext| async {
        tokio::time::sleep(Duration::from_secs(30)).await;
        Ok::<_, std::io::Error>(1)
    })
    .idempotent(store.clone())
    .with_keys(KeyConfig::json_pointer("/id"));
    let mut e = event(vec![record("m1", &body("p", 1), None, 1)]);
    e.context.deadline =
        Deadline::from(SystemTime::now() + Duration::from_millis(2500)).epoch_ms() as u64;
    let report = BatchProcessor::new().process(&e, &handler).await.unwrap();
    let Err(error) = &report.records[0].result else {
        panic!("cancelled")
    };
    assert!(matches!(error.cause(), RecordError::DeadlineReached { .. }));
    assert_eq!(error.attempts(), Some(1));
    let record = store.get("p").await.unwrap().unwrap();
    assert_eq!((record.status, record.attempts), (Status::Failed, 1));
}

/// An SQS client whose requests are never answered: a listener that accepts no connection.
fn unanswered_sqs() -> (std::net::TcpListener, aws_sdk_sqs::Client) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version_latest()
        .endpoint_url(url)
        .region(aws_sdk_sqs::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "test", "test", None, None, "tests",
        ))
        .build();
    (listener, aws_sdk_sqs::Client::from_conf(config))
}

#[tokio::test]
async fn dead_letter_sends_and_visibility_changes_fit_before_the_deadline() {
    let (_listener, sqs) = unanswered_sqs();
    let handler = json(|p: Payment, _ctx: RecordContext| async move {
        match p.amount {
            -2 => Err(Box::new(PermanentError::new("invalid"))
                as Box<dyn std::error::Error + Send + Sync>),
            _ => Err::<(), _>("declined".into()),
        }
    });
    let processor = BatchProcessor::new()
        .with_dead_letter(DeadLetter::new(sqs.clone(), "http://unanswered/q/dlq"))
        .with_backoff(lambda_idempotency::backoff::VisibilityBackoff::new(sqs))
        .call_timeout(Duration::from_secs(1));
    let mut e = event(vec![
        record("m1", &body("a", -2), None, 1),
        record("m2", &body("b", -1), None, 1),
    ]);
    let deadline = SystemTime::now() + Duration::from_millis(3500);
    e.context.deadline = Deadline::from(deadline).epoch_ms() as u64;
    let started = Instant::now();
    let report = processor.process(&e, &handler).await.unwrap();
    assert!(
        SystemTime::now() < deadline,
        "answered {:?} after the start, past the 3.5 s deadline",
        started.elapsed()
    );
    assert_eq!(
        reported(report.response()),
        ["m1", "m2"],
        "what did not fit is reported failed"
    );
}

#[path = "failing_messages/completion.rs"]
mod completion;
#[path = "failing_messages/generated.rs"]
mod generated;

/// A record whose handler never started (the batch's stop margin had passed when its turn came)
/// spends no attempt of its budget: the key is not even taken.
#[tokio::test]
async fn a_record_cut_by_the_deadline_before_its_handler_starts_spends_no_attempt() {
    let store = Idempotency::new(Arc::new(InMemoryBackend::default()));
    let ran = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counted = ran.clone();
    let handler = json(move |_p: Payment, _ctx: RecordContext| {
        let counted = counted.clone();
        async move {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok::<_, std::io::Error>(1)
        }
    });
    let lease_mode = handler
        .idempotent(store.clone())
        .with_keys(KeyConfig::json_pointer("/id"));
    // 2.5 s left: past the start margin (0.5 s), but the handler's own work would be cancelled
    // 2.6 s before the deadline, which has passed already.
    let processor = BatchProcessor::new()
        .start_margin(Duration::from_millis(500))
        .stop_margin(Duration::from_millis(2_600))
        .finish_margin(Duration::from_millis(100));
    for round in 0..3 {
        let mut e = event(vec![record("m1", &body("p", 1), None, round + 1)]);
        e.context.deadline =
            Deadline::from(SystemTime::now() + Duration::from_millis(2500)).epoch_ms() as u64;
        let report = processor.process(&e, &lease_mode).await.unwrap();
        let Err(error) = &report.records[0].result else {
            panic!("not run")
        };
        assert!(
            matches!(error.cause(), RecordError::DeadlineNear { .. }),
            "{error:?}"
        );
        assert_eq!(error.attempts(), None);
        assert!(!error.is_attempt());
    }
    assert_eq!(ran.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert_eq!(store.get("p").await.unwrap(), None, "no attempt recorded");
    // With time, the record runs as attempt 1.
    let e = event(vec![record("m1", &body("p", 1), None, 4)]);
    let report = BatchProcessor::new()
        .process(&e, &lease_mode)
        .await
        .unwrap();
    assert!(report.records[0].result.is_ok());
    let record = store.get("p").await.unwrap().unwrap();
    assert_eq!((record.status, record.attempts), (Status::Completed, 0));
}
