//! Runs the project's SAM template (`template.yaml`) on a local AWS endpoint (moto or
//! LocalStack), without Docker and without deploying:
//!
//! - [`template`]: the template as a model (queues, tables, functions, event sources) of the
//!   CloudFormation SAM's own translator makes of it, with parameter overrides and a
//!   [`Naming`](template::Naming) prefix for isolated copies;
//! - [`provision`]: creates the queues and tables (with their streams) on the endpoint, computes each function's
//!   environment, and [`verify`](provision::verify)s what exists against the template;
//! - [`runner`]: Lambda's event source mappings, feeding batches to in-process handlers or to a
//!   `cargo lambda watch` server: SQS (deleting exactly what real Lambda would delete) and
//!   DynamoDB streams (shards in order, filters, partial batch responses, bisection, retries and
//!   the on-failure destination);
//! - [`gateway`]: API Gateway (HTTP API) / function URL in front of a `lambda_http` handler.
//!
//! The whole loop, in-process:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
//! use lambda_runtime::{Error, LambdaEvent};
//! use local_aws::{Clients, provision, runner::{InProcess, Runner}};
//! use local_aws::template::{Naming, Template, TemplateOptions};
//!
//! let clients = Clients::from_env().await?; // AWS_ENDPOINT_URL must be set
//! let template = Template::load_project(&TemplateOptions::default().naming(Naming::unique("demo")))?;
//! let resources = provision::provision(&clients, &template).await?;
//! let env = resources.function_env(&template.functions["ReceiptSenderFunction"])?;
//! println!("RECEIPTS_TABLE={}", env["RECEIPTS_TABLE"]);
//!
//! let shutdown = tokio_util::sync::CancellationToken::new();
//! let running = Runner::new(clients.sqs.clone())
//!     .function(&template, &resources, "receipt-sender", InProcess::new(
//!         |event: LambdaEvent<SqsEvent>| async move {
//!             Ok::<_, Error>(SqsBatchResponse::default())
//!         },
//!     ))?
//!     .start(shutdown.clone());
//! // ... send messages, then:
//! running.wait_drained(&[resources.queues["ReceiptsQueue"].url.as_str()], std::time::Duration::from_secs(10)).await?;
//! println!("{:?}", running.stop().await);
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod arn;
pub mod cli;
pub mod gateway;
pub mod provision;
pub mod runner;
pub mod template;

use std::time::Duration;

/// The variable naming the local endpoint; nothing here talks to an AWS that is not local.
pub const ENDPOINT_VAR: &str = "AWS_ENDPOINT_URL";

/// Why no local SDK configuration could be built.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// `AWS_ENDPOINT_URL` is not set.
    #[error(
        "AWS_ENDPOINT_URL is not set: local-aws needs a local AWS endpoint (moto or LocalStack). \
         Run under `make test` or `infra/local-aws/local-aws run -- ...`, or start one with \
         `make local-aws-start` and `eval \"$(infra/local-aws/local-aws env)\"`."
    )]
    NotSet,
}

/// What a function's process takes from this process's environment: `PATH`, the local endpoint
/// (`AWS_ENDPOINT_URL`), the region and the dummy credentials, and `RUST_LOG` when
/// `with_log_filter`. A process started for a function clears the rest (its environment is the
/// template's, [`provision::Provisioned::lambda_env`]).
pub fn passed_through_env(with_log_filter: bool) -> std::collections::BTreeMap<String, String> {
    let mut keys = vec![
        "PATH",
        "AWS_ENDPOINT_URL",
        "AWS_REGION",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
    ];
    if with_log_filter {
        keys.push("RUST_LOG");
    }
    keys.into_iter()
        .filter_map(|key| std::env::var(key).ok().map(|value| (key.to_owned(), value)))
        .collect()
}

/// An SDK configuration for the endpoint in `AWS_ENDPOINT_URL`: region from `AWS_REGION`
/// (default `us-east-1`), credentials from the environment or dummy ones, retries kept short.
///
/// ```no_run
/// # async fn f() {
/// let config = local_aws::local_sdk_config().await.unwrap_or_else(|e| panic!("{e}"));
/// let sqs = aws_sdk_sqs::Client::new(&config);
/// # }
/// ```
pub async fn local_sdk_config() -> Result<aws_config::SdkConfig, EndpointError> {
    let endpoint = std::env::var(ENDPOINT_VAR)
        .ok()
        .filter(|e| !e.is_empty())
        .ok_or(EndpointError::NotSet)?;
    Ok(sdk_config_for(&endpoint).await)
}

/// An SDK configuration for `endpoint` (see [`local_sdk_config`]).
pub async fn sdk_config_for(endpoint: &str) -> aws_config::SdkConfig {
    let region = std::env::var("AWS_REGION")
        .or_else(|_| std::env::var("AWS_DEFAULT_REGION"))
        .unwrap_or_else(|_| "us-east-1".to_owned());
    let key = std::env::var("AWS_ACCESS_KEY_ID").unwrap_or_else(|_| "test".to_owned());
    let secret = std::env::var("AWS_SECRET_ACCESS_KEY").unwrap_or_else(|_| "test".to_owned());
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(aws_config::Region::new(region))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            key,
            secret,
            None,
            None,
            "local-aws",
        ))
        .timeout_config(
            aws_config::timeout::TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(5))
                .build(),
        )
        .load()
        .await
}

/// The SQS, DynamoDB and DynamoDB Streams clients the harness works with.
#[derive(Clone, Debug)]
pub struct Clients {
    /// SQS.
    pub sqs: aws_sdk_sqs::Client,
    /// DynamoDB.
    pub dynamodb: aws_sdk_dynamodb::Client,
    /// DynamoDB Streams (what stream event source mappings read with).
    pub dynamodb_streams: aws_sdk_dynamodbstreams::Client,
    /// Kinesis Data Streams (what Kinesis event source mappings read with, and where the
    /// template's `AWS::Kinesis::Stream`s are created).
    pub kinesis: aws_sdk_kinesis::Client,
}

impl Clients {
    /// Clients for `config`.
    pub fn new(config: &aws_config::SdkConfig) -> Self {
        Self {
            sqs: aws_sdk_sqs::Client::new(config),
            dynamodb: aws_sdk_dynamodb::Client::new(config),
            dynamodb_streams: aws_sdk_dynamodbstreams::Client::new(config),
            kinesis: aws_sdk_kinesis::Client::new(config),
        }
    }

    /// Clients for the endpoint in `AWS_ENDPOINT_URL` (see [`local_sdk_config`]).
    pub async fn from_env() -> Result<Self, EndpointError> {
        Ok(Self::new(&local_sdk_config().await?))
    }

    /// The region the clients sign for.
    pub fn region(&self) -> String {
        self.sqs
            .config()
            .region()
            .map_or_else(|| "us-east-1".to_owned(), |r| r.to_string())
    }
}

/// The text of a panic's payload (a `&str` or a `String`, as `panic!` makes them).
pub(crate) fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(text) => *text,
        Err(payload) => match payload.downcast_ref::<&str>() {
            Some(text) => (*text).to_owned(),
            None => "non-string panic payload".to_owned(),
        },
    }
}
