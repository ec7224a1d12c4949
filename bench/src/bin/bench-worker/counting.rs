//! Counting each delivery's requests: DynamoDB's through an SDK interceptor, Redis's through a
//! connection wrapper, and the record handler's own apart from the store's.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::interceptors::{
    BeforeSerializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::operation::{
    delete_item::DeleteItemInput, put_item::PutItemInput,
    transact_write_items::TransactWriteItemsInput, update_item::UpdateItemInput,
};
use bench::{WriteRequest, write_units};
use lambda_idempotency::batch::{HandlerOutput, Record, RecordContext, RecordError, RecordHandler};
use redis::aio::ConnectionLike;
use redis::{RedisFuture, Value};

/// The batch being processed (its index in the workload).
pub(crate) static BATCH: AtomicUsize = AtomicUsize::new(0);

/// A delivery: a record (by its id) in one batch. A record is never twice in one batch, but may
/// come again in a later one (an SQS redelivery, a stream's replay from a checkpoint).
pub(crate) fn delivery(batch: usize, id: &str) -> String {
    format!("{batch}/{id}")
}

tokio::task_local! {
    /// The delivery ([`delivery`]) whose requests are being counted.
    pub(crate) static DELIVERY: String;
    /// Set while the record handler's own work runs: its requests are not the store's.
    pub(crate) static IN_HANDLER: ();
}

/// Counts DynamoDB requests per delivery: `[all, the record handler's, write request units]`.
/// Requests are counted as sent (retries included); write units once per operation, from its
/// input (see [`write_units`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct PerDelivery(pub(crate) Arc<Mutex<HashMap<String, [u32; 3]>>>);

impl PerDelivery {
    pub(crate) fn add(&self, delivery: String, count: impl FnOnce(&mut [u32; 3])) {
        count(self.0.lock().unwrap().entry(delivery).or_default());
    }
}

impl Intercept for PerDelivery {
    fn name(&self) -> &'static str {
        "PerDelivery"
    }

    fn read_before_serialization(
        &self,
        context: &BeforeSerializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        if let Ok(delivery) = DELIVERY.try_with(Clone::clone) {
            let input = context.input();
            let request = if let Some(t) = input.downcast_ref::<TransactWriteItemsInput>() {
                WriteRequest::Transaction {
                    items: t.transact_items().len(),
                }
            } else if input.downcast_ref::<PutItemInput>().is_some()
                || input.downcast_ref::<UpdateItemInput>().is_some()
                || input.downcast_ref::<DeleteItemInput>().is_some()
            {
                WriteRequest::Single
            } else {
                WriteRequest::Other
            };
            self.add(delivery, |count| count[2] += write_units(request));
        }
        Ok(())
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        if let Ok(delivery) = DELIVERY.try_with(Clone::clone) {
            let in_handler = IN_HANDLER.try_with(|_| ()).is_ok();
            self.add(delivery, |count| {
                count[0] += 1;
                count[1] += u32::from(in_handler);
            });
        }
        Ok(())
    }
}

/// Runs the inner handler with its delivery marked, for the request counter.
pub(crate) struct Counted<H>(pub(crate) H);

impl<H: HandlerOutput> HandlerOutput for Counted<H> {
    type Output = H::Output;
}

impl<R: Record, H: RecordHandler<R>> RecordHandler<R> for Counted<H> {
    fn handle(
        &self,
        record: &R,
        ctx: &RecordContext,
    ) -> impl std::future::Future<Output = Result<Self::Output, RecordError>> + Send {
        let delivery = delivery(BATCH.load(Ordering::Relaxed), &ctx.message_id);
        DELIVERY.scope(delivery, self.0.handle(record, ctx))
    }

    fn key(&self, record: &R) -> Option<String> {
        self.0.key(record)
    }

    fn order_key(&self, record: &R) -> Option<String> {
        self.0.order_key(record)
    }

    fn counts_attempts(&self) -> bool {
        self.0.counts_attempts()
    }
}

/// A Redis connection that counts each round trip for the delivery being processed, as the
/// DynamoDB interceptor does: the request counts of `--store redis`.
#[derive(Clone)]
pub(crate) struct CountedConnection<C> {
    pub(crate) inner: C,
    pub(crate) per_delivery: PerDelivery,
}

impl<C> CountedConnection<C> {
    fn count(&self) {
        if let Ok(delivery) = DELIVERY.try_with(Clone::clone) {
            self.per_delivery.add(delivery, |count| count[0] += 1);
        }
    }
}

impl<C: ConnectionLike + Send> ConnectionLike for CountedConnection<C> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a ::redis::Cmd) -> RedisFuture<'a, Value> {
        self.count();
        self.inner.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a ::redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.count();
        self.inner.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}
