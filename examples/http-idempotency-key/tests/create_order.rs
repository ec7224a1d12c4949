//! The endpoint on its sample request, against the local DynamoDB (README.md, "Test it").

mod local;

use http_idempotency_key::{App, Config, NewOrder, REPLAYED_HEADER};
use lambda_http::http::{HeaderValue, StatusCode, header};
use lambda_http::{Body, Request, Response};
use local::{count, create_table, sdk_config};

const REQUEST: &str = include_str!("../events/create-order.json");
/// The sample request's key, unquoted.
const KEY: &str = "8e03978e-40d5-43e8-bc93-6894a57f9324";

struct Fixture {
    app: App,
    dynamodb: aws_sdk_dynamodb::Client,
    orders_table: String,
}

async fn fixture() -> Fixture {
    let sdk = sdk_config().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let config = Config {
        idempotency_table: create_table(&dynamodb, "idempotency", "id").await,
        orders_table: create_table(&dynamodb, "orders", "orderId").await,
    };
    let orders_table = config.orders_table.clone();
    let app = App::new(&sdk, config);
    Fixture {
        app,
        dynamodb,
        orders_table,
    }
}

fn sample() -> Request {
    lambda_http::request::from_str(REQUEST).expect("an API Gateway request")
}

fn with_body(body: &str) -> Request {
    let mut request = sample();
    *request.body_mut() = Body::from(body);
    request
}

fn with_key(key: Option<&str>) -> Request {
    let mut request = sample();
    request.headers_mut().remove("idempotency-key");
    if let Some(key) = key {
        let value = HeaderValue::from_str(key).unwrap();
        request.headers_mut().insert("idempotency-key", value);
    }
    request
}

fn body(response: &Response<Body>) -> String {
    String::from_utf8(response.body().to_vec()).unwrap()
}

fn detail(response: &Response<Body>) -> String {
    let problem: serde_json::Value = serde_json::from_str(&body(response)).unwrap();
    problem["detail"].as_str().unwrap().to_owned()
}

async fn orders(f: &Fixture) -> usize {
    count(&f.dynamodb, &f.orders_table).await
}

#[tokio::test]
async fn a_retry_replays_the_stored_response_and_creates_nothing() {
    let f = fixture().await;

    let first = f.app.handle(sample()).await.unwrap();
    assert_eq!(first.status(), StatusCode::CREATED, "{}", body(&first));
    let created: serde_json::Value = serde_json::from_str(&body(&first)).unwrap();
    assert_eq!(created["item"], "red mug");
    assert!(created["orderId"].is_string());
    assert!(first.headers().get(REPLAYED_HEADER).is_none());

    // The client did not see the answer and sends the request again; its JSON is laid out
    // differently, which is still the same request.
    let retry = f
        .app
        .handle(with_body("{ \"quantity\": 2, \"item\": \"red mug\" }"))
        .await
        .unwrap();
    assert_eq!(retry.status(), StatusCode::CREATED);
    assert_eq!(body(&retry), body(&first), "not the stored response");
    assert_eq!(retry.headers()[REPLAYED_HEADER], "true");
    assert_eq!(orders(&f).await, 1, "the retry created an order");
}

#[tokio::test]
async fn a_retry_while_the_first_request_runs_gets_409() {
    let f = fixture().await;
    // The first request has taken the key and is still creating its order.
    let order: NewOrder = serde_json::from_slice(sample().body().as_ref()).unwrap();
    let held = f
        .app
        .engine()
        .acquire(KEY, &order.fingerprint(), None)
        .await
        .unwrap();
    assert!(
        matches!(held, lambda_idempotency::Acquired::Started(_)),
        "{held:?}"
    );

    let response = f.app.handle(sample()).await.unwrap();

    assert_eq!(
        response.status(),
        StatusCode::CONFLICT,
        "{}",
        body(&response)
    );
    assert_eq!(response.headers()[header::RETRY_AFTER], "1");
    assert_eq!(orders(&f).await, 0);
}

#[tokio::test]
async fn the_key_reused_with_another_body_gets_422() {
    let f = fixture().await;
    let first = f.app.handle(sample()).await.unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);

    let other = with_body("{\"item\":\"red mug\",\"quantity\":3}");
    let response = f.app.handle(other).await.unwrap();

    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        detail(&response).contains("another request body"),
        "{}",
        body(&response)
    );
    assert_eq!(orders(&f).await, 1);
}

#[tokio::test]
async fn a_missing_or_malformed_key_gets_400_naming_it() {
    let f = fixture().await;
    let too_long = "k".repeat(256);
    for (key, says) in [
        (None, "is required"),
        (Some("\"\""), "is empty"),
        (Some(too_long.as_str()), "256 bytes long"),
        (Some("tab\tinside"), "printable ASCII"),
    ] {
        let response = f.app.handle(with_key(key)).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "key {key:?}");
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "application/problem+json"
        );
        let detail = detail(&response);
        assert!(
            detail.contains("Idempotency-Key") && detail.contains(says),
            "{detail}"
        );
    }
    assert_eq!(orders(&f).await, 0);
}
