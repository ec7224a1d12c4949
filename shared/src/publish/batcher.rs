//! [`Batcher`]: messages sent one at a time from concurrent tasks (the records of a batch, each
//! in its own lane), gathered into `SendMessageBatch` calls.

use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::{Message, PublishError, Publisher, Sent};

type Waiting = (Message, oneshot::Sender<Result<Sent, PublishError>>);

#[derive(Default)]
struct Pending {
    messages: Vec<Waiting>,
    /// A sender is taking the pending messages to SQS.
    sending: bool,
}

/// Sends messages given one at a time, by concurrent tasks, in as few `SendMessageBatch` calls as
/// they fit ([`Publisher::send_all`]'s, up to 10 entries each): a record handler that sends one
/// message per record costs one call per batch of ten records, not one per record.
///
/// The first message of a round waits for the others that are ready at the same moment (one
/// turn of the scheduler, no timer), then all of them go together; messages given while that
/// call runs go in the next. Each `send` answers for its own message. A message of a FIFO group
/// is never overtaken by a later one of its group given after it (they are sent in the order
/// given; a caller that waits for one send before the next keeps its order across calls).
///
/// ```no_run
/// # async fn run(sqs: aws_sdk_sqs::Client) -> Result<(), Box<dyn std::error::Error>> {
/// use lambda_idempotency::publish::{Batcher, Message, Publisher};
///
/// let batcher = Batcher::new(Publisher::new(sqs, "https://sqs.us-east-1.amazonaws.com/123456789012/events"));
/// let (a, b) = tokio::join!(
///     batcher.send(Message::standard("a")?),
///     batcher.send(Message::standard("b")?),
/// );
/// // One SendMessageBatch call carried both.
/// # let _ = (a?, b?);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Batcher {
    publisher: Publisher,
    pending: Arc<Mutex<Pending>>,
}

impl std::fmt::Debug for Batcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher")
            .field("queue_url", &self.publisher.queue_url())
            .finish_non_exhaustive()
    }
}

impl Batcher {
    /// Gathers the sends to `publisher`'s queue.
    pub fn new(publisher: Publisher) -> Self {
        Self {
            publisher,
            pending: Arc::default(),
        }
    }

    /// The publisher the gathered sends go through.
    pub fn publisher(&self) -> &Publisher {
        &self.publisher
    }

    /// Sends `message`, with the others given at the same time.
    pub async fn send(&self, message: Message) -> Result<Sent, PublishError> {
        let (answer, answered) = oneshot::channel();
        let leads = {
            let mut pending = self.pending.lock().expect("the batcher's lock");
            pending.messages.push((message, answer));
            !std::mem::replace(&mut pending.sending, true)
        };
        if leads {
            // Should this send be dropped (its record cancelled at the deadline), the messages
            // still pending are answered with an error and the next send leads.
            let mut guard = Release(Some(&self.pending));
            // The other tasks ready now give their messages before this turn ends.
            tokio::task::yield_now().await;
            self.send_pending().await;
            guard.0 = None;
        }
        answered.await.unwrap_or_else(|_| {
            Err(PublishError::Exhausted {
                attempts: 0,
                last_error: "the send gathering this message was cancelled".to_owned(),
            })
        })
    }

    /// Sends what is pending until nothing is, and ends the turn.
    async fn send_pending(&self) {
        loop {
            let round = {
                let mut pending = self.pending.lock().expect("the batcher's lock");
                if pending.messages.is_empty() {
                    pending.sending = false;
                    return;
                }
                std::mem::take(&mut pending.messages)
            };
            let (messages, answers): (Vec<_>, Vec<_>) = round.into_iter().unzip();
            // Boxed: the send's future is large, and this runs deep inside a record's handler.
            let results = Box::pin(self.publisher.send_all(messages)).await;
            for (answer, result) in answers.into_iter().zip(results) {
                let _ = answer.send(result);
            }
        }
    }
}

/// Ends a leader's turn when it is dropped before the end: the messages left pending are
/// answered with an error (their answers dropped), and the next send leads.
struct Release<'a>(Option<&'a Mutex<Pending>>);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        if let Some(Ok(mut pending)) = self.0.map(Mutex::lock) {
            pending.messages.clear();
            pending.sending = false;
        }
    }
}
