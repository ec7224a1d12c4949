//! The publisher: sending planned calls, several in flight, retrying failed entries, and keeping
//! each message group's order.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use futures_util::{StreamExt, stream};
use tokio::sync::watch;

use super::fault::{error_text, is_client_fault, is_queue_level};
use super::{Message, MessageGroupId, jitter, plan_batches};

/// A message that SQS accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// The SQS message id.
    pub message_id: String,
    /// The sequence number (FIFO queues).
    pub sequence_number: Option<String>,
}

/// Why a message was not sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PublishError {
    /// SQS refused the entry as the sender's fault; it is not retried.
    #[error("SQS refused the message ({code}): {message}")]
    Rejected {
        /// The error code.
        code: String,
        /// The error message.
        message: String,
    },
    /// The queue is FIFO (its URL ends in `.fifo`) and the message is not: nothing was sent.
    #[error(
        "{queue_url} is a FIFO queue, but the message has no MessageGroupId (build it with Message::fifo)"
    )]
    NotFifo {
        /// The queue.
        queue_url: String,
    },
    /// The entry still failed after every attempt. (If the last attempts timed out, SQS may
    /// have accepted it all the same: resending it with the same deduplication id within 5
    /// minutes cannot make a second copy.)
    #[error("not sent after {attempts} attempts; last error: {last_error}")]
    Exhausted {
        /// Attempts made.
        attempts: u32,
        /// The last error.
        last_error: String,
    },
    /// The message was not sent, because an earlier message of its group in the same
    /// [`Publisher::send_all`] was not sent either: sending this one would have put it ahead of
    /// that one. To keep the group's order, send again from that earlier message on.
    #[error(
        "not sent: message {earlier} of group {group_id}, earlier in the same send, was not sent, \
         and this one may not overtake it"
    )]
    EarlierInGroupFailed {
        /// The message group.
        group_id: String,
        /// The index, in the messages given to `send_all`, of the first message of the group
        /// that was not sent.
        earlier: usize,
    },
}

/// Sends messages to one queue in batches.
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use lambda_idempotency::publish::{DeduplicationId, Message, MessageGroupId, Publisher};
///
/// let config = aws_config::load_from_env().await;
/// let publisher = Publisher::new(aws_sdk_sqs::Client::new(&config), "https://sqs.../payments.fifo");
/// let messages = (0..25)
///     .map(|i| Message::fifo(MessageGroupId::new("acct-1")?, DeduplicationId::from_key(&format!("p-{i}")), "{}"))
///     .collect::<Result<Vec<_>, _>>()?;
/// for result in publisher.send_all(messages).await {
///     println!("{:?}", result?.message_id);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Publisher {
    client: Client,
    queue_url: String,
    in_flight: usize,
    max_attempts: u32,
    base_backoff: Duration,
    max_backoff: Duration,
}

impl Publisher {
    /// A publisher to `queue_url`: 4 calls in flight, 5 attempts per entry, backoff from 50 ms
    /// to 2 s.
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
            in_flight: 4,
            max_attempts: 5,
            base_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
        }
    }

    /// How many `SendMessageBatch` calls may be in flight at once (at least 1).
    pub fn in_flight(mut self, calls: usize) -> Self {
        self.in_flight = calls.max(1);
        self
    }

    /// How many times an entry is tried in all (at least 1).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Backoff before retry `n` (from 1): `min(base * 2^(n-1), max)`, with full jitter.
    pub fn backoff(mut self, base: Duration, max: Duration) -> Self {
        self.base_backoff = base;
        self.max_backoff = max.max(base);
        self
    }

    /// The queue URL.
    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }

    /// Sends one message (a batch of one).
    pub async fn send(&self, message: Message) -> Result<Sent, PublishError> {
        self.send_all(vec![message])
            .await
            .pop()
            .expect("one result per message")
    }

    /// Sends every message, and answers for each, in the order given.
    ///
    /// The messages of one group reach the queue in the order given, whatever fails: two of them
    /// never share a call, each waits until every earlier one of its group has been accepted,
    /// and once one of them fails for good (refused, or still failing after every attempt), the
    /// later ones are not sent and answer [`PublishError::EarlierInGroupFailed`].
    pub async fn send_all(&self, messages: Vec<Message>) -> Vec<Result<Sent, PublishError>> {
        let mut results: Vec<Option<Result<Sent, PublishError>>> =
            messages.iter().map(|_| None).collect();
        let mut sendable = Vec::with_capacity(messages.len());
        for (i, message) in messages.iter().enumerate() {
            if self.queue_url.ends_with(".fifo") && message.group_id().is_none() {
                results[i] = Some(Err(PublishError::NotFifo {
                    queue_url: self.queue_url.clone(),
                }));
            } else {
                sendable.push(i);
            }
        }
        let batches: Vec<Vec<usize>> =
            plan_batches(&sendable.iter().map(|&i| &messages[i]).collect::<Vec<_>>())
                .into_iter()
                .map(|batch| batch.into_iter().map(|j| sendable[j]).collect())
                .collect();
        let waits = group_dependencies(&messages, &batches);
        // The groups that lost a message for good, with the index of the first one lost.
        let failed_groups: Mutex<HashMap<&str, usize>> = Mutex::default();
        let (done_senders, done_receivers): (Vec<_>, Vec<_>) =
            batches.iter().map(|_| watch::channel(false)).unzip();
        let jobs = batches
            .into_iter()
            .zip(waits)
            .zip(done_senders)
            .map(|((batch, deps), done)| {
                let deps: Vec<_> = deps.iter().map(|&d| done_receivers[d].clone()).collect();
                let (messages, failed_groups) = (&messages, &failed_groups);
                async move {
                    for mut dep in deps {
                        // An Err means the sender is gone, which only happens once it is done.
                        let _ = dep.wait_for(|finished| *finished).await;
                    }
                    let answers = self.send_in_turn(messages, batch, failed_groups).await;
                    let _ = done.send(true);
                    answers
                }
            });
        let finished: Vec<_> = stream::iter(jobs)
            .buffer_unordered(self.in_flight)
            .collect()
            .await;
        for (i, r) in finished.into_iter().flatten() {
            results[i] = Some(r);
        }
        results
            .into_iter()
            .map(|r| r.expect("every message has a result"))
            .collect()
    }

    /// Sends a planned batch whose turn has come (every earlier message of its groups has its
    /// answer): not its messages whose group has already lost one, which answer
    /// [`PublishError::EarlierInGroupFailed`]; and records the groups it loses a message of.
    async fn send_in_turn<'m>(
        &self,
        messages: &'m [Message],
        batch: Vec<usize>,
        failed_groups: &Mutex<HashMap<&'m str, usize>>,
    ) -> Vec<(usize, Result<Sent, PublishError>)> {
        let group = |i: usize| messages[i].group_id().map(MessageGroupId::as_str);
        let mut answers = Vec::with_capacity(batch.len());
        let mut to_send = Vec::with_capacity(batch.len());
        {
            let failed = failed_groups.lock().expect("not poisoned");
            for i in batch {
                match group(i).and_then(|g| Some((g, *failed.get(g)?))) {
                    Some((g, earlier)) => {
                        tracing::warn!(
                            message = i,
                            group_id = g,
                            earlier,
                            "not sent: an earlier message of its group was not sent"
                        );
                        let group_id = g.to_owned();
                        let blocked = PublishError::EarlierInGroupFailed { group_id, earlier };
                        answers.push((i, Err(blocked)));
                    }
                    None => to_send.push(i),
                }
            }
        }
        if to_send.is_empty() {
            return answers;
        }
        let sent = self.send_batch(messages, &to_send).await;
        let mut failed = failed_groups.lock().expect("not poisoned");
        for (i, result) in to_send.into_iter().zip(sent) {
            if let (Err(_), Some(g)) = (&result, group(i)) {
                failed.entry(g).or_insert(i);
            }
            answers.push((i, result));
        }
        answers
    }

    /// Sends one planned batch, retrying the failed entries. The batch holds at most one message
    /// of a group, so a retry cannot fall behind a later message of its group.
    async fn send_batch(
        &self,
        messages: &[Message],
        batch: &[usize],
    ) -> Vec<Result<Sent, PublishError>> {
        let mut results: Vec<Option<Result<Sent, PublishError>>> =
            batch.iter().map(|_| None).collect();
        let mut pending: Vec<usize> = (0..batch.len()).collect(); // positions in `batch`
        let mut last_error: HashMap<usize, String> = HashMap::new();
        for attempt in 1..=self.max_attempts {
            if attempt > 1 {
                tokio::time::sleep(self.delay(attempt - 1)).await;
            }
            let entries = pending
                .iter()
                .map(|&p| messages[batch[p]].entry(p.to_string()))
                .collect::<Vec<_>>();
            let response = self
                .client
                .send_message_batch()
                .queue_url(&self.queue_url)
                .set_entries(Some(entries))
                .send()
                .await;
            let output = match response {
                Ok(output) => output,
                Err(SdkError::ServiceError(e))
                    if is_client_fault(e.raw().status().as_u16(), e.err().code()) =>
                {
                    // The request itself is wrong: retrying it cannot help.
                    let code = e.err().code().unwrap_or("ClientError").to_owned();
                    let message = e.err().message().unwrap_or_default().to_owned();
                    tracing::warn!(
                        code,
                        message,
                        entries = pending.len(),
                        "SendMessageBatch refused"
                    );
                    if pending.len() > 1 && !is_queue_level(&code) {
                        // Refused for one of its entries (an emulator may refuse the whole
                        // call for one message over the queue's size limit): each entry alone
                        // finds which. The batch holds at most one message of a group, so
                        // sending them one by one keeps every group's order.
                        for &p in &pending {
                            let alone = Box::pin(self.send_batch(messages, &[batch[p]])).await;
                            results[p] = alone.into_iter().next();
                        }
                        break;
                    }
                    for &p in &pending {
                        results[p] = Some(Err(PublishError::Rejected {
                            code: code.clone(),
                            message: message.clone(),
                        }));
                    }
                    break;
                }
                Err(e) => {
                    let text = error_text(&e);
                    tracing::warn!(attempt, entries = pending.len(), error = %text, "SendMessageBatch failed");
                    for &p in &pending {
                        last_error.insert(p, text.clone());
                    }
                    continue;
                }
            };
            for ok in output.successful() {
                if let Ok(p) = ok.id().parse::<usize>() {
                    results[p] = Some(Ok(Sent {
                        message_id: ok.message_id().to_owned(),
                        sequence_number: ok.sequence_number().map(str::to_owned),
                    }));
                }
            }
            for failed in output.failed() {
                let Ok(p) = failed.id().parse::<usize>() else {
                    continue;
                };
                let message = failed.message().unwrap_or_default().to_owned();
                if failed.sender_fault() {
                    results[p] = Some(Err(PublishError::Rejected {
                        code: failed.code().to_owned(),
                        message,
                    }));
                } else {
                    last_error.insert(p, format!("{}: {message}", failed.code()));
                }
            }
            pending.retain(|&p| results[p].is_none());
            if pending.is_empty() {
                break;
            }
            tracing::warn!(
                attempt,
                failed = pending.len(),
                "retrying the failed entries of a batch"
            );
        }
        results
            .into_iter()
            .enumerate()
            .map(|(p, r)| {
                r.unwrap_or_else(|| {
                    Err(PublishError::Exhausted {
                        attempts: self.max_attempts,
                        last_error: last_error
                            .remove(&p)
                            .unwrap_or_else(|| "no answer for the entry".into()),
                    })
                })
            })
            .collect()
    }

    fn delay(&self, retry: u32) -> Duration {
        let exp = self
            .base_backoff
            .saturating_mul(2u32.saturating_pow(retry.saturating_sub(1)))
            .min(self.max_backoff);
        jitter(exp)
    }
}

/// For each batch, the earlier batches it waits for: those holding the previous message of one
/// of its groups.
fn group_dependencies(messages: &[Message], batches: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let mut last_with_group: HashMap<&str, usize> = HashMap::new();
    batches
        .iter()
        .enumerate()
        .map(|(b, batch)| {
            let mut deps: Vec<usize> = batch
                .iter()
                .filter_map(|&i| messages[i].group_id())
                .filter_map(|g| last_with_group.insert(g.as_str(), b))
                .inspect(|&d| debug_assert_ne!(d, b, "two messages of one group in a batch"))
                .collect();
            deps.sort_unstable();
            deps.dedup();
            deps
        })
        .collect()
}
