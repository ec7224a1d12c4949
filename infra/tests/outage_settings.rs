//! Every setting the template allows keeps the outage guarantee: an outage as long as a queue's
//! retention moves none of its messages to the dead-letter queue, at each `MaxAttempts`,
//! `BackoffBaseSeconds` and `BackoffMaxSeconds` the template's parameters accept; and the
//! consumers' cold-start check ([`outage_cover`]) agrees with the template's derived
//! `maxReceiveCount` for each of them.
//!
//! The settings are the template's own, read from template.yaml with the parameters overridden
//! (the model refuses a value a deployment would refuse): each SQS consumer's environment
//! (`MAX_ATTEMPTS`, `BACKOFF_BASE_SECONDS`, `BACKOFF_MAX_SECONDS`, `EVENT_SOURCE_BATCH_SIZE`,
//! `IDEMPOTENCY_TTL_SECONDS`) configures a [`Consumer`] as it configures the deployed one, and its
//! queue's `maxReceiveCount`, visibility timeout, retention and kind (FIFO or standard) configure
//! the library's simulated queue.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lambda_idempotency::backoff::RetrySchedule;
use lambda_idempotency::batch::{RecordContext, RecordHandlerExt, json};
use lambda_idempotency::consumer::{ConsumerBuilder, ConsumerConfig};
use lambda_idempotency::redrive_policy::outage_cover;
use lambda_idempotency::store::InMemoryBackend;
use lambda_idempotency::test_util::InMemorySqs;
use lambda_idempotency::test_util::fault::Crash;
use lambda_idempotency::test_util::sim_queue::{self, SimQueue};
use lambda_idempotency::time::{Clock, ManualClock};
use local_aws::template::{Expr, Function, Queue, Template, TemplateOptions};

const START_MS: i64 = 1_800_000_000_000;

/// A setting of the template's parameters.
#[derive(Debug, Clone, Copy)]
struct Setting {
    max_attempts: u32,
    backoff_base: u64,
    backoff_max: u64,
}

impl Setting {
    fn template(&self) -> Result<Template, String> {
        let options = TemplateOptions::default()
            .parameter("MaxAttempts", self.max_attempts.to_string())
            .parameter("BackoffBaseSeconds", self.backoff_base.to_string())
            .parameter("BackoffMaxSeconds", self.backoff_max.to_string());
        Template::load_project(&options).map_err(|e| e.to_string())
    }
}

impl std::fmt::Display for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MaxAttempts {} BackoffBaseSeconds {} BackoffMaxSeconds {}",
            self.max_attempts, self.backoff_base, self.backoff_max
        )
    }
}

/// A parameter's `MinValue` and `MaxValue` (whole numbers).
fn bounds(name: &str) -> (u64, Option<u64>) {
    let t = Template::load_project(&TemplateOptions::default()).unwrap();
    let p = &t.parameters[name];
    let min = p
        .min_value
        .unwrap_or_else(|| panic!("{name} has no MinValue")) as u64;
    (min, p.max_value.map(|m| m as u64))
}

/// The SQS consumers of `t`: each function, its queue and its batch size.
fn consumers(t: &Template) -> Vec<(&Function, &Queue, u32)> {
    let found: Vec<_> = t
        .sqs_event_sources()
        .map(|(f, e)| (f, &t.queues[&e.queue], e.batch_size))
        .collect();
    assert_eq!(found.len(), 2, "payment-processor and receipt-sender");
    found
}

/// The consumer's settings, from its environment in the template (the variables whose value
/// the template states).
fn config(f: &Function) -> ConsumerConfig {
    let env: BTreeMap<String, String> = f
        .environment
        .iter()
        .filter(|(name, _)| {
            [
                "MAX_ATTEMPTS",
                "BACKOFF_BASE_SECONDS",
                "BACKOFF_MAX_SECONDS",
                "EVENT_SOURCE_BATCH_SIZE",
                "IDEMPOTENCY_TTL_SECONDS",
            ]
            .contains(&name.as_str())
        })
        .filter_map(|(name, value)| Some((name.clone(), Expr::as_literal(value)?.to_owned())))
        .collect();
    assert_eq!(env.len(), 5, "{}: {env:?}", f.name);
    ConsumerConfig::from_lookup(|name| env.get(name).cloned()).unwrap()
}

/// The backoff schedule the consumer runs with `config`; `None` when it is off.
fn schedule(config: &ConsumerConfig) -> Option<RetrySchedule> {
    (!config.backoff_base.is_zero()).then(|| {
        RetrySchedule::new(
            config.backoff_base,
            config.backoff_max.max(config.backoff_base),
        )
    })
}

fn retention(q: &Queue) -> Duration {
    Duration::from_secs(q.message_retention_period.into())
}

#[derive(serde::Deserialize)]
struct Payment {
    id: String,
}

/// Payments through `f`'s consumer over `q`, as the template configures both, each failing its
/// first `counted` attempts (the handler's own failures, counted by the store), then each
/// failing a follow-up after its committed effect (not counted: an outage) until the outage
/// ends, a retention after the start. Returns what went wrong, empty when nothing did, and the
/// most receives of one message.
async fn outage(f: &Function, q: &Queue, counted: u32) -> (Vec<String>, u32) {
    let config = config(f);
    let clock = Arc::new(ManualClock::new(START_MS));
    let outage_ends_ms = START_MS + retention(q).as_millis() as i64;
    let sqs = InMemorySqs::new();
    let effects: Arc<Mutex<BTreeMap<String, u32>>> = Arc::default();
    let consumer = ConsumerBuilder::with_config(InMemoryBackend::default(), config)
        .with_in_memory_sqs(&sqs)
        .with_dead_letter_queue("https://dlq")
        .map_engine(|engine| engine.with_clock(clock.clone()))
        .map_processor(|processor| processor.with_clock(clock.clone()))
        .compose(|engine, keys| {
            let effects = effects.clone();
            let handler = json(move |p: Payment, ctx: RecordContext| {
                let effects = effects.clone();
                async move {
                    if ctx.attempt <= counted {
                        return Err(std::io::Error::other("the ledger is busy"));
                    }
                    *effects.lock().unwrap().entry(p.id.clone()).or_default() += 1;
                    Ok(p.id)
                }
            });
            let clock = clock.clone();
            handler.idempotent(engine).with_keys(keys).and_then(
                move |_done, _ctx: RecordContext| {
                    let down = clock.now_ms() < outage_ends_ms;
                    async move {
                        if down {
                            Err("the receipts queue refused the send")
                        } else {
                            Ok(())
                        }
                    }
                },
            )
        });
    // A FIFO queue's ten in one group (each held behind the ones before it); on a standard
    // queue three, each failing alone.
    let count = if q.fifo { 10 } else { 3 };
    let messages: Vec<(String, String)> = (1..=count)
        .map(|i| (format!("p{i:02}"), format!(r#"{{"id":"p{i:02}"}}"#)))
        .collect();
    let max_receive_count = q.redrive.as_ref().unwrap().max_receive_count;
    let queue = SimQueue::grouped(q.fifo, &messages, "account-a", START_MS)
        .max_receive_count(max_receive_count)
        .visibility_timeout(Duration::from_secs(q.visibility_timeout.into()));
    let drained = sim_queue::drain(queue, &clock, &Crash::default(), &sqs, |event| {
        let consumer = &consumer;
        async move { consumer.handle(event).await.map_err(|e| e.to_string()) }
    })
    .await;
    let mut problems = drained.problems();
    let effects = effects.lock().unwrap().clone();
    for (id, _) in &messages {
        if effects.get(id) != Some(&1) {
            problems.push(format!("{id} took effect {:?} times", effects.get(id)));
        }
    }
    if !problems.is_empty() {
        problems.insert(
            0,
            format!(
                "{} (maxReceiveCount {max_receive_count}, {} invocations, receive counts {})",
                q.logical_id, drained.invocations, drained.queue
            ),
        );
    }
    (problems, drained.queue.max_receives)
}

/// The extremes of every parameter: `MaxAttempts` 1, 2, 3 and 10, `BackoffBaseSeconds` at its
/// `MinValue` and the default 2, `BackoffMaxSeconds` at its `MinValue` and `MaxValue`. On each
/// queue, an outage as long as its retention, from the messages' first receive, and after each
/// message used all but its last attempt: nothing moved, nothing dead-lettered, each payment
/// took effect once.
#[tokio::test]
async fn an_outage_as_long_as_the_retention_moves_nothing_at_the_extremes() {
    let (base_min, _) = bounds("BackoffBaseSeconds");
    let (max_min, max_max) = bounds("BackoffMaxSeconds");
    let mut failed = Vec::new();
    for max_attempts in [1, 2, 3, 10] {
        for backoff_base in [base_min, 2] {
            for backoff_max in [max_min, max_max.expect("BackoffMaxSeconds has a MaxValue")] {
                let setting = Setting {
                    max_attempts,
                    backoff_base,
                    backoff_max,
                };
                let t = setting.template().unwrap();
                for (f, q, _) in consumers(&t) {
                    // Fresh at the outage's start, and after all but the last attempt.
                    for counted in std::collections::BTreeSet::from([0, max_attempts - 1]) {
                        let (problems, most) = outage(f, q, counted).await;
                        let m = q.redrive.as_ref().unwrap().max_receive_count;
                        println!(
                            "{setting}, {} after {counted} failed attempts: {}",
                            q.logical_id,
                            if problems.is_empty() {
                                format!("nothing moved, at most {most} of {m} receives")
                            } else {
                                problems.join("; ")
                            }
                        );
                        if !problems.is_empty() {
                            failed.push(format!(
                                "{setting}, {counted} failed attempts: {problems:?}"
                            ));
                        }
                    }
                }
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// For every `MaxAttempts` and a range of backoffs from the slowest the template allows, each
/// consumer's cold-start check ([`outage_cover`], with the queue's retention and the backoff the
/// consumer runs) accepts the template's `maxReceiveCount`; at the slowest backoff it is exactly
/// what the check requires. A backoff turned off (`BackoffBaseSeconds` 0) is refused by the
/// template, and the check would refuse it at any `maxReceiveCount` the mapping gives.
#[test]
fn the_template_and_the_cold_start_check_agree_at_every_allowed_setting() {
    let (base_min, _) = bounds("BackoffBaseSeconds");
    let (max_min, max_max) = bounds("BackoffMaxSeconds");
    let max_max = max_max.expect("BackoffMaxSeconds has a MaxValue");
    let t = Template::load_project(&TemplateOptions::default()).unwrap();
    let allowed = &t.parameters["MaxAttempts"].allowed_values;
    assert_eq!(allowed.len(), 10, "{allowed:?}");
    let bases = (base_min..base_min + 10).chain([60, 3600, 39_600]);
    for backoff_base in bases {
        for backoff_max in [max_min, 300, max_max] {
            for n in allowed {
                let setting = Setting {
                    max_attempts: n.parse().unwrap(),
                    backoff_base,
                    backoff_max,
                };
                let t = setting.template().unwrap();
                assert_eq!(t.check(), vec![], "{setting}");
                for (f, q, batch_size) in consumers(&t) {
                    let config = config(f);
                    let m = q.redrive.as_ref().unwrap().max_receive_count;
                    let cover = outage_cover(
                        m,
                        batch_size,
                        config.max_attempts.unwrap(),
                        retention(q),
                        schedule(&config),
                        Duration::from_secs(q.visibility_timeout.into()),
                    );
                    assert!(cover.holds(), "{setting}, {}: {cover}", q.logical_id);
                    if backoff_base == base_min {
                        assert_eq!(cover.required, m, "{setting}, {}: {cover}", q.logical_id);
                    }
                    // Without a backoff no mapping's count would do.
                    let off = outage_cover(
                        m,
                        batch_size,
                        setting.max_attempts,
                        retention(q),
                        None,
                        Duration::from_secs(q.visibility_timeout.into()),
                    );
                    assert!(!off.holds(), "{setting}, {}: {off}", q.logical_id);
                }
            }
        }
    }
    let off = Setting {
        max_attempts: 5,
        backoff_base: 0,
        backoff_max: 300,
    };
    let refused = off.template().unwrap_err();
    assert!(refused.contains("BackoffBaseSeconds"), "{refused}");
}
