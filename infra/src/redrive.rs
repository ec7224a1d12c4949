//! Redrive: moves the messages of a dead-letter queue back to their source queue, after a fix.
//!
//! [`redrive`] receives from the dead-letter queue (10 at a time, every system and message
//! attribute), sends each message to the source queue with `SendMessageBatch` and deletes from
//! the dead-letter queue **only** the messages whose send succeeded. What it sends:
//!
//! - the body and the message attributes, except those named with the dead-letter prefix
//!   ([`DEAD_LETTER_ATTRIBUTE_PREFIX`], `DeadLetter`: the `DeadLetterReason`,
//!   `DeadLetterSourceMessageId` and `DeadLetterSourceQueueArn` that the library's dead-letter
//!   step adds), and the `AWSTraceHeader` system attribute when there is one;
//! - for a FIFO source queue, the message's `MessageGroupId`, and a **new**
//!   `MessageDeduplicationId` ([`redrive_deduplication_id`]): the source queue remembers the
//!   original one for 5 minutes and would silently drop the resend, and deleting the
//!   dead-letter copy would then lose the message.
//!
//! A message whose send fails stays in the dead-letter queue and is reported in
//! [`RedriveReport::failed`]. It is kept invisible until the run ends (so that the run does not
//! receive it again and again), then its visibility is reset to 0: it is not stuck. On a FIFO
//! source queue, a failed message also holds back the later messages of its group (they stay in
//! the dead-letter queue too), so each group keeps its order; to the same end the messages of one
//! group are sent one `SendMessageBatch` after the other, never two in one call.
//!
//! The run stops when the dead-letter queue returns no new message twice in a row, after
//! [`RedriveOptions::max_messages`], or when the source queue refuses every send (it does not
//! exist, access denied): then [`RedriveReport::stopped`] says why.
//!
//! [`resolve_queue`] and [`resolve_source`] find the queues by logical id in the
//! [`Template`] (with its [`Naming`](crate::template::Naming)), by name or by URL, and the source
//! of a dead-letter queue from the template's `RedrivePolicy` (or `ListDeadLetterSourceQueues`).
//! The `redrive` binary (`cargo run -p local-aws --bin redrive -- --help`) wraps both.
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use local_aws::redrive::{self, RedriveOptions};
//! use local_aws::template::{Template, TemplateOptions};
//!
//! let sqs = aws_sdk_sqs::Client::new(&local_aws::local_sdk_config().await?);
//! let template = Template::load_project(&TemplateOptions::default())?;
//! let dlq = redrive::resolve_queue(&sqs, Some(&template), "PaymentsDeadLetterQueue").await?;
//! let source = redrive::resolve_source(&sqs, Some(&template), &dlq).await?;
//! let report = redrive::redrive(&sqs, &dlq.url, &source.url, RedriveOptions::default()).await?;
//! println!("{report}");
//! assert!(report.is_success(), "{:?}", report.failed);
//! # Ok(()) }
//! ```

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::time::{Duration, Instant};

use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry, Message,
    MessageAttributeValue, MessageSystemAttributeName, MessageSystemAttributeNameForSends,
    MessageSystemAttributeValue, QueueAttributeName, SendMessageBatchRequestEntry,
};

use crate::template::{Queue, Template};

/// Message attributes named with this prefix were added by a dead-letter step (the library adds
/// `DeadLetterReason`, `DeadLetterSourceMessageId`, `DeadLetterSourceQueueArn`): a redrive drops
/// them (see [`RedriveOptions::drop_attribute_prefix`]).
pub const DEAD_LETTER_ATTRIBUTE_PREFIX: &str = "DeadLetter";

/// The attribute in which the library's dead-letter step records the source message id.
const SOURCE_MESSAGE_ID_ATTRIBUTE: &str = "DeadLetterSourceMessageId";

/// Most entries in one batch call.
const MAX_BATCH_ENTRIES: usize = lambda_idempotency::publish::MAX_BATCH_ENTRIES;
/// Longest `MessageDeduplicationId`.
const MAX_ID_LEN: usize = 128;

/// How a redrive runs.
///
/// ```
/// use std::time::Duration;
/// use local_aws::redrive::RedriveOptions;
///
/// let options = RedriveOptions::default().max_messages(100).dry_run(true);
/// assert_eq!(options.max_messages, Some(100));
/// assert_eq!(options.drop_attribute_prefix, "DeadLetter");
/// assert_eq!(options.visibility_timeout, Duration::from_secs(60));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedriveOptions {
    /// Stop after receiving this many messages (default: no limit).
    pub max_messages: Option<usize>,
    /// Receive and report only: send nothing, delete nothing, and reset the visibility of what
    /// was received to 0 at the end.
    pub dry_run: bool,
    /// Message attributes whose name starts with this are not sent on (default
    /// [`DEAD_LETTER_ATTRIBUTE_PREFIX`]); an empty prefix keeps every attribute.
    pub drop_attribute_prefix: String,
    /// Visibility timeout of each receive: long enough to send and delete a batch (default 60 s,
    /// at most 12 hours). Messages the run keeps (failed ones) come back after it if the run
    /// is killed.
    pub visibility_timeout: Duration,
    /// Long-poll wait of each receive (default 1 s, at most 20 s); two empty receives in a row
    /// end the run.
    pub wait_time: Duration,
    /// Attempts per message for sends and deletes that fail for a reason that may pass
    /// (default 3, at least 1).
    pub attempts: u32,
}

impl Default for RedriveOptions {
    fn default() -> Self {
        Self {
            max_messages: None,
            dry_run: false,
            drop_attribute_prefix: DEAD_LETTER_ATTRIBUTE_PREFIX.to_owned(),
            visibility_timeout: Duration::from_secs(60),
            wait_time: Duration::from_secs(1),
            attempts: 3,
        }
    }
}

impl RedriveOptions {
    /// Stop after receiving `n` messages.
    pub fn max_messages(mut self, n: usize) -> Self {
        self.max_messages = Some(n);
        self
    }

    /// Receive and report only: send nothing, delete nothing (the `dry_run` field).
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// Drop the message attributes named with `prefix` (empty: keep them all).
    pub fn drop_attribute_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.drop_attribute_prefix = prefix.into();
        self
    }

    /// The visibility timeout of each receive.
    pub fn visibility_timeout(mut self, timeout: Duration) -> Self {
        self.visibility_timeout = timeout;
        self
    }

    /// The long-poll wait of each receive.
    pub fn wait_time(mut self, wait: Duration) -> Self {
        self.wait_time = wait;
        self
    }

    /// Attempts per send and delete (at least 1).
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts.max(1);
        self
    }

    /// Whether an attribute called `name` is sent on.
    fn keeps(&self, name: &str) -> bool {
        self.drop_attribute_prefix.is_empty() || !name.starts_with(&self.drop_attribute_prefix)
    }
}

/// What a redrive did. Every received message is in exactly one of `moved`, `failed` and
/// `not_deleted` (none of them in a dry run).
///
/// ```no_run
/// # async fn f(sqs: aws_sdk_sqs::Client) -> Result<(), local_aws::redrive::RedriveError> {
/// use local_aws::redrive::{redrive, RedriveOptions};
///
/// let report = redrive(&sqs, "http://127.0.0.1:4566/123456789012/payments-dlq.fifo",
///     "http://127.0.0.1:4566/123456789012/payments.fifo", RedriveOptions::default()).await?;
/// for (message_id, error) in &report.failed {
///     eprintln!("still in the dead-letter queue: {message_id}: {error}");
/// }
/// std::process::exit(if report.is_success() { 0 } else { 1 });
/// # }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedriveReport {
    /// The dead-letter queue.
    pub from_queue_url: String,
    /// The queue the messages were sent to.
    pub to_queue_url: String,
    /// A dry run: nothing was sent or deleted.
    pub dry_run: bool,
    /// Distinct messages received from the dead-letter queue.
    pub received: usize,
    /// Messages sent to the source queue and deleted from the dead-letter queue.
    pub moved: usize,
    /// For each moved message: its id in the dead-letter queue and its new id in the source
    /// queue, in the order they were sent.
    pub moved_ids: Vec<(String, String)>,
    /// Messages not sent, with why: they are still in the dead-letter queue, visible again.
    pub failed: Vec<(String, String)>,
    /// Messages sent to the source queue whose delete from the dead-letter queue failed: they
    /// are in both queues, and a later redrive would send them again (on a FIFO queue, within
    /// 5 minutes, with the same deduplication id, so the source queue drops that resend).
    pub not_deleted: Vec<(String, String)>,
    /// Messages whose visibility was reset to 0 at the end (failed, not deleted, dry run).
    pub released: usize,
    /// Messages whose visibility reset failed: they come back after the visibility timeout.
    pub release_failed: Vec<(String, String)>,
    /// Why the run stopped before the dead-letter queue was empty, if it did (other than
    /// [`RedriveOptions::max_messages`]).
    pub stopped: Option<String>,
    /// The dead-letter queue's approximate count (visible and in flight) at the end, when it
    /// could be read: what is left for another run or a look.
    pub left_in_dlq: Option<u64>,
    /// How long the run took.
    pub elapsed: Duration,
}

impl RedriveReport {
    /// Every received message was moved (or, in a dry run, nothing went wrong) and the run was
    /// not stopped.
    pub fn is_success(&self) -> bool {
        self.failed.is_empty()
            && self.not_deleted.is_empty()
            && self.stopped.is_none()
            && self.release_failed.is_empty()
    }
}

impl fmt::Display for RedriveReport {
    /// A summary: one line of counts, then one line per problem.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.elapsed.as_secs_f64();
        if self.dry_run {
            writeln!(
                f,
                "dry run: {} received, nothing sent or deleted, {} made visible again, in {secs:.1} s",
                self.received, self.released
            )?;
        } else {
            writeln!(
                f,
                "moved {} of {} received, {} failed, in {secs:.1} s",
                self.moved,
                self.received,
                self.failed.len() + self.not_deleted.len()
            )?;
        }
        for (id, error) in &self.failed {
            writeln!(f, "failed {id}: {error} (still in the dead-letter queue)")?;
        }
        for (id, error) in &self.not_deleted {
            writeln!(
                f,
                "not deleted {id}: {error} (sent to the source queue but still in the dead-letter queue: delete it there)"
            )?;
        }
        for (id, error) in &self.release_failed {
            writeln!(
                f,
                "visibility not reset {id}: {error} (visible again after the visibility timeout)"
            )?;
        }
        if let Some(reason) = &self.stopped {
            writeln!(f, "stopped early: {reason}")?;
        }
        if let Some(left) = self.left_in_dlq {
            writeln!(f, "left in the dead-letter queue: about {left}")?;
        }
        Ok(())
    }
}

/// Why a redrive could not run, or a queue could not be found.
#[derive(Debug, thiserror::Error)]
pub enum RedriveError {
    /// The dead-letter queue and the target are the same queue.
    #[error("the dead-letter queue and the target are the same queue: {0}")]
    SameQueue(String),
    /// The first receive from the dead-letter queue failed: nothing was done.
    #[error("cannot receive from {queue_url}: {message}")]
    Receive {
        /// The dead-letter queue.
        queue_url: String,
        /// The SDK error.
        message: String,
    },
    /// A queue could not be found.
    #[error("no queue {spec}: {message}")]
    UnknownQueue {
        /// What was asked for (logical id, name or URL).
        spec: String,
        /// Why.
        message: String,
    },
    /// No queue has this dead-letter queue in its redrive policy.
    #[error(
        "no queue sends its dead letters to {dlq} (neither in the template nor by ListDeadLetterSourceQueues): name the target"
    )]
    NoSourceQueue {
        /// The dead-letter queue.
        dlq: String,
    },
    /// Several queues have this dead-letter queue in their redrive policy.
    #[error("several queues send their dead letters to {dlq}: {}; name the target", candidates.join(", "))]
    AmbiguousSource {
        /// The dead-letter queue.
        dlq: String,
        /// The candidates.
        candidates: Vec<String>,
    },
}

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

fn sdk_error<E, R>(e: &SdkError<E, R>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: fmt::Debug,
{
    match e.code() {
        Some(code) => format!("{code}: {}", e.message().unwrap_or_default()),
        None => DisplayErrorContext(e).to_string(),
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
                true => format!("GetQueueUrl {name} (provisioned?): {}", sdk_error(&e)),
                false => format!(
                    "not a logical id of the template, nor a URL; GetQueueUrl {name}: {}",
                    sdk_error(&e)
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
            message: format!("ListDeadLetterSourceQueues: {}", sdk_error(&e)),
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

/// The `MessageDeduplicationId` a redrive gives the dead-letter message `message_id`, first
/// received from the dead-letter queue at `first_receive` (`ApproximateFirstReceiveTimestamp`,
/// epoch ms): `redrive-{message_id}-{first_receive}`.
///
/// It is new (never the message's original id, which the source queue may still remember and
/// would deduplicate against) and unique to this copy in the dead-letter queue: a message that
/// comes back to the dead-letter queue after a redrive has another id there. It is also stable:
/// if a send's outcome was unknown or the delete failed, sending the same copy again within 5
/// minutes is deduplicated by the source queue instead of doubled. Without a usable timestamp or
/// id it is a random UUID.
///
/// ```
/// use local_aws::redrive::redrive_deduplication_id;
///
/// let id = redrive_deduplication_id("0b3a7c9e-1f2d-4e5f-8a9b-0c1d2e3f4a5b", Some("1767225600000"));
/// assert_eq!(id, "redrive-0b3a7c9e-1f2d-4e5f-8a9b-0c1d2e3f4a5b-1767225600000");
/// assert!(redrive_deduplication_id("id", None).starts_with("redrive-"));
/// assert_ne!(redrive_deduplication_id("id", None), redrive_deduplication_id("id", None));
/// ```
pub fn redrive_deduplication_id(message_id: &str, first_receive: Option<&str>) -> String {
    let valid = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c.is_ascii_punctuation())
    };
    match first_receive {
        Some(ts) if valid(ts) && valid(message_id) => {
            let id = format!("redrive-{message_id}-{ts}");
            if id.len() <= MAX_ID_LEN {
                return id;
            }
            format!("redrive-{}", uuid::Uuid::new_v4())
        }
        _ => format!("redrive-{}", uuid::Uuid::new_v4()),
    }
}

/// A message on its way to the source queue.
#[derive(Clone, Debug)]
struct Outgoing {
    dlq_id: String,
    receipt: String,
    group: Option<String>,
    dedup: Option<String>,
    body: String,
    attributes: HashMap<String, MessageAttributeValue>,
    trace_header: Option<String>,
}

impl Outgoing {
    /// Size as SQS counts it.
    fn size(&self) -> usize {
        lambda_idempotency::publish::message_size(&self.body, &self.attributes)
    }

    fn entry(&self, id: usize) -> SendMessageBatchRequestEntry {
        let trace = self.trace_header.as_ref().and_then(|t| {
            MessageSystemAttributeValue::builder()
                .data_type("String")
                .string_value(t)
                .build()
                .ok()
        });
        let mut entry = SendMessageBatchRequestEntry::builder()
            .id(id.to_string())
            .message_body(&self.body)
            .set_message_group_id(self.group.clone())
            .set_message_deduplication_id(self.dedup.clone())
            .set_message_attributes((!self.attributes.is_empty()).then(|| self.attributes.clone()));
        if let Some(trace) = trace {
            entry = entry.message_system_attributes(
                MessageSystemAttributeNameForSends::AwsTraceHeader,
                trace,
            );
        }
        entry.build().expect("id and body are set")
    }
}

/// The message as it goes to the source queue, or why it cannot.
fn outgoing(
    message: &Message,
    dlq_id: &str,
    receipt: &str,
    to_fifo: bool,
    options: &RedriveOptions,
) -> Result<Outgoing, String> {
    let system = message.attributes();
    let system = |name: MessageSystemAttributeName| system.and_then(|a| a.get(&name)).cloned();
    let body = message
        .body()
        .filter(|b| !b.is_empty())
        .ok_or("the message has no body")?
        .to_owned();
    let group = system(MessageSystemAttributeName::MessageGroupId);
    if to_fifo && group.is_none() {
        return Err("the message has no MessageGroupId: it cannot go to a FIFO queue".to_owned());
    }
    let dedup = to_fifo.then(|| {
        redrive_deduplication_id(
            dlq_id,
            system(MessageSystemAttributeName::ApproximateFirstReceiveTimestamp).as_deref(),
        )
    });
    let attributes = message
        .message_attributes()
        .into_iter()
        .flatten()
        .filter(|(name, _)| options.keeps(name))
        .map(|(name, value)| {
            // Only the type and the value: the list values are not implemented by SQS.
            let value = MessageAttributeValue::builder()
                .data_type(value.data_type())
                .set_string_value(value.string_value().map(str::to_owned))
                .set_binary_value(value.binary_value().cloned())
                .build()
                .map_err(|e| format!("message attribute {name}: {e}"))?;
            Ok((name.clone(), value))
        })
        .collect::<Result<_, String>>()?;
    Ok(Outgoing {
        dlq_id: dlq_id.to_owned(),
        receipt: receipt.to_owned(),
        group,
        dedup,
        body,
        attributes,
        trace_header: system(MessageSystemAttributeName::AwsTraceHeader),
    })
}

/// FIFO: splits `groups` (one per message, in order) into waves: wave `k` holds the `k`-th
/// message of each group, so that no send call carries two messages of one group and a group's
/// later message is only sent once its earlier one is. Without FIFO: one wave.
fn plan_waves(groups: &[Option<&str>], fifo: bool) -> Vec<Vec<usize>> {
    if !fifo {
        return if groups.is_empty() {
            vec![]
        } else {
            vec![(0..groups.len()).collect()]
        };
    }
    let mut seen: HashMap<Option<&str>, usize> = HashMap::new();
    let mut waves: Vec<Vec<usize>> = Vec::new();
    for (i, g) in groups.iter().enumerate() {
        let n = seen.entry(*g).or_default();
        if waves.len() <= *n {
            waves.push(Vec::new());
        }
        waves[*n].push(i);
        *n += 1;
    }
    waves
}

/// Packs items of `sizes`, in order, into batches of at most 10 entries and 1 MiB.
fn plan_batches(sizes: &[usize]) -> Vec<Vec<usize>> {
    lambda_idempotency::publish::plan_batches_by_size(sizes)
}

/// True for an HTTP 4xx that is not throttling: the caller's mistake, not worth a retry.
fn is_client_fault(status: u16, code: Option<&str>) -> bool {
    (400..500).contains(&status) && status != 429 && !code.is_some_and(|c| c.contains("Throttl"))
}

/// Errors about the queue or the caller, not the messages: every other send would fail too.
fn is_queue_level(code: &str) -> bool {
    [
        "NonExistentQueue",
        "QueueDoesNotExist",
        "AccessDenied",
        "InvalidAddress",
        "InvalidSecurity",
        "InvalidClientTokenId",
        "UnrecognizedClient",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "KmsAccessDenied",
        "KmsDisabled",
        "KmsNotFound",
    ]
    .iter()
    .any(|c| code.contains(c))
}

fn backoff(retry: u32) -> Duration {
    Duration::from_millis(100u64.saturating_mul(1 << retry.min(6)))
}

/// Why a message is still held (invisible) in the dead-letter queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HoldKind {
    Failed,
    NotDeleted,
    DryRun,
}

#[derive(Debug)]
struct Held {
    dlq_id: String,
    receipt: String,
    kind: HoldKind,
    error: String,
    /// Its id in the source queue, for a message sent but not deleted.
    sent_as: Option<String>,
}

struct Run<'a> {
    sqs: &'a Client,
    from: &'a str,
    to: &'a str,
    from_fifo: bool,
    to_fifo: bool,
    options: &'a RedriveOptions,
    report: RedriveReport,
    held: Vec<Held>,
    held_index: HashMap<String, usize>,
    /// Dead-letter ids moved (sent and deleted) in this run.
    moved: HashSet<String>,
    /// Source-queue ids of what this run sent: such a message back in the dead-letter queue
    /// failed again and is not sent a second time.
    sent: HashSet<String>,
    /// FIFO groups with a message that was not sent, and that message.
    blocked: HashMap<String, String>,
}

/// The message's id and receipt handle (a message without them cannot be handled at all).
fn ids(m: &Message) -> Option<(String, String)> {
    Some((m.message_id()?.to_owned(), m.receipt_handle()?.to_owned()))
}

impl<'a> Run<'a> {
    fn hold(&mut self, dlq_id: &str, receipt: &str, kind: HoldKind, error: String) {
        let held = Held {
            dlq_id: dlq_id.to_owned(),
            receipt: receipt.to_owned(),
            kind,
            error,
            sent_as: None,
        };
        match self.held_index.get(dlq_id) {
            Some(&i) => self.held[i] = held,
            None => {
                self.held_index.insert(dlq_id.to_owned(), self.held.len());
                self.held.push(held);
            }
        }
    }

    /// Marks `message` failed; on a FIFO target its group is blocked from then on.
    fn fail(&mut self, dlq_id: &str, receipt: &str, group: Option<&str>, error: String) {
        if self.to_fifo
            && let Some(g) = group
        {
            self.blocked
                .entry(g.to_owned())
                .or_insert_with(|| dlq_id.to_owned());
        }
        self.hold(dlq_id, receipt, HoldKind::Failed, error);
    }

    async fn receive(&self, max: usize) -> Result<Vec<Message>, String> {
        let secs = |d: Duration, max: u64| d.as_secs().min(max) as i32;
        let mut request = self
            .sqs
            .receive_message()
            .queue_url(self.from)
            .max_number_of_messages(max.clamp(1, MAX_BATCH_ENTRIES) as i32)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .visibility_timeout(secs(self.options.visibility_timeout, 43_200).max(1))
            .wait_time_seconds(secs(self.options.wait_time, 20));
        if self.from_fifo {
            // A retried receive (same attempt id) returns the same messages, not new ones.
            request = request.receive_request_attempt_id(uuid::Uuid::new_v4().to_string());
        }
        request
            .send()
            .await
            .map(|out| out.messages.unwrap_or_default())
            .map_err(|e| sdk_error(&e))
    }

    /// The messages not seen before in this run. A message seen before gets its new receipt
    /// handle; one that was sent but not deleted, or moved and delivered again, is deleted.
    async fn sort_out(&mut self, messages: Vec<Message>) -> Vec<Message> {
        let mut fresh = Vec::new();
        let mut redelete = Vec::new();
        for m in messages {
            let Some((id, receipt)) = ids(&m) else {
                continue;
            };
            if let Some(&i) = self.held_index.get(&id) {
                self.held[i].receipt = receipt.clone();
                if self.held[i].kind == HoldKind::NotDeleted {
                    redelete.push((id, receipt));
                }
            } else if self.moved.contains(&id) {
                redelete.push((id, receipt));
            } else {
                fresh.push(m);
            }
        }
        if !redelete.is_empty() {
            for (id, result) in self.delete(redelete).await {
                if let (Ok(()), Some(&i)) = (&result, self.held_index.get(&id))
                    && self.held[i].kind == HoldKind::NotDeleted
                {
                    let sent_as = self.held[i].sent_as.clone().unwrap_or_default();
                    self.unhold(&id);
                    self.moved.insert(id.clone());
                    self.report.moved += 1;
                    self.report.moved_ids.push((id, sent_as));
                }
            }
        }
        fresh
    }

    fn unhold(&mut self, dlq_id: &str) {
        if let Some(i) = self.held_index.remove(dlq_id) {
            self.held.remove(i);
            for v in self.held_index.values_mut() {
                if *v > i {
                    *v -= 1;
                }
            }
        }
    }

    /// Sends `fresh` on and deletes what was sent. `Err`: the target refuses every send.
    async fn move_messages(&mut self, fresh: Vec<Message>) -> Result<(), String> {
        let mut pending: Vec<Outgoing> = Vec::new();
        for m in &fresh {
            let Some((id, receipt)) = ids(m) else {
                continue;
            };
            let group = m
                .attributes()
                .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
                .cloned();
            let came_back = self.sent.contains(&id)
                || m.message_attributes()
                    .and_then(|a| a.get(SOURCE_MESSAGE_ID_ATTRIBUTE))
                    .and_then(|v| v.string_value())
                    .is_some_and(|source| self.sent.contains(source));
            if came_back {
                let error = "sent on by this redrive, it failed again and came back to the \
                             dead-letter queue: not sent a second time"
                    .to_owned();
                self.fail(&id, &receipt, group.as_deref(), error);
                continue;
            }
            if let Some(first) = group.as_ref().and_then(|g| self.blocked.get(g))
                && self.to_fifo
            {
                let error = format!(
                    "not sent: message {first} of its group ({}) was not sent, and the group keeps its order",
                    group.as_deref().unwrap_or_default()
                );
                self.fail(&id, &receipt, group.as_deref(), error);
                continue;
            }
            match outgoing(m, &id, &receipt, self.to_fifo, self.options) {
                Ok(o) => pending.push(o),
                Err(error) => self.fail(&id, &receipt, group.as_deref(), error),
            }
        }
        let groups: Vec<Option<&str>> = pending.iter().map(|o| o.group.as_deref()).collect();
        let waves = plan_waves(&groups, self.to_fifo);
        let mut stop: Option<String> = None;
        for wave in waves {
            let mut sendable = Vec::new();
            for i in wave {
                let o = &pending[i];
                if let Some(reason) = &stop {
                    let error = format!("not sent: the run stopped ({reason})");
                    let (id, receipt, group) =
                        (o.dlq_id.clone(), o.receipt.clone(), o.group.clone());
                    self.fail(&id, &receipt, group.as_deref(), error);
                } else if let Some(first) = o.group.as_ref().and_then(|g| self.blocked.get(g)) {
                    let error = format!(
                        "not sent: message {first} of its group ({}) was not sent, and the group keeps its order",
                        o.group.as_deref().unwrap_or_default()
                    );
                    let (id, receipt, group) =
                        (o.dlq_id.clone(), o.receipt.clone(), o.group.clone());
                    self.fail(&id, &receipt, group.as_deref(), error);
                } else {
                    sendable.push(o.clone());
                }
            }
            let sizes: Vec<usize> = sendable.iter().map(Outgoing::size).collect();
            for batch in plan_batches(&sizes) {
                let batch: Vec<Outgoing> = batch.into_iter().map(|i| sendable[i].clone()).collect();
                if let Some(reason) = &stop {
                    for o in &batch {
                        let error = format!("not sent: the run stopped ({reason})");
                        self.fail(&o.dlq_id, &o.receipt, o.group.as_deref(), error);
                    }
                    continue;
                }
                let (results, fatal) = self.send(&batch).await;
                let mut to_delete = Vec::new();
                for (o, result) in batch.iter().zip(results) {
                    match result {
                        Ok(new_id) => {
                            self.sent.insert(new_id.clone());
                            to_delete.push((o, new_id));
                        }
                        Err(error) => self.fail(&o.dlq_id, &o.receipt, o.group.as_deref(), error),
                    }
                }
                self.delete_sent(to_delete).await;
                if let Some(fatal) = fatal {
                    stop = Some(fatal);
                }
            }
        }
        stop.map_or(Ok(()), Err)
    }

    /// Deletes the sent messages from the dead-letter queue.
    async fn delete_sent(&mut self, sent: Vec<(&Outgoing, String)>) {
        if sent.is_empty() {
            return;
        }
        let new_ids: HashMap<String, String> = sent
            .iter()
            .map(|(o, new_id)| (o.dlq_id.clone(), new_id.clone()))
            .collect();
        let results = self
            .delete(
                sent.iter()
                    .map(|(o, _)| (o.dlq_id.clone(), o.receipt.clone()))
                    .collect(),
            )
            .await;
        let receipts: HashMap<&str, &str> = sent
            .iter()
            .map(|(o, _)| (o.dlq_id.as_str(), o.receipt.as_str()))
            .collect();
        for (id, result) in results {
            let new_id = new_ids.get(&id).cloned().unwrap_or_default();
            match result {
                Ok(()) => {
                    self.moved.insert(id.clone());
                    self.report.moved += 1;
                    self.report.moved_ids.push((id, new_id));
                }
                Err(error) => {
                    let receipt = receipts.get(id.as_str()).copied().unwrap_or_default();
                    self.hold(&id, receipt, HoldKind::NotDeleted, error);
                    let i = self.held_index[&id];
                    self.held[i].sent_as = Some(new_id);
                }
            }
        }
    }

    /// Sends one batch (at most 10 entries and 1 MiB), retrying what may pass. Answers per
    /// entry (the new message id or the error), and the error that makes every send fail, if
    /// that is what happened.
    async fn send(&self, batch: &[Outgoing]) -> (Vec<Result<String, String>>, Option<String>) {
        let mut results: Vec<Option<Result<String, String>>> = vec![None; batch.len()];
        let mut pending: Vec<usize> = (0..batch.len()).collect();
        let mut last_error: HashMap<usize, String> = HashMap::new();
        for attempt in 1..=self.options.attempts {
            if attempt > 1 {
                tokio::time::sleep(backoff(attempt - 2)).await;
            }
            let entries = pending.iter().map(|&p| batch[p].entry(p)).collect();
            let response = self
                .sqs
                .send_message_batch()
                .queue_url(self.to)
                .set_entries(Some(entries))
                .send()
                .await;
            let output = match response {
                Ok(output) => output,
                Err(SdkError::ServiceError(e))
                    if is_client_fault(e.raw().status().as_u16(), e.err().code()) =>
                {
                    let code = e.err().code().unwrap_or("ClientError").to_owned();
                    let text = format!(
                        "SendMessageBatch refused ({code}): {}",
                        e.err().message().unwrap_or_default()
                    );
                    if is_queue_level(&code) {
                        for &p in &pending {
                            results[p] = Some(Err(text.clone()));
                        }
                        return (flatten(results, &last_error), Some(text));
                    }
                    if pending.len() == 1 {
                        results[pending[0]] = Some(Err(text));
                        break;
                    }
                    // The request was refused for one entry (an emulator may refuse the whole
                    // batch for it): send each alone to find which.
                    let mut fatal = None;
                    for &p in &pending {
                        let (mut single, f) =
                            Box::pin(self.send(std::slice::from_ref(&batch[p]))).await;
                        results[p] = single.pop();
                        if f.is_some() {
                            fatal = f;
                            break;
                        }
                    }
                    return (flatten(results, &last_error), fatal);
                }
                Err(e) => {
                    let text = sdk_error(&e);
                    for &p in &pending {
                        last_error.insert(p, text.clone());
                    }
                    continue;
                }
            };
            for ok in output.successful() {
                if let Ok(p) = ok.id().parse::<usize>()
                    && p < batch.len()
                {
                    results[p] = Some(Ok(ok.message_id().to_owned()));
                }
            }
            for failed in output.failed() {
                let Ok(p) = failed.id().parse::<usize>() else {
                    continue;
                };
                if p >= batch.len() {
                    continue;
                }
                let text = format!(
                    "{}: {}",
                    failed.code(),
                    failed.message().unwrap_or_default()
                );
                if failed.sender_fault() {
                    results[p] = Some(Err(text));
                } else {
                    last_error.insert(p, text);
                }
            }
            pending.retain(|&p| results[p].is_none());
            if pending.is_empty() {
                break;
            }
        }
        (flatten(results, &last_error), None)
    }

    /// Deletes `(message id, receipt handle)` pairs from the dead-letter queue, retrying what
    /// may pass; answers per message.
    async fn delete(&self, items: Vec<(String, String)>) -> Vec<(String, Result<(), String>)> {
        let mut out = Vec::with_capacity(items.len());
        for chunk in items.chunks(MAX_BATCH_ENTRIES) {
            let mut results: Vec<Option<Result<(), String>>> = vec![None; chunk.len()];
            let mut pending: Vec<usize> = (0..chunk.len()).collect();
            let mut last_error: HashMap<usize, String> = HashMap::new();
            for attempt in 1..=self.options.attempts {
                if attempt > 1 {
                    tokio::time::sleep(backoff(attempt - 2)).await;
                }
                let entries = pending
                    .iter()
                    .map(|&p| {
                        DeleteMessageBatchRequestEntry::builder()
                            .id(p.to_string())
                            .receipt_handle(&chunk[p].1)
                            .build()
                            .expect("id and receipt handle are set")
                    })
                    .collect();
                match self
                    .sqs
                    .delete_message_batch()
                    .queue_url(self.from)
                    .set_entries(Some(entries))
                    .send()
                    .await
                {
                    Ok(output) => {
                        for ok in output.successful() {
                            if let Ok(p) = ok.id().parse::<usize>()
                                && p < chunk.len()
                            {
                                results[p] = Some(Ok(()));
                            }
                        }
                        for failed in output.failed() {
                            let Ok(p) = failed.id().parse::<usize>() else {
                                continue;
                            };
                            if p >= chunk.len() {
                                continue;
                            }
                            let text = format!(
                                "DeleteMessageBatch: {}: {}",
                                failed.code(),
                                failed.message().unwrap_or_default()
                            );
                            if failed.sender_fault() {
                                results[p] = Some(Err(text));
                            } else {
                                last_error.insert(p, text);
                            }
                        }
                    }
                    Err(e) => {
                        let text = format!("DeleteMessageBatch: {}", sdk_error(&e));
                        for &p in &pending {
                            last_error.insert(p, text.clone());
                        }
                    }
                }
                pending.retain(|&p| results[p].is_none());
                if pending.is_empty() {
                    break;
                }
            }
            for (p, (id, _)) in chunk.iter().enumerate() {
                let result = results[p].take().unwrap_or_else(|| {
                    Err(last_error
                        .remove(&p)
                        .unwrap_or_else(|| "DeleteMessageBatch: no answer for the entry".into()))
                });
                out.push((id.clone(), result));
            }
        }
        out
    }

    /// The dead-letter queue's approximate visible and in-flight count.
    async fn left_in_dlq(&self) -> Option<u64> {
        let attributes = self
            .sqs
            .get_queue_attributes()
            .queue_url(self.from)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .ok()?
            .attributes?;
        [
            QueueAttributeName::ApproximateNumberOfMessages,
            QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
        ]
        .iter()
        .map(|name| attributes.get(name)?.parse::<u64>().ok())
        .sum()
    }

    /// Resets the visibility of every held message to 0, and fills the report's lists.
    async fn release(&mut self) {
        let held = std::mem::take(&mut self.held);
        self.held_index.clear();
        for chunk in held.chunks(MAX_BATCH_ENTRIES) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(p, h)| {
                    ChangeMessageVisibilityBatchRequestEntry::builder()
                        .id(p.to_string())
                        .receipt_handle(&h.receipt)
                        .visibility_timeout(0)
                        .build()
                        .expect("id and receipt handle are set")
                })
                .collect();
            let response = self
                .sqs
                .change_message_visibility_batch()
                .queue_url(self.from)
                .set_entries(Some(entries))
                .send()
                .await;
            match response {
                Ok(output) => {
                    self.report.released += output.successful().len();
                    for failed in output.failed() {
                        if let Some(h) =
                            failed.id().parse::<usize>().ok().and_then(|p| chunk.get(p))
                        {
                            self.report.release_failed.push((
                                h.dlq_id.clone(),
                                format!(
                                    "{}: {}",
                                    failed.code(),
                                    failed.message().unwrap_or_default()
                                ),
                            ));
                        }
                    }
                }
                Err(e) => {
                    let text = format!("ChangeMessageVisibilityBatch: {}", sdk_error(&e));
                    for h in chunk {
                        self.report
                            .release_failed
                            .push((h.dlq_id.clone(), text.clone()));
                    }
                }
            }
        }
        for h in held {
            match h.kind {
                HoldKind::Failed => self.report.failed.push((h.dlq_id, h.error)),
                HoldKind::NotDeleted => self.report.not_deleted.push((h.dlq_id, h.error)),
                HoldKind::DryRun => {}
            }
        }
    }
}

fn flatten(
    results: Vec<Option<Result<String, String>>>,
    last_error: &HashMap<usize, String>,
) -> Vec<Result<String, String>> {
    results
        .into_iter()
        .enumerate()
        .map(|(p, r)| {
            r.unwrap_or_else(|| {
                Err(last_error
                    .get(&p)
                    .map(|e| format!("not sent after every attempt: {e}"))
                    .unwrap_or_else(|| "SendMessageBatch: no answer for the entry".into()))
            })
        })
        .collect()
}

/// Moves the messages of the dead-letter queue `from_dlq_url` to `to_queue_url`; see the
/// [module docs](crate::redrive) for what is sent, kept and deleted.
///
/// `Err` only when nothing could be done: the queues are the same, or the first receive from
/// the dead-letter queue failed. Anything that goes wrong later is in the report, with what was
/// done before ([`RedriveReport::stopped`], [`RedriveReport::failed`]).
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use local_aws::redrive::{redrive, RedriveOptions};
///
/// let sqs = aws_sdk_sqs::Client::new(&local_aws::local_sdk_config().await?);
/// let (dlq, source) = ("http://127.0.0.1:4566/123456789012/receipts-dlq",
///                      "http://127.0.0.1:4566/123456789012/receipts");
/// // Look first: receive, report, put back.
/// let preview = redrive(&sqs, dlq, source, RedriveOptions::default().dry_run(true)).await?;
/// println!("{} messages in the dead-letter queue", preview.received);
/// let report = redrive(&sqs, dlq, source, RedriveOptions::default().max_messages(1000)).await?;
/// println!("moved {} of {}", report.moved, report.received);
/// # Ok(()) }
/// ```
pub async fn redrive(
    sqs: &Client,
    from_dlq_url: &str,
    to_queue_url: &str,
    options: RedriveOptions,
) -> Result<RedriveReport, RedriveError> {
    if from_dlq_url.trim_end_matches('/') == to_queue_url.trim_end_matches('/') {
        return Err(RedriveError::SameQueue(from_dlq_url.to_owned()));
    }
    let started = Instant::now();
    let mut run = Run {
        sqs,
        from: from_dlq_url,
        to: to_queue_url,
        from_fifo: from_dlq_url.trim_end_matches('/').ends_with(".fifo"),
        to_fifo: to_queue_url.trim_end_matches('/').ends_with(".fifo"),
        options: &options,
        report: RedriveReport {
            from_queue_url: from_dlq_url.to_owned(),
            to_queue_url: to_queue_url.to_owned(),
            dry_run: options.dry_run,
            ..RedriveReport::default()
        },
        held: Vec::new(),
        held_index: HashMap::new(),
        moved: HashSet::new(),
        sent: HashSet::new(),
        blocked: HashMap::new(),
    };
    let mut empty_in_a_row = 0;
    let mut first = true;
    loop {
        let remaining = options
            .max_messages
            .map(|m| m.saturating_sub(run.report.received));
        if remaining == Some(0) {
            break;
        }
        let messages = match run.receive(remaining.unwrap_or(MAX_BATCH_ENTRIES)).await {
            Ok(messages) => messages,
            Err(message) if first => {
                return Err(RedriveError::Receive {
                    queue_url: from_dlq_url.to_owned(),
                    message,
                });
            }
            Err(message) => {
                run.report.stopped = Some(format!("ReceiveMessage failed: {message}"));
                break;
            }
        };
        first = false;
        let fresh = run.sort_out(messages).await;
        if fresh.is_empty() {
            empty_in_a_row += 1;
            if empty_in_a_row >= 2 {
                break;
            }
            continue;
        }
        empty_in_a_row = 0;
        run.report.received += fresh.len();
        if options.dry_run {
            for m in &fresh {
                if let Some((id, receipt)) = ids(m) {
                    run.hold(&id, &receipt, HoldKind::DryRun, String::new());
                }
            }
            continue;
        }
        if let Err(reason) = run.move_messages(fresh).await {
            run.report.stopped = Some(reason);
            break;
        }
    }
    run.release().await;
    run.report.left_in_dlq = run.left_in_dlq().await;
    run.report.elapsed = started.elapsed();
    Ok(run.report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waves_hold_one_message_per_group_in_order() {
        let groups = [
            Some("a"),
            Some("b"),
            Some("a"),
            Some("c"),
            Some("a"),
            Some("b"),
        ];
        assert_eq!(
            plan_waves(&groups, true),
            vec![vec![0, 1, 3], vec![2, 5], vec![4]]
        );
        assert_eq!(plan_waves(&groups, false), vec![vec![0, 1, 2, 3, 4, 5]]);
        assert!(plan_waves(&[], false).is_empty());
    }

    #[test]
    fn batches_of_ten_and_one_mib() {
        let sizes: Vec<_> = plan_batches(&[10; 25]).iter().map(Vec::len).collect();
        assert_eq!(sizes, [10, 10, 5]);
        let sizes: Vec<_> = plan_batches(&[400 * 1024; 5])
            .iter()
            .map(Vec::len)
            .collect();
        assert_eq!(sizes, [2, 2, 1]);
    }

    #[test]
    fn dedup_ids_are_valid_and_new() {
        let id = redrive_deduplication_id(&"x".repeat(200), Some("1"));
        assert!(id.len() <= MAX_ID_LEN && id.starts_with("redrive-"));
        let id = redrive_deduplication_id("has space", Some("1"));
        assert!(!id.contains(' '));
    }

    #[test]
    fn the_dead_letter_prefix_is_dropped_unless_empty() {
        let options = RedriveOptions::default();
        assert!(!options.keeps("DeadLetterReason"));
        assert!(options.keeps("kind"));
        assert!(
            RedriveOptions::default()
                .drop_attribute_prefix("")
                .keeps("DeadLetterReason")
        );
    }

    /// `redrive` can run in a spawned task.
    #[allow(dead_code)]
    fn the_future_is_send(sqs: &Client) {
        fn send<T: Send>(_: T) {}
        send(redrive(sqs, "a", "b", RedriveOptions::default()));
    }

    #[test]
    fn queue_level_errors() {
        assert!(is_queue_level("AWS.SimpleQueueService.NonExistentQueue"));
        assert!(is_queue_level("QueueDoesNotExist"));
        assert!(!is_queue_level("InvalidParameterValue"));
        assert!(is_client_fault(400, Some("InvalidParameterValue")));
        assert!(!is_client_fault(400, Some("ThrottlingException")));
        assert!(!is_client_fault(500, None));
    }
}
