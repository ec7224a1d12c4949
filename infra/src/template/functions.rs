//! Functions: settings, environment and event sources.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_yaml_ng::{Mapping, Value};

use super::{
    Ctx, DynamoDbEventSource, Expr, HttpRoute, Part, Result, SqsEventSource, invalid, key_str,
    parse_expr, plain_scalar,
};

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
    /// The variables of [`environment`](Self::environment) whose value is a parameter
    /// (`!Ref Param`), with the parameter's name.
    pub environment_parameters: BTreeMap<String, String>,
    /// SQS event sources.
    pub sqs_events: Vec<SqsEventSource>,
    /// DynamoDB stream event sources.
    pub dynamodb_events: Vec<DynamoDbEventSource>,
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

impl Ctx<'_> {
    fn environment(
        &self,
        props: Option<&Mapping>,
        at: &str,
        out: &mut BTreeMap<String, Expr>,
        parameters: &mut BTreeMap<String, String>,
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
            let at = format!("{at}.Environment.Variables.{k}");
            match parse_expr(v, &at)?.as_slice() {
                [Part::Ref(p)] if self.parameters.contains_key(p) => {
                    parameters.insert(k.to_owned(), p.clone())
                }
                _ => parameters.remove(k),
            };
            out.insert(k.to_owned(), self.expr(v, &at)?);
        }
        Ok(())
    }

    pub(super) fn function(
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
        let (mut environment, mut environment_parameters) = (BTreeMap::new(), BTreeMap::new());
        self.environment(
            globals,
            global_at,
            &mut environment,
            &mut environment_parameters,
        )?;
        self.environment(
            Some(props),
            &at,
            &mut environment,
            &mut environment_parameters,
        )?;

        let mut sqs_events = Vec::new();
        let mut dynamodb_events = Vec::new();
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
                let at = format!("{at}.Properties");
                match kind.as_str() {
                    "SQS" => sqs_events.push(self.sqs_event(name, p, &at)?),
                    "DynamoDB" => dynamodb_events.push(self.dynamodb_event(name, p, &at)?),
                    "HttpApi" => http_routes.push(self.http_route(name, p, &at)?),
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
            environment_parameters,
            sqs_events,
            dynamodb_events,
            http_routes,
            function_url: props.get("FunctionUrlConfig").is_some(),
        })
    }
}
