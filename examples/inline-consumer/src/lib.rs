//! An order consumer: each `OrderPlaced` message writes its order's item to the orders table,
//! once, however often SQS delivers it and whichever producer sends it again.
//!
//! - **Inline mode**: the handler returns the item instead of writing it, and the library writes
//!   it with the idempotency record on it, in one conditional `PutItem`: one request and the
//!   item's own write units per order, as the same handler with no idempotency at all.
//! - **Keyed on the body's `/orderId`**: a second message of the same order (another message
//!   id) is a duplicate; the same order id with another payload is refused with its reason.
//! - **The safe defaults of [`Consumer::from_env`]**: an attempt budget of 5, visibility
//!   backoff, the dead-letter queue of `DEAD_LETTER_QUEUE_URL`, the cold-start checks of the
//!   idempotency table and the queue, and a partial batch response.
//!
//! [`consumer`] builds it over any backend, so that the tests run it on the in-memory one.

use lambda_idempotency::prelude::*;

/// A message of the queue: an order was placed.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OrderPlaced {
    /// The order: the idempotency key, and the item's key.
    pub order_id: String,
    /// Who placed it.
    pub customer_id: String,
    /// Its total, in cents.
    pub total_cents: i64,
}

/// The effect: the order's item in `table`. An order of no value can never succeed: a permanent
/// failure, dead-lettered at once with its reason.
pub async fn record_order(
    table: String,
    order: OrderPlaced,
) -> Result<InlinePut<(), NewItem>, Error> {
    if order.total_cents <= 0 {
        let reason = format!(
            "order {} has a total of {} cents",
            order.order_id, order.total_cents
        );
        return Err(PermanentError::new(reason).into());
    }
    let item = order_item(&table, &order.order_id)
        .attribute("customerId", AttributeValue::S(order.customer_id))
        .attribute(
            "totalCents",
            AttributeValue::N(order.total_cents.to_string()),
        );
    Ok(InlinePut::new((), item))
}

/// The item of order `order_id` in `table`, by its key.
pub fn order_item(table: &str, order_id: &str) -> NewItem {
    NewItem::new(table, "orderId", AttributeValue::S(order_id.to_owned()))
}

/// The consumer, from `builder` (the environment's in the function, the in-memory backend's in
/// tests), writing orders to `table`, keyed on the body's `/orderId`. A failure reads the
/// order's item first ([`ConsumerBuilder::with_item_lookup`]): an order another delivery wrote is
/// a duplicate, never an attempt towards the dead-letter queue.
pub fn consumer<B>(builder: ConsumerBuilder<B>, table: String) -> Consumer<Deduplicated<()>>
where
    B: TransactionalBackend + 'static,
    NewItem: Into<B::Write>,
{
    let lookup = table.clone();
    let handler = json(move |order, _ctx: RecordContext| record_order(table.clone(), order));
    builder
        .with_keys(KeyConfig::json_pointer("/orderId"))
        .with_item_lookup(move |order_id: &str, _: &SqsMessage| Some(order_item(&lookup, order_id)))
        .inline(handler)
}
