//! CloudFormation intrinsic functions in policies, resolved against an [`Environment`].
//!
//! The template is read as SAM's translator expands it ([`translated`]): intrinsics in their long
//! forms (`Ref:`, `Fn::GetAtt:`), or, in a template without SAM resources, their short forms
//! (`!Ref X`, kept by `serde_yaml_ng`'s `Value::Tagged`).

use std::collections::BTreeMap;

use serde_yaml_ng::{Mapping, Value};

use crate::error::PolicyError;
use local_aws::arn::{self, Arn};
use local_aws::provision::Provisioned;
pub(crate) use local_aws::template::intrinsic;
use local_aws::template::{Expr, Part, Template, TemplateError, TemplateOptions};

/// The template as CloudFormation ([`local_aws::template::translated`]).
pub(crate) fn translated(yaml: &str) -> Result<Value, PolicyError> {
    local_aws::template::translated(yaml).map_err(template_error)
}

/// local-aws's error reading a template, as a [`PolicyError`].
pub(crate) fn template_error(e: TemplateError) -> PolicyError {
    match e {
        TemplateError::Yaml(e) => PolicyError::Yaml(e),
        TemplateError::Invalid { at, message } => PolicyError::Invalid { at, message },
        other => PolicyError::invalid("Transform", other.to_string()),
    }
}

/// What the template's references resolve to: the pseudo parameters, parameter values, and the
/// physical values of resources (`!Ref X`, `!GetAtt X.Attribute`).
///
/// Values it does not hold are derived from the template where CloudFormation's are
/// predictable: a table's `Arn` from its name, a queue's `Arn` from its `QueueName`, a log
/// group's `Arn` (`arn:aws:logs:REGION:ACCOUNT:log-group:NAME:*`). A table's `StreamArn` has a
/// label only DynamoDB knows: give it (DescribeTable's `LatestStreamArn`, see
/// [`with_stream_arns`](Self::with_stream_arns)).
///
/// ```
/// use iam_conformance::Environment;
/// let env = Environment::new("eu-west-1", "111122223333")
///     .parameter("PaymentsTableName", "dev-payments")
///     .reference("PaymentsQueue", "http://127.0.0.1:5000/111122223333/dev-payments.fifo")
///     .attribute("PaymentsQueue", "Arn", "arn:aws:sqs:eu-west-1:111122223333:dev-payments.fifo");
/// assert_eq!(env.attributes["PaymentsQueue.Arn"], "arn:aws:sqs:eu-west-1:111122223333:dev-payments.fifo");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Environment {
    /// `AWS::Partition` (`aws`).
    pub partition: String,
    /// `AWS::Region`.
    pub region: String,
    /// `AWS::AccountId`.
    pub account_id: String,
    /// `AWS::StackName` (`local`).
    pub stack_name: String,
    /// Parameter values replacing the template's defaults.
    pub parameters: BTreeMap<String, String>,
    /// `!Ref X` by logical id (a queue's URL, a table's name, ...).
    pub refs: BTreeMap<String, String>,
    /// `!GetAtt X.Attribute` by `X.Attribute`.
    pub attributes: BTreeMap<String, String>,
}

impl Environment {
    /// For `region` and `account_id`, with nothing else known.
    pub fn new(region: impl Into<String>, account_id: impl Into<String>) -> Self {
        Self {
            partition: "aws".into(),
            region: region.into(),
            account_id: account_id.into(),
            stack_name: "local".into(),
            parameters: BTreeMap::new(),
            refs: BTreeMap::new(),
            attributes: BTreeMap::new(),
        }
    }

    /// Parameter `name` has `value`.
    pub fn parameter(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.parameters.insert(name.into(), value.into());
        self
    }

    /// `!Ref logical_id` is `value`.
    pub fn reference(mut self, logical_id: impl Into<String>, value: impl Into<String>) -> Self {
        self.refs.insert(logical_id.into(), value.into());
        self
    }

    /// `!GetAtt logical_id.attribute` is `value`.
    pub fn attribute(
        mut self,
        logical_id: &str,
        attribute: &str,
        value: impl Into<String>,
    ) -> Self {
        self.attributes
            .insert(format!("{logical_id}.{attribute}"), value.into());
        self
    }

    /// Options for local-aws's model of the template: this environment's parameters, region,
    /// account and stack (names as in the template: the environment holds the provisioned ones).
    pub(crate) fn template_options(&self) -> TemplateOptions {
        TemplateOptions {
            parameters: self.parameters.clone(),
            stack_name: self.stack_name.clone(),
            region: self.region.clone(),
            account_id: self.account_id.clone(),
            ..TemplateOptions::default()
        }
    }

    /// What the harness provisioned: region, account, each queue's URL (`Ref`), `Arn`,
    /// `QueueName` and `QueueUrl`, each table's name (`Ref`) and `Arn`, each function's name.
    /// Tables' `StreamArn`s are not in it: see [`with_stream_arns`](Self::with_stream_arns).
    pub fn from_provisioned(provisioned: &Provisioned) -> Self {
        let mut env = Self::new(&provisioned.region, &provisioned.account_id);
        for (id, q) in &provisioned.queues {
            env = env
                .reference(id, &q.url)
                .attribute(id, "Arn", &q.arn)
                .attribute(id, "QueueName", &q.name)
                .attribute(id, "QueueUrl", &q.url);
        }
        for (id, t) in &provisioned.tables {
            env = env.reference(id, &t.name).attribute(id, "Arn", &t.arn);
        }
        for (id, name) in &provisioned.functions {
            env = env.reference(id, name);
        }
        env
    }

    /// Adds the `StreamArn` of every provisioned table that has a stream (DescribeTable's
    /// `LatestStreamArn`).
    pub async fn with_stream_arns(
        mut self,
        dynamodb: &aws_sdk_dynamodb::Client,
        provisioned: &Provisioned,
    ) -> Result<Self, PolicyError> {
        for (id, t) in &provisioned.tables {
            let described = dynamodb
                .describe_table()
                .table_name(&t.name)
                .send()
                .await
                .map_err(|e| PolicyError::Lookup {
                    table: t.name.clone(),
                    message: aws_sdk_dynamodb::error::DisplayErrorContext(&e).to_string(),
                })?;
            if let Some(arn) = described.table.and_then(|t| t.latest_stream_arn) {
                self = self.attribute(id, "StreamArn", arn);
            }
        }
        Ok(self)
    }
}

/// Resolves values of one template against an [`Environment`].
pub(crate) struct Resolver<'a> {
    env: &'a Environment,
    template: &'a Template,
    resources: &'a Mapping,
}

impl<'a> Resolver<'a> {
    /// Over the template's `root` mapping, with the parameter values of local-aws's model of it
    /// (`template`: the defaults, overridden by the environment's).
    pub(crate) fn new(
        root: &'a Mapping,
        env: &'a Environment,
        template: &'a Template,
    ) -> Result<Self, PolicyError> {
        let resources = root
            .get("Resources")
            .and_then(Value::as_mapping)
            .ok_or_else(|| PolicyError::invalid("Resources", "missing or not a mapping"))?;
        Ok(Self {
            env,
            template,
            resources,
        })
    }

    /// The environment it resolves against.
    pub(crate) fn env(&self) -> &'a Environment {
        self.env
    }

    /// The template's resources.
    pub(crate) fn resources(&self) -> &'a Mapping {
        self.resources
    }

    /// One string, or a list of strings.
    pub(crate) fn strings(&self, v: &Value, at: &str) -> Result<Vec<String>, PolicyError> {
        match v {
            Value::Sequence(items) => items
                .iter()
                .enumerate()
                .map(|(i, item)| self.string(item, &format!("{at}[{i}]")))
                .collect(),
            other => Ok(vec![self.string(other, at)?]),
        }
    }

    /// A scalar or an intrinsic function, resolved to a string.
    pub(crate) fn string(&self, v: &Value, at: &str) -> Result<String, PolicyError> {
        let expr = Expr::parse(v, at).map_err(|e| match e {
            TemplateError::Invalid { at, message } if message.contains("not supported") => {
                let what = message.replace(" is not supported by the local harness", "");
                PolicyError::Unsupported { at, what }
            }
            other => template_error(other),
        })?;
        let mut out = String::new();
        for part in expr.parts() {
            out.push_str(&match part {
                Part::Text(t) => t.clone(),
                Part::Ref(name) => self.reference(name, at)?,
                Part::GetAtt(resource, attribute) => self.get_att(resource, attribute, at)?,
            });
        }
        Ok(out)
    }

    /// `!Ref name`: a pseudo parameter, a parameter, or a resource.
    pub(crate) fn reference(&self, name: &str, at: &str) -> Result<String, PolicyError> {
        let env = self.env;
        let pseudo = match name {
            "AWS::Partition" => Some(env.partition.clone()),
            "AWS::Region" => Some(env.region.clone()),
            "AWS::AccountId" => Some(env.account_id.clone()),
            "AWS::StackName" => Some(env.stack_name.clone()),
            "AWS::URLSuffix" => Some("amazonaws.com".to_owned()),
            _ => None,
        };
        if let Some(v) = pseudo
            .or_else(|| self.template.parameter(name).map(str::to_owned))
            .or_else(|| env.refs.get(name).cloned())
        {
            return Ok(v);
        }
        // Names CloudFormation gives a resource's Ref, when the template sets it.
        let derived = match self.resource_type(name) {
            Some("AWS::DynamoDB::Table") => self.property(name, "TableName", at)?,
            Some("AWS::Logs::LogGroup") => self.property(name, "LogGroupName", at)?,
            Some("AWS::Lambda::Function") => self.property(name, "FunctionName", at)?,
            _ => None,
        };
        derived.ok_or_else(|| PolicyError::Unresolved {
            at: at.to_owned(),
            reference: format!("!Ref {name}"),
        })
    }

    /// `!GetAtt resource.attribute`.
    pub(crate) fn get_att(
        &self,
        resource: &str,
        attribute: &str,
        at: &str,
    ) -> Result<String, PolicyError> {
        if let Some(v) = self.env.attributes.get(&format!("{resource}.{attribute}")) {
            return Ok(v.clone());
        }
        let env = self.env;
        let (p, r, a) = (&env.partition, &env.region, &env.account_id);
        let derived = match (self.resource_type(resource), attribute) {
            (Some("AWS::DynamoDB::Table"), "Arn") => {
                let name = self.reference(resource, at)?;
                Some(arn::table(p, r, a, &name))
            }
            (Some("AWS::SQS::Queue"), "Arn") => self
                .property(resource, "QueueName", at)?
                .map(|name| arn::queue(p, r, a, &name)),
            (Some("AWS::SQS::Queue"), "QueueName") => self.property(resource, "QueueName", at)?,
            (Some("AWS::Logs::LogGroup"), "Arn") => self
                .property(resource, "LogGroupName", at)?
                .map(|name| Arn::new(p, "logs", r, a, &format!("log-group:{name}:*")).to_string()),
            (Some("AWS::IAM::Role"), "Arn") => {
                let name = self
                    .property(resource, "RoleName", at)?
                    .unwrap_or_else(|| resource.to_owned());
                Some(Arn::new(p, "iam", "", a, &format!("role/{name}")).to_string())
            }
            (None, _) => {
                return Err(PolicyError::invalid(
                    at,
                    format!("!GetAtt {resource}.{attribute}: no such resource"),
                ));
            }
            _ => None,
        };
        derived.ok_or_else(|| PolicyError::Unresolved {
            at: at.to_owned(),
            reference: format!("!GetAtt {resource}.{attribute}"),
        })
    }

    pub(crate) fn resource_type(&self, logical_id: &str) -> Option<&'a str> {
        self.resources
            .get(logical_id)?
            .get("Type")
            .and_then(Value::as_str)
    }

    fn property(
        &self,
        logical_id: &str,
        property: &str,
        at: &str,
    ) -> Result<Option<String>, PolicyError> {
        self.resources
            .get(logical_id)
            .and_then(|r| r.get("Properties"))
            .and_then(|p| p.get(property))
            .map(|v| self.string(v, at))
            .transpose()
    }
}

/// A mapping key as a string.
pub(crate) fn key<'v>(k: &'v Value, at: &str) -> Result<&'v str, PolicyError> {
    k.as_str()
        .ok_or_else(|| PolicyError::invalid(at, "a key is not a string"))
}

/// The `(resource, attribute)` of a `!GetAtt` argument: `X.Attr` or `[X, Attr]`.
pub(crate) fn get_att_target(arg: &Value) -> Option<(String, String)> {
    match arg {
        Value::String(s) => s.split_once('.').map(|(r, a)| (r.to_owned(), a.to_owned())),
        Value::Sequence(s) if s.len() == 2 => {
            Some((s[0].as_str()?.to_owned(), s[1].as_str()?.to_owned()))
        }
        _ => None,
    }
}
