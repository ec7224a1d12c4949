//! A function's event sources: SQS queues, DynamoDB streams and HTTP API routes.

use std::time::Duration;

use serde_yaml_ng::{Mapping, Value};

use super::{Ctx, FilterPattern, Part, Result, invalid, key_str, parse_expr};

const REPORT_BATCH_ITEM_FAILURES: &str = "ReportBatchItemFailures";

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
            .any(|t| t == REPORT_BATCH_ITEM_FAILURES)
    }
}

/// Where a stream mapping starts reading a shard it has no checkpoint for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartingPosition {
    /// `TRIM_HORIZON`: the oldest record the shard still has.
    TrimHorizon,
    /// `LATEST`: only records written after the mapping started.
    Latest,
}

impl StartingPosition {
    /// `TRIM_HORIZON` or `LATEST`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TrimHorizon => "TRIM_HORIZON",
            Self::Latest => "LATEST",
        }
    }
}

/// A DynamoDB stream event source of a function (`Events.X.Type: DynamoDB`).
///
/// ```
/// use std::time::Duration;
/// use local_aws::template::{StartingPosition, Template, TemplateOptions};
///
/// let template = Template::load_project(&TemplateOptions::default()).unwrap();
/// let source = &template.functions["PaymentsPublisherFunction"].dynamodb_events[0];
/// assert_eq!(source.table, "PaymentsTable");
/// assert_eq!(source.starting_position, StartingPosition::TrimHorizon);
/// assert_eq!(source.maximum_retry_attempts(), Some(100));
/// assert_eq!(source.maximum_record_age(), Some(Duration::from_secs(43_200)));
/// assert_eq!(source.on_failure_queue.as_deref(), Some("PaymentsOutboxDeadLetterQueue"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DynamoDbEventSource {
    /// The event's name in `Events`.
    pub name: String,
    /// Logical id of the table whose stream it reads (`Stream: !GetAtt T.StreamArn`).
    pub table: String,
    /// `StartingPosition`.
    pub starting_position: StartingPosition,
    /// `BatchSize` (default 100).
    pub batch_size: u32,
    /// `MaximumBatchingWindowInSeconds` (default 0).
    pub maximum_batching_window_in_seconds: u32,
    /// `FunctionResponseTypes`.
    pub function_response_types: Vec<String>,
    /// `BisectBatchOnFunctionError` (default false).
    pub bisect_batch_on_function_error: bool,
    /// `MaximumRetryAttempts` (default -1: until the record expires).
    pub maximum_retry_attempts: i32,
    /// `MaximumRecordAgeInSeconds` (default -1: until the record expires).
    pub maximum_record_age_in_seconds: i32,
    /// `FilterCriteria.Filters[].Pattern`: a record is delivered when one of them matches
    /// (every record when there is none).
    pub filters: Vec<FilterPattern>,
    /// Logical id of the SQS queue of `DestinationConfig.OnFailure`.
    pub on_failure_queue: Option<String>,
    /// `Enabled` (default true).
    pub enabled: bool,
}

impl DynamoDbEventSource {
    /// Whether the function returns partial batch responses (`ReportBatchItemFailures`).
    pub fn reports_batch_item_failures(&self) -> bool {
        self.function_response_types
            .iter()
            .any(|t| t == REPORT_BATCH_ITEM_FAILURES)
    }

    /// Retries of a failing batch before it goes to the on-failure destination; `None`:
    /// without limit.
    pub fn maximum_retry_attempts(&self) -> Option<u32> {
        u32::try_from(self.maximum_retry_attempts).ok()
    }

    /// The age after which a record is no longer sent to the function; `None`: without limit.
    pub fn maximum_record_age(&self) -> Option<Duration> {
        u64::try_from(self.maximum_record_age_in_seconds)
            .ok()
            .map(Duration::from_secs)
    }
}

/// An HTTP API route of a function (`Events.X.Type: HttpApi`).
///
/// ```
/// use local_aws::template::{Template, TemplateOptions};
///
/// let options = TemplateOptions::default().parameter("WriteScope", "pay/charge");
/// let template = Template::load_project(&options).unwrap();
/// let routes = &template.functions["PaymentsApiFunction"].http_routes;
/// let create = routes.iter().find(|r| r.method == "POST").unwrap();
/// assert_eq!(create.path, "/payments");
/// assert_eq!(create.authorization_scopes, ["pay/charge"]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpRoute {
    /// The event's name in `Events`.
    pub name: String,
    /// `Method` (upper case; `ANY` when absent).
    pub method: String,
    /// `Path`, e.g. `/payments/{paymentId}` (`/{proxy+}` when absent).
    pub path: String,
    /// `Auth.Authorizer`: the route's authorizer, `NONE` for a public route; `None`: the API's
    /// `DefaultAuthorizer`.
    pub authorizer: Option<String>,
    /// `Auth.AuthorizationScopes`: a token must carry at least one of them (in `scope` or
    /// `scp`), else API Gateway answers 403. Empty: no scope is checked (or the authorizer's
    /// own, when it has some).
    pub authorization_scopes: Vec<String>,
}

impl HttpRoute {
    /// A route with the API's default authorizer and no authorization scopes.
    pub fn new(
        name: impl Into<String>,
        method: impl Into<String>,
        path: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            method: method.into(),
            path: path.into(),
            authorizer: None,
            authorization_scopes: Vec::new(),
        }
    }

    /// Whether the route is public (`Auth.Authorizer: NONE`): no authorizer runs.
    pub fn is_public(&self) -> bool {
        self.authorizer.as_deref() == Some(NO_AUTHORIZER)
    }
}

/// `Auth.Authorizer` of a public route.
const NO_AUTHORIZER: &str = "NONE";

/// Properties of a DynamoDB event that change what the mapping does and are not emulated.
const UNSUPPORTED_STREAM_PROPERTIES: &[&str] = &[
    "TumblingWindowInSeconds",
    "StartingPositionTimestamp",
    "KmsKeyArn",
    "MetricsConfig",
    "ProvisionedPollerConfig",
];

impl Ctx<'_> {
    /// `!GetAtt <Resource>.<attribute>` naming a resource of this template: the resource.
    fn get_att_of(&self, p: &Mapping, key: &str, attribute: &str, at: &str) -> Result<String> {
        let at = format!("{at}.{key}");
        let value = p.get(key).ok_or_else(|| invalid(&at, "missing"))?;
        match parse_expr(value, &at)?.as_slice() {
            [Part::GetAtt(r, a)] if a == attribute => Ok(r.clone()),
            _ => Err(invalid(
                &at,
                format!("must be !GetAtt <resource in this template>.{attribute}"),
            )),
        }
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

    fn i32_in(
        &self,
        m: &Mapping,
        key: &str,
        at: &str,
        default: i32,
        allowed: impl Fn(i32) -> bool,
        what: &str,
    ) -> Result<i32> {
        let at_key = format!("{at}.{key}");
        let v = match self.opt_scalar(m, key, at)? {
            None => default,
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

    pub(super) fn sqs_event(&self, name: &str, p: &Mapping, at: &str) -> Result<SqsEventSource> {
        let maximum_concurrency = match p.get("ScalingConfig") {
            Some(Value::Mapping(s)) => {
                self.opt_u32(s, "MaximumConcurrency", &format!("{at}.ScalingConfig"))?
            }
            _ => None,
        };
        Ok(SqsEventSource {
            name: name.to_owned(),
            queue: self.get_att_of(p, "Queue", "Arn", at)?,
            batch_size: self.opt_u32(p, "BatchSize", at)?.unwrap_or(10),
            maximum_batching_window_in_seconds: self.u32_in(
                p,
                "MaximumBatchingWindowInSeconds",
                at,
                0,
                0..=300,
            )?,
            function_response_types: self.function_response_types(p, at)?,
            maximum_concurrency,
            enabled: self.opt_bool(p, "Enabled", at)?.unwrap_or(true),
        })
    }

    pub(super) fn dynamodb_event(
        &self,
        name: &str,
        p: &Mapping,
        at: &str,
    ) -> Result<DynamoDbEventSource> {
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
                    format!("{other:?}: a DynamoDB stream starts at TRIM_HORIZON or LATEST"),
                ));
            }
        };
        Ok(DynamoDbEventSource {
            name: name.to_owned(),
            table: self.get_att_of(p, "Stream", "StreamArn", at)?,
            starting_position,
            batch_size: self.u32_in(p, "BatchSize", at, 100, 1..=10_000)?,
            maximum_batching_window_in_seconds: self.u32_in(
                p,
                "MaximumBatchingWindowInSeconds",
                at,
                0,
                0..=300,
            )?,
            function_response_types: self.function_response_types(p, at)?,
            bisect_batch_on_function_error: self
                .opt_bool(p, "BisectBatchOnFunctionError", at)?
                .unwrap_or(false),
            maximum_retry_attempts: self.i32_in(
                p,
                "MaximumRetryAttempts",
                at,
                -1,
                |v| (-1..=10_000).contains(&v),
                "-1 (no limit) or in 0..=10000",
            )?,
            maximum_record_age_in_seconds: self.i32_in(
                p,
                "MaximumRecordAgeInSeconds",
                at,
                -1,
                |v| v == -1 || (60..=604_800).contains(&v),
                "-1 (no limit) or in 60..=604800",
            )?,
            filters: self.filters(p, at)?,
            on_failure_queue: self.on_failure_queue(p, at)?,
            enabled: self.opt_bool(p, "Enabled", at)?.unwrap_or(true),
        })
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

    fn on_failure_queue(&self, p: &Mapping, at: &str) -> Result<Option<String>> {
        let Some(config) = p.get("DestinationConfig") else {
            return Ok(None);
        };
        let at = format!("{at}.DestinationConfig.OnFailure");
        let Some(Value::Mapping(on_failure)) = config.get("OnFailure") else {
            return Err(invalid(&at, "missing or not a mapping"));
        };
        match self.opt_scalar(on_failure, "Type", &at)?.as_deref() {
            Some("SQS") => {}
            other => {
                return Err(invalid(
                    &format!("{at}.Type"),
                    format!("{other:?}: only SQS destinations are emulated by the local harness"),
                ));
            }
        }
        self.get_att_of(on_failure, "Destination", "Arn", &at)
            .map(Some)
    }

    pub(super) fn http_route(&self, name: &str, p: &Mapping, at: &str) -> Result<HttpRoute> {
        let mut route = HttpRoute::new(
            name,
            self.opt_scalar(p, "Method", at)?
                .map_or_else(|| "ANY".to_owned(), |m| m.to_ascii_uppercase()),
            self.opt_scalar(p, "Path", at)?
                .unwrap_or_else(|| "/{proxy+}".to_owned()),
        );
        let at = format!("{at}.Auth");
        let auth = match p.get("Auth") {
            None => return Ok(route),
            Some(Value::Mapping(auth)) => auth,
            Some(_) => return Err(invalid(&at, "not a mapping")),
        };
        for key in auth.keys() {
            let key = key_str(key, &at)?;
            if !matches!(key, "Authorizer" | "AuthorizationScopes") {
                return Err(invalid(
                    &format!("{at}.{key}"),
                    "not emulated by the local harness",
                ));
            }
        }
        route.authorizer = self.opt_scalar(auth, "Authorizer", &at)?;
        if route.authorizer.as_deref() == Some("AWS_IAM") {
            return Err(invalid(
                &format!("{at}.Authorizer"),
                "AWS_IAM is not emulated by the local harness",
            ));
        }
        route.authorization_scopes = match auth.get("AuthorizationScopes") {
            None => Vec::new(),
            Some(Value::Sequence(scopes)) => scopes
                .iter()
                .enumerate()
                .map(|(i, s)| self.scalar(s, &format!("{at}.AuthorizationScopes[{i}]")))
                .collect::<Result<_>>()?,
            Some(_) => return Err(invalid(&format!("{at}.AuthorizationScopes"), "not a list")),
        };
        if route.is_public() && !route.authorization_scopes.is_empty() {
            return Err(invalid(
                &at,
                "AuthorizationScopes need an authorizer (Authorizer is NONE)",
            ));
        }
        Ok(route)
    }
}
