//! payment-processor crashing: a crash loop that moves every message to the dead-letter queue
//! fails no payment, and a message that crashes it on every delivery still fails, with its
//! reason, once it was sent back as often as the reconciler's limit allows.
//!
//! A crash is the whole invocation lost (a bad deployment, a failing init, memory exhaustion,
//! `panic = "abort"`): through the pipeline's processor hook the invocation never reaches the
//! handler, nothing is deleted, and SQS counts each receive until `maxReceiveCount` (the
//! template's, applied by the local SQS as SQS applies it) and moves the message. On AWS each
//! receive comes after the queue's visibility timeout (180 s: the template's 65 receives are about three and a quarter hours);
//! here the batch comes back at once, and the reconciler's runs are given the time they would run
//! at ([`round_length`] after the previous one).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use aws_sdk_sqs::types::QueueAttributeName;
use lambda_runtime::LambdaEvent;
use payments_e2e::invariants::{Failure, Scope, Snapshot};
use payments_e2e::{Options, Pipeline};
use payments_operations::reconcile::send_back::FATAL_ON_EVERY_DELIVERY;
use payments_operations::reconcile::waiting::Waiting;

/// Marks a payment whose message crashes payment-processor whenever it is received.
const FATAL: &str = "[fatal]";

/// How long each drain may take.
const DRAIN: Duration = Duration::from_secs(180);

/// One round of a crash loop on AWS: the queue's `maxReceiveCount` (`limit`, as provisioned from
/// the template) receives 180 s apart, and the reconciler's next run (every 5 minutes).
fn round_length(limit: u32) -> Duration {
    Duration::from_secs(u64::from(limit) * 180 + 300)
}

/// Crashes payment-processor's invocations: every one while `everything` is set, else those
/// whose batch holds a [`FATAL`] message. Counts each message's receives.
struct Crashes {
    everything: AtomicBool,
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    /// Receives by payment-processor, by payment id.
    receives: Mutex<HashMap<String, u32>>,
}

impl Crashes {
    fn install(pipeline: &Pipeline, everything: bool) -> Arc<Self> {
        let crashes = Arc::new(Self {
            everything: AtomicBool::new(everything),
            sqs: pipeline.clients.sqs.clone(),
            queue_url: pipeline.resources.queues["PaymentsQueue"].url.clone(),
            receives: Mutex::default(),
        });
        let hook = crashes.clone();
        pipeline
            .set_processor_hook(Arc::new(move |event| {
                let records = &event.payload.records;
                {
                    let mut receives = hook.receives.lock().unwrap();
                    for id in records.iter().filter_map(|r| payment_id(r.body.as_deref())) {
                        *receives.entry(id).or_default() += 1;
                    }
                }
                let fatal = records
                    .iter()
                    .any(|r| r.body.as_deref().is_some_and(|b| b.contains(FATAL)));
                if !fatal && !hook.everything.load(Ordering::SeqCst) {
                    return None;
                }
                let (this, event) = (hook.clone(), event.clone());
                Some(Box::pin(async move { this.crash(event).await }))
            }))
            .unwrap();
        crashes
    }

    /// The invocation's process is gone: nothing is deleted, and the batch comes back (at
    /// once, not after the visibility timeout).
    async fn crash(
        &self,
        event: LambdaEvent<SqsEvent>,
    ) -> Result<SqsBatchResponse, lambda_runtime::Error> {
        for handle in event
            .payload
            .records
            .iter()
            .filter_map(|r| r.receipt_handle.clone())
        {
            self.sqs
                .change_message_visibility()
                .queue_url(&self.queue_url)
                .receipt_handle(handle)
                .visibility_timeout(0)
                .send()
                .await?;
        }
        Err("the execution environment crashed".into())
    }

    fn receives(&self, payment_id: &str) -> u32 {
        self.receives
            .lock()
            .unwrap()
            .get(payment_id)
            .copied()
            .unwrap_or(0)
    }
}

fn payment_id(body: Option<&str>) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(body?).ok()?;
    v["paymentId"].as_str().map(str::to_owned)
}

/// Posts `per_account` payments for each of `accounts` accounts through the API (descriptions
/// `description`); their ids.
async fn accept(
    pipeline: &Pipeline,
    prefix: &str,
    accounts: usize,
    per_account: usize,
    description: &str,
) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    for a in 0..accounts {
        let account = format!("{prefix}-{a}");
        let http = pipeline.http().as_caller(&account);
        for n in 0..per_account {
            let body = serde_json::json!({
                "amountCents": 100 + n,
                "currency": "EUR",
                "description": format!("payment {n} {description}").trim_end(),
            })
            .to_string();
            let key = format!("{account}-{n}");
            let id = post(&http, &key, &body).await;
            ids.insert(id);
        }
    }
    ids
}

/// A `201`'s payment id; a `503` is retried with the same key, as a client does.
async fn post(http: &payments_e2e::http::HttpClient, key: &str, body: &str) -> String {
    for _ in 0..20 {
        let answer = http.post_payment(Some(key), body).await.unwrap();
        if answer.status == 201 {
            let body: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
            return body["paymentId"].as_str().unwrap().to_owned();
        }
        assert_eq!(answer.status, 503, "{answer:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{key}: no 201 in 20 tries");
}

/// The queue's `maxReceiveCount`, as provisioned from the template.
async fn max_receive_count(pipeline: &Pipeline) -> u32 {
    let attributes = pipeline
        .clients
        .sqs
        .get_queue_attributes()
        .queue_url(&pipeline.resources.queues["PaymentsQueue"].url)
        .attribute_names(QueueAttributeName::RedrivePolicy)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap_or_default();
    let policy: serde_json::Value =
        serde_json::from_str(&attributes[&QueueAttributeName::RedrivePolicy]).unwrap();
    match &policy["maxReceiveCount"] {
        serde_json::Value::String(s) => s.parse().unwrap(),
        n => n.as_u64().unwrap() as u32,
    }
}

/// The payments dead-letter queue's messages SQS moved (no reason), by payment id, read once
/// each (hidden for 2 s): for a queue that holds one message per group (a receive hands out no
/// more of a group while some of it is in flight).
async fn moved_by_sqs(pipeline: &Pipeline) -> BTreeSet<String> {
    let url = &pipeline.resources.queues["PaymentsDeadLetterQueue"].url;
    payments_e2e::stack::dead_letters_in_queue(&pipeline.clients.sqs, url, Duration::from_secs(2))
        .await
        .unwrap()
        .into_iter()
        .filter(|(_, reason)| reason.is_empty())
        .map(|(id, _)| id)
        .collect()
}

/// How many messages the payments dead-letter queue holds (visible and in flight).
async fn dead_letters(pipeline: &Pipeline) -> u64 {
    let out = pipeline
        .clients
        .sqs
        .get_queue_attributes()
        .queue_url(&pipeline.resources.queues["PaymentsDeadLetterQueue"].url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .unwrap();
    let attributes = out.attributes.unwrap_or_default();
    [
        QueueAttributeName::ApproximateNumberOfMessages,
        QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
    ]
    .iter()
    .map(|name| attributes[name].parse::<u64>().unwrap())
    .sum()
}

/// The reconciler's runs every 5 minutes from `at_ms` until they sent back every one of `ids`
/// (a look may see part of a group, whose payments wait for the next run; the crash loop goes
/// on meanwhile, and may move again what they sent back). None of them marks a payment failed,
/// or sends one back twice. Returns the time of the last run.
async fn send_back_all(pipeline: &Pipeline, ids: &BTreeSet<String>, mut at_ms: i64) -> i64 {
    let mut sent_back = BTreeSet::new();
    for _ in 0..10 {
        let waiting = reconcile_at(pipeline, at_ms).await;
        assert_eq!(waiting.marked_failed, Vec::<String>::new(), "{waiting:?}");
        let before = sent_back.len();
        for id in waiting.sent_back {
            assert!(sent_back.insert(id.clone()), "{id} sent back twice");
        }
        eprintln!(
            "a run sent back {} (unchecked: {})",
            sent_back.len() - before,
            waiting.unchecked.len()
        );
        if sent_back == *ids {
            return at_ms;
        }
        // The look's messages are invisible for a moment.
        tokio::time::sleep(Duration::from_secs(1)).await;
        at_ms += 5 * 60 * 1000;
    }
    panic!("10 runs sent back {} of {}", sent_back.len(), ids.len());
}

/// The reconciler's look at the payments left accepted, as its schedule runs it at `at_ms`.
async fn reconcile_at(pipeline: &Pipeline, at_ms: i64) -> Waiting {
    let reconciler = pipeline
        .reconciler(&[("RESEND_AFTER_SECONDS", "1")])
        .unwrap();
    let waiting = reconciler.waiting(at_ms).await.unwrap();
    assert!(waiting.send_failed.is_empty(), "{waiting:?}");
    waiting
}

/// Payments by status.
async fn statuses(pipeline: &Pipeline) -> HashMap<String, (String, Option<String>)> {
    Snapshot::read(&pipeline.clients.dynamodb, &pipeline.tables())
        .await
        .unwrap()
        .payments
        .into_iter()
        .map(|(id, p)| (id, (p.status, p.last_error)))
        .collect()
}

fn progress(left: u64) {
    eprintln!("{left} messages left");
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_loop_that_moves_every_message_fails_no_payment() {
    let _ = payments_e2e::logs::init();
    let pipeline = Pipeline::start(Options::default()).await.unwrap();
    let crashes = Crashes::install(&pipeline, true);
    let limit = max_receive_count(&pipeline).await;
    // Many groups: twelve accounts, three payments each, all received while every invocation
    // crashes.
    let ids = accept(&pipeline, "crashloop", 12, 3, "").await;
    let count = ids.len() as u64;
    // The reconciler's first run after the first round (its wait before acting on a payment,
    // 1 s here, has passed).
    let mut at = payments_publisher::now_ms() + 2_000;
    for round in 1..=2 {
        // About two hours of crashes on AWS: every message received maxReceiveCount times, then
        // moved by SQS.
        pipeline.drain(DRAIN, progress).await.unwrap();
        for id in &ids {
            assert_eq!(crashes.receives(id), limit * round, "{id}, round {round}");
        }
        assert_eq!(dead_letters(&pipeline).await, count, "round {round}");
        // The reconciler's next runs fail none of them: each is sent back once.
        at = send_back_all(&pipeline, &ids, at).await + millis(round_length(limit));
    }
    // The crash loop ends (the deployment is rolled back): what was sent back is charged.
    crashes.everything.store(false, Ordering::SeqCst);
    pipeline.drain(DRAIN, progress).await.unwrap();
    let waiting = reconcile_at(&pipeline, at).await;
    assert_eq!(waiting, Waiting::default(), "nothing left accepted");
    let statuses = statuses(&pipeline).await;
    for id in &ids {
        assert_eq!(statuses[id].0, "charged", "{id}: {:?}", statuses[id]);
    }
    // Every payment charged exactly once, with its receipt; none failed.
    pipeline.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_that_crashes_every_delivery_fails_with_its_reason_after_the_limit() {
    let _ = payments_e2e::logs::init();
    let pipeline = Pipeline::start(Options::default()).await.unwrap();
    let crashes = Crashes::install(&pipeline, false);
    let receive_limit = max_receive_count(&pipeline).await;
    let send_back_limit = pipeline.reconciler(&[]).unwrap().config().send_back_limit;
    let innocent = accept(&pipeline, "fatal-neighbours", 3, 2, "").await;
    // In an account of its own: a crash takes its whole batch back, and the payments of its
    // group batched with it would be received as often.
    let fatal = accept(&pipeline, "fatal", 1, 1, FATAL).await;
    let fatal_id = fatal.first().unwrap().clone();
    let mut at = payments_publisher::now_ms() + 2_000;
    for round in 0..=send_back_limit {
        pipeline.drain(DRAIN, progress).await.unwrap();
        assert_eq!(
            crashes.receives(&fatal_id),
            receive_limit * (round + 1),
            "round {round}"
        );
        assert_eq!(moved_by_sqs(&pipeline).await, fatal, "round {round}");
        // Visible again for the reconciler's look.
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        let waiting = reconcile_at(&pipeline, at).await;
        if round < send_back_limit {
            assert_eq!(
                waiting.sent_back,
                std::slice::from_ref(&fatal_id),
                "{waiting:?}"
            );
            assert!(waiting.marked_failed.is_empty(), "{waiting:?}");
        } else {
            // Moved again after it was sent back as often as the limit allows: failed.
            assert_eq!(
                waiting.marked_failed,
                std::slice::from_ref(&fatal_id),
                "{waiting:?}"
            );
            assert!(waiting.sent_back.is_empty(), "{waiting:?}");
        }
        at += millis(round_length(receive_limit));
    }
    let statuses = statuses(&pipeline).await;
    let (status, reason) = &statuses[&fatal_id];
    assert_eq!(status, "failed");
    let reason = reason.clone().unwrap_or_default();
    assert!(reason.contains(FATAL_ON_EVERY_DELIVERY), "{reason}");
    assert!(
        reason.contains(&format!("sent back {send_back_limit} times")),
        "{reason}"
    );
    for id in &innocent {
        assert_eq!(statuses[id].0, "charged", "{id}: {:?}", statuses[id]);
    }
    // Its failure is its own (declared), the others are charged once.
    pipeline
        .stop_checking(&Scope::pipeline().declaring(Failure::Fatal, fatal), &[])
        .await;
}
