//! How the transactional mode classifies DynamoDB's answers, with mocked SDK responses
//! (`aws-smithy-mocks`, no AWS): only the message's own faults are permanent. Contention is
//! tried again and never permanent; a refusal for a table (a key schema, a missing table) is a
//! store error, tried once, not recorded and never dead-lettered; an item over the size limit is
//! permanent.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::ErrorMetadata;
use aws_sdk_dynamodb::operation::describe_table::{DescribeTableError, DescribeTableOutput};
use aws_sdk_dynamodb::operation::transact_write_items::{
    TransactWriteItemsError, TransactWriteItemsOutput,
};
use aws_sdk_dynamodb::operation::update_item::UpdateItemOutput;
use aws_sdk_dynamodb::types::error::{
    ResourceNotFoundException, TransactionCanceledException, TransactionInProgressException,
};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, CancellationReason, KeySchemaElement, KeyType,
    ScalarAttributeType, TableDescription, TransactWriteItem, Update,
};
use aws_smithy_mocks::{Rule, RuleMode, mock, mock_client};
use common::{Sent, dead_letter_queue};
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{
    BatchProcessor, BatchReport, Deduplicated, RecordContext, RecordError, RecordHandlerExt, json,
};
use lambda_idempotency::store::{DynamoDbBackend, StoreError};
use lambda_idempotency::transaction::{COMMIT_TRIES, TransactError, Transacted, Transaction};
use lambda_runtime::{Context, LambdaEvent};

const TABLE: &str = "idempotency";
const LEDGER: &str = "ledger";

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

/// The handler's one write: an increment on the ledger.
fn write() -> Update {
    Update::builder()
        .table_name(LEDGER)
        .key("pk", AttributeValue::S("account-1".into()))
        .update_expression("ADD balance :amount")
        .expression_attribute_values(":amount", AttributeValue::N("5".into()))
        .build()
        .unwrap()
}

async fn charge() -> Result<Transaction<&'static str, TransactWriteItem>, std::io::Error> {
    Ok(Transaction::new("charged").update(write()))
}

fn reason(code: &str, message: &str) -> CancellationReason {
    CancellationReason::builder()
        .code(code)
        .message(message)
        .build()
}

/// A cancelled transaction: the record's action passed, the ledger's write got `code`.
fn cancelled(code: &str, message: &str) -> TransactWriteItemsError {
    TransactWriteItemsError::TransactionCanceledException(
        TransactionCanceledException::builder()
            .message(format!(
                "Transaction cancelled, please refer cancellation reasons for specific reasons [None, {code}]"
            ))
            .cancellation_reasons(CancellationReason::builder().code("None").build())
            .cancellation_reasons(reason(code, message))
            .build(),
    )
}

/// A request refused as a whole with `code` (not a modeled error of the operation).
fn refused(code: &str, message: &str) -> TransactWriteItemsError {
    TransactWriteItemsError::generic(ErrorMetadata::builder().code(code).message(message).build())
}

/// A table whose partition key is `key` (S).
fn described(key: &str) -> DescribeTableOutput {
    DescribeTableOutput::builder()
        .table(
            TableDescription::builder()
                .table_name(TABLE)
                .key_schema(
                    KeySchemaElement::builder()
                        .attribute_name(key)
                        .key_type(KeyType::Hash)
                        .build()
                        .unwrap(),
                )
                .attribute_definitions(
                    AttributeDefinition::builder()
                        .attribute_name(key)
                        .attribute_type(ScalarAttributeType::S)
                        .build()
                        .unwrap(),
                )
                .build(),
        )
        .build()
}

/// The failure update of a record: its attempts are now 1.
fn failure_recorded() -> Rule {
    mock!(Client::update_item).then_output(|| {
        UpdateItemOutput::builder()
            .attributes("attempts", AttributeValue::N("1".into()))
            .build()
    })
}

fn describe_table(key: &'static str) -> Rule {
    mock!(Client::describe_table).then_output(move || described(key))
}

/// One payment, first delivery, standard queue.
fn delivery() -> LambdaEvent<SqsEvent> {
    let mut m = SqsMessage::default();
    m.message_id = Some("m-1".into());
    m.receipt_handle = Some("rh-1".into());
    m.body = Some(r#"{"id":"p-1"}"#.into());
    m.attributes
        .insert("ApproximateReceiveCount".into(), "1".into());
    m.event_source_arn = Some("arn:aws:sqs:us-east-1:123456789012:payments".into());
    let mut event = SqsEvent::default();
    event.records = vec![m];
    LambdaEvent::new(event, Context::default())
}

/// The record of `delivery()` through the transactional wrapper over `client`, with a
/// dead-letter queue and a budget of one attempt; and how many times the dead-letter hook fired
/// and what was sent to the queue.
async fn through_a_batch(client: Client) -> (BatchReport<Deduplicated<&'static str>>, u32, usize) {
    let hooked = Arc::new(AtomicU32::new(0));
    let h = hooked.clone();
    let handler = json(|_: serde_json::Value, _ctx: RecordContext| charge())
        .on_dead_letter(move |_| {
            h.fetch_add(1, Ordering::SeqCst);
            async {}
        })
        .transactional(engine(client));
    let sent = Sent::default();
    let report = BatchProcessor::new()
        .with_dead_letter(dead_letter_queue(&sent))
        .max_attempts(1)
        .process(&delivery(), &handler)
        .await
        .unwrap();
    let sent = sent.lock().unwrap().len();
    (report, hooked.load(Ordering::SeqCst), sent)
}

/// Asserts that the one record of `report` was left for redelivery, as a store error.
fn assert_left_for_redelivery<T: std::fmt::Debug>(
    report: &BatchReport<T>,
    hooked: u32,
    sent: usize,
) -> &StoreError {
    let failed: Vec<_> = report
        .response()
        .batch_item_failures
        .into_iter()
        .map(|f| f.item_identifier)
        .collect();
    assert_eq!(failed, ["m-1"], "{report:?}");
    assert_eq!(report.dead_lettered().count(), 0, "{report:?}");
    assert_eq!((hooked, sent), (0, 0), "nothing dead-lettered, no hook");
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
async fn a_transaction_conflict_is_tried_again_and_never_permanent() {
    // Every try meets another transaction.
    let conflict = mock!(Client::transact_write_items)
        .then_error(|| cancelled("TransactionConflict", "Transaction is ongoing for the item"));
    let error = engine(client(&[&conflict]))
        .transact("p-1", b"body", None, charge)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, TransactError::Contended { tries, reason }
            if *tries == COMMIT_TRIES && reason.starts_with("TransactionConflict")),
        "{error:?}"
    );
    assert_eq!(conflict.num_calls(), COMMIT_TRIES as usize);

    // The second try commits.
    let once = mock!(Client::transact_write_items)
        .sequence()
        .error(|| cancelled("TransactionConflict", "Transaction is ongoing for the item"))
        .output(|| TransactWriteItemsOutput::builder().build())
        .build();
    let done = engine(client(&[&once]))
        .transact("p-1", b"body", None, charge)
        .await
        .unwrap();
    assert_eq!(done, Transacted::Committed("charged"));
    assert_eq!(once.num_calls(), 2);

    // In a batch: left for redelivery, as the store's contention.
    let conflict = mock!(Client::transact_write_items)
        .then_error(|| cancelled("TransactionConflict", "Transaction is ongoing for the item"));
    let (report, hooked, sent) = through_a_batch(client(&[&conflict])).await;
    let error = assert_left_for_redelivery(&report, hooked, sent);
    assert!(matches!(error, StoreError::Contended { .. }), "{error:?}");
}

#[tokio::test]
async fn a_transaction_in_progress_is_tried_again_and_never_permanent() {
    let in_progress = mock!(Client::transact_write_items).then_error(|| {
        TransactWriteItemsError::TransactionInProgressException(
            TransactionInProgressException::builder()
                .message("The transaction with the given request token is already in progress")
                .build(),
        )
    });
    let error = engine(client(&[&in_progress]))
        .transact("p-1", b"body", None, charge)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, TransactError::Contended { tries, reason }
            if *tries == COMMIT_TRIES && reason.starts_with("TransactionInProgress")),
        "{error:?}"
    );
    assert_eq!(in_progress.num_calls(), COMMIT_TRIES as usize);

    let (report, hooked, sent) = through_a_batch(client(&[&in_progress])).await;
    let error = assert_left_for_redelivery(&report, hooked, sent);
    assert!(matches!(error, StoreError::Contended { .. }), "{error:?}");
}

#[tokio::test]
async fn a_key_schema_validation_exception_is_a_store_error_not_permanent() {
    let schema = || {
        refused(
            "ValidationException",
            "One or more parameter values were invalid: Missing the key pk in the item",
        )
    };
    // The idempotency table's partition key is `pk`: it is named, with what does not match.
    let transact = mock!(Client::transact_write_items).then_error(schema);
    let describe = describe_table("pk");
    let update = failure_recorded();
    let error = engine(client(&[&transact, &describe, &update]))
        .transact("p-1", b"body", None, charge)
        .await
        .unwrap_err();
    let TransactError::Store(StoreError::Misconfigured { table, problem }) = &error else {
        panic!("expected a misconfigured store, got {error:?}");
    };
    assert_eq!(table, TABLE);
    assert!(
        problem.contains(
            "table `idempotency` does not fit the backend: its partition key is `pk` (S), but \
             the backend writes `id` (S)"
        ),
        "{problem}"
    );
    assert_eq!(
        transact.num_calls(),
        1,
        "not tried again: it cannot succeed"
    );
    assert_eq!(describe.num_calls(), 1);
    assert_eq!(update.num_calls(), 0, "not recorded as a failed attempt");

    // The idempotency table fits: one of the handler's writes does not fit its table.
    let transact = mock!(Client::transact_write_items).then_error(schema);
    let describe = describe_table("id");
    let error = engine(client(&[&transact, &describe]))
        .transact("p-1", b"body", None, charge)
        .await
        .unwrap_err();
    let TransactError::Store(StoreError::Misconfigured { table, problem }) = &error else {
        panic!("expected a misconfigured store, got {error:?}");
    };
    assert_eq!(table, LEDGER);
    assert!(
        problem.contains("Missing the key pk in the item") && problem.contains("`ledger`"),
        "{problem}"
    );

    // A write refused for its table's key schema, by its cancellation reason: that table is
    // named, without the write's key values.
    let transact = mock!(Client::transact_write_items).then_error(|| {
        cancelled(
            "ValidationError",
            "The provided key element does not match the schema",
        )
    });
    let error = engine(client(&[&transact]))
        .transact("p-1", b"body", None, charge)
        .await
        .unwrap_err();
    let TransactError::Store(StoreError::Misconfigured { table, problem }) = &error else {
        panic!("expected a misconfigured store, got {error:?}");
    };
    assert_eq!(table, LEDGER);
    assert_eq!(
        problem,
        "table `ledger` refused write 0 of the transaction (Update): ValidationError: The \
         provided key element does not match the schema"
    );
    assert!(!problem.contains("account-1"), "no item values: {problem}");

    // Neither is an unknown cancellation code permanent.
    let transact = mock!(Client::transact_write_items).then_error(|| {
        cancelled(
            "ItemCollectionSizeLimitExceeded",
            "Collection size exceeded.",
        )
    });
    let error = engine(client(&[&transact]))
        .transact("p-1", b"body", None, charge)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, TransactError::Store(StoreError::Misconfigured { table, .. }) if table == LEDGER),
        "{error:?}"
    );

    // A missing table: the idempotency table, as DescribeTable says.
    let transact = mock!(Client::transact_write_items)
        .then_error(|| refused("ResourceNotFoundException", "Requested resource not found"));
    let describe = mock!(Client::describe_table).then_error(|| {
        DescribeTableError::ResourceNotFoundException(
            ResourceNotFoundException::builder()
                .message("Requested resource not found: Table: idempotency not found")
                .build(),
        )
    });
    let error = engine(client(&[&transact, &describe]))
        .transact("p-1", b"body", None, charge)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, TransactError::Store(StoreError::Misconfigured { table, problem })
            if table == TABLE && problem.contains("table `idempotency` does not exist")),
        "{error:?}"
    );

    // In a batch with a dead-letter queue: left for redelivery, the hook never fires.
    let transact = mock!(Client::transact_write_items).then_error(schema);
    let describe = describe_table("pk");
    let (report, hooked, sent) = through_a_batch(client(&[&transact, &describe])).await;
    let error = assert_left_for_redelivery(&report, hooked, sent);
    assert!(
        matches!(error, StoreError::Misconfigured { table, .. } if table == TABLE),
        "{error:?}"
    );
    assert!(
        report.records[0]
            .result
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("its partition key is `pk` (S)"),
        "the log names the mismatch"
    );
}

#[tokio::test]
async fn an_item_size_validation_exception_is_permanent() {
    // The whole request refused for an item's size.
    let transact = mock!(Client::transact_write_items).then_error(|| {
        refused(
            "ValidationException",
            "Item size has exceeded the maximum allowed size",
        )
    });
    let update = failure_recorded();
    let error = engine(client(&[&transact, &update]))
        .transact("p-1", b"body", None, charge)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, TransactError::TooLarge { message, attempts: Some(1) }
            if message.contains("Item size has exceeded")),
        "{error:?}"
    );
    assert_eq!(transact.num_calls(), 1, "not tried again");
    assert_eq!(update.num_calls(), 1, "recorded as a failed attempt");

    // One write refused for its size, by its cancellation reason.
    let grow = || {
        cancelled(
            "ValidationError",
            "Item size to update has exceeded the maximum allowed size",
        )
    };
    let transact = mock!(Client::transact_write_items).then_error(grow);
    let update = failure_recorded();
    let error = engine(client(&[&transact, &update]))
        .transact("p-1", b"body", None, charge)
        .await
        .unwrap_err();
    let TransactError::Rejected { rejection, .. } = &error else {
        panic!("expected a rejection, got {error:?}");
    };
    assert_eq!(rejection.index, 0);
    assert!(!rejection.is_condition());

    // In a batch: permanent, dead-lettered at once, the hook told.
    let transact = mock!(Client::transact_write_items).then_error(grow);
    let update = failure_recorded();
    let reset = mock!(Client::update_item)
        .match_requests(|r| r.update_expression() == Some("SET #attempts = :zero"))
        .then_output(|| UpdateItemOutput::builder().build());
    let (report, hooked, sent) = through_a_batch(client(&[&transact, &reset, &update])).await;
    assert!(
        report.response().batch_item_failures.is_empty(),
        "{report:?}"
    );
    assert_eq!(report.dead_lettered().count(), 1);
    assert_eq!((hooked, sent), (1, 1));
    let error = report.records[0].result.as_ref().unwrap_err();
    assert!(
        matches!(error.cause(), RecordError::Permanent(_)),
        "{error:?}"
    );
}
