//! The modes under exploration: each its handler (which never fails: every failure is the
//! store's), and what each message must have left.
//!
//! Each handler checks, when it runs, that the effect of the record before it of the same order
//! key (`after` in its payload, on streams) is applied: a record that runs ahead of its key's
//! earlier record is noted ([`Disorder`]) and fails its case.
//!
//! A crashed process runs nothing more: each handler waits forever once the crash is raised (the
//! harness then drops the invocation).
//!
//! A message's id may give it a [`Role`] of its own, for the exploration of the processor's own
//! SQS calls ([`own_sqs`](crate::own_sqs)): a poison message fails for good, a flaky one fails
//! its first runs, each before any effect.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{Record, RecordContext, RecordHandler, RecordHandlerExt, json};
use lambda_idempotency::count::RequestCounter;
use lambda_idempotency::error::PermanentError;
use lambda_idempotency::inline::InlinePut;
use lambda_idempotency::key::KeyConfig;
use lambda_idempotency::state::Status;
use lambda_idempotency::store::{Backend, DynamoDbBackend, NewItem, RedisBackend};
use lambda_idempotency::time::Clock;
use lambda_idempotency::transaction::Transaction;

use crate::common;
use crate::{Env, Explored};
use lambda_idempotency::test_util::fault::{Crash, FaultyConnection};

#[derive(serde::Deserialize)]
struct Message {
    id: String,
    /// The record before it of the same order key, whose effect must be applied first.
    #[serde(default)]
    after: Option<String>,
}

/// Records that ran before the effect of the record before them (of their order key) was
/// applied: `id`, what was missing.
#[derive(Clone, Default)]
pub struct Disorder(Arc<Mutex<Vec<(String, String)>>>);

impl Disorder {
    /// Notes `id` ran ahead of `after` when `applied` is false.
    fn note(&self, id: &str, after: &str, applied: bool) {
        if !applied {
            let problem = format!("{id} ran before the effect of {after}, of its key, was applied");
            self.0.lock().unwrap().push((id.to_owned(), problem));
        }
    }

    /// What was noted of `id`.
    fn of(&self, id: &str) -> Vec<String> {
        let noted = self.0.lock().unwrap();
        noted
            .iter()
            .filter(|(i, _)| i == id)
            .map(|(_, p)| p.clone())
            .collect()
    }
}

/// What a message does, from the end of its id: `-poison` fails for good (a
/// [`PermanentError`] naming [`POISON_REASON`]); `-flaky{n}` fails (an attempt of its own) on
/// its first `n` runs; any other succeeds. Each fails before any effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Innocent,
    Poison,
    Flaky(u32),
}

/// The reason a poison message fails with.
pub const POISON_REASON: &str = "poison message: its amount is negative";

impl Role {
    pub fn of(id: &str) -> Self {
        if id.ends_with("-poison") {
            return Role::Poison;
        }
        match id.rsplit_once("-flaky") {
            Some((_, n)) => Role::Flaky(n.parse().expect("-flaky{n}")),
            None => Role::Innocent,
        }
    }

    /// The failed attempts its record counts once it settled.
    fn attempts(self) -> u32 {
        match self {
            Role::Flaky(n) => n,
            _ => 0,
        }
    }
}

/// Each message's runs, for its [`Role`].
#[derive(Clone, Default)]
pub struct Runs(Arc<Mutex<HashMap<String, u32>>>);

impl Runs {
    /// Counts a run of `id`: its role's failure, if this run fails.
    fn run(&self, id: &str) -> Result<(), lambda_idempotency::prelude::Error> {
        let mut runs = self.0.lock().unwrap();
        let n = runs.entry(id.to_owned()).or_default();
        *n += 1;
        match Role::of(id) {
            Role::Poison => Err(PermanentError::new(POISON_REASON).into()),
            Role::Flaky(fails) if *n <= fails => Err(format!("{id} is busy (run {n})").into()),
            _ => Ok(()),
        }
    }
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

/// The result each message's handler gives.
fn result_of(id: &str) -> String {
    format!("done-{id}")
}

/// Waits forever once the process crashed.
async fn alive(crash: &Crash) {
    if crash.is_raised() {
        std::future::pending::<()>().await;
    }
}

/// A DynamoDB client whose requests go through the store's fault injector, without the SDK's
/// retries: each fault reaches the library, as when the SDK's own retries are used up (and
/// request `n` is the same request in every run).
async fn faulty_dynamodb(env: &Env) -> aws_sdk_dynamodb::Client {
    let config = aws_sdk_dynamodb::config::Builder::from(&common::sdk_config().await)
        .interceptor(env.faults.clone())
        .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

/// A DynamoDB engine on a fresh table, and a fresh table of the handler's items (`pk`).
async fn dynamodb_engine(env: &Env) -> (Idempotency<DynamoDbBackend>, String) {
    let client = faulty_dynamodb(env).await;
    let table = common::create_table(&client, "id", "expiration").await;
    let effects = common::create_table(&client, "pk", "ttl").await;
    let engine = Idempotency::new(DynamoDbBackend::new(client, table))
        .with_key_prefix("fn")
        .with_clock(env.clock.clone() as Arc<dyn Clock>);
    (engine, effects)
}

/// What is wrong with the stored record of `id` (completed, its result, no failed attempt, or
/// with `counts_kept` (the lease mode, whose completion keeps the count) those of its [`Role`];
/// a poison message's: failed with its own reason).
async fn check_record<B: Backend>(
    engine: &Idempotency<B>,
    id: &str,
    counts_kept: bool,
) -> Vec<String> {
    let role = Role::of(id);
    let attempts = if counts_kept { role.attempts() } else { 0 };
    if role == Role::Poison {
        // Its own reason, findable by its key however its dead-letter sends went.
        return match engine.get(id).await {
            Ok(Some(record))
                if record.status == Status::Failed
                    && record.last_error.as_deref().is_some_and(|e| {
                        e.starts_with("permanent failure") && e.contains(POISON_REASON)
                    }) =>
            {
                Vec::new()
            }
            other => vec![format!(
                "{id}: stored {other:?}, not failed with its own permanent reason"
            )],
        };
    }
    match engine.get(id).await {
        Ok(Some(record))
            if record.status == Status::Completed
                && record.result.as_deref() == Some(&format!("\"{}\"", result_of(id)))
                && record.attempts == attempts =>
        {
            Vec::new()
        }
        other => vec![format!(
            "{id}: stored {other:?}, not completed with its result and {attempts} failed attempts"
        )],
    }
}

/// The lease mode, `json(f).idempotent(engine)`: the handler's effect is an entry in a map,
/// with the request id of each invocation that made it.
pub struct Lease<B, H> {
    engine: Idempotency<B>,
    effects: Arc<Mutex<HashMap<String, Vec<String>>>>,
    /// The crashed invocations of the case being checked ([`Explored::crashed`]).
    crashed: Mutex<Vec<String>>,
    /// Effects run a second time because the invocation of the first crashed before its
    /// completion (records run at once only).
    crash_windows: AtomicU32,
    disorder: Disorder,
    handler: H,
}

fn lease<B: Backend + Clone, R: Record>(
    env: &Env,
    engine: Idempotency<B>,
) -> Lease<B, impl RecordHandler<R> + use<B, R>> {
    let effects: Arc<Mutex<HashMap<String, Vec<String>>>> = Arc::default();
    let disorder = Disorder::default();
    let runs = Runs::default();
    let (e, crash, d) = (effects.clone(), env.crash.clone(), disorder.clone());
    let handler = json(move |m: Message, ctx: RecordContext| {
        let (e, crash, d, runs) = (e.clone(), crash.clone(), d.clone(), runs.clone());
        async move {
            alive(&crash).await;
            runs.run(&m.id)?;
            let mut effects = e.lock().unwrap();
            if let Some(after) = &m.after {
                d.note(&m.id, after, effects.contains_key(after));
            }
            effects
                .entry(m.id.clone())
                .or_default()
                .push(ctx.request_id.clone());
            Ok::<_, lambda_idempotency::prelude::Error>(result_of(&m.id))
        }
    })
    .idempotent(engine.clone())
    .with_keys(KeyConfig::json_pointer("/id"));
    Lease {
        engine,
        effects,
        crashed: Mutex::default(),
        crash_windows: AtomicU32::new(0),
        disorder,
        handler,
    }
}

impl Lease<(), ()> {
    pub async fn on_dynamodb<R: Record>(
        env: &Env,
    ) -> Lease<DynamoDbBackend, impl RecordHandler<R> + use<R>> {
        let (engine, _) = dynamodb_engine(env).await;
        lease(env, engine)
    }

    pub async fn on_redis<R: Record>(
        env: &Env,
    ) -> Lease<
        RedisBackend<FaultyConnection<redis::aio::ConnectionManager>>,
        impl RecordHandler<R> + use<R>,
    > {
        let client = redis::Client::open(common::redis_url()).expect("REDIS_URL");
        let inner = redis::aio::ConnectionManager::new(client)
            .await
            .expect("connect to REDIS_URL");
        let connection = FaultyConnection {
            inner,
            faults: env.faults.clone(),
        };
        let backend = RedisBackend::new(connection)
            .with_namespace(format!("{}:", common::unique("explore")))
            .with_counter(RequestCounter::default());
        backend.load_scripts().await.expect("load the scripts");
        let engine = Idempotency::new(backend)
            .with_key_prefix("fn")
            .with_clock(env.clock.clone() as Arc<dyn Clock>);
        lease(env, engine)
    }
}

impl<B: Backend, R: Record, H: RecordHandler<R>> Explored<R> for Lease<B, H> {
    type Handler = H;

    fn handler(&self) -> &H {
        &self.handler
    }

    async fn check(&self, id: &str) -> Vec<String> {
        let mut problems = check_record(&self.engine, id, true).await;
        let runs = self
            .effects
            .lock()
            .unwrap()
            .get(id)
            .cloned()
            .unwrap_or_default();
        let crashed = self.crashed.lock().unwrap();
        let poison = Role::of(id) == Role::Poison;
        match runs.as_slice() {
            [] if poison => {}
            [_] if !poison => {}
            // The crash's window: the first run's invocation crashed before the completion.
            [first, _] if !poison && crashed.contains(first) => {
                self.crash_windows.fetch_add(1, Ordering::SeqCst);
            }
            _ => problems.push(format!(
                "{id}: the effect happened {} times (invocations {runs:?}; crashed {crashed:?})",
                runs.len()
            )),
        }
        problems.extend(self.disorder.of(id));
        problems
    }

    fn crashed(&self, request_ids: &[String]) {
        *self.crashed.lock().unwrap() = request_ids.to_vec();
    }

    fn notes(&self) -> String {
        format!(
            "{} effects ran again after a crash between them and their completion",
            self.crash_windows.load(Ordering::SeqCst)
        )
    }
}

/// The handler's table, read without faults.
struct Items {
    client: aws_sdk_dynamodb::Client,
    table: String,
}

impl Items {
    async fn new(table: String) -> Self {
        Self {
            client: common::dynamodb(&RequestCounter::default()).await,
            table,
        }
    }

    async fn get(&self, pk: &str) -> Option<HashMap<String, AttributeValue>> {
        self.client
            .get_item()
            .table_name(&self.table)
            .key("pk", s(pk))
            .consistent_read(true)
            .send()
            .await
            .expect("read the handler's table")
            .item
    }

    /// What is wrong with the record carried by item `pk` for `id`.
    async fn check_carried(&self, pk: &str, id: &str) -> Vec<String> {
        let Some(item) = self.get(pk).await else {
            return vec![format!("{id}: no item {pk}")];
        };
        let expected = (
            Some(s("COMPLETED")),
            Some(s(&format!("\"{}\"", result_of(id)))),
        );
        let found = (
            item.get("idem_status").cloned(),
            item.get("idem_data").cloned(),
        );
        if found == expected {
            Vec::new()
        } else {
            vec![format!("{id}: item {pk} carries {item:?}")]
        }
    }
}

/// What the handler of a mode on DynamoDB does before its effect: waits forever once the
/// process crashed, and notes when the effect (item `{prefix}-{after}`) of the record before it
/// is not applied.
#[derive(Clone)]
struct Guard {
    items: Arc<Items>,
    disorder: Disorder,
    crash: Arc<Crash>,
    runs: Runs,
}

impl Guard {
    async fn new(env: &Env, table: String) -> Self {
        Self {
            items: Arc::new(Items::new(table).await),
            disorder: Disorder::default(),
            crash: env.crash.clone(),
            runs: Runs::default(),
        }
    }

    async fn before_effect(
        &self,
        m: &Message,
        prefix: &str,
    ) -> Result<(), lambda_idempotency::prelude::Error> {
        alive(&self.crash).await;
        self.runs.run(&m.id)?;
        if let Some(after) = &m.after {
            let applied = self.items.get(&format!("{prefix}-{after}")).await.is_some();
            self.disorder.note(&m.id, after, applied);
        }
        Ok(())
    }
}

/// The transactional mode, `json(f).transactional(engine)`: an entry put and a counter added
/// to in one transaction with the record; with `carried`, the counter's update carries the
/// record (`update_carrying_record`).
pub struct Transactional<H> {
    engine: Idempotency<DynamoDbBackend>,
    items: Arc<Items>,
    carried: bool,
    disorder: Disorder,
    handler: H,
}

type Tx = Transaction<String, TransactWriteItem>;

impl Transactional<()> {
    pub async fn new<R: Record>(
        env: &Env,
        carried: bool,
    ) -> Transactional<impl RecordHandler<R> + use<R>> {
        let (engine, effects) = dynamodb_engine(env).await;
        let guard = Guard::new(env, effects.clone()).await;
        let (table, g) = (effects.clone(), guard.clone());
        let handler = json(move |m: Message, _ctx: RecordContext| {
            let (table, g) = (table.clone(), g.clone());
            async move {
                g.before_effect(&m, "count").await?;
                let entry = Put::builder()
                    .table_name(&table)
                    .item("pk", s(&format!("entry-{}", m.id)))
                    .build()
                    .unwrap();
                let count = Update::builder()
                    .table_name(&table)
                    .key("pk", s(&format!("count-{}", m.id)))
                    .update_expression("ADD applied :one")
                    .expression_attribute_values(":one", AttributeValue::N("1".into()))
                    .build()
                    .unwrap();
                let tx = Tx::new(result_of(&m.id)).put(entry);
                Ok::<_, lambda_idempotency::prelude::Error>(if carried {
                    tx.update_carrying_record(count)
                } else {
                    tx.update(count)
                })
            }
        })
        .transactional(engine.clone())
        .with_keys(KeyConfig::json_pointer("/id"));
        Transactional {
            engine,
            items: guard.items,
            carried,
            disorder: guard.disorder,
            handler,
        }
    }
}

impl<R: Record, H: RecordHandler<R>> Explored<R> for Transactional<H> {
    type Handler = H;

    fn handler(&self) -> &H {
        &self.handler
    }

    async fn check(&self, id: &str) -> Vec<String> {
        let count = format!("count-{id}");
        let mut problems = if self.carried {
            let mut problems = self.items.check_carried(&count, id).await;
            match self.engine.get(id).await {
                Ok(None) => {}
                Ok(Some(record)) if record.attempts == 0 => {}
                other => problems.push(format!("{id}: beside the item: {other:?}")),
            }
            problems
        } else {
            check_record(&self.engine, id, false).await
        };
        let applied = self
            .items
            .get(&count)
            .await
            .and_then(|item| item.get("applied").cloned());
        let entry = self.items.get(&format!("entry-{id}")).await;
        if Role::of(id) == Role::Poison {
            if applied.is_some() || entry.is_some() {
                problems.push(format!("{id}: a poison message's effect applied"));
            }
        } else {
            if applied != Some(AttributeValue::N("1".into())) {
                problems.push(format!("{id}: the effect applied {applied:?} times"));
            }
            if entry.is_none() {
                problems.push(format!("{id}: no entry"));
            }
        }
        problems.extend(self.disorder.of(id));
        problems
    }
}

/// The inline mode, `json(f).inline(engine)`: a new receipt carrying the record.
pub struct Inline<H> {
    engine: Idempotency<DynamoDbBackend>,
    items: Arc<Items>,
    disorder: Disorder,
    handler: H,
}

impl Inline<()> {
    pub async fn new<R: Record>(env: &Env) -> Inline<impl RecordHandler<R> + use<R>> {
        let (engine, effects) = dynamodb_engine(env).await;
        let guard = Guard::new(env, effects.clone()).await;
        let (table, g) = (effects.clone(), guard.clone());
        let handler = json(move |m: Message, _ctx: RecordContext| {
            let (table, g) = (table.clone(), g.clone());
            async move {
                g.before_effect(&m, "receipt").await?;
                let receipt = NewItem::new(&table, "pk", s(&format!("receipt-{}", m.id)))
                    .attribute("amount", AttributeValue::N("500".into()));
                Ok::<_, lambda_idempotency::prelude::Error>(InlinePut::new(
                    result_of(&m.id),
                    receipt,
                ))
            }
        })
        .inline(engine.clone())
        .with_keys(KeyConfig::json_pointer("/id"));
        Inline {
            engine,
            items: guard.items,
            disorder: guard.disorder,
            handler,
        }
    }
}

impl<R: Record, H: RecordHandler<R>> Explored<R> for Inline<H> {
    type Handler = H;

    fn handler(&self) -> &H {
        &self.handler
    }

    async fn check(&self, id: &str) -> Vec<String> {
        let mut problems = self.items.check_carried(&format!("receipt-{id}"), id).await;
        match self.engine.get(id).await {
            Ok(None) => {}
            Ok(Some(record)) if record.attempts == 0 => {}
            other => problems.push(format!("{id}: beside the receipt: {other:?}")),
        }
        problems.extend(self.disorder.of(id));
        problems
    }
}
