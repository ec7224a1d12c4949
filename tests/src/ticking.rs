//! A clock that moves on at each read: a deadline or a time budget on it runs out after so many
//! checks, whatever the machine's speed.

use std::sync::atomic::{AtomicI64, Ordering};

use lambda_idempotency::time::{Clock, SystemClock};

/// Starts at the system's now, and moves `step_ms` on at each read.
#[derive(Debug)]
pub struct Ticking {
    now_ms: AtomicI64,
    step_ms: i64,
}

impl Ticking {
    /// A clock at the system's now that moves `step_ms` on at each read.
    pub fn new(step_ms: i64) -> Self {
        Self {
            now_ms: AtomicI64::new(SystemClock.now_ms()),
            step_ms,
        }
    }

    /// Back to the system's now (what the next read gives).
    pub fn restart(&self) -> i64 {
        let now = SystemClock.now_ms();
        self.now_ms.store(now, Ordering::SeqCst);
        now
    }
}

impl Clock for Ticking {
    fn now_ms(&self) -> i64 {
        self.now_ms.fetch_add(self.step_ms, Ordering::SeqCst)
    }
}
