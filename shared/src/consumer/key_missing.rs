//! A key pointer that finds nothing in a message: each such record logged as an error (the
//! pointer, the message id and the names of the body's top-level fields, never a value), and the
//! batch's count emitted as the `KeyMissing` metric ([`crate::metrics::key_missing`]), so that a
//! typo in `IDEMPOTENCY_KEY` (`/orderID` for `/orderId`), which fails every message, shows at
//! once beside the names there are, and an alarm on the metric tells it from a producer's bad
//! message within minutes.

use lambda_runtime::LambdaEvent;
use serde_json::Value;

use crate::batch::{BatchReport, EventSource};
use crate::error::RecordError;
use crate::key::KeyError;
use crate::record::Record;

/// At most this many field names in a line, so that a large object keeps it short.
const MAX_NAMES: usize = 50;

/// Logs each record of `report` whose key pointer found nothing, and emits the batch's metric.
pub(super) fn report<T, E: EventSource>(event: &LambdaEvent<E>, report: &BatchReport<T, E>) {
    let missing = || {
        report
            .records
            .iter()
            .filter_map(|record| match &record.result {
                Err(RecordError::Key {
                    message_id,
                    source: KeyError::Missing(pointer),
                }) => Some((record.index, message_id, pointer)),
                _ => None,
            })
    };
    if missing().next().is_some() {
        // The records the report's indices are of: a Kinesis aggregate's user records.
        let expanded = event.payload.expand();
        let records = expanded.as_ref().unwrap_or(&event.payload).records();
        for (index, message_id, pointer) in missing() {
            log(records.get(index).copied(), message_id, pointer);
        }
    }
    if let Some(line) = crate::metrics::key_missing(report, &event.context.env_config.function_name)
    {
        line.emit();
    }
}

/// Logs that `pointer` finds nothing in `record` (message `message_id`).
fn log<R: Record>(record: Option<&R>, message_id: &str, pointer: &str) {
    let payload = record.and_then(|r| r.payload());
    let body = payload.as_deref().and_then(|p| std::str::from_utf8(p).ok());
    let fields = field_names(body);
    tracing::error!(
        pointer,
        message_id,
        fields = %fields,
        "the key pointer {pointer} finds nothing in message {message_id}: its top-level \
         fields are [{fields}]. A typo in the pointer (IDEMPOTENCY_KEY) fails every \
         message; a producer's message without the key fails alone"
    );
}

/// The names of the body's top-level fields, sorted, never their values.
fn field_names(body: Option<&str>) -> String {
    match body.map(serde_json::from_str::<Value>) {
        Some(Ok(Value::Object(map))) => {
            let mut names: Vec<&str> = map.keys().map(String::as_str).collect();
            names.sort_unstable();
            let more = names.len().saturating_sub(MAX_NAMES);
            names.truncate(MAX_NAMES);
            let mut listed = names.join(", ");
            if more > 0 {
                listed.push_str(&format!(" and {more} more"));
            }
            listed
        }
        Some(Ok(Value::Array(_))) => "none: the body is a JSON array".to_owned(),
        Some(Ok(_)) => "none: the body is not a JSON object".to_owned(),
        Some(Err(_)) | None => "none".to_owned(),
    }
}
