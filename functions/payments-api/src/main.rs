use lambda_http::{Error, Request, service_fn};
use payments_api::App;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_http::tracing::init_default_subscriber();
    let sdk = payments_config::sdk_config().await;
    let app = App::from_settings(&sdk, &payments_config::Env)?;
    // The idempotency table's check runs in the background from here, costing the init nothing.
    // A table that does not fit fails each request, naming the table and the mismatch, until it
    // is fixed.
    let checks = payments_config::cold_start_checks(
        app.idempotency().backend(),
        None,
        &payments_config::Env,
        app.idempotency().expiry(),
    )?;
    lambda_http::run(service_fn(|request: Request| async {
        checks.ready(None).await?;
        app.handle(request).await
    }))
    .await
}
