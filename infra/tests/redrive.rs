//! Redrive against the local endpoint (moto): dead-letter queue back to its source queue.
//!
//! Run with `infra/local-aws/local-aws run -- cargo nextest run -p local-aws --test redrive`;
//! without `AWS_ENDPOINT_URL` every test fails (it never skips).

mod common;

use std::collections::{BTreeMap, HashMap};

use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName};
use local_aws::Clients;
use local_aws::provision::ProvisionedQueue;
use local_aws::redrive::{self, QueueRef, RedriveOptions, RedriveReport};
use local_aws::runner::{QueueDepth, queue_depth};
use local_aws::template::{Naming, Template, TemplateOptions};

/// A message to put into a dead-letter queue.
struct Put<'a> {
    group: Option<&'a str>,
    body: String,
}

fn put(group: Option<&str>, body: impl Into<String>) -> Put<'_> {
    Put {
        group,
        body: body.into(),
    }
}

fn string(value: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(value)
        .build()
        .unwrap()
}

/// The attributes every test message carries: three of its own, three of a dead-letter step.
fn attributes(body: &str) -> HashMap<String, MessageAttributeValue> {
    HashMap::from([
        ("kind".to_owned(), string(&format!("kind-of-{body}"))),
        (
            "amount".to_owned(),
            MessageAttributeValue::builder()
                .data_type("Number")
                .string_value("42")
                .build()
                .unwrap(),
        ),
        (
            "raw".to_owned(),
            MessageAttributeValue::builder()
                .data_type("Binary")
                .binary_value(Blob::new(vec![0u8, 1, 2, 255]))
                .build()
                .unwrap(),
        ),
        (
            "DeadLetterReason".to_owned(),
            string("payment-processor: card declined"),
        ),
        (
            "DeadLetterSourceMessageId".to_owned(),
            string("original-id"),
        ),
        (
            "DeadLetterSourceQueueArn".to_owned(),
            string("arn:aws:sqs:us-east-1:123456789012:payments.fifo"),
        ),
    ])
}

/// Sends `messages` to `queue` (FIFO: the dedup id is `orig-{body}`), with [`attributes`].
async fn fill(clients: &Clients, queue: &ProvisionedQueue, messages: &[Put<'_>]) {
    for m in messages {
        clients
            .sqs
            .send_message()
            .queue_url(&queue.url)
            .message_body(&m.body)
            .set_message_attributes(Some(attributes(&m.body)))
            .set_message_group_id(m.group.map(str::to_owned))
            .set_message_deduplication_id(queue.fifo.then(|| format!("orig-{}", m.body)))
            .send()
            .await
            .expect("SendMessage");
    }
}

/// A message as the source queue gives it back.
#[derive(Debug)]
struct Got {
    body: String,
    group: Option<String>,
    dedup: Option<String>,
    attributes: HashMap<String, MessageAttributeValue>,
}

/// Receives and deletes everything in `url`, in the order the queue gives it.
async fn drain(clients: &Clients, url: &str) -> Vec<Got> {
    let mut out = Vec::new();
    loop {
        let messages = clients
            .sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .wait_time_seconds(0)
            .send()
            .await
            .expect("ReceiveMessage")
            .messages
            .unwrap_or_default();
        if messages.is_empty() {
            return out;
        }
        for m in messages {
            clients
                .sqs
                .delete_message()
                .queue_url(url)
                .receipt_handle(m.receipt_handle().unwrap())
                .send()
                .await
                .expect("DeleteMessage");
            let system = m.attributes().cloned().unwrap_or_default();
            out.push(Got {
                body: m.body().unwrap_or_default().to_owned(),
                group: system
                    .get(&MessageSystemAttributeName::MessageGroupId)
                    .cloned(),
                dedup: system
                    .get(&MessageSystemAttributeName::MessageDeduplicationId)
                    .cloned(),
                attributes: m.message_attributes().cloned().unwrap_or_default(),
            });
        }
    }
}

async fn depth(clients: &Clients, url: &str) -> QueueDepth {
    queue_depth(&clients.sqs, url).await.expect("queue depth")
}

/// The bodies of each group, in the order they came.
fn by_group(got: &[Got]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for g in got {
        out.entry(g.group.clone().unwrap_or_default())
            .or_default()
            .push(g.body.clone());
    }
    out
}

/// Each message kept its own attributes and lost the dead-letter ones.
fn assert_attributes(got: &[Got]) {
    for g in got {
        let mut names: Vec<_> = g.attributes.keys().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["amount", "kind", "raw"], "{g:?}");
        assert_eq!(
            g.attributes["kind"].string_value(),
            Some(format!("kind-of-{}", g.body).as_str())
        );
        assert_eq!(g.attributes["amount"].data_type(), "Number");
        assert_eq!(g.attributes["amount"].string_value(), Some("42"));
        assert_eq!(
            g.attributes["raw"]
                .binary_value()
                .map(|b| b.as_ref().to_vec()),
            Some(vec![0u8, 1, 2, 255])
        );
    }
}

fn assert_counts(report: &RedriveReport, received: usize, moved: usize, failed: usize) {
    assert_eq!(
        (report.received, report.moved, report.failed.len()),
        (received, moved, failed),
        "{report:#?}"
    );
    assert_eq!(report.moved_ids.len(), report.moved, "{report:#?}");
}

#[tokio::test]
async fn fifo_redrive_keeps_bodies_groups_order_and_attributes() {
    let clients = common::clients().await;
    let (source, dlq) = common::queue_with_dlq(&clients, true, 30, 5).await;
    // 15 messages (two receives and more) in three interleaved groups.
    let messages: Vec<_> = (0..15)
        .map(|i| {
            put(
                Some(["acct-a", "acct-b", "acct-c"][i % 3]),
                format!("p{i:02}"),
            )
        })
        .collect();
    fill(&clients, &dlq, &messages).await;

    let report = redrive::redrive(
        &clients.sqs,
        &dlq.url,
        &source.url,
        RedriveOptions::default(),
    )
    .await
    .unwrap();
    assert_counts(&report, 15, 15, 0);
    assert!(report.is_success(), "{report}");
    assert!(
        report
            .to_string()
            .starts_with("moved 15 of 15 received, 0 failed, in "),
        "{report}"
    );
    assert_eq!(report.released, 0);
    assert_eq!(report.left_in_dlq, Some(0));

    let got = drain(&clients, &source.url).await;
    assert_eq!(got.len(), 15, "{got:#?}");
    let expected = BTreeMap::from([
        ("acct-a".to_owned(), vec!["p00", "p03", "p06", "p09", "p12"]),
        ("acct-b".to_owned(), vec!["p01", "p04", "p07", "p10", "p13"]),
        ("acct-c".to_owned(), vec!["p02", "p05", "p08", "p11", "p14"]),
    ]);
    let expected: BTreeMap<_, Vec<String>> = expected
        .into_iter()
        .map(|(g, b)| (g, b.into_iter().map(str::to_owned).collect()))
        .collect();
    assert_eq!(by_group(&got), expected, "groups kept, in order");
    assert_attributes(&got);
    for g in &got {
        let dedup = g.dedup.as_deref().unwrap();
        assert!(dedup.starts_with("redrive-"), "a new dedup id: {dedup}");
        assert_ne!(dedup, format!("orig-{}", g.body));
    }
    assert!(
        depth(&clients, &dlq.url).await.is_empty(),
        "the DLQ is empty"
    );
}

#[tokio::test]
async fn standard_redrive_stops_at_max_then_moves_the_rest() {
    let clients = common::clients().await;
    let (source, dlq) = common::queue_with_dlq(&clients, false, 30, 5).await;
    let messages: Vec<_> = (0..25).map(|i| put(None, format!("r{i:02}"))).collect();
    fill(&clients, &dlq, &messages).await;

    // Without --to: the source from ListDeadLetterSourceQueues (no template).
    let dlq_ref = redrive::resolve_queue(&clients.sqs, None, &dlq.url)
        .await
        .unwrap();
    let found = redrive::resolve_source(&clients.sqs, None, &dlq_ref)
        .await
        .unwrap();
    assert_eq!(found.url, source.url);

    let report = redrive::redrive(
        &clients.sqs,
        &dlq.url,
        &found.url,
        RedriveOptions::default().max_messages(12),
    )
    .await
    .unwrap();
    assert_counts(&report, 12, 12, 0);
    assert_eq!(report.left_in_dlq, Some(13));
    let left = depth(&clients, &dlq.url).await;
    assert_eq!((left.visible, left.not_visible), (13, 0), "{left:?}");

    let rest = redrive::redrive(
        &clients.sqs,
        &dlq.url,
        &source.url,
        RedriveOptions::default(),
    )
    .await
    .unwrap();
    assert_counts(&rest, 13, 13, 0);
    assert!(depth(&clients, &dlq.url).await.is_empty());

    let got = drain(&clients, &source.url).await;
    let mut bodies: Vec<_> = got.iter().map(|g| g.body.clone()).collect();
    bodies.sort();
    assert_eq!(
        bodies,
        messages.iter().map(|m| m.body.clone()).collect::<Vec<_>>()
    );
    assert_attributes(&got);
    assert!(got.iter().all(|g| g.group.is_none() && g.dedup.is_none()));
}

#[tokio::test]
async fn a_recently_used_dedup_id_does_not_swallow_the_redriven_message() {
    let clients = common::clients().await;
    let (source, dlq) = common::queue_with_dlq(&clients, true, 30, 5).await;
    // The source queue still remembers the original dedup id (`orig-pay-1`): on AWS it would
    // for 5 minutes after the message moved; moto remembers it while a message holds it.
    fill(&clients, &source, &[put(Some("acct-1"), "pay-1")]).await;
    fill(&clients, &dlq, &[put(Some("acct-1"), "pay-1")]).await;
    // Proof that it does: a resend with the original id is dropped.
    fill(&clients, &source, &[put(Some("acct-1"), "pay-1")]).await;
    assert_eq!(depth(&clients, &source.url).await.visible, 1);

    let report = redrive::redrive(
        &clients.sqs,
        &dlq.url,
        &source.url,
        RedriveOptions::default(),
    )
    .await
    .unwrap();
    assert_counts(&report, 1, 1, 0);
    let got = drain(&clients, &source.url).await;
    let bodies: Vec<_> = got.iter().map(|g| g.body.as_str()).collect();
    assert_eq!(bodies, ["pay-1", "pay-1"], "the redriven copy arrived");
    assert!(
        got[1]
            .dedup
            .as_deref()
            .unwrap()
            .starts_with(&format!("redrive-{}-", report.moved_ids[0].0)),
        "{got:#?}"
    );
    assert!(depth(&clients, &dlq.url).await.is_empty());
}

#[tokio::test]
async fn a_target_that_does_not_exist_fails_every_send_and_deletes_nothing() {
    let clients = common::clients().await;
    let (_source, dlq) = common::queue_with_dlq(&clients, true, 30, 5).await;
    let messages: Vec<_> = (0..5)
        .map(|i| put(Some(["g1", "g2"][i % 2]), format!("m{i}")))
        .collect();
    fill(&clients, &dlq, &messages).await;
    let nowhere = dlq.url.replace(&dlq.name, "no-such-queue.fifo");

    let report = redrive::redrive(&clients.sqs, &dlq.url, &nowhere, RedriveOptions::default())
        .await
        .unwrap();
    assert!(!report.is_success());
    assert_eq!(report.moved, 0, "{report:#?}");
    assert!(report.received >= 1);
    assert_eq!(report.failed.len(), report.received, "{report:#?}");
    assert!(
        report
            .failed
            .iter()
            .all(|(_, e)| e.contains("NonExistentQueue")
                || e.contains("QueueDoesNotExist")
                || e.contains("the run stopped")),
        "{report:#?}"
    );
    assert!(report.stopped.is_some(), "{report:#?}");
    assert_eq!(report.released, report.received);
    // Every message is still there, and visible again at once.
    let left = depth(&clients, &dlq.url).await;
    assert_eq!((left.visible, left.not_visible), (5, 0), "{left:?}");
}

#[tokio::test]
async fn a_failed_send_stays_in_the_dlq_and_holds_back_its_group() {
    let clients = common::clients().await;
    let dlq_model = common::queue_model("dlq", true, 30);
    let dlq = local_aws::provision::create_queue(&clients.sqs, &dlq_model, None)
        .await
        .unwrap();
    // The source takes at most 1 KiB: the 2 KB message cannot go back.
    let mut model = common::queue_model("src", true, 30);
    model.maximum_message_size = Some(1024);
    let source = local_aws::provision::create_queue(&clients.sqs, &model, None)
        .await
        .unwrap();
    let big = "x".repeat(2000);
    fill(
        &clients,
        &dlq,
        &[
            put(Some("g"), "g1"),
            put(Some("h"), "h1"),
            put(Some("g"), big.clone()),
            put(Some("h"), "h2"),
            put(Some("g"), "g3"),
            put(Some("h"), "h3"),
        ],
    )
    .await;

    let report = redrive::redrive(
        &clients.sqs,
        &dlq.url,
        &source.url,
        RedriveOptions::default(),
    )
    .await
    .unwrap();
    assert_counts(&report, 6, 4, 2);
    assert!(!report.is_success());
    assert!(report.stopped.is_none(), "{report:#?}");
    assert!(
        report.failed[0].1.contains("InvalidParameterValue"),
        "{report:#?}"
    );
    assert!(
        report.failed[1].1.contains("of its group (g) was not sent"),
        "{report:#?}"
    );
    assert_eq!(report.released, 2);

    let got = drain(&clients, &source.url).await;
    assert_eq!(
        by_group(&got),
        BTreeMap::from([
            ("g".to_owned(), vec!["g1".to_owned()]),
            (
                "h".to_owned(),
                vec!["h1".to_owned(), "h2".to_owned(), "h3".to_owned()]
            ),
        ])
    );
    // The big one and the one after it in its group are in the DLQ, in order, visible again.
    let left = drain(&clients, &dlq.url).await;
    let left: Vec<_> = left.iter().map(|g| g.body.as_str()).collect();
    assert_eq!(left, [big.as_str(), "g3"]);
}

#[tokio::test]
async fn dry_run_moves_nothing() {
    let clients = common::clients().await;
    let (source, dlq) = common::queue_with_dlq(&clients, false, 30, 5).await;
    let messages: Vec<_> = (0..4).map(|i| put(None, format!("d{i}"))).collect();
    fill(&clients, &dlq, &messages).await;

    let report = redrive::redrive(
        &clients.sqs,
        &dlq.url,
        &source.url,
        RedriveOptions::default().dry_run(true),
    )
    .await
    .unwrap();
    assert!(report.dry_run && report.is_success(), "{report:#?}");
    assert_counts(&report, 4, 0, 0);
    assert_eq!(report.released, 4);
    assert_eq!(report.left_in_dlq, Some(4));
    assert!(report.to_string().starts_with("dry run: 4 received"));
    assert!(depth(&clients, &source.url).await.is_empty());
    let left = depth(&clients, &dlq.url).await;
    assert_eq!((left.visible, left.not_visible), (4, 0), "{left:?}");
}

#[tokio::test]
async fn the_binary_redrives_by_logical_id_from_the_template() {
    let clients = common::clients().await;
    let naming = Naming::unique("rd");
    let prefix = naming.prefix_str().to_owned();
    let template = Template::load_project(
        &TemplateOptions::default()
            .naming(naming)
            .parameter("MaxAttempts", "1"),
    )
    .unwrap();
    let resources = local_aws::provision::provision(&clients, &template)
        .await
        .unwrap();
    let payments = &resources.queues["PaymentsQueue"];
    let dlq = &resources.queues["PaymentsDeadLetterQueue"];

    // The library finds the pair by logical id.
    let found = redrive::resolve_queue(&clients.sqs, Some(&template), "PaymentsDeadLetterQueue")
        .await
        .unwrap();
    assert_eq!(
        found,
        QueueRef {
            logical_id: Some("PaymentsDeadLetterQueue".into()),
            name: dlq.name.clone(),
            url: dlq.url.clone()
        }
    );
    let source = redrive::resolve_source(&clients.sqs, Some(&template), &found)
        .await
        .unwrap();
    assert_eq!(source.url, payments.url);

    // Three payments dead-lettered by the queue itself (MaxAttempts 1: maxReceiveCount 1). One per group:
    // moto's own dead-lettering can reorder a group (it skips a message whose group has
    // another one in flight); the order within groups is tested above.
    fill(
        &clients,
        payments,
        &[
            put(Some("acct-1"), "a"),
            put(Some("acct-2"), "b"),
            put(Some("acct-3"), "c"),
        ],
    )
    .await;
    for _ in 0..4 {
        clients
            .sqs
            .receive_message()
            .queue_url(&payments.url)
            .max_number_of_messages(10)
            .visibility_timeout(0)
            .send()
            .await
            .unwrap();
    }
    assert!(depth(&clients, &payments.url).await.is_empty());
    assert_eq!(depth(&clients, &dlq.url).await.visible, 3);

    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_redrive"))
            .args(args)
            .output()
            .expect("run redrive");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), text)
    };
    let from = ["--from", "PaymentsDeadLetterQueue", "--prefix", &prefix];

    let (code, out) = run(&[&from[..], &["--dry-run"]].concat());
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("dry run: 3 received"), "{out}");
    assert!(
        out.contains(&format!("to PaymentsQueue ({})", payments.url)),
        "{out}"
    );

    // A target that does not exist: every send fails, exit 1, nothing moved.
    let nowhere = payments.url.replace(&payments.name, "no-such-queue.fifo");
    let (code, out) = run(&[&from[..], &["--to", &nowhere]].concat());
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("moved 0 of"), "{out}");
    assert!(out.contains("failed "), "{out}");
    assert!(
        out.contains("left in the dead-letter queue: about 3"),
        "{out}"
    );
    assert_eq!(depth(&clients, &dlq.url).await.visible, 3);

    let (code, out) = run(&[&from[..], &["--max", "2"]].concat());
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("moved 2 of 2 received, 0 failed"), "{out}");
    let (code, out) = run(&from);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("moved 1 of 1 received, 0 failed"), "{out}");

    let got = drain(&clients, &payments.url).await;
    assert_eq!(
        by_group(&got),
        BTreeMap::from([
            ("acct-1".to_owned(), vec!["a".to_owned()]),
            ("acct-2".to_owned(), vec!["b".to_owned()]),
            ("acct-3".to_owned(), vec!["c".to_owned()]),
        ])
    );
    assert!(depth(&clients, &dlq.url).await.is_empty());

    let (code, out) = run(&["--from", "NoSuchQueue", "--prefix", &prefix]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("no queue NoSuchQueue"), "{out}");
    assert_eq!(run(&["--bogus"]).0, Some(2));
}
