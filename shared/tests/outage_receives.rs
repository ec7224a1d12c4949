//! An outage is not a message's fault: a failure the attempt budget does not count (a follow-up
//! after a committed effect, a store that cannot be reached) must never let SQS's own
//! `maxReceiveCount` move the message, or the messages held behind it in its FIFO group, to the
//! dead-letter queue, however long the outage lasts within the queue's retention.
//!
//! The queue is the library's simulated SQS queue (`test_util::sim_queue`): a receive count per
//! message, visibility (the queue's default, or what the processor's backoff set), a FIFO group
//! that delivers nothing while one of its messages is in flight, batches of up to 10 from the
//! head of the group, and the move to the dead-letter queue on the receive after
//! `maxReceiveCount` receives. The clock jumps to the next moment a message is visible.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lambda_idempotency::Idempotency;
use lambda_idempotency::backoff::VisibilityBackoff;
use lambda_idempotency::batch::{BatchProcessor, RecordContext, RecordHandlerExt, json};
use lambda_idempotency::dead_letter::DeadLetter;
use lambda_idempotency::store::InMemoryBackend;
use lambda_idempotency::test_util::InMemorySqs;
use lambda_idempotency::test_util::fault::Crash;
use lambda_idempotency::test_util::sim_queue::{self, Drained, MAX_RECEIVE_COUNT, SimQueue};
use lambda_idempotency::time::{Clock, ManualClock};

/// The payments queue's visibility timeout: 6 x the function's 30 s.
const QUEUE_VISIBILITY: Duration = Duration::from_secs(180);
/// The payments queue's retention: 4 days.
const RETENTION: Duration = Duration::from_secs(4 * 24 * 60 * 60);
/// SQS's longest retention: 14 days.
const LONGEST_RETENTION: Duration = Duration::from_secs(14 * 24 * 60 * 60);
const START_MS: i64 = 1_800_000_000_000;

#[derive(serde::Deserialize)]
struct Payment {
    id: String,
}

/// Ten payments of one account, `p01`..`p10`, in one message group when `fifo`, through a
/// consumer whose follow-up (a receipt sent after the committed effect) fails while `outage`
/// lasts, until the queue drains (within `retention`). Returns how it drained and the effects
/// per payment.
async fn drain(
    fifo: bool,
    outage: Duration,
    retention: Duration,
) -> (Drained, BTreeMap<String, u32>) {
    let clock = Arc::new(ManualClock::new(START_MS));
    let outage_ends_ms = START_MS + outage.as_millis() as i64;
    let sqs = InMemorySqs::new();
    let processor = BatchProcessor::new()
        .max_attempts(5)
        .with_backoff(VisibilityBackoff::in_memory(&sqs))
        .with_dead_letter(DeadLetter::in_memory(&sqs, "https://dlq"))
        .with_clock(clock.clone());
    let effects: Arc<Mutex<BTreeMap<String, u32>>> = Arc::default();
    let engine = Idempotency::new(InMemoryBackend::default())
        .with_clock(clock.clone())
        .with_expiry(retention * 2);
    let handler = json({
        let effects = effects.clone();
        move |p: Payment, _ctx: RecordContext| {
            let effects = effects.clone();
            async move {
                *effects.lock().unwrap().entry(p.id.clone()).or_default() += 1;
                Ok::<_, std::io::Error>(p.id)
            }
        }
    })
    .idempotent(engine)
    .and_then({
        let clock = clock.clone();
        move |_done, _ctx: RecordContext| {
            let down = clock.now_ms() < outage_ends_ms;
            async move {
                if down {
                    Err("the receipts queue refused the send")
                } else {
                    Ok(())
                }
            }
        }
    });
    let messages: Vec<(String, String)> = (1..=10)
        .map(|i| (format!("p{i:02}"), format!(r#"{{"id":"p{i:02}"}}"#)))
        .collect();
    let queue = SimQueue::grouped(fifo, &messages, "account-a", START_MS)
        .visibility_timeout(QUEUE_VISIBILITY);
    let drained = sim_queue::drain(queue, &clock, &Crash::default(), &sqs, |event| {
        let (processor, handler) = (&processor, &handler);
        async move {
            match processor.process(&event, handler).await {
                Ok(report) => Ok(report.response()),
                Err(e) => Err(e.to_string()),
            }
        }
    })
    .await;
    assert!(
        clock.now_ms() - START_MS < retention.as_millis() as i64,
        "drained within the queue's retention"
    );
    let effects = effects.lock().unwrap().clone();
    (drained, effects)
}

/// Returns the most receives of one message.
async fn assert_nothing_innocent_failed(fifo: bool, outage: Duration) -> u32 {
    assert_nothing_innocent_failed_within(fifo, outage, RETENTION).await
}

async fn assert_nothing_innocent_failed_within(
    fifo: bool,
    outage: Duration,
    retention: Duration,
) -> u32 {
    let (drained, effects) = drain(fifo, outage, retention).await;
    let most = drained.queue.max_receives;
    println!(
        "{} queue, outage of {outage:?}: at most {most} receives of one message",
        if fifo { "FIFO" } else { "standard" },
    );
    // Nothing moved by SQS, nothing dead-lettered by the processor (nothing here can never
    // succeed), the queue drained.
    assert_eq!(
        drained.problems(),
        Vec::<String>::new(),
        "after an outage of {outage:?}; most receives of one message: {most}"
    );
    for i in 1..=10 {
        let id = format!("p{i:02}");
        assert_eq!(effects.get(&id), Some(&1), "{id} took effect once");
    }
    assert!(
        most < MAX_RECEIVE_COUNT,
        "receives stay under maxReceiveCount: {most}"
    );
    most
}

/// A receipts queue that refuses sends for two minutes: each payment of the group is charged
/// once, none is moved by SQS, however often the head of the group came back as a duplicate.
/// It costs seven receives (the delays of the first six, 2 s doubled with up to a quarter more
/// of jitter, add up to 126 to 158 s; of the first five, to at most 78 s).
#[tokio::test]
async fn a_two_minute_outage_moves_nothing_of_a_fifo_group() {
    let most = assert_nothing_innocent_failed(true, Duration::from_secs(120)).await;
    assert_eq!(most, 7, "receives of the group's head");
}

/// The same outage lasting three days, within the queue's four-day retention.
#[tokio::test]
async fn a_three_day_outage_moves_nothing_of_a_fifo_group() {
    assert_nothing_innocent_failed(true, Duration::from_secs(3 * 24 * 60 * 60)).await;
}

/// On a standard queue every message fails alone, and none is moved either.
#[tokio::test]
async fn a_three_day_outage_moves_nothing_of_a_standard_queue() {
    assert_nothing_innocent_failed(false, Duration::from_secs(3 * 24 * 60 * 60)).await;
}

/// SQS refuses a visibility that would end more than 12 hours after the receive: the backoff's
/// longest delay is 11 hours, so that receives keep growing by about two a day, and the 41st
/// comes only after about 12 days (a 12-hour delay, refused, would leave each message to the
/// queue's 180 s timeout: 41 receives within the first day). An outage of 11 days, in a queue
/// keeping its messages 14 days (SQS's longest), moves nothing.
#[tokio::test]
async fn an_eleven_day_outage_moves_nothing_of_a_fifo_group() {
    let outage = Duration::from_secs(11 * 24 * 60 * 60);
    let most = assert_nothing_innocent_failed_within(true, outage, LONGEST_RETENTION).await;
    assert!(most >= 35, "about two receives a day: {most} in 11 days");
}
