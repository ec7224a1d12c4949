//! The pipeline's metrics: CloudWatch Embedded Metric Format lines in [`NAMESPACE`], with one
//! dimension, [`FUNCTION_DIMENSION`], naming the function ([`function`]). The names live here,
//! once: the functions emit them, and the template's check (`infra/tests/alarms.rs`) proves that
//! each metric of [`ALARMED`] has an alarm with an action; `tests/tests/dashboard` that the
//! template's dashboard shows every metric the functions emit, and that each metric the
//! dashboard or an alarm watches is one they emit.

pub use lambda_idempotency::metrics::FUNCTION_DIMENSION;

/// The namespace of the pipeline's metrics.
pub const NAMESPACE: &str = "PaymentsPipeline";

/// The functions' names: the values of [`FUNCTION_DIMENSION`].
pub mod function {
    /// The HTTP API's function.
    pub const PAYMENTS_API: &str = "payments-api";
    /// The outbox relay.
    pub const PAYMENTS_PUBLISHER: &str = "payments-publisher";
    /// The payments.fifo consumer.
    pub const PAYMENT_PROCESSOR: &str = "payment-processor";
    /// The receipts consumer.
    pub const RECEIPT_SENDER: &str = "receipt-sender";
    /// The scheduled reconciler.
    pub const PAYMENTS_RECONCILER: &str = "payments-reconciler";
}

/// payments-api: one count of 1 per request, named by its outcome.
pub mod api {
    /// A payment stored (`201`).
    pub const ACCEPTED: &str = "accepted";
    /// A stored response replayed.
    pub const REPLAYED: &str = "replayed";
    /// The key's first request still runs (`409`).
    pub const IN_PROGRESS: &str = "in_progress";
    /// The key was used with another body (`422`).
    pub const KEY_REUSED: &str = "key_reused";
    /// Refused input (`400`, `405`, `413`, `415`).
    pub const REJECTED: &str = "rejected";
    /// No caller or account in the verified claims (`401`, `403`).
    pub const UNAUTHORIZED: &str = "unauthorized";
    /// No such route or payment (`404`).
    pub const NOT_FOUND: &str = "not_found";
    /// A payment read (`200`).
    pub const FOUND: &str = "found";
    /// DynamoDB failed (`503`): the invocation succeeds, so Lambda's `Errors` does not count it.
    pub const UNAVAILABLE: &str = "unavailable";
}

/// payment-processor: counts per batch, beside the batch's `processed`, `duplicate`, `failed`
/// and `dead_lettered`, each the batch's own even when several invocations run at once in one
/// process (Lambda Managed Instances): they are counted per invocation.
pub mod processor {
    /// Duplicates answered from the warm-container cache, without a request.
    pub const CACHE_HITS: &str = "cacheHits";
    /// `PaymentCharged` events sent again for duplicates of charged payments.
    pub const RECEIPTS_RESENT: &str = "receiptsResent";
    /// Payments marked `failed` while charged ahead of their own message (an account's earlier
    /// payment that could not be charged): no dead letter holds them until their message comes.
    pub const FAILED_AHEAD: &str = "failedAhead";
}

/// payments-publisher: counts per batch of stream records.
pub mod publisher {
    /// Payments sent to payments.fifo.
    pub const RELAYED: &str = "relayed";
    /// Records reported failed (Lambda retries them).
    pub const FAILED: &str = "failed";
    /// Records that can never be sent, put on payments-outbox-dlq.
    pub const DEAD_LETTERED: &str = "deadLettered";
    /// The batch's largest lag from a payment's acceptance to its send (ms).
    pub const MAX_RELAY_LAG: &str = "maxRelayLag";
}

/// The reconciler (`payments-reconciler`): counts per run.
pub mod reconciler {
    /// 1 per run: its heartbeat.
    pub const RUNS: &str = "runs";
    /// Payments `accepted` for longer than the reconciler's threshold.
    pub const STUCK: &str = "stuck";
    /// Payments left `accepted` sent again: the relay or the processor did not do its part.
    pub const RESENT: &str = "resent";
    /// Payments left `accepted` not sent again because the dead-letter queue may hold their
    /// message unseen.
    pub const UNCHECKED: &str = "unchecked";
    /// Charged payments without their receipt whose `PaymentCharged` was sent again.
    pub const RECEIPTS_RESENT: &str = "receiptsResent";
    /// Stuck payments marked `failed` from their dead-letter queue.
    pub const MARKED_FAILED: &str = "markedFailed";
    /// Payments whose message SQS moved to the dead-letter queue (crashes or timeouts), sent
    /// back to the payments queue: a crash loop, or a message that crashes its consumer.
    pub const SENT_BACK: &str = "sentBack";
    /// Charged payments whose ledger entry or balance disagrees.
    pub const LEDGER_MISMATCHES: &str = "ledgerMismatches";
    /// Charges audited against the ledger and the balances.
    pub const AUDITED: &str = "audited";
}

/// When a metric of [`ALARMED`] raises its alarm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// Above a threshold (`GreaterThanThreshold`): a failure counted, or a lag too long.
    Above,
    /// Missing, or below its threshold (`LessThanThreshold`, missing data breaching): a
    /// heartbeat that stopped.
    Missing,
}

/// A metric that needs a person when it fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alarmed {
    /// The function that emits it ([`FUNCTION_DIMENSION`]'s value).
    pub function: &'static str,
    /// The metric's name.
    pub metric: &'static str,
    /// When its alarm fires.
    pub trigger: Trigger,
}

const fn above(function: &'static str, metric: &'static str) -> Alarmed {
    Alarmed {
        function,
        metric,
        trigger: Trigger::Above,
    }
}

/// The metrics that denote a failure: each has an alarm in `template.yaml`.
pub const ALARMED: &[Alarmed] = &[
    above(function::PAYMENTS_API, api::UNAVAILABLE),
    above(
        function::PAYMENT_PROCESSOR,
        lambda_idempotency::metrics::DEAD_LETTERED,
    ),
    above(function::PAYMENT_PROCESSOR, processor::FAILED_AHEAD),
    above(
        function::RECEIPT_SENDER,
        lambda_idempotency::metrics::DEAD_LETTERED,
    ),
    above(function::PAYMENTS_PUBLISHER, publisher::DEAD_LETTERED),
    above(function::PAYMENTS_PUBLISHER, publisher::MAX_RELAY_LAG),
    Alarmed {
        function: function::PAYMENTS_RECONCILER,
        metric: reconciler::RUNS,
        trigger: Trigger::Missing,
    },
    above(function::PAYMENTS_RECONCILER, reconciler::STUCK),
    above(function::PAYMENTS_RECONCILER, reconciler::RESENT),
    above(function::PAYMENTS_RECONCILER, reconciler::UNCHECKED),
    above(function::PAYMENTS_RECONCILER, reconciler::SENT_BACK),
    above(function::PAYMENTS_RECONCILER, reconciler::RECEIPTS_RESENT),
    above(function::PAYMENTS_RECONCILER, reconciler::LEDGER_MISMATCHES),
];
