use aws_lambda_events::kafka::KafkaEvent;
use kafka_consumer::{App, Config};
use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let app = App::new(&aws_config::load_from_env().await, Config::from_env()?);
    lambda_runtime::run(service_fn(|event: LambdaEvent<KafkaEvent>| {
        app.handle(event)
    }))
    .await
}
