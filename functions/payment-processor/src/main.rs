use aws_lambda_events::sqs::SqsEvent;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use payment_processor::App;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let sdk = payments_config::sdk_config().await;
    // Invalid settings fail the init with their reason, among them a failure switch
    // (FAIL_PAYMENTS) where STAGE is prod.
    let app = App::from_settings(&sdk, &payments_config::Env)?;
    // An idempotency table that does not fit fails the init, naming the table and the mismatch:
    // Lambda retries the init, and no message is dead-lettered for it.
    app.check_idempotency_table().await?;
    // A redrive maxReceiveCount too low for the attempts would dead-letter innocent messages, a
    // dead-letter queue taking smaller messages could not take a large one, and records expiring
    // before a message's last copy would let a redriven copy run again: warn at cold start (the
    // check never stops the function).
    payments_config::check_redrive_backstop(
        &aws_sdk_sqs::Client::new(&sdk),
        &payments_config::Env,
        app.idempotency().expiry(),
    )
    .await?;
    lambda_runtime::run(service_fn(|event: LambdaEvent<SqsEvent>| app.handle(event))).await
}
