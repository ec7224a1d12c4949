//! Who is calling: the verified claims that API Gateway's JWT authorizer puts in the request
//! context (`requestContext.authorizer.jwt.claims`). The function trusts them because the
//! authorizer checked the token's signature, issuer, audience and expiry before invoking it; a
//! request without claims (an API deployed without the authorizer) is refused.

use lambda_http::request::RequestContext;
use lambda_http::{Request, RequestExt};
use lambda_idempotency::publish::MessageGroupId;

use crate::problem::Problem;

/// The caller of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's subject (`sub`): idempotency keys belong to it.
    pub id: String,
    /// The account it may charge and read (the claim named by `ACCOUNT_CLAIM`).
    pub account: MessageGroupId,
}

impl Caller {
    /// The caller of `request`, with its account from the claim `account_claim`.
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use lambda_http::aws_lambda_events::apigw::{
    ///     ApiGatewayRequestAuthorizer, ApiGatewayRequestAuthorizerJwtDescription,
    ///     ApiGatewayV2httpRequestContext,
    /// };
    /// use lambda_http::request::RequestContext;
    /// use lambda_http::{Body, Request, RequestExt};
    /// use payments_api::identity::Caller;
    ///
    /// let mut jwt = ApiGatewayRequestAuthorizerJwtDescription::default();
    /// jwt.claims = HashMap::from([("sub".to_owned(), "user-1".to_owned()), ("account".to_owned(), "acct-9".to_owned())]);
    /// let mut authorizer = ApiGatewayRequestAuthorizer::default();
    /// authorizer.jwt = Some(jwt);
    /// let mut context = ApiGatewayV2httpRequestContext::default();
    /// context.authorizer = Some(authorizer);
    /// let request = Request::new(Body::Empty).with_request_context(RequestContext::ApiGatewayV2(context));
    ///
    /// let caller = Caller::of(&request, "account").unwrap();
    /// assert_eq!((caller.id.as_str(), caller.account.as_str()), ("user-1", "acct-9"));
    /// assert_eq!(Caller::of(&request, "sub").unwrap().account.as_str(), "user-1");
    /// assert_eq!(Caller::of(&Request::new(Body::Empty), "sub").unwrap_err().status, 401);
    /// ```
    pub fn of(request: &Request, account_claim: &str) -> Result<Self, Problem> {
        let claims = match request.request_context_ref() {
            Some(RequestContext::ApiGatewayV2(context)) => context
                .authorizer
                .as_ref()
                .and_then(|a| a.jwt.as_ref())
                .map(|jwt| &jwt.claims),
            _ => None,
        };
        let Some(claims) = claims else {
            return Err(Problem::unauthorized(
                "the request carries no verified identity (a JWT authorizer must run first)",
            ));
        };
        let claim = |name: &str| claims.get(name).filter(|v| !v.is_empty());
        let id =
            claim("sub").ok_or_else(|| Problem::unauthorized("the token has no `sub` claim"))?;
        let account = claim(account_claim).ok_or_else(|| {
            Problem::forbidden(format!(
                "the token has no `{account_claim}` claim naming the caller's account"
            ))
        })?;
        let account = MessageGroupId::new(account.as_str()).map_err(|e| {
            Problem::forbidden(format!(
                "the `{account_claim}` claim is not a usable account id: {e}"
            ))
        })?;
        Ok(Self {
            id: id.clone(),
            account,
        })
    }

    /// The Idempotency-Key as stored: scoped to the caller (the IETF draft's recommendation), so
    /// that two callers using the same key make two payments and one cannot squat another's
    /// key. The caller's id is length-prefixed, so no two (caller, key) pairs give one scoped
    /// key.
    ///
    /// ```
    /// # use payments_api::identity::Caller;
    /// # use lambda_idempotency::publish::MessageGroupId;
    /// let caller = |id: &str| Caller { id: id.into(), account: MessageGroupId::new("a").unwrap() };
    /// assert_ne!(caller("a/b").scoped_key("c"), caller("a").scoped_key("b/c"));
    /// assert_eq!(caller("u").scoped_key("k"), "1:u/k");
    /// ```
    pub fn scoped_key(&self, key: &str) -> String {
        format!("{}:{}/{key}", self.id.len(), self.id)
    }
}
