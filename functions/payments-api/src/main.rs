use lambda_http::{Error, Request, service_fn};
use payments_api::App;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_http::tracing::init_default_subscriber();
    let sdk = payments_config::sdk_config().await;
    let app = App::from_settings(&sdk, &payments_config::Env)?;
    // An idempotency table that does not fit fails the init, naming the table and the mismatch.
    app.check_idempotency_table().await?;
    lambda_http::run(service_fn(|request: Request| app.handle(request))).await
}
