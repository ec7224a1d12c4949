//! A run's time budget: the Lambda deadline less a margin, shared between the run's parts. A part
//! checks it between two pieces of work and, once it is spent, stops looking, finishes what it
//! found (sends, marks, moves its cursor) and leaves the rest to the next run.

use std::sync::Arc;
use std::time::Duration;

use lambda_idempotency::time::{Clock, Deadline, SystemClock};
use payments_model::lifecycle;

/// What a run keeps back from its deadline: the time to send what it found and keep its
/// progress after it stops looking (a batch of sends, a few writes), with room for one slow call.
pub const DEADLINE_MARGIN: Duration = Duration::from_secs(20);

/// Until when a run (or one of its parts) may go on looking.
#[derive(Debug, Clone)]
pub struct Budget {
    until: Option<Deadline>,
    clock: Arc<dyn Clock>,
}

impl Default for Budget {
    fn default() -> Self {
        Self::unlimited()
    }
}

impl Budget {
    /// No limit: the one-shot mode, and tests.
    pub fn unlimited() -> Self {
        Self {
            until: None,
            clock: Arc::new(SystemClock),
        }
    }

    /// Until `until`, by `clock`.
    pub fn until(until: Deadline, clock: Arc<dyn Clock>) -> Self {
        Self {
            until: Some(until),
            clock,
        }
    }

    /// A Lambda invocation's budget: its deadline less [`DEADLINE_MARGIN`]; unlimited when the
    /// context carries no deadline.
    pub fn of_invocation(context: &lambda_runtime::Context) -> Self {
        match Deadline::of(context) {
            Some(deadline) => {
                Self::until(deadline.earlier_by(DEADLINE_MARGIN), Arc::new(SystemClock))
            }
            None => Self::unlimited(),
        }
    }

    /// True once the budget is spent.
    pub fn is_spent(&self) -> bool {
        self.until
            .is_some_and(|until| until.has_passed(&*self.clock))
    }

    /// The first of `parts` equal shares of what is left: a part that finishes early leaves
    /// the rest to the parts after it.
    pub fn share(&self, parts: u32) -> Self {
        let until = self.until.map(|until| {
            let left = until.remaining(&*self.clock) / parts.max(1);
            let left = i64::try_from(left.as_millis()).unwrap_or(i64::MAX);
            Deadline::at_epoch_ms(self.clock.now_ms().saturating_add(left))
        });
        Self {
            until,
            clock: self.clock.clone(),
        }
    }
}

/// The charged index's shards in the order the run at `now_ms` walks them: from a shard that
/// the run's minute picks (scattered, so that runs on any schedule start at every shard in
/// turn), and round. A run whose time budget is spent before it reaches its last shards leaves
/// them to the next run, which starts elsewhere: the same shards are never always the last.
pub(super) fn shards_in_turn(now_ms: i64) -> Vec<String> {
    let minute = u64::try_from(now_ms / 60_000).unwrap_or(0);
    // Fibonacci hashing: the product's high bits, scaled to the shards.
    let scattered = minute.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    shards_from(((scattered * u64::from(lifecycle::SHARDS)) >> 32) as usize)
}

/// The shards, from `first` and round.
fn shards_from(first: usize) -> Vec<String> {
    let mut shards: Vec<String> = lifecycle::shards().collect();
    let len = shards.len();
    shards.rotate_left(first % len.max(1));
    shards
}

/// `total` split over `parts`: as evenly as possible, the first `total % parts` one more, and
/// each at least one. The share of each shard of an index in a run's `MAX_PAYMENTS_PER_RUN`, so
/// that one hot shard cannot take a whole run: what a shard leaves unused goes to the shards
/// that used all of theirs, after every shard had its share.
pub(super) fn fair_shares(total: usize, parts: usize) -> Vec<usize> {
    let parts = parts.max(1);
    (0..parts)
        .map(|i| (total / parts + usize::from(i < total % parts)).max(1))
        .collect()
}

#[cfg(test)]
mod tests {
    use lambda_idempotency::time::ManualClock;

    use super::*;

    #[test]
    fn a_budget_is_spent_at_its_end_and_shares_what_is_left() {
        let clock = Arc::new(ManualClock::new(1_000));
        let budget = Budget::until(Deadline::at_epoch_ms(10_000), clock.clone());
        assert!(!budget.is_spent());
        let first = budget.share(3);
        clock.advance(Duration::from_millis(2_999));
        assert!(!first.is_spent());
        clock.advance(Duration::from_millis(1));
        assert!(first.is_spent());
        assert!(!budget.is_spent(), "the rest is the later parts'");
        // The next part shares what is left (6 s) with the one after it.
        let second = budget.share(2);
        clock.advance(Duration::from_millis(3_000));
        assert!(second.is_spent());
        clock.advance(Duration::from_millis(2_999));
        assert!(!budget.is_spent());
        clock.advance(Duration::from_millis(1));
        assert!(budget.is_spent());
        assert!(!Budget::unlimited().share(3).is_spent());
    }

    #[test]
    fn each_shard_starts_a_run_in_turn_and_every_run_walks_them_all() {
        let all: Vec<String> = lifecycle::shards().collect();
        let mut firsts = std::collections::BTreeSet::new();
        for first in 0..all.len() {
            let order = shards_from(first);
            let mut sorted = order.clone();
            sorted.sort();
            let mut expected = all.clone();
            expected.sort();
            assert_eq!(sorted, expected, "every shard once: {order:?}");
            assert_eq!(order[0], all[first]);
            assert_eq!(order[1], all[(first + 1) % all.len()], "and round");
            firsts.insert(order[0].clone());
        }
        assert_eq!(firsts.len(), all.len());
        // Runs every 1, 2, 4, 5 or 8 minutes: within 64 runs, every shard has started one.
        for every in [1, 2, 4, 5, 8] {
            let started: std::collections::BTreeSet<String> = (0..64)
                .map(|run| shards_in_turn(1_800_000_000_000 + run * every * 60_000)[0].clone())
                .collect();
            assert_eq!(started.len(), all.len(), "every {every} min: {started:?}");
        }
    }

    #[test]
    fn every_part_has_its_share() {
        assert_eq!(fair_shares(1000, 8), vec![125; 8]);
        assert_eq!(fair_shares(10, 4), vec![3, 3, 2, 2]);
        assert_eq!(fair_shares(3, 4), vec![1, 1, 1, 1], "at least one each");
        assert_eq!(fair_shares(5, 0), vec![5]);
    }

    #[test]
    fn an_invocation_without_a_deadline_has_no_limit() {
        let context = lambda_runtime::Context::default();
        assert!(Budget::of_invocation(&context).until.is_none());
        let mut context = lambda_runtime::Context::default();
        context.deadline = 2_000_000_000_000;
        let budget = Budget::of_invocation(&context);
        assert_eq!(
            budget.until,
            Some(Deadline::at_epoch_ms(2_000_000_000_000).earlier_by(DEADLINE_MARGIN))
        );
    }
}
