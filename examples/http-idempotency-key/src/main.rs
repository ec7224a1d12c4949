use http_idempotency_key::{App, Config};
use lambda_http::{Error, Request, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_http::tracing::init_default_subscriber();
    let app = App::new(&aws_config::load_from_env().await, Config::from_env()?);
    lambda_http::run(service_fn(|request: Request| app.handle(request))).await
}
