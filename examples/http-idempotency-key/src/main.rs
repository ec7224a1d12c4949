use http_idempotency_key::{App, Config};
use lambda_http::{Error, Request, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_http::tracing::init_default_subscriber();
    let app = App::new(&aws_config::load_from_env().await, Config::from_env()?);
    // Never dropped: the runtime's loop is the rest of the process. Several requests at once on
    // Lambda Managed Instances (AWS_LAMBDA_MAX_CONCURRENCY above 1), one after another elsewhere.
    let app: &'static App = Box::leak(Box::new(app));
    lambda_http::run_concurrent(service_fn(move |request: Request| app.handle(request))).await
}
