//! [`Consumer`]: an SQS consumer with idempotency, its settings from the environment and its
//! safe configuration by default. The one way in for a Lambda function that reads a queue, and,
//! with [`ConsumerBuilder::source`], a DynamoDB stream, a Kinesis stream or a Kafka topic (with
//! a cold-start check of the event source mapping's retry limits, partial batch responses and
//! on-failure destination).
//!
//! ```no_run
//! use lambda_idempotency::prelude::*;
//!
//! #[derive(serde::Deserialize)]
//! #[serde(rename_all = "camelCase")]
//! struct OrderPlaced { order_id: String, total_cents: i64 }
//!
//! // The effect: one new item, which carries the idempotency record (the inline mode).
//! async fn record(order: OrderPlaced, _ctx: RecordContext) -> Result<InlinePut<(), NewItem>, Error> {
//!     let item = NewItem::new("orders", "orderId", AttributeValue::S(order.order_id))
//!         .attribute("totalCents", AttributeValue::N(order.total_cents.to_string()));
//!     Ok(InlinePut::new((), item))
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Error> {
//!     lambda_runtime::tracing::init_default_subscriber();
//!     // IDEMPOTENCY_TABLE, IDEMPOTENCY_KEY=/orderId, MAX_ATTEMPTS, DEAD_LETTER_QUEUE_URL, ...
//!     Consumer::from_env().await?.inline(json(record)).run().await
//! }
//! ```
//!
//! What it is: a [`BatchProcessor`] and a handler wrapped in one of the three modes
//! ([`idempotent`](ConsumerBuilder::idempotent), [`transactional`](ConsumerBuilder::transactional),
//! [`inline`](ConsumerBuilder::inline)), built from [`ConsumerConfig`]:
//!
//! - **the attempt budget** ([`DEFAULT_MAX_ATTEMPTS`], 5) and **backoff** (2 s doubling to
//!   300 s, plus jitter: the visibility timeout on SQS, a wait within the invocation on a
//!   stream, see [`BatchProcessor::retry_in_invocation`]) are on unless turned off (`MAX_ATTEMPTS=0`,
//!   `BACKOFF_BASE_SECONDS=0`, or [`without_attempt_budget`](ConsumerBuilder::without_attempt_budget),
//!   [`without_backoff`](ConsumerBuilder::without_backoff));
//! - **the dead-letter queue** takes permanent failures and used-up budgets, with their reason,
//!   when `DEAD_LETTER_QUEUE_URL` names one (else the consumer warns when it is built, in the
//!   source's terms: on SQS such a record stays on the queue until SQS's redrive or retention
//!   ends it, without its reason; on a stream or a Kafka topic it holds its shard or partition
//!   until the event source mapping's retry limits discard it);
//! - **the settings are checked when it is built**: `IDEMPOTENCY_TTL_SECONDS=0` is refused
//!   ([`ConfigError::Invalid`]), an expiry shorter than what the source keeps a record for is a
//!   warning naming the source and both values (SQS: 18 days, a queue's 4 and its dead-letter
//!   queue's 14; DynamoDB Streams and Kinesis: 24 hours, and on Kinesis the stream's retention
//!   period, up to 365 days, which the consumer does not read; Kafka: 7 days, the default
//!   `retention.ms`, the topic's own unknown to the consumer); a key pointer that finds nothing in a message is logged as an
//!   error (the pointer and the message's top-level field names, never their values) and
//!   counted in the [`KeyMissing`](crate::metrics::KEY_MISSING) metric;
//! - **the cold-start checks** (the idempotency table, the queue's redrive policy and
//!   retention) run in the background from the moment the consumer is built, so that they cost
//!   the init nothing; see [`ColdStartReport`] for what each does with what it finds;
//! - **a partial batch response**: only failed records go back to the queue (the event source
//!   mapping needs `FunctionResponseTypes: [ReportBatchItemFailures]`);
//! - **the warm-container cache** ([`crate::cache`]) is off unless `IDEMPOTENCY_LOCAL_CACHE`
//!   gives it a size (or [`with_local_cache`](ConsumerBuilder::with_local_cache) one of your
//!   own): then a duplicate of a key completed in this execution environment costs no request.
//!   The three modes put it in front of the backend when the consumer is built, so the
//!   builder's type stays `ConsumerBuilder<DynamoDbBackend>` either way.
//!
//! A unit test builds the same consumer over the in-memory backend with
//! [`Consumer::builder`] (no endpoint), its dead-letter queue and backoff recorded in memory
//! with [`with_in_memory_sqs`](ConsumerBuilder::with_in_memory_sqs), and calls
//! [`Consumer::process`] with an event from [`sqs_event`](crate::test_util::sqs_event): see
//! [`test_util`](crate::test_util).

mod cold_start;
mod config;
mod key_missing;
mod mapping_check;
mod source_terms;

use std::any::Any;
use std::sync::Arc;

use std::marker::PhantomData;

use aws_lambda_events::sqs::SqsEvent;
use lambda_runtime::LambdaEvent;
use serde::Serialize;

pub use cold_start::{ColdStartChecks, ColdStartReport, QueueToCheck};
pub use config::{
    ConfigError, ConsumerConfig, DEFAULT_BACKOFF_BASE, DEFAULT_BACKOFF_MAX, DEFAULT_BATCH_SIZE,
    DEFAULT_MAX_ATTEMPTS,
};

use self::cold_start::TableCheckFn;
use crate::Idempotency;
use crate::backoff::{RetrySchedule, VisibilityBackoff};
use crate::batch::{
    BatchError, BatchProcessor, BatchReport, BoxRecordHandler, Deduplicated, EventSource,
    HandlerOutput, ItemLookup, RecordHandler, RecordHandlerExt,
};
use crate::cache::LocalCache;
use crate::dead_letter::DeadLetter;
use crate::inline::InlinePut;
use crate::key::KeyConfig;
use crate::redrive_policy::QueueRef;
use crate::store::{Backend, StoreError, TransactionalBackend};
use crate::transaction::Transaction;

/// Why a batch could not be processed at all (each record's own failure is in its report).
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    /// The idempotency table cannot serve (the cold-start check found it missing, or not
    /// fitting the backend): no record ran, and the batch comes back whole.
    #[error(transparent)]
    Table(#[from] StoreError),
    /// The event itself is malformed.
    #[error(transparent)]
    Batch(#[from] BatchError),
}

/// A consumer of an event source (`E`: an SQS queue by default; a DynamoDB stream, a Kinesis
/// stream or a Kafka topic with [`ConsumerBuilder::source`]): a [`BatchProcessor`] and a boxed
/// handler of output `O`, with its cold-start checks; see the [module](self). Its type names no
/// closure, so that a test or an application's state holds it.
pub struct Consumer<O, E: EventSource = SqsEvent> {
    processor: BatchProcessor,
    handler: BoxRecordHandler<O, E::Record>,
    cold_start: ColdStartChecks,
    mapping_check: Option<MappingCheckFn>,
    mapping_checked: std::sync::Once,
}

/// The event source mapping's check (see `mapping_check`): of the function's name, the
/// source's ARN and the function's timeout (as the first invocation's time left tells it).
type MappingCheckFn = Arc<
    dyn Fn(
            String,
            Option<String>,
            Option<std::time::Duration>,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
        + Send
        + Sync,
>;

impl<O, E: EventSource> std::fmt::Debug for Consumer<O, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("processor", &self.processor)
            .field("handler", &self.handler)
            .field("cold_start", &self.cold_start)
            .finish()
    }
}

impl Consumer<()> {
    /// A consumer's builder from the environment ([`ConsumerConfig::from_env`]) and the SDK's
    /// own configuration (`aws_config::load_from_env`): a DynamoDB backend on
    /// `IDEMPOTENCY_TABLE`, SQS for the backoff, the dead-letter queue and the queue's check.
    #[cfg(feature = "dynamodb")]
    pub async fn from_env() -> Result<ConsumerBuilder<crate::store::DynamoDbBackend>, ConfigError> {
        let sdk = aws_config::load_from_env().await;
        ConsumerBuilder::from_config(&sdk, ConsumerConfig::from_env()?)
    }

    /// A consumer's builder over `backend` with the default settings and no SQS client (so no
    /// backoff, no dead-letter queue, no queue check until [`with_sqs`](ConsumerBuilder::with_sqs),
    /// or in a test [`with_in_memory_sqs`](ConsumerBuilder::with_in_memory_sqs)): for unit tests
    /// over [`InMemoryBackend`](crate::store::InMemoryBackend), or a backend of your own.
    pub fn builder<B: Backend>(backend: B) -> ConsumerBuilder<B> {
        ConsumerBuilder::new(backend)
    }
}

impl<O: Send + 'static, E: EventSource + serde::de::DeserializeOwned> Consumer<O, E> {
    /// Processes one event and answers with its partial batch response: what the function's
    /// `service_fn` calls.
    pub async fn handle(
        &self,
        event: LambdaEvent<E>,
    ) -> Result<E::Response, lambda_runtime::Error> {
        Ok(self.process(&event).await?.response())
    }

    /// Processes one event and reports each record: its output, or its failure and whether it
    /// went to the dead-letter queue. The invocation's X-Ray trace id is its own within it
    /// ([`runtime::trace_id`](crate::runtime::trace_id)), whatever else runs in the process.
    pub async fn process(
        &self,
        event: &LambdaEvent<E>,
    ) -> Result<BatchReport<O, E>, ConsumerError> {
        let trace = event.context.xray_trace_id.clone();
        crate::runtime::with_trace_id(trace, self.process_traced(event)).await
    }

    async fn process_traced(
        &self,
        event: &LambdaEvent<E>,
    ) -> Result<BatchReport<O, E>, ConsumerError> {
        // The source queue's check runs on an SQS event's queue only.
        let arn = (&event.payload as &dyn Any)
            .downcast_ref::<SqsEvent>()
            .and_then(|sqs| sqs.records.first())
            .and_then(|r| r.event_source_arn.as_deref());
        self.cold_start.ready(arn).await?;
        if E::is_stream()
            && let Some(check) = &self.mapping_check
        {
            self.mapping_checked.call_once(|| {
                let function = event.context.env_config.function_name.clone();
                let source = event.payload.source_arn().map(str::to_owned);
                // The first invocation's time left, in whole seconds rounded up: the function's
                // timeout (Lambda's init does not count against it).
                let timeout = crate::time::Deadline::of(&event.context).map(|deadline| {
                    let left = deadline.remaining(&*self.processor.clock);
                    std::time::Duration::from_secs(left.as_millis().div_ceil(1000) as u64)
                });
                tokio::spawn(check(function, source, timeout));
            });
        }
        let report = self.processor.process(event, &self.handler).await?;
        key_missing::report(event, &report);
        Ok(report)
    }

    /// Runs the function: Lambda's runtime loop over [`handle`](Self::handle)
    /// ([`runtime::run`](crate::runtime::run)), serving several invocations at once on Lambda
    /// Managed Instances (`AWS_LAMBDA_MAX_CONCURRENCY` above 1) and one after another
    /// elsewhere.
    pub async fn run(self) -> Result<(), lambda_runtime::Error>
    where
        E: Send + 'static,
        E::Response: Send,
    {
        crate::runtime::run(self, |consumer, event| consumer.handle(event)).await
    }

    /// What the cold-start checks found, once they have finished (the queue's on
    /// `SOURCE_QUEUE_URL`, or on `event_source_arn`); the table's failure as an error.
    pub async fn cold_start_report(
        &self,
        event_source_arn: Option<&str>,
    ) -> Result<ColdStartReport, StoreError> {
        self.cold_start.report(event_source_arn).await
    }

    /// The batch processor.
    pub fn processor(&self) -> &BatchProcessor {
        &self.processor
    }
}

/// The SQS a consumer sends its dead letters and visibility changes to.
#[derive(Debug, Clone)]
enum Sqs {
    Client(aws_sdk_sqs::Client),
    #[cfg(any(test, doc, feature = "test-util"))]
    InMemory(crate::test_util::InMemorySqs),
}

impl Sqs {
    fn dead_letter(&self, url: String) -> DeadLetter {
        match self {
            Sqs::Client(client) => DeadLetter::new(client.clone(), url),
            #[cfg(any(test, doc, feature = "test-util"))]
            Sqs::InMemory(sqs) => DeadLetter::in_memory(sqs, url),
        }
    }

    fn backoff(&self) -> VisibilityBackoff {
        match self {
            Sqs::Client(client) => VisibilityBackoff::new(client.clone()),
            #[cfg(any(test, doc, feature = "test-util"))]
            Sqs::InMemory(sqs) => VisibilityBackoff::in_memory(sqs),
        }
    }
}

/// Builds a [`Consumer`]: its engine, keys, budget, backoff, dead-letter queue and checks,
/// then its handler in one of the three modes. See the [module](self). `E` is the event source
/// (an SQS queue unless [`source`](Self::source) says otherwise).
pub struct ConsumerBuilder<B, E: EventSource = SqsEvent> {
    engine: Idempotency<B>,
    keys: KeyConfig,
    config: ConsumerConfig,
    sqs: Option<Sqs>,
    table_check: Option<TableCheckFn>,
    processor: BatchProcessor,
    local_cache: Option<LocalCache>,
    /// The inline and transactional modes' item lookup: an `ItemLookup` of the backend's
    /// write, set by [`with_item_lookup`](Self::with_item_lookup).
    item_lookup: Option<Arc<dyn Any + Send + Sync>>,
    /// The event source mapping's check, for stream and Kafka sources.
    mapping_check: Option<MappingCheckFn>,
    source: PhantomData<fn() -> E>,
}

impl<B: std::fmt::Debug, E: EventSource> std::fmt::Debug for ConsumerBuilder<B, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumerBuilder")
            .field("engine", &self.engine)
            .field("config", &self.config)
            .field("table_check", &self.table_check.is_some())
            .field("processor", &self.processor)
            .field("local_cache", &self.local_cache)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "dynamodb")]
impl ConsumerBuilder<crate::store::DynamoDbBackend> {
    /// A builder from `config` with clients made from `sdk`: a DynamoDB backend on
    /// `config.table` (required) with its cold-start check, and SQS, each request sent with its
    /// invocation's X-Ray trace id ([`TraceHeader`](crate::runtime::TraceHeader)).
    pub fn from_config(
        sdk: &aws_config::SdkConfig,
        config: ConsumerConfig,
    ) -> Result<Self, ConfigError> {
        // Each request in the trace of the invocation that sent it, however many run at once.
        let trace = crate::runtime::TraceHeader;
        let dynamodb = aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(sdk)
                .interceptor(trace)
                .build(),
        );
        let sqs = aws_sdk_sqs::Client::from_conf(
            aws_sdk_sqs::config::Builder::from(sdk)
                .interceptor(trace)
                .build(),
        );
        #[allow(unused_mut)]
        let mut builder = Self::from_clients(dynamodb, sqs, config)?;
        #[cfg(feature = "mapping-check")]
        {
            let lambda = aws_sdk_lambda::Client::new(sdk);
            builder.mapping_check = Some(Arc::new(move |function, source, timeout| {
                Box::pin(mapping_check::check(
                    lambda.clone(),
                    function,
                    source,
                    timeout,
                ))
            }));
        }
        Ok(builder)
    }

    /// [`from_config`](Self::from_config) with clients of your own (their timeouts, retries,
    /// interceptors).
    pub fn from_clients(
        dynamodb: aws_sdk_dynamodb::Client,
        sqs: aws_sdk_sqs::Client,
        config: ConsumerConfig,
    ) -> Result<Self, ConfigError> {
        let table = config
            .table
            .clone()
            .ok_or(ConfigError::Missing("IDEMPOTENCY_TABLE"))?;
        let backend = crate::store::DynamoDbBackend::new(dynamodb, table);
        let table_check = ColdStartChecks::table_check(&backend);
        let mut builder = Self::with_config(backend, config).with_sqs(sqs);
        builder.table_check = Some(table_check);
        Ok(builder)
    }
}

impl<B: Backend> ConsumerBuilder<B> {
    /// A builder over `backend` with the default settings ([`ConsumerConfig::default`]) and no
    /// SQS client, for an SQS queue.
    pub fn new(backend: B) -> Self {
        Self::with_config(backend, ConsumerConfig::default())
    }

    /// A builder over `backend` with `config` (its table is not read: the backend is given) and
    /// no SQS client.
    pub fn with_config(backend: B, config: ConsumerConfig) -> Self {
        let mut engine = Idempotency::new(backend).with_expiry(config.expiry);
        if let Some(prefix) = &config.key_prefix {
            engine = engine.with_key_prefix(prefix.clone());
        }
        let keys = config
            .key
            .clone()
            .map(KeyConfig::json_pointer)
            .unwrap_or_default();
        let local_cache = config
            .local_cache
            .map(|capacity| LocalCache::new(capacity, config::LOCAL_CACHE_TTL));
        Self {
            engine,
            keys,
            config,
            sqs: None,
            table_check: None,
            processor: BatchProcessor::new(),
            local_cache,
            item_lookup: None,
            mapping_check: None,
            source: PhantomData,
        }
    }
}

impl<B: Backend, E: EventSource> ConsumerBuilder<B, E> {
    /// A consumer of another event source: a DynamoDB stream
    /// ([`DynamoDbEvent`](crate::prelude::DynamoDbEvent)), a Kinesis stream
    /// ([`KinesisEvent`](crate::prelude::KinesisEvent)) or a Kafka topic
    /// ([`KafkaEvent`](crate::prelude::KafkaEvent)), with the same settings (the event types are
    /// in the [prelude](crate::prelude)). The dead-letter queue is still an SQS queue (the
    /// record, its shard or partition and sequence number, and the reason); the source queue's
    /// check (`SOURCE_QUEUE_URL`, `EVENT_SOURCE_BATCH_SIZE`) is SQS's alone (set on a stream, a
    /// warning names the source), and a stream's event source mapping is checked instead; an
    /// item lookup ([`with_item_lookup`](Self::with_item_lookup)) takes the source's record, so
    /// set it after this call (one set before, of another record type, is dropped with a
    /// warning).
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), lambda_runtime::Error> {
    /// use lambda_idempotency::prelude::*;
    ///
    /// #[derive(serde::Deserialize)]
    /// struct Payment { payment_id: String }
    ///
    /// Consumer::from_env()
    ///     .await?
    ///     .source::<KinesisEvent>()
    ///     .idempotent(json(|p: Payment, _ctx: RecordContext| async move {
    ///         Ok::<_, std::io::Error>(p.payment_id)
    ///     }))
    ///     .run()
    ///     .await
    /// # }
    /// ```
    pub fn source<E2: EventSource>(self) -> ConsumerBuilder<B, E2> {
        let mut item_lookup = self.item_lookup;
        if item_lookup.is_some()
            && std::any::TypeId::of::<E::Record>() != std::any::TypeId::of::<E2::Record>()
        {
            tracing::warn!(
                source = source_terms::Source::of::<E2>().name(),
                "the item lookup set before `source` takes a {}, not a {}: it is dropped. Call \
                 `with_item_lookup` after `source`",
                <E::Record as crate::batch::Record>::KIND,
                <E2::Record as crate::batch::Record>::KIND
            );
            item_lookup = None;
        }
        ConsumerBuilder {
            engine: self.engine,
            keys: self.keys,
            config: self.config,
            sqs: self.sqs,
            table_check: self.table_check,
            processor: self.processor,
            local_cache: self.local_cache,
            item_lookup,
            mapping_check: self.mapping_check,
            source: PhantomData,
        }
    }

    /// The SQS client of the backoff, the dead-letter queue and the queue's cold-start check.
    pub fn with_sqs(mut self, sqs: aws_sdk_sqs::Client) -> Self {
        self.sqs = Some(Sqs::Client(sqs));
        self
    }

    /// SQS in memory (feature `test-util`), for a test consumer that answers as the deployed
    /// one: the dead-letter queue (the one of [`with_dead_letter_queue`](Self::with_dead_letter_queue)
    /// or `DEAD_LETTER_QUEUE_URL`, else [`IN_MEMORY_DEAD_LETTER_QUEUE_URL`](crate::test_util::IN_MEMORY_DEAD_LETTER_QUEUE_URL))
    /// and the visibility backoff, each recorded in `sqs`; no queue check. See
    /// [`test_util`](crate::test_util).
    #[cfg(any(test, doc, feature = "test-util"))]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn with_in_memory_sqs(mut self, sqs: &crate::test_util::InMemorySqs) -> Self {
        self.sqs = Some(Sqs::InMemory(sqs.clone()));
        if self.config.dead_letter_queue_url.is_none() {
            self.config.dead_letter_queue_url =
                Some(crate::test_util::IN_MEMORY_DEAD_LETTER_QUEUE_URL.to_owned());
        }
        self
    }

    /// Keys and payload hashes from elsewhere than `IDEMPOTENCY_KEY` (a key from the body, a
    /// payload of some fields only).
    pub fn with_keys(mut self, keys: KeyConfig) -> Self {
        self.keys = keys;
        self
    }

    /// The attempt budget: a record whose handler failed `attempts` times goes to the
    /// dead-letter queue.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.config.max_attempts = Some(attempts.max(1));
        self
    }

    /// No attempt budget: a failing record comes back until it succeeds, or the queue's redrive
    /// policy moves it.
    pub fn without_attempt_budget(mut self) -> Self {
        self.config.max_attempts = None;
        self
    }

    /// No backoff: on SQS a failed record comes back after the queue's visibility timeout; on a
    /// stream it is reported at once, not retried within the invocation.
    pub fn without_backoff(mut self) -> Self {
        self.config.backoff_base = std::time::Duration::ZERO;
        self
    }

    /// The dead-letter queue, by URL (needs the SQS client).
    pub fn with_dead_letter_queue(mut self, url: impl Into<String>) -> Self {
        self.config.dead_letter_queue_url = Some(url.into());
        self
    }

    /// The warm-container cache in front of the backend in the three modes
    /// ([`idempotent`](Self::idempotent), [`transactional`](Self::transactional),
    /// [`inline`](Self::inline)): a duplicate of a key completed in this execution environment
    /// is answered without a request (see [`crate::cache`]). From the environment:
    /// `IDEMPOTENCY_LOCAL_CACHE` (how many keys, each kept at most 15 minutes); this sets one of
    /// your own (its capacity, its time to live, a clone to watch its hits).
    pub fn with_local_cache(mut self, cache: LocalCache) -> Self {
        self.local_cache = Some(cache);
        self
    }

    /// No warm-container cache, whatever `IDEMPOTENCY_LOCAL_CACHE` says.
    pub fn without_local_cache(mut self) -> Self {
        self.local_cache = None;
        self
    }

    /// Changes the engine: its expiry, key prefix, clock. Not its backend's type: the
    /// warm-container cache is [`with_local_cache`](Self::with_local_cache) (or
    /// `IDEMPOTENCY_LOCAL_CACHE`), which the three modes put in front of the backend.
    pub fn map_engine(mut self, f: impl FnOnce(Idempotency<B>) -> Idempotency<B>) -> Self {
        self.engine = f(self.engine);
        self
    }

    /// Changes the batch processor's other settings (concurrency, margins, strict order, clock);
    /// the budget, backoff and dead-letter queue are set from the consumer's.
    pub fn map_processor(mut self, f: impl FnOnce(BatchProcessor) -> BatchProcessor) -> Self {
        self.processor = f(self.processor);
        self
    }

    /// The engine, as it is now.
    pub fn engine(&self) -> &Idempotency<B> {
        &self.engine
    }

    /// The settings, as they are now.
    pub fn config(&self) -> &ConsumerConfig {
        &self.config
    }

    /// Where a record's item is, for the inline and the transactional modes: a failure reads
    /// it before it is counted, and a record on it answers for the key (see
    /// [`Inline::with_item_lookup`](crate::batch::Inline::with_item_lookup)). `locate` gets the
    /// record's idempotency key and the record: the source's own (an [`SqsMessage`](crate::prelude::SqsMessage),
    /// a [`KinesisEventRecord`](crate::prelude::KinesisEventRecord), ...), so set it after
    /// [`source`](Self::source).
    pub fn with_item_lookup<I, F>(mut self, locate: F) -> Self
    where
        B: TransactionalBackend,
        F: Fn(&str, &E::Record) -> Option<I> + Send + Sync + 'static,
        I: Into<B::Write>,
    {
        self.item_lookup = Some(Arc::new(ItemLookup::<B::Write>::new(locate)));
        self
    }

    /// The item lookup set for the backend's writes, if any.
    fn item_lookup(&self) -> ItemLookup<B::Write>
    where
        B: TransactionalBackend,
    {
        self.item_lookup
            .as_ref()
            .and_then(|lookup| lookup.downcast_ref::<ItemLookup<B::Write>>())
            .cloned()
            .unwrap_or_default()
    }

    /// A consumer in the lease mode: `handler` runs at most once per key in effect, its record
    /// written before and completed after ([`RecordHandlerExt::idempotent`]).
    pub fn idempotent<H>(self, handler: H) -> Consumer<Deduplicated<H::Output>, E>
    where
        H: RecordHandler<E::Record> + 'static,
        H::Output: Serialize + 'static,
        B: 'static,
    {
        match self.local_cache.clone() {
            Some(cache) => self.compose_with(
                |engine| engine.with_local_cache(cache),
                |engine, keys| handler.idempotent(engine).with_keys(keys),
            ),
            None => self.compose_with(
                |engine| engine,
                |engine, keys| handler.idempotent(engine).with_keys(keys),
            ),
        }
    }

    /// A consumer in the transactional mode: `handler` returns its writes, which commit with the
    /// record in one transaction ([`RecordHandlerExt::transactional`]).
    pub fn transactional<H, T>(self, handler: H) -> Consumer<Deduplicated<T>, E>
    where
        H: RecordHandler<E::Record> + HandlerOutput<Output = Transaction<T, B::Write>> + 'static,
        T: Serialize + Send + 'static,
        B: TransactionalBackend + 'static,
    {
        let lookup = self.item_lookup();
        match self.local_cache.clone() {
            Some(cache) => self.compose_with(
                |engine| engine.with_local_cache(cache),
                |engine, keys| (handler.transactional(engine).with_keys(keys)).with_lookup(lookup),
            ),
            None => self.compose_with(
                |engine| engine,
                |engine, keys| (handler.transactional(engine).with_keys(keys)).with_lookup(lookup),
            ),
        }
    }

    /// A consumer in the inline mode: `handler` returns its one new item, written with the
    /// record on it in one conditional write ([`RecordHandlerExt::inline`]).
    pub fn inline<H, T, I>(self, handler: H) -> Consumer<Deduplicated<T>, E>
    where
        H: RecordHandler<E::Record> + HandlerOutput<Output = InlinePut<T, I>> + 'static,
        T: Serialize + Send + 'static,
        I: Into<B::Write> + Send + 'static,
        B: TransactionalBackend + 'static,
    {
        let lookup = self.item_lookup();
        match self.local_cache.clone() {
            Some(cache) => self.compose_with(
                |engine| engine.with_local_cache(cache),
                |engine, keys| handler.inline(engine).with_keys(keys).with_lookup(lookup),
            ),
            None => self.compose_with(
                |engine| engine,
                |engine, keys| handler.inline(engine).with_keys(keys).with_lookup(lookup),
            ),
        }
    }

    /// A consumer whose handler `make` composes from the engine and the keys: for what the three
    /// modes above do not say (a hook after the commit with
    /// [`and_then`](RecordHandlerExt::and_then), several handlers). The engine is over `B`
    /// itself: with a warm-container cache, wrap it in `make`
    /// ([`Idempotency::with_local_cache`]); one set on the builder is not applied here (a
    /// warning says so).
    pub fn compose<H>(
        mut self,
        make: impl FnOnce(Idempotency<B>, KeyConfig) -> H,
    ) -> Consumer<H::Output, E>
    where
        H: RecordHandler<E::Record> + 'static,
        H::Output: 'static,
    {
        if self.local_cache.take().is_some() {
            tracing::warn!(
                "the consumer's local cache (IDEMPOTENCY_LOCAL_CACHE) applies to its three modes, \
                 not to a handler of `compose`: wrap the engine with `with_local_cache` there"
            );
        }
        self.compose_with(|engine| engine, make)
    }

    /// [`compose`](Self::compose) over the engine `layer` makes of this one (the same, or with
    /// the local cache in front of its backend).
    fn compose_with<B2, H>(
        self,
        layer: impl FnOnce(Idempotency<B>) -> Idempotency<B2>,
        make: impl FnOnce(Idempotency<B2>, KeyConfig) -> H,
    ) -> Consumer<H::Output, E>
    where
        B2: Backend,
        H: RecordHandler<E::Record> + 'static,
        H::Output: 'static,
    {
        let Self {
            engine,
            keys,
            config,
            sqs,
            table_check,
            mut processor,
            local_cache: _,
            item_lookup: _,
            mapping_check,
            source: _,
        } = self;
        let engine = layer(engine);
        if let Some(attempts) = config.max_attempts {
            processor = processor.max_attempts(attempts);
        }
        let client = match &sqs {
            Some(Sqs::Client(client)) => Some(client.clone()),
            _ => None,
        };
        let source = source_terms::Source::of::<E>();
        if E::is_stream()
            && let Some(url) = &config.source_queue_url
        {
            tracing::warn!(
                source = source.name(),
                source_queue_url = url,
                "SOURCE_QUEUE_URL names an SQS queue, and this consumer reads {}: the queue's \
                 cold-start check does not run (the event source mapping's does)",
                source.name()
            );
        }
        // The backoff's schedule, when it is on.
        let schedule = (!config.backoff_base.is_zero()).then(|| {
            RetrySchedule::new(
                config.backoff_base,
                config.backoff_max.max(config.backoff_base),
            )
        });
        // The source queue's check is of SQS queues.
        let queue = client.filter(|_| !E::is_stream()).map(|sqs| QueueToCheck {
            sqs,
            source: config.source_queue_url.clone().map(QueueRef::Url),
            batch_size: config.batch_size,
            max_attempts: config.max_attempts,
            expiry: engine.expiry(),
            backoff: schedule,
        });
        match (&sqs, &config.dead_letter_queue_url) {
            (Some(sqs), Some(url)) => {
                processor = processor.with_dead_letter(sqs.dead_letter(url.clone()));
            }
            (None, Some(url)) => tracing::warn!(
                dead_letter_queue = url,
                "the consumer has no SQS client: nothing is sent to its dead-letter queue"
            ),
            (_, None) => source_terms::warn_no_dead_letter_queue(source),
        }
        source_terms::warn_if_expiry_below_the_rule(source, engine.expiry());
        // On a stream the backoff spaces the retries within the invocation.
        if E::is_stream()
            && let Some(schedule) = schedule
        {
            processor = processor.retry_in_invocation(schedule);
        } else if let Some(sqs) = &sqs
            && schedule.is_some()
        {
            processor = processor.with_backoff(
                sqs.backoff()
                    .base(config.backoff_base)
                    .max(config.backoff_max.max(config.backoff_base)),
            );
        }
        let handler = BoxRecordHandler::new(make(engine, keys));
        Consumer {
            processor,
            handler,
            cold_start: ColdStartChecks::start_with(table_check, queue),
            mapping_check: mapping_check.filter(|_| E::is_stream()),
            mapping_checked: std::sync::Once::new(),
        }
    }
}
