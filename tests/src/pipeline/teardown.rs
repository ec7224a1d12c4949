//! The end of every run: the invariants checked once the pipeline drains, then everything
//! stopped. [`Pipeline::stop`] checks that no invariant is violated and that no payment failed; a
//! test that makes payments fail declares them, each with the kind of its failure
//! ([`Pipeline::stop_checking`] with a [`Scope`] that declares them), and one that breaks an
//! invariant on purpose names exactly what it breaks ([`Pipeline::stop_expecting`]).

use std::collections::BTreeMap;
use std::time::Duration;

use local_aws::runner::Stats;

use super::{BoxError, Pipeline};
use crate::invariants::{Checked, Scope, Sources, Violation, settle};

/// How long the check at the end of a run waits for the pipeline to drain.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

impl Pipeline {
    /// The stack's tables and queues, for the invariant checker.
    pub fn sources(&self) -> Sources {
        Sources::of(&self.clients, &self.resources)
    }

    /// Waits (up to `timeout`) until the pipeline drains and the violations found of the
    /// invariants that apply in `scope` (with the failures it declares) are exactly `expected`;
    /// returns what was found.
    pub async fn check_invariants(
        &self,
        scope: &Scope,
        expected: &[Violation],
        timeout: Duration,
    ) -> Result<Checked, BoxError> {
        settle(&self.sources(), scope, expected, timeout).await
    }

    /// Checks the invariants once the pipeline has drained, then stops everything; panics when
    /// any invariant is violated or any payment failed. Returns the final event source
    /// statistics.
    pub async fn stop(self) -> BTreeMap<String, Stats> {
        self.stop_expecting(&[]).await
    }

    /// [`stop`](Self::stop) for a run that breaks invariants on purpose: panics unless the
    /// violations found are exactly `expected`.
    pub async fn stop_expecting(self, expected: &[Violation]) -> BTreeMap<String, Stats> {
        self.stop_checking(&Scope::pipeline(), expected).await
    }

    /// [`stop`](Self::stop) with the invariants of `scope`, and the failures it declares:
    /// panics unless the violations found are exactly `expected`.
    pub async fn stop_checking(
        self,
        scope: &Scope,
        expected: &[Violation],
    ) -> BTreeMap<String, Stats> {
        let checked = self.check_invariants(scope, expected, SETTLE_TIMEOUT).await;
        let stats = self.stop_unchecked().await;
        match checked {
            Ok(checked) => checked.assert_passed(),
            Err(e) => panic!("the pipeline's invariants could not be checked: {e}"),
        }
        stats
    }
}
