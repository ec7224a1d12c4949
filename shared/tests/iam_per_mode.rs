//! IAM per mode, proved against the table of `src/iam.rs` (the crate's `iam` module docs), which
//! this test reads: each mode and option runs through the batch processor on the local endpoint
//! (moto, `make test`) with DynamoDB and SQS clients whose every request passes a guard, an SDK
//! interceptor that refuses any action the table does not grant for that run and records the
//! ones used. Each run must pass with no request refused, and use exactly the actions the table
//! grants it: the table neither misses an action nor grants one that is not used.
//!
//! moto enforces no IAM: the guard maps each request to the IAM actions AWS authorizes it by
//! (a `TransactWriteItems` action by action, `SendMessageBatch` as `sqs:SendMessage`,
//! `ChangeMessageVisibilityBatch` as `sqs:ChangeMessageVisibility`) and to the resource it names.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use aws_sdk_dynamodb::config::interceptors::BeforeSerializationInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Delete, Put, TransactWriteItem, Update,
};
use aws_sdk_sqs::types::QueueAttributeName;
use aws_smithy_runtime_api::client::interceptors::context::Input;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use lambda_idempotency::Idempotency;
use lambda_idempotency::backoff::VisibilityBackoff;
use lambda_idempotency::batch::{
    BatchProcessor, BatchReport, Deduplicated, RecordContext, RecordError, RecordHandler,
    RecordHandlerExt, json,
};
use lambda_idempotency::cache::LocalCache;
use lambda_idempotency::count::RequestCounter;
use lambda_idempotency::dead_letter::DeadLetter;
use lambda_idempotency::inline::InlinePut;
use lambda_idempotency::key::KeyConfig;
use lambda_idempotency::publish::{Message, Publisher};
use lambda_idempotency::redrive_policy::{self, QueueRef, RedriveCheck};
use lambda_idempotency::store::{
    Backend, DynamoDbBackend, InlineBackend, NewItem, StoreError, TransactionalBackend,
};
use lambda_idempotency::time::{Clock, ManualClock};
use lambda_idempotency::transaction::Transaction;
use lambda_runtime::{Context, LambdaEvent};

// ---------------------------------------------------------------------------------------------
// The table, as the crate documents it.

/// The source of the `iam` module: its docs hold the table.
const IAM_DOCS: &str = include_str!("../src/iam.rs");

/// The table's header row.
const HEADER: &str = "| Mode or option | Action | Resource | Why |";

/// A resource of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Resource {
    IdempotencyTable,
    EffectTables,
    SourceQueue,
    DeadLetterQueue,
    PublishersQueue,
}

impl Resource {
    /// The resource a cell of the table names; `None` for `none`.
    fn parse(cell: &str) -> Option<Self> {
        match cell {
            "idempotency table" => Some(Self::IdempotencyTable),
            "effect tables" => Some(Self::EffectTables),
            "source queue" => Some(Self::SourceQueue),
            "dead-letter queue" => Some(Self::DeadLetterQueue),
            "publisher's queue" => Some(Self::PublishersQueue),
            "none" => None,
            other => panic!("the IAM table names an unknown resource {other:?}"),
        }
    }
}

/// An action on a resource: what IAM is asked for.
type Grant = (String, Resource);

/// A row of the table: a mode or option, and the action it needs on a resource (none for a row
/// that says `none`).
#[derive(Debug)]
struct Row {
    label: String,
    grant: Option<Grant>,
}

/// The rows of the table in the `iam` module's docs.
fn table() -> Vec<Row> {
    let mut lines = IAM_DOCS
        .lines()
        .map(|l| l.strip_prefix("//!").unwrap_or(l).trim())
        .skip_while(|l| *l != HEADER);
    assert_eq!(lines.next(), Some(HEADER), "the IAM table is in src/iam.rs");
    assert!(lines.next().is_some_and(|l| l.starts_with("| ---")));
    let rows: Vec<Row> = lines
        .take_while(|l| l.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
            let [label, action, resource, why] = cells[..] else {
                panic!("an IAM table row has four cells: {line}");
            };
            assert!(!why.is_empty(), "every row says why: {line}");
            let resource = Resource::parse(resource);
            let grant = match (action, resource) {
                ("none", _) => None,
                (action, Some(resource)) => {
                    let action = action
                        .strip_prefix('`')
                        .and_then(|a| a.strip_suffix('`'))
                        .filter(|a| {
                            a.split_once(':').is_some_and(|(service, name)| {
                                matches!(service, "dynamodb" | "sqs")
                                    && name.chars().all(|c| c.is_ascii_alphabetic())
                            })
                        })
                        .unwrap_or_else(|| {
                            panic!("one action per row, as `service:Action`: {line}")
                        });
                    Some((action.to_owned(), resource))
                }
                (_, None) => panic!("an action needs a resource: {line}"),
            };
            Row {
                label: label.to_owned(),
                grant,
            }
        })
        .collect();
    assert!(rows.len() > 20, "the whole table was read: {rows:?}");
    rows
}

/// What the table grants a function with these modes and options.
fn granted(labels: &[&str]) -> BTreeSet<Grant> {
    let rows = table();
    for label in labels {
        assert!(
            rows.iter().any(|r| r.label == *label),
            "the IAM table has no row for {label:?}"
        );
    }
    rows.into_iter()
        .filter(|r| labels.contains(&r.label.as_str()))
        .filter_map(|r| r.grant)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The runs, by the table's labels. Every label of the table is in one of them
// (`every_row_of_the_table_is_exercised`).

const LEASE: &[&str] = &["lease"];
const TRANSACTIONAL: &[&str] = &["transactional"];
const CARRIED: &[&str] = &["transactional, carried record"];
const INLINE: &[&str] = &["inline"];
const INLINE_READ: &[&str] = &["inline", "inline, attempts read"];
/// Every option of a consumer, added to a mode.
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

/// The grants of the policy snippet in the `iam` module's docs (the common inline consumer), by
/// the resources of the table; the logs' statement left out.
fn snippet_grants() -> BTreeSet<Grant> {
    let lines: Vec<&str> = IAM_DOCS
        .lines()
        .map(|l| {
            l.strip_prefix("//! ")
                .unwrap_or(l.trim_start_matches("//!"))
        })
        .skip_while(|l| *l != "```yaml")
        .skip(1)
        .take_while(|l| *l != "```")
        .collect();
    assert!(!lines.is_empty(), "the policy snippet is in src/iam.rs");
    let mut grants = BTreeSet::new();
    let (mut actions, mut listing) = (Vec::<String>::new(), false);
    for line in lines {
        let line = line.split(" #").next().unwrap_or("").trim();
        if let Some(list) = line.strip_prefix("Action:") {
            let list = list.trim().trim_start_matches('[').trim_end_matches(']');
            actions = list
                .split(',')
                .map(|a| a.trim().to_owned())
                .filter(|a| !a.is_empty())
                .collect();
            listing = actions.is_empty();
        } else if listing && let Some(action) = line.strip_prefix("- ") {
            actions.push(action.to_owned());
        } else if let Some(resource) = line.strip_prefix("Resource:") {
            listing = false;
            let resource = match resource.trim() {
                "!GetAtt IdempotencyTable.Arn" => Resource::IdempotencyTable,
                "!GetAtt ItemsTable.Arn" => Resource::EffectTables,
                "!GetAtt Queue.Arn" => Resource::SourceQueue,
                "!GetAtt DeadLetterQueue.Arn" => Resource::DeadLetterQueue,
                "\"*\"" => {
                    assert!(
                        actions.iter().all(|a| a.starts_with("logs:")),
                        "{actions:?}"
                    );
                    continue;
                }
                other => panic!("the snippet names an unknown resource {other:?}"),
            };
            grants.extend(actions.drain(..).map(|a| (a, resource)));
        } else {
            listing = false;
        }
    }
    grants
}

#[test]
fn the_policy_snippet_grants_the_inline_consumer_exactly_the_tables_actions() {
    let mut needed = granted(&[INLINE, OPTIONS].concat());
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
// The guard.

/// The guard's state for one run.
#[derive(Debug, Default)]
struct Ledger {
    allowed: BTreeSet<Grant>,
    /// Table names and queue names, by the resource they are in the run.
    resources: BTreeMap<String, Resource>,
    used: BTreeSet<Grant>,
    refused: Vec<String>,
}

/// An SDK interceptor that lets a request through only when the table grants every IAM action
/// it is authorized by, on the resource it names; it records the actions used and the requests
/// refused.
#[derive(Debug, Clone, Default)]
struct Guard(Arc<Mutex<Ledger>>);

impl Guard {
    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Passes `request` (an operation and its input) or refuses it.
    fn check(&self, operation: &str, input: &Input) -> Result<(), String> {
        let mut ledger = self.ledger();
        let mut wanted = Vec::new();
        for (action, name) in authorizations(operation, input)? {
            let Some(&resource) = ledger.resources.get(&name) else {
                let refusal = format!("{operation}: {action} on {name}, not a resource of the run");
                ledger.refused.push(refusal.clone());
                return Err(refusal);
            };
            wanted.push((action, resource));
        }
        if let Some(grant) = wanted.iter().find(|g| !ledger.allowed.contains(*g)) {
            let refusal = format!("{operation}: {} on {:?} is not granted", grant.0, grant.1);
            ledger.refused.push(refusal.clone());
            return Err(refusal);
        }
        ledger.used.extend(wanted);
        Ok(())
    }
}

impl Intercept for Guard {
    fn name(&self) -> &'static str {
        "IamGuard"
    }

    fn read_before_serialization(
        &self,
        context: &BeforeSerializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        let operation = cfg
            .load::<Metadata>()
            .map(|m| m.name().to_owned())
            .unwrap_or_default();
        match self.check(&operation, context.input()) {
            Ok(()) => Ok(()),
            Err(refusal) => {
                // A refusal no library path may swallow unnoticed: the run asserts none.
                Err(format!("AccessDenied (the IAM table): {refusal}").into())
            }
        }
    }
}

/// The IAM actions a request is authorized by, each with the table or queue (by name) it names.
fn authorizations(operation: &str, input: &Input) -> Result<Vec<(String, String)>, String> {
    use aws_sdk_dynamodb::operation as ddb;
    use aws_sdk_sqs::operation as sqs;
    fn get<T: std::fmt::Debug + Send + Sync + 'static>(input: &Input) -> &T {
        input
            .downcast_ref::<T>()
            .expect("the input of its operation")
    }
    let queue = |url: Option<&str>| {
        url.and_then(|u| u.rsplit('/').next())
            .unwrap_or("")
            .to_owned()
    };
    let one = |action: &str, name: Option<&str>| {
        Ok(vec![(action.to_owned(), name.unwrap_or("").to_owned())])
    };
    match operation {
        "UpdateItem" => one(
            "dynamodb:UpdateItem",
            get::<ddb::update_item::UpdateItemInput>(input).table_name(),
        ),
        "GetItem" => one(
            "dynamodb:GetItem",
            get::<ddb::get_item::GetItemInput>(input).table_name(),
        ),
        "PutItem" => one(
            "dynamodb:PutItem",
            get::<ddb::put_item::PutItemInput>(input).table_name(),
        ),
        "DeleteItem" => one(
            "dynamodb:DeleteItem",
            get::<ddb::delete_item::DeleteItemInput>(input).table_name(),
        ),
        "DescribeTable" => one(
            "dynamodb:DescribeTable",
            get::<ddb::describe_table::DescribeTableInput>(input).table_name(),
        ),
        "DescribeTimeToLive" => one(
            "dynamodb:DescribeTimeToLive",
            get::<ddb::describe_time_to_live::DescribeTimeToLiveInput>(input).table_name(),
        ),
        // No `dynamodb:TransactWriteItems`: each action is authorized as its item operation.
        "TransactWriteItems" => Ok(get::<ddb::transact_write_items::TransactWriteItemsInput>(
            input,
        )
        .transact_items()
        .iter()
        .map(|item| {
            match (
                item.put(),
                item.update(),
                item.delete(),
                item.condition_check(),
            ) {
                (Some(p), ..) => ("dynamodb:PutItem", p.table_name()),
                (_, Some(u), ..) => ("dynamodb:UpdateItem", u.table_name()),
                (_, _, Some(d), _) => ("dynamodb:DeleteItem", d.table_name()),
                (.., Some(c)) => ("dynamodb:ConditionCheckItem", c.table_name()),
                _ => ("dynamodb:(an empty action)", ""),
            }
        })
        .map(|(action, table)| (action.to_owned(), table.to_owned()))
        .collect()),
        "GetQueueUrl" => one(
            "sqs:GetQueueUrl",
            get::<sqs::get_queue_url::GetQueueUrlInput>(input).queue_name(),
        ),
        "GetQueueAttributes" => one(
            "sqs:GetQueueAttributes",
            Some(&queue(
                get::<sqs::get_queue_attributes::GetQueueAttributesInput>(input).queue_url(),
            )),
        ),
        "ChangeMessageVisibilityBatch" => one(
            "sqs:ChangeMessageVisibility",
            Some(&queue(
                get::<sqs::change_message_visibility_batch::ChangeMessageVisibilityBatchInput>(
                    input,
                )
                .queue_url(),
            )),
        ),
        "SendMessageBatch" => one(
            "sqs:SendMessage",
            Some(&queue(
                get::<sqs::send_message_batch::SendMessageBatchInput>(input).queue_url(),
            )),
        ),
        other => Err(format!(
            "{other:?}: an operation the guard does not map, refused"
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// One run: its resources, its guarded clients, and the check at its end.

/// A run's resources, made with unguarded clients, and its guarded clients.
struct Run {
    labels: &'static [&'static str],
    guard: Guard,
    /// Guarded.
    dynamodb: aws_sdk_dynamodb::Client,
    /// Guarded.
    sqs: aws_sdk_sqs::Client,
    /// Unguarded, for setting up and looking.
    setup_dynamodb: aws_sdk_dynamodb::Client,
    setup_sqs: aws_sdk_sqs::Client,
    idempotency: String,
    effects: String,
    source: Queue,
    dead_letter: Queue,
    clock: Arc<ManualClock>,
}

struct Queue {
    name: String,
    url: String,
    arn: String,
}

impl Run {
    /// The tables and queues of a run granted `labels`: an idempotency table with its TTL on
    /// `expiration`, an effect table, a source queue whose redrive policy names a dead-letter
    /// queue.
    async fn new(labels: &'static [&'static str]) -> Self {
        let counter = RequestCounter::default();
        let setup_dynamodb = common::dynamodb(&counter).await;
        let setup_sqs = common::sqs(&counter).await;
        let idempotency = common::create_table(&setup_dynamodb, "id", "expiration").await;
        let effects = common::create_table(&setup_dynamodb, "pk", "ttl").await;
        let dead_letter = queue(&setup_sqs, &common::unique("dlq"), None).await;
        let redrive = format!(
            r#"{{"deadLetterTargetArn":"{}","maxReceiveCount":50}}"#,
            dead_letter.arn
        );
        let source = queue(&setup_sqs, &common::unique("source"), Some(redrive)).await;
        let guard = Guard::default();
        {
            let mut ledger = guard.ledger();
            ledger.allowed = granted(labels);
            ledger.resources = BTreeMap::from([
                (idempotency.clone(), Resource::IdempotencyTable),
                (effects.clone(), Resource::EffectTables),
                (source.name.clone(), Resource::SourceQueue),
                (dead_letter.name.clone(), Resource::DeadLetterQueue),
            ]);
        }
        let sdk = common::sdk_config().await;
        let dynamodb = aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(&sdk)
                .interceptor(guard.clone())
                .build(),
        );
        let sqs = aws_sdk_sqs::Client::from_conf(
            aws_sdk_sqs::config::Builder::from(&sdk)
                .interceptor(guard.clone())
                .build(),
        );
        Self {
            labels,
            guard,
            dynamodb,
            sqs,
            setup_dynamodb,
            setup_sqs,
            idempotency,
            effects,
            source,
            dead_letter,
            clock: Arc::new(ManualClock::starting_now()),
        }
    }

    /// The backend over the guarded client.
    fn backend(&self) -> DynamoDbBackend {
        DynamoDbBackend::new(self.dynamodb.clone(), &self.idempotency)
    }

    /// The engine over `backend`: keys prefixed `fn`, records that expire after an hour.
    fn engine<B: Backend>(&self, backend: B) -> Idempotency<B> {
        Idempotency::new(backend)
            .with_key_prefix("fn")
            .with_clock(self.clock.clone())
            .with_expiry(Duration::from_secs(3600))
    }

    /// No request was refused so far.
    fn assert_nothing_refused(&self) {
        let ledger = self.guard.ledger();
        assert!(
            ledger.refused.is_empty(),
            "{:?}: requests refused under the table's grants: {:#?}",
            self.labels,
            ledger.refused
        );
    }

    /// The end of a run: no request was refused, and the actions used are the table's.
    fn assert_exactly_the_tables_actions(&self) {
        self.assert_nothing_refused();
        let ledger = self.guard.ledger();
        let unused: Vec<_> = ledger.allowed.difference(&ledger.used).collect();
        assert!(
            unused.is_empty(),
            "{:?}: the table grants actions the run never used: {unused:?}",
            self.labels
        );
        assert_eq!(ledger.used, ledger.allowed, "{:?}", self.labels);
    }

    /// A record of the source queue, with a receipt handle of a real message of it.
    async fn record(&self, id: &str, body: &str, receives: u32) -> SqsMessage {
        self.setup_sqs
            .send_message()
            .queue_url(&self.source.url)
            .message_body("a handle")
            .send()
            .await
            .unwrap();
        let received = self
            .setup_sqs
            .receive_message()
            .queue_url(&self.source.url)
            .visibility_timeout(600)
            .send()
            .await
            .unwrap();
        let mut m = SqsMessage::default();
        m.message_id = Some(id.into());
        m.body = Some(body.into());
        m.receipt_handle = received
            .messages()
            .first()
            .and_then(|m| m.receipt_handle())
            .map(str::to_owned);
        assert!(m.receipt_handle.is_some());
        m.attributes
            .insert("ApproximateReceiveCount".into(), receives.to_string());
        m.event_source_arn = Some(self.source.arn.clone());
        m
    }

    /// The record of `key` in the idempotency table.
    async fn stored(&self, key: &str) -> Option<std::collections::HashMap<String, AttributeValue>> {
        self.setup_dynamodb
            .get_item()
            .table_name(&self.idempotency)
            .key("id", AttributeValue::S(format!("fn#{key}")))
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .item()
            .cloned()
    }

    /// The bodies on the dead-letter queue.
    async fn dead_letters(&self) -> Vec<String> {
        self.setup_sqs
            .receive_message()
            .queue_url(&self.dead_letter.url)
            .max_number_of_messages(10)
            .send()
            .await
            .unwrap()
            .messages()
            .iter()
            .filter_map(|m| m.body().map(str::to_owned))
            .collect()
    }
}

/// Creates a standard queue, with a redrive policy when given one.
async fn queue(sqs: &aws_sdk_sqs::Client, name: &str, redrive: Option<String>) -> Queue {
    let mut create = sqs
        .create_queue()
        .queue_name(name)
        .attributes(QueueAttributeName::VisibilityTimeout, "600");
    if let Some(policy) = redrive {
        create = create.attributes(QueueAttributeName::RedrivePolicy, policy);
    }
    let url = create.send().await.unwrap().queue_url().unwrap().to_owned();
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn))
        .cloned()
        .unwrap();
    Queue {
        name: name.to_owned(),
        url,
        arn,
    }
}

// ---------------------------------------------------------------------------------------------
// The handlers of the modes, and the deliveries that take each through its paths.

/// A message: its key, how many attempts fail before one succeeds, and padding.
#[derive(serde::Deserialize)]
struct Order {
    id: String,
    #[serde(default)]
    fail: u32,
}

fn declined(order: &Order, ctx: &RecordContext) -> Result<(), std::io::Error> {
    if ctx.attempt <= order.fail {
        return Err(std::io::Error::other(format!(
            "declined (attempt {})",
            ctx.attempt
        )));
    }
    Ok(())
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

/// The handler's writes in transactional mode: one of each kind, on items of its key; the
/// `Update` carries the record when `carried`.
fn writes(table: &str, id: &str, carried: bool) -> Transaction<String, TransactWriteItem> {
    let put = Put::builder()
        .table_name(table)
        .item("pk", s(&format!("entry-{id}")))
        .build()
        .unwrap();
    let delete = Delete::builder()
        .table_name(table)
        .key("pk", s(&format!("scratch-{id}")))
        .build()
        .unwrap();
    let check = ConditionCheck::builder()
        .table_name(table)
        .key("pk", s(&format!("account-{id}")))
        .condition_expression("attribute_not_exists(frozen)")
        .build()
        .unwrap();
    let update = Update::builder()
        .table_name(table)
        .key("pk", s(&format!("order-{id}")))
        .update_expression("SET shipped = :yes")
        .expression_attribute_values(":yes", AttributeValue::Bool(true))
        .build()
        .unwrap();
    let transaction = Transaction::new(id.to_owned())
        .put(put)
        .delete(delete)
        .condition_check(check);
    if carried {
        transaction.update_carrying_record(update)
    } else {
        transaction.update(update)
    }
}

/// A mode of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Lease,
    Transactional,
    Carried,
    Inline,
    InlineRead,
}

impl Mode {
    fn labels(self) -> &'static [&'static str] {
        match self {
            Mode::Lease => LEASE,
            Mode::Transactional => TRANSACTIONAL,
            Mode::Carried => CARRIED,
            Mode::Inline => INLINE,
            Mode::InlineRead => INLINE_READ,
        }
    }
}

/// What a run adds to its mode.
#[derive(Debug, Clone, Copy, Default)]
struct Options {
    local_cache: bool,
    dead_letters: bool,
    backoff: bool,
    cold_start: bool,
}

impl Options {
    const NONE: Self = Self {
        local_cache: false,
        dead_letters: false,
        backoff: false,
        cold_start: false,
    };
    const ALL: Self = Self {
        local_cache: false,
        dead_letters: true,
        backoff: true,
        cold_start: true,
    };
}

/// Runs `mode` with `options` under the grants of `labels`: the cold-start checks, then three
/// batches that take it through a success, a duplicate (another message of the key, and a
/// redelivery), a failure then a success, an attempt budget used up (to the dead-letter queue,
/// with the reset of the key's attempts, when there is one), backoff on the failures, and an
/// expired record replaced.
async fn run_mode(mode: Mode, options: Options, labels: &'static [&'static str]) {
    let run = Run::new(labels).await;
    if options.cold_start {
        let check = run.backend().check_table().await.expect("the table fits");
        assert!(check.warnings.is_empty(), "{:?}", check.warnings);
        let queues = redrive_policy::warn_if_unsafe(
            &run.sqs,
            &QueueRef::Arn(run.source.arn.clone()),
            10,
            2,
            Duration::from_secs(3600),
        )
        .await;
        assert_eq!(
            queues.redrive,
            RedriveCheck::Ok {
                max_receive_count: 50,
                required: 11
            }
        );
        assert!(queues.source.is_some(), "{queues:?}");
        assert!(queues.dead_letter.is_some(), "{queues:?}");
    }
    let mut processor = BatchProcessor::new().with_clock(run.clock.clone() as Arc<dyn Clock>);
    if options.dead_letters {
        processor = processor
            .max_attempts(2)
            .with_dead_letter(DeadLetter::new(run.sqs.clone(), &run.dead_letter.url));
    }
    if options.backoff {
        processor = processor.with_backoff(VisibilityBackoff::new(run.sqs.clone()));
    }
    if options.local_cache {
        let cache = LocalCache::new(NonZeroUsize::new(100).unwrap(), Duration::from_secs(60));
        deliveries(
            &run,
            &processor,
            mode,
            run.engine(run.backend()).with_local_cache(cache),
            options,
        )
        .await;
    } else {
        deliveries(&run, &processor, mode, run.engine(run.backend()), options).await;
    }
    run.assert_exactly_the_tables_actions();
}

/// The three batches of [`run_mode`], through `mode`'s wrapper over `engine`.
async fn deliveries<B>(
    run: &Run,
    processor: &BatchProcessor,
    mode: Mode,
    engine: Idempotency<B>,
    options: Options,
) where
    B: Backend + TransactionalBackend<Write = TransactWriteItem> + InlineBackend<Item = NewItem>,
{
    let keys = KeyConfig::json_pointer("/id");
    let effects = run.effects.clone();
    match mode {
        Mode::Lease => {
            let handler = json(|order: Order, ctx: RecordContext| async move {
                declined(&order, &ctx)?;
                Ok::<_, std::io::Error>(order.id)
            })
            .idempotent(engine)
            .with_keys(keys);
            batches(run, processor, &handler, options).await;
        }
        Mode::Transactional | Mode::Carried => {
            let carried = mode == Mode::Carried;
            let handler = json(move |order: Order, ctx: RecordContext| {
                let effects = effects.clone();
                async move {
                    declined(&order, &ctx)?;
                    Ok::<_, std::io::Error>(writes(&effects, &order.id, carried))
                }
            })
            .transactional(engine)
            .with_keys(keys);
            batches(run, processor, &handler, options).await;
        }
        Mode::Inline | Mode::InlineRead => {
            let handler = json(move |order: Order, ctx: RecordContext| {
                let effects = effects.clone();
                async move {
                    declined(&order, &ctx)?;
                    let receipt = NewItem::new(&effects, "pk", s(&format!("receipt-{}", order.id)))
                        .attribute("amount", AttributeValue::N("500".into()));
                    Ok::<_, std::io::Error>(InlinePut::new(order.id, receipt))
                }
            })
            .inline(engine)
            .with_keys(keys);
            if mode == Mode::InlineRead {
                batches(run, processor, &handler.with_attempts_read(), options).await;
            } else {
                batches(run, processor, &handler, options).await;
            }
        }
    }
}

/// What each record of a batch came to.
fn outcomes(report: &BatchReport<Deduplicated<String>>) -> BTreeMap<String, &'static str> {
    report
        .records
        .iter()
        .map(|r| {
            let outcome = match (&r.result, r.dead_lettered) {
                (Ok(Deduplicated::Processed(_)), _) => "processed",
                (Ok(Deduplicated::Duplicate { .. }), _) => "duplicate",
                (Err(_), true) => "dead-lettered",
                (Err(e), false) => {
                    assert!(
                        matches!(e, RecordError::Attempt { .. }),
                        "{}: only the handler's own failures: {e:?}",
                        r.message_id
                    );
                    "failed"
                }
            };
            (r.message_id.clone(), outcome)
        })
        .collect()
}

async fn deliver<H>(
    processor: &BatchProcessor,
    handler: &H,
    records: Vec<SqsMessage>,
) -> BatchReport<Deduplicated<String>>
where
    H: RecordHandler<Output = Deduplicated<String>>,
{
    let mut event = SqsEvent::default();
    event.records = records;
    processor
        .process(&LambdaEvent::new(event, Context::default()), handler)
        .await
        .expect("the batch is processed")
}

async fn batches<H>(run: &Run, processor: &BatchProcessor, handler: &H, options: Options)
where
    H: RecordHandler<Output = Deduplicated<String>>,
{
    let a = r#"{"id": "a"}"#;
    let b = r#"{"id": "b", "fail": 1}"#;
    // Over 1 KiB with its dead-letter attributes: its copy needs the queue's MaximumMessageSize.
    let d = format!(
        r#"{{"id": "d", "fail": 99, "pad": "{}"}}"#,
        "x".repeat(1500)
    );

    // First deliveries: a success, and two failures (backed off when there is backoff).
    let first = vec![
        run.record("m-a", a, 1).await,
        run.record("m-b", b, 1).await,
        run.record("m-d", &d, 1).await,
    ];
    let report = deliver(processor, handler, first).await;
    run.assert_nothing_refused();
    assert_eq!(
        outcomes(&report),
        BTreeMap::from([
            ("m-a".into(), "processed"),
            ("m-b".into(), "failed"),
            ("m-d".into(), "failed"),
        ])
    );

    // Duplicates (another message of the key, and a redelivery), a failed record that now
    // succeeds, and one whose budget of two attempts is used up.
    let second = vec![
        run.record("m-a2", a, 1).await,
        run.record("m-a", a, 2).await,
        run.record("m-b", b, 2).await,
        run.record("m-d", &d, 2).await,
    ];
    let report = deliver(processor, handler, second).await;
    run.assert_nothing_refused();
    let budget = if options.dead_letters {
        "dead-lettered"
    } else {
        "failed"
    };
    assert_eq!(
        outcomes(&report),
        BTreeMap::from([
            ("m-a2".into(), "duplicate"),
            ("m-a".into(), "duplicate"),
            ("m-b".into(), "processed"),
            ("m-d".into(), budget),
        ])
    );
    let attempts = run
        .stored("d")
        .await
        .and_then(|item| item.get("attempts").and_then(|v| v.as_n().ok()).cloned());
    if options.dead_letters {
        assert_eq!(run.dead_letters().await, [d]);
        assert_eq!(
            attempts.as_deref(),
            Some("0"),
            "the attempts reset after dead-lettering"
        );
    } else {
        assert_eq!(attempts.as_deref(), Some("2"));
    }

    // Past the records' expiry: the key runs again, its expired record replaced.
    run.clock.advance(Duration::from_secs(2 * 3600));
    let third = vec![run.record("m-a3", a, 1).await];
    let report = deliver(processor, handler, third).await;
    run.assert_nothing_refused();
    assert_eq!(
        outcomes(&report),
        BTreeMap::from([("m-a3".into(), "processed")])
    );
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

#[tokio::test]
async fn lease_alone() {
    run_mode(Mode::Lease, Options::NONE, LEASE).await;
}

#[tokio::test]
async fn lease_with_every_option() {
    run_mode(Mode::Lease, Options::ALL, with(Mode::Lease, &[OPTIONS])).await;
}

#[tokio::test]
async fn lease_with_every_option_and_the_local_cache() {
    let options = Options {
        local_cache: true,
        ..Options::ALL
    };
    run_mode(
        Mode::Lease,
        options,
        with(Mode::Lease, &[OPTIONS, LOCAL_CACHE]),
    )
    .await;
}

#[tokio::test]
async fn transactional_alone() {
    run_mode(Mode::Transactional, Options::NONE, TRANSACTIONAL).await;
}

#[tokio::test]
async fn transactional_with_every_option() {
    run_mode(
        Mode::Transactional,
        Options::ALL,
        with(Mode::Transactional, &[OPTIONS]),
    )
    .await;
}

#[tokio::test]
async fn transactional_with_every_option_and_the_local_cache() {
    let options = Options {
        local_cache: true,
        ..Options::ALL
    };
    let labels = with(Mode::Transactional, &[OPTIONS, LOCAL_CACHE]);
    run_mode(Mode::Transactional, options, labels).await;
}

#[tokio::test]
async fn carried_record_alone() {
    run_mode(Mode::Carried, Options::NONE, CARRIED).await;
}

#[tokio::test]
async fn carried_record_with_every_option() {
    run_mode(Mode::Carried, Options::ALL, with(Mode::Carried, &[OPTIONS])).await;
}

#[tokio::test]
async fn carried_record_with_every_option_and_the_local_cache() {
    let options = Options {
        local_cache: true,
        ..Options::ALL
    };
    run_mode(
        Mode::Carried,
        options,
        with(Mode::Carried, &[OPTIONS, LOCAL_CACHE]),
    )
    .await;
}

#[tokio::test]
async fn inline_alone() {
    run_mode(Mode::Inline, Options::NONE, INLINE).await;
}

#[tokio::test]
async fn inline_with_every_option() {
    run_mode(Mode::Inline, Options::ALL, with(Mode::Inline, &[OPTIONS])).await;
}

#[tokio::test]
async fn inline_with_every_option_and_the_local_cache() {
    let options = Options {
        local_cache: true,
        ..Options::ALL
    };
    run_mode(
        Mode::Inline,
        options,
        with(Mode::Inline, &[OPTIONS, LOCAL_CACHE]),
    )
    .await;
}

#[tokio::test]
async fn inline_with_its_attempts_read_alone() {
    run_mode(Mode::InlineRead, Options::NONE, INLINE_READ).await;
}

#[tokio::test]
async fn inline_with_its_attempts_read_and_every_option() {
    run_mode(
        Mode::InlineRead,
        Options::ALL,
        with(Mode::InlineRead, &[OPTIONS]),
    )
    .await;
}

#[tokio::test]
async fn inline_with_its_attempts_read_every_option_and_the_local_cache() {
    let options = Options {
        local_cache: true,
        ..Options::ALL
    };
    let labels = with(Mode::InlineRead, &[OPTIONS, LOCAL_CACHE]);
    run_mode(Mode::InlineRead, options, labels).await;
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
            max_receive_count: 50,
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
        redrive_policy::check_queue(&run.sqs, &source, 10, 5, Duration::from_secs(3600)).await;
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
    let mut event = SqsEvent::default();
    event.records = vec![run.record("m-1", "{}", 1).await];
    let report = BatchProcessor::new()
        .process(&LambdaEvent::new(event, Context::default()), &handler)
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
