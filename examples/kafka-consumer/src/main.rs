use kafka_consumer::{StockTable, consumer};
use lambda_idempotency::prelude::*;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let table = std::env::var("STOCK_TABLE").map_err(|_| "STOCK_TABLE is not set")?;
    let builder = Consumer::from_env().await?;
    // The stock table through the idempotency table's client.
    let dynamodb = builder.engine().backend().client().clone();
    consumer(builder, StockTable { dynamodb, table })
        .run()
        .await
}
