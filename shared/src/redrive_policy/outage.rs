//! The outage cover: does a queue's `maxReceiveCount` leave room for an outage as long as the
//! queue's retention? See [`outage_cover`].

use std::time::Duration;

use crate::backoff::RetrySchedule;

/// How a queue's `maxReceiveCount` covers an outage as long as its retention: what
/// [`outage_cover`] found, with every number its warning names.
///
/// ```
/// use lambda_idempotency::backoff::RetrySchedule;
/// use lambda_idempotency::redrive_policy::outage_cover;
/// use std::time::Duration;
///
/// let four_days = Duration::from_secs(4 * 24 * 60 * 60);
/// let backoff = RetrySchedule::new(Duration::from_secs(2), Duration::from_secs(300));
/// let visibility = Duration::from_secs(180);
/// // Batches of 10 and 5 attempts: 41 receives, and 23 more for an outage of 4 days.
/// let cover = outage_cover(41, 10, 5, four_days, Some(backoff), visibility);
/// assert_eq!((cover.attempt_bound, cover.outage_receives, cover.required), (41, 23, 64));
/// assert!(!cover.holds());
/// assert!(outage_cover(64, 10, 5, four_days, Some(backoff), visibility).holds());
/// // Without a backoff, a failure comes back after each visibility timeout: 1921 receives in
/// // 4 days, more than SQS's largest maxReceiveCount (1000).
/// let off = outage_cover(1000, 10, 5, four_days, None, visibility);
/// assert_eq!(off.outage_receives, 1921);
/// assert!(!off.holds());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutageCover {
    /// The queue's `maxReceiveCount`.
    pub max_receive_count: u32,
    /// The receives the attempt budget allows:
    /// [`min_max_receive_count`](super::min_max_receive_count) of the batch size and attempts.
    pub attempt_bound: u32,
    /// The most receives of a message during an outage as long as the retention.
    pub outage_receives: u32,
    /// Their sum: the smallest `maxReceiveCount` that covers both.
    pub required: u32,
    /// The queue's `MessageRetentionPeriod`.
    pub retention: Duration,
    /// The backoff's schedule; `None` when it is off.
    pub backoff: Option<RetrySchedule>,
    /// The queue's visibility timeout: the delay of every retry when the backoff is off.
    pub visibility_timeout: Duration,
    /// The longest outage (whole seconds) that moves nothing even after the attempt bound's
    /// receives: the whole retention when the cover holds, zero when not even one receive is
    /// left for an outage.
    pub longest_outage: Duration,
}

impl OutageCover {
    /// True when an outage as long as the retention moves nothing.
    pub fn holds(&self) -> bool {
        self.max_receive_count >= self.required
    }

    /// How an outage's receives are spaced, in words.
    pub fn spacing(&self) -> String {
        match self.backoff {
            Some(schedule) => format!(
                "the visibility backoff from {} s, doubling up to 11 hours",
                schedule.delay_not_counted(1).as_secs()
            ),
            None => format!(
                "no backoff: every visibility timeout of {} s",
                self.visibility_timeout.as_secs()
            ),
        }
    }
}

impl std::fmt::Display for OutageCover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "maxReceiveCount {} leaves room for an outage of {} s after the {} receives the \
             attempt budget allows, but an outage as long as the queue's retention ({} s) takes \
             up to {} receives ({}), so SQS can move messages that are not at fault to the \
             dead-letter queue. Fix: set maxReceiveCount to at least {} = {} + {}",
            self.max_receive_count,
            self.longest_outage.as_secs(),
            self.attempt_bound,
            self.retention.as_secs(),
            self.outage_receives,
            self.spacing(),
            self.required,
            self.attempt_bound,
            self.outage_receives
        )?;
        if self.backoff.is_none() {
            write!(
                f,
                ", or turn the backoff on (BACKOFF_BASE_SECONDS at least 1)"
            )?;
        }
        Ok(())
    }
}

/// The most receives of a message during an outage of `outage`: by `backoff`'s schedule
/// ([`receives_within`](RetrySchedule::receives_within)), or without a backoff one per
/// `visibility_timeout` (at least 1 s).
pub fn outage_receives(
    backoff: Option<RetrySchedule>,
    visibility_timeout: Duration,
    outage: Duration,
) -> u32 {
    match backoff {
        Some(schedule) => schedule.receives_within(outage),
        None => {
            let per = visibility_timeout.as_secs().max(1);
            u32::try_from(outage.as_secs() / per)
                .unwrap_or(u32::MAX)
                .saturating_add(1)
        }
    }
}

/// Whether `max_receive_count` covers the receives of batches of `batch_size` records and
/// `max_attempts` attempts, plus an outage as long as `retention` under `backoff` (`None`: off,
/// each retry a `visibility_timeout` later).
///
/// A failure the attempt budget does not count (the store or a follow-up service unreachable, a
/// FIFO message held behind such a failure) has no end the consumer can count, but SQS counts its
/// receives all the same. With the [visibility backoff](crate::backoff) on, those receives come
/// [`delay_not_counted`](crate::backoff::RetrySchedule::delay_not_counted) apart, doubling up to
/// 11 hours: an outage of `retention` costs a message at most
/// [`receives_within`](crate::backoff::RetrySchedule::receives_within)`(retention)` receives.
/// With the backoff off, each comes a visibility timeout after the last: `retention / timeout + 1`.
///
/// Those receives come on top of the ones the attempt budget allows
/// ([`min_max_receive_count`](super::min_max_receive_count)): a message may have used its own
/// failed attempts, and been held behind others' in its FIFO group, before an outage starts. So
/// an outage as long as the retention moves nothing when `maxReceiveCount` is at least their
/// sum ([`OutageCover::required`]). The larger the backoff's base, the fewer receives an outage
/// costs; the backoff's `max` and its jitter do not lower the count (an outage's delays double
/// past `max`, and jitter only lengthens them).
pub fn outage_cover(
    max_receive_count: u32,
    batch_size: u32,
    max_attempts: u32,
    retention: Duration,
    backoff: Option<RetrySchedule>,
    visibility_timeout: Duration,
) -> OutageCover {
    let attempt_bound = super::min_max_receive_count(batch_size, max_attempts);
    let receives = |outage| outage_receives(backoff, visibility_timeout, outage);
    let outage_receives = receives(retention);
    let left = max_receive_count.saturating_sub(attempt_bound);
    // The longest outage whose receives fit in what is left: receives grow with the outage.
    let longest_outage = if outage_receives <= left {
        retention
    } else if left == 0 {
        Duration::ZERO
    } else {
        let (mut fits, mut moves) = (0, retention.as_secs());
        while moves - fits > 1 {
            let mid = fits + (moves - fits) / 2;
            if receives(Duration::from_secs(mid)) <= left {
                fits = mid;
            } else {
                moves = mid;
            }
        }
        Duration::from_secs(fits)
    };
    OutageCover {
        max_receive_count,
        attempt_bound,
        outage_receives,
        required: attempt_bound.saturating_add(outage_receives),
        retention,
        backoff,
        visibility_timeout,
        longest_outage,
    }
}
