//! Lambda's runtime loop, on the default Lambda and on Lambda Managed Instances alike: [`run`].
//!
//! On Lambda Managed Instances one process serves several invocations at once: Lambda sets
//! `AWS_LAMBDA_MAX_CONCURRENCY`, and the runtime polls for that many invocations at a time,
//! each in its own tokio task (`lambda_runtime::run_concurrent`). Without it (or at 1), the
//! same loop serves one invocation after another, as `lambda_runtime::run` does. [`run`] is
//! that loop, and [`Consumer::run`](crate::consumer::Consumer::run) runs on it.
//!
//! What an invocation owns stays its own when invocations share the process:
//!
//! - its deadline, request id and batch are in its `LambdaEvent`, and every lease, record and
//!   dead letter is made from them (each attempt's owner token is new and random);
//! - its X-Ray trace id: Lambda's runtime sets the process-wide `_X_AMZN_TRACE_ID` only when it
//!   serves one invocation at a time, so [`run`] (and [`Consumer::handle`]) keep it for the
//!   invocation's own task: [`trace_id`] reads it, and [`TraceHeader`] puts it on the AWS SDK's
//!   requests (the clients [`Consumer::from_env`] makes carry it);
//! - its requests: a [`RequestCounter::scope`](crate::count::RequestCounter::scope) counts
//!   those of one invocation alone;
//! - its metrics: each EMF line is made from its own batch's report and printed whole.
//!
//! What they share is shared on purpose: the clients, the cold-start checks, and the
//! [warm-container cache](crate::cache), whose entries are completed records, each under its own
//! stored key and answered only for its payload.
//!
//! [`Consumer::handle`]: crate::consumer::Consumer::handle
//! [`Consumer::from_env`]: crate::consumer::Consumer::from_env

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;

use aws_sdk_sqs::config::interceptors::BeforeTransmitInterceptorContextMut;
use aws_sdk_sqs::config::{ConfigBag, Intercept, RuntimeComponents};
use lambda_runtime::{Diagnostic, LambdaEvent};
use serde::Serialize;
use serde::de::DeserializeOwned;

tokio::task_local! {
    static TRACE_ID: Option<String>;
}

/// Serves Lambda's invocations with `handler`, given `state` (the function's clients and
/// settings, made once at init) and each invocation's event: several at once on Lambda Managed
/// Instances (`AWS_LAMBDA_MAX_CONCURRENCY` above 1), one after another otherwise. Returns only
/// when the runtime stops, with its error.
///
/// `state` lives as long as the process (it is never dropped), so that the handler's future
/// borrows it as a plain reference however many invocations hold it at once. Each invocation
/// runs with its own X-Ray trace id ([`trace_id`]).
///
/// ```no_run
/// use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
/// use lambda_runtime::{Error, LambdaEvent};
///
/// struct App { table: String }
///
/// impl App {
///     async fn handle(&self, _event: LambdaEvent<SqsEvent>) -> Result<SqsBatchResponse, Error> {
///         Ok(SqsBatchResponse::default())
///     }
/// }
///
/// #[tokio::main]
/// async fn main() -> Result<(), Error> {
///     let app = App { table: std::env::var("TABLE")? };
///     lambda_idempotency::runtime::run(app, |app, event| app.handle(event)).await
/// }
/// ```
pub async fn run<T, A, R, Err, F, Fut>(state: T, handler: F) -> Result<(), lambda_runtime::Error>
where
    T: Send + Sync + 'static,
    A: DeserializeOwned + Send + 'static,
    R: Serialize + Send + 'static,
    Err: Into<Diagnostic> + Debug + Send + 'static,
    F: Fn(&'static T, LambdaEvent<A>) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<R, Err>> + Send + 'static,
{
    // Never dropped: the runtime's loop is the rest of the process.
    let state: &'static T = Box::leak(Box::new(state));
    lambda_runtime::run_concurrent(lambda_runtime::service_fn(move |event: LambdaEvent<A>| {
        let trace = event.context.xray_trace_id.clone();
        // Boxed: the runtime's own types stay shallow however deep the handler's future is.
        let invocation: Pin<Box<dyn Future<Output = Result<R, Err>> + Send>> =
            Box::pin(with_trace_id(trace, handler(state, event)));
        invocation
    }))
    .await
}

/// Runs `work` as an invocation whose X-Ray trace id is `trace_id`: what [`trace_id`] reads
/// and [`TraceHeader`] sends within it. [`run`] and
/// [`Consumer::handle`](crate::consumer::Consumer::handle) do it for each invocation; a task
/// the handler spawns starts without one (wrap its future again to keep it).
pub async fn with_trace_id<F: Future>(trace_id: Option<String>, work: F) -> F::Output {
    TRACE_ID.scope(trace_id, work).await
}

/// The X-Ray trace id of the invocation this task serves (its context's `xray_trace_id`), if
/// it has one: the invocation's own, however many run in the process. Not the process's
/// `_X_AMZN_TRACE_ID`, which Lambda's runtime does not set when it serves several invocations
/// at once.
pub fn trace_id() -> Option<String> {
    TRACE_ID.try_with(Clone::clone).ok().flatten()
}

/// An AWS SDK interceptor that sends the current invocation's X-Ray trace id ([`trace_id`]) as
/// the `X-Amzn-Trace-Id` header, as the SDK itself does from `_X_AMZN_TRACE_ID` when Lambda
/// serves one invocation at a time: with several at once, each request stays in the trace of
/// the invocation that sent it. A request sent outside an invocation is left as it is.
///
/// Every AWS SDK client takes it (the interceptor trait is the same for all):
///
/// ```
/// # async fn example() {
/// use lambda_idempotency::runtime::TraceHeader;
///
/// let sdk = aws_config::load_from_env().await;
/// let config = aws_sdk_sqs::config::Builder::from(&sdk).interceptor(TraceHeader).build();
/// let sqs = aws_sdk_sqs::Client::from_conf(config);
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct TraceHeader;

/// The header the SDK (and X-Ray) carry the trace in.
const TRACE_HEADER: &str = "x-amzn-trace-id";

impl Intercept for TraceHeader {
    fn name(&self) -> &'static str {
        "TraceHeader"
    }

    fn modify_before_signing(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), aws_sdk_sqs::error::BoxError> {
        if let Some(trace) = trace_id() {
            // An id that cannot be a header's value (a control character) is not sent: the
            // request goes on without it.
            let _ = context
                .request_mut()
                .headers_mut()
                .try_insert(TRACE_HEADER, trace);
        }
        Ok(())
    }
}
