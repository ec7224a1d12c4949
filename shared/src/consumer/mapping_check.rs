//! The cold-start check of a stream or Kafka consumer's event source mapping, as the source
//! queue's check is for SQS: Lambda's `ListEventSourceMappings` for the function and the
//! event's source, once per execution environment, in the background. What it finds is logged
//! as warnings naming the setting and its fix, never an error:
//!
//! - no `ReportBatchItemFailures` in `FunctionResponseTypes`: the partial batch response is
//!   ignored, and one failed record retries the whole batch;
//! - `MaximumRetryAttempts` and `MaximumRecordAgeInSeconds` both unbounded (-1, the defaults):
//!   a record that can never succeed blocks its shard until it leaves the stream (up to a day on
//!   DynamoDB Streams, a week or more on Kinesis);
//! - no on-failure destination: a batch Lambda gives up on leaves no trace;
//! - a bound that gives up during an outage the consumer's retries within the invocation ride
//!   out ([`OUTAGE_RIDDEN`], 10 minutes): `MaximumRetryAttempts` x the function's timeout (each
//!   failing invocation is held to its latest start, so a retry lasts about one timeout), or
//!   `MaximumRecordAgeInSeconds`, below it (the timeout as the first invocation's time left
//!   tells it). Lambda then sends the batch to the on-failure
//!   destination, which keeps its metadata only: the records are lost.
//!
//! A check that cannot run (denied `lambda:ListEventSourceMappings`, no mapping found) is a
//! warning too.

/// The outage the stream's retries within the invocation must ride out without Lambda giving a
/// batch up.
pub(crate) const OUTAGE_RIDDEN: std::time::Duration = std::time::Duration::from_secs(10 * 60);

/// The settings of an event source mapping that the check reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct MappingSettings {
    /// `FunctionResponseTypes` includes `ReportBatchItemFailures`.
    pub(crate) reports_item_failures: bool,
    /// `MaximumRetryAttempts` (-1 or absent: unbounded).
    pub(crate) maximum_retry_attempts: Option<i32>,
    /// `MaximumRecordAgeInSeconds` (-1 or absent: unbounded).
    pub(crate) maximum_record_age_in_seconds: Option<i32>,
    /// `DestinationConfig.OnFailure.Destination`.
    pub(crate) on_failure: Option<String>,
    /// The function's timeout, when known.
    pub(crate) function_timeout: Option<std::time::Duration>,
}

/// The warnings for `settings`.
pub(crate) fn mapping_warnings(settings: &MappingSettings) -> Vec<String> {
    let unbounded = |v: Option<i32>| v.is_none_or(|v| v < 0);
    let mut warnings = Vec::new();
    if !settings.reports_item_failures {
        warnings.push(
            "the event source mapping does not set FunctionResponseTypes: \
             [ReportBatchItemFailures]: the partial batch response is ignored, and one failed \
             record retries the whole batch. Fix: add it to the mapping"
                .to_owned(),
        );
    }
    if unbounded(settings.maximum_retry_attempts)
        && unbounded(settings.maximum_record_age_in_seconds)
    {
        warnings.push(
            "the event source mapping retries without bound (MaximumRetryAttempts and \
             MaximumRecordAgeInSeconds are -1, the defaults): a record that keeps failing blocks \
             its shard until it leaves the stream, up to a day on DynamoDB Streams and a week or \
             more on Kinesis. Fix: bound MaximumRetryAttempts (or MaximumRecordAgeInSeconds) and \
             set BisectBatchOnFunctionError"
                .to_owned(),
        );
    }
    let ridden = OUTAGE_RIDDEN.as_secs();
    if let (Some(retries), Some(timeout)) =
        (settings.maximum_retry_attempts, settings.function_timeout)
        && retries >= 0
        && u64::from(retries.unsigned_abs()) * timeout.as_secs() < ridden
    {
        warnings.push(format!(
            "the event source mapping's MaximumRetryAttempts is {retries}: with a {} s function \
             timeout, Lambda gives a batch up after about {} s of failures, and an outage of a \
             dependency the consumer's retries would ride out ({ridden} s) sends healthy records \
             to the on-failure destination, which keeps their metadata only: they are lost. Fix: \
             set MaximumRetryAttempts to -1 (or at least {}) and bound MaximumRecordAgeInSeconds",
            timeout.as_secs(),
            u64::from(retries.unsigned_abs()) * timeout.as_secs(),
            ridden.div_ceil(timeout.as_secs().max(1)),
        ));
    }
    if let Some(age) = settings.maximum_record_age_in_seconds
        && age >= 0
        && u64::from(age.unsigned_abs()) < ridden
    {
        warnings.push(format!(
            "the event source mapping's MaximumRecordAgeInSeconds is {age}: a record older than \
             that is sent to the on-failure destination (its metadata only: lost) during an \
             outage the consumer's retries would ride out ({ridden} s). Fix: set it to at least \
             {ridden}, well above, or -1"
        ));
    }
    if settings.on_failure.is_none() {
        warnings.push(
            "the event source mapping has no on-failure destination: a batch Lambda gives up on \
             leaves no trace. Fix: set DestinationConfig.OnFailure (an SQS queue or SNS topic)"
                .to_owned(),
        );
    }
    warnings
}

/// Reads the mapping of `function` on `source_arn` (any, when the source has no ARN: a
/// self-managed Kafka cluster) and logs what [`mapping_warnings`] finds.
#[cfg(feature = "mapping-check")]
pub(crate) async fn check(
    lambda: aws_sdk_lambda::Client,
    function: String,
    source_arn: Option<String>,
    function_timeout: Option<std::time::Duration>,
) {
    use aws_sdk_lambda::types::FunctionResponseType;
    let listed = lambda
        .list_event_source_mappings()
        .function_name(&function)
        .set_event_source_arn(source_arn.clone())
        .send()
        .await;
    let mappings = match listed {
        Ok(out) => out.event_source_mappings.unwrap_or_default(),
        Err(e) => {
            tracing::warn!(
                function,
                error = %aws_sdk_lambda::error::DisplayErrorContext(&e),
                "could not check the event source mapping (lambda:ListEventSourceMappings on the \
                 function): its retry limits and partial batch responses are not checked"
            );
            return;
        }
    };
    let Some(mapping) = mappings.first() else {
        tracing::warn!(
            function,
            source = source_arn,
            "no event source mapping found for the function and its source: not checked"
        );
        return;
    };
    let settings = MappingSettings {
        reports_item_failures: mapping
            .function_response_types()
            .contains(&FunctionResponseType::ReportBatchItemFailures),
        maximum_retry_attempts: mapping.maximum_retry_attempts(),
        maximum_record_age_in_seconds: mapping.maximum_record_age_in_seconds(),
        on_failure: mapping
            .destination_config()
            .and_then(|d| d.on_failure())
            .and_then(|o| o.destination())
            .map(str::to_owned),
        // Not on the mapping (GetFunctionConfiguration would need another permission): the
        // first invocation's time left tells it.
        function_timeout,
    };
    for warning in mapping_warnings(&settings) {
        tracing::warn!(function, source = source_arn, "{warning}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_warned_about_and_a_bounded_mapping_is_not() {
        let defaults = mapping_warnings(&MappingSettings::default());
        assert_eq!(defaults.len(), 3, "{defaults:?}");
        assert!(defaults[0].contains("ReportBatchItemFailures"));
        assert!(defaults[1].contains("blocks its shard"));
        assert!(defaults[2].contains("on-failure destination"));
        let bounded = MappingSettings {
            reports_item_failures: true,
            maximum_retry_attempts: Some(5),
            maximum_record_age_in_seconds: Some(-1),
            on_failure: Some("arn:aws:sqs:us-east-1:123456789012:failures".into()),
            function_timeout: None,
        };
        assert!(mapping_warnings(&bounded).is_empty());
        let aged = MappingSettings {
            maximum_retry_attempts: Some(-1),
            maximum_record_age_in_seconds: Some(3600),
            ..bounded
        };
        assert!(mapping_warnings(&aged).is_empty());
    }

    #[test]
    fn a_bound_that_gives_up_during_a_ten_minute_outage_is_warned_about() {
        let examples = MappingSettings {
            reports_item_failures: true,
            maximum_retry_attempts: Some(-1),
            maximum_record_age_in_seconds: Some(86_400),
            on_failure: Some("arn:aws:sqs:us-east-1:123456789012:failures".into()),
            function_timeout: Some(std::time::Duration::from_secs(30)),
        };
        assert!(mapping_warnings(&examples).is_empty());
        // The examples' old settings: 5 retries of a 30 s function last 150 s.
        let five = MappingSettings {
            maximum_retry_attempts: Some(5),
            ..examples.clone()
        };
        let warnings = mapping_warnings(&five);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("MaximumRetryAttempts is 5"),
            "{}",
            warnings[0]
        );
        assert!(warnings[0].contains("at least 20"), "{}", warnings[0]);
        // 20 retries of 30 s ride ten minutes out.
        let twenty = MappingSettings {
            maximum_retry_attempts: Some(20),
            ..examples.clone()
        };
        assert!(mapping_warnings(&twenty).is_empty());
        let young = MappingSettings {
            maximum_record_age_in_seconds: Some(300),
            ..examples
        };
        let warnings = mapping_warnings(&young);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("MaximumRecordAgeInSeconds is 300"),
            "{}",
            warnings[0]
        );
        assert!(warnings[0].contains("at least 600"), "{}", warnings[0]);
    }
}
