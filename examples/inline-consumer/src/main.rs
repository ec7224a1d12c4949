use lambda_idempotency::prelude::*;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let orders = std::env::var("ORDERS_TABLE").map_err(|_| "ORDERS_TABLE is not set")?;
    inline_consumer::consumer(Consumer::from_env().await?, orders)
        .run()
        .await
}
