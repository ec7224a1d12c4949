//! What the function did beyond its records' outcomes: `PaymentCharged` events sent again, and
//! payments marked failed ahead of their message. The app's tally counts them for the process;
//! one [scoped](Tally::scope) around an invocation counts its own alone, which stays true when
//! several invocations run at once in one process (Lambda Managed Instances), as the library's
//! `RequestCounter::scope` and `HitCounter::scope` do for requests and cache hits.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// What is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A `PaymentCharged` event sent again for a duplicate of a charged payment.
    ReceiptResent,
    /// A payment marked `failed` while charged ahead of its message.
    FailedAhead,
}

/// Counts of each [`Event`]. Clones share their counts.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    counts: Arc<[AtomicU64; 2]>,
}

tokio::task_local! {
    /// The tally of the work this task runs ([`Tally::scope`]).
    static SCOPE: Tally;
}

impl Tally {
    /// How many times `event` was counted.
    pub fn get(&self, event: Event) -> u64 {
        self.counter(event).load(Ordering::Relaxed)
    }

    /// Counts `event` here and in the [`scope`](Self::scope) it happens within, if any.
    pub(crate) fn count(&self, event: Event) {
        self.counter(event).fetch_add(1, Ordering::Relaxed);
        let _outside_any_scope = SCOPE.try_with(|scope| {
            if !Arc::ptr_eq(&scope.counts, &self.counts) {
                scope.counter(event).fetch_add(1, Ordering::Relaxed);
            }
        });
    }

    /// Runs `work` (one invocation) with this tally as its own: every event counted within it
    /// is counted here too, and none that other work running at the same time counted.
    pub async fn scope<F: Future>(&self, work: F) -> F::Output {
        SCOPE.scope(self.clone(), work).await
    }

    fn counter(&self, event: Event) -> &AtomicU64 {
        &self.counts[event as usize]
    }
}
