//! Catch-up: a message that came before its account's earlier payments were settled settles
//! them first, lowest number first, from the tables ([`payments_model::order`]), then its own
//! payment is charged.
//!
//! - An accepted earlier payment is charged as stored, description included, exactly as its own
//!   message would be: the failure switch applies, and its attempts are counted under its own
//!   key (its own message, when it comes, continues the same count, or is a duplicate).
//! - An earlier payment that cannot be charged never holds up its account for long: once its
//!   failure is permanent, or its attempts are used up (`MAX_ATTEMPTS`), it is marked `failed`
//!   with its reason (as its own dead-lettered message would have it) and passed over, and the
//!   later payments go on. No dead letter holds it until its own message comes: it is counted
//!   ([`App::failed_ahead`], metric `failedAhead`, which has an alarm). Until then the message
//!   waits for it: a retryable failure that spends none of the message's own attempts (the
//!   refusals of its charge are taken back), so that the next delivery tries the earlier one
//!   again.
//! - A failed earlier payment, one reopened under another number, or a number no payment holds
//!   (voided first, [`order::void`]) is passed over.
//! - Catch-up stops when the invocation's time is up (the record's `stop_at`), or after
//!   [`MAX_CATCH_UP`] charges or [`MAX_PASS_OVER`] passes: its message waits, spending none of
//!   its attempts, and the next delivery goes on from what it settled.

use aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::batch::{RecordContext, RecordError, RecordHandler};
use lambda_idempotency::redact::safe_reason;
use lambda_idempotency::state::truncate_error;
use lambda_idempotency::time::{Clock, SystemClock};
use payments_model::PaymentStatus;
use payments_model::lifecycle::{self, MarkedFailed};
use payments_model::order::{self, Account, Holder};
use payments_model::stored::StoredPayment;

use crate::App;
use crate::verify::{message_of, store_error};

/// Earlier payments of an account one message settles before giving up for this delivery (it
/// keeps what it settled, and the next delivery goes on).
pub const MAX_CATCH_UP: usize = 25;

/// Numbers without a payment to charge (voided, or held by a failed or reopened payment) one
/// message passes over in one delivery, beside its [`MAX_CATCH_UP`] charges. A pass costs a few
/// requests and no charge, so gaps, however many a burst of refused or failed writes left, cost
/// the account's next payment a delivery per thousand, not one per 25.
pub const MAX_PASS_OVER: usize = 1_000;

impl App {
    /// Settles the numbers of `payment`'s account before `sequence`, lowest first (see the
    /// module's documentation).
    pub(crate) async fn catch_up(
        &self,
        payment: &StoredPayment,
        sequence: u64,
        ctx: &RecordContext,
    ) -> Result<(), RecordError> {
        let account_id = payment.account_id.as_deref().unwrap_or_default();
        let (mut charged, mut passed) = (0, 0);
        loop {
            // The invocation's time is up (the processor's stop margin before its deadline): the
            // next delivery goes on from what this one settled. Without this, the processor
            // would cut the handler off at its finish margin, in the middle of a request, and
            // leave less time for the batch's bookkeeping.
            if ctx.stop_at.is_some_and(|stop| stop.has_passed(&*ctx.clock)) {
                return Err(RecordError::Handler(
                    format!(
                        "payment {} waits for earlier payments of its account, and the \
                         invocation's time is up (settled {charged} and passed over {passed} in \
                         it); the next delivery goes on",
                        payment.payment_id
                    )
                    .into(),
                ));
            }
            let account = Account::read(&self.dynamodb, &self.config.accounts_table, account_id)
                .await
                .map_err(|e| store_error("GetItem", e))?;
            if account.settled + 1 >= sequence {
                return Ok(());
            }
            let next = account.settled + 1;
            let holder = match account.pending.get(&next) {
                Some(id) => Holder::Payment(id.clone()),
                None => self.holder_or_void(account_id, next).await?,
            };
            let earlier = match holder {
                Holder::Payment(id) => self
                    .read_payment(&id)
                    .await
                    .map_err(|e| store_error("GetItem", e))?,
                Holder::Voided | Holder::Nobody => None,
            };
            match earlier {
                Some(earlier)
                    if earlier.is(PaymentStatus::Accepted) && earlier.sequence == Some(next) =>
                {
                    if charged == MAX_CATCH_UP {
                        break;
                    }
                    charged += 1;
                    tracing::info!(
                        message_id = ctx.message_id,
                        payment_id = payment.payment_id,
                        earlier = earlier.payment_id,
                        sequence = next,
                        "an earlier payment of the account is not settled: charging it first"
                    );
                    // Charged, or failed: the next pass sees which.
                    self.charge_earlier(payment, &earlier, ctx).await?;
                }
                _ => {
                    if passed == MAX_PASS_OVER {
                        break;
                    }
                    passed += 1;
                    self.pass_over(account_id, next).await?;
                }
            }
        }
        Err(RecordError::Handler(
            format!(
                "payment {} waits for more than {MAX_CATCH_UP} earlier payments of its account \
                 (or {MAX_PASS_OVER} numbers without one); the next delivery goes on",
                payment.payment_id
            )
            .into(),
        ))
    }

    /// Charges `earlier` as stored, ahead of its own message, for `payment`'s. Its attempts are
    /// read from the store, as for a redelivery of its own message. A failure that ends it marks
    /// it failed ([`App::give_up`]); one it may still recover from is the message's retryable
    /// error, naming both payments.
    async fn charge_earlier(
        &self,
        payment: &StoredPayment,
        earlier: &StoredPayment,
        ctx: &RecordContext,
    ) -> Result<(), RecordError> {
        let message = message_of(&SqsMessage::default(), &earlier.requested());
        let mut own = ctx.clone();
        own.receive_count = own.receive_count.max(2);
        let error = match self.charging().handle(&message, &own).await {
            Ok(_) => return Ok(()),
            Err(error) => error,
        };
        if self.gives_up(&error) {
            return self.give_up(payment, earlier, &message, &error).await;
        }
        Err(RecordError::Handler(
            format!(
                "payment {} (number {} of its account) waits for {} (number {}), which could not \
                 be charged yet: {error}",
                payment.payment_id,
                payment.sequence.unwrap_or_default(),
                earlier.payment_id,
                earlier.sequence.unwrap_or_default(),
            )
            .into(),
        ))
    }

    /// True when a charge's failure ends its payment, as it would send its own message to the
    /// dead-letter queue: permanent, or its attempts used up.
    fn gives_up(&self, error: &RecordError) -> bool {
        error.is_permanent()
            || matches!(
                (error.attempts(), self.config.max_attempts),
                (Some(attempts), Some(max)) if attempts >= max
            )
    }

    /// Marks `earlier` failed with the reason of `error`, and resets its key's attempts (a
    /// reopened payment starts a budget afresh), as the dead-letter hook of its own message
    /// would.
    async fn give_up(
        &self,
        payment: &StoredPayment,
        earlier: &StoredPayment,
        message: &SqsMessage,
        error: &RecordError,
    ) -> Result<(), RecordError> {
        let cause = if error.is_permanent() {
            error.to_string()
        } else {
            format!("attempt budget used up: {error}")
        };
        let reason = truncate_error(&safe_reason(&format!(
            "{cause} (charged from the payments table ahead of its message, for payment {})",
            payment.payment_id
        )));
        let marked = lifecycle::mark_number_failed(
            &self.dynamodb,
            &self.config.payments_table,
            &earlier.payment_id,
            earlier.sequence.unwrap_or_default(),
            &reason,
            SystemClock.now_ms(),
        )
        .await
        .map_err(|e| store_error("UpdateItem", e.into()))?;
        if marked == MarkedFailed::Marked {
            self.tally.count(crate::Event::FailedAhead);
        }
        tracing::warn!(
            payment_id = payment.payment_id,
            earlier = earlier.payment_id,
            reason,
            ?marked,
            "an earlier payment of the account cannot be charged: marked failed, passed over"
        );
        if error.attempts().is_some()
            && let Ok(key) = App::keys().key(message)
            && let Err(e) = self.idempotency.reset_attempts(&key).await
        {
            tracing::warn!(key, error = %e, "could not reset the attempts of a failed payment");
        }
        Ok(())
    }

    /// Who holds number `sequence` of an account, from the number's item; a number without one
    /// (its payment is being written, or never will be) is voided first ([`order::void`]): a
    /// payment written with it after this is refused, and takes another number. So an
    /// account's later payments never wait on a number whose payment never comes.
    async fn holder_or_void(&self, account_id: &str, sequence: u64) -> Result<Holder, RecordError> {
        let table = &self.config.accounts_table;
        let holder = Holder::read(&self.dynamodb, table, account_id, sequence)
            .await
            .map_err(|e| store_error("GetItem", e))?;
        if holder != Holder::Nobody {
            return Ok(holder);
        }
        let holder = order::void(
            &self.dynamodb,
            table,
            account_id,
            sequence,
            SystemClock.now_ms(),
        )
        .await
        .map_err(|e| store_error("PutItem", e))?;
        if holder == Holder::Voided {
            tracing::info!(
                account_id,
                sequence,
                "a number of the account has no payment: voided, and passed over"
            );
        }
        Ok(holder)
    }

    /// Settles number `sequence` of an account without a charge (its payment failed, was
    /// reopened under another number, or it has none). A refusal means another delivery settled
    /// it.
    async fn pass_over(&self, account_id: &str, sequence: u64) -> Result<(), RecordError> {
        let update = order::settle(&self.config.accounts_table, account_id, sequence);
        let result = self
            .dynamodb
            .update_item()
            .set_table_name(Some(update.table_name))
            .set_key(Some(update.key))
            .set_update_expression(Some(update.update_expression))
            .set_condition_expression(update.condition_expression)
            .set_expression_attribute_names(update.expression_attribute_names)
            .set_expression_attribute_values(update.expression_attribute_values)
            .send()
            .await;
        match result {
            Ok(_) => {
                tracing::info!(
                    account_id,
                    sequence,
                    "settled without a charge (failed, reopened, or no payment)"
                );
                Ok(())
            }
            Err(e) => match aws_sdk_dynamodb::Error::from(e) {
                aws_sdk_dynamodb::Error::ConditionalCheckFailedException(_) => Ok(()),
                e => Err(store_error("UpdateItem", e)),
            },
        }
    }
}
