//! What a case of the reconciler's exploration ends with, read from its stack, and what is wrong
//! with it.

use payments_operations::reconcile::Report;

use super::{Harness, Item, REASON, Seen, State};

impl Harness {
    /// A payment's item, read consistently.
    pub(super) async fn item(&self, payment_id: &str) -> Item {
        self.stack
            .get("PaymentsTable", "paymentId", payment_id)
            .await
            .unwrap()
            .unwrap_or_default()
    }

    /// A payment's status and reason.
    async fn status(&self, payment_id: &str) -> (String, String) {
        let item = self.item(payment_id).await;
        let s = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
        (
            s("status").unwrap_or_default(),
            s("lastError").unwrap_or_default(),
        )
    }

    async fn has_receipt(&self, payment_id: &str) -> bool {
        let receipt_id = payments_model::receipt_id(payment_id);
        self.stack
            .get("ReceiptsTable", "receiptId", &receipt_id)
            .await
            .unwrap()
            .is_some()
    }

    /// Every duty done: the dead-lettered payment failed, the waiting one charged, the receipt
    /// written.
    pub(super) async fn work_done(&self, state: &State) -> bool {
        self.status(&state.dead.payment_id).await.0 == "failed"
            && self.status(&state.waiting.payment_id).await.0 == "charged"
            && self.has_receipt(&state.receiptless.payment_id).await
    }

    /// What is wrong once a case's runs ended.
    pub(super) async fn check(
        &self,
        state: &State,
        seen: &Seen,
        reports: &[Report],
    ) -> Vec<String> {
        let mut problems = Vec::new();
        let (status, reason) = self.status(&state.dead.payment_id).await;
        let own = format!("in the dead-letter queue: {REASON}");
        if status != "failed" || reason != own {
            problems.push(format!(
                "the dead-lettered payment is {status} ({reason:?}), not failed with its reason"
            ));
        }
        let (status, _) = self.status(&state.waiting.payment_id).await;
        if status != "charged" {
            problems.push(format!("the waiting payment is {status}, not charged"));
        }
        if !self.has_receipt(&state.receiptless.payment_id).await {
            problems.push("the receipt was not recovered".to_owned());
        }
        // Messages on payments.fifo, and PaymentCharged events: the waiting payment's own, once
        // charged, and the recovered receipt's, at least once: the receipts queue is a standard
        // queue, so a send whose answer was lost is sent again as a second event (no
        // deduplication id, as on payments.fifo), which receipt-sender takes as a duplicate
        // (one receipt, checked above and by the invariant checker).
        let expected = [
            ("the dead-lettered payment", &state.dead, [0, 0], false),
            ("the waiting payment", &state.waiting, [1, 1], false),
            (
                "the payment without its receipt",
                &state.receiptless,
                [0, 1],
                true,
            ),
        ]
        .into_iter()
        .chain(
            state
                .innocent
                .iter()
                .map(|(p, _)| ("an innocent payment", p, [0, 0], false)),
        );
        for (role, p, want, or_more) in expected {
            let got = seen.get(&p.payment_id).copied().unwrap_or_default();
            let events_ok = if or_more {
                got[1] >= want[1]
            } else {
                got[1] == want[1]
            };
            if got[0] != want[0] || !events_ok {
                problems.push(format!(
                    "{role} {}: {} messages on payments.fifo and {} PaymentCharged, expected {} \
                     and {}{}",
                    p.payment_id,
                    got[0],
                    got[1],
                    want[0],
                    want[1],
                    if or_more { " or more" } else { "" }
                ));
            }
        }
        for (p, before) in &state.innocent {
            let now = self.item(&p.payment_id).await;
            if &now != before {
                problems.push(format!(
                    "the innocent payment {} changed: {before:?} became {now:?}",
                    p.payment_id
                ));
            }
        }
        for report in reports {
            for mismatch in &report.audit.mismatches {
                problems.push(format!("the audit reported: {mismatch}"));
            }
        }
        for queue in ["PaymentsQueue", "ReceiptsQueue"] {
            let left = self.stack.depth(queue).await.unwrap();
            if left > 0 {
                problems.push(format!("{queue} holds {left} messages"));
            }
        }
        problems
    }
}
