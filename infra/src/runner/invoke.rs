//! How the runner calls a function: in-process, or through a `cargo lambda watch` server. Both
//! take the event as JSON, so one invoker serves SQS and DynamoDB stream mappings alike.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lambda_events::sqs::SqsEvent;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use lambda_runtime::{Config, Context, LambdaEvent};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// One invocation: the event and what the Lambda context carries.
#[derive(Clone, Debug)]
pub struct Invocation {
    /// `FunctionName`.
    pub function_name: String,
    /// The cargo binary (`Metadata.BuildProperties.Binary`), which `cargo lambda watch` routes
    /// by; `None`: same as `function_name`.
    pub binary: Option<String>,
    /// The function's ARN (`invoked_function_arn`).
    pub function_arn: String,
    /// `MemorySize` in MB.
    pub memory_size: u32,
    /// A fresh request id (a UUID, like Lambda's).
    pub request_id: String,
    /// When the invocation is killed: now + the function's `Timeout`.
    pub deadline: SystemTime,
    /// The event JSON.
    pub payload: serde_json::Value,
}

impl Invocation {
    /// The Lambda context a handler gets: request id, deadline (epoch ms), function ARN, and
    /// the function's name and memory in `env_config`.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use local_aws::runner::Invocation;
    ///
    /// let deadline = SystemTime::now() + Duration::from_secs(30);
    /// let invocation = Invocation {
    ///     function_name: "payment-processor".into(),
    ///     binary: None,
    ///     function_arn: "arn:aws:lambda:us-east-1:123456789012:function:payment-processor".into(),
    ///     memory_size: 128,
    ///     request_id: "r-1".into(),
    ///     deadline,
    ///     payload: serde_json::json!({"Records": []}),
    /// };
    /// let context = invocation.context();
    /// assert_eq!(context.request_id, "r-1");
    /// assert_eq!(context.env_config.function_name, "payment-processor");
    /// assert!(context.deadline > 0);
    /// ```
    pub fn context(&self) -> Context {
        lambda_context(
            &self.function_name,
            &self.function_arn,
            self.memory_size,
            &self.request_id,
            self.deadline,
        )
    }
}

/// A Lambda context as the runtime would build it for one invocation.
pub(crate) fn lambda_context(
    function_name: &str,
    function_arn: &str,
    memory_size: u32,
    request_id: &str,
    deadline: SystemTime,
) -> Context {
    let config = Config {
        function_name: function_name.to_owned(),
        memory: i32::try_from(memory_size).unwrap_or(i32::MAX),
        version: "$LATEST".into(),
        log_stream: "local".into(),
        log_group: format!("/aws/lambda/{function_name}"),
    };
    let mut context = Context::default();
    context.request_id = request_id.to_owned();
    context.deadline = deadline
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
        .try_into()
        .unwrap_or(u64::MAX);
    context.invoked_function_arn = function_arn.to_owned();
    context.env_config = Arc::new(config);
    context
}

/// Why an invocation failed as a whole (Lambda then retries the whole batch).
#[derive(Debug, Clone, thiserror::Error)]
pub enum InvokeError {
    /// The function returned an error (or panicked).
    #[error("function error: {0}")]
    Function(String),
    /// The event did not deserialize into the handler's type (the runtime would fail too).
    #[error("the event does not deserialize: {0}")]
    Event(String),
    /// The function could not be reached (`cargo lambda watch` not running, ...).
    #[error("cannot invoke the function: {0}")]
    Transport(String),
}

/// A boxed invocation future.
pub type InvokeFuture<'a> = Pin<Box<dyn Future<Output = Result<Bytes, InvokeError>> + Send + 'a>>;

/// Something that runs a function for an event and returns its response payload (the bytes
/// Lambda would get back: for an SQS handler, the partial batch response JSON).
///
/// ```
/// use bytes::Bytes;
/// use local_aws::runner::{Invocation, InvokeFuture, Invoker};
///
/// /// Reports every record as failed.
/// struct FailAll;
/// impl Invoker for FailAll {
///     fn invoke(&self, invocation: Invocation) -> InvokeFuture<'_> {
///         Box::pin(async move {
///             let failures: Vec<_> = invocation.payload["Records"].as_array().unwrap().iter()
///                 .map(|r| serde_json::json!({"itemIdentifier": r["messageId"]}))
///                 .collect();
///             Ok(Bytes::from(serde_json::json!({"batchItemFailures": failures}).to_string()))
///         })
///     }
/// }
/// ```
pub trait Invoker: Send + Sync + 'static {
    /// Runs the function once. The caller enforces the deadline.
    fn invoke(&self, invocation: Invocation) -> InvokeFuture<'_>;
}

impl<T: Invoker + ?Sized> Invoker for Arc<T> {
    fn invoke(&self, invocation: Invocation) -> InvokeFuture<'_> {
        (**self).invoke(invocation)
    }
}

/// Aborts the task when dropped (the deadline passed and the invocation future was dropped).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// An in-process function: an async closure taking a `LambdaEvent` of its event type (an
/// [`SqsEvent`], a DynamoDB stream [`Event`](aws_lambda_events::dynamodb::Event), ...), as given
/// to `lambda_runtime::service_fn`. The event type comes from the closure's argument. It runs on
/// its own task, so a panic is a function error (as in the real runtime) and a timeout aborts
/// it; an event that does not deserialize into the type fails the invocation, as in the runtime.
///
/// ```
/// use aws_lambda_events::dynamodb::Event;
/// use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
/// use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
/// use lambda_runtime::{Error, LambdaEvent};
/// use local_aws::runner::InProcess;
///
/// let consumer = InProcess::new(|event: LambdaEvent<SqsEvent>| async move {
///     tracing::info!(records = event.payload.records.len(), deadline = event.context.deadline);
///     Ok::<_, Error>(SqsBatchResponse::default())
/// });
/// let relay = InProcess::new(|event: LambdaEvent<Event>| async move {
///     let mut response = DynamoDbEventResponse::default();
///     for record in &event.payload.records {
///         if record.change.new_image.is_empty() {
///             let mut failure = DynamoDbBatchItemFailure::default();
///             failure.item_identifier = record.change.sequence_number.clone();
///             response.batch_item_failures.push(failure);
///         }
///     }
///     Ok::<_, Error>(response)
/// });
/// ```
pub struct InProcess<F, E = SqsEvent> {
    handler: Arc<F>,
    event: PhantomData<fn() -> E>,
}

impl<F, E> InProcess<F, E> {
    /// Wraps `handler`.
    pub fn new<Fut>(handler: F) -> Self
    where
        F: Fn(LambdaEvent<E>) -> Fut,
    {
        Self {
            handler: Arc::new(handler),
            event: PhantomData,
        }
    }
}

impl<F, Ev, Fut, R, E> Invoker for InProcess<F, Ev>
where
    F: Fn(LambdaEvent<Ev>) -> Fut + Send + Sync + 'static,
    Ev: DeserializeOwned + Send + 'static,
    Fut: Future<Output = Result<R, E>> + Send + 'static,
    R: Serialize + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    fn invoke(&self, invocation: Invocation) -> InvokeFuture<'_> {
        let handler = Arc::clone(&self.handler);
        Box::pin(async move {
            let context = invocation.context();
            let event: Ev = serde_json::from_value(invocation.payload)
                .map_err(|e| InvokeError::Event(e.to_string()))?;
            let mut task = AbortOnDrop(tokio::spawn(async move {
                match handler(LambdaEvent::new(event, context)).await {
                    Ok(response) => serde_json::to_vec(&response)
                        .map(Bytes::from)
                        .map_err(|e| InvokeError::Function(format!("response: {e}"))),
                    Err(e) => Err(InvokeError::Function(e.to_string())),
                }
            }));
            match (&mut task.0).await {
                Ok(result) => result,
                Err(e) if e.is_panic() => Err(InvokeError::Function(format!(
                    "panicked: {}",
                    crate::panic_text(e.into_panic())
                ))),
                Err(e) => Err(InvokeError::Function(e.to_string())),
            }
        })
    }
}

/// Invokes functions over Lambda's Invoke API, e.g. the one `cargo lambda watch` serves on
/// `http://127.0.0.1:9000`: `POST /2015-03-31/functions/{name}/invocations` with the event as
/// the body, `name` being the function's cargo binary (what `cargo lambda watch` routes by),
/// else its `FunctionName`. A non-2xx answer or an `X-Amz-Function-Error` header is a function error
/// (`cargo lambda watch` answers 500 when the handler returns an error).
///
/// ```
/// use local_aws::runner::HttpInvoker;
/// let invoker = HttpInvoker::cargo_lambda_watch();
/// assert_eq!(invoker.url("receipt-sender"), "http://127.0.0.1:9000/2015-03-31/functions/receipt-sender/invocations");
/// ```
#[derive(Clone)]
pub struct HttpInvoker {
    endpoint: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl std::fmt::Debug for HttpInvoker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpInvoker")
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

impl HttpInvoker {
    /// `cargo lambda watch`'s default address.
    pub const CARGO_LAMBDA_WATCH: &'static str = "http://127.0.0.1:9000";

    /// An invoker for the Invoke API at `endpoint` (`http://host:port`, no trailing path).
    pub fn new(endpoint: impl Into<String>) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        connector.set_nodelay(true);
        Self {
            endpoint: endpoint.into().trim_end_matches('/').to_owned(),
            client: Client::builder(TokioExecutor::new()).build(connector),
        }
    }

    /// An invoker for `cargo lambda watch` on its default address.
    pub fn cargo_lambda_watch() -> Self {
        Self::new(Self::CARGO_LAMBDA_WATCH)
    }

    /// The invocation URL of `function_name`.
    pub fn url(&self, function_name: &str) -> String {
        format!(
            "{}/2015-03-31/functions/{function_name}/invocations",
            self.endpoint
        )
    }
}

impl Invoker for HttpInvoker {
    fn invoke(&self, invocation: Invocation) -> InvokeFuture<'_> {
        Box::pin(async move {
            let body = serde_json::to_vec(&invocation.payload)
                .map_err(|e| InvokeError::Event(e.to_string()))?;
            let name = invocation
                .binary
                .as_deref()
                .unwrap_or(&invocation.function_name);
            let request = http::Request::post(self.url(name))
                .header(http::header::CONTENT_TYPE, "application/json")
                .header("lambda-runtime-aws-request-id", &invocation.request_id)
                .body(Full::new(Bytes::from(body)))
                .map_err(|e| InvokeError::Transport(e.to_string()))?;
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| InvokeError::Transport(format!("{}: {e:?}", self.endpoint)))?;
            let status = response.status();
            let function_error = response
                .headers()
                .get("x-amz-function-error")
                .map(|v| v.to_str().unwrap_or("Unhandled").to_owned());
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| InvokeError::Transport(e.to_string()))?
                .to_bytes();
            if !status.is_success() || function_error.is_some() {
                return Err(InvokeError::Function(format!(
                    "HTTP {status}{}: {}",
                    function_error
                        .map(|e| format!(" ({e})"))
                        .unwrap_or_default(),
                    String::from_utf8_lossy(&body)
                )));
            }
            Ok(body)
        })
    }
}
