//! The transactional mode against a real DynamoDB endpoint (moto): the record and the handler's
//! writes in one `TransactWriteItems`, every request counted.

/// The batch wrapper (`transactional`) over the same fixture.
#[path = "transactional/batch.rs"]
mod batch;
/// The record carried by one of the writes (`carry_record`).
#[path = "transactional/carried.rs"]
mod carried;
mod common;

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{
    BatchProcessor, Deduplicated, RecordContext, RecordError, RecordHandlerExt, json,
};
use lambda_idempotency::count::RequestCounter;
use lambda_idempotency::key::KeyConfig;
use lambda_idempotency::state::Status;
use lambda_idempotency::store::{DynamoDbBackend, LimitError, StoreError};
use lambda_idempotency::time::ManualClock;
use lambda_idempotency::transaction::{TransactError, Transacted, Transaction};
use lambda_runtime::{Context, LambdaEvent};

struct Fixture {
    counter: RequestCounter,
    client: aws_sdk_dynamodb::Client,
    engine: Idempotency<DynamoDbBackend>,
    /// The handler's table: string key `pk`.
    effects: String,
    clock: Arc<ManualClock>,
}

async fn fixture() -> Fixture {
    let counter = RequestCounter::default();
    let client = common::dynamodb(&counter).await;
    let idempotency = common::create_table(&client, "id", "expiration").await;
    let effects = common::create_table(&client, "pk", "ttl").await;
    let clock = Arc::new(ManualClock::starting_now());
    let engine = Idempotency::new(DynamoDbBackend::new(client.clone(), idempotency))
        .with_key_prefix("fn")
        .with_clock(clock.clone())
        .with_expiry(Duration::from_secs(3600));
    counter.reset();
    Fixture {
        counter,
        client,
        engine,
        effects,
        clock,
    }
}

type Tx<T> = Transaction<T, TransactWriteItem>;

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

/// A put of a new item `pk` into the effects table.
fn entry(table: &str, pk: &str) -> Put {
    Put::builder()
        .table_name(table)
        .item("pk", s(pk))
        .build()
        .unwrap()
}

/// Adds `amount` to the `balance` of item `pk`, when `condition` (if any) holds.
fn add(table: &str, pk: &str, amount: i64, condition: Option<&str>) -> Update {
    Update::builder()
        .table_name(table)
        .key("pk", s(pk))
        .update_expression("ADD balance :amount")
        .set_condition_expression(condition.map(str::to_owned))
        .expression_attribute_values(":amount", AttributeValue::N(amount.to_string()))
        .build()
        .unwrap()
}

async fn item(f: &Fixture, pk: &str) -> Option<std::collections::HashMap<String, AttributeValue>> {
    f.client
        .get_item()
        .table_name(&f.effects)
        .key("pk", s(pk))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item()
        .cloned()
}

async fn balance(f: &Fixture, pk: &str) -> Option<i64> {
    item(f, pk)
        .await?
        .get("balance")
        .map(|v| v.as_n().unwrap().parse().unwrap())
}

#[tokio::test]
async fn a_fresh_record_commits_its_record_and_writes_in_one_request() {
    let f = fixture().await;
    let work = || async {
        Ok::<_, std::io::Error>(
            Tx::new("entry-1".to_owned())
                .put(entry(&f.effects, "entry-1"))
                .update(add(&f.effects, "account-1", 500, None)),
        )
    };
    let done = f
        .engine
        .transact("p-1", b"{\"amount\":500}", None, work)
        .await
        .unwrap();
    assert_eq!(done, Transacted::Committed("entry-1".to_owned()));
    assert_eq!(f.counter.total(), 1, "{:?}", f.counter.snapshot());
    assert_eq!(f.counter.count("TransactWriteItems"), 1);

    assert!(
        item(&f, "entry-1").await.is_some(),
        "the handler's put applied"
    );
    assert_eq!(balance(&f, "account-1").await, Some(500));
    let record = f.engine.get("p-1").await.unwrap().expect("the record");
    assert_eq!(record.status, Status::Completed);
    assert_eq!(record.result.as_deref(), Some("\"entry-1\""));
    assert_eq!(
        record.lease_until_ms, None,
        "no lease: there is no in-progress state"
    );
}

#[tokio::test]
async fn a_duplicate_is_one_request_and_applies_nothing() {
    let f = fixture().await;
    let charge = |entry_id: &'static str| {
        let table = f.effects.clone();
        move || async move {
            Ok::<_, std::io::Error>(
                Tx::new(entry_id.to_owned())
                    .put(entry(&table, entry_id))
                    .update(add(&table, "account-1", 500, None)),
            )
        }
    };
    f.engine
        .transact("p-1", b"body", None, charge("entry-1"))
        .await
        .unwrap();
    f.counter.reset();

    let again = f
        .engine
        .transact("p-1", b"body", None, charge("entry-2"))
        .await
        .unwrap();
    assert_eq!(
        again,
        Transacted::Duplicate {
            stored: Some("\"entry-1\"".into())
        }
    );
    assert_eq!(f.counter.total(), 1, "{:?}", f.counter.snapshot());
    assert!(
        item(&f, "entry-2").await.is_none(),
        "the duplicate's put was not applied"
    );
    assert_eq!(balance(&f, "account-1").await, Some(500), "charged once");
}

#[tokio::test]
async fn the_handlers_own_condition_failing_is_a_handler_error_and_applies_nothing() {
    let f = fixture().await;
    // A debit needs an existing balance: account-1 has none.
    let work = || async {
        Ok::<_, std::io::Error>(Tx::new(()).put(entry(&f.effects, "entry-1")).update(add(
            &f.effects,
            "account-1",
            -500,
            Some("balance >= :amount"),
        )))
    };
    let error = f
        .engine
        .transact("p-1", b"body", None, work)
        .await
        .unwrap_err();
    let TransactError::Rejected {
        rejection,
        attempts,
    } = &error
    else {
        panic!("expected a rejection, got {error:?}");
    };
    assert_eq!(rejection.index, 1, "the second write");
    assert!(rejection.is_condition());
    assert!(
        error
            .to_string()
            .contains(&format!("Update on table `{}` (key pk)", f.effects)),
        "names the write: {error}"
    );
    assert!(
        !error.to_string().contains("account-1"),
        "never a value: {error}"
    );
    assert_eq!(*attempts, Some(1));
    assert!(item(&f, "entry-1").await.is_none(), "nothing applied");
    assert!(item(&f, "account-1").await.is_none(), "nothing applied");
    let record = f
        .engine
        .get("p-1")
        .await
        .unwrap()
        .expect("the failure is recorded");
    assert_eq!(record.status, Status::Failed, "no completed record");
    assert_eq!(record.attempts, 1);
    assert!(
        record
            .last_error
            .unwrap()
            .contains("ConditionalCheckFailed")
    );

    // The next delivery runs again, and commits once its condition holds.
    let work = || async { Ok::<_, std::io::Error>(Tx::new(()).put(entry(&f.effects, "entry-1"))) };
    assert_eq!(
        f.engine.transact("p-1", b"body", None, work).await.unwrap(),
        Transacted::Committed(())
    );
    assert_eq!(
        f.engine.get("p-1").await.unwrap().unwrap().status,
        Status::Completed
    );
}

#[tokio::test]
async fn a_failed_handler_is_recorded_with_its_attempts_and_a_duplicate_stays_a_duplicate() {
    let f = fixture().await;
    for attempt in 1..=2 {
        let error = f
            .engine
            .transact("p-1", b"body", None, || async {
                Err::<Tx<()>, _>(std::io::Error::other("bank unavailable"))
            })
            .await
            .unwrap_err();
        assert!(matches!(error, TransactError::Failed { attempts: Some(n), .. } if n == attempt));
    }
    let record = f.engine.get("p-1").await.unwrap().unwrap();
    assert_eq!((record.status, record.attempts), (Status::Failed, 2));
    assert_eq!(record.last_error.as_deref(), Some("bank unavailable"));

    let ok = || async { Ok::<_, std::io::Error>(Tx::new(7).put(entry(&f.effects, "e"))) };
    f.engine.transact("p-1", b"body", None, ok).await.unwrap();
    // A redelivery whose handler now fails is still the duplicate it is.
    let again = f
        .engine
        .transact("p-1", b"body", None, || async {
            Err::<Tx<i32>, _>(std::io::Error::other("fails now"))
        })
        .await
        .unwrap();
    assert_eq!(
        again,
        Transacted::Duplicate {
            stored: Some("7".into())
        }
    );
}

#[tokio::test]
async fn the_same_key_with_another_payload_is_a_mismatch() {
    let f = fixture().await;
    let work = |pk: &'static str| {
        let table = f.effects.clone();
        move || async move { Ok::<_, std::io::Error>(Tx::new(()).put(entry(&table, pk))) }
    };
    f.engine
        .transact("p-1", b"{\"amount\":500}", None, work("a"))
        .await
        .unwrap();
    f.counter.reset();
    let error = f
        .engine
        .transact("p-1", b"{\"amount\":900}", None, work("b"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, TransactError::PayloadMismatch { ref key, .. } if key == "p-1"),
        "{error:?}"
    );
    assert_eq!(f.counter.total(), 1);
    assert!(item(&f, "b").await.is_none());

    // A mismatch after expiry is a new key.
    f.clock.advance(Duration::from_secs(3601));
    f.engine
        .transact("p-1", b"{\"amount\":900}", None, work("b"))
        .await
        .unwrap();
    assert!(item(&f, "b").await.is_some());
}

/// The transactional mode follows the same payload rules as the lease mode: a failed attempt of
/// a malformed payload never blocks its correction, and the correction re-serialized is a
/// duplicate.
#[tokio::test]
async fn a_corrected_payload_after_a_failed_transaction_commits_and_a_reserialized_resend_is_a_duplicate()
 {
    let f = fixture().await;
    let failing =
        || async { Err::<Tx<()>, _>(std::io::Error::other("amountCents is not a number")) };
    for attempt in 1..=2 {
        let error = f
            .engine
            .transact("p-9", br#"{"amountCents":"ten"}"#, None, failing)
            .await
            .unwrap_err();
        assert_eq!(error.attempts(), Some(attempt));
    }
    let table = f.effects.clone();
    let fixed = || async move { Ok::<_, std::io::Error>(Tx::new(()).put(entry(&table, "p-9"))) };
    assert_eq!(
        f.engine
            .transact("p-9", br#"{"amountCents":10}"#, None, fixed)
            .await
            .unwrap(),
        Transacted::Committed(())
    );
    assert!(
        item(&f, "p-9").await.is_some(),
        "the correction's write applied"
    );
    let table = f.effects.clone();
    let again =
        || async move { Ok::<_, std::io::Error>(Tx::new(()).put(entry(&table, "p-9-again"))) };
    assert!(matches!(
        f.engine
            .transact("p-9", b"{ \"amountCents\": 10 }", None, again)
            .await
            .unwrap(),
        Transacted::Duplicate { .. }
    ));
    assert!(
        item(&f, "p-9-again").await.is_none(),
        "a duplicate applies nothing"
    );
}

#[tokio::test]
async fn ten_concurrent_invocations_of_one_key_commit_one_transaction() {
    let f = Arc::new(fixture().await);
    let mut tasks = Vec::new();
    for i in 0..10 {
        let f = f.clone();
        tasks.push(tokio::spawn(async move {
            let table = f.effects.clone();
            f.engine
                .transact("p-1", b"body", None, move || async move {
                    Ok::<_, std::io::Error>(
                        Tx::new(i)
                            .put(entry(&table, &format!("entry-{i}")))
                            .update(add(&table, "account-1", 500, None)),
                    )
                })
                .await
        }));
    }
    let mut committed = 0;
    let mut duplicates = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(Transacted::Committed(_)) => committed += 1,
            Ok(Transacted::Duplicate { .. }) => duplicates += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!((committed, duplicates), (1, 9));
    assert_eq!(balance(&f, "account-1").await, Some(500), "charged once");
    // On the local endpoint each commit is one try; DynamoDB may add tries after conflicts.
    assert!(f.counter.count("TransactWriteItems") >= 10);
}

#[tokio::test]
async fn a_transaction_over_the_limits_is_refused_before_any_request() {
    let f = fixture().await;
    let too_many = || async {
        let mut tx = Tx::new(());
        for i in 0..100 {
            tx = tx.put(entry(&f.effects, &format!("e-{i}")));
        }
        Ok::<_, std::io::Error>(tx)
    };
    let error = f
        .engine
        .transact("k-1", b"body", None, too_many)
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            TransactError::Limit {
                error: LimitError::TooManyActions {
                    actions: 101,
                    max: 100
                },
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "a transaction holds at most 100 actions; this one has 101"
    );

    // Eleven items of 390 KB: each fits in an item, together not in 4 MB.
    let big = "x".repeat(390 * 1024);
    let too_large = || async {
        let mut tx = Tx::new(());
        for i in 0..11 {
            let put = Put::builder()
                .table_name(&f.effects)
                .item("pk", s(&format!("big-{i}")))
                .item("data", s(&big))
                .build()
                .unwrap();
            tx = tx.put(put);
        }
        Ok::<_, std::io::Error>(tx)
    };
    let error = f
        .engine
        .transact("k-2", b"body", None, too_large)
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            TransactError::Limit {
                error: LimitError::TooLarge { .. },
                ..
            }
        ),
        "{error:?}"
    );

    let huge = "x".repeat(401 * 1024);
    let item_too_large = || async {
        let put = Put::builder()
            .table_name(&f.effects)
            .item("pk", s("huge"))
            .item("data", s(&huge))
            .build()
            .unwrap();
        Ok::<_, std::io::Error>(Tx::new(()).put(entry(&f.effects, "small")).put(put))
    };
    let error = f
        .engine
        .transact("k-3", b"body", None, item_too_large)
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            TransactError::Limit {
                error: LimitError::ItemTooLarge { index: 1, .. },
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains(&format!("Put on table `{}`", f.effects)),
        "{error}"
    );
    assert_eq!(
        f.counter.total(),
        0,
        "no request: {:?}",
        f.counter.snapshot()
    );
}

#[tokio::test]
async fn a_request_the_store_refuses_as_invalid_is_a_store_error_tried_once_and_not_recorded() {
    let f = fixture().await;
    // Two actions on one item: DynamoDB refuses the whole request before running any. That is
    // the code's fault, not the message's: never permanent.
    let work = || async {
        Ok::<_, std::io::Error>(
            Tx::new(())
                .put(entry(&f.effects, "entry-1"))
                .update(add(&f.effects, "entry-1", 5, None)),
        )
    };
    let error = f
        .engine
        .transact("p-1", b"body", None, work)
        .await
        .unwrap_err();
    let TransactError::Store(StoreError::Misconfigured { table, problem }) = &error else {
        panic!("expected a misconfigured store, got {error:?}");
    };
    assert_eq!(
        table, &f.effects,
        "the idempotency table fits: the writes' table"
    );
    assert!(
        problem.contains("multiple operations on one item")
            && problem.contains(&format!("`{}`", f.effects)),
        "{problem}"
    );
    assert_eq!(error.attempts(), None, "not recorded as a failed attempt");
    assert_eq!(
        f.counter.count("TransactWriteItems"),
        1,
        "not tried again at once: it cannot succeed"
    );
    assert_eq!(
        f.counter.count("DescribeTable"),
        1,
        "the idempotency table is checked"
    );
    assert_eq!(f.counter.count("UpdateItem"), 0, "no failure recorded");
    assert!(item(&f, "entry-1").await.is_none());
}

#[tokio::test]
async fn an_update_that_grows_an_item_over_400_kb_is_permanent() {
    let f = fixture().await;
    let big = "x".repeat(300 * 1024);
    f.client
        .put_item()
        .table_name(&f.effects)
        .item("pk", s("statement"))
        .item("lines", s(&big))
        .send()
        .await
        .unwrap();
    f.counter.reset();
    // 200 KB more: the request is small enough for `check`, the item it makes is not.
    let more = "y".repeat(200 * 1024);
    let work = || async {
        let grow = Update::builder()
            .table_name(&f.effects)
            .key("pk", s("statement"))
            .update_expression("SET more = :more")
            .expression_attribute_values(":more", s(&more))
            .build()
            .unwrap();
        Ok::<_, std::io::Error>(Tx::new(()).update(grow))
    };
    let error = f
        .engine
        .transact("p-1", b"body", None, work)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, TransactError::TooLarge { message, attempts: Some(1) }
            if message.contains("Item size to update has exceeded")),
        "the message's data over a size limit: {error:?}"
    );
    assert_eq!(f.counter.count("TransactWriteItems"), 1, "not tried again");
    assert_eq!(f.counter.count("DescribeTable"), 0, "no table to check");
    assert!(!item(&f, "statement").await.unwrap().contains_key("more"));
}

#[tokio::test]
async fn a_refused_put_names_its_item() {
    let f = fixture().await;
    let guarded = Put::builder()
        .table_name(&f.effects)
        .item("pk", s("entry-1"))
        .item("amount", AttributeValue::N("5".into()))
        .condition_expression("attribute_not_exists(pk)")
        .build()
        .unwrap();
    let work = |put: Put| move || async move { Ok::<_, std::io::Error>(Tx::new(()).put(put)) };
    f.engine
        .transact("p-1", b"a", None, work(guarded.clone()))
        .await
        .unwrap();
    let error = f
        .engine
        .transact("p-2", b"b", None, work(guarded))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains(&format!(
            "Put on table `{}` (attributes amount, pk)",
            f.effects
        )),
        "{error}"
    );
    assert!(
        !error.to_string().contains("entry-1"),
        "never a value: {error}"
    );
}
