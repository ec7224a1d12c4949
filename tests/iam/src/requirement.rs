//! What Lambda itself does with a function's execution role, read from the template: its event
//! source mappings read their stream or queue (and send to an on-failure destination), and the
//! platform writes the function's logs. None of it is the function's code, so none of it is
//! recorded: the conformance check requires exactly the actions AWS documents for each (see
//! [`reference`](crate::reference)).

use std::fmt;

use serde_yaml_ng::{Mapping, Value};

use crate::cfn::{Resolver, get_att_target, intrinsic};
use crate::error::PolicyError;
use crate::reference::{
    DYNAMODB_STREAM_SOURCE, PLATFORM_LOGS, SQS_ON_FAILURE, SQS_SOURCE, is_resource_scoped,
};
use local_aws::arn::Arn;

/// Who performs a [`Requirement`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Requirer {
    /// The event source mapping of the function's event `event` (its name in `Events`, or the
    /// logical id of an `AWS::Lambda::EventSourceMapping`).
    EventSource {
        /// The event.
        event: String,
    },
    /// The on-failure destination of the event source mapping `event`.
    OnFailure {
        /// The event.
        event: String,
    },
    /// The Lambda platform, writing the function's logs.
    Platform,
}

impl fmt::Display for Requirer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::EventSource { event } => write!(f, "event source mapping {event}"),
            Self::OnFailure { event } => write!(f, "on-failure destination of {event}"),
            Self::Platform => f.write_str("Lambda platform (logs)"),
        }
    }
}

/// One request Lambda makes with the function's execution role.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Requirement {
    /// Who makes it.
    pub by: Requirer,
    /// The action.
    pub action: String,
    /// The resource it is evaluated against (`*` for an action without resource-level
    /// permissions).
    pub resource: String,
}

fn requirements(by: &Requirer, actions: &[&str], arn: &str) -> Vec<Requirement> {
    actions
        .iter()
        .map(|action| Requirement {
            by: by.clone(),
            action: (*action).to_owned(),
            resource: if is_resource_scoped(action) == Some(false) {
                "*".into()
            } else {
                arn.to_owned()
            },
        })
        .collect()
}

/// The platform's log writes for a function whose `LoggingConfig.LogGroup` is `log_group`
/// (Lambda's default `/aws/lambda/NAME` without one).
pub(crate) fn platform(
    properties: &Mapping,
    function_name: &str,
    resolver: &Resolver<'_>,
    at: &str,
) -> Result<Vec<Requirement>, PolicyError> {
    let group = match properties
        .get("LoggingConfig")
        .and_then(|c| c.get("LogGroup"))
    {
        Some(v) => resolver.string(v, &format!("{at}.LoggingConfig.LogGroup"))?,
        None => format!("/aws/lambda/{function_name}"),
    };
    let env = resolver.env();
    let streams = Arn::new(
        &env.partition,
        "logs",
        &env.region,
        &env.account_id,
        &format!("log-group:{group}:log-stream:*"),
    )
    .to_string();
    Ok(requirements(&Requirer::Platform, PLATFORM_LOGS, &streams))
}

/// The requirements of one event source mapping: `source` its `EventSourceArn`, `properties`
/// where its `DestinationConfig` is.
pub(crate) fn mapping(
    event: &str,
    source: &Value,
    properties: Option<&Value>,
    resolver: &Resolver<'_>,
    at: &str,
) -> Result<Vec<Requirement>, PolicyError> {
    let arn = stream_or_arn(source, resolver, at)?;
    let by = Requirer::EventSource {
        event: event.to_owned(),
    };
    let parsed = Arn::parse(&arn).map_err(|e| PolicyError::invalid(at, e.to_string()))?;
    let mut out = match parsed.service {
        "dynamodb" if parsed.resource.contains("/stream/") => {
            requirements(&by, DYNAMODB_STREAM_SOURCE, &arn)
        }
        "sqs" => requirements(&by, SQS_SOURCE, &arn),
        _ => {
            return Err(PolicyError::unsupported(
                at,
                format!("an event source mapping on {arn}"),
            ));
        }
    };
    if let Some(destination) = properties
        .and_then(|p| p.get("DestinationConfig"))
        .and_then(|d| d.get("OnFailure"))
        .and_then(|o| o.get("Destination"))
    {
        let at = format!("{at}.DestinationConfig.OnFailure.Destination");
        let arn = resolver.string(destination, &at)?;
        let by = Requirer::OnFailure {
            event: event.to_owned(),
        };
        match Arn::parse(&arn) {
            Ok(a) if a.service == "sqs" => out.extend(requirements(&by, SQS_ON_FAILURE, &arn)),
            _ => {
                return Err(PolicyError::unsupported(
                    &at,
                    format!("an on-failure destination {arn}"),
                ));
            }
        }
    }
    Ok(out)
}

/// `source` resolved; a table's `StreamArn` the environment does not know (its label is
/// DynamoDB's) stands for every stream of the table.
fn stream_or_arn(source: &Value, resolver: &Resolver<'_>, at: &str) -> Result<String, PolicyError> {
    match resolver.string(source, at) {
        Err(PolicyError::Unresolved { .. }) => {
            let table = intrinsic(source)
                .filter(|(f, _)| f == "GetAtt")
                .and_then(|(_, arg)| get_att_target(arg))
                .filter(|(_, attribute)| attribute == "StreamArn")
                .map(|(table, _)| table);
            match table {
                Some(table) => Ok(format!("{}/stream/*", resolver.get_att(&table, "Arn", at)?)),
                None => resolver.string(source, at),
            }
        }
        other => other,
    }
}
