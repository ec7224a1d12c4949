//! Classifying SQS errors: whose fault a refusal is, whether it is about the queue rather than a
//! message, and the error's text. One set of rules for the [`Publisher`](super::Publisher) and
//! for the tools that move messages between queues.

use std::fmt;

use aws_sdk_sqs::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

/// True for an HTTP 4xx that is not throttling: the caller's mistake, not worth a retry.
pub(crate) fn is_client_fault(status: u16, code: Option<&str>) -> bool {
    (400..500).contains(&status) && status != 429 && !code.is_some_and(|c| c.contains("Throttl"))
}

/// True for an error code saying the queue does not exist (`QueueDoesNotExist`, or the query
/// protocol's `AWS.SimpleQueueService.NonExistentQueue`).
// Not API: the local AWS harness (infra/) tells a missing queue the publisher's way.
#[doc(hidden)]
pub fn is_missing_queue(code: &str) -> bool {
    code.contains("NonExistentQueue") || code.contains("QueueDoesNotExist")
}

/// True for an error code about the queue or the caller rather than one message (the queue
/// does not exist, access is denied, the credentials or the queue's KMS key are unusable): every
/// other send to the queue would fail the same way.
///
/// ```
/// use lambda_idempotency::publish::is_queue_level;
///
/// assert!(is_queue_level("AWS.SimpleQueueService.NonExistentQueue"));
/// assert!(is_queue_level("AccessDenied"));
/// assert!(is_queue_level("KmsAccessDenied"));
/// assert!(!is_queue_level("InvalidParameterValue"));
/// assert!(!is_queue_level("InvalidMessageContents"));
/// ```
// Not API: shared with the payments pipeline's redrive tool, so that it and the publisher follow
// one rule.
#[doc(hidden)]
pub fn is_queue_level(code: &str) -> bool {
    const CODES: [&str; 10] = [
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
    ];
    is_missing_queue(code) || CODES.iter().any(|c| code.contains(c))
}

/// An SDK error as one line: `CODE: message` when the service answered, else the whole chain
/// of causes (a timeout, a refused connection).
// Not API: the payments pipeline's redrive tool writes its SQS errors the publisher's way.
#[doc(hidden)]
pub fn error_text<E, R>(error: &SdkError<E, R>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: fmt::Debug,
{
    match error.code() {
        Some(code) => format!("{code}: {}", error.message().unwrap_or_default()),
        None => DisplayErrorContext(error).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::{is_client_fault, is_missing_queue};

    #[test]
    fn a_missing_queue_is_either_protocols_code() {
        assert!(is_missing_queue("AWS.SimpleQueueService.NonExistentQueue"));
        assert!(is_missing_queue("QueueDoesNotExist"));
        assert!(!is_missing_queue("InvalidParameterValue"));
    }

    #[test]
    fn a_client_fault_is_a_4xx_that_is_not_throttling() {
        assert!(is_client_fault(400, Some("InvalidParameterValue")));
        assert!(!is_client_fault(400, Some("ThrottlingException")));
        assert!(!is_client_fault(429, None));
        assert!(!is_client_fault(500, Some("InternalError")));
    }
}
