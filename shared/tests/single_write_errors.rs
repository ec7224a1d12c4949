//! How the inline mode's single write (one conditional `PutItem` that carries the record)
//! classifies DynamoDB's refusals other than a failed condition, with mocked SDK responses
//! (`aws-smithy-mocks`, no AWS): another transaction on the item is contention, tried again and
//! never permanent; throttling is a store error, tried again, never counted against the budget;
//! an item over the size limit is the write's rejection, permanent and counted. And the `ClientRequestToken` of a
//! transaction: repeated for a try after a lost answer, new after contention.

mod common;

use std::sync::{Arc, Mutex};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::ErrorMetadata;
use aws_sdk_dynamodb::operation::put_item::{PutItemError, PutItemOutput};
use aws_sdk_dynamodb::operation::transact_write_items::{
    TransactWriteItemsError, TransactWriteItemsOutput,
};
use aws_sdk_dynamodb::operation::update_item::UpdateItemOutput;
use aws_sdk_dynamodb::types::error::{
    ProvisionedThroughputExceededException, TransactionCanceledException,
    TransactionConflictException,
};
use aws_sdk_dynamodb::types::{AttributeValue, CancellationReason, TransactWriteItem, Update};
use aws_smithy_mocks::{Rule, RuleMode, mock, mock_client};
use common::{Sent, dead_letter_queue};
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{BatchProcessor, BatchReport, RecordHandlerExt, message};
use lambda_idempotency::error::RecordError;
use lambda_idempotency::inline::InlinePut;
use lambda_idempotency::store::{DynamoDbBackend, NewItem, StoreError};
use lambda_idempotency::transaction::{COMMIT_TRIES, TransactError, Transacted, Transaction};
use lambda_runtime::{Context, LambdaEvent};

const TABLE: &str = "idempotency";

/// A client answering with `rules` (any order), without the SDK's own retries: every try counted
/// is the engine's.
fn client(rules: &[&Rule]) -> Client {
    mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, rules, |c| c
        .retry_config(
            aws_sdk_dynamodb::config::retry::RetryConfig::disabled()
        ))
}

fn engine(client: Client) -> Idempotency<DynamoDbBackend> {
    Idempotency::new(DynamoDbBackend::new(client, TABLE))
}

/// The handler's one new item: a receipt.
async fn receipt() -> Result<InlinePut<&'static str, NewItem>, std::io::Error> {
    let item = NewItem::new("receipts", "pk", AttributeValue::S("r-1".into()))
        .attribute("amountCents", AttributeValue::N("500".into()));
    Ok(InlinePut::new("charged", item))
}

/// The failure update of a record: its attempts are now 1.
fn failure_recorded() -> Rule {
    mock!(Client::update_item).then_output(|| {
        UpdateItemOutput::builder()
            .attributes("attempts", AttributeValue::N("1".into()))
            .build()
    })
}

/// Another transaction on the item, as the SDK reads DynamoDB's answer (its code in the
/// error's metadata).
fn conflict() -> PutItemError {
    let message = "Transaction is ongoing for the item";
    PutItemError::TransactionConflictException(
        TransactionConflictException::builder()
            .message(message)
            .meta(
                ErrorMetadata::builder()
                    .code("TransactionConflictException")
                    .message(message)
                    .build(),
            )
            .build(),
    )
}

/// One message, first delivery, through the inline wrapper over `client`, with a dead-letter
/// queue and a budget of one attempt; and what was sent to the queue.
async fn through_a_batch(client: Client) -> (BatchReport<impl std::fmt::Debug>, usize) {
    let mut m = SqsMessage::default();
    m.message_id = Some("m-1".into());
    m.receipt_handle = Some("rh-1".into());
    m.body = Some(r#"{"id":"r-1"}"#.into());
    m.attributes
        .insert("ApproximateReceiveCount".into(), "1".into());
    m.event_source_arn = Some("arn:aws:sqs:us-east-1:123456789012:payments".into());
    let mut event = SqsEvent::default();
    event.records = vec![m];
    let handler = message(|_, _| receipt()).inline(engine(client));
    let sent = Sent::default();
    let report = BatchProcessor::new()
        .with_dead_letter(dead_letter_queue(&sent))
        .max_attempts(1)
        .process(&LambdaEvent::new(event, Context::default()), &handler)
        .await
        .unwrap();
    let sent = sent.lock().unwrap().len();
    (report, sent)
}

/// The one record of `report`, left for redelivery: not permanent, not an attempt, nothing
/// dead-lettered; its store error.
fn left_for_redelivery<T: std::fmt::Debug>(report: &BatchReport<T>, sent: usize) -> &StoreError {
    let failed: Vec<_> = report
        .response()
        .batch_item_failures
        .into_iter()
        .map(|f| f.item_identifier)
        .collect();
    assert_eq!(failed, ["m-1"], "{report:?}");
    assert_eq!((report.dead_lettered().count(), sent), (0, 0), "{report:?}");
    let error = report.records[0].result.as_ref().unwrap_err();
    assert!(!error.is_permanent(), "{error}");
    assert!(
        !error.is_attempt(),
        "not counted against the budget: {error}"
    );
    match error.cause() {
        RecordError::Store(e) => e,
        other => panic!("expected a store error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_put_item_transaction_conflict_is_tried_again_and_never_permanent() {
    let put = mock!(Client::put_item).then_error(conflict);
    let update = failure_recorded();
    let error = engine(client(&[&put, &update]))
        .put_inline("r-1", b"body", receipt)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, TransactError::Contended { tries, reason }
            if *tries == COMMIT_TRIES && reason.starts_with("TransactionConflict")),
        "{error:?}"
    );
    assert_eq!(put.num_calls(), COMMIT_TRIES as usize);
    assert_eq!(error.attempts(), None);
    assert_eq!(update.num_calls(), 0, "not recorded as a failed attempt");

    // The second try writes it.
    let once = mock!(Client::put_item)
        .sequence()
        .error(conflict)
        .output(|| PutItemOutput::builder().build())
        .build();
    let done = engine(client(&[&once]))
        .put_inline("r-1", b"body", receipt)
        .await
        .unwrap();
    assert_eq!(done, Transacted::Committed("charged"));
    assert_eq!(once.num_calls(), 2);

    let put = mock!(Client::put_item).then_error(conflict);
    let (report, sent) = through_a_batch(client(&[&put])).await;
    let error = left_for_redelivery(&report, sent);
    assert!(matches!(error, StoreError::Contended { .. }), "{error:?}");
}

#[tokio::test]
async fn a_throttled_put_item_is_tried_again_and_never_permanent() {
    let throttled = || {
        PutItemError::ProvisionedThroughputExceededException(
            ProvisionedThroughputExceededException::builder()
                .message(
                    "The level of configured provisioned throughput for the table was exceeded",
                )
                .build(),
        )
    };
    let generic = || {
        PutItemError::generic(
            ErrorMetadata::builder()
                .code("ThrottlingException")
                .message("Rate of requests exceeds the allowed throughput")
                .build(),
        )
    };
    for answer in [throttled as fn() -> PutItemError, generic] {
        let put = mock!(Client::put_item).then_error(answer);
        let update = failure_recorded();
        let error = engine(client(&[&put, &update]))
            .put_inline("r-1", b"body", receipt)
            .await
            .unwrap_err();
        assert!(
            matches!(
                &error,
                TransactError::Store(StoreError::Request {
                    operation: "PutItem",
                    ..
                })
            ),
            "{error:?}"
        );
        assert_eq!(put.num_calls(), COMMIT_TRIES as usize, "{error}");
        assert_eq!(error.attempts(), None);
        assert_eq!(update.num_calls(), 0, "not recorded as a failed attempt");

        let put = mock!(Client::put_item).then_error(answer);
        let (report, sent) = through_a_batch(client(&[&put])).await;
        let error = left_for_redelivery(&report, sent);
        assert!(matches!(error, StoreError::Request { .. }), "{error:?}");
    }
}

#[tokio::test]
async fn a_put_item_size_validation_exception_is_permanent_and_counted() {
    let too_large = || {
        PutItemError::generic(
            ErrorMetadata::builder()
                .code("ValidationException")
                .message("Item size has exceeded the maximum allowed size")
                .build(),
        )
    };
    let put = mock!(Client::put_item).then_error(too_large);
    let update = failure_recorded();
    let error = engine(client(&[&put, &update]))
        .put_inline("r-1", b"body", receipt)
        .await
        .unwrap_err();
    // The one write's refusal, as a transaction's cancellation reason for that write reads.
    let TransactError::Rejected {
        rejection,
        attempts: Some(1),
    } = &error
    else {
        panic!("expected the write's rejection, counted, got {error:?}");
    };
    assert_eq!(
        (rejection.index, rejection.code.as_str()),
        (0, "ValidationException")
    );
    assert!(!rejection.is_condition());
    assert!(
        rejection.message.contains("Item size has exceeded"),
        "{rejection}"
    );
    assert_eq!(put.num_calls(), 1, "not tried again");
    assert_eq!(update.num_calls(), 1, "recorded as a failed attempt");

    // In a batch: permanent, dead-lettered at once.
    let put = mock!(Client::put_item).then_error(too_large);
    let update = failure_recorded();
    let (report, sent) = through_a_batch(client(&[&put, &update])).await;
    assert!(
        report.response().batch_item_failures.is_empty(),
        "{report:?}"
    );
    assert_eq!((report.dead_lettered().count(), sent), (1, 1));
    let error = report.records[0].result.as_ref().unwrap_err();
    assert!(error.is_permanent(), "{error}");
}

/// A transaction of one update on the ledger, its record beside it.
async fn charge() -> Result<Transaction<&'static str, TransactWriteItem>, std::io::Error> {
    let write = Update::builder()
        .table_name("ledger")
        .key("pk", AttributeValue::S("account-1".into()))
        .update_expression("ADD balance :amount")
        .expression_attribute_values(":amount", AttributeValue::N("5".into()))
        .build()
        .unwrap();
    Ok(Transaction::new("charged").update(write))
}

#[tokio::test]
async fn the_request_token_is_repeated_after_a_lost_answer_and_new_after_contention() {
    let tokens: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = tokens.clone();
    let cancelled = || {
        TransactWriteItemsError::TransactionCanceledException(
            TransactionCanceledException::builder()
                .message("Transaction cancelled [None, TransactionConflict]")
                .cancellation_reasons(CancellationReason::builder().code("None").build())
                .cancellation_reasons(
                    CancellationReason::builder()
                        .code("TransactionConflict")
                        .message("Transaction is ongoing for the item")
                        .build(),
                )
                .build(),
        )
    };
    // A lost answer (HTTP 500), a conflict, then the commit.
    let transact = mock!(Client::transact_write_items)
        .match_requests(move |input| {
            let token = input.client_request_token().unwrap_or_default().to_owned();
            seen.lock().unwrap().push(token);
            true
        })
        .sequence()
        .http_status(500, None)
        .error(cancelled)
        .output(|| TransactWriteItemsOutput::builder().build())
        .build();
    let done = engine(client(&[&transact]))
        .transact("p-1", b"body", None, charge)
        .await
        .unwrap();
    assert_eq!(done, Transacted::Committed("charged"));
    let tokens = tokens.lock().unwrap().clone();
    assert_eq!(tokens.len(), 3, "{tokens:?}");
    assert_eq!(
        tokens[0], tokens[1],
        "a try after a lost answer repeats the request"
    );
    assert_ne!(
        tokens[1], tokens[2],
        "a try after contention is a new request"
    );
    for token in &tokens {
        assert!(
            (1..=36).contains(&token.len()) && token.bytes().all(|b| b.is_ascii_graphic()),
            "a ClientRequestToken DynamoDB takes: {token}"
        );
    }
    // Another attempt at the same key sends other tokens.
    let other: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = other.clone();
    let transact = mock!(Client::transact_write_items)
        .match_requests(move |input| {
            let token = input.client_request_token().unwrap_or_default().to_owned();
            seen.lock().unwrap().push(token);
            true
        })
        .then_output(|| TransactWriteItemsOutput::builder().build());
    engine(client(&[&transact]))
        .transact("p-1", b"body", None, charge)
        .await
        .unwrap();
    let other = other.lock().unwrap().clone();
    assert!(!tokens.contains(&other[0]), "{other:?} vs {tokens:?}");
}
