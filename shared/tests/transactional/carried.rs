//! The record carried by one write of the transaction (`Transaction::carry_record`), on
//! DynamoDB: the item that refuses a second run carries the proof, and the transaction is the
//! handler's writes alone.

use super::*;

/// Puts `pk` as an open order: `state = open`.
async fn open(f: &Fixture, pk: &str) {
    f.client
        .put_item()
        .table_name(&f.effects)
        .item("pk", s(pk))
        .item("state", s("open"))
        .send()
        .await
        .unwrap();
    f.counter.reset();
}

/// Marks order `pk` shipped, on condition that it is open.
fn ship(table: &str, pk: &str) -> Update {
    Update::builder()
        .table_name(table)
        .key("pk", s(pk))
        .update_expression("SET #state = :shipped REMOVE pending")
        .condition_expression("#state = :open")
        .expression_attribute_names("#state", "state")
        .expression_attribute_values(":shipped", s("shipped"))
        .expression_attribute_values(":open", s("open"))
        .build()
        .unwrap()
}

/// The shipment: a new parcel, and the order marked shipped, carrying the record.
fn shipment(
    table: &str,
    order: &str,
    parcel: &str,
) -> impl FnOnce() -> std::future::Ready<Result<Tx<String>, std::io::Error>> {
    let tx = Tx::new(parcel.to_owned())
        .put(entry(table, parcel))
        .update_carrying_record(ship(table, order));
    move || std::future::ready(Ok(tx))
}

#[tokio::test]
async fn the_record_rides_on_the_update_that_refuses_a_second_run() {
    let f = fixture().await;
    open(&f, "order-1").await;
    let first = f
        .engine
        .transact(
            "o-1",
            b"{\"order\":1}",
            None,
            shipment(&f.effects, "order-1", "parcel-1"),
        )
        .await
        .unwrap();
    assert_eq!(first, Transacted::Committed("parcel-1".to_owned()));
    assert_eq!(f.counter.count("TransactWriteItems"), 1);
    assert_eq!(f.counter.total(), 1, "{:?}", f.counter.snapshot());
    let order = item(&f, "order-1").await.unwrap();
    assert_eq!(order["state"], s("shipped"));
    assert_eq!(order["idem_status"], s("COMPLETED"));
    assert_eq!(order["idem_data"], s("\"parcel-1\""));
    assert_eq!(
        f.engine.get("o-1").await.unwrap(),
        None,
        "nothing beside the item: the transaction was the two writes"
    );
    f.counter.reset();

    // The same payload again: the order's refusal returns its record, a duplicate.
    let again = f
        .engine
        .transact(
            "o-1",
            b"{ \"order\": 1 }",
            None,
            shipment(&f.effects, "order-1", "parcel-2"),
        )
        .await
        .unwrap();
    assert_eq!(
        again,
        Transacted::Duplicate {
            stored: Some("\"parcel-1\"".into())
        }
    );
    assert_eq!(
        f.counter.total(),
        1,
        "one cancelled transaction: {:?}",
        f.counter.snapshot()
    );
    assert!(item(&f, "parcel-2").await.is_none(), "nothing applied");

    // Another payload under the live record: a mismatch, permanent.
    let other = f
        .engine
        .transact(
            "o-1",
            b"{\"order\":2}",
            None,
            shipment(&f.effects, "order-1", "parcel-3"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(other, TransactError::PayloadMismatch { .. }),
        "{other:?}"
    );
    assert!(item(&f, "parcel-3").await.is_none());
}

#[tokio::test]
async fn the_carriers_own_condition_is_the_handlers_rejection_and_is_counted() {
    let f = fixture().await;
    // No such order: the update's own condition fails, and the item carries no record.
    let error = f
        .engine
        .transact(
            "o-9",
            b"{\"order\":9}",
            None,
            shipment(&f.effects, "order-9", "parcel-9"),
        )
        .await
        .unwrap_err();
    let TransactError::Rejected {
        rejection,
        attempts,
    } = &error
    else {
        panic!("expected a rejection, got {error:?}");
    };
    assert_eq!(rejection.index, 1, "the order's update, the second write");
    assert!(rejection.is_condition());
    assert_eq!(*attempts, Some(1), "recorded in the engine's table");
    assert!(item(&f, "parcel-9").await.is_none());
    assert_eq!(
        f.engine.get("o-9").await.unwrap().map(|r| r.status),
        Some(Status::Failed)
    );
}

/// Order 2's shipment of `parcel`, by a message of order number `n` under key `o-2`.
async fn ship_order_2(
    f: &Fixture,
    n: u32,
    parcel: &str,
) -> Result<Transacted<String>, TransactError<std::io::Error>> {
    let body = format!("{{\"order\":{n}}}");
    let work = shipment(&f.effects, "order-2", parcel);
    f.engine.transact("o-2", body.as_bytes(), None, work).await
}

/// An `Update` changes its item rather than replacing it: once the record on it has expired,
/// the carrier's own condition decides whether the work runs again. When that condition refuses
/// and the item carries this payload's record, the work was done: a duplicate, answered by the
/// one cancelled transaction. Another payload is the carrier's own rejection.
#[tokio::test]
async fn an_expired_record_on_an_updated_item_leaves_the_answer_to_the_carriers_condition() {
    let f = fixture().await;
    open(&f, "order-2").await;
    ship_order_2(&f, 2, "parcel-a").await.unwrap();
    f.clock.advance(Duration::from_secs(2 * 3600));
    f.counter.reset();
    // The record has expired, and the order's own condition (it is shipped already) refuses.
    let again = ship_order_2(&f, 2, "parcel-b").await.unwrap();
    assert_eq!(
        again,
        Transacted::Duplicate {
            stored: Some("\"parcel-a\"".into())
        }
    );
    assert_eq!(f.counter.total(), 1, "{:?}", f.counter.snapshot());
    let error = ship_order_2(&f, 3, "parcel-c").await.unwrap_err();
    assert!(
        matches!(&error, TransactError::Rejected { rejection, .. } if rejection.index == 1),
        "{error:?}"
    );
    assert!(item(&f, "parcel-b").await.is_none());
    assert!(item(&f, "parcel-c").await.is_none());
    // Reopened (its expired record still on it), the order takes the work again, and the
    // record on it is rewritten.
    f.client
        .update_item()
        .table_name(&f.effects)
        .key("pk", s("order-2"))
        .update_expression("SET #state = :open")
        .expression_attribute_names("#state", "state")
        .expression_attribute_values(":open", s("open"))
        .send()
        .await
        .unwrap();
    assert!(
        item(&f, "order-2")
            .await
            .unwrap()
            .contains_key("idem_status")
    );
    let reopened = ship_order_2(&f, 3, "parcel-c").await.unwrap();
    assert_eq!(reopened, Transacted::Committed("parcel-c".to_owned()));
    assert_eq!(
        item(&f, "order-2").await.unwrap()["idem_data"],
        s("\"parcel-c\"")
    );
}

#[tokio::test]
async fn a_put_carries_the_record_on_its_new_item() {
    let f = fixture().await;
    let work = |parcel: &'static str| {
        let table = f.effects.clone();
        move || async move {
            Ok::<_, std::io::Error>(
                Tx::new(parcel.to_owned())
                    .update(add(&table, "account-1", 1, None))
                    .put(entry(&table, "receipt-1"))
                    .carry_record(),
            )
        }
    };
    f.engine
        .transact("r-1", b"{\"r\":1}", None, work("first"))
        .await
        .unwrap();
    let again = f
        .engine
        .transact("r-1", b"{\"r\":1}", None, work("second"))
        .await
        .unwrap();
    assert_eq!(
        again,
        Transacted::Duplicate {
            stored: Some("\"first\"".into())
        }
    );
    assert_eq!(balance(&f, "account-1").await, Some(1), "applied once");
    assert_eq!(
        item(&f, "receipt-1").await.unwrap()["idem_status"],
        s("COMPLETED")
    );
}

#[tokio::test]
async fn a_carrier_that_cannot_carry_is_the_codes_error() {
    let f = fixture().await;
    let work = || async {
        Ok::<_, std::io::Error>(
            Tx::new(())
                .put(entry(&f.effects, "x-1"))
                .delete(
                    aws_sdk_dynamodb::types::Delete::builder()
                        .table_name(&f.effects)
                        .key("pk", s("x-2"))
                        .build()
                        .unwrap(),
                )
                .carry_record(),
        )
    };
    let error = f.engine.transact("x", b"x", None, work).await.unwrap_err();
    assert!(
        matches!(&error, TransactError::Store(StoreError::Misconfigured { problem, .. })
            if problem.contains("only a Put or an Update")),
        "{error:?}"
    );
    assert!(item(&f, "x-1").await.is_none());
}
