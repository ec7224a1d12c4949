//! The `main` of both functions built from this crate: payments-api (`POST /payments`) and
//! payments-reader (`GET /payments/{paymentId}`, where clients wait). One code; each function has
//! its own binary, so that `cargo lambda` builds and routes each by its name, and its own
//! settings (`MAX_WAIT_SECONDS`), role, timeout and reserved concurrency in template.yaml.

use lambda_http::{Error, Request, RequestExt, service_fn};

use crate::App;

/// Serves the Lambda runtime's invocations until it stops.
pub async fn run() -> Result<(), Error> {
    lambda_http::tracing::init_default_subscriber();
    let sdk = payments_config::sdk_config().await;
    let app = App::from_settings(&sdk, &payments_config::Env)?;
    // The idempotency table's check runs in the background from here, costing the init nothing.
    // A table that does not fit fails each request, naming the table and the mismatch, until it
    // is fixed.
    let checks = payments_config::cold_start_checks(
        app.idempotency().backend(),
        None,
        &payments_config::Env,
        app.idempotency().expiry(),
    )?;
    // Never dropped: the runtime's loop is the rest of the process. Several requests at once on
    // Lambda Managed Instances (AWS_LAMBDA_MAX_CONCURRENCY above 1), one after another elsewhere.
    let (app, checks): &'static _ = Box::leak(Box::new((app, checks)));
    // Each request runs with its own invocation's X-Ray trace id, which the clients send
    // (`payments_config::dynamodb`): Lambda sets no process-wide one when it serves several.
    lambda_http::run_concurrent(service_fn(move |request: Request| {
        let trace = request
            .lambda_context_ref()
            .and_then(|context| context.xray_trace_id.clone());
        lambda_idempotency::runtime::with_trace_id(trace, async move {
            checks.ready(None).await?;
            app.handle(request).await
        })
    }))
    .await
}
