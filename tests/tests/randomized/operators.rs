//! What operators and the schedule do: reopen what failed, redrive the dead letters, and the
//! reconciler's runs.

use std::collections::BTreeSet;
use std::time::Duration;

use payments_e2e::Pipeline;
use payments_e2e::invariants::Snapshot;
use payments_operations::reconcile::Report;
use payments_operations::redrive::{self, RedriveOptions};
use payments_operations::reopen::{Reopener, Reopening, Tables};

/// Reopens every failed payment, as an operator does once the cause is fixed.
pub async fn reopen_failed(pipeline: &Pipeline) -> usize {
    let table = |id: &str| pipeline.resources.tables[id].name.clone();
    let reopener = Reopener::new(
        pipeline.clients.dynamodb.clone(),
        pipeline.clients.sqs.clone(),
        Tables {
            payments: table("PaymentsTable"),
            accounts: table("AccountsTable"),
        },
        pipeline.resources.queues["PaymentsQueue"].url.clone(),
    );
    let stored = Snapshot::read(&pipeline.clients.dynamodb, &pipeline.tables())
        .await
        .unwrap();
    let mut reopened = 0;
    for (id, payment) in &stored.payments {
        if payment.status == "failed" {
            let reopening = Reopening {
                payment_id: id.clone(),
                operator: "on-call".into(),
                reason: "the randomized run reopens what failed".into(),
            };
            reopener.reopen(&reopening).await.unwrap();
            reopened += 1;
        }
    }
    reopened
}

/// Moves each dead-letter queue's messages back to its source queue.
pub async fn redrive_all(pipeline: &Pipeline) -> usize {
    let options = RedriveOptions::default().wait_time(Duration::ZERO);
    let mut moved = 0;
    for (dlq, source) in [
        ("PaymentsDeadLetterQueue", "PaymentsQueue"),
        ("ReceiptsDeadLetterQueue", "ReceiptsQueue"),
    ] {
        let q = |id: &str| pipeline.resources.queues[id].url.clone();
        let report = redrive::redrive(&pipeline.clients.sqs, &q(dlq), &q(source), options.clone())
            .await
            .unwrap();
        // A message that fails again at once comes back before the run ends: it stays in the
        // dead-letter queue, reported failed. Nothing else may go wrong.
        assert!(
            report.stopped.is_none() && report.not_deleted.is_empty(),
            "{report}"
        );
        moved += report.moved;
    }
    moved
}

/// When a reconciler run comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// While payments are being charged: the audit keeps its lag (a charge may still commit
    /// with an earlier `chargedAt` than the run's clock), and charges without their receipt
    /// keep theirs (a `PaymentCharged` still on its way would be sent again, and the copy
    /// would wait for receipt-sender's lease on the first).
    Traffic,
    /// Once the pipeline drained: nothing is in flight, every charge is looked at.
    Drained,
}

/// One run of payments-reconciler as its schedule runs it, with a short wait (1 s, not 5
/// minutes) before it acts on a payment left `accepted`, so that it acts within the run: sends
/// again what is still waiting, sends back a message SQS moved to the dead-letter queue and
/// marks failed what payment-processor dead-lettered (or SQS moved past the limit);
/// after a drain it also looks up every charge's receipt and audits every charge. Whatever it
/// finds, it must send what it means to and find no audit mismatch; which payments it marked
/// failed is checked by the caller ([`assert_marked_only`]).
pub async fn reconcile(pipeline: &Pipeline, when: When) -> Report {
    reconcile_at(pipeline, when, payments_publisher::now_ms()).await
}

/// [`reconcile`] as the schedule runs it at `at_ms` (epoch ms): later than now for a run that
/// comes after what the test shortens (a round of crashes, each receive a visibility timeout
/// apart on AWS).
pub async fn reconcile_at(pipeline: &Pipeline, when: When, at_ms: i64) -> Report {
    let mut overrides = vec![("RESEND_AFTER_SECONDS", "1")];
    if when == When::Drained {
        overrides.extend([("RECEIPT_AFTER_SECONDS", "0"), ("AUDIT_LAG_SECONDS", "0")]);
    }
    let reconciler = pipeline.reconciler(&overrides).unwrap();
    let report = reconciler
        .run(at_ms)
        .await
        .unwrap_or_else(|e| panic!("the reconciler's run ({when:?}) failed: {e}"));
    assert!(
        report.waiting.send_failed.is_empty()
            && report.receipts.send_failed.is_empty()
            && report.audit.mismatches.is_empty(),
        "the reconciler's run ({when:?}):\n{report}"
    );
    report
}

/// The reconciler marked failed only payments in `may_fail`: those the run made fail.
pub fn assert_marked_only(reports: &[Report], may_fail: &BTreeSet<String>) {
    for report in reports {
        for id in &report.waiting.marked_failed {
            assert!(
                may_fail.contains(id),
                "the reconciler marked {id} failed, which the run did not make fail:\n{report}"
            );
        }
    }
}

/// The failed payments now, with their reasons.
pub async fn failed(pipeline: &Pipeline) -> std::collections::BTreeMap<String, Option<String>> {
    let stored = Snapshot::read(&pipeline.clients.dynamodb, &pipeline.tables())
        .await
        .unwrap();
    stored
        .payments
        .into_iter()
        .filter(|(_, p)| p.status == "failed")
        .map(|(id, p)| (id, p.last_error))
        .collect()
}

/// The queue's `maxReceiveCount`, as provisioned from the template.
pub async fn max_receive_count(pipeline: &Pipeline, queue: &str) -> u32 {
    use aws_sdk_sqs::types::QueueAttributeName;
    let attributes = pipeline
        .clients
        .sqs
        .get_queue_attributes()
        .queue_url(&pipeline.resources.queues[queue].url)
        .attribute_names(QueueAttributeName::RedrivePolicy)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap_or_default();
    let policy: serde_json::Value =
        serde_json::from_str(&attributes[&QueueAttributeName::RedrivePolicy]).unwrap();
    match &policy["maxReceiveCount"] {
        serde_json::Value::String(s) => s.parse().unwrap(),
        n => n.as_u64().unwrap() as u32,
    }
}

/// The messages of the payments dead-letter queue that SQS moved itself (no `DeadLetterReason`),
/// by payment id (`?` for a body without one); each message read once.
pub async fn moved_by_sqs(pipeline: &Pipeline) -> Vec<String> {
    let url = &pipeline.resources.queues["PaymentsDeadLetterQueue"].url;
    payments_e2e::stack::dead_letters_in_queue(&pipeline.clients.sqs, url, Duration::from_secs(60))
        .await
        .unwrap()
        .into_iter()
        .filter(|(_, reason)| reason.is_empty())
        .map(|(id, _)| id)
        .collect()
}
