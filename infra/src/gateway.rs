//! A local API Gateway (HTTP API, payload 2.0) / function URL in front of a `lambda_http`
//! handler.
//!
//! Each HTTP request becomes the [`lambda_http::Request`] the handler would get from
//! `lambda_http::run` behind API Gateway: method, absolute URI built from `Host` (scheme
//! `http`, from the `x-forwarded-proto` it adds),
//! headers (plus the `x-forwarded-*` ones API Gateway adds), body as `Empty`, `Text` (textual
//! content types) or `Binary`, query string and path parameters, the API Gateway v2 request
//! context, and a Lambda [`Context`](lambda_runtime::Context) whose deadline is now + the
//! function's `Timeout`. Requests are served concurrently, each on its own task: a panic or an
//! error becomes a 500 with an `application/problem+json` body, running past the timeout too.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use std::time::Duration;
//! use lambda_http::{Body, Error, Request, RequestExt, Response};
//! use local_aws::gateway::{Gateway, GatewayOptions};
//!
//! let gateway = Gateway::serve(
//!     "127.0.0.1:0".parse().unwrap(),
//!     GatewayOptions::new("hello", Duration::from_secs(3)),
//!     |request: Request| async move {
//!         let who = request.query_string_parameters().first("name").unwrap_or("world").to_owned();
//!         Ok::<_, Error>(Response::new(Body::from(format!("hello {who}"))))
//!     },
//! )
//! .await
//! .unwrap();
//! println!("listening on {}", gateway.url());
//! gateway.shutdown().await;
//! # });
//! ```

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderValue, Method, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use lambda_http::aws_lambda_events::apigw::{
    ApiGatewayV2httpRequestContext, ApiGatewayV2httpRequestContextHttpDescription,
};
use lambda_http::request::RequestContext;
use lambda_http::{Body, IntoResponse, RequestExt};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::template::{Function, HttpRoute};

/// Lambda's limit on a synchronous invocation's request payload.
pub const MAX_BODY_BYTES: usize = 6 * 1024 * 1024;

/// What the gateway needs to know about the function behind it.
///
/// ```
/// use local_aws::gateway::GatewayOptions;
/// use local_aws::template::{Template, TemplateOptions};
///
/// let template = Template::load_project(&TemplateOptions::default()).unwrap();
/// let options = GatewayOptions::for_function(&template.functions["PaymentsApiFunction"]);
/// assert_eq!(options.timeout.as_secs(), 10);
/// assert_eq!(options.routes.len(), 2); // POST /payments, GET /payments/{paymentId}
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
    /// The function `Timeout`: each request's deadline.
    pub timeout: Duration,
    /// HTTP API routes; a request matching none gets API Gateway's 404. Empty: every request
    /// goes to the function (a function URL, or a `$default` route).
    pub routes: Vec<HttpRoute>,
}

impl GatewayOptions {
    /// A function URL for `function_name` with `timeout` (128 MB, moto's account).
    pub fn new(function_name: &str, timeout: Duration) -> Self {
        Self {
            function_name: function_name.to_owned(),
            function_arn: format!("arn:aws:lambda:us-east-1:123456789012:function:{function_name}"),
            memory_size: 128,
            timeout,
            routes: Vec::new(),
        }
    }

    /// The function's name, timeout, memory and HTTP API routes from the template.
    pub fn for_function(function: &Function) -> Self {
        Self {
            memory_size: function.memory_size,
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

    /// Without routes: every request goes to the function, like its function URL.
    pub fn function_url(mut self) -> Self {
        self.routes.clear();
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

fn problem(status: StatusCode, detail: &str) -> http::Response<Full<Bytes>> {
    let body = serde_json::json!({
        "type": "about:blank",
        "title": status.canonical_reason().unwrap_or("Error"),
        "status": status.as_u16(),
        "detail": detail,
    });
    http::Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/problem+json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("static parts are valid")
}

/// API Gateway HTTP API's answer when no route matches.
fn not_found() -> http::Response<Full<Bytes>> {
    http::Response::builder()
        .status(StatusCode::NOT_FOUND)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from_static(br#"{"message":"Not Found"}"#)))
        .expect("static parts are valid")
}

/// Whether API Gateway passes a body of this content type as text (else base64, i.e. binary).
fn is_text(content_type: Option<&HeaderValue>) -> bool {
    let Some(ct) = content_type.and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let ct = ct
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    ct.starts_with("text/")
        || ct.ends_with("+json")
        || ct.ends_with("+xml")
        || matches!(
            ct.as_str(),
            "application/json"
                | "application/javascript"
                | "application/xml"
                | "application/x-www-form-urlencoded"
                | "application/graphql"
        )
}

/// Matches `path` against a route template (`{name}` one segment, `{name+}` the rest).
fn match_route(template: &str, path: &str) -> Option<HashMap<String, String>> {
    let mut params = HashMap::new();
    let mut segments = path.trim_start_matches('/').split('/');
    let parts: Vec<&str> = template.trim_start_matches('/').split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        if let Some(name) = part.strip_prefix('{').and_then(|p| p.strip_suffix("+}")) {
            let rest: Vec<&str> = segments.by_ref().collect();
            if i + 1 != parts.len() || rest.is_empty() || rest == [""] {
                return None;
            }
            params.insert(name.to_owned(), rest.join("/"));
            return Some(params);
        }
        let segment = segments.next()?;
        if let Some(name) = part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
            if segment.is_empty() {
                return None;
            }
            params.insert(name.to_owned(), segment.to_owned());
        } else if *part != segment {
            return None;
        }
    }
    segments.next().is_none().then_some(params)
}

/// The most specific route for the request (literal segments beat parameters beat greedy
/// parameters; an exact method beats `ANY`), with its path parameters.
fn route<'a>(
    routes: &'a [HttpRoute],
    method: &Method,
    path: &str,
) -> Option<(&'a HttpRoute, HashMap<String, String>)> {
    routes
        .iter()
        .filter(|r| r.method == "ANY" || r.method == method.as_str())
        .filter_map(|r| match_route(&r.path, path).map(|p| (r, p)))
        .max_by_key(|(r, _)| {
            let literal = r.path.split('/').filter(|s| !s.starts_with('{')).count();
            let greedy = r.path.contains("+}");
            (!greedy, literal, r.method != "ANY")
        })
}

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
    let options = &state.options;
    let (mut parts, body) = request.into_parts();
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query().unwrap_or_default().to_owned();

    let (route_key, path_parameters) = if options.routes.is_empty() {
        ("$default".to_owned(), HashMap::new())
    } else {
        match route(&options.routes, &parts.method, &path) {
            Some((r, params)) => (format!("{} {}", r.method, r.path), params),
            None => return not_found(),
        }
    };

    let bytes = match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            return problem(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!(
                    "request body over Lambda's {MAX_BODY_BYTES}-byte limit, or unreadable: {e}"
                ),
            );
        }
    };
    let body = if bytes.is_empty() {
        Body::Empty
    } else if is_text(parts.headers.get(http::header::CONTENT_TYPE)) {
        match String::from_utf8(bytes.to_vec()) {
            Ok(text) => Body::Text(text),
            Err(e) => Body::Binary(e.into_bytes()),
        }
    } else {
        Body::Binary(bytes.to_vec())
    };

    // What API Gateway adds, unless the client set it.
    let headers = &mut parts.headers;
    let set_default = |headers: &mut http::HeaderMap, name: &'static str, value: String| {
        if !headers.contains_key(name)
            && let Ok(v) = HeaderValue::from_str(&value)
        {
            headers.insert(name, v);
        }
    };
    set_default(headers, "x-forwarded-for", peer.ip().to_string());
    set_default(headers, "x-forwarded-port", state.addr.port().to_string());
    set_default(headers, "x-forwarded-proto", "http".to_owned());
    // Payload 2.0 joins the cookies into one header.
    let cookies: Vec<String> = headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_owned))
        .collect();
    if cookies.len() > 1
        && let Ok(v) = HeaderValue::from_str(&cookies.join("; "))
    {
        headers.insert(http::header::COOKIE, v);
    }
    let host = headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .map_or_else(|| state.addr.to_string(), str::to_owned);
    let uri = if query.is_empty() {
        format!("http://{host}{path}")
    } else {
        format!("http://{host}{path}?{query}")
    };
    match uri.parse() {
        Ok(uri) => parts.uri = uri,
        Err(e) => return problem(StatusCode::BAD_REQUEST, &format!("bad URI {uri}: {e}")),
    }

    let request_id = uuid::Uuid::new_v4().to_string();
    let now = SystemTime::now();
    let mut http_description = ApiGatewayV2httpRequestContextHttpDescription::default();
    http_description.method = parts.method.clone();
    http_description.path = Some(path.clone());
    http_description.protocol = Some(format!("{:?}", parts.version));
    http_description.source_ip = Some(peer.ip().to_string());
    http_description.user_agent = parts
        .headers
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut context = ApiGatewayV2httpRequestContext::default();
    context.route_key = Some(route_key);
    context.account_id = options.function_arn.split(':').nth(4).map(str::to_owned);
    context.stage = Some("$default".to_owned());
    context.request_id = Some(request_id.clone());
    context.apiid = Some("local".to_owned());
    context.domain_name = Some(host);
    context.domain_prefix = Some("local".to_owned());
    context.time_epoch = now
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
        .try_into()
        .unwrap_or(i64::MAX);
    context.http = http_description;

    let request = lambda_http::Request::from_parts(parts, body)
        .with_raw_http_path(path)
        .with_query_string_parameters(
            query
                .parse::<lambda_http::aws_lambda_events::query_map::QueryMap>()
                .unwrap_or_default(),
        )
        .with_path_parameters(path_parameters)
        .with_request_context(RequestContext::ApiGatewayV2(context))
        .with_lambda_context(crate::runner::lambda_context(
            &options.function_name,
            &options.function_arn,
            options.memory_size,
            &request_id,
            now + options.timeout,
        ));

    let future = (state.handler)(request);
    let mut task = tokio::spawn(async move {
        match future.await {
            Ok(response) => Ok(response.into_response().await),
            Err(e) => Err(e.to_string()),
        }
    });
    let outcome = tokio::time::timeout(options.timeout, &mut task).await;
    let response = match outcome {
        Err(_) => {
            task.abort();
            return problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!(
                    "Task timed out after {:.2} seconds",
                    options.timeout.as_secs_f64()
                ),
            );
        }
        Ok(Err(join_error)) => {
            return problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("the function panicked: {join_error}"),
            );
        }
        Ok(Ok(Err(e))) => return problem(StatusCode::INTERNAL_SERVER_ERROR, &e),
        Ok(Ok(Ok(response))) => response,
    };
    let (parts, body) = response.into_parts();
    let bytes = match body {
        Body::Empty => Bytes::new(),
        Body::Text(t) => Bytes::from(t),
        Body::Binary(b) => Bytes::from(b),
        _ => Bytes::new(),
    };
    http::Response::from_parts(parts, Full::new(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(method: &str, path: &str) -> HttpRoute {
        HttpRoute {
            name: path.into(),
            method: method.into(),
            path: path.into(),
        }
    }

    #[test]
    fn routes_like_http_api() {
        let routes = [
            r("POST", "/payments"),
            r("GET", "/payments/{paymentId}"),
            r("ANY", "/{proxy+}"),
        ];
        let (got, params) = route(&routes, &Method::GET, "/payments/p-1").unwrap();
        assert_eq!(got.path, "/payments/{paymentId}");
        assert_eq!(params["paymentId"], "p-1");
        assert_eq!(
            route(&routes, &Method::POST, "/payments").unwrap().0.method,
            "POST"
        );
        let (got, params) = route(&routes, &Method::DELETE, "/payments/p-1").unwrap();
        assert_eq!(got.path, "/{proxy+}");
        assert_eq!(params["proxy"], "payments/p-1");
        assert!(route(&routes[..2], &Method::GET, "/payments/p-1/x").is_none());
        assert!(route(&routes[..2], &Method::GET, "/payments/").is_none());
        assert!(route(&routes[..2], &Method::PUT, "/payments").is_none());
    }

    #[test]
    fn text_content_types() {
        let t = |v: &str| is_text(Some(&HeaderValue::from_str(v).unwrap()));
        assert!(t("application/json; charset=utf-8"));
        assert!(t("text/plain"));
        assert!(t("application/problem+json"));
        assert!(!t("application/octet-stream"));
        assert!(!t("image/png"));
        assert!(is_text(None));
    }
}
