//! What the function did beyond its records' outcomes: `PaymentCharged` events sent again, and
//! payments marked failed ahead of their message. Each is counted for the process and for the
//! invocation it happened in, which stays true when several invocations run at once in one
//! process (Lambda Managed Instances).

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

/// Counts of each [`Event`].
#[derive(Debug, Default)]
pub struct Tally {
    receipts_resent: AtomicU64,
    failed_ahead: AtomicU64,
}

tokio::task_local! {
    /// The tally of the invocation this task runs ([`Tally::within`]).
    static INVOCATION: Arc<Tally>;
}

impl Tally {
    /// How many times `event` was counted.
    pub fn get(&self, event: Event) -> u64 {
        self.counter(event).load(Ordering::Relaxed)
    }

    /// Counts `event` here and in the invocation it happens in, if any.
    pub(crate) fn count(&self, event: Event) {
        self.counter(event).fetch_add(1, Ordering::Relaxed);
        let _outside_any_invocation = INVOCATION.try_with(|invocation| {
            invocation.counter(event).fetch_add(1, Ordering::Relaxed);
        });
    }

    /// Runs `work` (one invocation) and gives its output with what was counted within it alone.
    pub(crate) async fn within<F: Future>(work: F) -> (F::Output, Tally) {
        let tally = Arc::new(Tally::default());
        let output = INVOCATION.scope(tally.clone(), work).await;
        let counted = Tally::default();
        for event in [Event::ReceiptResent, Event::FailedAhead] {
            counted
                .counter(event)
                .store(tally.get(event), Ordering::Relaxed);
        }
        (output, counted)
    }

    fn counter(&self, event: Event) -> &AtomicU64 {
        match event {
            Event::ReceiptResent => &self.receipts_resent,
            Event::FailedAhead => &self.failed_ahead,
        }
    }
}
