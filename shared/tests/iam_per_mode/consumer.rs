//! A consumer of each mode, built as `Consumer::from_env` builds one (`ConsumerBuilder::from_clients`
//! over the guarded clients, its settings read as from the environment) with its defaults: the
//! attempt budget, backoff, the dead-letter queue (`DEAD_LETTER_QUEUE_URL`), the table's
//! cold-start check, and the queue's on the first event's source ARN (no `SOURCE_QUEUE_URL`).
//! Its grants are the rows of its mode and of the options that the `iam` module's docs name for a
//! consumer's defaults.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::batch::{BatchReport, Deduplicated};
use lambda_idempotency::consumer::{
    Consumer, ConsumerBuilder, ConsumerConfig, DEFAULT_BATCH_SIZE, DEFAULT_MAX_ATTEMPTS,
};
use lambda_idempotency::redrive_policy::{Finding, RedriveCheck};
use lambda_idempotency::time::Clock;

use crate::modes::{
    Deliver, Mode, batches, event, inline_handler, item_lookup, lease_handler,
    transactional_handler,
};
use crate::run::Run;
use crate::table::consumer_defaults;
use crate::{leaked, with};

/// SQS's default retention, the runs' queues'.
const FOUR_DAYS: Duration = Duration::from_secs(4 * 24 * 3600);

impl Deliver for Consumer<Deduplicated<String>> {
    async fn deliver(&self, records: Vec<SqsMessage>) -> BatchReport<Deduplicated<String>> {
        self.process(&event(records))
            .await
            .expect("the batch is processed")
    }
}

/// Runs a consumer of `mode` (lease, transactional with or without the record carried, or
/// inline; the last two with or without an item lookup) with its defaults under the grants of its mode and a consumer's defaults: the
/// [`batches`], then its cold-start report.
pub async fn run_consumer(mode: Mode) {
    let run = Run::new(with(mode, &[leaked(consumer_defaults())])).await;
    let environment = BTreeMap::from([
        ("IDEMPOTENCY_TABLE", run.idempotency.clone()),
        ("IDEMPOTENCY_KEY", "/id".to_owned()),
        ("IDEMPOTENCY_KEY_PREFIX", "fn".to_owned()),
        ("IDEMPOTENCY_TTL_SECONDS", "3600".to_owned()),
        ("DEAD_LETTER_QUEUE_URL", run.dead_letter.url.clone()),
    ]);
    let config = ConsumerConfig::from_lookup(|name| environment.get(name).cloned())
        .expect("the settings are valid");
    let builder = ConsumerBuilder::from_clients(run.dynamodb.clone(), run.sqs.clone(), config)
        .expect("the settings name the table")
        .map_engine(|engine| engine.with_clock(run.clock.clone()))
        .map_processor(|processor| processor.with_clock(run.clock.clone() as Arc<dyn Clock>));
    let consumer = match mode {
        Mode::Lease => builder.idempotent(lease_handler()),
        Mode::Transactional | Mode::Carried => {
            let carried = mode == Mode::Carried;
            builder.transactional(transactional_handler(run.effects.clone(), carried))
        }
        Mode::Inline => builder.inline(inline_handler(run.effects.clone())),
        Mode::InlineLookup => builder
            .with_item_lookup(item_lookup(run.effects.clone(), mode))
            .inline(inline_handler(run.effects.clone())),
        Mode::CarriedLookup => builder
            .with_item_lookup(item_lookup(run.effects.clone(), mode))
            .transactional(transactional_handler(run.effects.clone(), true)),
        Mode::InlineRead => panic!("a consumer's inline mode reads no attempts"),
    };

    batches(&run, &consumer, mode, Some(DEFAULT_MAX_ATTEMPTS)).await;

    // The queue's check was started by the first batch, on its event source ARN: the report
    // is given none.
    let report = consumer
        .cold_start_report(None)
        .await
        .expect("the table fits");
    assert_eq!(report.table_warnings, Some(Vec::new()));
    let queue = report
        .queue
        .expect("the queue check ran on the event's queue");
    assert_eq!(
        queue.redrive,
        RedriveCheck::Ok {
            max_receive_count: 64,
            required: (DEFAULT_BATCH_SIZE - 1) * (DEFAULT_MAX_ATTEMPTS - 1) + DEFAULT_MAX_ATTEMPTS
        }
    );
    assert!(queue.source.is_some(), "{queue:?}");
    assert_eq!(
        queue.dead_letter_arn.as_deref(),
        Some(run.dead_letter.arn.as_str())
    );
    assert!(queue.dead_letter.is_some(), "{queue:?}");
    // The runs' records expire after an hour, before the queues' four days of retention.
    assert_eq!(
        queue.findings,
        [Finding::ExpiryTooShort {
            expiry: Duration::from_secs(3600),
            source_retention: FOUR_DAYS,
            dead_letter_retention: FOUR_DAYS,
            required: 2 * FOUR_DAYS,
        }]
    );
    run.assert_exactly_the_tables_actions();
}
