//! The cold-start check of a queue's redrive backstop, against real queues (moto).

mod common;

use aws_sdk_sqs::types::QueueAttributeName;
use lambda_idempotency::backoff::RetrySchedule;
use lambda_idempotency::count::RequestCounter;
use std::time::Duration;

use lambda_idempotency::redrive_policy::{
    Finding, OutageCover, QueueCheck, QueueLimits, QueueRef, RedriveCheck, check, check_queue,
    warn_if_too_low, warn_if_unsafe,
};

/// A FIFO queue with a FIFO dead-letter queue after `max_receive_count` receives (`None`: no
/// redrive policy). Returns the queue's URL and name.
async fn queue(sqs: &aws_sdk_sqs::Client, max_receive_count: Option<u32>) -> (String, String) {
    let name = format!("{}.fifo", common::unique("redrive"));
    let mut attributes = vec![(QueueAttributeName::FifoQueue, "true".to_owned())];
    if let Some(count) = max_receive_count {
        let dlq_name = format!("{}.fifo", common::unique("dlq"));
        let (_, dlq_arn) = common::create_queue(sqs, &dlq_name, &attributes).await;
        let policy =
            serde_json::json!({ "deadLetterTargetArn": dlq_arn, "maxReceiveCount": count });
        attributes.push((QueueAttributeName::RedrivePolicy, policy.to_string()));
    }
    let (url, _) = common::create_queue(sqs, &name, &attributes).await;
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

// --- the dead-letter queue's message size and the records' expiry ------------------------------

const FOUR_DAYS: u64 = 345_600;
const FOURTEEN_DAYS: u64 = 1_209_600;

/// A FIFO queue with `attributes`; its URL and ARN.
async fn fifo_queue(
    sqs: &aws_sdk_sqs::Client,
    attributes: &[(QueueAttributeName, String)],
) -> (String, String) {
    let mut attributes = attributes.to_vec();
    attributes.push((QueueAttributeName::FifoQueue, "true".into()));
    let name = format!("{}.fifo", common::unique("limits"));
    common::create_queue(sqs, &name, &attributes).await
}

fn limits(retention: u64, max_message_size: u32) -> Vec<(QueueAttributeName, String)> {
    vec![
        (
            QueueAttributeName::MessageRetentionPeriod,
            retention.to_string(),
        ),
        (
            QueueAttributeName::MaximumMessageSize,
            max_message_size.to_string(),
        ),
    ]
}

/// A queue (retention 4 days, `source_size` bytes) whose redrive policy (maxReceiveCount 64: 41
/// receives for batches of 10 and 5 attempts, and 23 for an outage of 4 days from 2 s)
/// names a dead-letter queue (retention 14 days, `dead_letter_size` bytes). The queue's URL, the
/// dead-letter queue's URL and ARN.
async fn pair(
    sqs: &aws_sdk_sqs::Client,
    source_size: u32,
    dead_letter_size: u32,
) -> (String, String, String) {
    let (dlq_url, dlq_arn) = fifo_queue(sqs, &limits(FOURTEEN_DAYS, dead_letter_size)).await;
    let mut attributes = limits(FOUR_DAYS, source_size);
    attributes.push((
        QueueAttributeName::RedrivePolicy,
        serde_json::json!({ "deadLetterTargetArn": dlq_arn, "maxReceiveCount": 64 }).to_string(),
    ));
    let (url, _) = fifo_queue(sqs, &attributes).await;
    (url, dlq_url, dlq_arn)
}

const ENOUGH: Duration = Duration::from_secs(FOUR_DAYS + FOURTEEN_DAYS);

/// The consumer's default backoff: from 2 s.
fn backoff() -> Option<RetrySchedule> {
    Some(RetrySchedule::new(
        Duration::from_secs(2),
        Duration::from_secs(300),
    ))
}

#[tokio::test]
async fn queues_that_fit_each_other_have_no_findings() {
    let sqs = common::sqs(&RequestCounter::default()).await;
    let (url, _, dlq_arn) = pair(&sqs, 262_144, 262_144).await;
    let found = warn_if_unsafe(&sqs, &QueueRef::Url(url), 10, 5, ENOUGH, backoff()).await;
    assert_eq!(
        found.redrive,
        RedriveCheck::Ok {
            max_receive_count: 64,
            required: 41
        }
    );
    assert_eq!(
        found.source,
        Some(QueueLimits {
            retention: Duration::from_secs(FOUR_DAYS),
            max_message_size: 262_144
        })
    );
    assert_eq!(
        found.dead_letter,
        Some(QueueLimits {
            retention: Duration::from_secs(FOURTEEN_DAYS),
            max_message_size: 262_144
        })
    );
    assert_eq!(found.dead_letter_arn, Some(dlq_arn));
    assert_eq!(found.findings, []);
}

#[tokio::test]
async fn a_dead_letter_queue_taking_smaller_messages_is_found_with_both_sizes() {
    let sqs = common::sqs(&RequestCounter::default()).await;
    let (url, _, _) = pair(&sqs, 1_048_576, 65_536).await;
    let found = warn_if_unsafe(&sqs, &QueueRef::Url(url), 10, 5, ENOUGH, backoff()).await;
    assert_eq!(
        found.findings,
        [Finding::DeadLetterTakesSmallerMessages {
            source: 1_048_576,
            dead_letter: 65_536
        }]
    );
    assert!(matches!(found.redrive, RedriveCheck::Ok { .. }));
    // A larger dead-letter queue is fine.
    let (url, _, _) = pair(&sqs, 65_536, 1_048_576).await;
    assert_eq!(
        check_queue(&sqs, &QueueRef::Url(url), 10, 5, ENOUGH, backoff())
            .await
            .findings,
        []
    );
}

#[tokio::test]
async fn an_expiry_shorter_than_both_retentions_is_found_with_the_numbers() {
    let sqs = common::sqs(&RequestCounter::default()).await;
    let (url, _, _) = pair(&sqs, 262_144, 262_144).await;
    let queue = QueueRef::Url(url);
    let short = ENOUGH - Duration::from_secs(1);
    let found = warn_if_unsafe(&sqs, &queue, 10, 5, short, backoff()).await;
    assert_eq!(
        found.findings,
        [Finding::ExpiryTooShort {
            expiry: short,
            source_retention: Duration::from_secs(FOUR_DAYS),
            dead_letter_retention: Duration::from_secs(FOURTEEN_DAYS),
            required: ENOUGH,
        }]
    );
    // The library's default expiry (24 hours) is far too short for these queues.
    let found = check_queue(&sqs, &queue, 10, 5, Duration::from_secs(86_400), backoff()).await;
    assert!(
        matches!(found.findings[..], [Finding::ExpiryTooShort { required, .. }] if required == ENOUGH),
        "{found:?}"
    );
    assert_eq!(
        check_queue(&sqs, &queue, 10, 5, ENOUGH, backoff())
            .await
            .findings,
        []
    );
}

#[tokio::test]
async fn every_finding_is_reported_together_and_the_backstop_still_checked() {
    let sqs = common::sqs(&RequestCounter::default()).await;
    let (url, _, _) = pair(&sqs, 262_144, 1_024).await;
    let found = warn_if_unsafe(
        &sqs,
        &QueueRef::Url(url),
        10,
        8,
        Duration::from_secs(60),
        backoff(),
    )
    .await;
    assert_eq!(
        found.redrive,
        RedriveCheck::TooLow {
            max_receive_count: 64,
            required: 71
        }
    );
    assert_eq!(found.findings.len(), 3, "{found:?}");
    assert!(matches!(
        found.findings[0],
        Finding::OutageCanMove(OutageCover {
            max_receive_count: 64,
            attempt_bound: 71,
            outage_receives: 23,
            required: 94,
            ..
        })
    ));
    assert!(matches!(
        found.findings[1],
        Finding::DeadLetterTakesSmallerMessages {
            source: 262_144,
            dead_letter: 1_024
        }
    ));
    assert!(matches!(found.findings[2], Finding::ExpiryTooShort { .. }));
}

// --- an outage as long as the queue's retention --------------------------------------------------

/// A queue keeping its messages `retention` s with visibility timeout `visibility` s, whose
/// redrive policy moves a message after `max_receive_count` receives; its URL.
async fn retained(
    sqs: &aws_sdk_sqs::Client,
    retention: u64,
    visibility: u32,
    max_receive_count: u32,
) -> String {
    let (_, dlq_arn) = fifo_queue(sqs, &limits(FOURTEEN_DAYS, 262_144)).await;
    let mut attributes = limits(retention, 262_144);
    attributes.push((
        QueueAttributeName::VisibilityTimeout,
        visibility.to_string(),
    ));
    attributes.push((
        QueueAttributeName::RedrivePolicy,
        serde_json::json!({ "deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receive_count })
            .to_string(),
    ));
    fifo_queue(sqs, &attributes).await.0
}

/// The cold-start check finds a `maxReceiveCount` that covers the attempt bound but not an
/// outage as long as the queue's retention on top of it, with the numbers: the pipeline's old
/// backstop (41 for 5 attempts, 4 days), and 14 days at the default base; the exact sum passes.
/// With the backoff off, an outage's receives come every visibility timeout: SQS's largest
/// `maxReceiveCount` (1000) does not cover 4 days of them.
#[tokio::test]
async fn a_backstop_an_outage_as_long_as_the_retention_can_reach_is_found_with_the_numbers() {
    let sqs = common::sqs(&RequestCounter::default()).await;
    let outage = |found: &QueueCheck| match &found.findings[..] {
        [Finding::OutageCanMove(cover)] => *cover,
        other => panic!("one outage finding, not {other:?}"),
    };
    let old = QueueRef::Url(retained(&sqs, FOUR_DAYS, 180, 41).await);
    let found = warn_if_unsafe(&sqs, &old, 10, 5, ENOUGH, backoff()).await;
    assert!(
        matches!(found.redrive, RedriveCheck::Ok { .. }),
        "{found:?}"
    );
    let cover = outage(&found);
    assert_eq!(
        (cover.attempt_bound, cover.outage_receives, cover.required),
        (41, 23, 64)
    );
    assert_eq!(cover.retention, Duration::from_secs(FOUR_DAYS));
    assert_eq!(
        cover.longest_outage,
        Duration::ZERO,
        "no receive left for an outage"
    );
    let message = cover.to_string();
    for number in [
        "maxReceiveCount 41",
        "(345600 s)",
        "up to 23 receives",
        "at least 64 = 41 + 23",
    ] {
        assert!(message.contains(number), "{number}: {message}");
    }
    // One attempt: 1 receive, and 23 for the outage; a backstop of 11 covers an outage of 34
    // minutes (the 11th receive comes 2046 s after the first).
    let found = check_queue(
        &sqs,
        &QueueRef::Url(retained(&sqs, FOUR_DAYS, 180, 11).await),
        10,
        1,
        ENOUGH,
        backoff(),
    )
    .await;
    let cover = outage(&found);
    assert_eq!((cover.attempt_bound, cover.required), (1, 24));
    assert_eq!(cover.longest_outage, Duration::from_secs(2045));
    let fits = QueueRef::Url(retained(&sqs, FOUR_DAYS, 180, 24).await);
    assert_eq!(
        check_queue(&sqs, &fits, 10, 1, ENOUGH, backoff())
            .await
            .findings,
        []
    );
    // 14 days: 44 receives from 2 s.
    let long = QueueRef::Url(retained(&sqs, FOURTEEN_DAYS, 180, 84).await);
    let expiry = Duration::from_secs(2 * FOURTEEN_DAYS);
    let cover = outage(&check_queue(&sqs, &long, 10, 5, expiry, backoff()).await);
    assert_eq!((cover.outage_receives, cover.required), (44, 85));
    let long = QueueRef::Url(retained(&sqs, FOURTEEN_DAYS, 180, 85).await);
    assert_eq!(
        check_queue(&sqs, &long, 10, 5, expiry, backoff())
            .await
            .findings,
        []
    );
    // The backoff off: one receive per 180 s, 1921 in 4 days.
    let off = QueueRef::Url(retained(&sqs, FOUR_DAYS, 180, 1000).await);
    let cover = outage(&check_queue(&sqs, &off, 10, 5, ENOUGH, None).await);
    assert_eq!((cover.outage_receives, cover.required), (1921, 1962));
    assert_eq!(cover.visibility_timeout, Duration::from_secs(180));
    assert!(cover.to_string().contains("turn the backoff on"), "{cover}");
}

#[tokio::test]
async fn without_a_redrive_policy_the_expiry_is_checked_against_the_queues_retention() {
    let sqs = common::sqs(&RequestCounter::default()).await;
    let (url, _) = fifo_queue(&sqs, &limits(FOUR_DAYS, 262_144)).await;
    let queue = QueueRef::Url(url);
    let found = warn_if_unsafe(&sqs, &queue, 10, 5, Duration::from_secs(86_400), backoff()).await;
    assert_eq!(found.redrive, RedriveCheck::NoRedrivePolicy);
    assert_eq!(found.dead_letter_arn, None);
    assert_eq!(
        found.findings,
        [Finding::ExpiryTooShort {
            expiry: Duration::from_secs(86_400),
            source_retention: Duration::from_secs(FOUR_DAYS),
            dead_letter_retention: Duration::ZERO,
            required: Duration::from_secs(FOUR_DAYS),
        }]
    );
    assert_eq!(
        check_queue(
            &sqs,
            &queue,
            10,
            5,
            Duration::from_secs(FOUR_DAYS),
            backoff()
        )
        .await
        .findings,
        []
    );
}

#[tokio::test]
async fn an_unreadable_dead_letter_queue_is_a_finding_not_a_failure() {
    let sqs = common::sqs(&RequestCounter::default()).await;
    let (url, dlq_url, _) = pair(&sqs, 262_144, 262_144).await;
    sqs.delete_queue().queue_url(&dlq_url).send().await.unwrap();
    let found = warn_if_unsafe(&sqs, &QueueRef::Url(url), 10, 5, ENOUGH, backoff()).await;
    assert!(matches!(found.redrive, RedriveCheck::Ok { .. }));
    assert_eq!(found.dead_letter, None);
    assert!(
        matches!(&found.findings[..], [Finding::Unreadable(e)] if e.contains("GetQueueUrl")),
        "{found:?}"
    );
    // A missing source queue: unreadable, no findings, no error.
    let missing = format!(
        "{}/123456789012/{}",
        common::endpoint().trim_end_matches('/'),
        common::unique("missing")
    );
    let found = warn_if_unsafe(&sqs, &QueueRef::Url(missing), 10, 5, ENOUGH, backoff()).await;
    assert!(
        matches!(&found.redrive, RedriveCheck::Unreadable(e) if e.contains("GetQueueAttributes")),
        "{found:?}"
    );
    assert_eq!(found.findings, []);
}
