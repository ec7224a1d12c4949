//! An SQS queue simulated on a test's clock, and Lambda's event source over it: what a test needs
//! to run a consumer through every delivery SQS could make, with the [`fault`](super::fault)
//! injector on its clients.
//!
//! [`SimQueue`] is a standard or a FIFO queue: each message's receive count, its visibility (the
//! queue's timeout from each receive, or what a visibility change set, refused as SQS refuses one
//! that would end more than 12 hours after the receive), a FIFO group held while
//! one of its messages is in flight, the redelivery of what a batch reported failed or a crash
//! dropped, and the move to the dead-letter queue as SQS makes it: on the receive after a
//! message's count reached `maxReceiveCount`. [`drain`] invokes a function with each batch until
//! the queue drains, moving the clock to the next visible message; [`Drained::problems`] says
//! what went wrong for messages that are not at fault: not drained, moved by SQS, or
//! dead-lettered by the function.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use lambda_idempotency::prelude::*;
//! use lambda_idempotency::store::InMemoryBackend;
//! use lambda_idempotency::test_util::InMemorySqs;
//! use lambda_idempotency::test_util::fault::Crash;
//! use lambda_idempotency::test_util::sim_queue::{SimQueue, drain};
//! use lambda_idempotency::time::{Clock, ManualClock};
//! use std::sync::Arc;
//!
//! async fn flaky(_body: serde_json::Value, ctx: RecordContext) -> Result<(), Error> {
//!     // Fails its first attempt.
//!     if ctx.attempt == 1 { Err("the ledger is busy".into()) } else { Ok(()) }
//! }
//!
//! let (clock, sqs) = (Arc::new(ManualClock::starting_now()), InMemorySqs::new());
//! let consumer = Consumer::builder(Arc::new(InMemoryBackend::default()))
//!     .with_in_memory_sqs(&sqs)
//!     .map_engine(|engine| engine.with_clock(clock.clone()))
//!     .map_processor(|processor| processor.with_clock(clock.clone()))
//!     .idempotent(json(flaky));
//! let messages = [("m-1".to_owned(), r#"{"id": 1}"#.to_owned())];
//! let queue = SimQueue::new(true, &messages, clock.now_ms());
//! let crash = Crash::default();
//! let drained = drain(queue, &clock, &crash, &sqs, |event| async {
//!     consumer.handle(event).await.map_err(|e| e.to_string())
//! })
//! .await;
//! assert!(drained.problems().is_empty(), "{:?}", drained.problems());
//! assert_eq!(drained.invocations, 2);
//! # });
//! ```

use std::collections::HashSet;
use std::future::Future;
use std::time::Duration;

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use lambda_runtime::{Context, LambdaEvent};

use super::InMemorySqs;
use super::fault::Crash;
use crate::time::{Clock, ManualClock};

/// The default `maxReceiveCount`, 41: the attempt bound of batches of 10 and 5 attempts
/// ([`min_max_receive_count`](crate::redrive_policy::min_max_receive_count)). The reference
/// pipeline's queues (`template.yaml`) add room for an outage as long as their retention: 65.
pub const MAX_RECEIVE_COUNT: u32 = 41;
/// The default visibility timeout: six times a 30 s function timeout, as AWS advises.
pub const VISIBILITY_TIMEOUT: Duration = Duration::from_secs(180);
/// SQS refuses a visibility that would end this long after the message's receive.
const SQS_VISIBILITY_LIMIT: Duration = Duration::from_secs(12 * 60 * 60);
/// SQS's largest batch for a Lambda event source.
const BATCH_SIZE: usize = 10;

#[derive(Debug)]
struct Message {
    id: String,
    body: String,
    group: Option<String>,
    receives: u32,
    visible_at: i64,
    /// When it was last received.
    received_at: i64,
    /// When it was received, each time.
    received: Vec<i64>,
    deleted: bool,
}

/// A simulated queue.
#[derive(Debug)]
pub struct SimQueue {
    fifo: bool,
    arn: String,
    messages: Vec<Message>,
    max_receive_count: u32,
    visibility_timeout: Duration,
    /// Messages SQS moved to the dead-letter queue, with their receive count.
    pub moved: Vec<(String, u32)>,
    /// The highest receive count a message reached.
    pub max_receives: u32,
}

impl SimQueue {
    /// A queue holding `messages` (`(id, body)`), all in the message group `group-1` when `fifo`.
    pub fn new(fifo: bool, messages: &[(String, String)], now_ms: i64) -> Self {
        Self::grouped(fifo, messages, "group-1", now_ms)
    }

    /// A queue holding `messages` (`(id, body)`), all in the message group `group` when `fifo`.
    pub fn grouped(fifo: bool, messages: &[(String, String)], group: &str, now_ms: i64) -> Self {
        let arn = if fifo {
            "arn:aws:sqs:us-east-1:123456789012:explore.fifo"
        } else {
            "arn:aws:sqs:us-east-1:123456789012:explore"
        };
        Self {
            fifo,
            arn: arn.to_owned(),
            messages: messages
                .iter()
                .map(|(id, body)| Message {
                    id: id.clone(),
                    body: body.clone(),
                    group: fifo.then(|| group.to_owned()),
                    receives: 0,
                    visible_at: now_ms,
                    received_at: now_ms,
                    received: Vec::new(),
                    deleted: false,
                })
                .collect(),
            max_receive_count: MAX_RECEIVE_COUNT,
            visibility_timeout: VISIBILITY_TIMEOUT,
            moved: Vec::new(),
            max_receives: 0,
        }
    }

    /// The redrive policy's `maxReceiveCount` ([`MAX_RECEIVE_COUNT`] by default).
    pub fn max_receive_count(mut self, count: u32) -> Self {
        self.max_receive_count = count;
        self
    }

    /// The queue's visibility timeout ([`VISIBILITY_TIMEOUT`] by default).
    pub fn visibility_timeout(mut self, timeout: Duration) -> Self {
        self.visibility_timeout = timeout;
        self
    }

    /// The time between each receive of message `id` and the next: how long each of its
    /// failures kept it away.
    pub fn waits(&self, id: &str) -> Vec<Duration> {
        self.messages
            .iter()
            .filter(|m| m.id == id)
            .flat_map(|m| m.received.windows(2))
            .map(|w| Duration::from_millis(u64::try_from(w[1] - w[0]).unwrap_or(0)))
            .collect()
    }

    /// True when every message is deleted or moved.
    pub fn drained(&self) -> bool {
        self.messages.iter().all(|m| m.deleted)
    }

    /// The next batch, the clock moved to when one is visible; `None` once drained.
    fn receive(&mut self, clock: &ManualClock) -> Option<Vec<SqsMessage>> {
        loop {
            if self.drained() {
                return None;
            }
            let now = clock.now_ms();
            let candidates = self.candidates(now);
            let mut batch = Vec::new();
            for i in candidates {
                let m = &mut self.messages[i];
                if m.receives >= self.max_receive_count {
                    // SQS's redrive: the receive after the count reached maxReceiveCount.
                    m.deleted = true;
                    self.moved.push((m.id.clone(), m.receives));
                    continue;
                }
                if batch.len() == BATCH_SIZE {
                    break;
                }
                m.receives += 1;
                m.received_at = now;
                m.received.push(now);
                m.visible_at = now + self.visibility_timeout.as_millis() as i64;
                self.max_receives = self.max_receives.max(m.receives);
                batch.push(self.event_record(i));
            }
            if !batch.is_empty() {
                return Some(batch);
            }
            if let Some(next) = self
                .messages
                .iter()
                .filter(|m| !m.deleted && m.visible_at > now)
                .map(|m| m.visible_at)
                .min()
            {
                clock.set(next);
            }
        }
    }

    /// The indices SQS may return now, in order: every visible message (standard), or the
    /// messages of each group none of whose messages is in flight (FIFO).
    fn candidates(&self, now: i64) -> Vec<usize> {
        let live = |m: &Message| !m.deleted;
        if !self.fifo {
            return (0..self.messages.len())
                .filter(|&i| live(&self.messages[i]) && self.messages[i].visible_at <= now)
                .collect();
        }
        let held: HashSet<&str> = self
            .messages
            .iter()
            .filter(|m| live(m) && m.visible_at > now)
            .filter_map(|m| m.group.as_deref())
            .collect();
        (0..self.messages.len())
            .filter(|&i| {
                let m = &self.messages[i];
                live(m) && !m.group.as_deref().is_some_and(|g| held.contains(g))
            })
            .collect()
    }

    fn event_record(&self, i: usize) -> SqsMessage {
        let m = &self.messages[i];
        let mut record = SqsMessage::default();
        record.message_id = Some(m.id.clone());
        record.receipt_handle = Some(format!("rh-{}-{}", m.id, m.receives));
        record.body = Some(m.body.clone());
        record.event_source_arn = Some(self.arn.clone());
        record
            .attributes
            .insert("ApproximateReceiveCount".into(), m.receives.to_string());
        if let Some(group) = &m.group {
            record
                .attributes
                .insert("MessageGroupId".into(), group.clone());
        }
        record
    }

    /// The end of an invocation of `batch`: its messages not in `failed` deleted, the failed ones
    /// visible again as `visibility` says (`(id, timeout)`, what the invocation changed), else
    /// after the queue's visibility timeout from their receive. As SQS does, a change is refused
    /// when it would end more than 12 hours after the receive. A change always comes some time
    /// after its receive, on SQS, and the simulated clock does not move during an invocation: so
    /// a change ending 12 hours after the receive, to the millisecond, is refused too.
    fn settle(
        &mut self,
        batch: &[String],
        failed: &HashSet<String>,
        visibility: &[(String, Duration)],
        now_ms: i64,
    ) {
        for m in self.messages.iter_mut().filter(|m| batch.contains(&m.id)) {
            if !failed.contains(&m.id) {
                m.deleted = true;
            } else if let Some((_, timeout)) = visibility.iter().rev().find(|(id, _)| *id == m.id) {
                let until = now_ms + timeout.as_millis() as i64;
                if until - m.received_at < SQS_VISIBILITY_LIMIT.as_millis() as i64 {
                    m.visible_at = until;
                }
            }
        }
    }
}

/// Receive counts so far, for a failure's message.
impl std::fmt::Display for SimQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let counts: Vec<String> = self
            .messages
            .iter()
            .map(|m| {
                format!(
                    "{}:{}{}",
                    m.id,
                    m.receives,
                    if m.deleted { "" } else { "(live)" }
                )
            })
            .collect();
        write!(f, "{}", counts.join(" "))
    }
}

/// Invocations after which a drain counts as never ending.
pub const MAX_INVOCATIONS: u32 = 300;
/// The function's timeout: each invocation's deadline is this far from its start.
pub const FUNCTION_TIMEOUT: Duration = Duration::from_secs(30);

/// How a queue's drain went.
#[derive(Debug)]
#[non_exhaustive]
pub struct Drained {
    /// The queue, once drained (or once [`MAX_INVOCATIONS`] were made).
    pub queue: SimQueue,
    /// The function's invocations.
    pub invocations: u32,
    /// Those that crashed ([`Crash`] raised): Lambda saw no answer.
    pub crashes: u32,
    /// The errors the function returned (the whole batch failed, as Lambda takes it).
    pub errors: Vec<String>,
    /// What the function moved to its dead-letter queue: `id: reason`.
    pub dead_letters: Vec<String>,
    /// The poison messages, to be dead-lettered: `(id, what its reason says)`.
    poison: Vec<(String, String)>,
}

impl Drained {
    /// This drain, where each message of `poison` (`(id, what its reason says)`) fails for good:
    /// [`problems`](Self::problems) then requires the function to have dead-lettered it, each of
    /// its copies with a reason that says so, and allows nothing else.
    pub fn with_poison(mut self, poison: &[(String, String)]) -> Self {
        self.poison = poison.to_vec();
        self
    }

    /// The function's dead-letter copies of message `id`.
    pub fn copies(&self, id: &str) -> usize {
        let prefix = format!("{id}: ");
        self.dead_letters
            .iter()
            .filter(|d| d.starts_with(&prefix))
            .count()
    }

    /// The messages that failed and came back only after the queue's whole visibility timeout:
    /// their backoff's visibility change was lost. A crash, or an outage of SQS, leaves them so;
    /// one failed request must not.
    pub fn kept_away(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for m in &self.queue.messages {
            let waits = self.queue.waits(&m.id);
            if waits.iter().any(|w| *w >= self.queue.visibility_timeout) {
                problems.push(format!(
                    "{} came back only after the visibility timeout (waits {waits:?}): its \
                     visibility change was lost",
                    m.id
                ));
            }
        }
        problems
    }

    /// What went wrong with the queue: not drained; a message SQS moved to the dead-letter
    /// queue; one the function dead-lettered (unless it is [poison](Self::with_poison) and its
    /// reason says so), or a poison message it did not; an error the function returned. Nothing
    /// innocent may be any of these.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if !self.queue.drained() {
            problems.push(format!(
                "not drained after {} invocations",
                self.invocations
            ));
        }
        for (id, receives) in &self.queue.moved {
            problems.push(format!(
                "{id} moved to the dead-letter queue by SQS after {receives} receives"
            ));
        }
        let poisoned = |dead: &str| {
            self.poison.iter().any(|(id, says)| {
                dead.strip_prefix(id.as_str())
                    .and_then(|rest| rest.strip_prefix(": "))
                    .is_some_and(|reason| reason.contains(says.as_str()))
            })
        };
        for dead in self.dead_letters.iter().filter(|d| !poisoned(d)) {
            problems.push(format!("dead-lettered by the function: {dead}"));
        }
        for (id, says) in &self.poison {
            if self.copies(id) == 0 {
                problems.push(format!(
                    "{id}, poison, never dead-lettered with its reason ({says})"
                ));
            }
        }
        for error in &self.errors {
            problems.push(format!("the function failed the whole batch: {error}"));
        }
        problems
    }

    /// A fault exploration's case, whole: that its fault never fired (`unfired_fault`: one was
    /// armed and did not fire), [`problems`](Self::problems), then `more` (the case's own checks).
    /// When there is any, they are headed by the invocations, the crashes, the receive counts and
    /// `requests` (the requests the case made, as [`Faults::runs`](super::fault::Faults::runs)
    /// lists them), so that a failed case reads on its own.
    pub fn case_problems(
        &self,
        unfired_fault: bool,
        requests: &str,
        more: impl IntoIterator<Item = String>,
    ) -> Vec<String> {
        let mut problems = Vec::new();
        if unfired_fault {
            problems.push("the fault never fired".to_owned());
        }
        problems.extend(self.problems());
        problems.extend(more);
        if !problems.is_empty() {
            problems.insert(
                0,
                format!(
                    "{} invocations, {} crashes, receive counts {}; requests {requests}",
                    self.invocations, self.crashes, self.queue
                ),
            );
        }
        problems
    }
}

/// Lambda's event source over `queue`: invokes `function` with each batch (its deadline
/// [`FUNCTION_TIMEOUT`] away on `clock`) until the queue drains or [`MAX_INVOCATIONS`]. An
/// invocation that crashes (`crash` raised) is dropped, and one that returns an error (or a batch
/// item failure naming no message of the batch) fails whole; one that answers fails the messages
/// its response names. Failed messages come back as the visibility changes the invocation made
/// on `sqs` say, else after the visibility timeout; what it dead-lettered on `sqs` is kept,
/// whatever its end. `sqs` is the function's
/// in-memory SQS (its dead-letter queue and its visibility changes), cleared before each
/// invocation; `crash` is reset before each (a new process).
pub async fn drain<F, Fut>(
    mut queue: SimQueue,
    clock: &ManualClock,
    crash: &Crash,
    sqs: &InMemorySqs,
    mut function: F,
) -> Drained
where
    F: FnMut(LambdaEvent<SqsEvent>) -> Fut,
    Fut: Future<Output = Result<SqsBatchResponse, String>>,
{
    let (mut invocations, mut crashes) = (0, 0);
    let (mut errors, mut dead_letters) = (Vec::new(), Vec::new());
    while invocations < MAX_INVOCATIONS {
        let Some(batch) = queue.receive(clock) else {
            break;
        };
        invocations += 1;
        crash.reset();
        sqs.clear();
        let ids: Vec<String> = batch.iter().filter_map(|m| m.message_id.clone()).collect();
        let mut context = Context::default();
        context.request_id = format!("invocation-{invocations}");
        context.deadline = (clock.now_ms() + FUNCTION_TIMEOUT.as_millis() as i64) as u64;
        let mut event = SqsEvent::default();
        event.records = batch;
        let answered = tokio::select! {
            biased;
            () = crash.raised() => None,
            response = function(LambdaEvent::new(event, context)) => Some(response),
        };
        // What the invocation did to SQS stands whatever its end, a crash's included: a message
        // it dead-lettered, a visibility it changed.
        dead_letters.extend(
            sqs.dead_letters()
                .into_iter()
                .map(|d| format!("{}: {}", d.source_message_id, d.reason)),
        );
        let visibility: Vec<(String, Duration)> = sqs
            .visibility_changes()
            .into_iter()
            .map(|c| (c.message_id, c.visibility_timeout))
            .collect();
        let every: HashSet<String> = ids.iter().cloned().collect();
        let failed = match answered {
            Some(Ok(response)) if !crash.is_raised() => {
                let failed: HashSet<String> = response
                    .batch_item_failures
                    .into_iter()
                    .map(|f| f.item_identifier)
                    .collect();
                // An identifier that is empty or not of the batch fails the batch whole.
                if failed.is_subset(&every) {
                    failed
                } else {
                    errors.push(format!(
                        "invocation {invocations}: a batch item failure names no message of the \
                         batch"
                    ));
                    every
                }
            }
            Some(Err(e)) if !crash.is_raised() => {
                errors.push(format!("invocation {invocations}: {e}"));
                every
            }
            // Lambda saw no answer: the batch comes back after the visibility timeout.
            _ => {
                crashes += 1;
                every
            }
        };
        queue.settle(&ids, &failed, &visibility, clock.now_ms());
    }
    Drained {
        queue,
        invocations,
        crashes,
        errors,
        dead_letters,
        poison: Vec::new(),
    }
}
