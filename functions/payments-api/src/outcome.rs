//! What a request came to: one count of 1 per request in the pipeline's metrics
//! ([`payments_model::metrics::api`]), so that a `503`, which is a successful invocation to
//! Lambda, is still counted (`unavailable`) and alarmed.

use lambda_idempotency::metrics::Metrics;
use payments_model::METRICS_NAMESPACE;
use payments_model::metrics::{FUNCTION_DIMENSION, api, function};

/// The outcome of one request; [`App::handle`](crate::App::handle) emits its metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A payment stored (`201`).
    Accepted,
    /// A stored response replayed.
    Replayed,
    /// The key's first request still runs (`409`).
    InProgress,
    /// The key was used with another body (`422`).
    KeyReused,
    /// Refused input (`400`, `405`, `413`, `415`).
    Rejected,
    /// No caller or account in the verified claims.
    Unauthorized,
    /// No such route or payment (`404`).
    NotFound,
    /// A payment read (`200`).
    Found,
    /// DynamoDB failed (`503`).
    Unavailable,
}

impl Outcome {
    /// Every outcome (each variant once, in the enum's order).
    pub const ALL: [Outcome; 9] = [
        Outcome::Accepted,
        Outcome::Replayed,
        Outcome::InProgress,
        Outcome::KeyReused,
        Outcome::Rejected,
        Outcome::Unauthorized,
        Outcome::NotFound,
        Outcome::Found,
        Outcome::Unavailable,
    ];

    /// The EMF line of one request that came to this outcome (a count of 1 of its
    /// [`metric`](Self::metric)), which [`App::handle`](crate::App::handle) prints. payments-reader
    /// runs the same code: its requests count under payments-api's name too.
    pub fn metrics(self) -> Metrics {
        Metrics::new(METRICS_NAMESPACE)
            .dimension(FUNCTION_DIMENSION, function::PAYMENTS_API)
            .count(self.metric(), 1)
    }

    /// The metric counting it.
    pub fn metric(self) -> &'static str {
        match self {
            Outcome::Accepted => api::ACCEPTED,
            Outcome::Replayed => api::REPLAYED,
            Outcome::InProgress => api::IN_PROGRESS,
            Outcome::KeyReused => api::KEY_REUSED,
            Outcome::Rejected => api::REJECTED,
            Outcome::Unauthorized => api::UNAUTHORIZED,
            Outcome::NotFound => api::NOT_FOUND,
            Outcome::Found => api::FOUND,
            Outcome::Unavailable => api::UNAVAILABLE,
        }
    }
}
