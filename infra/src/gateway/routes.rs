//! HTTP API route selection: which route (if any) a request matches, and its path parameters.

use std::collections::HashMap;

use http::Method;

use crate::template::{HttpRoute, Throttling};

/// The route key and path parameters of a request, as API Gateway puts them in the request
/// context.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Matched {
    /// `METHOD /path/{param}`, or `$default` without routes.
    pub(crate) route_key: String,
    /// `{name}` → segment, `{name+}` → the rest of the path.
    pub(crate) path_parameters: HashMap<String, String>,
    /// `Auth.Authorizer: NONE`: no authorizer runs.
    pub(crate) public: bool,
    /// The route's `AuthorizationScopes` (empty: the authorizer's own, if any).
    pub(crate) authorization_scopes: Vec<String>,
    /// The route's integration timeout (`None`: the gateway's default).
    pub(crate) integration_timeout: Option<std::time::Duration>,
    /// The route's throttling in the stage (`None`: not throttled).
    pub(crate) throttling: Option<Throttling>,
    /// The route's position in the routes given to [`select`].
    pub(crate) index: usize,
}

/// The route for `method path`: `$default` when `routes` is empty (a function URL), `None` when
/// no route matches (API Gateway's 404).
pub(crate) fn select(routes: &[HttpRoute], method: &Method, path: &str) -> Option<Matched> {
    if routes.is_empty() {
        return Some(Matched {
            route_key: "$default".to_owned(),
            path_parameters: HashMap::new(),
            public: false,
            authorization_scopes: Vec::new(),
            integration_timeout: None,
            throttling: None,
            index: 0,
        });
    }
    route(routes, method, path).map(|(index, r, path_parameters)| Matched {
        route_key: format!("{} {}", r.method, r.path),
        path_parameters,
        public: r.is_public(),
        authorization_scopes: r.authorization_scopes.clone(),
        integration_timeout: r.integration_timeout,
        throttling: r.throttling,
        index,
    })
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
) -> Option<(usize, &'a HttpRoute, HashMap<String, String>)> {
    routes
        .iter()
        .enumerate()
        .filter(|(_, r)| r.method == "ANY" || r.method == method.as_str())
        .filter_map(|(i, r)| match_route(&r.path, path).map(|p| (i, r, p)))
        .max_by_key(|(_, r, _)| {
            let literal = r.path.split('/').filter(|s| !s.starts_with('{')).count();
            let greedy = r.path.contains("+}");
            (!greedy, literal, r.method != "ANY")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(method: &str, path: &str) -> HttpRoute {
        HttpRoute::new(path, method, path)
    }

    #[test]
    fn routes_like_http_api() {
        let routes = [
            r("POST", "/payments"),
            r("GET", "/payments/{paymentId}"),
            r("ANY", "/{proxy+}"),
        ];
        let got = select(&routes, &Method::GET, "/payments/p-1").unwrap();
        assert_eq!(got.route_key, "GET /payments/{paymentId}");
        assert_eq!(got.path_parameters["paymentId"], "p-1");
        assert_eq!(
            select(&routes, &Method::POST, "/payments")
                .unwrap()
                .route_key,
            "POST /payments"
        );
        let got = select(&routes, &Method::DELETE, "/payments/p-1").unwrap();
        assert_eq!(got.route_key, "ANY /{proxy+}");
        assert_eq!(got.path_parameters["proxy"], "payments/p-1");
        assert!(select(&routes[..2], &Method::GET, "/payments/p-1/x").is_none());
        assert!(select(&routes[..2], &Method::GET, "/payments/").is_none());
        assert!(select(&routes[..2], &Method::PUT, "/payments").is_none());
        assert_eq!(
            select(&[], &Method::PUT, "/anything").unwrap().route_key,
            "$default"
        );
    }
}
