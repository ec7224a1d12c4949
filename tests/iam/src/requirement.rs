//! What Lambda itself does with a function's execution role, read from the template: its event
//! source mappings read their stream or queue (and send to an on-failure destination), and the
//! platform writes the function's logs. None of it is the function's code, so none of it is
//! recorded: the conformance check requires exactly the actions AWS documents for each (see
//! [`reference`](crate::reference)).

use std::fmt;

use serde_yaml_ng::Mapping;

use local_aws::template::Function;

use crate::cfn::Resolver;
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

/// What the event source mappings of `f` (the model's, from the translator's
/// `AWS::Lambda::EventSourceMapping`s) require: reading their queue or stream, and sending to
/// their on-failure queue.
pub(crate) fn event_sources(
    f: &Function,
    resolver: &Resolver<'_>,
    at: &str,
) -> Result<Vec<Requirement>, PolicyError> {
    let mut out = Vec::new();
    let by = |event: &str| Requirer::EventSource {
        event: event.to_owned(),
    };
    for e in &f.sqs_events {
        let arn = resolver.get_att(&e.queue, "Arn", at)?;
        out.extend(requirements(&by(&e.name), SQS_SOURCE, &arn));
    }
    for e in &f.dynamodb_events {
        // A stream's label is DynamoDB's: without it, the grant must cover every stream.
        let arn = match resolver.get_att(&e.table, "StreamArn", at) {
            Err(PolicyError::Unresolved { .. }) => {
                format!("{}/stream/*", resolver.get_att(&e.table, "Arn", at)?)
            }
            other => other?,
        };
        out.extend(requirements(&by(&e.name), DYNAMODB_STREAM_SOURCE, &arn));
        if let Some(q) = &e.on_failure_queue {
            let on_failure = Requirer::OnFailure {
                event: e.name.clone(),
            };
            let arn = resolver.get_att(q, "Arn", at)?;
            out.extend(requirements(&on_failure, SQS_ON_FAILURE, &arn));
        }
    }
    Ok(out)
}
