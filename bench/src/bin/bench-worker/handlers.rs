//! The record handlers of the sides: the same payment handler (one `PutItem` into the effects
//! table) without idempotency (the floor), in the lease mode, the transactional mode and the
//! inline mode, for the records of any source.

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{
    EventSource, Record, RecordContext, RecordHandler, RecordHandlerExt, json,
};
use lambda_idempotency::inline::InlinePut;
use lambda_idempotency::key::KeyConfig;
use lambda_idempotency::store::{Backend, NewItem, TransactionalBackend};
use lambda_idempotency::transaction::Transaction;
use serde::de::DeserializeOwned;

use crate::counting::{Counted, IN_HANDLER};
use crate::{BoxError, Invocations, Mode, Seen};

/// The payment of a record: an SQS message's body, a Kinesis record's data, a Kafka record's
/// value, a DynamoDB stream record's new image.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Payment {
    payment_id: String,
    amount_cents: i64,
}

/// The DynamoDB side: the lease mode's handler, the transactional one or the inline one, over a
/// store with or without the local cache.
pub(crate) struct DynamoDbSide<'a> {
    pub(crate) dynamodb: &'a aws_sdk_dynamodb::Client,
    pub(crate) effects_table: &'a str,
    pub(crate) mode: Mode,
    /// The inline handler as a `BoxRecordHandler`.
    pub(crate) boxed: bool,
}

impl DynamoDbSide<'_> {
    pub(crate) async fn run<E, Rd: std::io::BufRead, B>(
        &self,
        invocations: Invocations<'_, Rd>,
        store: Idempotency<B>,
    ) -> Result<Seen, BoxError>
    where
        E: EventSource + DeserializeOwned,
        B: TransactionalBackend<Write = TransactWriteItem> + Clone + 'static,
    {
        if self.mode == Mode::Inline {
            // The table for the life of the process: a boxed handler owns what it uses, and both
            // inline sides run this same handler.
            let effects_table: &'static str = Box::leak(self.effects_table.into());
            // The handler's item, returned: the engine writes it with the record on it.
            let handler = Counted(
                json(move |p: Payment, ctx: RecordContext| {
                    let table = effects_table;
                    async move {
                        let item = NewItem::new(table, "id", AttributeValue::S(p.payment_id))
                            .attribute("messageId", AttributeValue::S(ctx.message_id))
                            .attribute(
                                "amountCents",
                                AttributeValue::N(p.amount_cents.to_string()),
                            );
                        Ok::<_, std::convert::Infallible>(InlinePut::<(), NewItem>::new((), item))
                    }
                })
                .inline(store)
                .with_keys(KeyConfig::json_pointer("/paymentId")),
            );
            if self.boxed {
                return invocations.run::<E, _>(&handler.boxed()).await;
            }
            invocations.run::<E, _>(&handler).await
        } else if self.mode == Mode::Transactional {
            // The handler's PutItem becomes the Put of the transaction: no request of its own.
            let handler = Counted(
                json(|p: Payment, ctx: RecordContext| {
                    let table = self.effects_table;
                    async move {
                        let put = Put::builder()
                            .table_name(table)
                            .item("id", AttributeValue::S(p.payment_id))
                            .item("messageId", AttributeValue::S(ctx.message_id))
                            .item("amountCents", AttributeValue::N(p.amount_cents.to_string()))
                            .build()?;
                        Ok::<_, aws_sdk_dynamodb::error::BuildError>(
                            Transaction::<(), TransactWriteItem>::new(()).put(put),
                        )
                    }
                })
                .transactional(store),
            );
            invocations.run::<E, _>(&handler).await
        } else {
            invocations
                .run::<E, _>(&lease_handler(self.dynamodb, self.effects_table, store))
                .await
        }
    }
}

/// The handler's own `PutItem` of the payment into `table`, counted apart from the store's.
async fn put_payment(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
    p: Payment,
    ctx: RecordContext,
) -> Result<
    (),
    aws_sdk_dynamodb::error::SdkError<aws_sdk_dynamodb::operation::put_item::PutItemError>,
> {
    IN_HANDLER
        .scope((), async move {
            dynamodb
                .put_item()
                .table_name(table)
                .item("id", AttributeValue::S(p.payment_id))
                .item("messageId", AttributeValue::S(ctx.message_id))
                .item("amountCents", AttributeValue::N(p.amount_cents.to_string()))
                .send()
                .await
                .map(|_| ())
        })
        .await
}

/// The lease mode's handler over `store`: its own `PutItem` into `table`.
pub(crate) fn lease_handler<'a, R: Record, B: Backend + 'a>(
    dynamodb: &'a aws_sdk_dynamodb::Client,
    table: &'a str,
    store: Idempotency<B>,
) -> impl RecordHandler<R> + 'a {
    Counted(
        json(move |p: Payment, ctx: RecordContext| put_payment(dynamodb, table, p, ctx))
            .idempotent(store),
    )
}

/// The floor: the same handler with no idempotency, its `PutItem` for every delivery.
pub(crate) fn floor_handler<'a, R: Record>(
    dynamodb: &'a aws_sdk_dynamodb::Client,
    table: &'a str,
) -> impl RecordHandler<R> + 'a {
    Counted(json(move |p: Payment, ctx: RecordContext| {
        put_payment(dynamodb, table, p, ctx)
    }))
}
