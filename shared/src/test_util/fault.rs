//! A fault injector for one service's requests, to explore a consumer under every fault at every
//! request: an SDK interceptor ([`Faults`] is an [`Intercept`], for the DynamoDB and the SQS
//! clients alike) and, with the `redis` feature, a Redis connection wrapper (`FaultyConnection`,
//! any `ConnectionLike` under the Redis backend).
//!
//! Armed with a [`Fault`] at request `n` (counted from the arming, every request of the client,
//! each try of an SDK retry included), it does one of:
//! - [`Fault::Fail`]: fails the request before it is sent; the service never sees it.
//! - [`Fault::LoseAnswer`]: sends it, the service applies it, and the caller gets an error instead
//!   of the answer (an error the SDK does not retry: a connection cut after the send).
//! - [`Fault::Crash`]: sends it, the service applies it, then the invocation ends as a crash
//!   would: the [`Crash`] signal is raised, the caller never sees the answer, and every later
//!   request of every client sharing the signal fails before it is sent, so that nothing the
//!   dead process would never have done reaches a service before the harness drops its future
//!   ([`drain`](super::sim_queue::drain) does).
//! - [`Fault::Outage`]: request `n` and every later one fails before it is sent until the
//!   clock given to [`Faults::new`] passes the outage's end.
//!
//! Give the client the injector, and turn the SDK's own retries off so that each fault reaches
//! the code under test (as when the SDK's retries are used up), and request `n` is the same
//! request in every run:
//!
//! ```
//! use lambda_idempotency::test_util::fault::{Crash, Fault, Faults};
//! use lambda_idempotency::time::ManualClock;
//! use std::sync::Arc;
//!
//! let clock = Arc::new(ManualClock::starting_now());
//! let faults = Faults::new("sqs", Arc::new(Crash::default()), clock);
//! let config = aws_sdk_sqs::Config::builder()
//!     .behavior_version_latest()
//!     .interceptor(faults.clone())
//!     .retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled())
//!     .build();
//! let sqs = aws_sdk_sqs::Client::from_conf(config);
//! // The third request of the client from now fails before it is sent.
//! faults.arm(3, Fault::Fail);
//! # let _ = sqs;
//! ```
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sqs::config::interceptors::{
    BeforeDeserializationInterceptorContextMut, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_sqs::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_sqs::error::BoxError;

use crate::time::Clock;

/// What happens at the armed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// Fails before it is sent.
    Fail,
    /// Applied by the service, its answer lost.
    LoseAnswer,
    /// Applied by the service, then the invocation crashes.
    Crash,
    /// The service is down for this long from this request on.
    Outage(Duration),
}

impl Fault {
    /// A short name: `fail`, `lose-answer`, `crash`, `outage-600s`.
    pub fn label(self) -> String {
        match self {
            Fault::Fail => "fail".into(),
            Fault::LoseAnswer => "lose-answer".into(),
            Fault::Crash => "crash".into(),
            Fault::Outage(d) => format!("outage-{}s", d.as_secs()),
        }
    }
}

/// The crash of the invocation: raised by a [`Fault::Crash`], seen by the harness (which drops
/// the invocation's future) and by the test's handler (a crashed process runs nothing more).
#[derive(Debug, Default)]
pub struct Crash {
    raised: AtomicBool,
    notify: tokio::sync::Notify,
}

impl Crash {
    /// Raises the crash: what the process was doing stops.
    pub fn raise(&self) {
        self.raised.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// True once the crash is raised (until [`reset`](Self::reset)).
    pub fn is_raised(&self) -> bool {
        self.raised.load(Ordering::SeqCst)
    }

    /// Resolves once the crash is raised.
    pub async fn raised(&self) {
        loop {
            let notified = self.notify.notified();
            if self.is_raised() {
                return;
            }
            notified.await;
        }
    }

    /// A new process: the next invocation runs.
    pub fn reset(&self) {
        self.raised.store(false, Ordering::SeqCst);
    }
}

#[derive(Debug, Default)]
struct State {
    armed: Option<(u32, Fault)>,
    /// Requests since the arming.
    sent: u32,
    /// Operations sent since the arming, in order.
    log: Vec<String>,
    /// The end of the outage, epoch ms on the test's clock.
    outage_until: Option<i64>,
    /// What to do with the answer of the request in flight: lose it, or crash after it. The
    /// interceptor's hooks see no request once it is sent, so the armed request is told from
    /// others by order: the client's requests must be sequential (as the exploration runs them,
    /// one record at a time) for the fault to hit request `n` and no other in flight.
    after: Option<Fault>,
    fired: bool,
}

/// The fault injector of one service; clones share their state.
#[derive(Clone)]
pub struct Faults {
    service: &'static str,
    state: Arc<Mutex<State>>,
    crash: Arc<Crash>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults")
            .field("service", &self.service)
            .field("state", &self.state)
            .finish()
    }
}

/// What to do with a request about to be sent.
enum Before {
    Send,
    /// Send, then do this with its answer.
    SendThen(Fault),
    Refuse(String),
}

impl Faults {
    /// The injector of `service` (the name its errors give), raising `crash` on a
    /// [`Fault::Crash`], its outages timed on `clock`. Nothing is armed.
    pub fn new(service: &'static str, crash: Arc<Crash>, clock: Arc<dyn Clock>) -> Self {
        Self {
            service,
            state: Arc::default(),
            crash,
            clock,
        }
    }

    /// Arms `fault` at the `n`-th request from now (1 is the next), and counts from zero.
    ///
    /// The client's requests must go one at a time (a batch processor with `concurrency(1)`):
    /// the answer a [`Fault::LoseAnswer`] or [`Fault::Crash`] takes is the next one to arrive
    /// after request `n` was sent, and only one at a time makes request `n` the same request in
    /// every run.
    pub fn arm(&self, n: u32, fault: Fault) {
        let mut state = self.state.lock().unwrap();
        *state = State {
            armed: Some((n, fault)),
            ..State::default()
        };
    }

    /// Counts requests from zero with nothing armed.
    pub fn disarm(&self) {
        *self.state.lock().unwrap() = State::default();
    }

    /// Requests sent (or refused) since the arming.
    pub fn sent(&self) -> u32 {
        self.state.lock().unwrap().sent
    }

    /// The operations since the arming, in order.
    pub fn log(&self) -> Vec<String> {
        self.state.lock().unwrap().log.clone()
    }

    /// [`log`](Self::log) in short: each run of one operation as `name xcount`.
    pub fn runs(&self) -> String {
        let mut out: Vec<(String, usize)> = Vec::new();
        for op in self.log() {
            match out.last_mut() {
                Some((last, n)) if *last == op => *n += 1,
                _ => out.push((op, 1)),
            }
        }
        out.iter()
            .map(|(op, n)| match n {
                1 => op.clone(),
                n => format!("{op} x{n}"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// True once the armed fault happened.
    pub fn fired(&self) -> bool {
        self.state.lock().unwrap().fired
    }

    /// True while an outage lasts.
    pub fn in_outage(&self) -> bool {
        let until = self.state.lock().unwrap().outage_until;
        until.is_some_and(|until| self.clock.now_ms() < until)
    }

    fn before(&self, operation: &str) -> Before {
        if self.crash.is_raised() {
            return Before::Refuse(format!("{}: the process crashed", self.service));
        }
        let now = self.clock.now_ms();
        let mut state = self.state.lock().unwrap();
        state.sent += 1;
        state.log.push(operation.to_owned());
        if let Some(until) = state.outage_until
            && now < until
        {
            return Before::Refuse(format!("{}: injected outage", self.service));
        }
        match state.armed {
            Some((n, fault)) if n == state.sent => {
                state.fired = true;
                match fault {
                    Fault::Fail => Before::Refuse(format!(
                        "{}: injected failure of request {n} before it was sent",
                        self.service
                    )),
                    Fault::Outage(length) => {
                        state.outage_until = Some(now + length.as_millis() as i64);
                        Before::Refuse(format!("{}: injected outage", self.service))
                    }
                    after => Before::SendThen(after),
                }
            }
            _ => Before::Send,
        }
    }

    /// A request of the in-memory backend ([`InMemoryBackend::with_faults`](crate::store::InMemoryBackend::with_faults)),
    /// about to be answered: why it fails, if it does. The in-memory backend serves the faults
    /// that refuse a request before it is applied ([`Fault::Fail`], [`Fault::Outage`], and every
    /// request after a raised [`Crash`]); a lost answer or a crash after an applied request is
    /// the SDK clients' (this injector as their interceptor), and armed on the in-memory
    /// backend it panics, naming the fault.
    pub(crate) fn refuses(&self, operation: &str) -> Option<String> {
        match self.before(operation) {
            Before::Send => None,
            Before::Refuse(why) => Some(why),
            Before::SendThen(fault) => panic!(
                "{}: Fault::{fault:?} (request {operation}) is not served by the in-memory \
                 backend, which applies a request or refuses it; arm it on an SDK client's \
                 Faults interceptor",
                self.service
            ),
        }
    }

    /// A request served in memory (the dead-letter sends and visibility changes of
    /// [`InMemorySqs::with_faults`](crate::test_util::InMemorySqs::with_faults)): `apply` runs
    /// unless the request is refused before it is sent ([`Fault::Fail`], [`Fault::Outage`], a
    /// raised [`Crash`]); after it, a [`Fault::LoseAnswer`] or a [`Fault::Crash`] (the crash
    /// raised) turns the answer into an error, as on an SDK client.
    pub(crate) fn serve(&self, operation: &str, apply: impl FnOnce()) -> Result<(), String> {
        match self.before(operation) {
            Before::Refuse(why) => Err(why),
            Before::Send => {
                apply();
                Ok(())
            }
            Before::SendThen(fault) => {
                apply();
                Err(self.after(fault))
            }
        }
    }

    /// What to do with the answer of a request sent with `then`: an error, and for a crash the
    /// crash raised.
    fn after(&self, then: Fault) -> String {
        if then == Fault::Crash {
            self.crash.raise();
            format!("{}: the process crashed after the request", self.service)
        } else {
            format!("{}: injected loss of the answer", self.service)
        }
    }
}

/// The SDK operation of a request, from its `x-amz-target` header (DynamoDB, SQS): its last part.
fn operation(target: Option<&str>) -> String {
    target
        .and_then(|target| target.rsplit('.').next())
        .unwrap_or("?")
        .to_owned()
}

impl Intercept for Faults {
    fn name(&self) -> &'static str {
        "Faults"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let target = context.request().headers().get("x-amz-target");
        match self.before(&operation(target)) {
            Before::Send => Ok(()),
            Before::Refuse(why) => Err(why.into()),
            Before::SendThen(fault) => {
                self.state.lock().unwrap().after = Some(fault);
                Ok(())
            }
        }
    }

    fn modify_before_deserialization(
        &self,
        _: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let then = self.state.lock().unwrap().after.take();
        match then {
            Some(fault) => Err(self.after(fault).into()),
            None => Ok(()),
        }
    }
}

/// A Redis connection whose requests go through [`Faults`] (each command or pipeline one
/// request, named by its first word).
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
#[derive(Clone)]
pub struct FaultyConnection<C> {
    /// The connection the requests go to.
    pub inner: C,
    /// The injector they go through.
    pub faults: Faults,
}

#[cfg(feature = "redis")]
fn redis_error(why: String) -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Io, "injected fault", why))
}

#[cfg(feature = "redis")]
fn command_name(packed: &[u8]) -> String {
    // RESP: *<n>\r\n$<len>\r\n<NAME>\r\n...
    String::from_utf8_lossy(packed)
        .split("\r\n")
        .nth(2)
        .unwrap_or("?")
        .to_ascii_uppercase()
}

#[cfg(feature = "redis")]
impl<C: redis::aio::ConnectionLike + Send> redis::aio::ConnectionLike for FaultyConnection<C> {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        Box::pin(async move {
            let then = match self.faults.before(&command_name(&cmd.get_packed_command())) {
                Before::Send => None,
                Before::Refuse(why) => return Err(redis_error(why)),
                Before::SendThen(fault) => Some(fault),
            };
            let answer = self.inner.req_packed_command(cmd).await;
            match then {
                Some(fault) => Err(redis_error(self.faults.after(fault))),
                None => answer,
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        Box::pin(async move {
            let then = match self.faults.before("PIPELINE") {
                Before::Send => None,
                Before::Refuse(why) => return Err(redis_error(why)),
                Before::SendThen(fault) => Some(fault),
            };
            let answer = self
                .inner
                .req_packed_commands(pipeline, offset, count)
                .await;
            match then {
                Some(fault) => Err(redis_error(self.faults.after(fault))),
                None => answer,
            }
        })
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

impl crate::dead_letter::in_memory_sqs::InMemorySqs {
    /// This SQS, its requests going through `faults`: each dead-letter copy one `SendMessage`,
    /// each call of up to 10 visibility changes one `ChangeMessageVisibilityBatch`. A request
    /// refused before it is sent ([`Fault::Fail`](crate::test_util::fault::Fault::Fail),
    /// [`Fault::Outage`](crate::test_util::fault::Fault::Outage), after a crash) records
    /// nothing; a [`Fault::LoseAnswer`](crate::test_util::fault::Fault::LoseAnswer) or a
    /// [`Fault::Crash`](crate::test_util::fault::Fault::Crash) records it, then fails it. The
    /// failure reaches the consumer as an SQS error would once the SDK's retries are used up.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use lambda_idempotency::dead_letter::DeadLetter;
    /// use lambda_idempotency::test_util::fault::{Crash, Fault, Faults};
    /// use lambda_idempotency::test_util::{InMemorySqs, sqs_event};
    /// use lambda_idempotency::time::SystemClock;
    /// use std::sync::Arc;
    ///
    /// let faults = Faults::new("sqs", Arc::new(Crash::default()), Arc::new(SystemClock));
    /// let sqs = InMemorySqs::new().with_faults(faults.clone());
    /// let dead_letter = DeadLetter::in_memory(&sqs, "https://sqs.us-east-1.amazonaws.com/123456789012/dlq");
    /// let event = sqs_event([("m-1", "not json")]);
    /// faults.arm(1, Fault::LoseAnswer);
    /// assert!(dead_letter.send(&event.payload.records[0], "bad body").await.is_err());
    /// assert_eq!(sqs.dead_letters().len(), 1, "sent, its answer lost");
    /// assert_eq!(faults.log(), ["SendMessage"]);
    /// # });
    /// ```
    pub fn with_faults(mut self, faults: Faults) -> Self {
        self.serve = Some(crate::dead_letter::in_memory_sqs::Serve(Arc::new(
            move |operation, apply| faults.serve(operation, apply),
        )));
        self
    }
}

impl crate::store::InMemoryBackend {
    /// The backend, its requests failing as `faults` says: a test of a throttled write or an
    /// outage of the store, on the vocabulary of the SDK clients' fault injector. A request
    /// meets [`Fault::Fail`](crate::test_util::fault::Fault::Fail) (the `n`-th request from the
    /// arming, refused: DynamoDB throttled it) and [`Fault::Outage`](crate::test_util::fault::Fault::Outage)
    /// (every request refused until the faults' clock passes its end) before it is applied,
    /// and fails with [`StoreError::Request`](crate::store::StoreError::Request) naming the operation; nothing is applied, and it
    /// is not counted in [`requests`](crate::store::InMemoryBackend::requests). Every request of
    /// [`Backend`](crate::store::Backend) and [`TransactionalBackend`](crate::store::TransactionalBackend) counts towards `n`.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use lambda_idempotency::Idempotency;
    /// use lambda_idempotency::store::{InMemoryBackend, StoreError};
    /// use lambda_idempotency::test_util::fault::{Crash, Fault, Faults};
    /// use lambda_idempotency::time::SystemClock;
    /// use std::sync::Arc;
    ///
    /// let faults = Faults::new("dynamodb", Arc::new(Crash::default()), Arc::new(SystemClock));
    /// let engine = Idempotency::new(InMemoryBackend::default().with_faults(faults.clone()));
    /// faults.arm(1, Fault::Fail); // the next request is throttled
    /// let refused = engine.acquire("k", b"body", None).await.unwrap_err();
    /// assert!(refused.to_string().contains("UpdateItem"), "{refused}");
    /// assert!(engine.acquire("k", b"body", None).await.is_ok(), "the next one goes through");
    /// # });
    /// ```
    pub fn with_faults(mut self, faults: Faults) -> Self {
        self.refuse = Some(crate::store::memory::Refuse(std::sync::Arc::new(
            move |operation| faults.refuses(operation),
        )));
        self
    }
}
