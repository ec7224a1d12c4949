//! Running a redrive: receiving from the dead-letter queue, sending through the library's
//! [`Publisher`] (batches of 10 entries and 1 MiB, only failed entries retried, each FIFO
//! group in order), deleting what was sent, and making what is held visible again at the end.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry, Message,
    MessageSystemAttributeName, QueueAttributeName,
};
use lambda_idempotency::publish::{
    MAX_BATCH_ENTRIES, PublishError, Publisher, error_text, is_queue_level,
};

use super::options::RedriveOptions;
use super::plan::{HoldKind, Ledger, Outgoing, Sorted, group_blocked, ids};
use super::report::{RedriveError, RedriveReport};

/// One redrive, from its first receive to its report.
struct Run<'a> {
    sqs: &'a Client,
    from: &'a str,
    from_fifo: bool,
    options: &'a RedriveOptions,
    publisher: Publisher,
    ledger: Ledger,
    report: RedriveReport,
}

/// SQS's longest long poll.
const MAX_WAIT: Duration = Duration::from_secs(20);

impl Run<'_> {
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
            .wait_time_seconds(secs(self.options.wait_time, MAX_WAIT.as_secs()));
        if self.from_fifo {
            // A retried receive (same attempt id) returns the same messages, not new ones.
            request = request.receive_request_attempt_id(uuid::Uuid::new_v4().to_string());
        }
        // The SDK's attempt timeout (3 s) would cut a longer wait: an empty long poll must end
        // the run, not fail it.
        request
            .customize()
            .config_override(crate::long_poll(self.options.wait_time.min(MAX_WAIT)))
            .send()
            .await
            .map(|out| out.messages.unwrap_or_default())
            .map_err(|e| error_text(&e))
    }

    /// The messages not seen before in this run. A message seen before gets its new receipt
    /// handle; one that was sent but not deleted, or moved and delivered again, is deleted.
    async fn sort_out(&mut self, messages: Vec<Message>) -> Vec<Message> {
        let mut fresh = Vec::new();
        let mut delete = Vec::new();
        for m in messages {
            match self.ledger.sort(m) {
                Some(Sorted::Fresh(m)) => fresh.push(m),
                Some(Sorted::Delete(id, receipt)) => delete.push((id, receipt)),
                Some(Sorted::Held) | None => {}
            }
        }
        for (id, result) in self.delete(delete).await {
            if result.is_ok() && self.ledger.is_not_deleted(&id) {
                let sent_as = self.ledger.moved(&id).unwrap_or_default();
                self.record_moved(id, sent_as);
            }
        }
        fresh
    }

    fn record_moved(&mut self, dlq_id: String, sent_as: String) {
        self.report.moved += 1;
        self.report.moved_ids.push((dlq_id, sent_as));
    }

    /// Sends `fresh` on and deletes what was sent. `Err`: the target refuses every send.
    async fn move_messages(&mut self, fresh: Vec<Message>) -> Result<(), String> {
        let outgoing = self.ledger.plan(&fresh, self.options);
        if outgoing.is_empty() {
            return Ok(());
        }
        let results = self
            .publisher
            .send_all(outgoing.iter().map(|o| o.message.clone()).collect())
            .await;
        // The queue refusing a send (it does not exist, access denied) stops the run.
        let stop = results.iter().find_map(|r| match r {
            Err(e @ PublishError::Rejected { code, .. }) if is_queue_level(code) => {
                Some(e.to_string())
            }
            _ => None,
        });
        let mut to_delete = Vec::new();
        for (o, result) in outgoing.iter().zip(results) {
            match result {
                Ok(sent) => {
                    self.ledger.sent(&sent.message_id);
                    to_delete.push((o, sent.message_id));
                }
                Err(error) => {
                    let text = match (&error, &stop) {
                        (PublishError::EarlierInGroupFailed { .. }, Some(reason)) => {
                            format!("not sent: the run stopped ({reason})")
                        }
                        (PublishError::EarlierInGroupFailed { group_id, earlier }, None) => {
                            group_blocked(&outgoing[*earlier].dlq_id, group_id)
                        }
                        _ => error.to_string(),
                    };
                    self.ledger
                        .fail(&o.dlq_id, &o.receipt, o.group.as_deref(), text);
                }
            }
        }
        self.delete_sent(to_delete).await;
        stop.map_or(Ok(()), Err)
    }

    /// Deletes the sent messages from the dead-letter queue.
    async fn delete_sent(&mut self, sent: Vec<(&Outgoing, String)>) {
        let receipts: HashMap<&str, (&str, &str)> = sent
            .iter()
            .map(|(o, new_id)| (o.dlq_id.as_str(), (o.receipt.as_str(), new_id.as_str())))
            .collect();
        let items = sent
            .iter()
            .map(|(o, _)| (o.dlq_id.clone(), o.receipt.clone()))
            .collect();
        for (id, result) in self.delete(items).await {
            let (receipt, new_id) = receipts.get(id.as_str()).copied().unwrap_or_default();
            match result {
                Ok(()) => {
                    self.ledger.moved(&id);
                    self.record_moved(id, new_id.to_owned());
                }
                Err(error) => self
                    .ledger
                    .hold_not_deleted(&id, receipt, new_id.to_owned(), error),
            }
        }
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
                    tokio::time::sleep(RedriveOptions::backoff(attempt - 2)).await;
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
                let response = self
                    .sqs
                    .delete_message_batch()
                    .queue_url(self.from)
                    .set_entries(Some(entries))
                    .send()
                    .await;
                match response {
                    Ok(output) => {
                        for ok in output.successful() {
                            if let Some(slot) = slot(&mut results, ok.id()) {
                                *slot = Some(Ok(()));
                            }
                        }
                        for failed in output.failed() {
                            let text = format!(
                                "DeleteMessageBatch: {}: {}",
                                failed.code(),
                                failed.message().unwrap_or_default()
                            );
                            match slot(&mut results, failed.id()) {
                                Some(slot) if failed.sender_fault() => *slot = Some(Err(text)),
                                Some(_) => {
                                    last_error
                                        .insert(failed.id().parse().unwrap_or_default(), text);
                                }
                                None => {}
                            }
                        }
                    }
                    Err(e) => {
                        let text = format!("DeleteMessageBatch: {}", error_text(&e));
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
        let held = self.ledger.take_held();
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
                            let text = format!(
                                "{}: {}",
                                failed.code(),
                                failed.message().unwrap_or_default()
                            );
                            self.report.release_failed.push((h.dlq_id.clone(), text));
                        }
                    }
                }
                Err(e) => {
                    let text = format!("ChangeMessageVisibilityBatch: {}", error_text(&e));
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

/// The result slot of the batch entry `id` (its index in the chunk), if it is one.
fn slot<'r, T>(results: &'r mut [Option<T>], id: &str) -> Option<&'r mut Option<T>> {
    results.get_mut(id.parse::<usize>().ok()?)
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
/// use payments_operations::redrive::{redrive, RedriveOptions};
///
/// let sqs = aws_sdk_sqs::Client::new(&payments_operations::sdk_config().await);
/// let (dlq, source) = ("https://sqs.us-east-1.amazonaws.com/123456789012/receipts-dlq",
///                      "https://sqs.us-east-1.amazonaws.com/123456789012/receipts");
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
    let is_fifo = |url: &str| url.trim_end_matches('/').ends_with(".fifo");
    if from_dlq_url.trim_end_matches('/') == to_queue_url.trim_end_matches('/') {
        return Err(RedriveError::SameQueue(from_dlq_url.to_owned()));
    }
    let started = Instant::now();
    let publisher = Publisher::new(sqs.clone(), to_queue_url.trim_end_matches('/'))
        .max_attempts(options.attempts)
        .backoff(
            RedriveOptions::backoff(0),
            RedriveOptions::backoff(u32::MAX),
        );
    let mut run = Run {
        sqs,
        from: from_dlq_url,
        from_fifo: is_fifo(from_dlq_url),
        options: &options,
        publisher,
        ledger: Ledger::new(is_fifo(to_queue_url)),
        report: RedriveReport {
            from_queue_url: from_dlq_url.to_owned(),
            to_queue_url: to_queue_url.to_owned(),
            dry_run: options.dry_run,
            ..RedriveReport::default()
        },
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
            for (id, receipt) in fresh.iter().filter_map(ids) {
                run.ledger
                    .hold(&id, &receipt, HoldKind::DryRun, String::new());
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

    /// `redrive` can run in a spawned task.
    #[allow(dead_code)]
    fn the_future_is_send(sqs: &Client) {
        fn send<T: Send>(_: T) {}
        send(redrive(sqs, "a", "b", RedriveOptions::default()));
    }

    #[test]
    fn slots_are_found_by_entry_id() {
        let mut results: Vec<Option<u8>> = vec![None; 3];
        *slot(&mut results, "2").unwrap() = Some(7);
        assert_eq!(results, [None, None, Some(7)]);
        assert!(slot(&mut results, "3").is_none());
        assert!(slot(&mut results, "x").is_none());
    }
}
