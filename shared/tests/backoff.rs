//! Visibility backoff: timeouts per failed record and one ChangeMessageVisibilityBatch call per
//! batch, against a mocked SQS client.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use aws_sdk_sqs::operation::change_message_visibility_batch::ChangeMessageVisibilityBatchOutput;
use aws_sdk_sqs::operation::get_queue_url::GetQueueUrlOutput;
use aws_sdk_sqs::types::ChangeMessageVisibilityBatchResultEntry;
use aws_smithy_mocks::{RuleMode, mock, mock_client};
use lambda_idempotency::backoff::VisibilityBackoff;
use lambda_idempotency::batch::{
    BatchProcessor, HandlerOutput, RecordContext, RecordError, RecordHandler, message,
};
use lambda_idempotency::time::Deadline;
use lambda_runtime::{Context, LambdaEvent};

fn record(id: &str, body: &str, receives: u32, group: Option<&str>) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some(id.into());
    m.receipt_handle = Some(format!("rh-{id}"));
    m.body = Some(body.into());
    m.attributes
        .insert("ApproximateReceiveCount".into(), receives.to_string());
    let queue = if let Some(g) = group {
        m.attributes.insert("MessageGroupId".into(), g.into());
        "q.fifo"
    } else {
        "q"
    };
    m.event_source_arn = Some(format!("arn:aws:sqs:us-east-1:123456789012:{queue}"));
    m
}

type Calls = Arc<Mutex<Vec<Vec<(String, String, i32)>>>>;

fn mocked_sqs(calls: &Calls) -> aws_sdk_sqs::Client {
    mocked_sqs_answering(calls, |_| None)
}

/// What SQS answers an entry asking for a visibility of so many seconds: `None` for a change
/// made, or its failure's code and whether the sender is at fault.
type Answer = fn(i32) -> Option<(&'static str, bool)>;

/// Every entry fails through no fault of the sender.
fn internal_error(_: i32) -> Option<(&'static str, bool)> {
    Some(("InternalError", false))
}

/// SQS's 12-hour rule for a message received two hours ago: a visibility ending more than 12
/// hours after the receive is refused.
fn received_two_hours_ago(secs: i32) -> Option<(&'static str, bool)> {
    (secs + 2 * 3_600 > 12 * 3_600).then_some(("InvalidParameterValue", true))
}

/// An SQS client that logs every visibility change and answers each entry as `answer` says.
fn mocked_sqs_answering(calls: &Calls, answer: Answer) -> aws_sdk_sqs::Client {
    let log = calls.clone();
    let url = mock!(aws_sdk_sqs::Client::get_queue_url)
        .match_requests(|r| r.queue_name() == Some("q") || r.queue_name() == Some("q.fifo"))
        .then_output(|| {
            GetQueueUrlOutput::builder()
                .queue_url("https://sqs.local/123456789012/q")
                .build()
        });
    let change = mock!(aws_sdk_sqs::Client::change_message_visibility_batch).then_compute_output(
        move |input| {
            let entries: Vec<_> = input
                .entries()
                .iter()
                .map(|e| {
                    (
                        e.id().to_owned(),
                        e.receipt_handle().to_owned(),
                        e.visibility_timeout().unwrap(),
                    )
                })
                .collect();
            log.lock().unwrap().push(entries.clone());
            let (mut ok, mut failed) = (vec![], vec![]);
            for (id, _, secs) in &entries {
                match answer(*secs) {
                    None => ok.push(
                        ChangeMessageVisibilityBatchResultEntry::builder()
                            .id(id)
                            .build()
                            .unwrap(),
                    ),
                    Some((code, sender_fault)) => failed.push(
                        aws_sdk_sqs::types::BatchResultErrorEntry::builder()
                            .id(id)
                            .code(code)
                            .sender_fault(sender_fault)
                            .build()
                            .unwrap(),
                    ),
                }
            }
            ChangeMessageVisibilityBatchOutput::builder()
                .set_successful(Some(ok))
                .set_failed(Some(failed))
                .build()
                .unwrap()
        },
    );
    mock_client!(aws_sdk_sqs, RuleMode::MatchAny, [&url, &change])
}

fn event(records: Vec<SqsMessage>) -> LambdaEvent<SqsEvent> {
    let mut e = SqsEvent::default();
    e.records = records;
    LambdaEvent::new(e, Context::default())
}

#[tokio::test]
async fn failed_records_back_off_exponentially_in_one_call() {
    let calls = Calls::default();
    let processor = BatchProcessor::new().with_backoff(
        VisibilityBackoff::new(mocked_sqs(&calls))
            .base(Duration::from_secs(4))
            .max(Duration::from_secs(100)),
    );
    let handler = message(|m, _| async move {
        match m.body.as_deref() {
            Some("fail") => Err("refused"),
            _ => Ok(()),
        }
    });
    let e = event(vec![
        record("ok", "ok", 1, None),
        record("first", "fail", 1, None),
        record("third", "fail", 3, None),
        record("tenth", "fail", 10, None),
    ]);
    let report = processor.process(&e, &handler).await.unwrap();
    assert_eq!(report.failures().count(), 3);
    let calls = calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 1, "one call per batch");
    let timeouts: Vec<(String, i32)> = calls[0].iter().map(|(_, rh, t)| (rh.clone(), *t)).collect();
    assert_eq!(timeouts.len(), 3, "only the failed records: {timeouts:?}");
    let get = |rh: &str| timeouts.iter().find(|(r, _)| r == rh).unwrap().1;
    assert!(
        (4..=5).contains(&get("rh-first")),
        "4 s plus up to a quarter: {timeouts:?}"
    );
    assert!(
        (16..=20).contains(&get("rh-third")),
        "4 * 2^2: {timeouts:?}"
    );
    assert!(
        (100..=125).contains(&get("rh-tenth")),
        "capped at max: {timeouts:?}"
    );
}

/// Fails as the idempotent wrapper would: `fail` with the store's attempt count `attempts`,
/// `busy` as held elsewhere until `lease`.
struct Handler {
    lease: i64,
    attempts: u32,
}

impl HandlerOutput for Handler {
    type Output = ();
}

impl RecordHandler for Handler {
    async fn handle(&self, m: &SqsMessage, _: &RecordContext) -> Result<(), RecordError> {
        match m.body.as_deref() {
            Some("fail") => Err(RecordError::Attempt {
                attempts: self.attempts,
                error: Box::new(RecordError::handler("refused")),
            }),
            Some("busy") => Err(RecordError::InProgress {
                lease_until_ms: self.lease,
            }),
            _ => Ok(()),
        }
    }
    fn counts_attempts(&self) -> bool {
        true
    }
}

fn timeouts_by_handle(calls: &Calls) -> Vec<(String, i32)> {
    calls
        .lock()
        .unwrap()
        .iter()
        .flatten()
        .map(|(_, rh, t)| (rh.clone(), *t))
        .collect()
}

#[tokio::test]
async fn blocked_fifo_records_come_back_with_the_failed_one_and_in_progress_at_lease_end() {
    let calls = Calls::default();
    let processor = BatchProcessor::new().with_backoff(
        VisibilityBackoff::new(mocked_sqs(&calls))
            .base(Duration::from_secs(8))
            .max(Duration::from_secs(300)),
    );
    let records = vec![
        record("a1", "fail", 2, Some("A")),
        // Blocked behind a1 on many receives: its receive count must not lengthen anything.
        record("a2", "ok", 9, Some("A")),
        record("b1", "busy", 1, Some("B")),
        record("c1", "busy2h", 1, Some("C")),
    ];
    let now = Deadline::from(SystemTime::now()).epoch_ms();
    let handler = Handler {
        lease: now + 30_000,
        attempts: 3,
    };
    processor.process(&event(records), &handler).await.unwrap();
    let timeouts = timeouts_by_handle(&calls);
    let get = |rh: &str| timeouts.iter().find(|(r, _)| r == rh).unwrap().1;
    assert!(
        (32..=40).contains(&get("rh-a1")),
        "8 * 2^(3 - 1), by the store's attempts, not the receive count 2: {timeouts:?}"
    );
    assert_eq!(
        get("rh-a2"),
        get("rh-a1"),
        "a blocked record comes back with the failure that blocked it"
    );
    assert!(
        (29..=30).contains(&get("rh-b1")),
        "in progress: at the lease end: {timeouts:?}"
    );
    assert!(
        timeouts.iter().all(|(r, _)| r != "rh-c1"),
        "an ok record is not changed"
    );
}

#[tokio::test]
async fn in_progress_records_come_back_at_the_lease_end_beyond_the_backoff_maximum() {
    let calls = Calls::default();
    let processor = BatchProcessor::new().with_backoff(
        VisibilityBackoff::new(mocked_sqs(&calls))
            .base(Duration::from_secs(2))
            .max(Duration::from_secs(60)),
    );
    let now = Deadline::from(SystemTime::now()).epoch_ms();
    for (lease_ms, expected) in [
        (7_200_000, 7_199..=7_200),
        (20 * 3_600_000, 39_600..=39_600),
    ] {
        calls.lock().unwrap().clear();
        let handler = Handler {
            lease: now + lease_ms,
            attempts: 1,
        };
        processor
            .process(&event(vec![record("x", "busy", 1, None)]), &handler)
            .await
            .unwrap();
        let secs = timeouts_by_handle(&calls)[0].1;
        assert!(
            expected.contains(&secs),
            "lease {lease_ms} ms away: visibility {secs} s, never the backoff's 60 s maximum, \
             at most 11 hours (SQS's 12, less an hour for the time since the receive)"
        );
    }
}

#[tokio::test]
async fn a_failed_visibility_entry_is_retried_once() {
    let calls = Calls::default();
    // Every entry fails on each call (not the sender's fault): the entry is sent twice, no more.
    let sqs = mocked_sqs_answering(&calls, internal_error);
    let processor = BatchProcessor::new().with_backoff(VisibilityBackoff::new(sqs));
    let handler = message(|_, _| async { Err::<(), _>("refused") });
    let report = processor
        .process(&event(vec![record("x", "b", 1, None)]), &handler)
        .await
        .unwrap();
    assert_eq!(report.failures().count(), 1, "the record stays failed");
    assert_eq!(calls.lock().unwrap().len(), 2, "one call, one retry");
}

#[tokio::test]
async fn disabled_backoff_makes_no_call() {
    let calls = Calls::default();
    let processor = BatchProcessor::new()
        .with_backoff(VisibilityBackoff::new(mocked_sqs(&calls)).enabled(false));
    let handler = message(|_, _| async { Err::<(), _>("refused") });
    let report = processor
        .process(&event(vec![record("x", "b", 1, None)]), &handler)
        .await
        .unwrap();
    assert_eq!(report.failures().count(), 1);
    assert!(calls.lock().unwrap().is_empty());
}

/// A visibility SQS refuses as too long (it would end more than 12 hours after a receive made
/// longer ago than the backoff allows for) is tried once more at half: the message still backs
/// off for hours, rather than coming back after the queue's timeout.
#[tokio::test]
async fn a_visibility_refused_as_too_long_is_tried_again_at_half() {
    let calls = Calls::default();
    let processor = BatchProcessor::new().with_backoff(VisibilityBackoff::new(
        mocked_sqs_answering(&calls, received_two_hours_ago),
    ));
    let now = Deadline::from(SystemTime::now()).epoch_ms();
    let handler = Handler {
        lease: now + 20 * 3_600_000,
        attempts: 1,
    };
    processor
        .process(&event(vec![record("x", "busy", 1, None)]), &handler)
        .await
        .unwrap();
    let sent: Vec<i32> = timeouts_by_handle(&calls).iter().map(|(_, t)| *t).collect();
    assert_eq!(
        sent,
        [39_600, 19_800],
        "11 hours, refused; then half, which fits"
    );
}
