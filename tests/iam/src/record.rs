//! Recording AWS requests as [`Call`]s: an SDK interceptor over the AWS JSON protocol.
//!
//! DynamoDB, DynamoDB Streams and SQS all speak the AWS JSON protocol: the operation is in the
//! `X-Amz-Target` header (`DynamoDB_20120810.UpdateItem`, `DynamoDBStreams_20120810.GetRecords`,
//! `AmazonSQS.SendMessageBatch`) and the parameters in the JSON body.
//! [`parse_call`](crate::parse_call) reads the resources out of the body; [`CallRecorder`]
//! does it for every request a client serializes.

use std::sync::{Arc, Mutex, MutexGuard};

use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};

use crate::call::{Call, RecorderConfig};
use crate::parse::{RecordError, parse_call};

/// Records every DynamoDB, DynamoDB Streams and SQS request of the clients it is attached to,
/// as a [`Call`] per operation call (retries are not recorded again: IAM authorizes each
/// attempt the same way). Clones share the log; recording is a JSON parse under a mutex.
///
/// Attach it to each client of one function (and to the event source mapping's clients acting
/// for that function): one recorder per function, since a report is per function.
///
/// ```
/// use iam_conformance::{CallRecorder, RecorderConfig};
///
/// # async fn f() {
/// let recorder = CallRecorder::new(RecorderConfig::new("us-east-1", "123456789012"));
/// let sdk = aws_config::load_from_env().await;
/// let dynamodb = aws_sdk_dynamodb::Client::from_conf(
///     aws_sdk_dynamodb::config::Builder::from(&sdk).interceptor(recorder.clone()).build(),
/// );
/// let sqs = recorder.sqs_client(&sdk); // the same, for SQS
/// // ... run the function, then:
/// let calls = recorder.take();
/// assert!(recorder.problems().is_empty());
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct CallRecorder {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: RecorderConfig,
    log: Mutex<Log>,
}

#[derive(Debug, Default)]
struct Log {
    calls: Vec<Call>,
    problems: Vec<RecordError>,
}

impl CallRecorder {
    /// A recorder with an empty log.
    pub fn new(config: RecorderConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                config,
                log: Mutex::default(),
            }),
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &RecorderConfig {
        &self.inner.config
    }

    /// Records one request from its `X-Amz-Target` and its body (what the interceptor does;
    /// public for other hooks, e.g. an HTTP client wrapper, and for tests). A request that
    /// cannot be parsed is kept in [`problems`](Self::problems).
    pub fn record(&self, target: Option<&str>, body: Option<&[u8]>) {
        let recorded = match (target, body) {
            (None, _) => Err(RecordError::NoTarget),
            (Some(t), None) => Err(RecordError::NoBody(t.to_owned())),
            (Some(t), Some(b)) => parse_call(t, b, &self.inner.config),
        };
        let mut log = self.lock();
        match recorded {
            Ok(call) => log.calls.push(call),
            Err(e) => log.problems.push(e),
        }
    }

    /// The calls so far, oldest first.
    pub fn snapshot(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// The calls so far, oldest first, leaving the log empty (problems stay).
    pub fn take(&self) -> Vec<Call> {
        std::mem::take(&mut self.lock().calls)
    }

    /// The requests that could not be recorded.
    pub fn problems(&self) -> Vec<RecordError> {
        self.lock().problems.clone()
    }

    /// A DynamoDB client for `sdk` with this recorder attached.
    pub fn dynamodb_client(&self, sdk: &aws_config::SdkConfig) -> aws_sdk_dynamodb::Client {
        aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(sdk)
                .interceptor(self.clone())
                .build(),
        )
    }

    /// An SQS client for `sdk` with this recorder attached.
    pub fn sqs_client(&self, sdk: &aws_config::SdkConfig) -> aws_sdk_sqs::Client {
        aws_sdk_sqs::Client::from_conf(
            aws_sdk_sqs::config::Builder::from(sdk)
                .interceptor(self.clone())
                .build(),
        )
    }

    fn lock(&self) -> MutexGuard<'_, Log> {
        self.inner.log.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Intercept for CallRecorder {
    fn name(&self) -> &'static str {
        "CallRecorder"
    }

    // After serialization, before the retry loop: once per operation call.
    fn read_after_serialization(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        let request = context.request();
        self.record(
            request.headers().get("x-amz-target"),
            request.body().bytes(),
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> RecorderConfig {
        RecorderConfig::new("us-east-1", "123456789012")
            .hash_key("ledger", "entryId")
            .hash_key("idem", "id")
    }

    #[test]
    fn queue_urls() {
        let c = config();
        assert_eq!(
            c.queue_arn_from_url("https://sqs.eu-west-1.amazonaws.com/111122223333/q.fifo")
                .as_deref(),
            Some("arn:aws:sqs:eu-west-1:111122223333:q.fifo")
        );
        assert_eq!(c.queue_arn_from_url("http://localhost:4566/"), None);
        assert_eq!(c.queue_arn_from_url("queue"), None);
    }

    #[test]
    fn bad_requests_are_problems() {
        let r = CallRecorder::new(config());
        r.record(None, Some(b"{}"));
        r.record(Some("AmazonSQS.SendMessage"), Some(b"[1]"));
        r.record(Some("Foo.Bar"), Some(b"{}"));
        assert_eq!(r.snapshot(), []);
        assert_eq!(r.problems().len(), 3);
    }
}
