//! Reading a function's event sources from the translated template: its
//! `AWS::Lambda::EventSourceMapping`s (SQS queues, DynamoDB and Kinesis streams), the routes of the
//! `AWS::ApiGatewayV2::Api`s whose integration it is, and its `AWS::Lambda::Url`.
//!
//! What the harness does not emulate is refused by name, never skipped.

use std::time::Duration;

use serde_yaml_ng::{Mapping, Value};

use super::events::REPORT_BATCH_ITEM_FAILURES;
use super::{
    Ctx, DynamoDbEventSource, FilterPattern, HttpRoute, JwtConfiguration, KinesisEventSource, Part,
    Result, SqsEventSource, StartingPosition, Template, invalid, key_str, parse_expr,
};

/// Properties of a stream mapping that change what it does and are not emulated.
const UNSUPPORTED_STREAM_PROPERTIES: &[&str] = &[
    "TumblingWindowInSeconds",
    "StartingPositionTimestamp",
    "KmsKeyArn",
    "MetricsConfig",
    "ProvisionedPollerConfig",
];

/// What DynamoDB and Kinesis stream mappings share.
struct StreamSettings {
    starting_position: StartingPosition,
    batch_size: u32,
    maximum_batching_window_in_seconds: u32,
    function_response_types: Vec<String>,
    bisect_batch_on_function_error: bool,
    maximum_retry_attempts: i32,
    maximum_record_age_in_seconds: i32,
    filters: Vec<FilterPattern>,
    enabled: bool,
}

/// The OpenAPI method of SAM's `ANY`.
const ANY_METHOD: &str = "x-amazon-apigateway-any-method";

impl Template {
    fn function_mut(&mut self, logical_id: &str) -> &mut super::Function {
        self.functions
            .get_mut(logical_id)
            .expect("a function of the template")
    }
}

impl Ctx<'_> {
    /// `!Ref F` (or `!GetAtt F.Arn`) of a function of `template`: its logical id.
    fn function_of(&self, template: &Template, v: Option<&Value>, at: &str) -> Result<String> {
        let v = v.ok_or_else(|| invalid(at, "missing"))?;
        match parse_expr(v, at)?.as_slice() {
            [Part::Ref(f)] | [Part::GetAtt(f, _)] if template.functions.contains_key(f) => {
                Ok(f.clone())
            }
            _ => Err(invalid(at, "must name a function of this template")),
        }
    }

    /// Adds the event source mapping `id` to its function.
    pub(super) fn event_source_mapping(
        &self,
        template: &mut Template,
        id: &str,
        p: &Mapping,
    ) -> Result<()> {
        let at = format!("Resources.{id}.Properties");
        let function = self.function_of(
            template,
            p.get("FunctionName"),
            &format!("{at}.FunctionName"),
        )?;
        let name = id
            .strip_prefix(function.as_str())
            .filter(|n| !n.is_empty())
            .unwrap_or(id)
            .to_owned();
        let source_at = format!("{at}.EventSourceArn");
        let source = p
            .get("EventSourceArn")
            .ok_or_else(|| invalid(&source_at, "missing"))?;
        match parse_expr(source, &source_at)?.as_slice() {
            [Part::GetAtt(q, a)] if a == "Arn" && template.queues.contains_key(q) => {
                let event = self.sqs_event(name, q, p, &at)?;
                template.function_mut(&function).sqs_events.push(event);
            }
            [Part::GetAtt(t, a)] if a == "StreamArn" && template.tables.contains_key(t) => {
                let on_failure =
                    self.on_failure_queue(|q| template.queues.contains_key(q), p, &at)?;
                let s = self.stream_settings(p, &at, "a DynamoDB stream")?;
                let event = DynamoDbEventSource {
                    name,
                    table: t.clone(),
                    starting_position: s.starting_position,
                    batch_size: s.batch_size,
                    maximum_batching_window_in_seconds: s.maximum_batching_window_in_seconds,
                    function_response_types: s.function_response_types,
                    bisect_batch_on_function_error: s.bisect_batch_on_function_error,
                    maximum_retry_attempts: s.maximum_retry_attempts,
                    maximum_record_age_in_seconds: s.maximum_record_age_in_seconds,
                    filters: s.filters,
                    on_failure_queue: on_failure,
                    enabled: s.enabled,
                };
                template.function_mut(&function).dynamodb_events.push(event);
            }
            [Part::GetAtt(k, a)] if a == "Arn" && template.kinesis_streams.contains_key(k) => {
                let on_failure =
                    self.on_failure_queue(|q| template.queues.contains_key(q), p, &at)?;
                let s = self.stream_settings(p, &at, "a Kinesis stream")?;
                let event = KinesisEventSource {
                    name,
                    stream: k.clone(),
                    starting_position: s.starting_position,
                    batch_size: s.batch_size,
                    maximum_batching_window_in_seconds: s.maximum_batching_window_in_seconds,
                    function_response_types: s.function_response_types,
                    bisect_batch_on_function_error: s.bisect_batch_on_function_error,
                    maximum_retry_attempts: s.maximum_retry_attempts,
                    maximum_record_age_in_seconds: s.maximum_record_age_in_seconds,
                    filters: s.filters,
                    on_failure_queue: on_failure,
                    enabled: s.enabled,
                };
                template.function_mut(&function).kinesis_events.push(event);
            }
            _ => {
                return Err(invalid(
                    &source_at,
                    "must be !GetAtt <queue in this template>.Arn, !GetAtt <table in this template>.StreamArn or !GetAtt <Kinesis stream in this template>.Arn: other event sources are not emulated by the local harness",
                ));
            }
        }
        Ok(())
    }

    fn sqs_event(
        &self,
        name: String,
        queue: &str,
        p: &Mapping,
        at: &str,
    ) -> Result<SqsEventSource> {
        let maximum_concurrency = match p.get("ScalingConfig") {
            Some(Value::Mapping(s)) => {
                self.opt_u32(s, "MaximumConcurrency", &format!("{at}.ScalingConfig"))?
            }
            _ => None,
        };
        Ok(SqsEventSource {
            name,
            queue: queue.to_owned(),
            batch_size: self.opt_u32(p, "BatchSize", at)?.unwrap_or(10),
            maximum_batching_window_in_seconds: self.batching_window(p, at)?,
            function_response_types: self.function_response_types(p, at)?,
            maximum_concurrency,
            enabled: self.opt_bool(p, "Enabled", at)?.unwrap_or(true),
        })
    }

    /// The settings of a DynamoDB or Kinesis stream mapping (`what` names the stream in
    /// errors).
    fn stream_settings(&self, p: &Mapping, at: &str, what: &str) -> Result<StreamSettings> {
        for key in UNSUPPORTED_STREAM_PROPERTIES {
            if p.get(*key).is_some() {
                return Err(invalid(
                    &format!("{at}.{key}"),
                    "not emulated by the local harness",
                ));
            }
        }
        if self.opt_u32(p, "ParallelizationFactor", at)?.unwrap_or(1) != 1 {
            return Err(invalid(
                &format!("{at}.ParallelizationFactor"),
                "only 1 (one batch per shard at a time) is emulated by the local harness",
            ));
        }
        let starting_position = match self.opt_scalar(p, "StartingPosition", at)?.as_deref() {
            Some("TRIM_HORIZON") => StartingPosition::TrimHorizon,
            Some("LATEST") => StartingPosition::Latest,
            other => {
                return Err(invalid(
                    &format!("{at}.StartingPosition"),
                    format!(
                        "{other:?}: {what} starts at TRIM_HORIZON or LATEST in the local harness"
                    ),
                ));
            }
        };
        Ok(StreamSettings {
            starting_position,
            batch_size: self.u32_in(p, "BatchSize", at, 100, 1..=10_000)?,
            maximum_batching_window_in_seconds: self.batching_window(p, at)?,
            function_response_types: self.function_response_types(p, at)?,
            bisect_batch_on_function_error: self
                .opt_bool(p, "BisectBatchOnFunctionError", at)?
                .unwrap_or(false),
            maximum_retry_attempts: self.i32_in(
                p,
                "MaximumRetryAttempts",
                at,
                |v| (-1..=10_000).contains(&v),
                "-1 (no limit) or in 0..=10000",
            )?,
            maximum_record_age_in_seconds: self.i32_in(
                p,
                "MaximumRecordAgeInSeconds",
                at,
                |v| v == -1 || (60..=604_800).contains(&v),
                "-1 (no limit) or in 60..=604800",
            )?,
            filters: self.filters(p, at)?,
            enabled: self.opt_bool(p, "Enabled", at)?.unwrap_or(true),
        })
    }

    fn batching_window(&self, p: &Mapping, at: &str) -> Result<u32> {
        self.u32_in(p, "MaximumBatchingWindowInSeconds", at, 0, 0..=300)
    }

    fn function_response_types(&self, p: &Mapping, at: &str) -> Result<Vec<String>> {
        let at = format!("{at}.FunctionResponseTypes");
        let types: Vec<String> = match p.get("FunctionResponseTypes") {
            None => Vec::new(),
            Some(Value::Sequence(s)) => s
                .iter()
                .enumerate()
                .map(|(i, v)| self.scalar(v, &format!("{at}[{i}]")))
                .collect::<Result<_>>()?,
            Some(_) => return Err(invalid(&at, "not a list")),
        };
        if let Some(other) = types.iter().find(|t| *t != REPORT_BATCH_ITEM_FAILURES) {
            return Err(invalid(
                &at,
                format!("{other:?} is not {REPORT_BATCH_ITEM_FAILURES}"),
            ));
        }
        Ok(types)
    }

    /// A whole number, -1 (no limit) when absent.
    fn i32_in(
        &self,
        m: &Mapping,
        key: &str,
        at: &str,
        allowed: impl Fn(i32) -> bool,
        what: &str,
    ) -> Result<i32> {
        let at_key = format!("{at}.{key}");
        let v = match self.opt_scalar(m, key, at)? {
            None => -1,
            Some(s) => s
                .trim()
                .parse::<i32>()
                .map_err(|_| invalid(&at_key, format!("{s:?} is not a whole number")))?,
        };
        if !allowed(v) {
            return Err(invalid(&at_key, format!("{v} is not {what}")));
        }
        Ok(v)
    }

    fn filters(&self, p: &Mapping, at: &str) -> Result<Vec<FilterPattern>> {
        let Some(criteria) = p.get("FilterCriteria") else {
            return Ok(Vec::new());
        };
        let at = format!("{at}.FilterCriteria.Filters");
        let Some(Value::Sequence(filters)) = criteria.get("Filters") else {
            return Err(invalid(&at, "missing or not a list"));
        };
        filters
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let at = format!("{at}[{i}]");
                let f = f
                    .as_mapping()
                    .ok_or_else(|| invalid(&at, "not a mapping"))?;
                let text = self
                    .opt_scalar(f, "Pattern", &at)?
                    .ok_or_else(|| invalid(&at, "missing Pattern"))?;
                FilterPattern::parse(&text)
                    .map_err(|e| invalid(&format!("{at}.Pattern"), e.to_string()))
            })
            .collect()
    }

    /// `DestinationConfig.OnFailure.Destination`: `!GetAtt Q.Arn` of a queue of the template.
    fn on_failure_queue(
        &self,
        queues: impl Fn(&str) -> bool,
        p: &Mapping,
        at: &str,
    ) -> Result<Option<String>> {
        let Some(config) = p.get("DestinationConfig") else {
            return Ok(None);
        };
        let at = format!("{at}.DestinationConfig.OnFailure.Destination");
        let destination = config
            .get("OnFailure")
            .and_then(|o| o.get("Destination"))
            .ok_or_else(|| invalid(&at, "missing"))?;
        match parse_expr(destination, &at)?.as_slice() {
            [Part::GetAtt(q, a)] if a == "Arn" && queues(q) => Ok(Some(q.clone())),
            _ => Err(invalid(
                &at,
                "must be !GetAtt <queue in this template>.Arn: only SQS destinations are emulated by the local harness",
            )),
        }
    }

    /// Adds the routes of the HTTP API `id` (its OpenAPI `Body`, as SAM writes it) to the
    /// functions they integrate.
    pub(super) fn http_api(&self, template: &mut Template, id: &str, p: &Mapping) -> Result<()> {
        let at = format!("Resources.{id}.Properties.Body");
        let body = p
            .get("Body")
            .and_then(Value::as_mapping)
            .ok_or_else(|| invalid(&at, "missing: only an API defined in the template (SAM's HttpApi) is emulated by the local harness"))?;
        let schemes = body
            .get("components")
            .and_then(|c| c.get("securitySchemes"))
            .and_then(Value::as_mapping);
        for (name, scheme) in schemes.into_iter().flatten() {
            let name = key_str(name, &at)?;
            let at = format!("{at}.components.securitySchemes.{name}");
            let authorizer = scheme.get("x-amazon-apigateway-authorizer");
            let config = authorizer
                .filter(|a| a.get("type").and_then(Value::as_str) == Some("jwt"))
                .and_then(|a| a.get("jwtConfiguration"))
                .and_then(Value::as_mapping)
                .ok_or_else(|| {
                    invalid(
                        &at,
                        format!(
                            "{name} is not emulated by the local harness (only JWT authorizers are)"
                        ),
                    )
                })?;
            let at = format!("{at}.x-amazon-apigateway-authorizer.jwtConfiguration");
            let audiences = match config.get("audience") {
                Some(Value::Sequence(list)) => list
                    .iter()
                    .map(|a| self.scalar(a, &format!("{at}.audience")))
                    .collect::<Result<Vec<_>>>()?,
                // A CommaDelimitedList parameter.
                Some(one) => vec![self.scalar(one, &format!("{at}.audience"))?],
                None => Vec::new(),
            };
            let jwt = JwtConfiguration {
                issuer: self
                    .opt_scalar(config, "issuer", &at)?
                    .ok_or_else(|| invalid(&at, "missing issuer"))?,
                audiences: audiences
                    .iter()
                    .flat_map(|a| a.split(','))
                    .map(str::trim)
                    .filter(|a| !a.is_empty())
                    .map(str::to_owned)
                    .collect(),
            };
            template.jwt_authorizers.insert(name.to_owned(), jwt);
        }
        let paths = body
            .get("paths")
            .and_then(Value::as_mapping)
            .ok_or_else(|| invalid(&format!("{at}.paths"), "missing or not a mapping"))?;
        for (path, methods) in paths {
            let path = key_str(path, &at)?;
            let at = format!("{at}.paths.{path}");
            let path = if path == "$default" {
                "/{proxy+}"
            } else {
                path
            };
            let methods = methods
                .as_mapping()
                .ok_or_else(|| invalid(&at, "not a mapping"))?;
            for (method, operation) in methods {
                let method = key_str(method, &at)?;
                let at = format!("{at}.{method}");
                let method = match method {
                    ANY_METHOD => "ANY".to_owned(),
                    m => m.to_ascii_uppercase(),
                };
                let mut route = HttpRoute::new(format!("{method} {path}"), method, path);
                (route.authorizer, route.authorization_scopes) = self.security(operation, &at)?;
                let function = self.integration(template, operation, &at)?;
                route.integration_timeout = self.integration_timeout(operation, &at)?;
                route.api = Some(id.to_owned());
                template.function_mut(&function).http_routes.push(route);
            }
        }
        Ok(())
    }

    /// The function of an operation's `x-amazon-apigateway-integration` (SAM's
    /// `arn:...:functions/${F.Arn}/invocations`).
    fn integration(&self, template: &Template, operation: &Value, at: &str) -> Result<String> {
        let at = format!("{at}.x-amazon-apigateway-integration.uri");
        let uri = operation
            .get("x-amazon-apigateway-integration")
            .and_then(|i| i.get("uri"))
            .ok_or_else(|| invalid(&at, "missing"))?;
        let function = parse_expr(uri, &at)?.into_iter().find_map(|p| match p {
            Part::GetAtt(f, a) if a == "Arn" => Some(f),
            _ => None,
        });
        match function {
            Some(f) if template.functions.contains_key(&f) => Ok(f),
            _ => Err(invalid(
                &at,
                "only a Lambda proxy integration of a function of this template is emulated by the local harness",
            )),
        }
    }

    /// An operation's integration `timeoutInMillis` (50 to 30,000 ms on an HTTP API).
    fn integration_timeout(&self, operation: &Value, at: &str) -> Result<Option<Duration>> {
        let at = format!("{at}.x-amazon-apigateway-integration.timeoutInMillis");
        let Some(value) = operation
            .get("x-amazon-apigateway-integration")
            .and_then(|i| i.get("timeoutInMillis"))
        else {
            return Ok(None);
        };
        let millis: u64 = self
            .scalar(value, &at)?
            .parse()
            .map_err(|_| invalid(&at, "not a whole number of milliseconds"))?;
        if !(50..=30_000).contains(&millis) {
            return Err(invalid(
                &at,
                format!("{millis} ms is outside an HTTP API's 50 to 30,000 ms"),
            ));
        }
        Ok(Some(Duration::from_millis(millis)))
    }

    /// An operation's `security`: its authorizer (`NONE` for a public route) and scopes.
    fn security(&self, operation: &Value, at: &str) -> Result<(Option<String>, Vec<String>)> {
        let at = format!("{at}.security");
        let Some(security) = operation.get("security") else {
            return Ok((None, Vec::new()));
        };
        let only = security
            .as_sequence()
            .filter(|s| s.len() == 1)
            .and_then(|s| s[0].as_mapping())
            .filter(|m| m.len() == 1)
            .and_then(|m| m.iter().next());
        let Some((Value::String(name), Value::Sequence(scopes))) = only else {
            return Err(invalid(&at, "only one authorizer per route is emulated"));
        };
        let scopes = scopes
            .iter()
            .enumerate()
            .map(|(i, s)| self.scalar(s, &format!("{at}.{name}[{i}]")))
            .collect::<Result<_>>()?;
        Ok((Some(name.clone()), scopes))
    }

    /// Marks the target of the function URL `id`.
    pub(super) fn function_url(
        &self,
        template: &mut Template,
        id: &str,
        p: &Mapping,
    ) -> Result<()> {
        let at = format!("Resources.{id}.Properties.TargetFunctionArn");
        let function = self.function_of(template, p.get("TargetFunctionArn"), &at)?;
        template.function_mut(&function).function_url = true;
        Ok(())
    }
}
