//! Finding the queues: a queue by name or URL, and the source queue a dead-letter queue serves
//! (`ListDeadLetterSourceQueues`).

use std::fmt;

use aws_sdk_sqs::Client;
use lambda_idempotency::publish::error_text;

use super::report::RedriveError;

/// A queue found by [`resolve_queue`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueRef {
    /// The queue name.
    pub name: String,
    /// The queue URL.
    pub url: String,
}

impl QueueRef {
    /// Whether it is a FIFO queue (its name ends in `.fifo`).
    pub fn is_fifo(&self) -> bool {
        self.name.ends_with(".fifo")
    }

    /// The queue of `url`, named by its last path segment.
    ///
    /// ```
    /// use payments_operations::redrive::QueueRef;
    ///
    /// let q = QueueRef::from_url("https://sqs.eu-west-1.amazonaws.com/123456789012/payments.fifo");
    /// assert_eq!(q.name, "payments.fifo");
    /// assert!(q.is_fifo());
    /// ```
    pub fn from_url(url: &str) -> Self {
        let name = url.trim_end_matches('/').rsplit('/').next().unwrap_or(url);
        Self {
            name: name.to_owned(),
            url: url.to_owned(),
        }
    }
}

impl fmt::Display for QueueRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name, self.url)
    }
}

/// Finds a queue by `spec`: a URL (`http://...` or `https://...`, taken as it is) or a queue
/// name (`GetQueueUrl`, in the configured account and region).
///
/// ```no_run
/// # async fn f(sqs: aws_sdk_sqs::Client) -> Result<(), payments_operations::redrive::RedriveError> {
/// let dlq = payments_operations::redrive::resolve_queue(&sqs, "payments-dlq.fifo").await?;
/// assert_eq!(dlq.name, "payments-dlq.fifo");
/// # Ok(()) }
/// ```
pub async fn resolve_queue(sqs: &Client, spec: &str) -> Result<QueueRef, RedriveError> {
    if spec.starts_with("http://") || spec.starts_with("https://") {
        return Ok(QueueRef::from_url(spec));
    }
    let unknown = |message: String| RedriveError::UnknownQueue {
        spec: spec.to_owned(),
        message,
    };
    let url = sqs
        .get_queue_url()
        .queue_name(spec)
        .send()
        .await
        .map_err(|e| unknown(format!("GetQueueUrl: {}", error_text(&e))))?
        .queue_url
        .ok_or_else(|| unknown("GetQueueUrl answered without a QueueUrl".to_owned()))?;
    Ok(QueueRef {
        name: spec.to_owned(),
        url,
    })
}

/// The source queue of the dead-letter queue `dlq`: the one queue whose redrive policy names it
/// (`ListDeadLetterSourceQueues`).
///
/// ```no_run
/// # async fn f(sqs: aws_sdk_sqs::Client) -> Result<(), payments_operations::redrive::RedriveError> {
/// use payments_operations::redrive::{resolve_queue, resolve_source};
///
/// let dlq = resolve_queue(&sqs, "receipts-dlq").await?;
/// let source = resolve_source(&sqs, &dlq).await?;
/// assert_eq!(source.name, "receipts");
/// # Ok(()) }
/// ```
pub async fn resolve_source(sqs: &Client, dlq: &QueueRef) -> Result<QueueRef, RedriveError> {
    let urls = sqs
        .list_dead_letter_source_queues()
        .queue_url(&dlq.url)
        .send()
        .await
        .map_err(|e| RedriveError::UnknownQueue {
            spec: dlq.url.clone(),
            message: format!("ListDeadLetterSourceQueues: {}", error_text(&e)),
        })?
        .queue_urls;
    match urls.as_slice() {
        [] => Err(RedriveError::NoSourceQueue {
            dlq: dlq.to_string(),
        }),
        [one] => Ok(QueueRef::from_url(one)),
        many => Err(RedriveError::AmbiguousSource {
            dlq: dlq.to_string(),
            candidates: many.to_vec(),
        }),
    }
}

/// The two queues of a redrive, as the `redrive` binary finds them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The dead-letter queue to empty.
    pub from: QueueRef,
    /// The queue its messages go back to.
    pub to: QueueRef,
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "from {} to {}", self.from, self.to)
    }
}

/// The route of a redrive: the dead-letter queue `from` (name or URL), and `to` (name or URL)
/// or, without it, the dead-letter queue's source queue ([`resolve_source`]).
///
/// ```no_run
/// # async fn f(sqs: aws_sdk_sqs::Client) -> Result<(), payments_operations::redrive::RedriveError> {
/// let route = payments_operations::redrive::route(&sqs, "payments-dlq.fifo", None).await?;
/// assert_eq!(route.to.name, "payments.fifo");
/// # Ok(()) }
/// ```
pub async fn route(sqs: &Client, from: &str, to: Option<&str>) -> Result<Route, RedriveError> {
    let from = resolve_queue(sqs, from).await?;
    let to = match to {
        Some(spec) => resolve_queue(sqs, spec).await?,
        None => resolve_source(sqs, &from).await?,
    };
    Ok(Route { from, to })
}
