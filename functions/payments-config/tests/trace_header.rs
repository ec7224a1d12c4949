//! The pipeline's clients on Lambda Managed Instances: each request carries the X-Ray trace id of
//! the invocation that sends it, whatever else runs in the process.

use std::sync::{Arc, Mutex};

use aws_sdk_sqs::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_sqs::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_mocks::{MockResponseInterceptor, RuleMode, create_mock_http_client, mock};
use lambda_idempotency::runtime::with_trace_id;

/// The `X-Amzn-Trace-Id` of every request sent.
#[derive(Debug, Clone, Default)]
struct Traces(Arc<Mutex<Vec<Option<String>>>>);

impl Intercept for Traces {
    fn name(&self) -> &'static str {
        "Traces"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), aws_sdk_sqs::error::BoxError> {
        let trace = context.request().headers().get("x-amzn-trace-id");
        self.0.lock().unwrap().push(trace.map(str::to_owned));
        Ok(())
    }
}

fn sdk() -> aws_config::SdkConfig {
    aws_config::SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::SharedCredentialsProvider::new(
            aws_sdk_sqs::config::Credentials::new("test", "test", None, None, "test"),
        ))
        .http_client(create_mock_http_client())
        .build()
}

const A: &str = "Root=1-00000000-aaaaaaaaaaaaaaaaaaaaaaaa;Sampled=1";
const B: &str = "Root=1-00000000-bbbbbbbbbbbbbbbbbbbbbbbb;Sampled=1";

#[tokio::test]
async fn each_sqs_request_carries_its_invocations_trace_id() {
    let rule = mock!(aws_sdk_sqs::Client::send_message)
        .sequence()
        .output(|| aws_sdk_sqs::operation::send_message::SendMessageOutput::builder().build())
        .repeatedly()
        .build();
    let traces = Traces::default();
    // The function's client, as built, with the mock's answers and the observer after it.
    let config = payments_config::sqs(&sdk())
        .config()
        .to_builder()
        .interceptor(
            MockResponseInterceptor::new()
                .rule_mode(RuleMode::MatchAny)
                .with_rule(&rule),
        )
        .interceptor(traces.clone())
        .build();
    let sqs = aws_sdk_sqs::Client::from_conf(config);
    let send = |trace: Option<&str>| {
        let sqs = sqs.clone();
        let trace = trace.map(str::to_owned);
        async move {
            let send = sqs
                .send_message()
                .queue_url("https://q")
                .message_body("b")
                .send();
            with_trace_id(trace, send).await.unwrap();
        }
    };
    // Interleaved: a, b, then outside any invocation.
    tokio::join!(send(Some(A)), send(Some(B)));
    send(None).await;
    let mut seen = traces.0.lock().unwrap().clone();
    seen[..2].sort();
    assert_eq!(seen, [Some(A.to_owned()), Some(B.to_owned()), None]);
}

#[tokio::test]
async fn each_dynamodb_request_carries_its_invocations_trace_id() {
    let rule = mock!(aws_sdk_dynamodb::Client::get_item)
        .sequence()
        .output(|| aws_sdk_dynamodb::operation::get_item::GetItemOutput::builder().build())
        .repeatedly()
        .build();
    let traces = Traces::default();
    let config = payments_config::dynamodb(&sdk())
        .config()
        .to_builder()
        .interceptor(
            MockResponseInterceptor::new()
                .rule_mode(RuleMode::MatchAny)
                .with_rule(&rule),
        )
        .interceptor(traces.clone())
        .build();
    let dynamodb = aws_sdk_dynamodb::Client::from_conf(config);
    let get = dynamodb
        .get_item()
        .table_name("t")
        .key("pk", aws_sdk_dynamodb::types::AttributeValue::S("k".into()));
    with_trace_id(Some(A.to_owned()), get.send()).await.unwrap();
    assert_eq!(*traces.0.lock().unwrap(), [Some(A.to_owned())]);
}
