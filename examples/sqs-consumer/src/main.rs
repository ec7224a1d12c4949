use aws_lambda_events::sqs::SqsEvent;
use lambda_runtime::{Error, LambdaEvent};
use sqs_consumer::{App, Config};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let app = App::new(&aws_config::load_from_env().await, Config::from_env()?);
    // Several invocations at once on Lambda Managed Instances, one after another elsewhere.
    lambda_idempotency::runtime::run(app, |app, event: LambdaEvent<SqsEvent>| app.handle(event))
        .await
}
