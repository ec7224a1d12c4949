//! payments-api: `POST /payments` (see [`payments_api::lambda_main`]).

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    payments_api::lambda_main::run().await
}
