//! Charged payments without their receipt: payment-processor sends each charge's
//! `PaymentCharged` to the receipts queue after the charge commits, outside it. A send that
//! fails is sent again when the payment's message comes back (a duplicate of a charged payment);
//! a payment charged by catch-up, from the table, has no message of its own to come back.
//!
//! So, per shard of the charged index and from a cursor beside the audit's (`receiptsThrough`,
//! in the accounts table under [`CURSOR_PREFIX`]), every charge older than
//! [`Config::receipt_after`](super::Config) is looked up in the receipts table (its receipt id,
//! [`payments_model::receipt_id`]); a charge without one gets its `PaymentCharged`, rebuilt from
//! the charged payment, sent to the receipts queue. receipt-sender verifies it against the
//! payments table and writes the receipt once, whatever the copies. The cursor moves past what
//! was looked up and sent; a send that fails keeps it before that charge for the next run.
//!
//! A charge whose `PaymentCharged` was sent again is recovered until its receipt exists: its
//! payment id joins the shard's pending set (`receiptsPending`, on the cursor item), and each
//! run looks its receipt up again first, sends it again while it is missing, and drops it from
//! the set once it is there (or once the payment is no longer charged).
//!
//! Each shard has its share of `max_per_run` ([`fair_shares`]): a hot shard cannot take a
//! whole run from the others; what a shard leaves unused goes to the shards that used theirs.

use aws_sdk_dynamodb::types::AttributeValue;
use futures_util::stream::{self, StreamExt};
use lambda_idempotency::publish::Message;
use payments_model::{PaymentCharged, PaymentStatus};

pub use super::audit::CURSOR_PREFIX;
use super::audit::RECEIPTS_CURSOR;
use super::budget::{fair_shares, shards_in_turn};
use super::charged::{Charged, cursor_key, keep_whole_instants};
use super::waiting::millis;
use super::{Budget, ReconcileError, Reconciler};

/// The attribute of a shard's cursor item that holds the payments whose `PaymentCharged` was
/// sent again, until their receipt exists (a string set).
pub(super) const RECEIPTS_PENDING: &str = "receiptsPending";

/// Receipts looked up at once.
const READS_IN_FLIGHT: usize = 16;

/// What the look for receipts did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Receipts {
    /// Charged payments whose receipt was looked up.
    pub checked: u64,
    /// Payments without a receipt whose `PaymentCharged` was sent again, in charge order.
    pub resent: Vec<String>,
    /// Payments whose `PaymentCharged` could not be sent (payment id, why): the next run looks
    /// again.
    pub send_failed: Vec<(String, String)>,
    /// True when the time budget stopped the look: the next run goes on from there.
    pub out_of_time: bool,
}

impl Reconciler {
    /// Charged payments without their receipt, with no time limit: see
    /// [`Reconciler::receipts_within`].
    pub async fn receipts(&self, now_ms: i64) -> Result<Receipts, ReconcileError> {
        self.receipts_within(now_ms, &Budget::unlimited()).await
    }

    /// Charged payments older than [`Config::receipt_after`](super::Config) not looked at yet,
    /// at most `max_per_run` of them, until `budget` is spent: each without its receipt gets
    /// its `PaymentCharged` sent again (see the module).
    pub async fn receipts_within(
        &self,
        now_ms: i64,
        budget: &Budget,
    ) -> Result<Receipts, ReconcileError> {
        let until = now_ms - millis(self.config.receipt_after);
        let mut receipts = Receipts::default();
        let shards = shards_in_turn(now_ms);
        let shares = fair_shares(self.config.max_per_run, shards.len());
        // Each shard its share first; then what is left to the shards that used all of theirs.
        let mut wanting = Vec::new();
        for (shard, share) in shards.iter().zip(shares) {
            if receipts.out_of_time {
                break;
            }
            let pending = self
                .recover_pending(shard, share, budget, &mut receipts)
                .await?;
            let share = share.saturating_sub(pending);
            if self
                .receipts_of_shard(shard, until, share, budget, &mut receipts)
                .await?
            {
                wanting.push(shard);
            }
        }
        for shard in wanting {
            let left = self
                .config
                .max_per_run
                .saturating_sub(receipts.checked as usize);
            if left == 0 || receipts.out_of_time {
                break;
            }
            self.receipts_of_shard(shard, until, left, budget, &mut receipts)
                .await?;
        }
        Ok(receipts)
    }

    /// Looks up the receipts of at most `limit` charges of `shard` after its cursor up to
    /// `until`, sends again the `PaymentCharged` of those without one, and moves the cursor;
    /// true when the limit left charges unread.
    async fn receipts_of_shard(
        &self,
        shard: &str,
        until: i64,
        limit: usize,
        budget: &Budget,
        receipts: &mut Receipts,
    ) -> Result<bool, ReconcileError> {
        let from = self.cursors(shard).await?.receipts;
        if from >= until || limit == 0 {
            return Ok(limit == 0 && from < until);
        }
        let mut charges = self.charged(shard, from, until, limit + 1).await?;
        let cut = keep_whole_instants(&mut charges, limit);
        let (looked, missing) = self.without_receipt(&charges, budget).await?;
        receipts.checked += looked as u64;
        // The cursor moves past whole instants only.
        let through = if looked < charges.len() {
            receipts.out_of_time = true;
            let open = charges[looked].charged_at;
            charges[..looked]
                .iter()
                .map(|c| c.charged_at)
                .filter(|at| *at < open)
                .max()
                .unwrap_or(from)
        } else if cut {
            charges.last().map_or(from, |c| c.charged_at)
        } else {
            until
        };
        let missing: Vec<&Charged> = missing
            .into_iter()
            .filter(|c| c.charged_at <= through)
            .collect();
        let sent_before = receipts.resent.len();
        let failed_at = self.send_again(&missing, receipts).await;
        // Those sent again are looked up again by the next runs, until their receipt exists.
        self.keep_pending(shard, &receipts.resent[sent_before..], true)
            .await?;
        let through = failed_at.map_or(through, |at| through.min(at - 1));
        // A shard with no charge keeps its cursor: its next query reads nothing either.
        if through > from && !charges.is_empty() {
            self.move_cursor(shard, RECEIPTS_CURSOR, through).await?;
        }
        Ok(cut && !receipts.out_of_time)
    }

    /// Looks up again the receipts of at most `limit` of the shard's pending payments (see the
    /// module): those whose receipt is there now leave the set, the others get their
    /// `PaymentCharged` sent again. Returns how many it looked up.
    async fn recover_pending(
        &self,
        shard: &str,
        limit: usize,
        budget: &Budget,
        receipts: &mut Receipts,
    ) -> Result<usize, ReconcileError> {
        let pending: Vec<String> = self
            .cursors(shard)
            .await?
            .pending_receipts
            .into_iter()
            .take(limit)
            .collect();
        let mut recovered = Vec::new();
        let mut missing = Vec::new();
        for payment_id in &pending {
            if budget.is_spent() {
                receipts.out_of_time = true;
                break;
            }
            if self.has_receipt(payment_id).await? {
                recovered.push(payment_id.clone());
                continue;
            }
            match self.charged_payment(payment_id).await? {
                Some(charge) => missing.push(charge),
                None => recovered.push(payment_id.clone()),
            }
        }
        receipts.checked += (recovered.len() + missing.len()) as u64;
        let missing: Vec<&Charged> = missing.iter().collect();
        // A send that fails leaves it pending: the next run sends it again.
        self.send_again(&missing, receipts).await;
        self.keep_pending(shard, &recovered, false).await?;
        Ok(recovered.len() + missing.len())
    }

    /// Adds `payment_ids` to the shard's pending set (`add`), or removes them from it.
    async fn keep_pending(
        &self,
        shard: &str,
        payment_ids: &[String],
        add: bool,
    ) -> Result<(), ReconcileError> {
        if payment_ids.is_empty() {
            return Ok(());
        }
        let table = &self.config.accounts_table;
        self.dynamodb
            .update_item()
            .table_name(table)
            .key("accountId", cursor_key(shard))
            .update_expression(if add {
                "ADD #pending :ids"
            } else {
                "DELETE #pending :ids"
            })
            .expression_attribute_names("#pending", RECEIPTS_PENDING)
            .expression_attribute_values(":ids", AttributeValue::Ss(payment_ids.to_vec()))
            .send()
            .await
            .map_err(ReconcileError::dynamodb("UpdateItem", table))?;
        Ok(())
    }

    /// The payment, read consistently, as the charged index carries it; `None` when it is not
    /// (or no longer) charged.
    async fn charged_payment(&self, payment_id: &str) -> Result<Option<Charged>, ReconcileError> {
        let table = &self.config.payments_table;
        let item = self
            .dynamodb
            .get_item()
            .table_name(table)
            .key("paymentId", AttributeValue::S(payment_id.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(ReconcileError::dynamodb("GetItem", table))?
            .item
            .unwrap_or_default();
        let charged = matches!(item.get("status"), Some(AttributeValue::S(s)) if s == PaymentStatus::Charged.as_str());
        Ok(charged.then(|| Charged::of(&item)).flatten())
    }

    /// How many of `charges` were looked up before `budget` was spent (in order), and those of
    /// them without a receipt.
    async fn without_receipt<'a>(
        &self,
        charges: &'a [Charged],
        budget: &Budget,
    ) -> Result<(usize, Vec<&'a Charged>), ReconcileError> {
        let mut reads = stream::iter(charges)
            .map(|charge| async move { (charge, self.has_receipt(&charge.payment_id).await) })
            .buffered(READS_IN_FLIGHT);
        let mut looked = 0;
        let mut missing = Vec::new();
        while let Some((charge, has)) = reads.next().await {
            if !has? {
                missing.push(charge);
            }
            looked += 1;
            if budget.is_spent() {
                break;
            }
        }
        Ok((looked, missing))
    }

    /// Whether the payment's receipt is in the receipts table.
    async fn has_receipt(&self, payment_id: &str) -> Result<bool, ReconcileError> {
        let table = &self.config.receipts_table;
        let item = self
            .dynamodb
            .get_item()
            .table_name(table)
            .key(
                "receiptId",
                AttributeValue::S(payments_model::receipt_id(payment_id)),
            )
            .projection_expression("receiptId")
            .consistent_read(true)
            .send()
            .await
            .map_err(ReconcileError::dynamodb("GetItem", table))?
            .item;
        Ok(item.is_some())
    }

    /// Sends the `PaymentCharged` of each of `charges` to the receipts queue; returns the
    /// `chargedAt` of the first whose send failed.
    async fn send_again(&self, charges: &[&Charged], receipts: &mut Receipts) -> Option<i64> {
        let messages = charges
            .iter()
            .map(|c| {
                let event = PaymentCharged {
                    payment_id: c.payment_id.clone(),
                    account_id: c.account_id.clone(),
                    amount_cents: c.amount_cents,
                    currency: c.currency.clone(),
                    ledger_entry_id: c.ledger_entry_id.clone(),
                };
                Message::standard(serde_json::to_string(&event).expect("serializable"))
            })
            .collect::<Vec<_>>();
        let mut sendable = Vec::new();
        let mut failed_at = None;
        for (charge, message) in charges.iter().zip(messages) {
            match message {
                Ok(m) => sendable.push((*charge, m)),
                Err(e) => {
                    failed_at = failed_at.or(Some(charge.charged_at));
                    receipts
                        .send_failed
                        .push((charge.payment_id.clone(), e.to_string()));
                }
            }
        }
        let (sent_charges, messages): (Vec<&Charged>, Vec<Message>) = sendable.into_iter().unzip();
        let results = self.receipts_queue.send_all(messages).await;
        for (charge, result) in sent_charges.into_iter().zip(results) {
            match result {
                Ok(_) => {
                    tracing::warn!(
                        payment_id = charge.payment_id,
                        "charged without a receipt: PaymentCharged sent again"
                    );
                    receipts.resent.push(charge.payment_id.clone());
                }
                Err(e) => {
                    tracing::warn!(payment_id = charge.payment_id, error = %e, "PaymentCharged not sent again");
                    failed_at = Some(
                        failed_at.map_or(charge.charged_at, |at: i64| at.min(charge.charged_at)),
                    );
                    receipts
                        .send_failed
                        .push((charge.payment_id.clone(), e.to_string()));
                }
            }
        }
        failed_at
    }
}
