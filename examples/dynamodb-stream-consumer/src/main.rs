use dynamodb_stream_consumer::{CustomersTable, consumer};
use lambda_idempotency::prelude::*;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let table = std::env::var("CUSTOMERS_TABLE").map_err(|_| "CUSTOMERS_TABLE is not set")?;
    let builder = Consumer::from_env().await?;
    // The customers table through the idempotency table's client.
    let dynamodb = builder.engine().backend().client().clone();
    consumer(builder, CustomersTable { dynamodb, table })
        .run()
        .await
}
