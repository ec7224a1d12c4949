//! Counting requests per operation, for tests and benchmarks: an SDK interceptor, and a counter
//! the Redis backend adds its round trips to.
//!
//! One [`RequestCounter`] serves any number of AWS SDK clients (every SDK client takes the same
//! interceptor trait, `aws_smithy_runtime_api`'s `Intercept`; this crate names it through
//! [`aws_sdk_sqs`], so counting needs no DynamoDB). Every request sent is counted, retries
//! included, by the operation named in its `X-Amz-Target` header (`UpdateItem`,
//! `SendMessageBatch`, ...). The Redis backend
//! (`RedisBackend::with_counter`, feature `redis`) counts each round trip by its script or
//! command (`acquire`, `complete`, `HGETALL`, ...) with [`RequestCounter::add`].
//!
//! ```
//! use lambda_idempotency::count::RequestCounter;
//!
//! # async fn example() {
//! let counter = RequestCounter::default();
//! let sdk = aws_config::load_from_env().await;
//! let config = aws_sdk_sqs::config::Builder::from(&sdk).interceptor(counter.clone()).build();
//! let client = aws_sdk_sqs::Client::from_conf(config);
//! // ... use the client, and others built with the same counter ...
//! println!("{} SendMessageBatch calls", counter.count("SendMessageBatch"));
//! # }
//! ```
//!
//! Where several invocations share the process (Lambda Managed Instances), the counter the
//! clients share counts them all; [`RequestCounter::scope`] counts one invocation's alone.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use aws_sdk_sqs::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_sqs::config::{ConfigBag, Intercept, RuntimeComponents};

/// Counts requests by operation. Clones share their counts.
#[derive(Debug, Clone, Default)]
pub struct RequestCounter {
    counts: Arc<Mutex<BTreeMap<String, u64>>>,
}

tokio::task_local! {
    /// The counter of the work this task runs ([`RequestCounter::scope`]).
    static SCOPE: RequestCounter;
}

impl RequestCounter {
    /// Requests sent for `operation` so far.
    pub fn count(&self, operation: &str) -> u64 {
        self.lock().get(operation).copied().unwrap_or(0)
    }

    /// Every request sent so far.
    pub fn total(&self) -> u64 {
        self.lock().values().sum()
    }

    /// The counts by operation.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.lock().clone()
    }

    /// Counts one request for `operation`, here and in the [`scope`](Self::scope) it is sent
    /// within, if any.
    pub fn add(&self, operation: &str) {
        self.add_here(operation);
        let _outside_any_scope = SCOPE.try_with(|scope| {
            if !Arc::ptr_eq(&scope.counts, &self.counts) {
                scope.add_here(operation);
            }
        });
    }

    /// Runs `work` (an invocation, say) with this counter as its own: every request sent within
    /// it, counted by any counter (the clients' shared one, the Redis backend's), is counted
    /// here too, and none sent by other work running at the same time in the process. A task
    /// `work` spawns is outside it.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use lambda_idempotency::count::RequestCounter;
    ///
    /// let clients = RequestCounter::default(); // the one the SDK clients were built with
    /// let (a, b) = (RequestCounter::default(), RequestCounter::default());
    /// let invocation = |n| {
    ///     let clients = clients.clone();
    ///     async move { (0..n).for_each(|_| clients.add("UpdateItem")) }
    /// };
    /// futures_util::join!(a.scope(invocation(2)), b.scope(invocation(3)));
    /// assert_eq!((a.count("UpdateItem"), b.count("UpdateItem")), (2, 3));
    /// assert_eq!(clients.count("UpdateItem"), 5);
    /// # });
    /// ```
    pub async fn scope<F: Future>(&self, work: F) -> F::Output {
        SCOPE.scope(self.clone(), work).await
    }

    fn add_here(&self, operation: &str) {
        *self.lock().entry(operation.to_owned()).or_default() += 1;
    }

    /// Sets every count to zero.
    pub fn reset(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, u64>> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        "RequestCounter"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), aws_sdk_sqs::error::BoxError> {
        let operation = context
            .request()
            .headers()
            .get("x-amz-target")
            .and_then(|target| target.rsplit('.').next())
            .unwrap_or("unknown");
        self.add(operation);
        Ok(())
    }
}
