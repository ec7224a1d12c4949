//! Kinesis data streams: creating them, and reading them back.

use std::time::{Duration, Instant};

use aws_sdk_kinesis::types::{StreamDescriptionSummary, StreamStatus};

use super::{Difference, Diffs, ProvisionError, ProvisionedKinesisStream, aws};
use crate::template::KinesisStream;

/// The stream's summary once it is `ACTIVE` (at most 60 s); `None` when it does not exist.
async fn describe_active(
    kinesis: &aws_sdk_kinesis::Client,
    name: &str,
) -> Result<Option<StreamDescriptionSummary>, ProvisionError> {
    let started = Instant::now();
    loop {
        let summary = match kinesis
            .describe_stream_summary()
            .stream_name(name)
            .send()
            .await
        {
            Ok(out) => out.stream_description_summary,
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_resource_not_found_exception()) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(aws("DescribeStreamSummary", name)(e)),
        };
        let summary = summary.ok_or(ProvisionError::Missing {
            operation: "DescribeStreamSummary",
            resource: name.to_owned(),
            field: "StreamDescriptionSummary",
        })?;
        if *summary.stream_status() == StreamStatus::Active {
            return Ok(Some(summary));
        }
        if started.elapsed() > Duration::from_secs(60) {
            return Err(ProvisionError::NotActive(name.to_owned()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates the Kinesis stream `stream` (its shard count and retention), or finds it when it
/// exists, and waits until it is `ACTIVE`.
///
/// ```no_run
/// # async fn f(clients: local_aws::Clients) -> Result<(), local_aws::provision::ProvisionError> {
/// use local_aws::template::KinesisStream;
/// let model = KinesisStream {
///     logical_id: "Events".into(),
///     name: "payment-events".into(),
///     shard_count: 1,
///     retention_period_hours: 24,
/// };
/// let stream = local_aws::provision::create_kinesis_stream(&clients.kinesis, &model).await?;
/// assert!(stream.arn.ends_with(":stream/payment-events"));
/// # Ok(()) }
/// ```
pub async fn create_kinesis_stream(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &KinesisStream,
) -> Result<ProvisionedKinesisStream, ProvisionError> {
    let name = stream.name.as_str();
    let created = kinesis
        .create_stream()
        .stream_name(name)
        .shard_count(stream.shard_count as i32)
        .send()
        .await;
    match created {
        Ok(_) => {}
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_resource_in_use_exception()) => {}
        Err(e) => return Err(aws("CreateStream", name)(e)),
    }
    let summary = describe_active(kinesis, name)
        .await?
        .ok_or(ProvisionError::Missing {
            operation: "DescribeStreamSummary",
            resource: name.to_owned(),
            field: "StreamDescriptionSummary",
        })?;
    if summary.retention_period_hours() < stream.retention_period_hours as i32 {
        kinesis
            .increase_stream_retention_period()
            .stream_name(name)
            .retention_period_hours(stream.retention_period_hours as i32)
            .send()
            .await
            .map_err(aws("IncreaseStreamRetentionPeriod", name))?;
    }
    Ok(ProvisionedKinesisStream {
        name: name.to_owned(),
        arn: summary.stream_arn().to_owned(),
    })
}

/// How the stream on the endpoint differs from `stream` (missing; open shard count; retention).
pub(super) async fn verify_kinesis_stream(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &KinesisStream,
) -> Result<Vec<Difference>, ProvisionError> {
    let mut diffs = Diffs {
        out: Vec::new(),
        resource: &stream.logical_id,
        name: &stream.name,
    };
    match describe_active(kinesis, &stream.name).await? {
        None => diffs.check("exists", "yes", "no"),
        Some(summary) => {
            diffs.check(
                "ShardCount",
                stream.shard_count.to_string(),
                summary.open_shard_count().to_string(),
            );
            diffs.check(
                "RetentionPeriodHours",
                stream.retention_period_hours.to_string(),
                summary.retention_period_hours().to_string(),
            );
        }
    }
    Ok(diffs.out)
}
