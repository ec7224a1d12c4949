//! The DynamoDB backend when the SDK retries a write whose first answer was lost (the request was
//! applied, the response never arrived): the retry finds the attempt's own record. The lease
//! mode's writes are mocked with `aws-smithy-mocks`: the first try answers HTTP 500 (the SDK
//! retries it), the second answers as DynamoDB would after the first was applied. The failure of
//! the transactional and inline modes runs against the local endpoint (moto), with an interceptor
//! that turns the answer of a request that was applied into an HTTP 500, so that the retry meets
//! what the first try really left.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextMut, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::operation::update_item::{UpdateItemError, UpdateItemInput};
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::types::TransactWriteItem;
use aws_sdk_dynamodb::types::error::ConditionalCheckFailedException;
use aws_smithy_mocks::{RuleMode, mock, mock_client};
use lambda_idempotency::count::RequestCounter;
use lambda_idempotency::inline::InlinePut;
use lambda_idempotency::store::{DynamoDbBackend, NewItem, Updated};
use lambda_idempotency::transaction::{TransactError, Transacted, Transaction};
use lambda_idempotency::{Acquired, Idempotency};

/// The item as the first try of `input` left it, with `status`.
fn applied(input: &UpdateItemInput, status: &str) -> HashMap<String, AttributeValue> {
    let values = input.expression_attribute_values().unwrap();
    let mut item = HashMap::from([
        ("id".to_owned(), input.key().unwrap()["id"].clone()),
        ("status".to_owned(), AttributeValue::S(status.into())),
        ("owner".to_owned(), values[":owner"].clone()),
        ("attempts".to_owned(), AttributeValue::N("0".into())),
    ]);
    let expiry = values
        .get(":exp")
        .cloned()
        .unwrap_or(AttributeValue::N("9999999999".into()));
    item.insert("expiration".into(), expiry);
    if let Some(lease) = values.get(":lease") {
        item.insert("in_progress_expiration".into(), lease.clone());
    }
    if let Some(hash) = values.get(":hash") {
        item.insert("payload_hash".into(), hash.clone());
    }
    item
}

/// A write whose first try is applied and its answer lost (HTTP 500, which the SDK retries),
/// and whose retry then finds the attempt's own record, left in `status`: the condition fails and
/// DynamoDB returns the record (`ALL_OLD`). The rule keeps the first try's input, since a retry's
/// input is not shown to a mock.
fn answer_lost(status: &'static str) -> aws_smithy_mocks::Rule {
    let first: Arc<Mutex<Option<UpdateItemInput>>> = Arc::default();
    let seen = first.clone();
    mock!(aws_sdk_dynamodb::Client::update_item)
        .match_requests(move |input| {
            *seen.lock().unwrap() = Some(input.clone());
            true
        })
        .sequence()
        .http_status(500, None)
        .times(1)
        .error(move || {
            let input = first
                .lock()
                .unwrap()
                .clone()
                .expect("the first try was seen");
            UpdateItemError::ConditionalCheckFailedException(
                ConditionalCheckFailedException::builder()
                    .message("The conditional request failed")
                    .set_item(Some(applied(&input, status)))
                    .build(),
            )
        })
        .build()
}

/// An engine whose client serves `rules` in order, retrying a failed try once.
fn engine(rules: &[&aws_smithy_mocks::Rule]) -> Idempotency<DynamoDbBackend> {
    let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, rules, |c| {
        c.retry_config(
            RetryConfig::standard()
                .with_max_attempts(2)
                .with_initial_backoff(Duration::from_millis(1)),
        )
    });
    Idempotency::new(DynamoDbBackend::new(client, "idempotency")).with_key_prefix("fn")
}

#[tokio::test]
async fn a_retried_acquire_that_finds_its_own_lease_holds_the_key() {
    let lost = answer_lost("IN_PROGRESS");
    let engine = engine(&[&lost]);
    let acquired = engine.acquire("k", b"body", None).await.unwrap();
    assert!(matches!(acquired, Acquired::Started(_)), "{acquired:?}");
    assert_eq!(lost.num_calls(), 2, "the SDK retried");
}

#[tokio::test]
async fn a_retried_completion_that_finds_its_own_completed_record_succeeded() {
    let acquire = mock!(aws_sdk_dynamodb::Client::update_item).then_compute_output(|input| {
        aws_sdk_dynamodb::operation::update_item::UpdateItemOutput::builder()
            .set_attributes(Some(applied(input, "IN_PROGRESS")))
            .build()
    });
    let lost = answer_lost("COMPLETED");
    let engine = engine(&[&acquire, &lost]);
    let Acquired::Started(lease) = engine.acquire("k", b"body", None).await.unwrap() else {
        panic!("started");
    };
    assert!(
        matches!(
            engine.complete(&lease, None).await.unwrap(),
            Updated::Applied { .. }
        ),
        "its own completion, applied by the first try"
    );
    assert_eq!(lost.num_calls(), 2, "the SDK retried");
}

#[tokio::test]
async fn a_retried_failure_that_finds_its_own_failed_record_counts_once() {
    let acquire = mock!(aws_sdk_dynamodb::Client::update_item).then_compute_output(|input| {
        aws_sdk_dynamodb::operation::update_item::UpdateItemOutput::builder()
            .set_attributes(Some(applied(input, "IN_PROGRESS")))
            .build()
    });
    let lost = answer_lost("FAILED");
    let engine = engine(&[&acquire, &lost]);
    let Acquired::Started(lease) = engine.acquire("k", b"body", None).await.unwrap() else {
        panic!("started");
    };
    assert_eq!(
        engine.fail(&lease, "boom").await.unwrap(),
        Updated::Applied { attempts: Some(0) },
        "applied by the first try; the stored count is returned, not counted again"
    );
}

/// Loses the answer of the next request of the operation it is armed for: the request is
/// applied, and the SDK is shown an HTTP 500 instead of its answer, so it sends it again.
#[derive(Debug, Clone, Default)]
struct LoseAnswer {
    armed: Arc<Mutex<Option<&'static str>>>,
    sending: Arc<Mutex<String>>,
}

impl LoseAnswer {
    fn arm(&self, operation: &'static str) {
        *self.armed.lock().unwrap() = Some(operation);
    }
}

impl Intercept for LoseAnswer {
    fn name(&self) -> &'static str {
        "LoseAnswer"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        let operation = context
            .request()
            .headers()
            .get("x-amz-target")
            .and_then(|target| target.rsplit('.').next())
            .unwrap_or_default();
        *self.sending.lock().unwrap() = operation.to_owned();
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        let mut armed = self.armed.lock().unwrap();
        let sending = self.sending.lock().unwrap();
        if *armed == Some(sending.as_str()) && context.response().status().is_success() {
            *context.response_mut().status_mut() = 500.try_into().unwrap();
            *armed = None;
        }
        Ok(())
    }
}

/// An engine on a fresh table of the local endpoint, whose client loses answers when `lose` is
/// armed and retries at once; its requests counted by `counter`. Also the items' table (`pk`).
async fn on_moto(
    lose: &LoseAnswer,
    counter: &RequestCounter,
) -> (Idempotency<DynamoDbBackend>, String) {
    let config = aws_sdk_dynamodb::config::Builder::from(&common::sdk_config().await)
        .interceptor(counter.clone())
        .interceptor(lose.clone())
        .retry_config(
            RetryConfig::standard()
                .with_max_attempts(2)
                .with_initial_backoff(Duration::from_millis(1)),
        )
        .build();
    let client = aws_sdk_dynamodb::Client::from_conf(config);
    let table = common::create_table(&client, "id", "expiration").await;
    let items = common::create_table(&client, "pk", "ttl").await;
    let engine = Idempotency::new(DynamoDbBackend::new(client, table)).with_key_prefix("fn");
    (engine, items)
}

/// A failed attempt of the transactional mode, and one of the inline mode, each recorded with
/// one `UpdateItem` whose answer is lost: the SDK's retry finds the failed record this attempt
/// wrote, and the failure is counted once, the stored count answered.
#[tokio::test]
async fn a_retried_failure_that_finds_its_own_failed_record_is_counted_once() {
    let (lose, counter) = (LoseAnswer::default(), RequestCounter::default());
    let (engine, items) = on_moto(&lose, &counter).await;
    let boom = || std::io::Error::other("boom");
    for expected in 1..=2 {
        counter.reset();
        lose.arm("UpdateItem");
        let failed = engine
            .transact("tx", b"body", None, || async {
                Err::<Transaction<(), TransactWriteItem>, _>(boom())
            })
            .await;
        assert!(
            matches!(failed, Err(TransactError::Failed { attempts: Some(a), .. }) if a == expected),
            "transactional, failure {expected}: {failed:?}"
        );
        assert_eq!(
            counter.count("UpdateItem"),
            2,
            "the SDK retried the lost answer"
        );
        assert_eq!(engine.get("tx").await.unwrap().unwrap().attempts, expected);

        counter.reset();
        lose.arm("UpdateItem");
        let failed = engine
            .put_inline("in", b"body", || async {
                Err::<InlinePut<(), NewItem>, _>(boom())
            })
            .await;
        assert!(
            matches!(failed, Err(TransactError::Failed { attempts: Some(a), .. }) if a == expected),
            "inline, failure {expected}: {failed:?}"
        );
        assert_eq!(
            counter.count("UpdateItem"),
            2,
            "the SDK retried the lost answer"
        );
        assert_eq!(engine.get("in").await.unwrap().unwrap().attempts, expected);
    }
    // The same attempt's own commit, lost and retried, is still its own success.
    counter.reset();
    lose.arm("PutItem");
    let item = NewItem::new(&items, "pk", AttributeValue::S("in-1".into()));
    let written = engine
        .put_inline("in", b"body", || async {
            Ok::<_, std::io::Error>(InlinePut::new(1, item))
        })
        .await
        .unwrap();
    assert_eq!(written, Transacted::Committed(1));
    assert_eq!(
        counter.count("PutItem"),
        2,
        "the SDK retried the lost answer"
    );
}
