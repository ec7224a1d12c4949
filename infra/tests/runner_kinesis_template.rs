//! A SAM template with a Kinesis stream and a function reading it (`Events.X.Type: Kinesis`):
//! read, provisioned, run with `Runner::function` like any other source, and what the template
//! says takes effect (a failing batch goes to the on-failure queue after its retries).

mod common;

use std::time::Duration;

use aws_lambda_events::kinesis::KinesisEvent;
use aws_lambda_events::streams::KinesisEventResponse;
use lambda_runtime::{Error, LambdaEvent};
use local_aws::runner::{InProcess, Runner, RunnerError, StreamKind};
use local_aws::template::{Naming, StartingPosition, Template, TemplateOptions};
use tokio_util::sync::CancellationToken;

use common::kinesis::{WAIT, fast, invocation_records, put};

const TEMPLATE: &str = r#"
Transform: AWS::Serverless-2016-10-31
Resources:
  PaymentEvents:
    Type: AWS::Kinesis::Stream
    Properties:
      Name: payment-events
      ShardCount: 2
      RetentionPeriodHours: 48
  EventsFailed:
    Type: AWS::SQS::Queue
  EventsConsumer:
    Type: AWS::Serverless::Function
    Properties:
      FunctionName: events-consumer
      Runtime: provided.al2023
      Handler: bootstrap
      CodeUri: .
      Timeout: 10
      Environment:
        Variables:
          STREAM_NAME: !Ref PaymentEvents
          STREAM_ARN: !GetAtt PaymentEvents.Arn
      Events:
        Payments:
          Type: Kinesis
          Properties:
            Stream: !GetAtt PaymentEvents.Arn
            StartingPosition: TRIM_HORIZON
            BatchSize: 25
            MaximumBatchingWindowInSeconds: 0
            FunctionResponseTypes: [ReportBatchItemFailures]
            BisectBatchOnFunctionError: true
            MaximumRetryAttempts: 1
            MaximumRecordAgeInSeconds: 3600
            DestinationConfig:
              OnFailure:
                Type: SQS
                Destination: !GetAtt EventsFailed.Arn
"#;

fn template(tag: &str) -> Template {
    Template::parse(
        TEMPLATE,
        &TemplateOptions::default().naming(Naming::unique(tag)),
    )
    .unwrap()
}

#[tokio::test]
async fn kinesis_a_template_s_stream_and_event_source_come_up_and_run() {
    let clients = common::clients().await;
    let template = template("kt");
    let stream = &template.kinesis_streams["PaymentEvents"];
    assert_eq!((stream.shard_count, stream.retention_period_hours), (2, 48));
    let function = &template.functions["EventsConsumer"];
    let [source] = function.kinesis_events.as_slice() else {
        panic!("{:?}", function.kinesis_events);
    };
    assert_eq!(source.stream, "PaymentEvents");
    assert_eq!(source.on_failure_queue.as_deref(), Some("EventsFailed"));

    let resources = local_aws::provision::provision(&clients, &template)
        .await
        .unwrap();
    let provisioned = &resources.kinesis_streams["PaymentEvents"];
    assert_eq!(provisioned.name, stream.name);
    assert!(
        provisioned
            .arn
            .ends_with(&format!(":stream/{}", stream.name))
    );
    assert_eq!(
        local_aws::provision::verify(&clients, &template)
            .await
            .unwrap(),
        []
    );
    let env = resources.function_env(function).unwrap();
    assert_eq!(env["STREAM_NAME"], provisioned.name);
    assert_eq!(env["STREAM_ARN"], provisioned.arn);
    // Provisioning again finds the stream.
    let again = local_aws::provision::provision(&clients, &template)
        .await
        .unwrap();
    assert_eq!(again.kinesis_streams, resources.kinesis_streams);

    // The mapping as the template says; the handler fails any batch holding "bad".
    let runner = Runner::from_clients(&clients)
        .function(
            &template,
            &resources,
            "events-consumer",
            InProcess::new(|event: LambdaEvent<KinesisEvent>| async move {
                if event
                    .payload
                    .records
                    .iter()
                    .any(|r| r.kinesis.data.0 == b"bad")
                {
                    return Err(Error::from("bad record"));
                }
                Ok::<_, Error>(KinesisEventResponse::default())
            }),
        )
        .unwrap();
    let [m] = runner
        .stream_mappings()
        .collect::<Vec<_>>()
        .try_into()
        .unwrap();
    assert_eq!(m.kind(), Some(StreamKind::Kinesis));
    assert_eq!(m.stream_arn, provisioned.arn);
    assert_eq!(m.starting_position, StartingPosition::TrimHorizon);
    assert_eq!(m.batch_size, 25);
    assert!(m.report_batch_item_failures && m.bisect_batch_on_function_error);
    assert_eq!(m.maximum_retry_attempts, Some(1));
    assert_eq!(m.maximum_record_age, Some(Duration::from_secs(3600)));
    assert_eq!(m.timeout, Duration::from_secs(10));
    assert_eq!(
        m.on_failure.as_ref().map(|q| q.url.as_str()),
        Some(resources.queues["EventsFailed"].url.as_str())
    );

    // Without a Kinesis client the source cannot run: said, not skipped.
    let err = Runner::new(clients.sqs.clone())
        .dynamodb_streams(clients.dynamodb_streams.clone())
        .function(
            &template,
            &resources,
            "events-consumer",
            InProcess::new(|_: LambdaEvent<KinesisEvent>| async {
                Ok::<_, Error>(KinesisEventResponse::default())
            }),
        )
        .err()
        .unwrap();
    assert!(matches!(err, RunnerError::NoKinesisClient(ref f) if f == "events-consumer"));

    // Run it: "bad" always fails; with bisection and one retry it alone reaches the queue.
    for (key, data) in [("a", "ok-1"), ("a", "bad"), ("a", "ok-2")] {
        put(&clients, provisioned, key, data).await;
    }
    let running = runner
        .stream_options(fast())
        .start(CancellationToken::new());
    running
        .wait_stream_caught_up("events-consumer", WAIT)
        .await
        .unwrap();
    let stats = running.stop().await["events-consumer"];
    assert_eq!(stats.stream.shards, 2);
    assert_eq!(stats.stream.records_processed, 2);
    assert_eq!(stats.stream.records_given_up, 1);
    let records = invocation_records(&clients, &resources.queues["EventsFailed"]).await;
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0]["KinesisBatchInfo"]["batchSize"], 1);
    assert_eq!(records[0]["KinesisBatchInfo"]["streamArn"], provisioned.arn);
}

#[test]
fn kinesis_an_on_failure_destination_that_is_fifo_is_a_finding() {
    assert_eq!(template("kc").check(), []);
    let fifo = TEMPLATE.replace(
        "  EventsFailed:\n    Type: AWS::SQS::Queue\n",
        "  EventsFailed:\n    Type: AWS::SQS::Queue\n    Properties: { FifoQueue: true }\n",
    );
    let t = Template::parse(&fifo, &TemplateOptions::default()).unwrap();
    let findings: Vec<String> = t.check().iter().map(ToString::to_string).collect();
    assert_eq!(
        findings,
        [
            "EventsConsumer.Events.Payments: on-failure destination EventsFailed is a FIFO queue: Lambda sends to standard queues only"
        ]
    );
}
