use lambda_runtime::Error;
use receipt_sender::App;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let sdk = payments_config::sdk_config().await;
    let app = App::from_settings(&sdk, &payments_config::Env)?;
    // The idempotency table's and the queue's checks run in the background from here, costing
    // the init nothing. A table that does not fit fails each batch, naming the table and the
    // mismatch, until it is fixed: no message runs, and none is dead-lettered for it. What the
    // queue's check finds (a redrive maxReceiveCount too low for the attempts, a dead-letter
    // queue taking smaller messages, records expiring before a message's last copy) is logged.
    let checks = payments_config::cold_start_checks(
        app.idempotency().backend().inner(),
        Some(payments_config::sqs(&sdk)),
        &payments_config::Env,
        app.idempotency().expiry(),
    )?;
    payments_config::run_consumer(checks, app, |app, event| app.handle(event)).await
}
