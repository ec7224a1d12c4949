//! The parts of a dead-letter copy, and how it is reduced to fit the queue.

use super::*;

/// What a copy is made of.
pub(super) struct Draft {
    pub(super) body: String,
    pub(super) message_id: String,
    pub(super) fifo: Option<(MessageGroupId, DeduplicationId)>,
    pub(super) trace_header: Option<String>,
    /// The reason as the whole copy carries it (made safe, at most 1 KiB).
    pub(super) reason: String,
    /// Reason, source message id, source queue.
    pub(super) own: Vec<Attribute>,
    /// The original's attributes that can be copied, by name.
    pub(super) originals: Vec<Attribute>,
}

impl Draft {
    /// The whole copy's attributes: its own, then the original's, up to [`MAX_ATTRIBUTES`].
    pub(super) fn full(&self) -> Vec<Attribute> {
        let room = MAX_ATTRIBUTES - self.own.len();
        if self.originals.len() > room {
            tracing::warn!(
                message_id = self.message_id,
                not_copied = ?self.originals[room..].iter().map(|(n, _)| n).collect::<Vec<_>>(),
                "SQS allows 10 message attributes: the last ones by name are not copied to the \
                 dead-letter queue"
            );
        }
        self.own
            .iter()
            .chain(self.originals.iter().take(room))
            .cloned()
            .collect()
    }

    pub(super) fn size(&self, attributes: &[Attribute]) -> usize {
        self.body.len() + attributes.iter().map(cost).sum::<usize>()
    }

    /// The reduced copy's attributes within `limit` bytes, with the marker first; `None` when
    /// no attribute fits (the body goes alone); an error when not even the body fits.
    pub(super) fn reduced(&self, limit: usize) -> Result<Option<(Vec<Attribute>, String)>, String> {
        if self.body.len() > limit {
            return Err(format!(
                "the message body alone ({} bytes) is over the dead-letter queue's \
                 MaximumMessageSize ({limit} bytes): it cannot be dead-lettered and is reported \
                 failed (nothing is lost). Fix: give the dead-letter queue its source queue's \
                 MaximumMessageSize",
                self.body.len()
            ));
        }
        let marker_room = REDUCED_ATTRIBUTE.len() + "String".len() + MARKER_LEN;
        let Some(mut room) = (limit - self.body.len()).checked_sub(marker_room) else {
            return Ok(None);
        };
        let mut kept = Vec::new();
        let mut cuts = Vec::new();
        let mut dropped = Vec::new();
        // The source message id and queue first (short, and what finds the original), then the
        // reason in the room left.
        for attribute in self.own.iter().filter(|a| a.0 != REASON_ATTRIBUTE) {
            if cost(attribute) <= room {
                room -= cost(attribute);
                kept.push(attribute.clone());
            } else {
                dropped.push(attribute.0.clone());
            }
        }
        let reason_room = room.saturating_sub(REASON_ATTRIBUTE.len() + "String".len());
        let reason = truncate(&self.reason, REDUCED_REASON_LEN.min(reason_room));
        let attribute = string_attribute(REASON_ATTRIBUTE, &reason);
        if reason.len() < MIN_REASON_LEN.min(self.reason.len()) || cost(&attribute) > room {
            dropped.insert(0, REASON_ATTRIBUTE.to_owned());
        } else {
            if reason.len() < self.reason.len() {
                cuts.push(format!(
                    "{REASON_ATTRIBUTE} cut to {} of {} bytes",
                    reason.len(),
                    self.reason.len()
                ));
            }
            room -= cost(&attribute);
            kept.push(attribute);
        }
        // One slot is the marker's.
        let slots = MAX_ATTRIBUTES - 1 - kept.len();
        let mut copied = 0;
        for attribute in &self.originals {
            if copied < slots && cost(attribute) <= room {
                room -= cost(attribute);
                kept.push(attribute.clone());
                copied += 1;
            } else {
                dropped.push(attribute.0.clone());
            }
        }
        if !dropped.is_empty() {
            cuts.push(format!("not copied: {}", dropped.join(", ")));
        }
        let marker = truncate(
            &format!("over the queue's {limit} bytes: {}", cuts.join("; ")),
            MARKER_LEN,
        );
        kept.insert(0, string_attribute(REDUCED_ATTRIBUTE, &marker));
        Ok(Some((kept, marker)))
    }

    pub(super) fn message(&self, attributes: &[Attribute]) -> Result<Message, String> {
        let mut message = match &self.fifo {
            Some((group, dedup)) => Message::fifo(group.clone(), dedup.clone(), self.body.clone()),
            None => Message::standard(self.body.clone()),
        }
        .map_err(|e| e.to_string())?;
        if let Some(header) = &self.trace_header {
            message = message
                .with_trace_header(header)
                .map_err(|e| e.to_string())?;
        }
        for (name, value) in attributes {
            message = message
                .with_attribute_value(name, value.clone())
                .map_err(|e| e.to_string())?;
        }
        Ok(message)
    }
}
