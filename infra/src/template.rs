//! The SAM template as a model: parameters, SQS queues, DynamoDB tables and functions with their
//! SQS event sources and HTTP routes.
//!
//! Only what the local harness needs is modelled; everything that has no local effect (IAM roles,
//! log groups, alarms, encryption settings) is skipped. Properties that *would* change behaviour
//! but are not emulated (secondary indexes, `Conditions`) are rejected with an error rather than
//! silently ignored, so the harness never runs something different from what is deployed.
//!
//! Values are resolved while parsing where they can be: parameters (defaults, or the overrides
//! in [`TemplateOptions`]), `AWS::*` pseudo parameters inside names, and `!FindInMap` lookups in
//! the template's [`Mappings`]. References to resources
//! (`!Ref PaymentsQueue`, `!GetAtt PaymentsQueue.Arn`) in environment variables stay symbolic
//! ([`Expr`]) until the resources exist; see
//! [`Provisioned::function_env`](crate::provision::Provisioned::function_env).
//!
//! ```
//! use local_aws::template::{Naming, Template, TemplateOptions};
//!
//! let options = TemplateOptions::default()
//!     .naming(Naming::prefix("t1-"))
//!     .parameter("MaxAttempts", "3");
//! let template = Template::load_project(&options).unwrap();
//!
//! let queue = &template.queues["PaymentsQueue"];
//! assert_eq!(queue.name, "t1-payments.fifo");
//! // Derived from MaxAttempts through Mappings.RedriveBackstop: (10 - 1) * (3 - 1) + 3.
//! assert_eq!(queue.redrive.as_ref().unwrap().max_receive_count, 21);
//! assert_eq!(template.functions["PaymentProcessorFunction"].timeout_seconds, 30);
//! ```

// YAML crate choice: `serde_yaml_ng`, the maintained continuation of dtolnay's (archived)
// `serde_yaml`, with the same API. Its `Value::Tagged` keeps CloudFormation's short-form tags
// (`!Ref X`, `!GetAtt A.B`, `!Sub "..."`), which plain YAML loaders drop or reject. The other
// candidates: `serde_norway` (another fork, same API, fewer users); `serde_yml` (deprecated);
// `yaml-rust2`/`saphyr` (no serde, hand-walked events for the same result).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_yaml_ng::{Mapping, Value};

mod mappings;

pub use mappings::{MapValue, Mappings};

/// Why a template could not be turned into a [`Template`].
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
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
    /// The YAML is not a template this harness can run (`at` is the path in the document).
    #[error("{at}: {message}")]
    Invalid {
        /// Where, e.g. `Resources.PaymentsQueue.Properties.VisibilityTimeout`.
        at: String,
        /// What is wrong.
        message: String,
    },
}

fn invalid(at: &str, message: impl Into<String>) -> TemplateError {
    TemplateError::Invalid {
        at: at.to_owned(),
        message: message.into(),
    }
}

type Result<T, E = TemplateError> = std::result::Result<T, E>;

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

/// Options for [`Template::parse`]: naming, parameter overrides and the pseudo parameters used
/// in names (`${AWS::StackName}` etc.).
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

/// A template parameter.
#[derive(Clone, Debug, PartialEq)]
pub struct Parameter {
    /// `Type` (`String`, `Number`, ...).
    pub kind: String,
    /// `Default`, as text.
    pub default: Option<String>,
    /// The value in effect: the override, else the default.
    pub value: Option<String>,
    /// `AllowedValues`, as text.
    pub allowed_values: Vec<String>,
    /// `AllowedPattern` (not checked locally).
    pub allowed_pattern: Option<String>,
}

/// An `AWS::SQS::Queue`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Queue {
    /// The logical id.
    pub logical_id: String,
    /// The queue name, with the [`Naming`] applied.
    pub name: String,
    /// `FifoQueue`.
    pub fifo: bool,
    /// `ContentBasedDeduplication` (FIFO only).
    pub content_based_deduplication: bool,
    /// `VisibilityTimeout` in seconds (default 30).
    pub visibility_timeout: u32,
    /// `MessageRetentionPeriod` in seconds (default 345600, 4 days).
    pub message_retention_period: u32,
    /// `DelaySeconds` (default 0).
    pub delay_seconds: u32,
    /// `ReceiveMessageWaitTimeSeconds`, when set.
    pub receive_message_wait_time_seconds: Option<u32>,
    /// `MaximumMessageSize`, when set.
    pub maximum_message_size: Option<u32>,
    /// `RedrivePolicy`.
    pub redrive: Option<Redrive>,
}

/// A queue's `RedrivePolicy`, with the dead-letter queue as a logical id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redrive {
    /// Logical id of the dead-letter queue (from `deadLetterTargetArn: !GetAtt X.Arn`).
    pub dead_letter_queue: String,
    /// `maxReceiveCount`, resolved.
    pub max_receive_count: u32,
}

/// A DynamoDB attribute type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum AttributeType {
    /// `S`
    String,
    /// `N`
    Number,
    /// `B`
    Binary,
}

impl AttributeType {
    /// `S`, `N` or `B`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::String => "S",
            Self::Number => "N",
            Self::Binary => "B",
        }
    }
}

/// A key's role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum KeyType {
    /// Partition key.
    Hash,
    /// Sort key.
    Range,
}

impl KeyType {
    /// `HASH` or `RANGE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hash => "HASH",
            Self::Range => "RANGE",
        }
    }
}

/// One element of a key schema, with its attribute type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyAttribute {
    /// Attribute name.
    pub name: String,
    /// `S`, `N` or `B`.
    pub attribute_type: AttributeType,
    /// `HASH` or `RANGE`.
    pub key_type: KeyType,
}

/// An `AWS::DynamoDB::Table`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    /// The logical id.
    pub logical_id: String,
    /// The table name, with the [`Naming`] applied.
    pub name: String,
    /// The key schema in template order (partition key first), with attribute types.
    pub key_schema: Vec<KeyAttribute>,
    /// The TTL attribute when `TimeToLiveSpecification.Enabled` is true.
    pub ttl_attribute: Option<String>,
}

impl Table {
    /// The partition key.
    pub fn partition_key(&self) -> &KeyAttribute {
        self.key_schema
            .iter()
            .find(|k| k.key_type == KeyType::Hash)
            .expect("validated at parse time: one HASH key")
    }

    /// The sort key, if any.
    pub fn sort_key(&self) -> Option<&KeyAttribute> {
        self.key_schema
            .iter()
            .find(|k| k.key_type == KeyType::Range)
    }
}

/// One piece of an [`Expr`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// Literal text.
    Text(String),
    /// `!Ref X` (X a resource or an `AWS::*` pseudo parameter).
    Ref(String),
    /// `!GetAtt X.Attribute`.
    GetAtt(String, String),
}

/// A value that may refer to resources, e.g. an environment variable: `!Ref PaymentsQueue`
/// (the queue URL), `!Sub "${PaymentsTable}-x"`. Parameters are already substituted.
///
/// ```
/// use local_aws::template::{Part, Template, TemplateOptions};
///
/// let template = Template::load_project(&TemplateOptions::default()).unwrap();
/// let env = &template.functions["PaymentsApiFunction"].environment;
/// assert_eq!(env["PAYMENTS_QUEUE_URL"].parts(), &[Part::Ref("PaymentsQueue".into())]);
/// assert_eq!(env["IDEMPOTENCY_TTL_SECONDS"].as_literal(), Some("86400"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expr {
    parts: Vec<Part>,
}

impl Expr {
    /// A literal.
    pub fn literal(text: impl Into<String>) -> Self {
        Self {
            parts: vec![Part::Text(text.into())],
        }
    }

    /// The parts, adjacent texts merged.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// The text, when nothing in it refers to a resource or pseudo parameter.
    pub fn as_literal(&self) -> Option<&str> {
        match self.parts.as_slice() {
            [] => Some(""),
            [Part::Text(t)] => Some(t),
            _ => None,
        }
    }

    fn from_parts(parts: Vec<Part>) -> Self {
        let mut merged: Vec<Part> = Vec::with_capacity(parts.len());
        for part in parts {
            match (merged.last_mut(), part) {
                (_, Part::Text(t)) if t.is_empty() => {}
                (Some(Part::Text(prev)), Part::Text(t)) => prev.push_str(&t),
                (_, part) => merged.push(part),
            }
        }
        Self { parts: merged }
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for part in &self.parts {
            match part {
                Part::Text(t) => f.write_str(t)?,
                Part::Ref(r) => write!(f, "${{{r}}}")?,
                Part::GetAtt(r, a) => write!(f, "${{{r}.{a}}}")?,
            }
        }
        Ok(())
    }
}

/// An SQS event source of a function (`Events.X.Type: SQS`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqsEventSource {
    /// The event's name in `Events`.
    pub name: String,
    /// Logical id of the queue.
    pub queue: String,
    /// `BatchSize` (default 10).
    pub batch_size: u32,
    /// `MaximumBatchingWindowInSeconds` (default 0).
    pub maximum_batching_window_in_seconds: u32,
    /// `FunctionResponseTypes`.
    pub function_response_types: Vec<String>,
    /// `ScalingConfig.MaximumConcurrency`.
    pub maximum_concurrency: Option<u32>,
    /// `Enabled` (default true).
    pub enabled: bool,
}

impl SqsEventSource {
    /// Whether the function returns partial batch responses (`ReportBatchItemFailures`).
    pub fn reports_batch_item_failures(&self) -> bool {
        self.function_response_types
            .iter()
            .any(|t| t == "ReportBatchItemFailures")
    }
}

/// An HTTP API route of a function (`Events.X.Type: HttpApi`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpRoute {
    /// The event's name in `Events`.
    pub name: String,
    /// `Method` (upper case; `ANY` when absent).
    pub method: String,
    /// `Path`, e.g. `/payments/{paymentId}` (`/{proxy+}` when absent).
    pub path: String,
}

/// An `AWS::Serverless::Function`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    /// The logical id.
    pub logical_id: String,
    /// `FunctionName` (the logical id when absent).
    pub name: String,
    /// `Metadata.BuildProperties.Binary`: the cargo binary (cargo-lambda build).
    pub binary: Option<String>,
    /// `Timeout` in seconds (function, else `Globals`, else 3).
    pub timeout_seconds: u32,
    /// `MemorySize` in MB (function, else `Globals`, else 128).
    pub memory_size: u32,
    /// `Environment.Variables`: `Globals` merged with the function's own (which win).
    pub environment: BTreeMap<String, Expr>,
    /// SQS event sources.
    pub sqs_events: Vec<SqsEventSource>,
    /// HTTP API routes.
    pub http_routes: Vec<HttpRoute>,
    /// Whether it has a function URL (`FunctionUrlConfig`).
    pub function_url: bool,
}

impl Function {
    /// The function timeout: what a local invocation gets before it counts as timed out.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_seconds.into())
    }
}

/// A remark of [`Template::check`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The logical id concerned.
    pub resource: String,
    /// What is off.
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.resource, self.message)
    }
}

/// The template, resolved (see the [module docs](self)).
#[derive(Clone, Debug)]
pub struct Template {
    /// Parameters by name.
    pub parameters: BTreeMap<String, Parameter>,
    /// SQS queues by logical id.
    pub queues: BTreeMap<String, Queue>,
    /// DynamoDB tables by logical id.
    pub tables: BTreeMap<String, Table>,
    /// Functions by logical id.
    pub functions: BTreeMap<String, Function>,
    /// The `Mappings` section (every `!FindInMap` is already resolved with it).
    pub mappings: Mappings,
    /// The naming the names were built with.
    pub naming: Naming,
}

impl Template {
    /// The project's `template.yaml` (next to the workspace `Cargo.toml`).
    pub fn project_path() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../template.yaml")
    }

    /// Parses the project's `template.yaml`.
    pub fn load_project(options: &TemplateOptions) -> Result<Self> {
        Self::from_file(Self::project_path(), options)
    }

    /// Parses the template at `path`.
    pub fn from_file(path: impl AsRef<Path>, options: &TemplateOptions) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| TemplateError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, options)
    }

    /// Parses a template.
    ///
    /// ```
    /// use local_aws::template::{Template, TemplateOptions};
    ///
    /// let yaml = r#"
    /// Parameters:
    ///   Name: { Type: String, Default: jobs }
    /// Resources:
    ///   Jobs:
    ///     Type: AWS::SQS::Queue
    ///     Properties: { QueueName: !Sub "${Name}-${AWS::StackName}", VisibilityTimeout: 60 }
    /// "#;
    /// let template = Template::parse(yaml, &TemplateOptions::default()).unwrap();
    /// assert_eq!(template.queues["Jobs"].name, "jobs-local");
    /// assert_eq!(template.queues["Jobs"].visibility_timeout, 60);
    /// ```
    pub fn parse(yaml: &str, options: &TemplateOptions) -> Result<Self> {
        let doc: Value = serde_yaml_ng::from_str(yaml)?;
        let root = doc
            .as_mapping()
            .ok_or_else(|| invalid("<root>", "not a mapping"))?;
        if root.get("Conditions").is_some() {
            return Err(invalid(
                "Conditions",
                "conditions are not supported by the local harness",
            ));
        }
        let parameters = parse_parameters(root, options)?;
        let mappings = Mappings::parse(root)?;
        let env = mappings::Env {
            parameters: &parameters,
            options,
        };
        let resolved_resources = match root.get("Resources") {
            Some(r @ Value::Mapping(_)) => mappings.resolve(r, &env, "Resources")?,
            _ => return Err(invalid("Resources", "missing or not a mapping")),
        };
        let resources = resolved_resources
            .as_mapping()
            .expect("resolving keeps a mapping a mapping");
        let mut types = BTreeMap::new();
        for (id, resource) in resources {
            let id = key_str(id, "Resources")?;
            let at = format!("Resources.{id}");
            let kind = match resource.get("Type") {
                Some(Value::String(t)) => t.clone(),
                _ => return Err(invalid(&at, "missing Type")),
            };
            if resource.get("Condition").is_some() {
                return Err(invalid(
                    &at,
                    "Condition is not supported by the local harness",
                ));
            }
            types.insert(id.to_owned(), kind);
        }
        let ctx = Ctx {
            parameters: &parameters,
            options,
            types: &types,
        };

        let mut template = Template {
            parameters: parameters.clone(),
            queues: BTreeMap::new(),
            tables: BTreeMap::new(),
            functions: BTreeMap::new(),
            mappings: mappings.clone(),
            naming: options.naming.clone(),
        };
        let resolved_globals = root
            .get("Globals")
            .map(|g| mappings.resolve(g, &env, "Globals"))
            .transpose()?;
        let globals = resolved_globals
            .as_ref()
            .and_then(|g| g.get("Function"))
            .and_then(Value::as_mapping);
        for (id, resource) in resources {
            let id = key_str(id, "Resources")?;
            let at = format!("Resources.{id}");
            let empty = Mapping::new();
            let props = match resource.get("Properties") {
                None => &empty,
                Some(Value::Mapping(m)) => m,
                Some(_) => return Err(invalid(&format!("{at}.Properties"), "not a mapping")),
            };
            match types[id].as_str() {
                "AWS::SQS::Queue" => {
                    let queue = ctx.queue(id, props, &at)?;
                    template.queues.insert(id.to_owned(), queue);
                }
                "AWS::DynamoDB::Table" => {
                    let table = ctx.table(id, props, &at)?;
                    template.tables.insert(id.to_owned(), table);
                }
                "AWS::Serverless::Function" => {
                    let function = ctx.function(id, resource, props, globals, &at)?;
                    template.functions.insert(id.to_owned(), function);
                }
                _ => {}
            }
        }
        for queue in template.queues.values() {
            if let Some(redrive) = &queue.redrive
                && !template.queues.contains_key(&redrive.dead_letter_queue)
            {
                return Err(invalid(
                    &format!("Resources.{}.Properties.RedrivePolicy", queue.logical_id),
                    format!("{} is not a queue", redrive.dead_letter_queue),
                ));
            }
        }
        for function in template.functions.values() {
            for event in &function.sqs_events {
                if !template.queues.contains_key(&event.queue) {
                    return Err(invalid(
                        &format!(
                            "Resources.{}.Properties.Events.{}",
                            function.logical_id, event.name
                        ),
                        format!("{} is not a queue", event.queue),
                    ));
                }
            }
        }
        Ok(template)
    }

    /// The resolved value of parameter `name`.
    pub fn parameter(&self, name: &str) -> Option<&str> {
        self.parameters.get(name)?.value.as_deref()
    }

    /// The function whose `FunctionName` is `name`.
    pub fn function_by_name(&self, name: &str) -> Option<&Function> {
        self.functions.values().find(|f| f.name == name)
    }

    /// The queues in creation order: every dead-letter queue before the queues that use it.
    pub fn queues_in_creation_order(&self) -> Vec<&Queue> {
        let mut done = BTreeSet::new();
        let mut order = Vec::new();
        fn visit<'a>(
            t: &'a Template,
            q: &'a Queue,
            done: &mut BTreeSet<&'a str>,
            order: &mut Vec<&'a Queue>,
            depth: usize,
        ) {
            if done.contains(q.logical_id.as_str()) || depth > t.queues.len() {
                return;
            }
            if let Some(r) = &q.redrive
                && let Some(dlq) = t.queues.get(&r.dead_letter_queue)
            {
                visit(t, dlq, done, order, depth + 1);
            }
            if done.insert(&q.logical_id) {
                order.push(q);
            }
        }
        for q in self.queues.values() {
            visit(self, q, &mut done, &mut order, 0);
        }
        order
    }

    /// Every (function, SQS event source) pair, enabled or not.
    pub fn sqs_event_sources(&self) -> impl Iterator<Item = (&Function, &SqsEventSource)> {
        self.functions
            .values()
            .flat_map(|f| f.sqs_events.iter().map(move |e| (f, e)))
    }

    /// Checks the template against the rules in `aws-facts.md` that a deployment would not
    /// reject but that break exactly-once-in-effect processing or waste retries: visibility
    /// timeout at least 6 x the consumer's timeout, FIFO/standard dead-letter queues matching
    /// their source, FIFO batch limits, `ReportBatchItemFailures`, `MaximumConcurrency` range,
    /// dead-letter retention at least the source's; and, for a consumer with `MAX_ATTEMPTS` in its
    /// environment, a redrive `maxReceiveCount` that a message blocked behind others of its FIFO
    /// group cannot reach before its attempts are used up
    /// ([`min_max_receive_count`](lambda_idempotency::redrive_policy::min_max_receive_count)), and
    /// an `EVENT_SOURCE_BATCH_SIZE` equal to the event source's `BatchSize`.
    ///
    /// ```
    /// use local_aws::template::{Template, TemplateOptions};
    /// let template = Template::load_project(&TemplateOptions::default()).unwrap();
    /// assert_eq!(template.check(), vec![]);
    /// ```
    pub fn check(&self) -> Vec<Finding> {
        let mut findings = Vec::new();
        let mut finding = |resource: &str, message: String| {
            findings.push(Finding {
                resource: resource.to_owned(),
                message,
            })
        };
        for q in self.queues.values() {
            if let Some(r) = &q.redrive
                && let Some(dlq) = self.queues.get(&r.dead_letter_queue)
            {
                if dlq.fifo != q.fifo {
                    finding(
                        &q.logical_id,
                        format!(
                            "dead-letter queue {} must be {} like its source",
                            dlq.logical_id,
                            if q.fifo { "FIFO" } else { "standard" }
                        ),
                    );
                }
                if dlq.message_retention_period < q.message_retention_period {
                    finding(
                        &q.logical_id,
                        format!(
                            "dead-letter queue {} keeps messages {} s, less than the source's {} s",
                            dlq.logical_id,
                            dlq.message_retention_period,
                            q.message_retention_period
                        ),
                    );
                }
            }
        }
        for (f, e) in self.sqs_event_sources() {
            let Some(q) = self.queues.get(&e.queue) else {
                continue;
            };
            let at = format!("{}.Events.{}", f.logical_id, e.name);
            if u64::from(q.visibility_timeout) < 6 * u64::from(f.timeout_seconds) {
                finding(
                    &at,
                    format!(
                        "queue {} has VisibilityTimeout {} s, less than 6 x the function timeout ({} s)",
                        q.logical_id, q.visibility_timeout, f.timeout_seconds
                    ),
                );
            }
            if q.fifo && e.batch_size > 10 {
                finding(
                    &at,
                    format!("BatchSize {} > 10 on a FIFO queue", e.batch_size),
                );
            }
            if q.fifo && e.maximum_batching_window_in_seconds > 0 {
                finding(
                    &at,
                    "MaximumBatchingWindowInSeconds is not supported for FIFO queues".into(),
                );
            }
            if !q.fifo && e.batch_size > 10 && e.maximum_batching_window_in_seconds == 0 {
                finding(
                    &at,
                    format!(
                        "BatchSize {} > 10 needs MaximumBatchingWindowInSeconds >= 1",
                        e.batch_size
                    ),
                );
            }
            if !(1..=10_000).contains(&e.batch_size) {
                finding(&at, format!("BatchSize {} not in 1..=10000", e.batch_size));
            }
            if !e.reports_batch_item_failures() {
                finding(
                    &at,
                    "no FunctionResponseTypes: [ReportBatchItemFailures]: one failed record redelivers the whole batch".into(),
                );
            }
            if let Some(c) = e.maximum_concurrency
                && !(2..=1000).contains(&c)
            {
                finding(
                    &at,
                    format!("ScalingConfig.MaximumConcurrency {c} not in 2..=1000"),
                );
            }
            let literal = |name: &str| f.environment.get(name).and_then(Expr::as_literal);
            if let Some(size) = literal("EVENT_SOURCE_BATCH_SIZE")
                && size.parse::<u32>().ok() != Some(e.batch_size)
            {
                finding(
                    &at,
                    format!(
                        "EVENT_SOURCE_BATCH_SIZE {size} is not the event source's BatchSize {}",
                        e.batch_size
                    ),
                );
            }
            if let (Some(attempts), Some(r)) = (literal("MAX_ATTEMPTS"), &q.redrive) {
                match attempts.parse::<u32>() {
                    Ok(n) => {
                        let required = lambda_idempotency::redrive_policy::min_max_receive_count(
                            e.batch_size,
                            n,
                        );
                        if r.max_receive_count < required {
                            finding(
                                &at,
                                format!(
                                    "queue {} has maxReceiveCount {}, below {required} = (BatchSize - 1) x (MAX_ATTEMPTS - 1) + MAX_ATTEMPTS for BatchSize {} and MAX_ATTEMPTS {n}: SQS would dead-letter messages blocked behind a failing one of their group",
                                    q.logical_id, r.max_receive_count, e.batch_size
                                ),
                            );
                        }
                    }
                    Err(_) => finding(&at, format!("MAX_ATTEMPTS {attempts:?} is not a number")),
                }
            }
        }
        findings
    }
}

// ------------------------------------------------------------------------------------------------
// parsing

fn key_str<'a>(key: &'a Value, at: &str) -> Result<&'a str> {
    match key {
        Value::String(s) => Ok(s),
        _ => Err(invalid(at, "a key is not a string")),
    }
}

/// A plain (untagged) scalar as text.
fn plain_scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn parse_parameters(
    root: &Mapping,
    options: &TemplateOptions,
) -> Result<BTreeMap<String, Parameter>> {
    let mut out = BTreeMap::new();
    if let Some(params) = root.get("Parameters") {
        let params = params
            .as_mapping()
            .ok_or_else(|| invalid("Parameters", "not a mapping"))?;
        for (name, spec) in params {
            let name = key_str(name, "Parameters")?;
            let at = format!("Parameters.{name}");
            let field = |key: &str| spec.get(key).and_then(plain_scalar);
            let kind = field("Type").ok_or_else(|| invalid(&at, "missing Type"))?;
            let default = field("Default");
            let allowed_values = match spec.get("AllowedValues") {
                Some(Value::Sequence(s)) => s.iter().filter_map(plain_scalar).collect(),
                _ => Vec::new(),
            };
            let value = options
                .parameters
                .get(name)
                .cloned()
                .or_else(|| default.clone());
            if let Some(v) = &value {
                check_parameter(&at, &kind, v, spec, &allowed_values)?;
            }
            out.insert(
                name.to_owned(),
                Parameter {
                    kind,
                    default,
                    value,
                    allowed_values,
                    allowed_pattern: field("AllowedPattern"),
                },
            );
        }
    }
    if let Some(unknown) = options.parameters.keys().find(|k| !out.contains_key(*k)) {
        return Err(invalid(
            &format!("Parameters.{unknown}"),
            "overridden but not a parameter of the template",
        ));
    }
    Ok(out)
}

fn check_parameter(
    at: &str,
    kind: &str,
    value: &str,
    spec: &Value,
    allowed: &[String],
) -> Result<()> {
    if !allowed.is_empty() && !allowed.iter().any(|a| a == value) {
        return Err(invalid(
            at,
            format!("{value:?} is not one of AllowedValues {allowed:?}"),
        ));
    }
    let bound = |key: &str| spec.get(key).and_then(Value::as_f64);
    if kind == "Number" {
        let n: f64 = value
            .parse()
            .map_err(|_| invalid(at, format!("{value:?} is not a Number")))?;
        if bound("MinValue").is_some_and(|min| n < min)
            || bound("MaxValue").is_some_and(|max| n > max)
        {
            return Err(invalid(at, format!("{value} is out of MinValue/MaxValue")));
        }
    } else {
        let len = value.chars().count() as f64;
        if bound("MinLength").is_some_and(|min| len < min)
            || bound("MaxLength").is_some_and(|max| len > max)
        {
            return Err(invalid(
                at,
                format!("{value:?} is out of MinLength/MaxLength"),
            ));
        }
    }
    Ok(())
}

const PSEUDO: &[&str] = &[
    "AWS::Region",
    "AWS::AccountId",
    "AWS::StackName",
    "AWS::StackId",
    "AWS::Partition",
    "AWS::URLSuffix",
    "AWS::NoValue",
];

/// The intrinsic function of a tagged value (`!Ref`) or a one-key mapping (`Ref:`), by its
/// short name (`Ref`, `GetAtt`, `Sub`, `Join`, ...).
fn intrinsic(v: &Value) -> Option<(String, &Value)> {
    let short = |name: &str| {
        let name = name.trim_start_matches('!');
        name.strip_prefix("Fn::").unwrap_or(name).to_owned()
    };
    match v {
        Value::Tagged(t) => Some((short(&t.tag.to_string()), &t.value)),
        Value::Mapping(m) if m.len() == 1 => {
            let (k, v) = m.iter().next()?;
            let Value::String(k) = k else { return None };
            (k == "Ref" || k.starts_with("Fn::")).then(|| (short(k), v))
        }
        _ => None,
    }
}

/// Parses a value into parts, without resolving anything.
fn parse_expr(v: &Value, at: &str) -> Result<Vec<Part>> {
    if let Some(s) = plain_scalar(v) {
        return Ok(vec![Part::Text(s)]);
    }
    let Some((function, arg)) = intrinsic(v) else {
        return Err(invalid(at, "expected a scalar or an intrinsic function"));
    };
    match function.as_str() {
        "Ref" => match arg {
            Value::String(name) => Ok(vec![Part::Ref(name.clone())]),
            _ => Err(invalid(at, "!Ref needs a name")),
        },
        "GetAtt" => {
            let (resource, attribute) = match arg {
                Value::String(s) => s
                    .split_once('.')
                    .map(|(r, a)| (r.to_owned(), a.to_owned()))
                    .ok_or_else(|| invalid(at, "!GetAtt needs Resource.Attribute"))?,
                Value::Sequence(s) if s.len() == 2 => match (&s[0], &s[1]) {
                    (Value::String(r), Value::String(a)) => (r.clone(), a.clone()),
                    _ => return Err(invalid(at, "!GetAtt needs [Resource, Attribute]")),
                },
                _ => return Err(invalid(at, "!GetAtt needs Resource.Attribute")),
            };
            Ok(vec![Part::GetAtt(resource, attribute)])
        }
        "Sub" => {
            let (text, vars) = match arg {
                Value::String(s) => (s.as_str(), None),
                Value::Sequence(s) if s.len() == 2 => match (&s[0], &s[1]) {
                    (Value::String(t), Value::Mapping(m)) => (t.as_str(), Some(m)),
                    _ => return Err(invalid(at, "!Sub needs a string or [string, variables]")),
                },
                _ => return Err(invalid(at, "!Sub needs a string or [string, variables]")),
            };
            parse_sub(text, vars, at)
        }
        "Join" => {
            let Value::Sequence(s) = arg else {
                return Err(invalid(at, "!Join needs [delimiter, [values]]"));
            };
            let (Some(Value::String(delimiter)), Some(Value::Sequence(items)), 2) =
                (s.first(), s.get(1), s.len())
            else {
                return Err(invalid(at, "!Join needs [delimiter, [values]]"));
            };
            let mut parts = Vec::new();
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    parts.push(Part::Text(delimiter.clone()));
                }
                parts.extend(parse_expr(item, at)?);
            }
            Ok(parts)
        }
        other => Err(invalid(
            at,
            format!("intrinsic function {other} is not supported by the local harness"),
        )),
    }
}

fn parse_sub(text: &str, vars: Option<&Mapping>, at: &str) -> Result<Vec<Part>> {
    let mut parts = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        parts.push(Part::Text(rest[..start].to_owned()));
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| invalid(at, format!("unclosed ${{ in !Sub {text:?}")))?;
        let name = after[..end].trim();
        if let Some(literal) = name.strip_prefix('!') {
            parts.push(Part::Text(format!("${{{literal}}}")));
        } else if let Some(value) = vars.and_then(|m| m.get(name)) {
            parts.extend(parse_expr(value, at)?);
        } else if let Some((resource, attribute)) =
            name.split_once('.').filter(|_| !name.starts_with("AWS::"))
        {
            parts.push(Part::GetAtt(resource.to_owned(), attribute.to_owned()));
        } else {
            parts.push(Part::Ref(name.to_owned()));
        }
        rest = &after[end + 1..];
    }
    parts.push(Part::Text(rest.to_owned()));
    Ok(parts)
}

struct Ctx<'a> {
    parameters: &'a BTreeMap<String, Parameter>,
    options: &'a TemplateOptions,
    types: &'a BTreeMap<String, String>,
}

impl Ctx<'_> {
    /// Substitutes parameters; checks resource references against what the harness resolves.
    fn expr(&self, v: &Value, at: &str) -> Result<Expr> {
        let mut out = Vec::new();
        for part in parse_expr(v, at)? {
            match part {
                Part::Ref(name) if self.parameters.contains_key(&name) => {
                    let value = self.parameters[&name].value.clone().ok_or_else(|| {
                        invalid(at, format!("parameter {name} has no Default and no value"))
                    })?;
                    out.push(Part::Text(value));
                }
                Part::Ref(name) if PSEUDO.contains(&name.as_str()) => out.push(Part::Ref(name)),
                Part::Ref(name) => match self.types.get(&name).map(String::as_str) {
                    Some(
                        "AWS::SQS::Queue" | "AWS::DynamoDB::Table" | "AWS::Serverless::Function",
                    ) => out.push(Part::Ref(name)),
                    Some(t) => {
                        return Err(invalid(
                            at,
                            format!("!Ref {name}: {t} is not emulated by the local harness"),
                        ));
                    }
                    None => {
                        return Err(invalid(
                            at,
                            format!("!Ref {name}: no such parameter or resource"),
                        ));
                    }
                },
                Part::GetAtt(resource, attribute) => {
                    let ok = match self.types.get(&resource).map(String::as_str) {
                        Some("AWS::SQS::Queue") => {
                            matches!(attribute.as_str(), "Arn" | "QueueName" | "QueueUrl")
                        }
                        Some("AWS::DynamoDB::Table") | Some("AWS::Serverless::Function") => {
                            attribute == "Arn"
                        }
                        Some(_) => false,
                        None => {
                            return Err(invalid(
                                at,
                                format!("!GetAtt {resource}.{attribute}: no such resource"),
                            ));
                        }
                    };
                    if !ok {
                        return Err(invalid(
                            at,
                            format!(
                                "!GetAtt {resource}.{attribute} is not emulated by the local harness"
                            ),
                        ));
                    }
                    out.push(Part::GetAtt(resource, attribute));
                }
                text => out.push(text),
            }
        }
        Ok(Expr::from_parts(out))
    }

    /// A value known at parse time: literals, parameters and pseudo parameters only.
    fn scalar(&self, v: &Value, at: &str) -> Result<String> {
        let expr = self.expr(v, at)?;
        let mut out = String::new();
        for part in expr.parts() {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Ref(p) if PSEUDO.contains(&p.as_str()) => out.push_str(&pseudo(
                    p,
                    &self.options.region,
                    &self.options.account_id,
                    &self.options.stack_name,
                )),
                other => {
                    return Err(invalid(
                        at,
                        format!(
                            "{other:?}: only parameters and AWS:: pseudo parameters can be used here"
                        ),
                    ));
                }
            }
        }
        Ok(out)
    }

    fn opt_scalar(&self, m: &Mapping, key: &str, at: &str) -> Result<Option<String>> {
        m.get(key)
            .map(|v| self.scalar(v, &format!("{at}.{key}")))
            .transpose()
    }

    fn opt_u32(&self, m: &Mapping, key: &str, at: &str) -> Result<Option<u32>> {
        self.opt_scalar(m, key, at)?
            .map(|s| {
                s.trim().parse::<u32>().map_err(|_| {
                    invalid(
                        &format!("{at}.{key}"),
                        format!("{s:?} is not a whole number"),
                    )
                })
            })
            .transpose()
    }

    fn u32_in(
        &self,
        m: &Mapping,
        key: &str,
        at: &str,
        default: u32,
        range: std::ops::RangeInclusive<u32>,
    ) -> Result<u32> {
        let v = self.opt_u32(m, key, at)?.unwrap_or(default);
        if !range.contains(&v) {
            return Err(invalid(
                &format!("{at}.{key}"),
                format!("{v} is not in {}..={}", range.start(), range.end()),
            ));
        }
        Ok(v)
    }

    fn opt_bool(&self, m: &Mapping, key: &str, at: &str) -> Result<Option<bool>> {
        self.opt_scalar(m, key, at)?
            .map(|s| match s.to_ascii_lowercase().as_str() {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(invalid(
                    &format!("{at}.{key}"),
                    format!("{s:?} is not a boolean"),
                )),
            })
            .transpose()
    }

    fn queue(&self, id: &str, props: &Mapping, at: &str) -> Result<Queue> {
        let at = format!("{at}.Properties");
        let fifo = self.opt_bool(props, "FifoQueue", &at)?.unwrap_or(false);
        let base_name = match self.opt_scalar(props, "QueueName", &at)? {
            Some(name) => name,
            None if fifo => format!("{id}.fifo"),
            None => id.to_owned(),
        };
        if fifo != base_name.ends_with(".fifo") {
            return Err(invalid(
                &format!("{at}.QueueName"),
                format!(
                    "{base_name:?}: a FIFO queue's name must end with .fifo, and only a FIFO queue's"
                ),
            ));
        }
        let name = self.options.naming.apply(&base_name);
        let stem = name.strip_suffix(".fifo").unwrap_or(&name);
        if name.len() > 80
            || stem.is_empty()
            || !stem
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(invalid(
                &format!("{at}.QueueName"),
                format!("{name:?}: a queue name is 1-80 characters of [A-Za-z0-9_-] (plus .fifo)"),
            ));
        }
        let content_based_deduplication = self
            .opt_bool(props, "ContentBasedDeduplication", &at)?
            .unwrap_or(false);
        if content_based_deduplication && !fifo {
            return Err(invalid(
                &format!("{at}.ContentBasedDeduplication"),
                "only FIFO queues have content-based deduplication",
            ));
        }
        let redrive = match props.get("RedrivePolicy") {
            None => None,
            Some(Value::Mapping(r)) => {
                let at = format!("{at}.RedrivePolicy");
                let target = r
                    .get("deadLetterTargetArn")
                    .ok_or_else(|| invalid(&at, "missing deadLetterTargetArn"))?;
                let dead_letter_queue = match parse_expr(target, &at)?.as_slice() {
                    [Part::GetAtt(q, a)] if a == "Arn" => q.clone(),
                    _ => {
                        return Err(invalid(
                            &format!("{at}.deadLetterTargetArn"),
                            "must be !GetAtt <queue in this template>.Arn",
                        ));
                    }
                };
                let max_receive_count = self
                    .opt_u32(r, "maxReceiveCount", &at)?
                    .ok_or_else(|| invalid(&at, "missing maxReceiveCount"))?;
                if !(1..=1000).contains(&max_receive_count) {
                    return Err(invalid(
                        &format!("{at}.maxReceiveCount"),
                        format!("{max_receive_count} is not in 1..=1000"),
                    ));
                }
                Some(Redrive {
                    dead_letter_queue,
                    max_receive_count,
                })
            }
            Some(_) => return Err(invalid(&format!("{at}.RedrivePolicy"), "not a mapping")),
        };
        Ok(Queue {
            logical_id: id.to_owned(),
            name,
            fifo,
            content_based_deduplication,
            visibility_timeout: self.u32_in(props, "VisibilityTimeout", &at, 30, 0..=43_200)?,
            message_retention_period: self.u32_in(
                props,
                "MessageRetentionPeriod",
                &at,
                345_600,
                60..=1_209_600,
            )?,
            delay_seconds: self.u32_in(props, "DelaySeconds", &at, 0, 0..=900)?,
            receive_message_wait_time_seconds: self.opt_u32(
                props,
                "ReceiveMessageWaitTimeSeconds",
                &at,
            )?,
            maximum_message_size: self.opt_u32(props, "MaximumMessageSize", &at)?,
            redrive,
        })
    }

    fn table(&self, id: &str, props: &Mapping, at: &str) -> Result<Table> {
        let at = format!("{at}.Properties");
        for unsupported in ["GlobalSecondaryIndexes", "LocalSecondaryIndexes"] {
            if props.get(unsupported).is_some() {
                return Err(invalid(
                    &format!("{at}.{unsupported}"),
                    "secondary indexes are not yet provisioned by the local harness",
                ));
            }
        }
        let base_name = self
            .opt_scalar(props, "TableName", &at)?
            .unwrap_or_else(|| id.to_owned());
        let name = self.options.naming.apply(&base_name);
        if !(3..=255).contains(&name.len())
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            return Err(invalid(
                &format!("{at}.TableName"),
                format!("{name:?}: a table name is 3-255 characters of [A-Za-z0-9_.-]"),
            ));
        }
        let seq = |key: &str| -> Result<&[Value]> {
            match props.get(key) {
                Some(Value::Sequence(s)) => Ok(s),
                _ => Err(invalid(&format!("{at}.{key}"), "missing or not a list")),
            }
        };
        let mut types = BTreeMap::new();
        for (i, d) in seq("AttributeDefinitions")?.iter().enumerate() {
            let at = format!("{at}.AttributeDefinitions[{i}]");
            let d = d
                .as_mapping()
                .ok_or_else(|| invalid(&at, "not a mapping"))?;
            let name = self
                .opt_scalar(d, "AttributeName", &at)?
                .ok_or_else(|| invalid(&at, "missing AttributeName"))?;
            let kind = match self.opt_scalar(d, "AttributeType", &at)?.as_deref() {
                Some("S") => AttributeType::String,
                Some("N") => AttributeType::Number,
                Some("B") => AttributeType::Binary,
                other => {
                    return Err(invalid(
                        &at,
                        format!("AttributeType {other:?} is not S, N or B"),
                    ));
                }
            };
            types.insert(name, kind);
        }
        let mut key_schema = Vec::new();
        for (i, k) in seq("KeySchema")?.iter().enumerate() {
            let at = format!("{at}.KeySchema[{i}]");
            let k = k
                .as_mapping()
                .ok_or_else(|| invalid(&at, "not a mapping"))?;
            let name = self
                .opt_scalar(k, "AttributeName", &at)?
                .ok_or_else(|| invalid(&at, "missing AttributeName"))?;
            let key_type = match self.opt_scalar(k, "KeyType", &at)?.as_deref() {
                Some("HASH") => KeyType::Hash,
                Some("RANGE") => KeyType::Range,
                other => {
                    return Err(invalid(
                        &at,
                        format!("KeyType {other:?} is not HASH or RANGE"),
                    ));
                }
            };
            let attribute_type = *types
                .get(&name)
                .ok_or_else(|| invalid(&at, format!("{name} is not in AttributeDefinitions")))?;
            key_schema.push(KeyAttribute {
                name,
                attribute_type,
                key_type,
            });
        }
        let hashes = key_schema
            .iter()
            .filter(|k| k.key_type == KeyType::Hash)
            .count();
        let ranges = key_schema.len() - hashes;
        if hashes != 1 || ranges > 1 {
            return Err(invalid(
                &format!("{at}.KeySchema"),
                "needs one HASH key and at most one RANGE key",
            ));
        }
        if types.len() != key_schema.len() {
            return Err(invalid(
                &format!("{at}.AttributeDefinitions"),
                "defines attributes that are not keys (DynamoDB rejects that)",
            ));
        }
        let ttl_attribute = match props.get("TimeToLiveSpecification") {
            None => None,
            Some(Value::Mapping(t)) => {
                let at = format!("{at}.TimeToLiveSpecification");
                if self.opt_bool(t, "Enabled", &at)?.unwrap_or(false) {
                    Some(
                        self.opt_scalar(t, "AttributeName", &at)?
                            .ok_or_else(|| invalid(&at, "missing AttributeName"))?,
                    )
                } else {
                    None
                }
            }
            Some(_) => {
                return Err(invalid(
                    &format!("{at}.TimeToLiveSpecification"),
                    "not a mapping",
                ));
            }
        };
        Ok(Table {
            logical_id: id.to_owned(),
            name,
            key_schema,
            ttl_attribute,
        })
    }

    fn environment(
        &self,
        props: Option<&Mapping>,
        at: &str,
        out: &mut BTreeMap<String, Expr>,
    ) -> Result<()> {
        let Some(vars) = props
            .and_then(|p| p.get("Environment"))
            .and_then(|e| e.get("Variables"))
        else {
            return Ok(());
        };
        let vars = vars
            .as_mapping()
            .ok_or_else(|| invalid(&format!("{at}.Environment.Variables"), "not a mapping"))?;
        for (k, v) in vars {
            let k = key_str(k, at)?;
            let expr = self.expr(v, &format!("{at}.Environment.Variables.{k}"))?;
            out.insert(k.to_owned(), expr);
        }
        Ok(())
    }

    fn function(
        &self,
        id: &str,
        resource: &Value,
        props: &Mapping,
        globals: Option<&Mapping>,
        at: &str,
    ) -> Result<Function> {
        let binary = match resource
            .get("Metadata")
            .and_then(|m| m.get("BuildProperties"))
            .and_then(|b| b.get("Binary"))
        {
            Some(v) => Some(self.scalar(v, &format!("{at}.Metadata.BuildProperties.Binary"))?),
            None => None,
        };
        let at = format!("{at}.Properties");
        let global_at = "Globals.Function";
        let inherited = |key: &str, default: u32| -> Result<u32> {
            match self.opt_u32(props, key, &at)? {
                Some(v) => Ok(v),
                None => Ok(match globals {
                    Some(g) => self.opt_u32(g, key, global_at)?.unwrap_or(default),
                    None => default,
                }),
            }
        };
        let timeout_seconds = inherited("Timeout", 3)?;
        if !(1..=900).contains(&timeout_seconds) {
            return Err(invalid(
                &format!("{at}.Timeout"),
                format!("{timeout_seconds} is not in 1..=900"),
            ));
        }
        let memory_size = inherited("MemorySize", 128)?;
        let mut environment = BTreeMap::new();
        self.environment(globals, global_at, &mut environment)?;
        self.environment(Some(props), &at, &mut environment)?;

        let mut sqs_events = Vec::new();
        let mut http_routes = Vec::new();
        if let Some(events) = props.get("Events") {
            let events = events
                .as_mapping()
                .ok_or_else(|| invalid(&format!("{at}.Events"), "not a mapping"))?;
            for (name, event) in events {
                let name = key_str(name, &at)?;
                let at = format!("{at}.Events.{name}");
                let kind = event.get("Type").and_then(plain_scalar).unwrap_or_default();
                let empty = Mapping::new();
                let p = event
                    .get("Properties")
                    .and_then(Value::as_mapping)
                    .unwrap_or(&empty);
                let pat = format!("{at}.Properties");
                match kind.as_str() {
                    "SQS" => {
                        let queue_value = p
                            .get("Queue")
                            .ok_or_else(|| invalid(&pat, "missing Queue"))?;
                        let queue = match parse_expr(queue_value, &pat)?.as_slice() {
                            [Part::GetAtt(q, a)] if a == "Arn" => q.clone(),
                            _ => {
                                return Err(invalid(
                                    &format!("{pat}.Queue"),
                                    "must be !GetAtt <queue in this template>.Arn",
                                ));
                            }
                        };
                        let function_response_types = match p.get("FunctionResponseTypes") {
                            None => Vec::new(),
                            Some(Value::Sequence(s)) => s
                                .iter()
                                .enumerate()
                                .map(|(i, v)| {
                                    self.scalar(v, &format!("{pat}.FunctionResponseTypes[{i}]"))
                                })
                                .collect::<Result<_>>()?,
                            Some(_) => {
                                return Err(invalid(
                                    &format!("{pat}.FunctionResponseTypes"),
                                    "not a list",
                                ));
                            }
                        };
                        let maximum_concurrency = match p.get("ScalingConfig") {
                            Some(Value::Mapping(s)) => self.opt_u32(
                                s,
                                "MaximumConcurrency",
                                &format!("{pat}.ScalingConfig"),
                            )?,
                            _ => None,
                        };
                        sqs_events.push(SqsEventSource {
                            name: name.to_owned(),
                            queue,
                            batch_size: self.opt_u32(p, "BatchSize", &pat)?.unwrap_or(10),
                            maximum_batching_window_in_seconds: self.u32_in(
                                p,
                                "MaximumBatchingWindowInSeconds",
                                &pat,
                                0,
                                0..=300,
                            )?,
                            function_response_types,
                            maximum_concurrency,
                            enabled: self.opt_bool(p, "Enabled", &pat)?.unwrap_or(true),
                        });
                    }
                    "HttpApi" => http_routes.push(HttpRoute {
                        name: name.to_owned(),
                        method: self
                            .opt_scalar(p, "Method", &pat)?
                            .map_or_else(|| "ANY".to_owned(), |m| m.to_ascii_uppercase()),
                        path: self
                            .opt_scalar(p, "Path", &pat)?
                            .unwrap_or_else(|| "/{proxy+}".to_owned()),
                    }),
                    _ => {}
                }
            }
        }
        Ok(Function {
            logical_id: id.to_owned(),
            name: self
                .opt_scalar(props, "FunctionName", &at)?
                .unwrap_or_else(|| id.to_owned()),
            binary,
            timeout_seconds,
            memory_size,
            environment,
            sqs_events,
            http_routes,
            function_url: props.get("FunctionUrlConfig").is_some(),
        })
    }
}

/// The value of a pseudo parameter.
pub(crate) fn pseudo(name: &str, region: &str, account_id: &str, stack_name: &str) -> String {
    match name {
        "AWS::Region" => region.to_owned(),
        "AWS::AccountId" => account_id.to_owned(),
        "AWS::StackName" => stack_name.to_owned(),
        "AWS::StackId" => format!(
            "arn:aws:cloudformation:{region}:{account_id}:stack/{stack_name}/00000000-0000-0000-0000-000000000000"
        ),
        "AWS::Partition" => "aws".to_owned(),
        "AWS::URLSuffix" => "amazonaws.com".to_owned(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Template> {
        Template::parse(yaml, &TemplateOptions::default())
    }

    #[test]
    fn short_and_long_form_intrinsics() {
        let t = parse(
            r#"
Parameters:
  P: { Type: String, Default: v }
Resources:
  Q: { Type: AWS::SQS::Queue }
  Things:
    Type: AWS::DynamoDB::Table
    Properties:
      AttributeDefinitions: [{ AttributeName: k, AttributeType: S }]
      KeySchema: [{ AttributeName: k, KeyType: HASH }]
  F:
    Type: AWS::Serverless::Function
    Properties:
      Environment:
        Variables:
          A: !Ref Q
          B: { Ref: Things }
          C: { "Fn::GetAtt": [Q, Arn] }
          D: !Sub "x-${P}-${Q.QueueName}-${!Lit}-${AWS::Region}"
          E: !Join [",", [a, !Ref P]]
          F: !Sub ["${X}/y", { X: !Ref P }]
"#,
        )
        .unwrap();
        let env = &t.functions["F"].environment;
        assert_eq!(env["A"].parts(), &[Part::Ref("Q".into())]);
        assert_eq!(env["B"].parts(), &[Part::Ref("Things".into())]);
        assert_eq!(env["C"].parts(), &[Part::GetAtt("Q".into(), "Arn".into())]);
        assert_eq!(
            env["D"].parts(),
            &[
                Part::Text("x-v-".into()),
                Part::GetAtt("Q".into(), "QueueName".into()),
                Part::Text("-${Lit}-".into()),
                Part::Ref("AWS::Region".into()),
            ]
        );
        assert_eq!(env["E"].as_literal(), Some("a,v"));
        assert_eq!(env["F"].as_literal(), Some("v/y"));
        assert_eq!(t.functions["F"].timeout_seconds, 3);
        assert_eq!(t.queues["Q"].name, "Q");
        assert_eq!(t.tables["Things"].name, "Things");
    }

    #[test]
    fn rejects_what_it_cannot_run() {
        let err = |yaml: &str| parse(yaml).unwrap_err().to_string();
        assert!(err("Resources:\n  Q: { Type: AWS::SQS::Queue, Properties: { FifoQueue: true, QueueName: q } }").contains("must end with .fifo"));
        assert!(
            err("Resources:\n  Q: { Type: AWS::SQS::Queue, Properties: { QueueName: !Ref Nope } }")
                .contains("no such parameter")
        );
        assert!(err("Resources:\n  Q: { Type: AWS::SQS::Queue, Properties: { QueueName: !Select [0, [a]] } }").contains("Select"));
        assert!(err("Resources:\n  Q: { Type: AWS::SQS::Queue, Properties: { RedrivePolicy: { deadLetterTargetArn: arn:x, maxReceiveCount: 1 } } }").contains("deadLetterTargetArn"));
        assert!(err("Resources:\n  Q: { Type: AWS::SQS::Queue, Properties: { RedrivePolicy: { deadLetterTargetArn: !GetAtt D.Arn, maxReceiveCount: 1 } } }").contains("D is not a queue"));
        let o = TemplateOptions::default().parameter("Nope", "1");
        assert!(Template::parse("Resources: {}", &o).is_err());
        let o = TemplateOptions::default().parameter("N", "0");
        assert!(
            Template::parse(
                "Parameters: { N: { Type: Number, MinValue: 1 } }\nResources: {}",
                &o
            )
            .is_err()
        );
    }

    #[test]
    fn naming_keeps_fifo_suffix_and_limits_length() {
        assert_eq!(Naming::prefix("a-").apply("b.fifo"), "a-b.fifo");
        let long = TemplateOptions::default().naming(Naming::prefix("x".repeat(80)));
        assert!(Template::parse("Resources:\n  Q: { Type: AWS::SQS::Queue }", &long).is_err());
    }

    #[test]
    fn creation_order_puts_dead_letter_queues_first() {
        let t = parse(
            r#"
Resources:
  A: { Type: AWS::SQS::Queue, Properties: { RedrivePolicy: { deadLetterTargetArn: !GetAtt B.Arn, maxReceiveCount: 2 } } }
  B: { Type: AWS::SQS::Queue, Properties: { RedrivePolicy: { deadLetterTargetArn: !GetAtt C.Arn, maxReceiveCount: 2 } } }
  C: { Type: AWS::SQS::Queue }
"#,
        )
        .unwrap();
        let order: Vec<_> = t
            .queues_in_creation_order()
            .iter()
            .map(|q| q.logical_id.as_str())
            .collect();
        assert_eq!(order, ["C", "B", "A"]);
    }
}
