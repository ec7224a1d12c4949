//! Kinesis data streams (`AWS::Kinesis::Stream`).

use serde_yaml_ng::Mapping;

use super::{Ctx, Result, invalid};

/// An `AWS::Kinesis::Stream`.
///
/// ```
/// use local_aws::template::{Template, TemplateOptions};
///
/// let yaml = r#"
/// Resources:
///   Events:
///     Type: AWS::Kinesis::Stream
///     Properties:
///       Name: payment-events
///       ShardCount: 2
/// "#;
/// let template = Template::parse(yaml, &TemplateOptions::default()).unwrap();
/// let stream = &template.kinesis_streams["Events"];
/// assert_eq!((stream.name.as_str(), stream.shard_count), ("payment-events", 2));
/// assert_eq!(stream.retention_period_hours, 24);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KinesisStream {
    /// The logical id.
    pub logical_id: String,
    /// The stream name (`Name`, else the logical id), with the [`Naming`](super::Naming)
    /// applied.
    pub name: String,
    /// `ShardCount` (default 1; `StreamModeDetails.StreamMode: ON_DEMAND` starts with 4, as
    /// Kinesis does).
    pub shard_count: u32,
    /// `RetentionPeriodHours` (default 24).
    pub retention_period_hours: u32,
}

/// Properties of a stream that change what it does and are not emulated.
const UNSUPPORTED: &[&str] = &["StreamEncryption", "DesiredShardLevelMetrics"];

impl Ctx<'_> {
    pub(super) fn kinesis_stream(
        &self,
        id: &str,
        props: &Mapping,
        at: &str,
    ) -> Result<KinesisStream> {
        let at = format!("{at}.Properties");
        for key in UNSUPPORTED {
            if props.get(*key).is_some() {
                return Err(invalid(
                    &format!("{at}.{key}"),
                    "not emulated by the local harness",
                ));
            }
        }
        let base_name = self
            .opt_scalar(props, "Name", &at)?
            .unwrap_or_else(|| id.to_owned());
        let name = self.options.naming.apply(&base_name);
        if !(1..=128).contains(&name.len())
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            return Err(invalid(
                &format!("{at}.Name"),
                format!("{name:?}: a stream name is 1-128 characters of [A-Za-z0-9_.-]"),
            ));
        }
        let on_demand = match props.get("StreamModeDetails") {
            None => false,
            Some(details) => {
                let details_at = format!("{at}.StreamModeDetails");
                let details = details
                    .as_mapping()
                    .ok_or_else(|| invalid(&details_at, "not a mapping"))?;
                match self
                    .opt_scalar(details, "StreamMode", &details_at)?
                    .as_deref()
                {
                    Some("ON_DEMAND") => true,
                    Some("PROVISIONED") => false,
                    other => {
                        return Err(invalid(
                            &format!("{details_at}.StreamMode"),
                            format!("{other:?} is not ON_DEMAND or PROVISIONED"),
                        ));
                    }
                }
            }
        };
        let shard_count = if on_demand {
            if props.get("ShardCount").is_some() {
                return Err(invalid(
                    &format!("{at}.ShardCount"),
                    "an ON_DEMAND stream has no ShardCount",
                ));
            }
            4
        } else {
            self.u32_in(props, "ShardCount", &at, 1, 1..=10_000)?
        };
        Ok(KinesisStream {
            logical_id: id.to_owned(),
            name,
            shard_count,
            retention_period_hours: self.u32_in(
                props,
                "RetentionPeriodHours",
                &at,
                24,
                24..=8760,
            )?,
        })
    }
}
