//! A local API Gateway (HTTP API, payload 2.0) / function URL in front of a `lambda_http`
//! handler.
//!
//! Each HTTP request becomes the [`lambda_http::Request`] the handler would get from
//! `lambda_http::run` behind API Gateway: method, absolute URI built from `Host` (scheme
//! `http`, from the `x-forwarded-proto` it adds), headers (plus the `x-forwarded-*` ones API
//! Gateway adds), body as `Empty`, `Text` (textual content types) or `Binary`, query string and
//! path parameters, the API Gateway v2 request context, and a Lambda
//! [`Context`](lambda_runtime::Context) whose deadline is now + the function's `Timeout`.
//! Requests are served concurrently, each on its own task.
//!
//! What API Gateway answers itself is answered the same way, as `{"message":"…"}` JSON: 404
//! `Not Found` for no route, 401 `Unauthorized` (with `www-authenticate`) when the
//! [JWT authorizer](JwtAuthorizer) refuses the token, 403 `Forbidden` when the token has none of
//! the route's authorization scopes, 413 `Request Too Long` over Lambda's
//! payload limit, 500 `Internal Server Error` when the function errors, panics or times out,
//! 503 `Service Unavailable` past the integration timeout, 429 `Too Many Requests` past the
//! route's throttling, and 500 when Lambda throttles the function (see **Limits** below). The real cause of a 5xx is logged
//! (`tracing`), as it would be in the function's and the API's logs. Every response carries an
//! `apigw-requestid` header, the request context's `requestId`.
//!
//! # Limits
//!
//! As on AWS, a burst is not served whole. A route's throttling in the stage
//! ([`HttpRoute::throttling`], from the template's `DefaultRouteSettings` / `RouteSettings`) is a
//! token bucket per route key: `ThrottlingBurstLimit` requests at once, then
//! `ThrottlingRateLimit` a second; a request that finds the bucket empty is answered `429`
//! `{"message":"Too Many Requests"}` before the authorizer or the function runs. A function's
//! `ReservedConcurrentExecutions` ([`GatewayOptions::reserved_concurrency`]) bounds the
//! invocations in progress: one more is throttled by Lambda (`TooManyRequestsException`,
//! reason `ReservedFunctionConcurrentInvocationLimitExceeded`), which API Gateway answers `500`
//! `{"message":"Internal Server Error"}`: it does not retry, and treats every rejected
//! invocation as an internal error
//! (<https://docs.aws.amazon.com/lambda/latest/dg/services-apigateway-errors.html>). The
//! function never runs for either answer, so a client may send the same request again.
//! [`GatewayOptions::without_limits`] turns both off.
//!
//! # JWT authorizer
//!
//! With [`GatewayOptions::with_jwt_authorizer`], a request reaches the function only with a
//! token that passes API Gateway's checks (issuer, audience, times, algorithm, and the matched
//! route's `AuthorizationScopes` from the template: at least one of them in the token's `scope`
//! or `scp`), signed by a key of the authorizer's JWKS: [`LocalIssuer::local`]'s unless
//! [`JwtAuthorizer::with_keys`] says otherwise. A route with `Authorizer: NONE` runs no
//! authorizer. Mint tokens with [`test_token`] or [`signed_token`] in the process, or from
//! [`serve_issuer`]'s `/token` in another one.
//!
//! ## Claims in the request context
//!
//! The token's claims reach the handler in `requestContext.authorizer.jwt.claims`, all as
//! strings, written as API Gateway writes them: strings as they are, numbers and booleans as
//! text (`1767225600`, `true`), arrays in brackets, space-separated (`[admin ops]`), objects as
//! `map[key:value]` (undocumented; inferred), `null` claims left out. `scopes` is `None` unless
//! the route has authorization scopes ([`HttpRoute::authorization_scopes`], or the
//! authorizer's own: [`JwtAuthorizer::with_authorization_scopes`]), as on AWS.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use std::time::Duration;
//! use lambda_http::request::RequestContext;
//! use lambda_http::{Body, Error, Request, RequestExt, Response};
//! use local_aws::gateway::{Gateway, GatewayOptions, JwtAuthorizer, test_token};
//!
//! let issuer = "https://issuer.example.com/";
//! let gateway = Gateway::serve(
//!     "127.0.0.1:0".parse().unwrap(),
//!     GatewayOptions::new("hello", Duration::from_secs(3))
//!         .with_jwt_authorizer(JwtAuthorizer::new(issuer, ["hello-api"])),
//!     |request: Request| async move {
//!         let who = match request.request_context() {
//!             RequestContext::ApiGatewayV2(ctx) => ctx.authorizer.and_then(|a| a.jwt)
//!                 .and_then(|jwt| jwt.claims.get("sub").cloned()),
//!             _ => None,
//!         };
//!         Ok::<_, Error>(Response::new(Body::from(format!("hello {}", who.unwrap_or_default()))))
//!     },
//! )
//! .await
//! .unwrap();
//! let token = test_token(issuer, "hello-api", "alice", &[], Duration::from_secs(300));
//! println!("curl -H 'Authorization: Bearer {token}' {}/", gateway.url());
//! gateway.shutdown().await;
//! # });
//! ```

mod answer;
mod claims;
mod event;
mod invoke;
mod issuer;
mod jwt;
mod routes;
mod throttle;
mod token;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderValue, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use lambda_http::IntoResponse;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use issuer::{IssuerError, IssuerServer, LocalIssuer, serve as serve_issuer};
pub use jwt::{JwtAuthorizer, JwtError};
pub use token::{signed_token, test_token};

use answer::Answer;
use invoke::Limits;
use throttle::Throttles;

use crate::template::{Function, HttpRoute};

/// Lambda's limit on a synchronous invocation's request payload: the body as the event carries
/// it (binary bodies base64-encoded) and the headers may not take more.
pub const MAX_BODY_BYTES: usize = 6 * 1024 * 1024;

/// API Gateway's (HTTP API) maximum integration timeout, and the default.
pub const INTEGRATION_TIMEOUT: Duration = Duration::from_secs(30);

/// API Gateway's own limit on a request body (10 MB); the gateway stops reading there.
const MAX_REQUEST_BYTES: usize = 10 * 1024 * 1024;

/// What the gateway needs to know about the function behind it.
///
/// ```
/// use local_aws::gateway::{GatewayOptions, JwtAuthorizer};
/// use local_aws::template::{Template, TemplateOptions};
///
/// let template = Template::load_project(&TemplateOptions::default()).unwrap();
/// let options = GatewayOptions::for_function(&template.functions["PaymentsApiFunction"])
///     .with_jwt_authorizer(JwtAuthorizer::from_parameters(&template, "JwtIssuer", "JwtAudience").unwrap());
/// assert_eq!(options.timeout.as_secs(), 20);
/// // POST /payments, and ANY /payments as the fallback (405); the reads are payments-reader's.
/// assert_eq!(options.routes.len(), 2);
/// let options = options.with_function(GatewayOptions::for_function(&template.functions["PaymentsReaderFunction"]));
/// assert_eq!(options.integrations[0].timeout.as_secs(), 25);
/// let url_options = options.function_url(); // every path and method, like a function URL
/// assert!(url_options.routes.is_empty());
/// ```
#[derive(Clone, Debug)]
pub struct GatewayOptions {
    /// `FunctionName`.
    pub function_name: String,
    /// The function's ARN in the Lambda context.
    pub function_arn: String,
    /// `MemorySize` in the Lambda context.
    pub memory_size: u32,
    /// `ReservedConcurrentExecutions`: the most invocations in progress at once; one more is
    /// throttled (500). `None`: no limit.
    pub reserved_concurrency: Option<u32>,
    /// The function `Timeout`: each request's deadline.
    pub timeout: Duration,
    /// API Gateway's integration timeout of routes without their own
    /// ([`HttpRoute::integration_timeout`], the template's `TimeoutInMillis`):
    /// [`INTEGRATION_TIMEOUT`] by default. Past it, 503.
    pub integration_timeout: Duration,
    /// HTTP API routes; a request matching none gets API Gateway's 404. Empty: every request
    /// goes to the function (a function URL, or a `$default` route).
    pub routes: Vec<HttpRoute>,
    /// The routes' JWT authorizer: without a valid token, a request that matches a route gets
    /// 401 and does not reach the function. `None`: no authorization.
    pub authorizer: Option<JwtAuthorizer>,
    /// Other functions of the same API, each behind its own routes (as an HTTP API integrates
    /// several functions): their name, ARN, memory, timeout and routes are used, not their
    /// authorizer. A request reaches the function of the most specific route of them all, with
    /// that function's Lambda context; the handler tells them apart by
    /// `request.lambda_context_ref()`'s function name.
    pub integrations: Vec<GatewayOptions>,
}

impl GatewayOptions {
    /// A function URL for `function_name` with `timeout` (128 MB, moto's account).
    pub fn new(function_name: &str, timeout: Duration) -> Self {
        Self {
            function_name: function_name.to_owned(),
            function_arn: crate::arn::function("aws", "us-east-1", "123456789012", function_name),
            memory_size: 128,
            reserved_concurrency: None,
            timeout,
            integration_timeout: INTEGRATION_TIMEOUT,
            routes: Vec::new(),
            authorizer: None,
            integrations: Vec::new(),
        }
    }

    /// The function's name, timeout, memory, reserved concurrency and HTTP API routes (with
    /// their throttling) from the template (not its authorizer: add it with
    /// [`with_jwt_authorizer`](Self::with_jwt_authorizer)).
    pub fn for_function(function: &Function) -> Self {
        Self {
            memory_size: function.memory_size,
            reserved_concurrency: function.reserved_concurrent_executions,
            routes: function.http_routes.clone(),
            ..Self::new(&function.name, function.timeout())
        }
    }

    /// Sets the function ARN of the Lambda context (e.g. from
    /// [`Provisioned::function_arn`](crate::provision::Provisioned::function_arn)).
    pub fn with_function_arn(mut self, arn: impl Into<String>) -> Self {
        self.function_arn = arn.into();
        self
    }

    /// Puts `authorizer` in front of the function (see [`JwtAuthorizer`]).
    pub fn with_jwt_authorizer(mut self, authorizer: JwtAuthorizer) -> Self {
        self.authorizer = Some(authorizer);
        self
    }

    /// Adds the routes of another function of the API (see
    /// [`integrations`](Self::integrations)), e.g. `GatewayOptions::for_function(&reader)`.
    pub fn with_function(mut self, other: GatewayOptions) -> Self {
        self.integrations.push(other);
        self
    }

    /// Every route with the function behind it: this one's, then each integration's.
    fn all_routes(&self) -> (Vec<HttpRoute>, Vec<&GatewayOptions>) {
        let mut routes = Vec::new();
        let mut targets = Vec::new();
        for options in std::iter::once(self).chain(&self.integrations) {
            for route in &options.routes {
                routes.push(route.clone());
                targets.push(options);
            }
        }
        (routes, targets)
    }

    /// Without routes: every request goes to the function, like its function URL. (An
    /// authorizer, if set, stays: a `$default` route with an authorizer.)
    pub fn function_url(mut self) -> Self {
        self.routes.clear();
        self.integrations.clear();
        self
    }

    /// Without the routes' throttling and the functions' reserved concurrency (this one's and
    /// every integration's): every request that passes the authorizer reaches its function,
    /// however many arrive at once.
    pub fn without_limits(mut self) -> Self {
        self.reserved_concurrency = None;
        for route in &mut self.routes {
            route.throttling = None;
        }
        self.integrations = self
            .integrations
            .into_iter()
            .map(Self::without_limits)
            .collect();
        self
    }

    /// Sets the routes.
    pub fn routes(mut self, routes: Vec<HttpRoute>) -> Self {
        self.routes = routes;
        self
    }
}

/// A running gateway. Dropping it stops accepting connections; [`shutdown`](Self::shutdown)
/// also waits for the requests in progress.
pub struct Gateway {
    addr: SocketAddr,
    shutdown: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Gateway {
    /// Binds `addr` (port 0: any free port) and serves `handler` until shutdown.
    pub async fn serve<H, Fut, R, E>(
        addr: SocketAddr,
        options: GatewayOptions,
        handler: H,
    ) -> std::io::Result<Self>
    where
        H: Fn(lambda_http::Request) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, E>> + Send + 'static,
        R: IntoResponse + Send + 'static,
        E: std::fmt::Display + Send + 'static,
    {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shutdown = CancellationToken::new();
        let state = Arc::new(State {
            throttles: Throttles::new(&options),
            options,
            handler,
            addr,
        });
        let task = tokio::spawn(accept(listener, state, shutdown.clone()));
        tracing::info!(%addr, "gateway listening");
        Ok(Self {
            addr,
            shutdown,
            task: Some(task),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting, lets the requests in progress finish (at most 30 s), and returns.
    pub async fn shutdown(mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

struct State<H> {
    options: GatewayOptions,
    throttles: Throttles,
    handler: H,
    addr: SocketAddr,
}

async fn accept<H, Fut, R, E>(
    listener: TcpListener,
    state: Arc<State<H>>,
    shutdown: CancellationToken,
) where
    H: Fn(lambda_http::Request) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, E>> + Send + 'static,
    R: IntoResponse + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let graceful = GracefulShutdown::new();
    let http = hyper::server::conn::http1::Builder::new();
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!("gateway accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let state = Arc::clone(&state);
        let service = hyper::service::service_fn(move |request| {
            let state = Arc::clone(&state);
            async move { Ok::<_, Infallible>(handle(&state, request, peer).await) }
        });
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(%peer, "gateway connection: {e}");
            }
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(Duration::from_secs(30)) => {
            tracing::warn!("gateway: requests still running 30 s after shutdown; dropping them");
        }
    }
}

/// One request, in API Gateway's order: route, authorizer, payload limit, integration.
async fn handle<H, Fut, R, E>(
    state: &State<H>,
    request: http::Request<Incoming>,
    peer: SocketAddr,
) -> http::Response<Full<Bytes>>
where
    H: Fn(lambda_http::Request) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, E>> + Send + 'static,
    R: IntoResponse + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let request_id = uuid::Uuid::new_v4().to_string();
    let mut response = match invoke_route(state, request, peer, &request_id).await {
        Ok(response) => response,
        Err(answer) => answer.into_response(),
    };
    if let Ok(id) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert("apigw-requestid", id);
    }
    response
}

async fn invoke_route<H, Fut, R, E>(
    state: &State<H>,
    request: http::Request<Incoming>,
    peer: SocketAddr,
    request_id: &str,
) -> Result<http::Response<Full<Bytes>>, Answer>
where
    H: Fn(lambda_http::Request) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, E>> + Send + 'static,
    R: IntoResponse + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let options = &state.options;
    let received = SystemTime::now();
    let (mut parts, body) = request.into_parts();
    let (routes, targets) = options.all_routes();
    let route = routes::select(&routes, &parts.method, parts.uri.path()).ok_or(Answer::NotFound)?;
    let target = targets.get(route.index).copied().unwrap_or(options);
    if !state.throttles.admit(&route.route_key, route.throttling) {
        tracing::info!(request_id, route = %route.route_key, "route throttled: 429");
        return Err(Answer::TooManyRequests);
    }

    let jwt = match &options.authorizer {
        Some(_) if route.public => None,
        None => None,
        Some(authorizer) => {
            let authorization = parts
                .headers
                .get(header::AUTHORIZATION)
                .map(|v| v.to_str().unwrap_or_default());
            match authorizer.authorize_route_at(
                authorization,
                &route.authorization_scopes,
                received,
            ) {
                Ok(jwt) => Some(jwt),
                Err(e) => {
                    tracing::info!(request_id, route = %route.route_key, reason = %e, "JWT authorizer refused the request");
                    return Err(Answer::Refused(e));
                }
            }
        }
    };

    let bytes = match Limited::new(body, MAX_REQUEST_BYTES).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            tracing::warn!(request_id, "request body unreadable or over 10 MB: {e}");
            return Err(Answer::RequestTooLong);
        }
    };
    let body = event::body(bytes, parts.headers.get(header::CONTENT_TYPE));
    event::add_gateway_headers(&mut parts.headers, peer, state.addr);
    let size = event::payload_size(&body, &parts.headers);
    if size > MAX_BODY_BYTES {
        tracing::warn!(
            request_id,
            size,
            "RequestEntityTooLargeException: the invocation payload is over Lambda's {MAX_BODY_BYTES} bytes"
        );
        return Err(Answer::RequestTooLong);
    }

    let integration_timeout = route.integration_timeout;
    let request = event::request(
        parts,
        body,
        event::Invocation {
            options: target,
            gateway: state.addr,
            peer,
            request_id,
            received,
            route,
            jwt,
        },
    );
    let limits = Limits {
        function: target.timeout,
        integration: integration_timeout.unwrap_or(options.integration_timeout),
    };
    let Ok(unit) = state.throttles.invocation(&target.function_name) else {
        tracing::error!(
            function = %target.function_name,
            request_id,
            "TooManyRequestsException (ReservedFunctionConcurrentInvocationLimitExceeded): \
             the function is at its reserved concurrency; throttled: 500"
        );
        return Err(Answer::FunctionThrottled);
    };
    invoke::invoke(
        &target.function_name,
        request_id,
        limits,
        (state.handler)(request),
        unit,
    )
    .await
}
