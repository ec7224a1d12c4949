//! The consumer as `Consumer::from_env` builds it, on a local endpoint (moto): its cold-start
//! checks, off the init path, and its safe defaults (budget, backoff, dead-letter queue).

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextMut, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_sqs::types::QueueAttributeName;
use lambda_idempotency::consumer::{ConsumerBuilder, ConsumerConfig, ConsumerError};
use lambda_idempotency::count::RequestCounter;
use lambda_idempotency::dead_letter::REASON_ATTRIBUTE;
use lambda_idempotency::prelude::*;
use lambda_idempotency::redrive_policy::RedriveCheck;
use lambda_idempotency::store::StoreError;
use lambda_runtime::{Context, LambdaEvent};

fn event(arn: &str, records: &[(&str, &str)]) -> LambdaEvent<SqsEvent> {
    let mut event = SqsEvent::default();
    for (id, body) in records {
        let mut m = SqsMessage::default();
        m.message_id = Some((*id).into());
        m.body = Some((*body).into());
        m.receipt_handle = Some(format!("handle-{id}"));
        m.attributes
            .insert("ApproximateReceiveCount".into(), "1".into());
        m.event_source_arn = Some(arn.into());
        event.records.push(m);
    }
    LambdaEvent::new(event, Context::default())
}

fn config(vars: &[(&str, &str)]) -> ConsumerConfig {
    let vars: HashMap<&str, &str> = vars.iter().copied().collect();
    ConsumerConfig::from_lookup(|name| vars.get(name).map(|v| v.to_string())).unwrap()
}

async fn queue(
    sqs: &aws_sdk_sqs::Client,
    attributes: &[(QueueAttributeName, String)],
) -> (String, String) {
    common::create_queue(sqs, &common::unique("q"), attributes).await
}

/// A handler that counts its runs and fails permanently on `{"n":0}`.
fn counting(runs: Arc<AtomicU32>) -> impl RecordHandler<Output = u32> + 'static {
    json(move |body: serde_json::Value, _ctx: RecordContext| {
        let runs = runs.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            match body["n"].as_u64() {
                Some(0) => Err(Error::from(PermanentError::new("n is 0"))),
                n => Ok(n.unwrap_or_default() as u32),
            }
        }
    })
}

#[tokio::test]
async fn a_table_that_cannot_serve_fails_every_batch_until_it_is_fixed() {
    let sdk = common::sdk_config().await;
    let table = common::unique("missing");
    let runs = Arc::new(AtomicU32::new(0));
    let builder =
        ConsumerBuilder::from_config(&sdk, config(&[("IDEMPOTENCY_TABLE", &table)])).unwrap();
    let consumer = builder.idempotent(counting(runs.clone()));
    let arn = "arn:aws:sqs:us-east-1:123456789012:nowhere";

    for _ in 0..2 {
        let error = consumer
            .process(&event(arn, &[("m-1", r#"{"n":1}"#)]))
            .await
            .unwrap_err();
        assert!(
            matches!(&error, ConsumerError::Table(StoreError::Misconfigured { table: t, .. }) if *t == table),
            "{error}"
        );
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "no record runs against a table that cannot hold its record"
    );

    // Once the table is there, the next batch checks again, and runs.
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    common::create_table_named(&dynamodb, &table, "id", "expiration").await;
    let report = consumer
        .process(&event(arn, &[("m-1", r#"{"n":1}"#)]))
        .await
        .unwrap();
    assert!(report.response().batch_item_failures.is_empty());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let found = consumer.cold_start_report(None).await.unwrap();
    assert_eq!(
        found.table_warnings,
        Some(vec![]),
        "the table has its TTL: nothing to warn of"
    );
}

#[tokio::test]
async fn the_defaults_dead_letter_with_the_reason_and_check_the_queue() {
    let sdk = common::sdk_config().await;
    let sqs = common::sqs(&RequestCounter::default()).await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let table = common::create_table(&dynamodb, "id", "expiration").await;
    let (dead_letter_url, dead_letter_arn) = queue(&sqs, &[]).await;
    // The queue's own redrive moves a message after 3 receives: too few for 5 attempts in
    // batches of 10, where a message can be received 41 times without running out.
    let policy = format!(r#"{{"deadLetterTargetArn":"{dead_letter_arn}","maxReceiveCount":3}}"#);
    let (_, source_arn) = queue(&sqs, &[(QueueAttributeName::RedrivePolicy, policy)]).await;
    let runs = Arc::new(AtomicU32::new(0));
    let vars = [
        ("IDEMPOTENCY_TABLE", table.as_str()),
        ("DEAD_LETTER_QUEUE_URL", &dead_letter_url),
    ];
    let consumer = ConsumerBuilder::from_config(&sdk, config(&vars))
        .unwrap()
        .idempotent(counting(runs));

    let settings = format!("{:?}", consumer.processor());
    assert!(settings.contains("max_attempts: Some(5)"), "{settings}");
    assert!(settings.contains("backoff: Some("), "{settings}");
    assert!(
        settings.contains(&format!("queue_url: \"{dead_letter_url}\"")),
        "{settings}"
    );

    let report = consumer
        .process(&event(
            &source_arn,
            &[("ok", r#"{"n":2}"#), ("poison", r#"{"n":0}"#)],
        ))
        .await
        .unwrap();
    assert!(
        report.response().batch_item_failures.is_empty(),
        "the poison is acknowledged once moved"
    );
    assert_eq!(
        report
            .dead_lettered()
            .map(|r| r.message_id.as_str())
            .collect::<Vec<_>>(),
        ["poison"]
    );
    let moved = sqs
        .receive_message()
        .queue_url(&dead_letter_url)
        .message_attribute_names("All")
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default();
    assert_eq!(moved.len(), 1);
    let reason = moved[0].message_attributes.as_ref().unwrap()[REASON_ATTRIBUTE]
        .string_value
        .clone();
    assert!(reason.unwrap().contains("n is 0"));

    // The queue's check ran on the event's queue (no SOURCE_QUEUE_URL) and found the low count.
    let found = consumer.cold_start_report(None).await.unwrap();
    let queue = found.queue.expect("the queue was checked");
    assert_eq!(
        queue.redrive,
        RedriveCheck::TooLow {
            max_receive_count: 3,
            required: 41
        }
    );
    assert_eq!(
        queue.dead_letter_arn.as_deref(),
        Some(dead_letter_arn.as_str())
    );
}

#[tokio::test]
async fn code_overrides_the_environment() {
    let sdk = common::sdk_config().await;
    let vars = [
        ("IDEMPOTENCY_TABLE", "t"),
        ("MAX_ATTEMPTS", "9"),
        ("DEAD_LETTER_QUEUE_URL", "https://q"),
    ];
    let consumer = ConsumerBuilder::from_config(&sdk, config(&vars))
        .unwrap()
        .without_attempt_budget()
        .without_backoff()
        .idempotent(counting(Arc::default()));
    let settings = format!("{:?}", consumer.processor());
    assert!(settings.contains("max_attempts: None"), "{settings}");
    assert!(settings.contains("backoff: None"), "{settings}");
    assert!(settings.contains("queue_url: \"https://q\""), "{settings}");

    let missing = ConsumerBuilder::from_config(&sdk, config(&[])).unwrap_err();
    assert_eq!(
        missing.to_string(),
        "the environment variable IDEMPOTENCY_TABLE is not set"
    );
}

/// Answers one DynamoDB operation with an error of `code` (HTTP 400, as DynamoDB answers an IAM
/// denial or throttling), whatever the endpoint said; the others go through.
#[derive(Debug, Clone)]
struct Refuse {
    operation: &'static str,
    code: &'static str,
    sending: Arc<std::sync::Mutex<String>>,
}

impl Intercept for Refuse {
    fn name(&self) -> &'static str {
        "Refuse"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        let target = context.request().headers().get("x-amz-target");
        *self.sending.lock().unwrap() = target
            .and_then(|t| t.rsplit('.').next())
            .unwrap_or_default()
            .to_owned();
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        if *self.sending.lock().unwrap() == self.operation {
            let response = context.response_mut();
            *response.status_mut() = 400.try_into().unwrap();
            *response.body_mut() = format!(
                r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{}","message":"refused by the test"}}"#,
                self.code
            )
            .into();
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_table_check_that_cannot_run_warns_and_the_records_are_processed() {
    let sdk = common::sdk_config().await;
    let table =
        common::create_table(&aws_sdk_dynamodb::Client::new(&sdk), "id", "expiration").await;
    for code in ["AccessDeniedException", "ThrottlingException"] {
        let refuse = Refuse {
            operation: "DescribeTable",
            code,
            sending: Arc::default(),
        };
        let dynamodb = aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(&sdk)
                .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
                .interceptor(refuse)
                .build(),
        );
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        let runs = Arc::new(AtomicU32::new(0));
        let consumer =
            ConsumerBuilder::from_clients(dynamodb, sqs, config(&[("IDEMPOTENCY_TABLE", &table)]))
                .unwrap()
                .idempotent(counting(runs.clone()));
        let arn = "arn:aws:sqs:us-east-1:123456789012:nowhere";
        let id = format!("m-{code}");
        let report = consumer
            .process(&event(arn, &[(&id, r#"{"n":1}"#)]))
            .await
            .unwrap_or_else(|e| panic!("{code}: the batch failed: {e}"));
        assert!(report.response().batch_item_failures.is_empty(), "{code}");
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{code}: the record ran");

        // The check's failure is a warning naming the action, the table and the fix.
        let found = consumer.cold_start_report(None).await.unwrap();
        let warnings = found.table_warnings.expect("the table check ran");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        for says in [
            "dynamodb:DescribeTable",
            &format!("`{table}`"),
            code,
            "grant",
        ] {
            assert!(
                warnings[0].contains(says),
                "{code}: {says} in {}",
                warnings[0]
            );
        }
    }
}

#[tokio::test]
async fn the_local_cache_from_the_environment_answers_a_duplicate_without_a_request() {
    let sdk = common::sdk_config().await;
    let counter = RequestCounter::default();
    let dynamodb = common::dynamodb(&counter).await;
    let table = common::create_table(&dynamodb, "id", "expiration").await;
    let arn = "arn:aws:sqs:us-east-1:123456789012:nowhere";
    let mut requests = Vec::new();
    for cache in ["100", ""] {
        let vars = [
            ("IDEMPOTENCY_TABLE", table.as_str()),
            ("IDEMPOTENCY_LOCAL_CACHE", cache),
            (
                "IDEMPOTENCY_KEY_PREFIX",
                if cache.is_empty() { "off" } else { "on" },
            ),
        ];
        let consumer = ConsumerBuilder::from_clients(
            dynamodb.clone(),
            aws_sdk_sqs::Client::new(&sdk),
            config(&vars),
        )
        .unwrap()
        .without_backoff()
        .idempotent(counting(Arc::default()));
        let first = consumer
            .process(&event(arn, &[("m-1", r#"{"n":1}"#)]))
            .await
            .unwrap();
        assert!(first.response().batch_item_failures.is_empty());
        counter.reset();
        let again = consumer
            .process(&event(arn, &[("m-1", r#"{"n":1}"#)]))
            .await
            .unwrap();
        assert!(
            again.successes().all(|(_, done)| done.is_duplicate()),
            "{again:?}"
        );
        requests.push(counter.snapshot());
    }
    assert_eq!(
        requests[0],
        Default::default(),
        "IDEMPOTENCY_LOCAL_CACHE=100: the duplicate costs no request"
    );
    assert_eq!(
        requests[1].get("UpdateItem"),
        Some(&1),
        "without it, one refused write: {:?}",
        requests[1]
    );
}
