//! The `wait` preference of RFC 7240: a client that sends `Prefer: wait=N` would rather get the
//! answer within N seconds than at once, so the API may hold the request until the payment is
//! `charged` or `failed` ([`crate::wait`]).
//!
//! - Preferences are comma-separated, in one `Prefer` header or several; names are
//!   case-insensitive; a preference's parameters (after `;`) are read past. Only the first `wait`
//!   counts (RFC 7240, section 2: later instances are ignored).
//! - `N` is delta-seconds (digits only; a quoted value is unquoted first). Any other value is
//!   ignored, never an error: the request is answered as without the header. A number too large
//!   for 64 bits is as large as any other: capped.
//! - The wait applied is at most [`MAX_WAIT_SECONDS`], and ends [`DEADLINE_MARGIN_MS`] before the
//!   invocation's deadline (the function's `Timeout`), in whole seconds. The response says which
//!   in `Preference-Applied: wait=N`; without a valid `wait` preference there is no such header.
//!
//! ```
//! use lambda_http::http::{HeaderMap, HeaderValue};
//! use payments_api::prefer::requested_wait;
//!
//! let mut headers = HeaderMap::new();
//! headers.append("prefer", HeaderValue::from_static("respond-async"));
//! headers.append("prefer", HeaderValue::from_static("handling=lenient, WAIT=5; p=1"));
//! assert_eq!(requested_wait(&headers), Some(5));
//! ```

use std::time::Duration;

use lambda_http::http::{HeaderMap, HeaderValue};
use lambda_http::{Body, Request, RequestExt, Response};

/// The request header.
pub const PREFER: &str = "prefer";
/// The response header naming the wait applied.
pub const PREFERENCE_APPLIED: &str = "preference-applied";
/// The longest wait, in seconds.
pub const MAX_WAIT_SECONDS: u64 = 20;
/// How long before the invocation's deadline a wait ends: time for the last read and the answer.
pub const DEADLINE_MARGIN_MS: i64 = 1_000;

/// The `wait` preference of a request's `Prefer` headers, in seconds: `None` when there is none,
/// or when the first one's value is not a number of seconds.
pub fn requested_wait(headers: &HeaderMap) -> Option<u64> {
    let (_, value) = headers
        .get_all(PREFER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| split_unquoted(v, b','))
        .filter_map(preference)
        .find(|(name, _)| name.eq_ignore_ascii_case("wait"))?;
    delta_seconds(&value?)
}

/// A request's wait preference and the invocation's deadline: the wait is applied when it starts
/// ([`WaitPreference::applied`]), so that the time the request spent before it counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitPreference {
    /// The seconds asked for.
    pub requested: u64,
    /// The invocation's deadline, epoch ms (none outside Lambda).
    pub deadline_ms: Option<i64>,
}

impl WaitPreference {
    /// The request's wait preference, if it has a valid one.
    pub fn of(request: &Request) -> Option<Self> {
        Some(Self {
            requested: requested_wait(request.headers())?,
            deadline_ms: request
                .lambda_context_ref()
                .and_then(lambda_idempotency::time::Deadline::of)
                .map(lambda_idempotency::time::Deadline::epoch_ms),
        })
    }

    /// The wait applied from `now_ms`: at most [`MAX_WAIT_SECONDS`], and ending
    /// [`DEADLINE_MARGIN_MS`] before the deadline, in whole seconds (0 when less is left).
    pub fn applied(&self, now_ms: i64) -> Wait {
        let left = self.deadline_ms.map_or(u64::MAX, |deadline| {
            u64::try_from((deadline - now_ms - DEADLINE_MARGIN_MS) / 1000).unwrap_or(0)
        });
        Wait {
            seconds: self.requested.min(MAX_WAIT_SECONDS).min(left),
        }
    }
}

/// The wait applied to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    /// Whole seconds.
    pub seconds: u64,
}

impl Wait {
    /// How long.
    pub fn duration(self) -> Duration {
        Duration::from_secs(self.seconds)
    }

    /// Adds `Preference-Applied: wait=N` to `response`.
    pub fn mark(self, mut response: Response<Body>) -> Response<Body> {
        let value = HeaderValue::from_str(&format!("wait={}", self.seconds))
            .expect("digits are a valid header value");
        response.headers_mut().insert(PREFERENCE_APPLIED, value);
        response
    }
}

/// A preference's name and value (unquoted; `None` without one), its parameters dropped; `None`
/// for an empty list element.
fn preference(element: &str) -> Option<(&str, Option<String>)> {
    let head = split_unquoted(element, b';').next().unwrap_or_default();
    let (name, value) = match head.split_once('=') {
        Some((name, value)) => (name.trim(), Some(unquote(value.trim()))),
        None => (head.trim(), None),
    };
    (!name.is_empty()).then_some((name, value))
}

/// `text` split at each `separator` outside a quoted string.
fn split_unquoted(text: &str, separator: u8) -> impl Iterator<Item = &str> {
    let bytes = text.as_bytes();
    let (mut quoted, mut escaped, mut start) = (false, false, 0);
    let mut parts = Vec::new();
    for (i, &b) in bytes.iter().enumerate() {
        if escaped {
            escaped = false;
        } else if quoted && b == b'\\' {
            escaped = true;
        } else if b == b'"' {
            quoted = !quoted;
        } else if !quoted && b == separator {
            parts.push(&text[start..i]);
            start = i + 1;
        }
    }
    parts.push(&text[start..]);
    parts.into_iter()
}

/// A quoted-string's content (RFC 9110: `\` escapes the next character); any other text as it is.
fn unquote(word: &str) -> String {
    let Some(inner) = word.strip_prefix('"').and_then(|w| w.strip_suffix('"')) else {
        return word.to_owned();
    };
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        out.push(if c == '\\' {
            chars.next().unwrap_or(c)
        } else {
            c
        });
    }
    out
}

/// Delta-seconds: one or more digits; a number over `u64::MAX` is `u64::MAX`.
fn delta_seconds(value: &str) -> Option<u64> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(value.parse().unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait(values: &[&str]) -> Option<u64> {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append(PREFER, HeaderValue::from_str(v).unwrap());
        }
        requested_wait(&headers)
    }

    #[test]
    fn the_wait_is_found_among_other_preferences_in_any_case() {
        assert_eq!(wait(&["wait=10"]), Some(10));
        assert_eq!(wait(&["Wait = 7"]), Some(7));
        assert_eq!(wait(&["respond-async, WAIT=3"]), Some(3));
        assert_eq!(wait(&["return=minimal; foo=\"a,b\", wait=4;x=y"]), Some(4));
        assert_eq!(wait(&["respond-async", "handling=strict,wait=2"]), Some(2));
        assert_eq!(wait(&[",, wait=1 ,"]), Some(1));
        assert_eq!(wait(&["wait=\"9\""]), Some(9));
        assert_eq!(wait(&["wait=0"]), Some(0));
        assert_eq!(wait(&["wait=99999999999999999999999"]), Some(u64::MAX));
    }

    #[test]
    fn only_the_first_wait_counts() {
        assert_eq!(wait(&["wait=5, wait=8"]), Some(5));
        assert_eq!(wait(&["wait=5", "wait=8"]), Some(5));
        assert_eq!(wait(&["wait=soon, wait=8"]), None);
    }

    #[test]
    fn an_invalid_or_missing_wait_is_no_wait() {
        for bad in [
            "wait",
            "wait=",
            "wait=-1",
            "wait=1.5",
            "wait=10s",
            "wait= 1 0",
            "wait=\"\"",
            "waiting=5",
            "respond-async",
            "foo=\"wait=5\"",
            "",
        ] {
            assert_eq!(wait(&[bad]), None, "{bad}");
        }
        assert_eq!(wait(&[]), None);
    }

    #[test]
    fn the_wait_is_capped_at_20_seconds_and_by_the_deadline() {
        let at = |requested, deadline_ms| {
            WaitPreference {
                requested,
                deadline_ms,
            }
            .applied(1_000_000)
            .seconds
        };
        assert_eq!(at(5, None), 5);
        assert_eq!(at(30, None), 20);
        assert_eq!(at(u64::MAX, None), 20);
        // 25 s left: the whole 20.
        assert_eq!(at(20, Some(1_025_000)), 20);
        // 8.9 s left, less the 1 s margin: 7 whole seconds.
        assert_eq!(at(20, Some(1_008_900)), 7);
        assert_eq!(at(3, Some(1_008_900)), 3);
        // Less than the margin left, or past the deadline: no wait.
        assert_eq!(at(20, Some(1_000_500)), 0);
        assert_eq!(at(20, Some(999_000)), 0);
    }
}
