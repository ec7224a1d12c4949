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

use aws_sdk_dynamodb::types::AttributeValue;
use futures_util::stream::{self, StreamExt};
use lambda_idempotency::publish::Message;
use payments_model::{PaymentCharged, lifecycle};

pub use super::audit::CURSOR_PREFIX;
use super::audit::{Charged, RECEIPTS_CURSOR, keep_whole_instants};
use super::waiting::millis;
use super::{Budget, ReconcileError, Reconciler};

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
        for shard in lifecycle::shards() {
            let left = self
                .config
                .max_per_run
                .saturating_sub(receipts.checked as usize);
            if left == 0 || receipts.out_of_time {
                break;
            }
            let from = self.cursors(&shard).await?.receipts;
            if from >= until {
                continue;
            }
            let mut charges = self.charged(&shard, from, until, left + 1).await?;
            let cut = keep_whole_instants(&mut charges, left);
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
            let failed_at = self.send_again(&missing, &mut receipts).await;
            let through = failed_at.map_or(through, |at| through.min(at - 1));
            // A shard with no charge keeps its cursor: its next query reads nothing either.
            if through > from && !charges.is_empty() {
                self.move_cursor(&shard, RECEIPTS_CURSOR, through).await?;
            }
        }
        Ok(receipts)
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
