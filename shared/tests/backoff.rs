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
    BatchProcessor, RecordContext, RecordError, RecordHandler, message,
};
use lambda_idempotency::record::system_time_ms;
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
            ChangeMessageVisibilityBatchOutput::builder()
                .set_successful(Some(
                    entries
                        .iter()
                        .map(|(id, _, _)| {
                            ChangeMessageVisibilityBatchResultEntry::builder()
                                .id(id)
                                .build()
                                .unwrap()
                        })
                        .collect(),
                ))
                .set_failed(Some(vec![]))
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

#[tokio::test]
async fn blocked_fifo_records_come_back_with_the_failed_one_and_in_progress_at_lease_end() {
    let calls = Calls::default();
    let backoff = VisibilityBackoff::new(mocked_sqs(&calls)).base(Duration::from_secs(8));
    let records = vec![
        record("a1", "fail", 2, Some("A")),
        record("a2", "ok", 1, Some("A")),
        record("b1", "busy", 1, Some("B")),
    ];
    /// Fails as the idempotent wrapper would for a key held elsewhere.
    struct Handler(i64);
    impl RecordHandler for Handler {
        type Output = ();
        async fn handle(&self, m: &SqsMessage, _: &RecordContext) -> Result<(), RecordError> {
            match m.body.as_deref() {
                Some("fail") => Err(RecordError::handler("refused")),
                Some("busy") => Err(RecordError::InProgress {
                    lease_until_ms: self.0,
                }),
                _ => Ok(()),
            }
        }
    }
    let handler = Handler(system_time_ms(SystemTime::now()) + 30_000);
    let report = BatchProcessor::new()
        .process(&event(records.clone()), &handler)
        .await
        .unwrap();
    let timeouts = backoff.timeouts(&records, &report);
    let a1 = timeouts.iter().find(|(i, _)| *i == 0).unwrap().1;
    let a2 = timeouts.iter().find(|(i, _)| *i == 1).unwrap().1;
    let b1 = timeouts.iter().find(|(i, _)| *i == 2).unwrap().1;
    assert!((16..=20).contains(&a1), "{timeouts:?}");
    assert_eq!(
        a2, a1,
        "a blocked record comes back with the failure that blocked it"
    );
    assert!(
        (29..=30).contains(&b1),
        "in progress: at the lease end: {timeouts:?}"
    );
    assert_eq!(backoff.apply(&records, &report).await, 3);
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
