//! A [`Recording`]: the distinct calls each function's code made in a run on the local
//! endpoint, with names made independent of the run, kept in the repository so that checks of
//! the template (the mutation test) run without an endpoint. The run that records them checks
//! that the committed recording still holds every call it saw, and rewrites it on request.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::call::{Call, LeadingKeys, Resource};
use crate::cfn::Environment;
use local_aws::arn::Arn;
use local_aws::provision::Provisioned;

/// The label every recorded stream ARN gets (DynamoDB gives a new one to each stream).
const STREAM_LABEL: &str = "2000-01-01T00:00:00.000";

/// Why a recording could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    /// The file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Not a recording.
    #[error("{}: not a recording: {source}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: serde_json::Error,
    },
}

/// Each function's distinct calls, and the environment that resolves the template's names to
/// the ones in the calls.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Recording {
    /// Region, account and the tables' stream ARNs; names are the template's.
    pub environment: Environment,
    /// Calls by function name.
    pub calls: BTreeMap<String, BTreeSet<Call>>,
}

impl Recording {
    /// The calls of a run that provisioned `provisioned` under the name prefix `prefix`, made
    /// independent of the run: the prefix removed from every name, queue URLs (with their
    /// port) dropped, stream labels replaced, and each partition key reduced to its prefix
    /// (`NAME#<key>`, or `<key>`), which is all a `dynamodb:LeadingKeys` condition of the
    /// project looks at.
    pub fn from_run(
        provisioned: &Provisioned,
        prefix: &str,
        calls: impl IntoIterator<Item = (String, Vec<Call>)>,
    ) -> Self {
        let name = |s: &str| stream_label(&s.replace(prefix, ""));
        let mut environment = Environment::new(&provisioned.region, &provisioned.account_id);
        for (id, t) in &provisioned.tables {
            if let Some(arn) = &t.stream_arn {
                environment = environment.attribute(id, "StreamArn", name(arn));
            }
        }
        let calls = calls
            .into_iter()
            .map(|(function, calls)| {
                let calls = calls.iter().map(|c| normalized(c, &name)).collect();
                (function, calls)
            })
            .collect();
        Self { environment, calls }
    }

    /// Reads a recording.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, RecordingError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| RecordingError::Io {
            path: path.to_owned(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|source| RecordingError::Json {
            path: path.to_owned(),
            source,
        })
    }

    /// Writes it (pretty JSON, one call per entry).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), RecordingError> {
        let path = path.as_ref();
        let mut text =
            serde_json::to_string_pretty(self).map_err(|source| RecordingError::Json {
                path: path.to_owned(),
                source,
            })?;
        text.push('\n');
        std::fs::write(path, text).map_err(|source| RecordingError::Io {
            path: path.to_owned(),
            source,
        })
    }

    /// The calls of `self` that `committed` lacks (`function: call` with its resources).
    pub fn missing_from(&self, committed: &Recording) -> Vec<String> {
        let mut out = Vec::new();
        for (function, calls) in &self.calls {
            let known = committed.calls.get(function);
            for call in calls {
                if !known.is_some_and(|k| k.contains(call)) {
                    out.push(format!("{function}: {call} {:?}", call.resources));
                }
            }
        }
        if self.environment != committed.environment {
            out.push(format!(
                "the environment: {:?} (committed: {:?})",
                self.environment, committed.environment
            ));
        }
        out
    }
}

/// `arn` with its stream label replaced by [`STREAM_LABEL`].
fn stream_label(arn: &str) -> String {
    match arn.split_once("/stream/") {
        Some((table, _)) if Arn::parse(arn).is_ok() => format!("{table}/stream/{STREAM_LABEL}"),
        _ => arn.to_owned(),
    }
}

fn key_prefix(key: &str) -> String {
    match key.split_once('#') {
        Some((prefix, _)) => format!("{prefix}#<key>"),
        None => "<key>".into(),
    }
}

fn normalized(call: &Call, name: &dyn Fn(&str) -> String) -> Call {
    let resources = call
        .resources
        .iter()
        .map(|r| match r {
            Resource::Table {
                name: table,
                arn,
                index,
                item,
                leading_keys,
            } => Resource::Table {
                name: name(table),
                arn: name(arn),
                index: index.clone(),
                item: *item,
                leading_keys: match leading_keys {
                    LeadingKeys::Known(keys) => {
                        let mut keys: Vec<String> = keys.iter().map(|k| key_prefix(k)).collect();
                        keys.sort();
                        keys.dedup();
                        LeadingKeys::Known(keys)
                    }
                    // Its reason names the physical table: without the run's prefix.
                    LeadingKeys::Unknown(reason) => LeadingKeys::Unknown(name(reason)),
                },
            },
            Resource::Stream { arn } => Resource::Stream { arn: name(arn) },
            Resource::Queue { arn, .. } => Resource::Queue {
                arn: name(arn),
                url: None,
            },
            unresolved => unresolved.clone(),
        })
        .collect();
    Call {
        service: call.service,
        operation: call.operation.clone(),
        resources,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_keys() {
        assert_eq!(
            stream_label("arn:aws:dynamodb:us-east-1:1:table/p/stream/2024-05-05T00:00:00.123"),
            format!("arn:aws:dynamodb:us-east-1:1:table/p/stream/{STREAM_LABEL}")
        );
        assert_eq!(stream_label("x/stream/y"), "x/stream/y");
        assert_eq!(key_prefix("payments-api#6:acct-1/k"), "payments-api#<key>");
        assert_eq!(key_prefix("pay_123"), "<key>");
    }
}
