use kinesis_consumer::{MetersTable, consumer};
use lambda_idempotency::prelude::*;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let table = std::env::var("METERS_TABLE").map_err(|_| "METERS_TABLE is not set")?;
    let builder = Consumer::from_env().await?;
    // The meters table through the idempotency table's client.
    let dynamodb = builder.engine().backend().client().clone();
    consumer(builder, MetersTable { dynamodb, table })
        .run()
        .await
}
