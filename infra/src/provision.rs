//! Creates the template's queues and tables on the endpoint, and checks what exists against it.
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

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, ScalarAttributeType, TableStatus,
    TimeToLiveSpecification, TimeToLiveStatus,
};
use aws_sdk_sqs::types::QueueAttributeName;
use serde::Serialize;

use crate::Clients;
use crate::template::{AttributeType, Expr, Function, KeyType, Part, Queue, Table, Template};

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

fn aws<E: std::error::Error + 'static>(
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
    /// Function names by logical id (functions are not deployed; this resolves `!Ref F`).
    pub functions: BTreeMap<String, String>,
}

impl Provisioned {
    /// The ARN a function would have (for `!GetAtt F.Arn` and the Lambda context).
    pub fn function_arn(&self, function_name: &str) -> String {
        format!(
            "arn:aws:lambda:{}:{}:function:{function_name}",
            self.region, self.account_id
        )
    }

    /// The value of `expr` with every reference resolved: `!Ref` a queue is its URL, a table
    /// its name, a function its name; `!GetAtt` `Arn`, `QueueName`, `QueueUrl`; pseudo
    /// parameters from the endpoint. The error names the first reference it cannot resolve.
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
                    .or_else(|| self.functions.get(name).cloned()),
                Part::GetAtt(name, attribute) => match attribute.as_str() {
                    "Arn" => self
                        .queues
                        .get(name)
                        .map(|q| q.arn.clone())
                        .or_else(|| self.tables.get(name).map(|t| t.arn.clone()))
                        .or_else(|| self.functions.get(name).map(|f| self.function_arn(f))),
                    "QueueName" => self.queues.get(name).map(|q| q.name.clone()),
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
    /// let env = resources.function_env(&template.functions["PaymentsApiFunction"])?;
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
}

/// The attributes CreateQueue/SetQueueAttributes get for `queue` (`dlq_arn` for its redrive).
fn queue_attributes(
    queue: &Queue,
    dlq_arn: Option<&str>,
    creating: bool,
) -> HashMap<QueueAttributeName, String> {
    let mut a = HashMap::new();
    if queue.fifo {
        if creating {
            a.insert(QueueAttributeName::FifoQueue, "true".to_owned());
        }
        a.insert(
            QueueAttributeName::ContentBasedDeduplication,
            queue.content_based_deduplication.to_string(),
        );
    }
    a.insert(
        QueueAttributeName::VisibilityTimeout,
        queue.visibility_timeout.to_string(),
    );
    a.insert(
        QueueAttributeName::MessageRetentionPeriod,
        queue.message_retention_period.to_string(),
    );
    a.insert(
        QueueAttributeName::DelaySeconds,
        queue.delay_seconds.to_string(),
    );
    if let Some(w) = queue.receive_message_wait_time_seconds {
        a.insert(
            QueueAttributeName::ReceiveMessageWaitTimeSeconds,
            w.to_string(),
        );
    }
    if let Some(m) = queue.maximum_message_size {
        a.insert(QueueAttributeName::MaximumMessageSize, m.to_string());
    }
    if let (Some(r), Some(arn)) = (&queue.redrive, dlq_arn) {
        a.insert(
            QueueAttributeName::RedrivePolicy,
            serde_json::json!({
                "deadLetterTargetArn": arn,
                "maxReceiveCount": r.max_receive_count,
            })
            .to_string(),
        );
    }
    a
}

/// Creates one queue (or brings an existing one to the template's attributes; `FifoQueue`
/// cannot change, [`verify`] reports that) and returns it. `dlq_arn`: its dead-letter queue's ARN.
///
/// ```no_run
/// # async fn f(clients: local_aws::Clients, template: local_aws::template::Template) -> Result<(), local_aws::provision::ProvisionError> {
/// let dlq = local_aws::provision::create_queue(&clients.sqs, &template.queues["ReceiptsDeadLetterQueue"], None).await?;
/// let q = local_aws::provision::create_queue(&clients.sqs, &template.queues["ReceiptsQueue"], Some(&dlq.arn)).await?;
/// # Ok(()) }
/// ```
pub async fn create_queue(
    sqs: &aws_sdk_sqs::Client,
    queue: &Queue,
    dlq_arn: Option<&str>,
) -> Result<ProvisionedQueue, ProvisionError> {
    let name = &queue.name;
    let created = sqs
        .create_queue()
        .queue_name(name)
        .set_attributes(Some(queue_attributes(queue, dlq_arn, true)))
        .send()
        .await;
    let url = match created {
        Ok(out) => out.queue_url.ok_or(ProvisionError::Missing {
            operation: "CreateQueue",
            resource: name.clone(),
            field: "QueueUrl",
        })?,
        Err(e)
            if e.as_service_error().is_some_and(|e| {
                e.is_queue_name_exists() || e.meta().code() == Some("QueueAlreadyExists")
            }) =>
        {
            let url = sqs
                .get_queue_url()
                .queue_name(name)
                .send()
                .await
                .map_err(aws("GetQueueUrl", name))?
                .queue_url
                .ok_or(ProvisionError::Missing {
                    operation: "GetQueueUrl",
                    resource: name.clone(),
                    field: "QueueUrl",
                })?;
            tracing::info!(queue = %name, "queue exists; setting the template's attributes");
            sqs.set_queue_attributes()
                .queue_url(&url)
                .set_attributes(Some(queue_attributes(queue, dlq_arn, false)))
                .send()
                .await
                .map_err(aws("SetQueueAttributes", name))?;
            url
        }
        Err(e) => return Err(aws("CreateQueue", name)(e)),
    };
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(aws("GetQueueAttributes", name))?
        .attributes
        .and_then(|mut a| a.remove(&QueueAttributeName::QueueArn))
        .ok_or(ProvisionError::Missing {
            operation: "GetQueueAttributes",
            resource: name.clone(),
            field: "QueueArn",
        })?;
    Ok(ProvisionedQueue {
        name: name.clone(),
        url,
        arn,
        fifo: queue.fifo,
    })
}

fn scalar_type(t: AttributeType) -> ScalarAttributeType {
    match t {
        AttributeType::String => ScalarAttributeType::S,
        AttributeType::Number => ScalarAttributeType::N,
        AttributeType::Binary => ScalarAttributeType::B,
    }
}

fn key_type(t: KeyType) -> aws_sdk_dynamodb::types::KeyType {
    match t {
        KeyType::Hash => aws_sdk_dynamodb::types::KeyType::Hash,
        KeyType::Range => aws_sdk_dynamodb::types::KeyType::Range,
    }
}

/// Creates one table, on demand (`PAY_PER_REQUEST`), waits until it is `ACTIVE`, and enables
/// TTL when the template does. An existing table is left as it is (apart from enabling TTL);
/// [`verify`] reports a different key schema.
///
/// ```no_run
/// # async fn f(clients: local_aws::Clients, template: local_aws::template::Template) -> Result<(), local_aws::provision::ProvisionError> {
/// let t = local_aws::provision::create_table(&clients.dynamodb, &template.tables["IdempotencyTable"]).await?;
/// # Ok(()) }
/// ```
pub async fn create_table(
    ddb: &aws_sdk_dynamodb::Client,
    table: &Table,
) -> Result<ProvisionedTable, ProvisionError> {
    let name = &table.name;
    let mut create = ddb
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest);
    for key in &table.key_schema {
        create = create
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(&key.name)
                    .attribute_type(scalar_type(key.attribute_type))
                    .build()
                    .expect("name and type are set"),
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name(&key.name)
                    .key_type(key_type(key.key_type))
                    .build()
                    .expect("name and type are set"),
            );
    }
    match create.send().await {
        Ok(_) => {}
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_resource_in_use_exception()) =>
        {
            tracing::info!(table = %name, "table exists");
        }
        Err(e) => return Err(aws("CreateTable", name)(e)),
    }
    let started = Instant::now();
    let arn = loop {
        let described = ddb
            .describe_table()
            .table_name(name)
            .send()
            .await
            .map_err(aws("DescribeTable", name))?;
        let t = described.table.ok_or(ProvisionError::Missing {
            operation: "DescribeTable",
            resource: name.clone(),
            field: "Table",
        })?;
        if t.table_status == Some(TableStatus::Active) {
            break t.table_arn.unwrap_or_default();
        }
        if started.elapsed() > Duration::from_secs(60) {
            return Err(ProvisionError::NotActive(name.clone()));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    if let Some(attribute) = &table.ttl_attribute {
        let current = ddb
            .describe_time_to_live()
            .table_name(name)
            .send()
            .await
            .map_err(aws("DescribeTimeToLive", name))?
            .time_to_live_description;
        let enabled = current.as_ref().is_some_and(|d| {
            matches!(
                d.time_to_live_status,
                Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling)
            ) && d.attribute_name.as_deref() == Some(attribute)
        });
        if !enabled {
            ddb.update_time_to_live()
                .table_name(name)
                .time_to_live_specification(
                    TimeToLiveSpecification::builder()
                        .enabled(true)
                        .attribute_name(attribute)
                        .build()
                        .expect("enabled and name are set"),
                )
                .send()
                .await
                .map_err(aws("UpdateTimeToLive", name))?;
        }
    }
    Ok(ProvisionedTable {
        name: name.clone(),
        arn,
    })
}

/// Creates every queue (dead-letter queues first, redrive policies with their ARNs) and every
/// table of `template`, idempotently: what exists is kept (queues get the template's
/// attributes). Returns where everything is.
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
        queues.insert(queue.logical_id.clone(), created);
    }
    let mut tables = BTreeMap::new();
    for table in template.tables.values() {
        tables.insert(
            table.logical_id.clone(),
            create_table(&clients.dynamodb, table).await?,
        );
    }
    let account_id = queues
        .values()
        .next()
        .and_then(|q| q.arn.split(':').nth(4))
        .unwrap_or("123456789012")
        .to_owned();
    Ok(Provisioned {
        region: clients.region(),
        account_id,
        queues,
        tables,
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
    /// `KeySchema`, `TimeToLive`, ...).
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

struct Diffs<'a> {
    out: Vec<Difference>,
    resource: &'a str,
    name: &'a str,
}

impl Diffs<'_> {
    fn check(&mut self, property: &str, expected: impl Into<String>, actual: impl Into<String>) {
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

const ABSENT: &str = "(absent)";

async fn verify_queue(
    sqs: &aws_sdk_sqs::Client,
    queue: &Queue,
    template: &Template,
) -> Result<Vec<Difference>, ProvisionError> {
    let mut d = Diffs {
        out: Vec::new(),
        resource: &queue.logical_id,
        name: &queue.name,
    };
    let url = match sqs.get_queue_url().queue_name(&queue.name).send().await {
        Ok(out) => out.queue_url.unwrap_or_default(),
        Err(e)
            if e.as_service_error().is_some_and(|e| {
                e.is_queue_does_not_exist()
                    || e.meta().code() == Some("AWS.SimpleQueueService.NonExistentQueue")
            }) =>
        {
            d.check("exists", "yes", "no");
            return Ok(d.out);
        }
        Err(e) => return Err(aws("GetQueueUrl", &queue.name)(e)),
    };
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .map_err(aws("GetQueueAttributes", &queue.name))?
        .attributes
        .unwrap_or_default();
    let get = |n: QueueAttributeName| attributes.get(&n).cloned();
    let or_absent = |v: Option<String>| v.unwrap_or_else(|| ABSENT.to_owned());
    d.check(
        "FifoQueue",
        queue.fifo.to_string(),
        get(QueueAttributeName::FifoQueue).unwrap_or_else(|| "false".into()),
    );
    if queue.fifo {
        d.check(
            "ContentBasedDeduplication",
            queue.content_based_deduplication.to_string(),
            or_absent(get(QueueAttributeName::ContentBasedDeduplication)),
        );
    }
    d.check(
        "VisibilityTimeout",
        queue.visibility_timeout.to_string(),
        or_absent(get(QueueAttributeName::VisibilityTimeout)),
    );
    d.check(
        "MessageRetentionPeriod",
        queue.message_retention_period.to_string(),
        or_absent(get(QueueAttributeName::MessageRetentionPeriod)),
    );
    d.check(
        "DelaySeconds",
        queue.delay_seconds.to_string(),
        get(QueueAttributeName::DelaySeconds).unwrap_or_else(|| "0".into()),
    );
    if let Some(w) = queue.receive_message_wait_time_seconds {
        d.check(
            "ReceiveMessageWaitTimeSeconds",
            w.to_string(),
            or_absent(get(QueueAttributeName::ReceiveMessageWaitTimeSeconds)),
        );
    }
    if let Some(m) = queue.maximum_message_size {
        d.check(
            "MaximumMessageSize",
            m.to_string(),
            or_absent(get(QueueAttributeName::MaximumMessageSize)),
        );
    }
    let policy: Option<serde_json::Value> = get(QueueAttributeName::RedrivePolicy)
        .filter(|p| !p.is_empty())
        .and_then(|p| serde_json::from_str(&p).ok());
    match (&queue.redrive, policy) {
        (None, None) => {}
        (None, Some(p)) => d.check("RedrivePolicy", ABSENT, p.to_string()),
        (Some(r), None) => d.check(
            "RedrivePolicy",
            format!(
                "maxReceiveCount {} to {}",
                r.max_receive_count, r.dead_letter_queue
            ),
            ABSENT,
        ),
        (Some(r), Some(p)) => {
            let count = match &p["maxReceiveCount"] {
                serde_json::Value::String(s) => s.clone(),
                v => v.to_string(),
            };
            d.check(
                "RedrivePolicy.maxReceiveCount",
                r.max_receive_count.to_string(),
                count,
            );
            // Queue ARNs differ only in the name: derive the expected DLQ ARN from this one's.
            let own_arn = get(QueueAttributeName::QueueArn).unwrap_or_default();
            let expected_dlq = template
                .queues
                .get(&r.dead_letter_queue)
                .map(|q| match own_arn.rsplit_once(':') {
                    Some((head, _)) => format!("{head}:{}", q.name),
                    None => q.name.clone(),
                })
                .unwrap_or_default();
            d.check(
                "RedrivePolicy.deadLetterTargetArn",
                expected_dlq,
                p["deadLetterTargetArn"].as_str().unwrap_or(ABSENT),
            );
        }
    }
    Ok(d.out)
}

async fn verify_table(
    ddb: &aws_sdk_dynamodb::Client,
    table: &Table,
) -> Result<Vec<Difference>, ProvisionError> {
    let mut d = Diffs {
        out: Vec::new(),
        resource: &table.logical_id,
        name: &table.name,
    };
    let described = match ddb.describe_table().table_name(&table.name).send().await {
        Ok(out) => out
            .table
            .unwrap_or_else(|| aws_sdk_dynamodb::types::TableDescription::builder().build()),
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_resource_not_found_exception()) =>
        {
            d.check("exists", "yes", "no");
            return Ok(d.out);
        }
        Err(e) => return Err(aws("DescribeTable", &table.name)(e)),
    };
    let types: BTreeMap<&str, &str> = described
        .attribute_definitions()
        .iter()
        .map(|a| (a.attribute_name(), a.attribute_type().as_str()))
        .collect();
    let show = |keys: Vec<(String, String, String)>| {
        keys.iter()
            .map(|(n, k, t)| format!("{n} {k} {t}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let expected = table
        .key_schema
        .iter()
        .map(|k| {
            (
                k.name.clone(),
                k.key_type.as_str().to_owned(),
                k.attribute_type.as_str().to_owned(),
            )
        })
        .collect();
    let actual = described
        .key_schema()
        .iter()
        .map(|k| {
            (
                k.attribute_name().to_owned(),
                k.key_type().as_str().to_owned(),
                types
                    .get(k.attribute_name())
                    .copied()
                    .unwrap_or("?")
                    .to_owned(),
            )
        })
        .collect();
    d.check("KeySchema", show(expected), show(actual));
    let billing = described
        .billing_mode_summary()
        .and_then(|b| b.billing_mode())
        .map_or("PROVISIONED", |b| b.as_str());
    d.check("BillingMode", "PAY_PER_REQUEST", billing);
    let ttl = ddb
        .describe_time_to_live()
        .table_name(&table.name)
        .send()
        .await
        .map_err(aws("DescribeTimeToLive", &table.name))?
        .time_to_live_description;
    let actual_ttl = match ttl {
        Some(t)
            if matches!(
                t.time_to_live_status,
                Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling)
            ) =>
        {
            format!("enabled on {}", t.attribute_name.unwrap_or_default())
        }
        _ => "disabled".to_owned(),
    };
    let expected_ttl = match &table.ttl_attribute {
        Some(a) => format!("enabled on {a}"),
        None => "disabled".to_owned(),
    };
    d.check("TimeToLive", expected_ttl, actual_ttl);
    Ok(d.out)
}

/// Reads back every queue and table of `template` from the endpoint and lists how they differ
/// from it (missing resources, queue attributes, redrive policy, key schema, billing mode, TTL).
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
    Ok(out)
}
