//! The cold-start check of a queue's redrive backstop, against real queues (moto).

mod common;

use aws_sdk_sqs::types::QueueAttributeName;
use lambda_idempotency::count::RequestCounter;
use lambda_idempotency::redrive_policy::{QueueRef, RedriveCheck, check, warn_if_too_low};

/// A FIFO queue with a FIFO dead-letter queue after `max_receive_count` receives (`None`: no
/// redrive policy). Returns the queue's URL and name.
async fn queue(sqs: &aws_sdk_sqs::Client, max_receive_count: Option<u32>) -> (String, String) {
    let name = format!("{}.fifo", common::unique("redrive"));
    let mut create = sqs
        .create_queue()
        .queue_name(&name)
        .attributes(QueueAttributeName::FifoQueue, "true");
    if let Some(count) = max_receive_count {
        let dlq_url = common::create_fifo_queue(sqs).await;
        let dlq_arn = sqs
            .get_queue_attributes()
            .queue_url(&dlq_url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .unwrap()
            .attributes
            .unwrap()[&QueueAttributeName::QueueArn]
            .clone();
        let policy =
            serde_json::json!({ "deadLetterTargetArn": dlq_arn, "maxReceiveCount": count });
        create = create.attributes(QueueAttributeName::RedrivePolicy, policy.to_string());
    }
    let url = create.send().await.unwrap().queue_url.unwrap();
    (url, name)
}

#[tokio::test]
async fn a_policy_at_the_bound_is_ok_and_one_below_is_too_low() {
    let sqs = common::sqs(&RequestCounter::default()).await;
    let (at_bound, _) = queue(&sqs, Some(41)).await;
    let (below, _) = queue(&sqs, Some(40)).await;

    assert_eq!(
        check(&sqs, &QueueRef::Url(at_bound.clone()), 10, 5).await,
        RedriveCheck::Ok {
            max_receive_count: 41,
            required: 41
        }
    );
    assert_eq!(
        check(&sqs, &QueueRef::Url(below.clone()), 10, 5).await,
        RedriveCheck::TooLow {
            max_receive_count: 40,
            required: 41
        }
    );
    // The old default of the template (maxReceiveCount 5 for 5 attempts) is what dead-lettered
    // innocent followers.
    let (old_default, _) = queue(&sqs, Some(5)).await;
    assert_eq!(
        warn_if_too_low(&sqs, &QueueRef::Url(old_default), 10, 5).await,
        RedriveCheck::TooLow {
            max_receive_count: 5,
            required: 41
        }
    );
    // Smaller batches need less.
    assert_eq!(
        check(&sqs, &QueueRef::Url(below), 1, 5).await,
        RedriveCheck::Ok {
            max_receive_count: 40,
            required: 5
        }
    );
}

#[tokio::test]
async fn a_queue_given_by_its_event_source_arn_is_looked_up() {
    let sqs = common::sqs(&RequestCounter::default()).await;
    let (_, name) = queue(&sqs, Some(11)).await;
    let arn = format!("arn:aws:sqs:us-east-1:123456789012:{name}");
    assert_eq!(
        check(&sqs, &QueueRef::Arn(arn), 10, 2).await,
        RedriveCheck::Ok {
            max_receive_count: 11,
            required: 11
        }
    );
    let not_an_arn = check(&sqs, &QueueRef::Arn(name.clone()), 10, 2).await;
    assert!(
        matches!(&not_an_arn, RedriveCheck::Unreadable(e) if e.contains("not an SQS queue ARN")),
        "{not_an_arn:?}"
    );
    let missing = format!(
        "arn:aws:sqs:us-east-1:123456789012:{}",
        common::unique("missing")
    );
    let missing = check(&sqs, &QueueRef::Arn(missing), 10, 2).await;
    assert!(
        matches!(&missing, RedriveCheck::Unreadable(e) if e.contains("GetQueueUrl")),
        "{missing:?}"
    );
}

#[tokio::test]
async fn no_policy_and_a_missing_queue_are_told_apart() {
    let sqs = common::sqs(&RequestCounter::default()).await;
    let (plain, _) = queue(&sqs, None).await;
    assert_eq!(
        warn_if_too_low(&sqs, &QueueRef::Url(plain), 10, 5).await,
        RedriveCheck::NoRedrivePolicy
    );
    let missing = format!(
        "{}/123456789012/{}",
        common::endpoint().trim_end_matches('/'),
        common::unique("missing")
    );
    match warn_if_too_low(&sqs, &QueueRef::Url(missing), 10, 5).await {
        RedriveCheck::Unreadable(e) => assert!(e.contains("GetQueueAttributes"), "{e}"),
        other => panic!("a missing queue is unreadable, not {other:?}"),
    }
}
