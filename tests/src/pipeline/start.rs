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

/// What a pipeline starts from: the provisioned template.
pub(super) struct Start {
    pub sdk: aws_config::SdkConfig,
    pub clients: Clients,
    pub template: Template,
    pub resources: Provisioned,
    pub api_addr: SocketAddr,
    pub start_processor: bool,
}

impl Start {
    fn gateway_options(&self) -> Result<GatewayOptions, BoxError> {
        let api = self
            .template
            .function_by_name("payments-api")
            .ok_or("template.yaml has no function payments-api")?;
        Ok(GatewayOptions::for_function(api).with_jwt_authorizer(
            JwtAuthorizer::from_parameters(&self.template, "JwtIssuer", "JwtAudience")
                .ok_or("template.yaml has no JwtIssuer/JwtAudience parameters")?,
        ))
    }

    /// The four functions' handlers called in this process.
    pub async fn in_process(self) -> Result<Pipeline, BoxError> {
        let (template, resources, sdk) = (&self.template, &self.resources, &self.sdk);
        let counts = Counts::default();
        let api =
            payments_api::App::from_settings(sdk, &settings(resources, template, "payments-api")?)?;
        // Each function's init, as its main runs it: an idempotency table that does not fit
        // stops it.
        api.check_idempotency_table().await?;
        let gateway = Gateway::serve(self.api_addr, self.gateway_options()?, move |request| {
            let api = api.clone();
            async move { api.handle(request).await }.instrument(function_span("payments-api", None))
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
        let mut runner = Runner::from_clients(&self.clients).wait_time_seconds(1);
        if self.start_processor {
            runner = runner.function(
                template,
                resources,
                "payment-processor",
                InProcess::new(move |event: LambdaEvent<SqsEvent>| {
                    let (app, counts) = (processor.clone(), c1.clone());
                    let span = function_span("payment-processor", Some(&event.context.request_id));
                    async move {
                        let (response, batch) = app.as_ref().handle_counted(event).await?;
                        add(&counts, "payment-processor", batch);
                        Ok::<_, Error>(response)
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
            },
        })
    }

    /// Each function as its own process under one Runtime API; the local API and the mappings
    /// invoke them there.
    pub async fn processes(self, options: &ProcessOptions) -> Result<Pipeline, BoxError> {
        let processes =
            Processes::start(&self.template, &self.resources, &FUNCTIONS, options).await?;
        let api = self
            .template
            .function_by_name("payments-api")
            .ok_or("template.yaml has no function payments-api")?
            .clone();
        let api_arn = self.resources.function_arn(&api.name);
        let invoker = Arc::new(processes.http_invoker());
        let gateway = Gateway::serve(self.api_addr, self.gateway_options()?, move |request| {
            let (invoker, api, arn) = (invoker.clone(), api.clone(), api_arn.clone());
            async move { forward(invoker.as_ref(), &api, arn, request).await }
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
