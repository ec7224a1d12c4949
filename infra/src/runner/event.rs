//! The Lambda SQS event for received messages, and the reading of a partial batch response
//! (SQS and streams alike).

use std::collections::BTreeSet;

use aws_sdk_sqs::types::{Message, MessageAttributeValue};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Map, Value, json};

fn message_attribute(value: &MessageAttributeValue) -> Value {
    // Lambda's shape: stringValue / binaryValue only when set, both list fields always (empty:
    // SQS reserves them), dataType.
    let mut out = Map::new();
    if let Some(s) = &value.string_value {
        out.insert("stringValue".into(), json!(s));
    }
    if let Some(b) = &value.binary_value {
        out.insert("binaryValue".into(), json!(BASE64.encode(b.as_ref())));
    }
    out.insert(
        "stringListValues".into(),
        json!(value.string_list_values.clone().unwrap_or_default()),
    );
    out.insert(
        "binaryListValues".into(),
        Value::Array(
            value
                .binary_list_values
                .iter()
                .flatten()
                .map(|b| json!(BASE64.encode(b.as_ref())))
                .collect(),
        ),
    );
    out.insert("dataType".into(), json!(value.data_type));
    Value::Object(out)
}

/// One record of the event, as Lambda builds it from a received message.
pub(crate) fn record(message: &Message, queue_arn: &str) -> Value {
    let attributes: Map<String, Value> = message
        .attributes
        .iter()
        .flatten()
        .map(|(k, v)| (k.as_str().to_owned(), json!(v)))
        .collect();
    let message_attributes: Map<String, Value> = message
        .message_attributes
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), message_attribute(v)))
        .collect();
    let mut record = Map::new();
    record.insert("messageId".into(), json!(message.message_id));
    record.insert("receiptHandle".into(), json!(message.receipt_handle));
    record.insert("body".into(), json!(message.body.as_deref().unwrap_or("")));
    record.insert("attributes".into(), Value::Object(attributes));
    record.insert(
        "messageAttributes".into(),
        Value::Object(message_attributes),
    );
    record.insert("md5OfBody".into(), json!(message.md5_of_body));
    if let Some(md5) = &message.md5_of_message_attributes {
        record.insert("md5OfMessageAttributes".into(), json!(md5));
    }
    record.insert("eventSource".into(), json!("aws:sqs"));
    record.insert("eventSourceARN".into(), json!(queue_arn));
    record.insert("awsRegion".into(), json!(crate::arn::region(queue_arn)));
    Value::Object(record)
}

/// The event Lambda sends for `messages` received from the queue `queue_arn`: the JSON of
/// [`aws_lambda_events::sqs::SqsEvent`], field for field as AWS sends it (see
/// the sample `shared/tests/data/sqs-event.json` of the `lambda-idempotency` crate).
///
/// ```
/// use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
///
/// let message = Message::builder()
///     .message_id("m-1")
///     .receipt_handle("rh")
///     .body("hello")
///     .md5_of_body("5d41402abc4b2a76b9719d911017c592")
///     .attributes(MessageSystemAttributeName::ApproximateReceiveCount, "1")
///     .build();
/// let event = local_aws::runner::sqs_event(&[message], "arn:aws:sqs:eu-west-1:123456789012:jobs");
/// assert_eq!(event["Records"][0]["awsRegion"], "eu-west-1");
/// assert_eq!(event["Records"][0]["attributes"]["ApproximateReceiveCount"], "1");
/// let typed: aws_lambda_events::sqs::SqsEvent = serde_json::from_value(event).unwrap();
/// assert_eq!(typed.records[0].body.as_deref(), Some("hello"));
/// ```
pub fn sqs_event(messages: &[Message], queue_arn: &str) -> Value {
    json!({ "Records": messages.iter().map(|m| record(m, queue_arn)).collect::<Vec<_>>() })
}

/// Why a partial batch response makes Lambda retry the whole batch.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidResponse {
    /// The response is not JSON.
    #[error("the response is not JSON: {0}")]
    NotJson(String),
    /// The response is JSON but not an object or null.
    #[error("the response is not an object: {0}")]
    NotAnObject(String),
    /// `batchItemFailures` is not a list.
    #[error("batchItemFailures is not a list")]
    NotAList,
    /// An entry has no string `itemIdentifier`, or an empty one.
    #[error("batchItemFailures[{0}] has no itemIdentifier, or an empty one")]
    MissingIdentifier(usize),
    /// An `itemIdentifier` is not an item of the batch (a message id, or a stream record's
    /// sequence number).
    #[error("batchItemFailures[{0}].itemIdentifier {1:?} is not an item of the batch")]
    UnknownIdentifier(usize, String),
}

/// Reads a partial batch response the way Lambda does (see `aws-facts.md`): `null`, `{}`, a
/// missing, null or empty `batchItemFailures` mean the whole batch succeeded; anything that is
/// not JSON, not an object, or has an `itemIdentifier` that is missing, empty, or not a message
/// id of the batch makes the whole batch fail. Returns the failed message ids.
///
/// ```
/// use local_aws::runner::{InvalidResponse, failed_message_ids};
///
/// let ids = ["a", "b", "c"];
/// let failed = failed_message_ids(br#"{"batchItemFailures":[{"itemIdentifier":"b"}]}"#, &ids).unwrap();
/// assert_eq!(failed.into_iter().collect::<Vec<_>>(), ["b"]);
/// assert!(failed_message_ids(b"null", &ids).unwrap().is_empty());
/// assert!(matches!(
///     failed_message_ids(br#"{"batchItemFailures":[{"itemIdentifier":"zz"}]}"#, &ids),
///     Err(InvalidResponse::UnknownIdentifier(0, _))
/// ));
/// assert!(failed_message_ids(b"not json", &ids).is_err());
/// ```
pub fn failed_message_ids(
    response: &[u8],
    batch_message_ids: &[&str],
) -> Result<BTreeSet<String>, InvalidResponse> {
    Ok(failed_items(response, batch_message_ids)?
        .into_iter()
        .map(|i| batch_message_ids[i].to_owned())
        .collect())
}

/// The positions in `batch_item_ids` of the items a partial batch response reports failed,
/// read the way Lambda reads it (see [`failed_message_ids`]).
pub(crate) fn failed_items(
    response: &[u8],
    batch_item_ids: &[&str],
) -> Result<BTreeSet<usize>, InvalidResponse> {
    let value: Value = serde_json::from_slice(response).map_err(|e| {
        InvalidResponse::NotJson(format!(
            "{e}: {}",
            String::from_utf8_lossy(&response[..response.len().min(200)])
        ))
    })?;
    let object = match &value {
        Value::Null => return Ok(BTreeSet::new()),
        Value::Object(o) => o,
        other => {
            let mut text = other.to_string();
            text.truncate(200);
            return Err(InvalidResponse::NotAnObject(text));
        }
    };
    let failures = match object.get("batchItemFailures") {
        None | Some(Value::Null) => return Ok(BTreeSet::new()),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(InvalidResponse::NotAList),
    };
    let mut out = BTreeSet::new();
    for (i, failure) in failures.iter().enumerate() {
        let id = match failure.get("itemIdentifier") {
            Some(Value::String(s)) if !s.is_empty() => s,
            _ => return Err(InvalidResponse::MissingIdentifier(i)),
        };
        let position = batch_item_ids
            .iter()
            .position(|item| item == id)
            .ok_or_else(|| InvalidResponse::UnknownIdentifier(i, id.clone()))?;
        out.insert(position);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses() {
        let ids = ["a", "b"];
        let ok = |s: &str| failed_message_ids(s.as_bytes(), &ids);
        assert_eq!(ok("{}").unwrap().len(), 0);
        assert_eq!(ok(r#"{"batchItemFailures":null}"#).unwrap().len(), 0);
        assert_eq!(ok(r#"{"batchItemFailures":[]}"#).unwrap().len(), 0);
        assert_eq!(
            ok(r#"{"batchItemFailures":[{"itemIdentifier":"a"},{"itemIdentifier":"a"}]}"#)
                .unwrap()
                .len(),
            1
        );
        assert!(matches!(ok(""), Err(InvalidResponse::NotJson(_))));
        assert!(matches!(ok("\"x\""), Err(InvalidResponse::NotAnObject(_))));
        assert_eq!(
            ok(r#"{"batchItemFailures":{}}"#),
            Err(InvalidResponse::NotAList)
        );
        assert_eq!(
            ok(r#"{"batchItemFailures":[{"itemIdentifier":""}]}"#),
            Err(InvalidResponse::MissingIdentifier(0))
        );
        assert_eq!(
            ok(r#"{"batchItemFailures":[{"itemIdentifier":null}]}"#),
            Err(InvalidResponse::MissingIdentifier(0))
        );
        assert_eq!(
            ok(r#"{"batchItemFailures":[{"id":"a"}]}"#),
            Err(InvalidResponse::MissingIdentifier(0))
        );
    }
}
