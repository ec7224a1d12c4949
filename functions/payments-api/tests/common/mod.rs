//! What the tests over a mocked DynamoDB share: the app, and a request as API Gateway passes it
//! (the JWT authorizer's claims in the request context).

use std::collections::HashMap;
use std::time::Duration;

use aws_smithy_mocks::{Rule, RuleMode, mock, mock_client};
use lambda_http::aws_lambda_events::apigw::{
    ApiGatewayRequestAuthorizer, ApiGatewayRequestAuthorizerJwtDescription,
    ApiGatewayV2httpRequestContext,
};
use lambda_http::request::RequestContext;
use lambda_http::{Body, Request, RequestExt};
use payments_api::{App, Config};

/// The app over a DynamoDB client that answers by `rules`.
pub fn app(rules: &[&Rule]) -> App {
    let dynamodb = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, rules);
    App::new(
        dynamodb,
        Config {
            idempotency_table: "payments-idempotency".into(),
            idempotency_ttl: Duration::from_secs(3600),
            payments_table: "payments".into(),
            accounts_table: "payments-accounts".into(),
            account_claim: "sub".into(),
            max_payment_amount: payments_api::validate::DEFAULT_MAX_PAYMENT_AMOUNT,
            max_wait_seconds: payments_api::prefer::MAX_WAIT_SECONDS,
        },
    )
}

/// The accounts table's counter: each `UpdateItem` of it (payments-api taking a payment's
/// number) answers the next number, from 1.
#[allow(dead_code)] // not every test binary takes a number
pub fn account_numbers() -> Rule {
    let taken = std::sync::atomic::AtomicU64::new(0);
    mock!(aws_sdk_dynamodb::Client::update_item)
        .match_requests(|r| r.table_name() == Some("payments-accounts"))
        .then_compute_output(move |_| {
            let n = taken.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            aws_sdk_dynamodb::operation::update_item::UpdateItemOutput::builder()
                .attributes(
                    payments_model::order::NEXT,
                    aws_sdk_dynamodb::types::AttributeValue::N(n.to_string()),
                )
                .build()
        })
}

/// A request of the caller `acct-1`, with an Idempotency-Key.
pub fn request(method: &str, path: &str, body: &str) -> Request {
    let mut jwt = ApiGatewayRequestAuthorizerJwtDescription::default();
    jwt.claims = HashMap::from([("sub".to_owned(), "acct-1".to_owned())]);
    let mut authorizer = ApiGatewayRequestAuthorizer::default();
    authorizer.jwt = Some(jwt);
    let mut context = ApiGatewayV2httpRequestContext::default();
    context.authorizer = Some(authorizer);
    lambda_http::http::Request::builder()
        .method(method)
        .uri(format!("https://api.example.com{path}"))
        .header("content-type", "application/json")
        .header("idempotency-key", "key-1")
        .body(Body::from(body.to_owned()))
        .unwrap()
        .with_request_context(RequestContext::ApiGatewayV2(context))
}
