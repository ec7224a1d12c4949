//! The relay's answers for each record of a batch, against a mocked SQS: what is sent, what is
//! retried (and what it holds back), what is skipped and what is dead-lettered.

use std::sync::{Arc, Mutex};

use aws_lambda_events::dynamodb::EventRecord;
use aws_sdk_sqs::operation::send_message_batch::SendMessageBatchOutput;
use aws_sdk_sqs::types::{BatchResultErrorEntry, SendMessageBatchResultEntry};
use aws_smithy_mocks::{RuleMode, mock, mock_client};
use payments_publisher::{App, Config};
use serde_json::json;

const PAYMENTS: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/payments.fifo";
const OUTBOX_DLQ: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/payments-outbox-dlq";

type SentLog = Arc<Mutex<Vec<(String, String)>>>;

/// A stream record whose new image is `image` (DynamoDB JSON).
fn record(event_name: &str, sequence: &str, image: serde_json::Value) -> EventRecord {
    serde_json::from_value(json!({
        "eventID": format!("event-{sequence}"),
        "eventName": event_name,
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/payments/stream/2026-01-01T00:00:00.000",
        "dynamodb": {
            "ApproximateCreationDateTime": 1.7e9,
            "Keys": {"paymentId": image["paymentId"].clone()},
            "NewImage": image,
            "SequenceNumber": sequence,
            "SizeBytes": 100,
            "StreamViewType": "NEW_IMAGE"
        }
    }))
    .expect("a stream record")
}

/// A payment as payments-api writes it.
fn payment(id: &str, account: &str, description: &str) -> serde_json::Value {
    json!({
        "paymentId": {"S": id},
        "accountId": {"S": account},
        "amountCents": {"N": "100"},
        "currency": {"S": "EUR"},
        "description": {"S": description},
        "status": {"S": "accepted"},
        "createdAt": {"N": "1700000000000"},
        "callerId": {"S": account},
        "requestHash": {"S": "abc"}
    })
}

/// How the mock refuses an entry.
#[derive(Clone, Copy)]
enum Refusal {
    /// As the message's own fault (`SenderFault`, `InvalidParameterValue`): never sent.
    Sender,
    /// As SQS's (`InternalError`): the send may succeed later.
    Service,
    /// As the sender's, for the queue's key (`KmsInvalidState`): a misconfiguration, which the
    /// record waits out.
    Key,
}

/// An SQS client whose `SendMessageBatch` refuses, as `refusal` says, each entry whose body
/// contains `refuse` (on the payments queue), and every entry sent to the outbox DLQ when
/// `dlq_down`; it logs the bodies accepted, with their queue.
fn sqs(refuse: &'static str, dlq_down: bool) -> (aws_sdk_sqs::Client, SentLog) {
    sqs_refusing(refuse, Refusal::Service, dlq_down)
}

fn sqs_refusing(
    refuse: &'static str,
    refusal: Refusal,
    dlq_down: bool,
) -> (aws_sdk_sqs::Client, SentLog) {
    let sent = SentLog::default();
    let log = sent.clone();
    let rule = mock!(aws_sdk_sqs::Client::send_message_batch).then_compute_output(move |input| {
        let queue = input.queue_url().unwrap_or_default().to_owned();
        let mut out = SendMessageBatchOutput::builder()
            .set_successful(Some(vec![]))
            .set_failed(Some(vec![]));
        for e in input.entries() {
            let body = e.message_body();
            let refused = (queue == PAYMENTS && !refuse.is_empty() && body.contains(refuse))
                || (queue == OUTBOX_DLQ && dlq_down);
            let (sender_fault, code) = match refusal {
                _ if queue == OUTBOX_DLQ => (true, "InvalidParameterValue"),
                Refusal::Sender => (true, "InvalidParameterValue"),
                Refusal::Service => (false, "InternalError"),
                Refusal::Key => (true, "KmsInvalidState"),
            };
            out = if refused {
                out.failed(
                    BatchResultErrorEntry::builder()
                        .id(e.id())
                        .sender_fault(sender_fault)
                        .code(code)
                        .build()
                        .unwrap(),
                )
            } else {
                log.lock().unwrap().push((queue.clone(), body.to_owned()));
                out.successful(
                    SendMessageBatchResultEntry::builder()
                        .id(e.id())
                        .message_id(format!("m-{}", e.id()))
                        .md5_of_message_body("x")
                        .build()
                        .unwrap(),
                )
            };
        }
        out.build().unwrap()
    });
    // The dead-letter queue's size limit, which the library's dead-letter send reads.
    let limit = mock!(aws_sdk_sqs::Client::get_queue_attributes).then_output(|| {
        aws_sdk_sqs::operation::get_queue_attributes::GetQueueAttributesOutput::builder()
            .attributes(
                aws_sdk_sqs::types::QueueAttributeName::MaximumMessageSize,
                "262144",
            )
            .build()
    });
    (
        mock_client!(aws_sdk_sqs, RuleMode::MatchAny, [&rule, &limit]),
        sent,
    )
}

fn app(sqs: aws_sdk_sqs::Client) -> App {
    App::new(
        sqs,
        Config {
            payments_queue_url: PAYMENTS.into(),
            dead_letter_queue_url: Some(OUTBOX_DLQ.into()),
        },
    )
}

fn sent_ids(relayed: &payments_publisher::Relayed) -> Vec<&str> {
    relayed.sent.iter().map(|(id, _)| id.as_str()).collect()
}

#[tokio::test]
async fn a_refused_send_is_retried_with_the_rest_of_its_account_and_other_accounts_go_on() {
    let (client, sent) = sqs("pay-a1", false);
    let records = [
        record("INSERT", "1", payment("pay-a1", "acct-a", "first")),
        record("INSERT", "2", payment("pay-b1", "acct-b", "first")),
        record("INSERT", "3", payment("pay-a2", "acct-a", "second")),
        record("MODIFY", "4", payment("pay-b1", "acct-b", "first")),
    ];
    let relayed = app(client).relay(&records).await;
    assert_eq!(sent_ids(&relayed), ["pay-b1"]);
    // pay-a2 is held back behind pay-a1: a retry never lands behind a later payment.
    assert_eq!(relayed.failed, ["1", "3"]);
    assert_eq!(relayed.skipped, 1);
    let response = relayed.response();
    let ids: Vec<_> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_deref().unwrap())
        .collect();
    // The checkpoint alone: the lowest failed sequence number (Lambda retries from it).
    assert_eq!(ids, ["1"]);
    let sent = sent.lock().unwrap();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(sent[0].1.contains("pay-b1"), "{sent:?}");
}

#[tokio::test]
async fn a_message_sqs_refuses_as_its_own_fault_is_dead_lettered_and_its_account_goes_on() {
    // Retrying it cannot help, and the stream retries what is reported without a limit: it
    // would hold the shard for the records' 12 hours.
    let (client, sent) = sqs_refusing("pay-a1", Refusal::Sender, false);
    let records = [
        record("INSERT", "1", payment("pay-a1", "acct-a", "first")),
        record("INSERT", "2", payment("pay-b1", "acct-b", "first")),
        record("INSERT", "3", payment("pay-a2", "acct-a", "second")),
    ];
    let relayed = app(client).relay(&records).await;
    assert_eq!(relayed.failed, Vec::<String>::new());
    assert_eq!(sent_ids(&relayed), ["pay-b1", "pay-a2"]);
    assert_eq!(relayed.dead_lettered.len(), 1, "{relayed:?}");
    assert_eq!(relayed.dead_lettered[0].0, "1");
    assert!(
        relayed.dead_lettered[0].1.contains("InvalidParameterValue"),
        "{relayed:?}"
    );
    let sent = sent.lock().unwrap();
    assert_eq!(
        sent.iter().filter(|(q, _)| q == OUTBOX_DLQ).count(),
        1,
        "{sent:?}"
    );
}

#[tokio::test]
async fn a_queue_whose_key_refuses_the_sends_dead_letters_nothing() {
    let (client, sent) = sqs_refusing("pay-a1", Refusal::Key, false);
    let records = [
        record("INSERT", "1", payment("pay-a1", "acct-a", "first")),
        record("INSERT", "2", payment("pay-a2", "acct-a", "second")),
    ];
    let relayed = app(client).relay(&records).await;
    assert_eq!(relayed.failed, ["1", "2"]);
    assert_eq!(relayed.dead_lettered, Vec::<(String, String)>::new());
    assert!(sent.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_record_that_can_never_be_sent_is_dead_lettered_and_the_batch_goes_on() {
    let (client, sent) = sqs("", false);
    let mut not_a_payment = payment("pay-x", "acct-a", "x");
    not_a_payment.as_object_mut().unwrap().remove("amountCents");
    let records = [
        record("INSERT", "1", not_a_payment),
        // U+FFFF is outside SQS's characters, and JSON does not escape it (a control character
        // would be sent escaped, as `\u0007`, which SQS accepts).
        record("INSERT", "2", payment("pay-ffff", "acct-a", "end \u{FFFF}")),
        record("INSERT", "3", payment("pay-ok", "acct-a", "fine")),
    ];
    let relayed = app(client).relay(&records).await;
    assert_eq!(relayed.failed, Vec::<String>::new());
    assert_eq!(sent_ids(&relayed), ["pay-ok"]);
    let dead: Vec<_> = relayed
        .dead_lettered
        .iter()
        .map(|(s, _)| s.as_str())
        .collect();
    assert_eq!(dead, ["1", "2"]);
    assert!(
        relayed.dead_lettered[0].1.contains("not a payment item"),
        "{relayed:?}"
    );
    assert!(
        relayed.dead_lettered[1].1.contains("pay-ffff"),
        "{relayed:?}"
    );
    let sent = sent.lock().unwrap();
    let to_dlq: Vec<_> = sent.iter().filter(|(q, _)| q == OUTBOX_DLQ).collect();
    assert_eq!(to_dlq.len(), 2, "{sent:?}");
    let reason: serde_json::Value = serde_json::from_str(&to_dlq[0].1).unwrap();
    assert_eq!(reason["sequenceNumber"], "1");
    assert_eq!(reason["keys"]["paymentId"]["S"], "pay-x");
}

#[tokio::test]
async fn a_dead_letter_send_that_fails_is_retried_by_the_stream() {
    let (client, _) = sqs("", true);
    let mut broken = payment("pay-x", "acct-a", "x");
    broken.as_object_mut().unwrap().remove("currency");
    let relayed = app(client)
        .relay(&[
            record("INSERT", "1", broken),
            record("INSERT", "2", payment("pay-ok", "acct-b", "fine")),
        ])
        .await;
    assert_eq!(relayed.failed, ["1"]);
    assert_eq!(relayed.dead_lettered, Vec::<(String, String)>::new());
    assert_eq!(sent_ids(&relayed), ["pay-ok"]);
}

#[tokio::test]
async fn an_item_payment_processor_created_is_skipped_not_dead_lettered() {
    let (client, sent) = sqs("", false);
    let created_by_the_consumer = json!({
        "paymentId": {"S": "pay-c"},
        "accountId": {"S": "acct-a"},
        "amountCents": {"N": "100"},
        "currency": {"S": "EUR"},
        "status": {"S": "charged"},
        "chargedAt": {"N": "1700000000000"}
    });
    let relayed = app(client)
        .relay(&[record("INSERT", "1", created_by_the_consumer)])
        .await;
    assert_eq!(relayed.skipped, 1);
    assert!(relayed.sent.is_empty() && relayed.failed.is_empty());
    assert!(relayed.dead_lettered.is_empty());
    assert!(sent.lock().unwrap().is_empty());
}
