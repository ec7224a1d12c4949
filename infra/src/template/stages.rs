//! An HTTP API's stage (`AWS::ApiGatewayV2::Stage`, which SAM's `HttpApi` makes as
//! `<Api>ApiGatewayDefaultStage`): the throttling of its API's routes.
//!
//! A route's throttling is the stage's `RouteSettings` for its route key, each limit it leaves
//! out taken from `DefaultRouteSettings`
//! (<https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-throttling.html>:
//! route-level throttling overrides the stage's). A limit set nowhere is the account's
//! (10,000 requests a second, a burst of 5,000 per Region:
//! <https://docs.aws.amazon.com/apigateway/latest/developerguide/limits.html>), which applies
//! only when the other limit is set; a route with neither is not throttled locally.

use serde_yaml_ng::{Mapping, Value};

use super::{Ctx, Part, Result, Template, Throttling, invalid, key_str, parse_expr};

/// The account's steady-state rate per Region (requests a second).
const ACCOUNT_RATE_LIMIT: f64 = 10_000.0;
/// The account's burst per Region.
const ACCOUNT_BURST_LIMIT: u32 = 5_000;

/// One `ThrottlingRateLimit` / `ThrottlingBurstLimit` pair, either possibly absent.
#[derive(Clone, Copy, Debug, Default)]
struct Limits {
    rate: Option<f64>,
    burst: Option<u32>,
}

impl Limits {
    /// `self`, its missing limits taken from `fallback`.
    fn or(self, fallback: Limits) -> Limits {
        Limits {
            rate: self.rate.or(fallback.rate),
            burst: self.burst.or(fallback.burst),
        }
    }

    fn throttling(self) -> Option<Throttling> {
        if self.rate.is_none() && self.burst.is_none() {
            return None;
        }
        Some(Throttling {
            rate_limit: self.rate.unwrap_or(ACCOUNT_RATE_LIMIT),
            burst_limit: self.burst.unwrap_or(ACCOUNT_BURST_LIMIT),
        })
    }
}

impl Ctx<'_> {
    /// Reads stage `id` and sets the throttling of its API's routes.
    pub(super) fn http_api_stage(
        &self,
        template: &mut Template,
        id: &str,
        props: &Mapping,
    ) -> Result<()> {
        let at = format!("Resources.{id}.Properties");
        let api = match props.get("ApiId") {
            Some(v) => match parse_expr(v, &format!("{at}.ApiId"))?.as_slice() {
                [Part::Ref(api)] => api.clone(),
                _ => return Err(invalid(&format!("{at}.ApiId"), "not a !Ref of an HTTP API")),
            },
            None => return Err(invalid(&format!("{at}.ApiId"), "missing")),
        };
        let default = match props.get("DefaultRouteSettings") {
            Some(v) => self.limits(v, &format!("{at}.DefaultRouteSettings"))?,
            None => Limits::default(),
        };
        let mut by_route = Vec::new();
        if let Some(settings) = props.get("RouteSettings") {
            let at = format!("{at}.RouteSettings");
            let settings = settings
                .as_mapping()
                .ok_or_else(|| invalid(&at, "not a mapping"))?;
            for (key, value) in settings {
                let key = key_str(key, &at)?;
                by_route.push((key.to_owned(), self.limits(value, &format!("{at}.{key}"))?));
            }
        }
        let mut known: Vec<&str> = Vec::new();
        for function in template.functions.values_mut() {
            for route in &mut function.http_routes {
                if route.api.as_deref() != Some(api.as_str()) {
                    continue;
                }
                let own = by_route
                    .iter()
                    .find(|(key, _)| *key == route.name)
                    .map(|(_, limits)| *limits)
                    .unwrap_or_default();
                route.throttling = own.or(default).throttling();
            }
        }
        for function in template.functions.values() {
            known.extend(
                function
                    .http_routes
                    .iter()
                    .filter(|r| r.api.as_deref() == Some(api.as_str()))
                    .map(|r| r.name.as_str()),
            );
        }
        if let Some((key, _)) = by_route.iter().find(|(key, _)| !known.contains(&&**key)) {
            return Err(invalid(
                &format!("{at}.RouteSettings.{key}"),
                format!("{api} has no route {key:?}"),
            ));
        }
        Ok(())
    }

    /// `ThrottlingRateLimit` (a non-negative number) and `ThrottlingBurstLimit` (a whole
    /// number) of a route settings object.
    fn limits(&self, v: &Value, at: &str) -> Result<Limits> {
        let settings = v.as_mapping().ok_or_else(|| invalid(at, "not a mapping"))?;
        let rate = match self.opt_scalar(settings, "ThrottlingRateLimit", at)? {
            Some(text) => Some(
                text.trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|r| r.is_finite() && *r >= 0.0)
                    .ok_or_else(|| {
                        invalid(
                            &format!("{at}.ThrottlingRateLimit"),
                            format!("{text:?} is not a number of requests a second (0 or more)"),
                        )
                    })?,
            ),
            None => None,
        };
        Ok(Limits {
            rate,
            burst: self.opt_u32(settings, "ThrottlingBurstLimit", at)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::template::{Template, TemplateOptions, Throttling};

    fn api(stage: &str) -> String {
        format!(
            r#"
Resources:
  Api:
    Type: AWS::Serverless::HttpApi
    Properties:
{stage}
  F:
    Type: AWS::Serverless::Function
    Properties:
      Runtime: provided.al2023
      Handler: bootstrap
      CodeUri: .
      ReservedConcurrentExecutions: 3
      Events:
        Create: {{ Type: HttpApi, Properties: {{ ApiId: !Ref Api, Path: /p, Method: POST }} }}
        Read: {{ Type: HttpApi, Properties: {{ ApiId: !Ref Api, Path: /p, Method: GET }} }}
"#
        )
    }

    fn throttling(yaml: &str) -> Vec<(String, Option<Throttling>)> {
        let t = Template::parse(yaml, &TemplateOptions::default()).unwrap();
        let mut routes: Vec<_> = t.functions["F"]
            .http_routes
            .iter()
            .map(|r| (r.name.clone(), r.throttling))
            .collect();
        routes.sort_by(|a, b| a.0.cmp(&b.0));
        routes
    }

    #[test]
    fn route_settings_override_the_stage_s_defaults() {
        let yaml = api(
            r#"      DefaultRouteSettings: { ThrottlingRateLimit: 2.5, ThrottlingBurstLimit: 7 }
      RouteSettings:
        "POST /p": { ThrottlingBurstLimit: 1 }"#,
        );
        let t = Template::parse(&yaml, &TemplateOptions::default()).unwrap();
        assert_eq!(t.functions["F"].reserved_concurrent_executions, Some(3));
        assert_eq!(
            throttling(&yaml),
            [
                (
                    "GET /p".to_owned(),
                    Some(Throttling {
                        rate_limit: 2.5,
                        burst_limit: 7
                    })
                ),
                (
                    "POST /p".to_owned(),
                    Some(Throttling {
                        rate_limit: 2.5,
                        burst_limit: 1
                    })
                ),
            ]
        );
        // Only a burst: the account's rate.
        let only_burst = api("      DefaultRouteSettings: { ThrottlingBurstLimit: 4 }");
        assert_eq!(
            throttling(&only_burst)[0].1,
            Some(Throttling {
                rate_limit: 10_000.0,
                burst_limit: 4
            })
        );
        // No settings: no route throttling.
        let none = api("      Description: none");
        assert!(throttling(&none).iter().all(|(_, t)| t.is_none()));
    }

    #[test]
    fn refuses_bad_settings_by_name() {
        let err = |stage: &str| {
            Template::parse(&api(stage), &TemplateOptions::default())
                .unwrap_err()
                .to_string()
        };
        let e = err("      DefaultRouteSettings: { ThrottlingRateLimit: -1 }");
        assert!(
            e.contains("DefaultRouteSettings.ThrottlingRateLimit"),
            "{e}"
        );
        let e = err("      DefaultRouteSettings: { ThrottlingBurstLimit: lots }");
        assert!(
            e.contains("ThrottlingBurstLimit") && e.contains("lots"),
            "{e}"
        );
        let e = err("      RouteSettings: { \"PUT /nope\": { ThrottlingBurstLimit: 1 } }");
        assert!(e.contains("has no route \"PUT /nope\""), "{e}");
    }
}
