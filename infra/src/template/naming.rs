//! Names of the local copies ([`Naming`]) and the parse options ([`TemplateOptions`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};

/// How local copies of the resources are named: a prefix and a suffix around every queue and
/// table name, with a FIFO queue's `.fifo` kept at the end. Tests use [`Naming::unique`] to get
/// an isolated copy of the whole stack on a shared endpoint.
///
/// ```
/// use local_aws::template::Naming;
///
/// let naming = Naming::prefix("dev-").with_suffix("-2");
/// assert_eq!(naming.apply("payments.fifo"), "dev-payments-2.fifo");
/// assert_eq!(naming.apply("payments-ledger"), "dev-payments-ledger-2");
/// assert_eq!(Naming::default().apply("receipts"), "receipts");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Naming {
    prefix: String,
    suffix: String,
}

impl Naming {
    /// Names as in the template.
    pub fn none() -> Self {
        Self::default()
    }

    /// Prepend `prefix` to every name.
    pub fn prefix(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            suffix: String::new(),
        }
    }

    /// Append `suffix` to every name (before `.fifo`).
    pub fn with_suffix(mut self, suffix: impl Into<String>) -> Self {
        self.suffix = suffix.into();
        self
    }

    /// A prefix no other call in this process (and, with the pid and clock in it, no other
    /// process) returns: `{tag}{pid}{nanos}{n}-`, short enough for SQS's 80-character names.
    ///
    /// ```
    /// use local_aws::template::Naming;
    /// assert_ne!(Naming::unique("t"), Naming::unique("t"));
    /// ```
    pub fn unique(tag: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos();
        Self::prefix(format!(
            "{tag}{}{nanos:x}{}-",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ))
    }

    /// The name of the local copy of `name`.
    pub fn apply(&self, name: &str) -> String {
        match name.strip_suffix(".fifo") {
            Some(base) => format!("{}{base}{}.fifo", self.prefix, self.suffix),
            None => format!("{}{name}{}", self.prefix, self.suffix),
        }
    }

    /// The prefix.
    pub fn prefix_str(&self) -> &str {
        &self.prefix
    }

    /// The suffix.
    pub fn suffix_str(&self) -> &str {
        &self.suffix
    }
}

/// Options for [`Template::parse`](super::Template::parse): naming, parameter overrides and the
/// pseudo parameters used in names (`${AWS::StackName}` etc.).
///
/// ```
/// use local_aws::template::{Naming, TemplateOptions};
///
/// let options = TemplateOptions::default()
///     .naming(Naming::prefix("it-"))
///     .parameter("FailPayments", "boom:2");
/// assert_eq!(options.parameters["FailPayments"], "boom:2");
/// ```
#[derive(Clone, Debug)]
pub struct TemplateOptions {
    /// Prefix/suffix for queue and table names.
    pub naming: Naming,
    /// Parameter values replacing the defaults (the name must be a parameter of the template).
    pub parameters: BTreeMap<String, String>,
    /// `AWS::StackName` (default `local`).
    pub stack_name: String,
    /// `AWS::Region` where a name needs it at parse time (default `us-east-1`).
    pub region: String,
    /// `AWS::AccountId` where a name needs it at parse time (default `123456789012`, moto's).
    pub account_id: String,
}

impl Default for TemplateOptions {
    fn default() -> Self {
        Self {
            naming: Naming::default(),
            parameters: BTreeMap::new(),
            stack_name: "local".into(),
            region: "us-east-1".into(),
            account_id: "123456789012".into(),
        }
    }
}

impl TemplateOptions {
    /// Use `naming` for queues and tables.
    pub fn naming(mut self, naming: Naming) -> Self {
        self.naming = naming;
        self
    }

    /// Override parameter `name`.
    pub fn parameter(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.parameters.insert(name.into(), value.into());
        self
    }
}
