//! Why the template's roles could not be read: [`PolicyError`].

use std::path::PathBuf;

/// Why the template's roles could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The text is not YAML.
    #[error("the template is not valid YAML: {0}")]
    Yaml(#[from] serde_yaml_ng::Error),
    /// Not a valid template or policy (`at`: the path in the document).
    #[error("{at}: {message}")]
    Invalid {
        /// Where, e.g. `Resources.PaymentsApiRole.Properties.Policies[0]`.
        at: String,
        /// What is wrong.
        message: String,
    },
    /// Valid, but not modelled here: evaluating without it would be wrong.
    #[error("{at}: {what} is not supported by the IAM model")]
    Unsupported {
        /// Where.
        at: String,
        /// What.
        what: String,
    },
    /// A reference the [`Environment`](super::Environment) does not resolve.
    #[error("{at}: cannot resolve {reference}: not in the environment")]
    Unresolved {
        /// Where.
        at: String,
        /// The reference, e.g. `!GetAtt PaymentsTable.StreamArn`.
        reference: String,
    },
    /// No function of that name, or it has no role.
    #[error("no function named {0} in the template")]
    NoSuchFunction(String),
    /// No managed policy of that logical id.
    #[error("no AWS::IAM::ManagedPolicy {0} in the template")]
    NoSuchManagedPolicy(String),
    /// DescribeTable failed while looking up a stream ARN.
    #[error("DescribeTable {table}: {message}")]
    Lookup {
        /// The table.
        table: String,
        /// The SDK error.
        message: String,
    },
}

impl PolicyError {
    pub(crate) fn invalid(at: &str, message: impl Into<String>) -> Self {
        Self::Invalid {
            at: at.to_owned(),
            message: message.into(),
        }
    }

    pub(crate) fn unsupported(at: &str, what: impl Into<String>) -> Self {
        Self::Unsupported {
            at: at.to_owned(),
            what: what.into(),
        }
    }
}
