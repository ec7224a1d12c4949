//! An outage is not a message's fault: a failure the attempt budget does not count (a follow-up
//! after a committed effect, a store that cannot be reached) must never let SQS's own
//! `maxReceiveCount` move the message, or the messages held behind it in its FIFO group, to the
//! dead-letter queue, however long the outage lasts within the queue's retention.
//!
//! The queue is simulated as SQS runs it: a receive count per message, visibility (the queue's
//! default, or what the processor's backoff set), a FIFO group that delivers nothing while one
//! of its messages is in flight, batches of up to 10 from the head of the group, and the move to
//! the dead-letter queue on the receive after `maxReceiveCount` receives. The clock jumps to the
//! next moment a message is visible.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lambda_idempotency::Idempotency;
use lambda_idempotency::backoff::VisibilityBackoff;
use lambda_idempotency::batch::{BatchProcessor, RecordContext, RecordHandlerExt, json};
use lambda_idempotency::dead_letter::DeadLetter;
use lambda_idempotency::store::InMemoryBackend;
use lambda_idempotency::test_util::{InMemorySqs, SqsEventBuilder};
use lambda_idempotency::time::{Clock, ManualClock};
use lambda_runtime::Context;

/// The template's backstop for batches of 10 and 5 attempts.
const MAX_RECEIVE_COUNT: u32 = 41;
/// The payments queue's visibility timeout: 6 x the function's 30 s.
const QUEUE_VISIBILITY: Duration = Duration::from_secs(180);
/// The payments queue's retention: 4 days.
const RETENTION: Duration = Duration::from_secs(4 * 24 * 60 * 60);
const START_MS: i64 = 1_800_000_000_000;

#[derive(serde::Deserialize)]
struct Payment {
    id: String,
}

#[derive(Debug)]
struct Queued {
    id: String,
    body: String,
    group: Option<String>,
    receives: u32,
    visible_at_ms: i64,
}

/// One SQS queue, as SQS runs it.
struct Queue {
    arn: String,
    fifo: bool,
    messages: Vec<Queued>,
    /// Moved by SQS to the dead-letter queue (receive count past `maxReceiveCount`).
    moved: Vec<(String, u32)>,
    /// The highest receive count any message reached.
    most_receives: u32,
}

impl Queue {
    fn new(fifo: bool, messages: &[(&str, &str)]) -> Self {
        let name = if fifo { "payments.fifo" } else { "payments" };
        Self {
            arn: format!("arn:aws:sqs:us-east-1:123456789012:{name}"),
            fifo,
            messages: messages
                .iter()
                .map(|(id, group)| Queued {
                    id: (*id).to_owned(),
                    body: format!(r#"{{"id":"{id}"}}"#),
                    group: fifo.then(|| (*group).to_owned()),
                    receives: 0,
                    visible_at_ms: START_MS,
                })
                .collect(),
            moved: Vec::new(),
            most_receives: 0,
        }
    }

    /// A receive at `now_ms` of up to 10 messages; SQS moves a message received more than
    /// `maxReceiveCount` times instead of delivering it.
    fn receive(&mut self, now_ms: i64) -> Vec<(String, String, Option<String>, u32)> {
        let mut blocked_groups: Vec<String> = Vec::new();
        if self.fifo {
            for m in &self.messages {
                if m.visible_at_ms > now_ms {
                    blocked_groups.extend(m.group.clone());
                }
            }
        }
        let mut batch = Vec::new();
        let mut i = 0;
        while i < self.messages.len() && batch.len() < 10 {
            let m = &mut self.messages[i];
            let group_blocked = m.group.as_ref().is_some_and(|g| blocked_groups.contains(g));
            if m.visible_at_ms > now_ms || group_blocked {
                i += 1;
                continue;
            }
            m.receives += 1;
            self.most_receives = self.most_receives.max(m.receives);
            if m.receives > MAX_RECEIVE_COUNT {
                let m = self.messages.remove(i);
                self.moved.push((m.id, m.receives - 1));
                continue;
            }
            m.visible_at_ms = now_ms + QUEUE_VISIBILITY.as_millis() as i64;
            batch.push((m.id.clone(), m.body.clone(), m.group.clone(), m.receives));
            i += 1;
        }
        batch
    }

    /// The earliest moment something may be received.
    fn next_visible_ms(&self) -> Option<i64> {
        self.messages.iter().map(|m| m.visible_at_ms).min()
    }
}

/// Runs `queue` through a consumer whose follow-up (a receipt sent after the committed effect)
/// fails while `outage` lasts, until the queue drains or its retention ends. Returns the effects
/// per payment and what the processor dead-lettered.
async fn drain(queue: &mut Queue, outage: Duration) -> (BTreeMap<String, u32>, usize) {
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
        .with_expiry(RETENTION * 2);
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

    let end_ms = START_MS + RETENTION.as_millis() as i64;
    while let Some(next_ms) = queue.next_visible_ms() {
        if next_ms > end_ms {
            break;
        }
        clock.set(clock.now_ms().max(next_ms));
        let now_ms = clock.now_ms();
        let batch = queue.receive(now_ms);
        if batch.is_empty() {
            continue;
        }
        let mut event = SqsEventBuilder::new().queue_arn(queue.arn.clone());
        for (id, body, group, receives) in &batch {
            event = event
                .message(id.clone(), body.clone())
                .receive_count(*receives);
            if let Some(group) = group {
                event = event.group(group.clone());
            }
        }
        let mut context = Context::default();
        context.deadline = (now_ms + 30_000) as u64;
        sqs.clear();
        let report = processor
            .process(&event.context(context).build(), &handler)
            .await
            .expect("the batch runs");
        let failed: Vec<String> = report
            .response()
            .batch_item_failures
            .into_iter()
            .map(|f| f.item_identifier)
            .collect();
        let changes: HashMap<String, Duration> = sqs
            .visibility_changes()
            .into_iter()
            .map(|c| (c.message_id, c.visibility_timeout))
            .collect();
        queue.messages.retain_mut(|m| {
            if !batch.iter().any(|(id, ..)| *id == m.id) {
                return true;
            }
            if !failed.contains(&m.id) {
                return false;
            }
            if let Some(visibility) = changes.get(&m.id) {
                m.visible_at_ms = now_ms + visibility.as_millis() as i64;
            }
            true
        });
    }
    let dead_lettered = sqs.dead_letters().len();
    let effects = effects.lock().unwrap().clone();
    (effects, dead_lettered)
}

fn ten_in_one_group() -> Vec<(&'static str, &'static str)> {
    [
        "p01", "p02", "p03", "p04", "p05", "p06", "p07", "p08", "p09", "p10",
    ]
    .into_iter()
    .map(|id| (id, "account-a"))
    .collect()
}

async fn assert_nothing_innocent_failed(fifo: bool, outage: Duration) {
    let messages = ten_in_one_group();
    let mut queue = Queue::new(fifo, &messages);
    let (effects, dead_lettered) = drain(&mut queue, outage).await;
    println!(
        "{} queue, outage of {outage:?}: at most {} receives of one message",
        if fifo { "FIFO" } else { "standard" },
        queue.most_receives
    );
    assert_eq!(
        queue.moved,
        Vec::<(String, u32)>::new(),
        "SQS moved innocent messages (id, receives) to the dead-letter queue after an outage of \
         {outage:?}; most receives of one message: {}",
        queue.most_receives
    );
    assert_eq!(dead_lettered, 0, "nothing here can never succeed");
    assert!(
        queue.messages.is_empty(),
        "the queue drains: {:?}",
        queue.messages
    );
    for (id, _) in &messages {
        assert_eq!(effects.get(*id), Some(&1), "{id} took effect once");
    }
    assert!(
        queue.most_receives < MAX_RECEIVE_COUNT,
        "receives stay under maxReceiveCount: {}",
        queue.most_receives
    );
}

/// A receipts queue that refuses sends for two minutes: each payment of the group is charged
/// once, none is moved by SQS, however often the head of the group came back as a duplicate.
#[tokio::test]
async fn a_two_minute_outage_moves_nothing_of_a_fifo_group() {
    assert_nothing_innocent_failed(true, Duration::from_secs(120)).await;
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
