//! Completions the store refused after the work ran, remembered by the process that ran it.
//!
//! The lease mode's one window is a completion the store refuses (an outage that begins as the
//! work ends): the record stays in progress, and once its lease ends a delivery of the same key
//! would take it over and run the work again. A stream delivers such a record again whenever an
//! earlier record of its shard failed; SQS, when its message is sent twice. The engine that ran the
//! work remembers it: the next acquire of the key in this process writes the completion first
//! and, for the same payload, answers a duplicate with the result, without running the work,
//! even while the store still refuses the write. A process that ends (a crash, a recycled
//! execution environment) forgets; that is the window left, and the docs say so.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::lease::Lease;

/// Completions remembered at most, per engine; the oldest is forgotten first (with a warning).
pub const MAX_UNRECORDED: usize = 10_000;

/// A completion the store refused: the lease it holds and the result to store.
#[derive(Debug, Clone)]
pub(crate) struct Unrecorded {
    pub(crate) lease: Lease,
    pub(crate) result: Option<String>,
}

/// The completions remembered by one engine and its clones, by stored key.
#[derive(Debug, Clone, Default)]
pub(crate) struct UnrecordedCompletions {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Each completion with its place in the order remembered.
    by_key: HashMap<String, (u64, Unrecorded)>,
    next: u64,
}

impl UnrecordedCompletions {
    /// Remembers `lease`'s completion with `result`, forgetting the oldest beyond
    /// [`MAX_UNRECORDED`].
    pub(crate) fn remember(&self, lease: &Lease, result: Option<&str>) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let place = inner.next;
        inner.next += 1;
        let entry = Unrecorded {
            lease: lease.clone(),
            result: result.map(str::to_owned),
        };
        inner
            .by_key
            .insert(lease.stored_key().to_owned(), (place, entry));
        if inner.by_key.len() > MAX_UNRECORDED {
            let oldest = inner
                .by_key
                .iter()
                .min_by_key(|(_, (place, _))| *place)
                .map(|(key, _)| key.clone());
            if let Some(key) = oldest {
                inner.by_key.remove(&key);
                tracing::warn!(
                    key,
                    max = MAX_UNRECORDED,
                    "too many completions the store refused: the oldest is forgotten, and a \
                     delivery of its key after its lease ends runs again"
                );
            }
        }
    }

    /// The completion remembered for `stored_key`, if any.
    pub(crate) fn get(&self, stored_key: &str) -> Option<Unrecorded> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.by_key.get(stored_key).map(|(_, u)| u.clone())
    }

    /// Forgets the completion of `stored_key` (written, or the key taken over by another).
    pub(crate) fn forget(&self, stored_key: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.by_key.remove(stored_key);
    }

    /// How many completions are remembered.
    pub(crate) fn len(&self) -> usize {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.by_key.len()
    }
}
