//! Local event source mappings: what Lambda does between a queue or a table's stream and a
//! function.
//!
//! **SQS** ([`EventSourceMapping`]): for each mapping, `MaximumConcurrency` pollers (5,
//! Lambda's initial poller count, when the template sets none) each loop: long-poll the queue
//! (`MaxNumberOfMessages` = min(`BatchSize`, 10), all system and message attributes), gather up
//! to `BatchSize` records within `MaximumBatchingWindowInSeconds` (standard queues), build the
//! Lambda SQS event, invoke the function with a deadline of now + its `Timeout`, then delete
//! what real Lambda deletes:
//!
//! | outcome | deleted |
//! | --- | --- |
//! | success, no `ReportBatchItemFailures` | every record |
//! | success with `ReportBatchItemFailures` | every record not in `batchItemFailures` |
//! | function error or panic, timeout, or an invalid partial response (see [`failed_message_ids`]) | nothing: the whole batch comes back after the visibility timeout |
//!
//! A function's `ReservedConcurrentExecutions` bounds its invocations in progress across all its
//! mappings: a poller receives only while it holds a unit of it, so a function at its reserved
//! concurrency gets no more batches, and none waits received.
//!
//! Visibility is never changed, so a FIFO queue keeps a message group's later messages
//! invisible while earlier ones are in flight, and redrive to the dead-letter queue happens in
//! SQS after `maxReceiveCount` receives, as in AWS.
//!
//! **DynamoDB streams and Kinesis data streams** ([`StreamEventSourceMapping`]): each shard
//! read in order, one batch at a time (a child shard after its parents), filtered, retried from
//! the first reported failure, bisected, and given up on to the on-failure queue; see the
//! [`stream`] module.
//!
//! ```no_run
//! # async fn f(clients: local_aws::Clients, template: local_aws::template::Template,
//! #            resources: local_aws::provision::Provisioned) -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use local_aws::runner::{HttpInvoker, Runner};
//!
//! // Every function of the template with a queue or a stream, served by `cargo lambda watch`.
//! let shutdown = tokio_util::sync::CancellationToken::new();
//! let running = Runner::from_clients(&clients)
//!     .all_functions(&template, &resources, HttpInvoker::cargo_lambda_watch())?
//!     .start(shutdown.clone());
//! // ... write payments; then wait until the publisher relayed every write and the queues drained:
//! let queues = [resources.queues["PaymentsQueue"].url.as_str(), resources.queues["ReceiptsQueue"].url.as_str()];
//! running.wait_idle(&queues, Duration::from_secs(60)).await?;
//! let stats = running.stop().await;
//! println!("payments-publisher: {:?}", stats["payments-publisher"].stream);
//! # Ok(()) }
//! ```

mod event;
mod invoke;
mod running;
mod sqs;
mod stats;
pub mod stream;

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

pub use event::{InvalidResponse, failed_message_ids, sqs_event};
pub(crate) use invoke::lambda_context;
pub use invoke::{HttpInvoker, InProcess, Invocation, InvokeError, InvokeFuture, Invoker};
pub use running::{IdleError, RunningRunner, StreamWaitError};
pub use sqs::{
    DEFAULT_CONCURRENCY, DrainError, EventSourceMapping, QueueDepth, queue_depth, wait_drained,
};
pub use stats::{Stats, StreamStats};
pub use stream::{
    Condition, GivenUp, KINESIS_SCHEMA_VERSION, LastInvocation, ShardRecord,
    StreamEventSourceMapping, StreamKind, StreamOptions, invocation_record, kinesis_record,
    stream_event, stream_record,
};

use crate::Clients;
use crate::provision::Provisioned;
use crate::template::{Function, Template};
use stats::Counters;

/// Why a runner could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// No function has that `FunctionName` or logical id.
    #[error("no function named {0} in the template")]
    NoSuchFunction(String),
    /// The function has no (enabled) SQS, DynamoDB stream or Kinesis event source.
    #[error("function {0} has no enabled SQS, DynamoDB stream or Kinesis event source")]
    NoSqsEvents(String),
    /// The event source's queue (or on-failure queue) was not provisioned.
    #[error("queue {0} is not provisioned")]
    QueueNotProvisioned(String),
    /// The stream event source's table was not provisioned.
    #[error("table {0} is not provisioned")]
    TableNotProvisioned(String),
    /// The stream event source's table has no stream.
    #[error("table {0} has no stream (StreamSpecification)")]
    NoStream(String),
    /// A stream mapping was added to a runner without a DynamoDB Streams client.
    #[error(
        "function {0} reads a DynamoDB stream: build the runner with Runner::from_clients (or .dynamodb_streams(client))"
    )]
    NoStreamsClient(String),
    /// A Kinesis mapping was added to a runner without a Kinesis client.
    #[error(
        "function {0} reads a Kinesis stream: build the runner with Runner::from_clients (or .kinesis(client))"
    )]
    NoKinesisClient(String),
    /// A stream mapping's ARN names neither a DynamoDB stream nor a Kinesis stream.
    #[error(
        "function {function}: {arn:?} is neither a DynamoDB stream ARN (arn:aws:dynamodb:REGION:ACCOUNT:table/T/stream/LABEL) nor a Kinesis stream ARN (arn:aws:kinesis:REGION:ACCOUNT:stream/NAME)"
    )]
    NotAStream {
        /// The function.
        function: String,
        /// The ARN given.
        arn: String,
    },
    /// The Kinesis event source's stream was not provisioned.
    #[error("Kinesis stream {0} is not provisioned")]
    KinesisStreamNotProvisioned(String),
}

/// Builds the set of mappings to run; [`start`](Runner::start) runs them.
pub struct Runner {
    sqs: aws_sdk_sqs::Client,
    streams: Option<aws_sdk_dynamodbstreams::Client>,
    kinesis: Option<aws_sdk_kinesis::Client>,
    wait_time_seconds: i32,
    stream_options: StreamOptions,
    mappings: Vec<(EventSourceMapping, Arc<dyn Invoker>)>,
    stream_mappings: Vec<(StreamEventSourceMapping, Arc<dyn Invoker>)>,
}

impl Runner {
    /// A runner receiving with `sqs`, long-polling 20 s. For stream mappings it also needs a
    /// DynamoDB Streams client: see [`from_clients`](Self::from_clients).
    pub fn new(sqs: aws_sdk_sqs::Client) -> Self {
        Self {
            sqs,
            streams: None,
            kinesis: None,
            wait_time_seconds: 20,
            stream_options: StreamOptions::default(),
            mappings: Vec::new(),
            stream_mappings: Vec::new(),
        }
    }

    /// A runner for queues and streams, with the SQS, DynamoDB Streams and Kinesis clients of
    /// `clients`.
    pub fn from_clients(clients: &Clients) -> Self {
        Self::new(clients.sqs.clone())
            .dynamodb_streams(clients.dynamodb_streams.clone())
            .kinesis(clients.kinesis.clone())
    }

    /// The Kinesis client the Kinesis stream mappings read with.
    pub fn kinesis(mut self, client: aws_sdk_kinesis::Client) -> Self {
        self.kinesis = Some(client);
        self
    }

    /// Whether the runner has the client `mapping` reads with.
    fn check_client(&self, mapping: &StreamEventSourceMapping) -> Result<(), RunnerError> {
        match StreamKind::of_arn(&mapping.stream_arn) {
            Some(StreamKind::DynamoDb) if self.streams.is_some() => Ok(()),
            Some(StreamKind::DynamoDb) => {
                Err(RunnerError::NoStreamsClient(mapping.function_name.clone()))
            }
            Some(StreamKind::Kinesis) if self.kinesis.is_some() => Ok(()),
            Some(StreamKind::Kinesis) => {
                Err(RunnerError::NoKinesisClient(mapping.function_name.clone()))
            }
            None => Err(RunnerError::NotAStream {
                function: mapping.function_name.clone(),
                arn: mapping.stream_arn.clone(),
            }),
        }
    }

    /// The DynamoDB Streams client the stream mappings read with.
    pub fn dynamodb_streams(mut self, client: aws_sdk_dynamodbstreams::Client) -> Self {
        self.streams = Some(client);
        self
    }

    /// `WaitTimeSeconds` of each ReceiveMessage (0-20, default 20 like Lambda). Shutdown waits
    /// for the calls in progress, so keep it short (1-2 s) in tests and demos.
    pub fn wait_time_seconds(mut self, seconds: u32) -> Self {
        self.wait_time_seconds = seconds.min(20) as i32;
        self
    }

    /// How the stream pollers pace themselves (poll interval, retry delays).
    pub fn stream_options(mut self, options: StreamOptions) -> Self {
        self.stream_options = options;
        self
    }

    /// Adds one SQS mapping.
    pub fn mapping(mut self, mapping: EventSourceMapping, invoker: impl Invoker) -> Self {
        self.mappings.push((mapping, Arc::new(invoker)));
        self
    }

    /// Adds one stream mapping: a DynamoDB stream or a Kinesis stream, as its ARN says (the
    /// runner needs the DynamoDB Streams or the Kinesis client).
    pub fn stream_mapping(
        mut self,
        mapping: StreamEventSourceMapping,
        invoker: impl Invoker,
    ) -> Result<Self, RunnerError> {
        self.check_client(&mapping)?;
        self.stream_mappings.push((mapping, Arc::new(invoker)));
        Ok(self)
    }

    /// Adds the enabled event sources of `f`; `false` when it has none.
    fn add_function(
        &mut self,
        f: &Function,
        provisioned: &Provisioned,
        invoker: &Arc<dyn Invoker>,
    ) -> Result<bool, RunnerError> {
        let sqs = EventSourceMapping::for_function(f, provisioned)?;
        let streams = StreamEventSourceMapping::for_function(f, provisioned)?;
        for mapping in &streams {
            self.check_client(mapping)?;
        }
        let any = !sqs.is_empty() || !streams.is_empty();
        self.mappings
            .extend(sqs.into_iter().map(|m| (m, Arc::clone(invoker))));
        self.stream_mappings
            .extend(streams.into_iter().map(|m| (m, Arc::clone(invoker))));
        Ok(any)
    }

    /// Adds every enabled event source (SQS queues, DynamoDB and Kinesis streams) of the function with
    /// `FunctionName` or logical id `function`, invoking it with `invoker`.
    pub fn function(
        mut self,
        template: &Template,
        provisioned: &Provisioned,
        function: &str,
        invoker: impl Invoker,
    ) -> Result<Self, RunnerError> {
        let f = template
            .functions
            .get(function)
            .or_else(|| template.function_by_name(function))
            .ok_or_else(|| RunnerError::NoSuchFunction(function.to_owned()))?;
        let invoker: Arc<dyn Invoker> = Arc::new(invoker);
        if !self.add_function(f, provisioned, &invoker)? {
            return Err(RunnerError::NoSqsEvents(f.name.clone()));
        }
        Ok(self)
    }

    /// Adds every enabled event source of every function, all invoked with `invoker` (e.g. one
    /// [`HttpInvoker`], which routes by function name). Functions with a stream need a runner
    /// with a DynamoDB Streams or Kinesis client ([`from_clients`](Self::from_clients)).
    pub fn all_functions(
        mut self,
        template: &Template,
        provisioned: &Provisioned,
        invoker: impl Invoker,
    ) -> Result<Self, RunnerError> {
        let invoker: Arc<dyn Invoker> = Arc::new(invoker);
        for f in template.functions.values() {
            self.add_function(f, provisioned, &invoker)?;
        }
        Ok(self)
    }

    /// The SQS mappings added so far.
    pub fn mappings(&self) -> impl Iterator<Item = &EventSourceMapping> {
        self.mappings.iter().map(|(m, _)| m)
    }

    /// The stream mappings (DynamoDB and Kinesis) added so far.
    pub fn stream_mappings(&self) -> impl Iterator<Item = &StreamEventSourceMapping> {
        self.stream_mappings.iter().map(|(m, _)| m)
    }

    /// Starts the pollers (on the current Tokio runtime). They run until `shutdown` is
    /// cancelled. A poller is never cut off in the middle: an SQS poller's ReceiveMessage call
    /// (at most `WaitTimeSeconds`) completes, and what it received is invoked and deleted as
    /// usual, so nothing is left invisible for a visibility timeout by the shutdown itself; a
    /// stream poller finishes the invocation in progress and then stops (retries are not
    /// waited for).
    pub fn start(self, shutdown: CancellationToken) -> RunningRunner {
        let mut running = RunningRunner::new(self.sqs.clone(), shutdown.clone());
        // One pool of reserved concurrency per function, whatever its number of mappings.
        let mut reserved: HashMap<String, Arc<Semaphore>> = HashMap::new();
        for (mapping, invoker) in self.mappings {
            let counters = running.counters(&mapping.function_name);
            let units = mapping.reserved_concurrency.map(|n| {
                Arc::clone(
                    reserved
                        .entry(mapping.function_name.clone())
                        .or_insert_with(|| Arc::new(Semaphore::new(n as usize))),
                )
            });
            running.add_tasks(sqs::spawn_pollers(
                self.sqs.clone(),
                self.wait_time_seconds,
                mapping,
                invoker,
                counters,
                units,
                &shutdown,
            ));
        }
        for (mapping, invoker) in self.stream_mappings {
            let source = match StreamKind::of_arn(&mapping.stream_arn) {
                Some(StreamKind::DynamoDb) => self.streams.clone().map(stream::Source::DynamoDb),
                Some(StreamKind::Kinesis) => self.kinesis.clone().map(stream::Source::Kinesis),
                None => None,
            };
            // Checked when the mapping was added.
            if let Some(source) = source {
                let counters = running.counters(&mapping.function_name);
                let progress = running.stream_progress(&mapping.function_name);
                let ctx = stream::MappingContext {
                    mapping,
                    invoker,
                    source,
                    sqs: self.sqs.clone(),
                    counters,
                    options: self.stream_options,
                    progress,
                };
                running.add_tasks([stream::spawn_mapping(ctx, &shutdown)]);
            }
        }
        running
    }
}
