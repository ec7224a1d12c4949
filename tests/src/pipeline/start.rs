//! Starting the functions of a [`Pipeline`]: in this process, or each as its own process.

use std::sync::Arc;

use aws_lambda_events::sqs::SqsEvent;
use lambda_runtime::{Error, LambdaEvent};
use local_aws::Clients;
use local_aws::gateway::{Gateway, GatewayOptions, JwtAuthorizer};
use local_aws::provision::Provisioned;
use local_aws::runner::{InProcess, Runner};
use local_aws::template::Template;
use std::net::SocketAddr;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{BoxError, Counts, Pipeline, Running, add, settings};
use crate::logs::function_span;
use crate::processes::{FUNCTIONS, ProcessOptions, Processes, forward};

/// The function behind `POST /payments`.
const API: &str = "payments-api";
/// The function behind `GET /payments/{paymentId}` (the reads, where clients wait).
const READER: &str = "payments-reader";

/// The function a request from the local gateway is for (its Lambda context's).
fn function_name(request: &lambda_http::Request) -> String {
    use lambda_http::RequestExt;
    request
        .lambda_context_ref()
        .map(|c| c.env_config.function_name.clone())
        .unwrap_or_default()
}

/// What a pipeline starts from: the provisioned template.
pub(super) struct Start {
    pub sdk: aws_config::SdkConfig,
    pub clients: Clients,
    pub template: Template,
    pub resources: Provisioned,
    pub api_addr: SocketAddr,
    pub start_processor: bool,
    pub aws_limits: bool,
}

impl Start {
    /// The HTTP API: payments-api's routes (the POSTs) and payments-reader's (the reads), behind
    /// the template's JWT authorizer, with the template's throttling and reserved concurrency
    /// when [`aws_limits`](super::Options::aws_limits) says so.
    fn gateway_options(&self) -> Result<GatewayOptions, BoxError> {
        let function = |name: &str| {
            self.template
                .function_by_name(name)
                .ok_or_else(|| format!("template.yaml has no function {name}"))
        };
        let (api, reader) = (function(API)?, function(READER)?);
        let options = GatewayOptions::for_function(api)
            .with_function(
                GatewayOptions::for_function(reader)
                    .with_function_arn(self.resources.function_arn(&reader.name)),
            )
            .with_function_arn(self.resources.function_arn(&api.name))
            .with_jwt_authorizer(
                JwtAuthorizer::from_parameters(&self.template, "JwtIssuer", "JwtAudience")
                    .ok_or("template.yaml has no JwtIssuer/JwtAudience parameters")?,
            );
        Ok(if self.aws_limits {
            options
        } else {
            options.without_limits()
        })
    }

    /// The four functions' handlers called in this process.
    pub async fn in_process(self) -> Result<Pipeline, BoxError> {
        let (template, resources, sdk) = (&self.template, &self.resources, &self.sdk);
        let counts = Counts::default();
        let api = payments_api::App::from_settings(sdk, &settings(resources, template, API)?)?;
        let reader =
            payments_api::App::from_settings(sdk, &settings(resources, template, READER)?)?;
        // Each function's init, as its main runs it: an idempotency table that does not fit
        // stops it.
        api.check_idempotency_table().await?;
        reader.check_idempotency_table().await?;
        let gateway = Gateway::serve(self.api_addr, self.gateway_options()?, move |request| {
            // The function the route integrates, as the gateway's Lambda context names it.
            let (app, name) = if function_name(&request) == READER {
                (reader.clone(), READER)
            } else {
                (api.clone(), API)
            };
            async move { app.handle(request).await }.instrument(function_span(name, None))
        })
        .await?;

        let processor = Arc::new(payment_processor::App::from_settings(
            sdk,
            &settings(resources, template, "payment-processor")?,
        )?);
        let sender = Arc::new(receipt_sender::App::from_settings(
            sdk,
            &settings(resources, template, "receipt-sender")?,
        )?);
        processor.check_idempotency_table().await?;
        sender.check_idempotency_table().await?;
        let (c1, c2) = (counts.clone(), counts.clone());
        let processor_app = processor.clone();
        let hook = super::hook::HookSlot::default();
        let slot = hook.clone();
        let mut runner = Runner::from_clients(&self.clients).wait_time_seconds(1);
        if self.start_processor {
            runner = runner.function(
                template,
                resources,
                "payment-processor",
                InProcess::new(move |event: LambdaEvent<SqsEvent>| {
                    let (app, counts) = (processor.clone(), c1.clone());
                    let span = function_span("payment-processor", Some(&event.context.request_id));
                    let hooked = super::hook::take_over(&slot, &event);
                    async move {
                        if let Some(hooked) = hooked {
                            return hooked.await;
                        }
                        let handled = app.as_ref().handle_counted(event).await?;
                        add(&counts, "payment-processor", handled.counts);
                        Ok::<_, Error>(handled.response)
                    }
                    .instrument(span)
                }),
            )?;
        }
        let runner = runner
            .function(
                template,
                resources,
                "receipt-sender",
                InProcess::new(move |event: LambdaEvent<SqsEvent>| {
                    let (app, counts) = (sender.clone(), c2.clone());
                    let span = function_span("receipt-sender", Some(&event.context.request_id));
                    async move {
                        let (response, batch) = app.as_ref().handle_counted(event).await?;
                        add(&counts, "receipt-sender", batch);
                        Ok::<_, Error>(response)
                    }
                    .instrument(span)
                }),
            )?
            .start(CancellationToken::new());
        Ok(Pipeline {
            clients: self.clients,
            template: self.template,
            resources: self.resources,
            gateway,
            runner,
            publisher: None,
            sdk: self.sdk,
            running: Running::InProcess {
                counts,
                processor: processor_app,
                hook,
            },
        })
    }

    /// Each function as its own process under one Runtime API; the local API and the mappings
    /// invoke them there.
    pub async fn processes(self, options: &ProcessOptions) -> Result<Pipeline, BoxError> {
        let processes =
            Processes::start(&self.template, &self.resources, &FUNCTIONS, options).await?;
        let function = |name: &str| -> Result<(local_aws::template::Function, String), BoxError> {
            let f = self
                .template
                .function_by_name(name)
                .ok_or_else(|| format!("template.yaml has no function {name}"))?;
            Ok((f.clone(), self.resources.function_arn(&f.name)))
        };
        let targets = Arc::new([function(API)?, function(READER)?]);
        let invoker = Arc::new(processes.http_invoker());
        let gateway = Gateway::serve(self.api_addr, self.gateway_options()?, move |request| {
            let invoker = invoker.clone();
            let name = function_name(&request);
            let (f, arn) = targets
                .iter()
                .find(|(f, _)| f.name == name)
                .unwrap_or(&targets[0])
                .clone();
            async move { forward(invoker.as_ref(), &f, arn, request).await }
        })
        .await?;
        let mut runner = Runner::from_clients(&self.clients).wait_time_seconds(1);
        for function in ["payment-processor", "receipt-sender"] {
            if function == "payment-processor" && !self.start_processor {
                continue;
            }
            runner = runner.function(
                &self.template,
                &self.resources,
                function,
                processes.invoker(function)?,
            )?;
        }
        let runner = runner.start(CancellationToken::new());
        Ok(Pipeline {
            clients: self.clients,
            template: self.template,
            resources: self.resources,
            gateway,
            runner,
            publisher: None,
            sdk: self.sdk,
            running: Running::Processes(Box::new(processes)),
        })
    }
}
