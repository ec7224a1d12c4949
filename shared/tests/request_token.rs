//! What a commit sends DynamoDB to make a retried try safe (docs/modes.md, "Transactional
//! mode"), with mocked SDK responses: a `TransactWriteItems` carries a `ClientRequestToken` made
//! of the attempt's owner token and a round, repeated when a try's answer may be lost and moved
//! on after a cancellation; a commit of one write is one `PutItem` or `UpdateItem`, which takes
//! no token, and an inline item that write finds too large is permanent.

use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::ErrorMetadata;
use aws_sdk_dynamodb::operation::transact_write_items::{
    TransactWriteItemsError, TransactWriteItemsOutput,
};
use aws_sdk_dynamodb::operation::update_item::UpdateItemOutput;
use aws_sdk_dynamodb::types::error::TransactionCanceledException;
use aws_sdk_dynamodb::types::{AttributeValue, CancellationReason, TransactWriteItem, Update};
use aws_smithy_mocks::{Rule, RuleMode, mock, mock_client};
use lambda_idempotency::Idempotency;
use lambda_idempotency::store::DynamoDbBackend;
use lambda_idempotency::transaction::{Transacted, Transaction};

fn client(rules: &[&Rule]) -> Client {
    mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, rules, |c| c
        .retry_config(
            aws_sdk_dynamodb::config::retry::RetryConfig::disabled()
        ))
}

fn write() -> Update {
    Update::builder()
        .table_name("ledger")
        .key("pk", AttributeValue::S("account-1".into()))
        .update_expression("ADD balance :amount")
        .expression_attribute_values(":amount", AttributeValue::N("5".into()))
        .build()
        .unwrap()
}

async fn two_writes() -> Result<Transaction<&'static str, TransactWriteItem>, std::io::Error> {
    Ok(Transaction::new("charged").update(write()).update(write()))
}

fn conflict() -> TransactWriteItemsError {
    let reason = CancellationReason::builder()
        .code("TransactionConflict")
        .message("Transaction is ongoing for the item")
        .build();
    TransactWriteItemsError::TransactionCanceledException(
        TransactionCanceledException::builder()
            .message("Transaction cancelled")
            .set_cancellation_reasons(Some(vec![
                CancellationReason::builder().code("None").build(),
                reason.clone(),
                CancellationReason::builder().code("None").build(),
            ]))
            .build(),
    )
}

/// A failure whose answer may have been lost after a commit (an internal error, a timeout).
fn lost() -> TransactWriteItemsError {
    TransactWriteItemsError::generic(
        ErrorMetadata::builder()
            .code("InternalServerError")
            .message("Internal server error")
            .build(),
    )
}

#[tokio::test]
async fn a_lost_answer_repeats_the_token_and_a_cancellation_moves_its_round_on() {
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let seen = tokens.clone();
    let commit = mock!(Client::transact_write_items)
        .match_requests(move |request| {
            let token = request.client_request_token().unwrap_or("none").to_owned();
            seen.lock().unwrap().push(token);
            true
        })
        .sequence()
        .error(lost)
        .error(conflict)
        .output(|| TransactWriteItemsOutput::builder().build())
        .build();
    let engine = Idempotency::new(DynamoDbBackend::new(client(&[&commit]), "idempotency"));
    let done = engine
        .transact("payment-1", b"body", None, two_writes)
        .await;
    assert_eq!(done.unwrap(), Transacted::Committed("charged"));
    let tokens = tokens.lock().unwrap().clone();
    assert_eq!(tokens.len(), 3, "{tokens:?}");
    // The attempt's owner token (32 hex digits), then the round.
    let (owner, round) = tokens[0].split_once('-').expect("owner-round");
    assert!(
        owner.len() == 32 && owner.chars().all(|c| c.is_ascii_hexdigit()),
        "{owner}"
    );
    assert_eq!(round, "0");
    assert_eq!(
        tokens[1], tokens[0],
        "the try after a lost answer repeats the token"
    );
    assert_eq!(
        tokens[2],
        format!("{owner}-1"),
        "a cancelled try's successor is a new request"
    );
    assert!(!tokens[0].contains("payment-1"));

    // Another attempt at the same key: another owner token, so another request.
    let tokens_again = Arc::new(Mutex::new(Vec::new()));
    let seen = tokens_again.clone();
    let commit = mock!(Client::transact_write_items)
        .match_requests(move |request| {
            let token = request.client_request_token().unwrap_or("none").to_owned();
            seen.lock().unwrap().push(token);
            true
        })
        .then_output(|| TransactWriteItemsOutput::builder().build());
    let engine = Idempotency::new(DynamoDbBackend::new(client(&[&commit]), "idempotency"));
    engine
        .transact("payment-1", b"body", None, two_writes)
        .await
        .unwrap();
    let again = tokens_again.lock().unwrap()[0].clone();
    assert_ne!(again.split_once('-').unwrap().0, owner);
}

#[tokio::test]
async fn a_commit_of_one_carried_write_is_one_update_item_without_a_transaction() {
    let update = mock!(Client::update_item).then_output(|| UpdateItemOutput::builder().build());
    let transact = mock!(Client::transact_write_items)
        .then_output(|| TransactWriteItemsOutput::builder().build());
    let engine = Idempotency::new(DynamoDbBackend::new(
        client(&[&update, &transact]),
        "idempotency",
    ));
    let done = engine
        .transact("payment-1", b"body", None, || async {
            Ok::<_, std::io::Error>(
                Transaction::<_, TransactWriteItem>::new("charged").update_carrying_record(write()),
            )
        })
        .await;
    assert_eq!(done.unwrap(), Transacted::Committed("charged"));
    assert_eq!(update.num_calls(), 1);
    assert_eq!(transact.num_calls(), 0);
}

/// docs/modes.md, "Inline mode": an item over 400 KB is permanent. The single `PutItem`
/// refused for its size sends the message to the dead-letter queue at once, with its reason.
#[tokio::test]
async fn an_inline_item_refused_for_its_size_is_dead_lettered_at_once() {
    use aws_sdk_dynamodb::operation::put_item::PutItemError;
    use lambda_idempotency::prelude::*;
    use lambda_idempotency::test_util::{InMemorySqs, sqs_event};

    let put = mock!(Client::put_item).then_error(|| {
        PutItemError::generic(
            ErrorMetadata::builder()
                .code("ValidationException")
                .message("Item size has exceeded the maximum allowed size")
                .build(),
        )
    });
    // Whatever the engine records of the failed attempt.
    let update = mock!(Client::update_item).then_output(|| {
        UpdateItemOutput::builder()
            .attributes("attempts", AttributeValue::N("1".into()))
            .build()
    });
    let backend = DynamoDbBackend::new(client(&[&put, &update]), "idempotency");
    let sqs = InMemorySqs::new();
    async fn receipt(id: String, _ctx: RecordContext) -> Result<InlinePut<(), NewItem>, Error> {
        Ok(InlinePut::new(
            (),
            NewItem::new("receipts", "id", AttributeValue::S(id)),
        ))
    }
    let consumer = Consumer::builder(backend)
        .with_in_memory_sqs(&sqs)
        .inline(json(receipt));
    let report = consumer
        .process(&sqs_event([("m-1", r#""r-1""#)]))
        .await
        .unwrap();
    assert!(report.response().batch_item_failures.is_empty());
    assert_eq!(put.num_calls(), 1, "not tried again");
    let dead = sqs.dead_letters();
    assert_eq!(dead.len(), 1, "{report:?}");
    assert!(
        dead[0].reason.contains("Item size has exceeded"),
        "{}",
        dead[0].reason
    );
}
