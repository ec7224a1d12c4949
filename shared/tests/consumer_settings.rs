//! A consumer's settings checked when it is built: an expiry of 0 refused, an expiry shorter than
//! the retention rule and a missing dead-letter queue warned of, and a key pointer that finds
//! nothing in a message logged as an error (the pointer and the message's field names, never
//! their values) and counted in the `KeyMissing` metric. In memory: no endpoint.

#[path = "common/logs.rs"]
mod logs;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::consumer::{ConfigError, ConsumerBuilder, ConsumerConfig};
use lambda_idempotency::error::RecordError;
use lambda_idempotency::key::KeyError;
use lambda_idempotency::metrics;
use lambda_idempotency::prelude::*;
use lambda_idempotency::store::InMemoryBackend;
use lambda_runtime::{Context, LambdaEvent};
use logs::Logs;
use tracing::Level;

fn lookup(vars: &[(&str, &str)]) -> Result<ConsumerConfig, ConfigError> {
    let vars: HashMap<&str, &str> = vars.iter().copied().collect();
    ConsumerConfig::from_lookup(|name| vars.get(name).map(|v| v.to_string()))
}

fn builder(vars: &[(&str, &str)]) -> ConsumerBuilder<Arc<InMemoryBackend>> {
    ConsumerBuilder::with_config(Arc::new(InMemoryBackend::default()), lookup(vars).unwrap())
}

fn ok_handler() -> impl RecordHandler<Output = ()> + 'static {
    json(|_: serde_json::Value, _ctx: RecordContext| async { Ok::<_, Error>(()) })
}

fn event(records: &[(&str, &str)]) -> LambdaEvent<SqsEvent> {
    let mut event = SqsEvent::default();
    for (id, body) in records {
        let mut m = SqsMessage::default();
        m.message_id = Some((*id).into());
        m.body = Some((*body).into());
        m.attributes
            .insert("ApproximateReceiveCount".into(), "1".into());
        event.records.push(m);
    }
    LambdaEvent::new(event, Context::default())
}

#[test]
fn an_expiry_of_zero_is_refused() {
    let error = lookup(&[("IDEMPOTENCY_TTL_SECONDS", "0")]).unwrap_err();
    assert!(
        matches!(
            &error,
            ConfigError::Invalid {
                name: "IDEMPOTENCY_TTL_SECONDS",
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("IDEMPOTENCY_TTL_SECONDS"),
        "{error}"
    );
    assert_eq!(
        lookup(&[("IDEMPOTENCY_TTL_SECONDS", "1")]).unwrap().expiry,
        Duration::from_secs(1)
    );
}

#[tokio::test]
async fn an_expiry_shorter_than_the_retention_rule_warns_at_init() {
    let (logs, _guard) = Logs::capture();
    let _consumer = builder(&[
        ("IDEMPOTENCY_TTL_SECONDS", "3600"),
        ("DEAD_LETTER_QUEUE_URL", "https://sqs.example/dlq"),
    ])
    .idempotent(ok_handler());
    let warnings = logs.at(Level::WARN);
    let expiry: Vec<_> = warnings
        .iter()
        .filter(|w| w.contains("IDEMPOTENCY_TTL_SECONDS"))
        .collect();
    assert_eq!(expiry.len(), 1, "{warnings:#?}");
    for says in ["3600", "1555200", "retention"] {
        assert!(expiry[0].contains(says), "{says} in {}", expiry[0]);
    }

    // The default expiry is the rule's: no warning of it.
    let (logs, _guard) = Logs::capture();
    let _consumer =
        builder(&[("DEAD_LETTER_QUEUE_URL", "https://sqs.example/dlq")]).idempotent(ok_handler());
    let warnings = logs.at(Level::WARN);
    assert!(
        !warnings
            .iter()
            .any(|w| w.contains("IDEMPOTENCY_TTL_SECONDS")),
        "{warnings:#?}"
    );
}

#[tokio::test]
async fn no_dead_letter_queue_is_a_warning_naming_what_it_costs() {
    let (logs, _guard) = Logs::capture();
    let _consumer = builder(&[]).idempotent(ok_handler());
    let warnings = logs.at(Level::WARN);
    let found: Vec<_> = warnings
        .iter()
        .filter(|w| w.contains("DEAD_LETTER_QUEUE_URL"))
        .collect();
    assert_eq!(found.len(), 1, "{:#?}", logs.all());
    for says in [
        "permanent failure",
        "stays on the queue",
        "without its reason",
    ] {
        assert!(found[0].contains(says), "{says} in {}", found[0]);
    }
}

#[tokio::test]
async fn a_key_pointer_that_finds_nothing_is_an_error_with_the_field_names_and_a_metric() {
    let consumer = builder(&[
        ("IDEMPOTENCY_KEY", "/orderID"),
        ("DEAD_LETTER_QUEUE_URL", "https://sqs.example/dlq"),
    ])
    .idempotent(ok_handler());
    let (logs, _guard) = Logs::capture();
    let report = consumer
        .process(&event(&[
            ("m-1", r#"{"orderId":"o-secret-1","card":{"pan":"4111"}}"#),
            ("m-2", r#"{"orderID":"o-2"}"#),
        ]))
        .await
        .unwrap();
    assert!(
        matches!(
            &report.records[0].result,
            Err(RecordError::Key { source: KeyError::Missing(p), .. }) if p == "/orderID"
        ),
        "{:?}",
        report.records[0].result
    );
    assert!(report.records[1].result.is_ok());

    let errors = logs.at(Level::ERROR);
    let missing: Vec<_> = errors.iter().filter(|e| e.contains("/orderID")).collect();
    assert_eq!(missing.len(), 1, "{errors:#?}");
    for says in ["m-1", "orderId", "card"] {
        assert!(missing[0].contains(says), "{says} in {}", missing[0]);
    }
    for never in ["o-secret-1", "4111", "pan"] {
        assert!(!missing[0].contains(never), "{never} in {}", missing[0]);
    }

    // The metric an alarm watches: one missing key in this batch.
    let line = metrics::key_missing(&report, "orders-consumer").expect("a KeyMissing metric");
    assert_eq!(line.value(metrics::KEY_MISSING), Some(1.0));
    let emf: serde_json::Value = serde_json::from_str(&line.to_json(0)).unwrap();
    assert_eq!(emf["KeyMissing"], 1);
    assert_eq!(emf[metrics::FUNCTION_DIMENSION], "orders-consumer");

    // None when every key was found.
    let fine = consumer
        .process(&event(&[("m-3", r#"{"orderID":"o-3"}"#)]))
        .await
        .unwrap();
    assert!(metrics::key_missing(&fine, "orders-consumer").is_none());
}
