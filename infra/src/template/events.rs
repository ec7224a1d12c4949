//! A function's event sources: SQS queues, DynamoDB and Kinesis streams and HTTP API routes, as SAM's
//! translator writes them (`AWS::Lambda::EventSourceMapping` resources, the routes of an
//! `AWS::ApiGatewayV2::Api`'s OpenAPI `Body`); [`sources`](super::sources) reads them.

use std::time::Duration;

use super::FilterPattern;

pub(super) const REPORT_BATCH_ITEM_FAILURES: &str = "ReportBatchItemFailures";

/// An SQS event source of a function (SAM's `Events.X.Type: SQS`: an
/// `AWS::Lambda::EventSourceMapping` on a queue).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqsEventSource {
    /// The event's name in `Events` (the mapping's logical id without the function's in front).
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

/// A DynamoDB stream event source of a function (SAM's `Events.X.Type: DynamoDB`: an
/// `AWS::Lambda::EventSourceMapping` on a table's stream).
///
/// ```
/// use std::time::Duration;
/// use local_aws::template::{StartingPosition, Template, TemplateOptions};
///
/// let template = Template::load_project(&TemplateOptions::default()).unwrap();
/// let source = &template.functions["PaymentsPublisherFunction"].dynamodb_events[0];
/// assert_eq!(source.table, "PaymentsTable");
/// assert_eq!(source.starting_position, StartingPosition::TrimHorizon);
/// assert_eq!(source.maximum_retry_attempts(), None);
/// assert_eq!(source.maximum_record_age(), Some(Duration::from_secs(43_200)));
/// assert_eq!(source.on_failure_queue.as_deref(), Some("PaymentsOutboxDeadLetterQueue"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DynamoDbEventSource {
    /// The event's name in `Events` (the mapping's logical id without the function's in front).
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
        retry_limit(self.maximum_retry_attempts)
    }

    /// The age after which a record is no longer sent to the function; `None`: without limit.
    pub fn maximum_record_age(&self) -> Option<Duration> {
        age_limit(self.maximum_record_age_in_seconds)
    }
}

fn retry_limit(maximum_retry_attempts: i32) -> Option<u32> {
    u32::try_from(maximum_retry_attempts).ok()
}

fn age_limit(maximum_record_age_in_seconds: i32) -> Option<Duration> {
    u64::try_from(maximum_record_age_in_seconds)
        .ok()
        .map(Duration::from_secs)
}

/// A Kinesis stream event source of a function (SAM's `Events.X.Type: Kinesis`: an
/// `AWS::Lambda::EventSourceMapping` on a data stream). The settings are those of a
/// [`DynamoDbEventSource`], with the same defaults and limits.
///
/// ```
/// use local_aws::template::{StartingPosition, Template, TemplateOptions};
///
/// let yaml = r#"
/// Transform: AWS::Serverless-2016-10-31
/// Resources:
///   Events:
///     Type: AWS::Kinesis::Stream
///     Properties: { ShardCount: 1 }
///   Failed:
///     Type: AWS::SQS::Queue
///   Consumer:
///     Type: AWS::Serverless::Function
///     Properties:
///       Runtime: provided.al2023
///       Handler: bootstrap
///       CodeUri: .
///       Events:
///         Stream:
///           Type: Kinesis
///           Properties:
///             Stream: !GetAtt Events.Arn
///             StartingPosition: TRIM_HORIZON
///             BatchSize: 50
///             FunctionResponseTypes: [ReportBatchItemFailures]
///             BisectBatchOnFunctionError: true
///             MaximumRetryAttempts: 3
///             DestinationConfig:
///               OnFailure:
///                 Destination: !GetAtt Failed.Arn
/// "#;
/// let template = Template::parse(yaml, &TemplateOptions::default()).unwrap();
/// let source = &template.functions["Consumer"].kinesis_events[0];
/// assert_eq!(source.stream, "Events");
/// assert_eq!(source.starting_position, StartingPosition::TrimHorizon);
/// assert_eq!(source.batch_size, 50);
/// assert!(source.reports_batch_item_failures() && source.bisect_batch_on_function_error);
/// assert_eq!(source.maximum_retry_attempts(), Some(3));
/// assert_eq!(source.maximum_record_age(), None);
/// assert_eq!(source.on_failure_queue.as_deref(), Some("Failed"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KinesisEventSource {
    /// The event's name in `Events` (the mapping's logical id without the function's in front).
    pub name: String,
    /// Logical id of the `AWS::Kinesis::Stream` it reads (`Stream: !GetAtt S.Arn`).
    pub stream: String,
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

impl KinesisEventSource {
    /// Whether the function returns partial batch responses (`ReportBatchItemFailures`).
    pub fn reports_batch_item_failures(&self) -> bool {
        self.function_response_types
            .iter()
            .any(|t| t == REPORT_BATCH_ITEM_FAILURES)
    }

    /// Retries of a failing batch before it goes to the on-failure destination; `None`:
    /// without limit.
    pub fn maximum_retry_attempts(&self) -> Option<u32> {
        retry_limit(self.maximum_retry_attempts)
    }

    /// The age after which a record is no longer sent to the function; `None`: without limit.
    pub fn maximum_record_age(&self) -> Option<Duration> {
        age_limit(self.maximum_record_age_in_seconds)
    }
}

/// An HTTP API route of a function (SAM's `Events.X.Type: HttpApi`: a path and method of the
/// API's OpenAPI `Body` whose integration is the function).
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
    /// The route key, e.g. `GET /payments/{paymentId}`.
    pub name: String,
    /// `Method` (upper case; `ANY` when absent).
    pub method: String,
    /// `Path`, e.g. `/payments/{paymentId}` (`/{proxy+}` when absent: the API's `$default`).
    pub path: String,
    /// `Auth.Authorizer`: the route's authorizer (the API's `DefaultAuthorizer` when the event
    /// names none), `NONE` for a public route; `None`: no authorizer.
    pub authorizer: Option<String>,
    /// `Auth.AuthorizationScopes`: a token must carry at least one of them (in `scope` or
    /// `scp`), else API Gateway answers 403. Empty: no scope is checked (or the authorizer's
    /// own, when it has some).
    pub authorization_scopes: Vec<String>,
    /// The integration's `timeoutInMillis` (the event's `TimeoutInMillis`): API Gateway answers
    /// 503 past it. `None`: API Gateway's default (and maximum), 30 s.
    pub integration_timeout: Option<std::time::Duration>,
    /// The logical id of the HTTP API (`AWS::ApiGatewayV2::Api`) the route belongs to; `None`
    /// for a route made by hand.
    pub api: Option<String>,
    /// The route's throttling in its API's stage: the stage's `RouteSettings` for the route
    /// key, else its `DefaultRouteSettings` (SAM's `HttpApi` `DefaultRouteSettings` and
    /// `RouteSettings`). `None`: the stage sets none (only the account's limits apply, which
    /// are not emulated).
    pub throttling: Option<Throttling>,
}

/// The throttling of an HTTP API route: a token bucket of `burst_limit` tokens, refilled at
/// `rate_limit` a second; a request takes a token, and one that finds none is answered `429`
/// (<https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-throttling.html>).
///
/// ```
/// use local_aws::template::{Template, TemplateOptions, Throttling};
///
/// let template = Template::load_project(&TemplateOptions::default()).unwrap();
/// let routes = &template.functions["PaymentsApiFunction"].http_routes;
/// let create = routes.iter().find(|r| r.method == "POST").unwrap();
/// // ApiThrottlingRateLimit and ApiThrottlingBurstLimit, through DefaultRouteSettings.
/// assert_eq!(create.throttling, Some(Throttling { rate_limit: 50.0, burst_limit: 100 }));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Throttling {
    /// `ThrottlingRateLimit`: requests a second, steady state (the bucket's refill).
    pub rate_limit: f64,
    /// `ThrottlingBurstLimit`: the bucket's size, hence the most requests served at once.
    pub burst_limit: u32,
}

// The parser accepts finite, non-negative rates only: equality is total.
impl Eq for Throttling {}

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
            integration_timeout: None,
            api: None,
            throttling: None,
        }
    }

    /// Whether the route is public (`Auth.Authorizer: NONE`): no authorizer runs.
    pub fn is_public(&self) -> bool {
        self.authorizer.as_deref() == Some(NO_AUTHORIZER)
    }
}

/// `Auth.Authorizer` of a public route.
const NO_AUTHORIZER: &str = "NONE";

/// A JWT authorizer of an HTTP API (SAM's `Auth.Authorizers.X.JwtConfiguration`, as the API's
/// OpenAPI `Body` carries it).
///
/// ```
/// use local_aws::template::{Template, TemplateOptions};
///
/// let template = Template::load_project(&TemplateOptions::default()).unwrap();
/// let jwt = &template.jwt_authorizers["PaymentsJwt"];
/// assert_eq!(jwt.issuer, "https://issuer.example.com/");
/// assert_eq!(jwt.audiences, ["payments-api"]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JwtConfiguration {
    /// `issuer`: the exact `iss` a token must carry.
    pub issuer: String,
    /// `audience`: a token's `aud` (or `client_id`) must be one of these.
    pub audiences: Vec<String>,
}
