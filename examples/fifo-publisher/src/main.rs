use fifo_publisher::{App, PublishRequest};
use lambda_runtime::{Error, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let app = App::from_env(&aws_config::load_from_env().await)?;
    // Several invocations at once on Lambda Managed Instances, one after another elsewhere.
    lambda_idempotency::runtime::run(app, |app, event: LambdaEvent<PublishRequest>| {
        app.handle(event)
    })
    .await
}
