//! The publisher on its sample request, against the local SQS (README.md, "Test it").

use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use fifo_publisher::{App, PublishRequest, RequestError};
use lambda_idempotency::publish::{DeduplicationId, InvalidMessage};
use lambda_runtime::{Context, LambdaEvent};

mod local;

const REQUEST: &str = include_str!("../events/publish.json");

fn request() -> PublishRequest {
    serde_json::from_str(REQUEST).expect("the sample request")
}

fn event(request: PublishRequest) -> LambdaEvent<PublishRequest> {
    LambdaEvent::new(request, Context::default())
}

async fn fixture() -> (App, aws_sdk_sqs::Client, String) {
    let sqs = aws_sdk_sqs::Client::new(&local::sdk_config().await);
    let queue_url = local::create_fifo_queue(&sqs, "payments").await;
    (App::new(sqs.clone(), &queue_url), sqs, queue_url)
}

async fn queued(sqs: &aws_sdk_sqs::Client, queue_url: &str) -> usize {
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .unwrap();
    let count = &attributes.attributes().unwrap()[&QueueAttributeName::ApproximateNumberOfMessages];
    count.parse().unwrap()
}

/// Every message of the queue, in the order SQS delivers them, as (group, deduplication id,
/// paymentId of the body).
async fn drain(sqs: &aws_sdk_sqs::Client, queue_url: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for _ in 0..10 {
        let received = sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .unwrap();
        let messages = received.messages.unwrap_or_default();
        if messages.is_empty() {
            break;
        }
        for m in messages {
            let attributes = m.attributes.clone().unwrap_or_default();
            let body: serde_json::Value = serde_json::from_str(m.body().unwrap()).unwrap();
            out.push((
                attributes[&MessageSystemAttributeName::MessageGroupId].clone(),
                attributes[&MessageSystemAttributeName::MessageDeduplicationId].clone(),
                body["paymentId"].as_str().unwrap().to_owned(),
            ));
            let handle = m.receipt_handle().unwrap();
            let delete = sqs
                .delete_message()
                .queue_url(queue_url)
                .receipt_handle(handle);
            delete.send().await.unwrap();
        }
    }
    out
}

#[tokio::test]
async fn a_repeated_request_enqueues_each_message_once_in_group_order() {
    let (app, sqs, queue_url) = fixture().await;

    let first = app.handle(event(request())).await.unwrap();
    assert_eq!(first.sent.len(), 3, "{first:?}");
    assert!(first.failed.is_empty(), "{first:?}");
    // The caller did not hear back and sends the same request again: SQS accepts the messages
    // and, within its deduplication window, does not enqueue them again.
    let again = app.handle(event(request())).await.unwrap();
    assert_eq!(again.sent.len(), 3, "{again:?}");
    assert_eq!(queued(&sqs, &queue_url).await, 3);

    let delivered = drain(&sqs, &queue_url).await;
    assert_eq!(delivered.len(), 3, "{delivered:?}");
    let of_group = |group: &str| -> Vec<&str> {
        let in_group = delivered.iter().filter(|(g, _, _)| g == group);
        in_group.map(|(_, _, payment)| payment.as_str()).collect()
    };
    assert_eq!(of_group("acct-42"), ["pay-001", "pay-003"], "out of order");
    assert_eq!(of_group("acct-7"), ["pay-002"]);
    for (_, dedup, payment) in &delivered {
        assert_eq!(dedup, DeduplicationId::from_key(payment).as_str());
    }
}

#[tokio::test]
async fn an_invalid_message_refuses_the_request_before_anything_is_sent() {
    let (app, sqs, queue_url) = fixture().await;
    let mut request = request();
    request.messages[1].group_id = "acct 7".into();

    let error = app.handle(event(request)).await.unwrap_err();

    assert!(
        matches!(
            &error,
            RequestError::InvalidMessage {
                index: 1,
                source: InvalidMessage::IdCharacter {
                    field: "MessageGroupId",
                    ch: ' ',
                    ..
                },
            }
        ),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .starts_with("message 1 is invalid: MessageGroupId has ' '")
    );
    assert_eq!(queued(&sqs, &queue_url).await, 0, "a message was sent");
}
