//! The fault injector on an SQS client (moto): each fault does to a `SendMessage` what it says.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::config::retry::RetryConfig;
use lambda_idempotency::time::{Clock, ManualClock};

use crate::common;
use lambda_idempotency::test_util::fault::{Crash, Fault, Faults};

/// Messages in the queue (moto answers the approximate count exactly).
async fn queued(sqs: &aws_sdk_sqs::Client, url: &str) -> usize {
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    attributes[&aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages]
        .parse()
        .unwrap()
}

#[tokio::test]
async fn fault_exploration_injector_on_an_sqs_client() {
    let clock = Arc::new(ManualClock::starting_now());
    let crash = Arc::new(Crash::default());
    let faults = Faults::new("sqs", crash.clone(), clock.clone() as Arc<dyn Clock>);
    let config = aws_sdk_sqs::config::Builder::from(&common::sdk_config().await)
        .interceptor(faults.clone())
        .retry_config(RetryConfig::disabled())
        .build();
    let sqs = aws_sdk_sqs::Client::from_conf(config);
    let name = common::unique("faults");
    let url = sqs
        .create_queue()
        .queue_name(&name)
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let send = || sqs.send_message().queue_url(&url).message_body("{}").send();

    faults.arm(1, Fault::Fail);
    assert!(send().await.is_err());
    assert_eq!(faults.log(), ["SendMessage"]);
    faults.disarm();
    assert_eq!(queued(&sqs, &url).await, 0, "never sent");

    faults.arm(1, Fault::LoseAnswer);
    let lost = send().await.unwrap_err();
    assert!(
        format!("{:?}", lost).contains("injected loss of the answer"),
        "{lost:?}"
    );
    faults.disarm();
    assert_eq!(queued(&sqs, &url).await, 1, "applied, its answer lost");

    faults.arm(2, Fault::Crash);
    send().await.unwrap();
    assert!(send().await.is_err());
    assert!(crash.is_raised());
    assert!(send().await.is_err(), "a crashed process sends nothing");
    crash.reset();
    faults.disarm();
    assert_eq!(
        queued(&sqs, &url).await,
        3,
        "the crash came after its request"
    );

    faults.arm(1, Fault::Outage(Duration::from_secs(60)));
    assert!(send().await.is_err());
    clock.advance(Duration::from_secs(59));
    assert!(send().await.is_err(), "still down");
    clock.advance(Duration::from_secs(1));
    send().await.unwrap();
    assert_eq!(faults.sent(), 3);
    faults.disarm();
    assert_eq!(queued(&sqs, &url).await, 4);
}
