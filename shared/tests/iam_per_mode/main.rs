//! IAM per mode, proved against the table of `src/iam.rs` (the crate's `iam` module docs), which
//! this test reads: each mode and option runs through the batch processor, and a consumer of each
//! mode with its defaults, on the local endpoint (moto, `make test`) with DynamoDB and SQS
//! clients whose every request passes a guard, an SDK interceptor that refuses any action the
//! table does not grant for that run and records the ones used. Each run must pass with no
//! request refused, and use exactly the actions the table grants it: the table neither misses an
//! action nor grants one that is not used.
//!
//! moto enforces no IAM: the guard maps each request to the IAM actions AWS authorizes it by
//! (a `TransactWriteItems` action by action, `SendMessageBatch` as `sqs:SendMessage`,
//! `ChangeMessageVisibilityBatch` as `sqs:ChangeMessageVisibility`) and to the resource it names.
//!
//! - `table`: the table and the policy snippet, read from `src/iam.rs`;
//! - `guard`: the interceptor, and the IAM actions of each request;
//! - `run`: one run's tables, queues and guarded clients, and the check at its end;
//! - `modes`: the handlers of the modes, and the batches that take each through its paths;
//! - `consumer`: the same batches through a consumer with its defaults;
//! - `streams`: a stream consumer of each source under the workspace README's column for it.

#[path = "../common/mod.rs"]
mod common;
mod consumer;
mod guard;
mod modes;
mod run;
// The workspace README's IAM table, a column per source: only where the README is.
#[cfg(workspace_readme)]
mod streams;
mod table;

use std::collections::BTreeSet;
use std::time::Duration;

use lambda_idempotency::batch::{
    BatchProcessor, RecordContext, RecordError, RecordHandlerExt, json,
};
use lambda_idempotency::publish::{Message, Publisher};
use lambda_idempotency::redrive_policy::{self, QueueRef, RedriveCheck};
use lambda_idempotency::store::{DynamoDbBackend, StoreError};

use crate::consumer::run_consumer;
use crate::modes::{Mode, Options, event, run_mode};
use crate::run::{Run, queue};
use crate::table::{Grant, Resource, consumer_defaults, granted, snippet_grants, table};

// ---------------------------------------------------------------------------------------------
// The runs, by the table's labels. Every label of the table is in one of them
// (`every_row_of_the_table_is_exercised`).

const LEASE: &[&str] = &["lease"];
const TRANSACTIONAL: &[&str] = &["transactional"];
const CARRIED: &[&str] = &["transactional, carried record"];
const INLINE: &[&str] = &["inline"];
const INLINE_READ: &[&str] = &["inline", "inline, attempts read"];
const INLINE_LOOKUP: &[&str] = &["inline", "item lookup"];
const CARRIED_LOOKUP: &[&str] = &["transactional, carried record", "item lookup"];
/// Every option of the batch processor, added to a mode.
const OPTIONS: &[&str] = &[
    "attempt budget",
    "backoff",
    "dead-letter queue",
    "table check",
    "redrive check",
    "queue check",
];
const LOCAL_CACHE: &[&str] = &["local cache"];
const DEAD_LETTERS: &[&str] = &["attempt budget", "dead-letter queue"];
const BACKOFF: &[&str] = &["backoff"];
const TABLE_CHECK: &[&str] = &["table check"];
const REDRIVE_CHECK: &[&str] = &["redrive check"];
const QUEUE_CHECK: &[&str] = &["redrive check", "queue check"];
const REFUSAL: &[&str] = &["lease", "refusal diagnosis"];
const GET_FORGET: &[&str] = &["get", "forget"];
const PUBLISHER: &[&str] = &["publisher"];

const ALL_LABEL_SETS: &[&[&str]] = &[
    LEASE,
    TRANSACTIONAL,
    CARRIED,
    INLINE,
    INLINE_READ,
    INLINE_LOOKUP,
    CARRIED_LOOKUP,
    OPTIONS,
    LOCAL_CACHE,
    DEAD_LETTERS,
    BACKOFF,
    TABLE_CHECK,
    REDRIVE_CHECK,
    QUEUE_CHECK,
    REFUSAL,
    GET_FORGET,
    PUBLISHER,
];

#[test]
fn every_row_of_the_table_is_exercised() {
    let labels: BTreeSet<String> = table().into_iter().map(|r| r.label).collect();
    let exercised: BTreeSet<String> = ALL_LABEL_SETS
        .iter()
        .flat_map(|set| set.iter().map(|l| (*l).to_owned()))
        .collect();
    assert_eq!(labels, exercised);
}

#[test]
fn a_lease_consumer_needs_update_item_alone_on_the_idempotency_table() {
    let expected: BTreeSet<Grant> =
        [("dynamodb:UpdateItem".to_owned(), Resource::IdempotencyTable)]
            .into_iter()
            .collect();
    assert_eq!(granted(LEASE), expected);
}

/// The snippet is for an inline consumer with its item lookup (as the README's first consumer):
/// the rows of **inline**, **item lookup** and a consumer's defaults, and the event source
/// mapping's.
#[test]
fn the_policy_snippet_grants_the_inline_consumer_exactly_the_tables_actions() {
    let mut needed = granted(&[INLINE_LOOKUP, leaked(consumer_defaults())].concat());
    // Lambda's event source mapping, with the function's role.
    for action in [
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
        "sqs:GetQueueAttributes",
    ] {
        needed.insert((action.to_owned(), Resource::SourceQueue));
    }
    assert_eq!(snippet_grants(), needed);
}

// ---------------------------------------------------------------------------------------------
// Each mode alone, with every option, and with every option and the local cache.

/// `mode`'s labels and more, for a run's lifetime (the runs are few, and end with the test).
fn with(mode: Mode, more: &[&'static [&'static str]]) -> &'static [&'static str] {
    let mut labels: Vec<&'static str> = mode.labels().to_vec();
    for set in more {
        labels.extend_from_slice(set);
    }
    Vec::leak(labels)
}

/// `labels`, for a run's lifetime.
fn leaked(labels: Vec<String>) -> &'static [&'static str] {
    Vec::leak(labels.into_iter().map(|l| &*String::leak(l)).collect())
}

/// The three runs of each mode: `$alone`, `$every` option, and every option and the local
/// `$cache`.
macro_rules! each_mode {
    ($($mode:ident: $alone:ident, $every:ident, $cache:ident;)+) => {$(
        #[tokio::test]
        async fn $alone() {
            run_mode(Mode::$mode, Options::NONE, Mode::$mode.labels()).await;
        }

        #[tokio::test]
        async fn $every() {
            run_mode(Mode::$mode, Options::ALL, with(Mode::$mode, &[OPTIONS])).await;
        }

        #[tokio::test]
        async fn $cache() {
            let options = Options {
                local_cache: true,
                ..Options::ALL
            };
            let labels = with(Mode::$mode, &[OPTIONS, LOCAL_CACHE]);
            run_mode(Mode::$mode, options, labels).await;
        }
    )+};
}

each_mode! {
    Lease: lease_alone, lease_with_every_option, lease_with_every_option_and_the_local_cache;
    Transactional: transactional_alone, transactional_with_every_option,
        transactional_with_every_option_and_the_local_cache;
    Carried: carried_record_alone, carried_record_with_every_option,
        carried_record_with_every_option_and_the_local_cache;
    Inline: inline_alone, inline_with_every_option, inline_with_every_option_and_the_local_cache;
    InlineRead: inline_with_its_attempts_read_alone, inline_with_its_attempts_read_and_every_option,
        inline_with_its_attempts_read_every_option_and_the_local_cache;
    InlineLookup: inline_with_its_item_lookup_alone, inline_with_its_item_lookup_and_every_option,
        inline_with_its_item_lookup_every_option_and_the_local_cache;
    CarriedLookup: carried_record_with_its_item_lookup_alone,
        carried_record_with_its_item_lookup_and_every_option,
        carried_record_with_its_item_lookup_every_option_and_the_local_cache;
}

// ---------------------------------------------------------------------------------------------
// A consumer of each mode, with its defaults.

#[tokio::test]
async fn a_lease_consumer_with_its_defaults() {
    run_consumer(Mode::Lease).await;
}

#[tokio::test]
async fn a_transactional_consumer_with_its_defaults() {
    run_consumer(Mode::Transactional).await;
}

#[tokio::test]
async fn a_transactional_consumer_carrying_its_record_with_its_defaults() {
    run_consumer(Mode::Carried).await;
}

#[tokio::test]
async fn an_inline_consumer_with_its_defaults() {
    run_consumer(Mode::Inline).await;
}

#[tokio::test]
async fn an_inline_consumer_with_its_item_lookup_and_its_defaults() {
    run_consumer(Mode::InlineLookup).await;
}

#[tokio::test]
async fn a_transactional_consumer_carrying_its_record_with_its_item_lookup_and_its_defaults() {
    run_consumer(Mode::CarriedLookup).await;
}

// ---------------------------------------------------------------------------------------------
// Each option on its own: what it adds to a mode, or needs alone.

#[tokio::test]
async fn an_attempt_budget_with_a_dead_letter_queue() {
    let options = Options {
        dead_letters: true,
        ..Options::NONE
    };
    run_mode(Mode::Inline, options, with(Mode::Inline, &[DEAD_LETTERS])).await;
}

#[tokio::test]
async fn backoff() {
    let options = Options {
        backoff: true,
        ..Options::NONE
    };
    run_mode(Mode::Inline, options, with(Mode::Inline, &[BACKOFF])).await;
}

#[tokio::test]
async fn the_table_check() {
    let run = Run::new(TABLE_CHECK).await;
    let check = run.backend().check_table().await.expect("the table fits");
    assert!(check.warnings.is_empty(), "{:?}", check.warnings);
    run.assert_exactly_the_tables_actions();
}

#[tokio::test]
async fn the_redrive_check_of_a_queue_given_by_its_arn() {
    let run = Run::new(REDRIVE_CHECK).await;
    let check =
        redrive_policy::check(&run.sqs, &QueueRef::Arn(run.source.arn.clone()), 10, 5).await;
    assert_eq!(
        check,
        RedriveCheck::Ok {
            max_receive_count: 64,
            required: 41
        }
    );
    run.assert_exactly_the_tables_actions();
}

#[tokio::test]
async fn the_queue_check() {
    let run = Run::new(QUEUE_CHECK).await;
    let source = QueueRef::Arn(run.source.arn.clone());
    let check =
        redrive_policy::check_queue(&run.sqs, &source, 10, 5, Duration::from_secs(3600), None)
            .await;
    assert!(check.source.is_some(), "{check:?}");
    assert!(check.dead_letter.is_some(), "{check:?}");
    assert_eq!(
        check.dead_letter_arn.as_deref(),
        Some(run.dead_letter.arn.as_str())
    );
    run.assert_exactly_the_tables_actions();
}

#[tokio::test]
async fn a_refused_request_is_diagnosed_by_describing_the_table() {
    let run = Run::new(REFUSAL).await;
    // The backend over the effect table (partition key `pk`), named as the idempotency table.
    {
        let mut ledger = run.guard.ledger();
        ledger
            .resources
            .insert(run.effects.clone(), Resource::IdempotencyTable);
    }
    let engine = run.engine(DynamoDbBackend::new(run.dynamodb.clone(), &run.effects));
    let handler =
        json(|_: serde_json::Value, _: RecordContext| async move { Ok::<_, std::io::Error>(()) })
            .idempotent(engine);
    let records = vec![run.record("m-1", "{}", 1).await];
    let report = BatchProcessor::new()
        .process(&event(records), &handler)
        .await
        .unwrap();
    let error = report.records[0].result.as_ref().unwrap_err();
    assert!(
        matches!(
            error,
            RecordError::Store(StoreError::Misconfigured { problem, .. })
                if problem.contains("its partition key is `pk` (S), but the backend writes `id` (S)")
        ),
        "{error:?}"
    );
    run.assert_exactly_the_tables_actions();
}

#[tokio::test]
async fn an_operator_reads_and_forgets_a_record() {
    let run = Run::new(GET_FORGET).await;
    let setup = run.engine(DynamoDbBackend::new(
        run.setup_dynamodb.clone(),
        &run.idempotency,
    ));
    setup
        .run("k", b"{}", None, || async { Ok::<_, std::io::Error>(1) })
        .await
        .unwrap();
    let engine = run.engine(run.backend());
    assert!(engine.get("k").await.unwrap().is_some());
    engine.forget("k").await.unwrap();
    assert!(run.stored("k").await.is_none());
    run.assert_exactly_the_tables_actions();
}

#[tokio::test]
async fn the_publisher() {
    let run = Run::new(PUBLISHER).await;
    let target = queue(&run.setup_sqs, &common::unique("published"), None).await;
    run.guard
        .ledger()
        .resources
        .insert(target.name.clone(), Resource::PublishersQueue);
    Publisher::new(run.sqs.clone(), &target.url)
        .send(Message::standard("hello").unwrap())
        .await
        .unwrap();
    run.assert_exactly_the_tables_actions();
}
