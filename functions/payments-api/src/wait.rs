//! Waiting for a payment to be final (`Prefer: wait=N`, [`crate::prefer`]), on a POST after its
//! key's record is completed and on a GET: the payment is read again, strongly consistent, [`FIRST_DELAY`] after the last state known, then after twice as
//! long each time up to [`MAX_DELAY`] (100, 200, 400, 800 ms, then every second), never past the
//! wait's end, where it is read a last time.
//!
//! On a payment that stays `accepted`, a wait of 20 s reads it 23 times after the state it starts
//! from (at 0.1, 0.3, 0.7, 1.5 s, then 2.5 s to 19.5 s every second, and at 20 s): 24 reads for a
//! `GET`, whose first read is the state it starts from, 23 after a creation, which knows it.
//! Each read is bounded by the time to the wait's end plus [`READ_GRACE`]: a read that fails, or
//! does not answer in time, ends the wait with the last state read.

use std::future::Future;
use std::time::Duration;

use aws_sdk_dynamodb::error::DisplayErrorContext;
use lambda_http::http::StatusCode;
use lambda_http::{Body, Response};
use lambda_idempotency::time::{Clock, SystemClock};
use payments_model::PaymentStatus;
use tokio::time::Instant;

use crate::identity::Caller;
use crate::prefer::WaitPreference;
use crate::representation::{self, Item};
use crate::{App, REPLAYED_HEADER, json_response};

/// The pause before the first read.
pub const FIRST_DELAY: Duration = Duration::from_millis(100);
/// The longest pause between two reads.
pub const MAX_DELAY: Duration = Duration::from_secs(1);
/// How long a read may run past the wait's end (within the deadline margin,
/// [`crate::prefer::DEADLINE_MARGIN_MS`]).
pub const READ_GRACE: Duration = Duration::from_millis(500);

/// Reads with `read` until `done` holds for the last state or `wait` has passed, starting from
/// `last`, and answers the last state. `read` answers `None` when the read failed (it logs why):
/// the wait ends there.
pub async fn until<T, F, Fut>(
    wait: Duration,
    mut last: T,
    done: impl Fn(&T) -> bool,
    mut read: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let end = Instant::now() + wait;
    let mut delay = FIRST_DELAY;
    while !done(&last) {
        let now = Instant::now();
        if now >= end {
            break;
        }
        tokio::time::sleep(delay.min(end - now)).await;
        delay = (delay * 2).min(MAX_DELAY);
        let bound = end.saturating_duration_since(Instant::now()) + READ_GRACE;
        match tokio::time::timeout(bound, read()).await {
            Ok(Some(state)) => last = state,
            Ok(None) => break,
            Err(_) => {
                tracing::warn!("a read during the wait did not answer in time");
                break;
            }
        }
    }
    last
}

impl App {
    /// `Prefer: wait` on a POST answered with its payment (after its key's record is completed):
    /// re-reads the payment until it is final or the wait ends, and answers with its status then
    /// (a creation starts from `accepted`, a replay from a first read). Where no state can be
    /// read, the answer as it was.
    pub(crate) async fn outcome(
        &self,
        response: Response<Body>,
        payment_id: &str,
        preference: WaitPreference,
    ) -> Response<Body> {
        let wait = preference.applied(SystemClock.now_ms());
        let first = if response.headers().contains_key(REPLAYED_HEADER) {
            self.status(payment_id).await
        } else {
            Some(PaymentStatus::Accepted.as_str().to_owned())
        };
        let Some(first) = first else {
            return response;
        };
        let status = until(
            wait.duration(),
            first,
            |s| representation::is_final(s),
            || self.status(payment_id),
        )
        .await;
        let (parts, _) = response.into_parts();
        let body = Body::from(representation::created(payment_id, &status));
        wait.mark(Response::from_parts(parts, body))
    }

    /// `Prefer: wait` on a GET of the caller's payment `item`: re-reads it until it is final or
    /// the wait ends, and answers it then.
    pub(crate) async fn waited(
        &self,
        payment_id: &str,
        caller: &Caller,
        item: Item,
        preference: WaitPreference,
    ) -> Response<Body> {
        let wait = preference.applied(SystemClock.now_ms());
        let item = until(
            wait.duration(),
            item,
            |i| representation::status(i).is_some_and(representation::is_final),
            || async { logged(self.read_owned(payment_id, caller).await).flatten() },
        )
        .await;
        let body = representation::payment(payment_id, &item);
        wait.mark(json_response(StatusCode::OK, body))
    }

    /// A payment's status, strongly consistent; `None` when it cannot be read (logged).
    async fn status(&self, payment_id: &str) -> Option<String> {
        let item = logged(self.read_payment(payment_id).await)?;
        item.as_ref()
            .and_then(representation::status)
            .map(str::to_owned)
    }
}

/// A read's answer, or `None` with its error logged: the wait ends there.
fn logged<T>(read: Result<T, aws_sdk_dynamodb::Error>) -> Option<T> {
    read.map_err(|e| {
        tracing::warn!(error = %DisplayErrorContext(&e), "GetItem failed while waiting");
    })
    .ok()
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// The reads' times (ms after the start) and the answer of a wait over `states`, one per read
    /// (the last repeated), starting from `first`.
    async fn run(
        wait_secs: u64,
        first: &'static str,
        states: &[&'static str],
    ) -> (Vec<u128>, &'static str) {
        let start = Instant::now();
        let reads = Arc::new(Mutex::new(Vec::new()));
        let answer = until(
            Duration::from_secs(wait_secs),
            first,
            |s| *s != "accepted",
            || {
                let reads = reads.clone();
                let states = states.to_vec();
                async move {
                    let mut reads = reads.lock().unwrap();
                    reads.push(start.elapsed().as_millis());
                    Some(states[(reads.len() - 1).min(states.len() - 1)])
                }
            },
        )
        .await;
        let reads = reads.lock().unwrap().clone();
        (reads, answer)
    }

    #[tokio::test(start_paused = true)]
    async fn a_payment_that_stays_accepted_is_read_on_the_schedule_until_the_end() {
        let (reads, answer) = run(20, "accepted", &["accepted"]).await;
        assert_eq!(answer, "accepted");
        let mut expected = vec![100, 300, 700, 1500];
        expected.extend((2..20).map(|s| s * 1000 + 500));
        expected.push(20_000);
        assert_eq!(reads, expected);
        assert_eq!(reads.len(), 23);
    }

    #[tokio::test(start_paused = true)]
    async fn the_wait_ends_at_the_first_final_state() {
        let (reads, answer) = run(10, "accepted", &["accepted", "accepted", "charged"]).await;
        assert_eq!((reads, answer), (vec![100, 300, 700], "charged"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_final_state_or_no_wait_reads_nothing() {
        assert_eq!(run(10, "failed", &["accepted"]).await, (vec![], "failed"));
        assert_eq!(run(0, "accepted", &["charged"]).await, (vec![], "accepted"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_short_wait_reads_at_its_end() {
        let (reads, _) = run(1, "accepted", &["accepted"]).await;
        assert_eq!(reads, [100, 300, 700, 1000]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_read_ends_the_wait_with_the_last_state() {
        let mut calls = 0;
        let answer = until(
            Duration::from_secs(10),
            "accepted",
            |s| *s != "accepted",
            || {
                calls += 1;
                let n = calls;
                async move { (n < 3).then_some("accepted") }
            },
        )
        .await;
        assert_eq!((answer, calls), ("accepted", 3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_that_hangs_ends_the_wait() {
        let mut calls = 0;
        let answer = until(
            Duration::from_secs(2),
            "accepted",
            |s| *s != "accepted",
            || {
                calls += 1;
                std::future::pending::<Option<&str>>()
            },
        )
        .await;
        assert_eq!((answer, calls), ("accepted", 1));
    }
}
