//! What API Gateway and Lambda refuse under load: a route's throttling (a token bucket per
//! route key, answered `429`) and a function's reserved concurrency (Lambda's
//! `TooManyRequestsException`, which API Gateway answers `500`).
//!
//! The bucket is written here rather than taken from a rate-limiting crate (`governor`): it is
//! the twenty lines of API Gateway's documented algorithm, with the time passed in so that its
//! test needs no clock, and it adds no dependency tree to the harness.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::GatewayOptions;
use crate::template::Throttling;

/// API Gateway's token bucket: starts full with `burst_limit` tokens, refilled at `rate_limit`
/// a second up to `burst_limit`; a request takes one token, or is throttled.
#[derive(Debug)]
pub(crate) struct TokenBucket {
    throttling: Throttling,
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    pub(crate) fn new(throttling: Throttling, now: Instant) -> Self {
        Self {
            throttling,
            tokens: throttling.burst_limit.into(),
            at: now,
        }
    }

    /// Takes a token at `now`; `false`: none left (429).
    pub(crate) fn try_take(&mut self, now: Instant) -> bool {
        let capacity = f64::from(self.throttling.burst_limit);
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.throttling.rate_limit).min(capacity);
        self.at = self.at.max(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The limits of one gateway: a bucket per throttled route key, a semaphore per function with
/// a reserved concurrency.
#[derive(Debug, Default)]
pub(crate) struct Throttles {
    buckets: Mutex<HashMap<String, TokenBucket>>,
    functions: HashMap<String, Arc<Semaphore>>,
}

impl Throttles {
    pub(crate) fn new(options: &GatewayOptions) -> Self {
        let functions = std::iter::once(options)
            .chain(&options.integrations)
            .filter_map(|o| {
                let n = o.reserved_concurrency?;
                Some((
                    o.function_name.clone(),
                    Arc::new(Semaphore::new(n as usize)),
                ))
            })
            .collect();
        Self {
            buckets: Mutex::new(HashMap::new()),
            functions,
        }
    }

    /// Whether the route `route_key` with `throttling` lets a request through now.
    pub(crate) fn admit(&self, route_key: &str, throttling: Option<Throttling>) -> bool {
        let Some(throttling) = throttling else {
            return true;
        };
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        buckets
            .entry(route_key.to_owned())
            .or_insert_with(|| TokenBucket::new(throttling, now))
            .try_take(now)
    }

    /// A unit of `function`'s reserved concurrency, held for as long as the invocation runs:
    /// `Ok(None)` when it has none (unlimited), `Err(())` when all are taken (Lambda throttles).
    pub(crate) fn invocation(&self, function: &str) -> Result<Option<OwnedSemaphorePermit>, ()> {
        match self.functions.get(function) {
            None => Ok(None),
            Some(units) => Arc::clone(units)
                .try_acquire_owned()
                .map(Some)
                .map_err(|_| ()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_burst_then_the_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(
            Throttling {
                rate_limit: 50.0,
                burst_limit: 100,
            },
            start,
        );
        let served = (0..200).filter(|_| bucket.try_take(start)).count();
        assert_eq!(served, 100, "the burst, at once");
        // 100 ms later: 5 tokens back.
        let later = start + Duration::from_millis(100);
        assert_eq!((0..200).filter(|_| bucket.try_take(later)).count(), 5);
        // Never more than the burst, however long it rested.
        let rested = later + Duration::from_secs(60);
        assert_eq!((0..200).filter(|_| bucket.try_take(rested)).count(), 100);
        // A rate of 0: the burst only.
        let mut none = TokenBucket::new(
            Throttling {
                rate_limit: 0.0,
                burst_limit: 1,
            },
            start,
        );
        assert!(none.try_take(start));
        assert!(!none.try_take(start + Duration::from_secs(3600)));
    }
}
