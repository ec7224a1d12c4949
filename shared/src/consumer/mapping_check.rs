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
//! - no on-failure destination: a batch Lambda gives up on leaves no trace.
//!
//! A check that cannot run (denied `lambda:ListEventSourceMappings`, no mapping found) is a
//! warning too.

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
        };
        assert!(mapping_warnings(&bounded).is_empty());
        let aged = MappingSettings {
            maximum_retry_attempts: Some(-1),
            maximum_record_age_in_seconds: Some(3600),
            ..bounded
        };
        assert!(mapping_warnings(&aged).is_empty());
    }
}
