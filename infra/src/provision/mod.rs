//! Creates the template's queues, tables and Kinesis streams on the endpoint, and checks what exists against it.
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use local_aws::{Clients, provision};
//! use local_aws::template::{Naming, Template, TemplateOptions};
//!
//! let clients = Clients::from_env().await?;
//! let template = Template::load_project(&TemplateOptions::default().naming(Naming::unique("t")))?;
//! let resources = provision::provision(&clients, &template).await?;
//! assert!(resources.queues["PaymentsQueue"].url.ends_with(".fifo"));
//! assert_eq!(provision::verify(&clients, &template).await?, vec![]);
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::Clients;
use crate::template::{Expr, Function, Part, Template};

mod kinesis;
mod queues;
mod tables;

pub use kinesis::create_kinesis_stream;
use kinesis::verify_kinesis_stream;
use queues::verify_queue;
pub use queues::{create_queue, redrive_allow_policy_document, set_redrive_allow_policy};
pub use tables::create_table;
use tables::verify_table;

/// A failed AWS call while provisioning or verifying.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    /// An SDK call failed.
    #[error("{operation} for {resource}: {message}")]
    Aws {
        /// The API operation.
        operation: &'static str,
        /// The physical name concerned.
        resource: String,
        /// The SDK error with its context.
        message: String,
    },
    /// The endpoint answered without a field it must return.
    #[error("{operation} for {resource}: the answer has no {field}")]
    Missing {
        /// The API operation.
        operation: &'static str,
        /// The physical name concerned.
        resource: String,
        /// The missing field.
        field: &'static str,
    },
    /// A table did not become `ACTIVE`.
    #[error("table {0} is not ACTIVE after 60 s")]
    NotActive(String),
}

pub(super) fn aws<E: std::error::Error + 'static>(
    operation: &'static str,
    resource: &str,
) -> impl FnOnce(E) -> ProvisionError {
    move |e| ProvisionError::Aws {
        operation,
        resource: resource.to_owned(),
        message: aws_sdk_sqs::error::DisplayErrorContext(&e).to_string(),
    }
}

/// A reference in a function's environment that cannot be resolved.
#[derive(Debug, thiserror::Error)]
#[error("{function}: {variable}: cannot resolve {reference} (not provisioned)")]
pub struct ResolveError {
    /// The function's logical id.
    pub function: String,
    /// The environment variable.
    pub variable: String,
    /// The unresolved reference, e.g. `${PaymentsQueue}`.
    pub reference: String,
}

/// A provisioned queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProvisionedQueue {
    /// Queue name.
    pub name: String,
    /// Queue URL (what `!Ref` gives).
    pub url: String,
    /// Queue ARN.
    pub arn: String,
    /// Whether it is FIFO.
    pub fifo: bool,
}

/// A provisioned table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProvisionedTable {
    /// Table name (what `!Ref` gives).
    pub name: String,
    /// Table ARN.
    pub arn: String,
    /// The ARN of the table's stream (`LatestStreamArn`), when it has one.
    pub stream_arn: Option<String>,
}

/// A provisioned Kinesis data stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProvisionedKinesisStream {
    /// Stream name (what `!Ref` gives).
    pub name: String,
    /// Stream ARN (`!GetAtt S.Arn`: what a Kinesis event source mapping reads).
    pub arn: String,
}

/// What [`provision`] created (or found), by logical id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Provisioned {
    /// The region of the endpoint.
    pub region: String,
    /// The account id (from the queue ARNs; moto's is `123456789012`).
    pub account_id: String,
    /// Queues by logical id.
    pub queues: BTreeMap<String, ProvisionedQueue>,
    /// Tables by logical id.
    pub tables: BTreeMap<String, ProvisionedTable>,
    /// Kinesis data streams by logical id.
    pub kinesis_streams: BTreeMap<String, ProvisionedKinesisStream>,
    /// Function names by logical id (functions are not deployed; this resolves `!Ref F`).
    pub functions: BTreeMap<String, String>,
}

impl Provisioned {
    /// The ARN a function would have (for `!GetAtt F.Arn` and the Lambda context).
    pub fn function_arn(&self, function_name: &str) -> String {
        crate::arn::function("aws", &self.region, &self.account_id, function_name)
    }

    /// The value of `expr` with every reference resolved: `!Ref` a queue is its URL, a table
    /// or a Kinesis stream its name, a function its name; `!GetAtt` `Arn`, `QueueName`, `QueueUrl`, a table's
    /// `StreamArn`; pseudo parameters from the endpoint. The error names the first reference it cannot resolve.
    pub fn resolve(&self, expr: &Expr) -> Result<String, String> {
        let mut out = String::new();
        for part in expr.parts() {
            let value = match part {
                Part::Text(t) => Some(t.clone()),
                Part::Ref(name) if name.starts_with("AWS::") => Some(crate::template::pseudo(
                    name,
                    &self.region,
                    &self.account_id,
                    "local",
                )),
                Part::Ref(name) => self
                    .queues
                    .get(name)
                    .map(|q| q.url.clone())
                    .or_else(|| self.tables.get(name).map(|t| t.name.clone()))
                    .or_else(|| self.kinesis_streams.get(name).map(|s| s.name.clone()))
                    .or_else(|| self.functions.get(name).cloned()),
                Part::GetAtt(name, attribute) => match attribute.as_str() {
                    "Arn" => self
                        .queues
                        .get(name)
                        .map(|q| q.arn.clone())
                        .or_else(|| self.tables.get(name).map(|t| t.arn.clone()))
                        .or_else(|| self.kinesis_streams.get(name).map(|s| s.arn.clone()))
                        .or_else(|| self.functions.get(name).map(|f| self.function_arn(f))),
                    "QueueName" => self.queues.get(name).map(|q| q.name.clone()),
                    "StreamArn" => self.tables.get(name).and_then(|t| t.stream_arn.clone()),
                    "QueueUrl" => self.queues.get(name).map(|q| q.url.clone()),
                    _ => None,
                },
            };
            match value {
                Some(v) => out.push_str(&v),
                None => {
                    return Err(match part {
                        Part::GetAtt(r, a) => format!("${{{r}.{a}}}"),
                        Part::Ref(r) | Part::Text(r) => format!("${{{r}}}"),
                    });
                }
            }
        }
        Ok(out)
    }

    /// The function's environment variables, resolved: what it would see deployed.
    ///
    /// ```no_run
    /// # async fn f(clients: local_aws::Clients) -> Result<(), Box<dyn std::error::Error>> {
    /// use local_aws::template::{Template, TemplateOptions};
    /// let template = Template::load_project(&TemplateOptions::default())?;
    /// let resources = local_aws::provision::provision(&clients, &template).await?;
    /// let env = resources.function_env(&template.functions["PaymentsPublisherFunction"])?;
    /// assert_eq!(env["PAYMENTS_QUEUE_URL"], resources.queues["PaymentsQueue"].url);
    /// assert_eq!(env["IDEMPOTENCY_TABLE"], "payments-idempotency");
    /// # Ok(()) }
    /// ```
    pub fn function_env(
        &self,
        function: &Function,
    ) -> Result<BTreeMap<String, String>, ResolveError> {
        function
            .environment
            .iter()
            .map(|(k, v)| {
                self.resolve(v)
                    .map(|v| (k.clone(), v))
                    .map_err(|reference| ResolveError {
                        function: function.logical_id.clone(),
                        variable: k.clone(),
                        reference,
                    })
            })
            .collect()
    }

    /// What Lambda gives `function`'s process: the template's environment
    /// ([`function_env`](Self::function_env)) and the variables Lambda sets itself (the
    /// function's name, memory and version, and the JSON logs at INFO of the template's
    /// `LoggingConfig`), all but `AWS_LAMBDA_RUNTIME_API`, which names where the process runs.
    pub fn lambda_env(
        &self,
        function: &Function,
    ) -> Result<BTreeMap<String, String>, ResolveError> {
        let mut env = self.function_env(function)?;
        env.insert("AWS_LAMBDA_FUNCTION_NAME".into(), function.name.clone());
        env.insert(
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE".into(),
            function.memory_size.to_string(),
        );
        env.insert("AWS_LAMBDA_FUNCTION_VERSION".into(), "$LATEST".into());
        env.insert("AWS_LAMBDA_LOG_FORMAT".into(), "JSON".into());
        env.insert("AWS_LAMBDA_LOG_LEVEL".into(), "INFO".into());
        Ok(env)
    }
}

/// Creates every queue (dead-letter queues first, with their redrive-allow policies; redrive
/// policies with their ARNs), every table of `template` (with its stream) and every Kinesis
/// data stream, idempotently: what exists is kept (queues get the template's attributes,
/// tables a missing TTL or stream). Returns where everything is, stream ARNs included.
///
/// ```no_run
/// # async fn f(clients: local_aws::Clients) -> Result<(), Box<dyn std::error::Error>> {
/// use local_aws::template::{Template, TemplateOptions};
/// let template = Template::load_project(&TemplateOptions::default())?;
/// let resources = local_aws::provision::provision(&clients, &template).await?;
/// println!("{}", resources.queues["PaymentsQueue"].url);
/// # Ok(()) }
/// ```
pub async fn provision(
    clients: &Clients,
    template: &Template,
) -> Result<Provisioned, ProvisionError> {
    let mut queues: BTreeMap<String, ProvisionedQueue> = BTreeMap::new();
    for queue in template.queues_in_creation_order() {
        let dlq_arn = queue
            .redrive
            .as_ref()
            .and_then(|r| queues.get(&r.dead_letter_queue))
            .map(|q| q.arn.clone());
        let created = create_queue(&clients.sqs, queue, dlq_arn.as_deref()).await?;
        // Before any source queue names it as its dead-letter queue.
        set_redrive_allow_policy(&clients.sqs, template, queue, &created).await?;
        queues.insert(queue.logical_id.clone(), created);
    }
    let mut tables = BTreeMap::new();
    for table in template.tables.values() {
        tables.insert(
            table.logical_id.clone(),
            create_table(&clients.dynamodb, table).await?,
        );
    }
    let mut kinesis_streams = BTreeMap::new();
    for stream in template.kinesis_streams.values() {
        kinesis_streams.insert(
            stream.logical_id.clone(),
            create_kinesis_stream(&clients.kinesis, stream).await?,
        );
    }
    let account_id = queues
        .values()
        .next()
        .and_then(|q| crate::arn::Arn::parse(&q.arn).ok())
        .map(|arn| arn.account)
        .unwrap_or("123456789012")
        .to_owned();
    Ok(Provisioned {
        region: clients.region(),
        account_id,
        queues,
        tables,
        kinesis_streams,
        functions: template
            .functions
            .iter()
            .map(|(id, f)| (id.clone(), f.name.clone()))
            .collect(),
    })
}

/// One way the endpoint differs from the template.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Difference {
    /// The logical id.
    pub resource: String,
    /// The physical name.
    pub name: String,
    /// What differs (`exists`, `VisibilityTimeout`, `RedrivePolicy.maxReceiveCount`,
    /// `RedriveAllowPolicy`, `KeySchema`, `TimeToLive`, `StreamSpecification`, ...).
    pub property: String,
    /// What the template says.
    pub expected: String,
    /// What the endpoint has.
    pub actual: String,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}): {} is {}, the template says {}",
            self.resource, self.name, self.property, self.actual, self.expected
        )
    }
}

/// The differences found on one resource.
pub(super) struct Diffs<'a> {
    pub(super) out: Vec<Difference>,
    pub(super) resource: &'a str,
    pub(super) name: &'a str,
}

impl Diffs<'_> {
    pub(super) fn check(
        &mut self,
        property: &str,
        expected: impl Into<String>,
        actual: impl Into<String>,
    ) {
        let (expected, actual) = (expected.into(), actual.into());
        if expected != actual {
            self.out.push(Difference {
                resource: self.resource.to_owned(),
                name: self.name.to_owned(),
                property: property.to_owned(),
                expected,
                actual,
            });
        }
    }
}

pub(super) const ABSENT: &str = "(absent)";

/// Reads back every queue, table and Kinesis stream of `template` from the endpoint and lists
/// how they differ from it (missing resources, queue attributes, redrive and redrive-allow
/// policies, key schema, billing mode, TTL, stream, a Kinesis stream's shard count and
/// retention).
/// An empty list means the endpoint matches the template.
///
/// ```no_run
/// # async fn f(clients: local_aws::Clients, template: local_aws::template::Template) -> Result<(), local_aws::provision::ProvisionError> {
/// for difference in local_aws::provision::verify(&clients, &template).await? {
///     eprintln!("{difference}");
/// }
/// # Ok(()) }
/// ```
pub async fn verify(
    clients: &Clients,
    template: &Template,
) -> Result<Vec<Difference>, ProvisionError> {
    let mut out = Vec::new();
    for queue in template.queues.values() {
        out.extend(verify_queue(&clients.sqs, queue, template).await?);
    }
    for table in template.tables.values() {
        out.extend(verify_table(&clients.dynamodb, table).await?);
    }
    for stream in template.kinesis_streams.values() {
        out.extend(verify_kinesis_stream(&clients.kinesis, stream).await?);
    }
    Ok(out)
}
