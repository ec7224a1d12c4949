use aws_lambda_events::dynamodb::Event;
use lambda_runtime::{Error, LambdaEvent};
use payments_publisher::App;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let sdk = payments_config::sdk_config().await;
    let app = App::from_settings(&sdk, &payments_config::Env)?;
    lambda_idempotency::runtime::run(app, |app, event: LambdaEvent<Event>| app.handle(event)).await
}
