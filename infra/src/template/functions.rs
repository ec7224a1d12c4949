//! Functions: settings, environment and event sources.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_yaml_ng::{Mapping, Value};

use super::{
    Ctx, DynamoDbEventSource, Expr, HttpRoute, KinesisEventSource, Part, Result, SqsEventSource,
    invalid, key_str, parse_expr,
};

/// A function: SAM's `AWS::Serverless::Function`, as its translator writes it
/// (`AWS::Lambda::Function`).
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
    /// `ReservedConcurrentExecutions`: the most invocations that run at once (also its
    /// ceiling); past it Lambda throttles an invocation (`TooManyRequestsException`). `None`:
    /// the account's unreserved concurrency, not emulated (no limit).
    pub reserved_concurrent_executions: Option<u32>,
    /// `Environment.Variables`: `Globals` merged with the function's own (which win), as the
    /// translator merges them.
    pub environment: BTreeMap<String, Expr>,
    /// The variables of [`environment`](Self::environment) whose value is a parameter
    /// (`!Ref Param`), with the parameter's name.
    pub environment_parameters: BTreeMap<String, String>,
    /// SQS event sources (its `AWS::Lambda::EventSourceMapping`s on queues).
    pub sqs_events: Vec<SqsEventSource>,
    /// DynamoDB stream event sources (its `AWS::Lambda::EventSourceMapping`s on streams).
    pub dynamodb_events: Vec<DynamoDbEventSource>,
    /// Kinesis stream event sources (its `AWS::Lambda::EventSourceMapping`s on Kinesis streams).
    pub kinesis_events: Vec<KinesisEventSource>,
    /// HTTP API routes (the API `Body` paths and methods it integrates), in the `Body`'s order.
    pub http_routes: Vec<HttpRoute>,
    /// Whether it has a function URL (`FunctionUrlConfig`: an `AWS::Lambda::Url`).
    pub function_url: bool,
}

impl Function {
    /// The function timeout: what a local invocation gets before it counts as timed out.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_seconds.into())
    }
}

impl Ctx<'_> {
    /// An `AWS::Lambda::Function` (SAM's `Globals` already merged in by the translator); its
    /// event sources are added by [`sources`](super::sources).
    pub(super) fn function(
        &self,
        id: &str,
        resource: &Value,
        props: &Mapping,
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
        let timeout_seconds = self.u32_in(props, "Timeout", &at, 3, 1..=900)?;
        let (mut environment, mut environment_parameters) = (BTreeMap::new(), BTreeMap::new());
        if let Some(vars) = props.get("Environment").and_then(|e| e.get("Variables")) {
            let vars = vars
                .as_mapping()
                .ok_or_else(|| invalid(&format!("{at}.Environment.Variables"), "not a mapping"))?;
            for (k, v) in vars {
                let k = key_str(k, &at)?;
                let at = format!("{at}.Environment.Variables.{k}");
                if let [Part::Ref(p)] = parse_expr(v, &at)?.as_slice()
                    && self.parameters.contains_key(p)
                {
                    environment_parameters.insert(k.to_owned(), p.clone());
                }
                environment.insert(k.to_owned(), self.expr(v, &at)?);
            }
        }
        Ok(Function {
            logical_id: id.to_owned(),
            name: self
                .opt_scalar(props, "FunctionName", &at)?
                .unwrap_or_else(|| id.to_owned()),
            binary,
            timeout_seconds,
            memory_size: self.opt_u32(props, "MemorySize", &at)?.unwrap_or(128),
            reserved_concurrent_executions: self.opt_u32(
                props,
                "ReservedConcurrentExecutions",
                &at,
            )?,
            environment,
            environment_parameters,
            sqs_events: Vec::new(),
            dynamodb_events: Vec::new(),
            kinesis_events: Vec::new(),
            http_routes: Vec::new(),
            function_url: false,
        })
    }
}
