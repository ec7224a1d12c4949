//! Finding the queues: a dead-letter queue by logical id, name or URL, and the source queue it
//! serves (from the template's `RedrivePolicy`, else `ListDeadLetterSourceQueues`).

use std::fmt;

use aws_sdk_sqs::Client;
use lambda_idempotency::publish::error_text;

use super::report::RedriveError;
use crate::template::{Queue, Template};

/// A queue found by [`resolve_queue`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueRef {
    /// Its logical id in the template, when it is one of the template's queues.
    pub logical_id: Option<String>,
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
}

impl fmt::Display for QueueRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.logical_id {
            Some(id) => write!(f, "{id} ({})", self.url),
            None => f.write_str(&self.url),
        }
    }
}

/// Finds a queue by `spec`: a URL (`http://...` or `https://...`, taken as it is), a logical id
/// of `template` (its name with the template's naming, then `GetQueueUrl`), or a queue name
/// (`GetQueueUrl`).
///
/// ```no_run
/// # async fn f(sqs: aws_sdk_sqs::Client) -> Result<(), Box<dyn std::error::Error>> {
/// use local_aws::template::{Naming, Template, TemplateOptions};
///
/// let template = Template::load_project(&TemplateOptions::default().naming(Naming::prefix("dev-")))?;
/// let dlq = local_aws::redrive::resolve_queue(&sqs, Some(&template), "PaymentsDeadLetterQueue").await?;
/// assert_eq!(dlq.name, "dev-payments-dlq.fifo");
/// assert_eq!(dlq.logical_id.as_deref(), Some("PaymentsDeadLetterQueue"));
/// # Ok(()) }
/// ```
pub async fn resolve_queue(
    sqs: &Client,
    template: Option<&Template>,
    spec: &str,
) -> Result<QueueRef, RedriveError> {
    let by_name = |name: &str| {
        template
            .and_then(|t| t.queues.values().find(|q| q.name == name))
            .map(|q| q.logical_id.clone())
    };
    if spec.starts_with("http://") || spec.starts_with("https://") {
        let name = spec
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or(spec)
            .to_owned();
        return Ok(QueueRef {
            logical_id: by_name(&name),
            name,
            url: spec.to_owned(),
        });
    }
    let (logical_id, name) = match template.and_then(|t| t.queues.get(spec)) {
        Some(q) => (Some(q.logical_id.clone()), q.name.clone()),
        None => (by_name(spec), spec.to_owned()),
    };
    let url = sqs
        .get_queue_url()
        .queue_name(&name)
        .send()
        .await
        .map_err(|e| RedriveError::UnknownQueue {
            spec: spec.to_owned(),
            message: match template.is_some_and(|t| t.queues.contains_key(spec)) {
                true => format!("GetQueueUrl {name} (provisioned?): {}", error_text(&e)),
                false => format!(
                    "not a logical id of the template, nor a URL; GetQueueUrl {name}: {}",
                    error_text(&e)
                ),
            },
        })?
        .queue_url
        .ok_or_else(|| RedriveError::UnknownQueue {
            spec: spec.to_owned(),
            message: "GetQueueUrl answered without a QueueUrl".to_owned(),
        })?;
    Ok(QueueRef {
        logical_id,
        name,
        url,
    })
}

/// The queues of `template` whose `RedrivePolicy` sends to the queue `dlq_logical_id`.
///
/// ```
/// use local_aws::template::{Template, TemplateOptions};
///
/// let template = Template::load_project(&TemplateOptions::default()).unwrap();
/// let sources = local_aws::redrive::template_sources(&template, "PaymentsDeadLetterQueue");
/// assert_eq!(sources.len(), 1);
/// assert_eq!(sources[0].logical_id, "PaymentsQueue");
/// ```
pub fn template_sources<'t>(template: &'t Template, dlq_logical_id: &str) -> Vec<&'t Queue> {
    template
        .queues
        .values()
        .filter(|q| {
            q.redrive
                .as_ref()
                .is_some_and(|r| r.dead_letter_queue == dlq_logical_id)
        })
        .collect()
}

/// The source queue of the dead-letter queue `dlq`: from the template's `RedrivePolicy` when
/// `dlq` is one of its queues, else from `ListDeadLetterSourceQueues`. Exactly one queue must
/// qualify.
///
/// ```no_run
/// # async fn f(sqs: aws_sdk_sqs::Client, template: local_aws::template::Template) -> Result<(), local_aws::redrive::RedriveError> {
/// use local_aws::redrive::{resolve_queue, resolve_source};
///
/// let dlq = resolve_queue(&sqs, Some(&template), "ReceiptsDeadLetterQueue").await?;
/// let source = resolve_source(&sqs, Some(&template), &dlq).await?;
/// assert_eq!(source.logical_id.as_deref(), Some("ReceiptsQueue"));
/// # Ok(()) }
/// ```
pub async fn resolve_source(
    sqs: &Client,
    template: Option<&Template>,
    dlq: &QueueRef,
) -> Result<QueueRef, RedriveError> {
    if let (Some(t), Some(id)) = (template, &dlq.logical_id) {
        match template_sources(t, id).as_slice() {
            [] => {}
            [one] => return resolve_queue(sqs, template, &one.logical_id).await,
            many => {
                return Err(RedriveError::AmbiguousSource {
                    dlq: dlq.to_string(),
                    candidates: many.iter().map(|q| q.logical_id.clone()).collect(),
                });
            }
        }
    }
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
        [one] => resolve_queue(sqs, template, one).await,
        many => Err(RedriveError::AmbiguousSource {
            dlq: dlq.to_string(),
            candidates: many.to_vec(),
        }),
    }
}
