//! The [`lambda_http::Request`] a function behind API Gateway gets (payload format 2.0): what
//! `lambda_http::run` would build from the event API Gateway sends.

use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, header};
use lambda_http::aws_lambda_events::apigw::{
    ApiGatewayRequestAuthorizer, ApiGatewayRequestAuthorizerJwtDescription,
    ApiGatewayV2httpRequestContext, ApiGatewayV2httpRequestContextHttpDescription,
};
use lambda_http::aws_lambda_events::query_map::QueryMap;
use lambda_http::request::RequestContext;
use lambda_http::{Body, RequestExt};

use super::GatewayOptions;
use super::routes::Matched;

/// What the gateway knows about one request besides the HTTP request itself.
pub(crate) struct Invocation<'a> {
    pub(crate) options: &'a GatewayOptions,
    /// The gateway's own address (`x-forwarded-port`, and `Host` when the client sent none).
    pub(crate) gateway: SocketAddr,
    pub(crate) peer: SocketAddr,
    pub(crate) request_id: &'a str,
    pub(crate) received: SystemTime,
    pub(crate) route: Matched,
    /// The JWT authorizer's output, when the route has one.
    pub(crate) jwt: Option<ApiGatewayRequestAuthorizerJwtDescription>,
}

/// The body as API Gateway passes it: `Empty`, `Text` for textual content types (and no content
/// type), else `Binary` (base64 in the event).
pub(crate) fn body(bytes: Bytes, content_type: Option<&HeaderValue>) -> Body {
    if bytes.is_empty() {
        Body::Empty
    } else if is_text(content_type) {
        match String::from_utf8(bytes.to_vec()) {
            Ok(text) => Body::Text(text),
            Err(e) => Body::Binary(e.into_bytes()),
        }
    } else {
        Body::Binary(bytes.to_vec())
    }
}

/// About how many bytes of the invocation payload the body and headers take: the body as the
/// event carries it (binary ones base64-encoded) plus the header names and values. The rest of
/// the event (request context, JSON syntax) is not counted.
pub(crate) fn payload_size(body: &Body, headers: &HeaderMap) -> usize {
    let body = match body {
        Body::Text(t) => t.len(),
        Body::Binary(b) => b.len().div_ceil(3) * 4,
        _ => 0,
    };
    let headers: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    body + headers
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

/// Adds the `x-forwarded-*` headers API Gateway adds (unless the client set them) and joins
/// the cookies into one header, as payload 2.0 does.
pub(crate) fn add_gateway_headers(headers: &mut HeaderMap, peer: SocketAddr, gateway: SocketAddr) {
    let mut set_default = |name: &'static str, value: String| {
        if !headers.contains_key(name)
            && let Ok(v) = HeaderValue::from_str(&value)
        {
            headers.insert(name, v);
        }
    };
    set_default("x-forwarded-for", peer.ip().to_string());
    set_default("x-forwarded-port", gateway.port().to_string());
    set_default("x-forwarded-proto", "http".to_owned());
    let cookies: Vec<&str> = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    if cookies.len() > 1
        && let Ok(v) = HeaderValue::from_str(&cookies.join("; "))
    {
        headers.insert(header::COOKIE, v);
    }
}

/// The request the handler gets: absolute `http://` URI from `Host`, path and query
/// parameters, the API Gateway v2 request context (with the authorizer's claims), and a
/// Lambda context whose deadline is now + the function's timeout.
pub(crate) fn request(
    mut parts: http::request::Parts,
    body: Body,
    invocation: Invocation<'_>,
) -> lambda_http::Request {
    let options = invocation.options;
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query().unwrap_or_default().to_owned();
    let host = parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map_or_else(|| invocation.gateway.to_string(), str::to_owned);
    let with_query = |host: &str| {
        if query.is_empty() {
            format!("http://{host}{path}")
        } else {
            format!("http://{host}{path}?{query}")
        }
    };
    // The path and query come from a parsed URI: only a strange `Host` can fail.
    if let Ok(uri) = with_query(&host)
        .parse()
        .or_else(|_| with_query(&invocation.gateway.to_string()).parse())
    {
        parts.uri = uri;
    }

    let mut http_description = ApiGatewayV2httpRequestContextHttpDescription::default();
    http_description.method = parts.method.clone();
    http_description.path = Some(path.clone());
    http_description.protocol = Some(format!("{:?}", parts.version));
    http_description.source_ip = Some(invocation.peer.ip().to_string());
    http_description.user_agent = parts
        .headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut context = ApiGatewayV2httpRequestContext::default();
    context.route_key = Some(invocation.route.route_key);
    context.account_id = crate::arn::Arn::parse(&options.function_arn)
        .ok()
        .map(|a| a.account.to_owned());
    context.stage = Some("$default".to_owned());
    context.request_id = Some(invocation.request_id.to_owned());
    context.apiid = Some("local".to_owned());
    context.domain_name = Some(host);
    context.domain_prefix = Some("local".to_owned());
    context.time_epoch = invocation
        .received
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
        .try_into()
        .unwrap_or(i64::MAX);
    context.http = http_description;
    if let Some(jwt) = invocation.jwt {
        let mut authorizer = ApiGatewayRequestAuthorizer::default();
        authorizer.jwt = Some(jwt);
        context.authorizer = Some(authorizer);
    }

    lambda_http::Request::from_parts(parts, body)
        .with_raw_http_path(path)
        .with_query_string_parameters(query.parse::<QueryMap>().unwrap_or_default())
        .with_path_parameters(invocation.route.path_parameters)
        .with_request_context(RequestContext::ApiGatewayV2(context))
        .with_lambda_context(crate::runner::lambda_context(
            &options.function_name,
            &options.function_arn,
            options.memory_size,
            invocation.request_id,
            invocation.received + options.timeout,
        ))
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn binary_bodies_count_base64_encoded() {
        let headers = HeaderMap::new();
        assert_eq!(payload_size(&Body::Binary(vec![0; 3]), &headers), 4);
        assert_eq!(payload_size(&Body::Binary(vec![0; 4]), &headers), 8);
        assert_eq!(payload_size(&Body::Text("abc".into()), &headers), 3);
        let mut headers = HeaderMap::new();
        headers.insert("x-a", HeaderValue::from_static("12"));
        assert_eq!(payload_size(&Body::Empty, &headers), 5);
    }
}
