//! The batch wrapper's completion retries, and the time the processor keeps for the
//! dead-letter hook.

use std::sync::atomic::Ordering;

use lambda_idempotency::idempotency::COMPLETE_ATTEMPTS;

use super::common::FailingCompletions;
use super::*;

fn failing_completions(failures: u32) -> Idempotency<FailingCompletions> {
    Idempotency::new(FailingCompletions {
        failures,
        ..FailingCompletions::default()
    })
}

#[tokio::test]
async fn the_batch_wrapper_retries_a_completion_that_fails() {
    let engine = failing_completions(2);
    let handler = json(|p: Payment, _ctx: RecordContext| async move { Ok::<_, String>(p.amount) })
        .idempotent(engine)
        .with_keys(KeyConfig::json_pointer("/id"));
    let engine = handler.engine();
    let report = BatchProcessor::new()
        .process(&event(vec![record("m1", &body("p", 5), None, 1)]), &handler)
        .await
        .unwrap();
    assert!(reported(report.response()).is_empty());
    assert_eq!(
        engine.backend().tried.load(Ordering::SeqCst),
        3,
        "two failures, then recorded"
    );
    let stored = engine.get("p").await.unwrap().unwrap();
    assert_eq!(stored.status, Status::Completed);
}

#[tokio::test]
async fn work_that_ran_but_could_not_be_recorded_is_not_reported_failed() {
    let engine = failing_completions(u32::MAX);
    let runs = Arc::new(Mutex::new(0));
    let r = runs.clone();
    let handler = json(move |p: Payment, _ctx: RecordContext| {
        let r = r.clone();
        async move {
            *r.lock().unwrap() += 1;
            Ok::<_, String>(p.amount)
        }
    })
    .idempotent(engine)
    .with_keys(KeyConfig::json_pointer("/id"));
    let engine = handler.engine();
    let report = BatchProcessor::new()
        .process(&event(vec![record("m1", &body("p", 5), None, 1)]), &handler)
        .await
        .unwrap();
    assert!(
        reported(report.response()).is_empty(),
        "reporting it would run the work again"
    );
    assert!(report.records[0].result.is_ok());
    assert_eq!(*runs.lock().unwrap(), 1);
    assert_eq!(
        engine.backend().tried.load(Ordering::SeqCst),
        COMPLETE_ATTEMPTS,
        "bounded"
    );
}

/// A permanent failure and its hook: what the hook saw, and what reached the dead-letter queue.
async fn permanent_failure_with(
    time_left: Duration,
) -> (Vec<String>, Vec<DeadLettered>, Vec<String>) {
    let sent = Sent::default();
    let told: Arc<Mutex<Vec<DeadLettered>>> = Arc::default();
    let t = told.clone();
    let handler = json(|_p: Payment, _ctx: RecordContext| async move {
        Err::<(), _>(PermanentError::new("invalid payment"))
    })
    .on_dead_letter(move |dead| {
        let t = t.clone();
        async move { t.lock().unwrap().push(dead) }
    })
    .idempotent(Idempotency::new(InMemoryBackend::default()))
    .with_keys(KeyConfig::json_pointer("/id"));
    let processor = BatchProcessor::new()
        .with_dead_letter(dead_letter_queue(&sent))
        .call_timeout(Duration::from_secs(2))
        .finish_margin(Duration::from_millis(500))
        .stop_margin(Duration::from_millis(600))
        .start_margin(Duration::from_millis(700));
    // Received 7 times (blocked behind others, say): its first attempt all the same.
    let mut e = event(vec![record("m1", &body("p", 1), Some("g"), 7)]);
    let deadline = SystemTime::now() + Duration::from_millis(500) + time_left;
    e.context.deadline = Deadline::from(deadline).epoch_ms() as u64;
    let report = processor.process(&e, &handler).await.unwrap();
    let told = told.lock().unwrap().clone();
    let sent = sent.lock().unwrap().clone();
    (reported(report.response()), told, sent)
}

#[tokio::test]
async fn a_record_is_dead_lettered_only_with_time_left_for_its_hook() {
    // 1.5 s before the finish line: less than one call for the send plus one for the hook.
    let (reported, told, sent) = permanent_failure_with(Duration::from_millis(1500)).await;
    assert_eq!(reported, ["m1"], "left for its next delivery");
    assert!(sent.is_empty(), "not moved without its application told");
    assert!(told.is_empty());

    // 5 s: room for both.
    let (reported, told, sent) = permanent_failure_with(Duration::from_secs(5)).await;
    assert!(reported.is_empty());
    assert_eq!(sent.len(), 1);
    assert_eq!(told.len(), 1);
    assert!(told[0].permanent);
    assert_eq!(
        (told[0].attempts, told[0].ctx.attempt),
        (Some(1), 1),
        "the hook sees the store's count of attempts, not the 7 receives"
    );
}
