//! What a request came to: one count of 1 per request in the pipeline's metrics
//! ([`payments_model::metrics::api`]), so that a `503`, which is a successful invocation to
//! Lambda, is still counted (`unavailable`) and alarmed.

use payments_model::metrics::api;

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
