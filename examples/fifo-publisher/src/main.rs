use fifo_publisher::{App, PublishRequest};
use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let app = App::from_env(&aws_config::load_from_env().await)?;
    lambda_runtime::run(service_fn(|event: LambdaEvent<PublishRequest>| {
        app.handle(event)
    }))
    .await
}
