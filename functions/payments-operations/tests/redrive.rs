//! Redrive against the local endpoint (moto): dead-letter queue back to its source queue.
//!
//! Run with `infra/local-aws/local-aws run -- cargo nextest run -p payments-operations --test
//! redrive`; without `AWS_ENDPOINT_URL` every test fails (it never skips).

mod common;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName, QueueAttributeName};
use common::{Depth, Queue};
use payments_operations::redrive::{self, QueueRef, RedriveOptions, RedriveReport, Route};

const REDRIVE: &str = env!("CARGO_BIN_EXE_redrive");

async fn sqs() -> Client {
    Client::new(&common::sdk().await)
}

/// The options of these tests: no long poll (the queue is local), so a run ends at once.
fn options() -> RedriveOptions {
    RedriveOptions::default().wait_time(Duration::ZERO)
}

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
async fn fill(sqs: &Client, queue: &Queue, messages: &[Put<'_>]) {
    for m in messages {
        sqs.send_message()
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
async fn drain(sqs: &Client, url: &str) -> Vec<Got> {
    let mut out = Vec::new();
    loop {
        let messages = sqs
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
            sqs.delete_message()
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

async fn depth(sqs: &Client, url: &str) -> Depth {
    common::depth(sqs, url).await
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
    let sqs = sqs().await;
    let (source, dlq) = common::queue_with_dlq(&sqs, true, 5).await;
    // 15 messages (two receives and more) in three interleaved groups.
    let messages: Vec<_> = (0..15)
        .map(|i| {
            put(
                Some(["acct-a", "acct-b", "acct-c"][i % 3]),
                format!("p{i:02}"),
            )
        })
        .collect();
    fill(&sqs, &dlq, &messages).await;

    let report = redrive::redrive(&sqs, &dlq.url, &source.url, options())
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

    let got = drain(&sqs, &source.url).await;
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
    assert!(depth(&sqs, &dlq.url).await.is_empty(), "the DLQ is empty");
}

#[tokio::test]
async fn standard_redrive_stops_at_max_then_moves_the_rest() {
    let sqs = sqs().await;
    let (source, dlq) = common::queue_with_dlq(&sqs, false, 5).await;
    let messages: Vec<_> = (0..25).map(|i| put(None, format!("r{i:02}"))).collect();
    fill(&sqs, &dlq, &messages).await;

    // Without --to: the source from ListDeadLetterSourceQueues.
    let dlq_ref = redrive::resolve_queue(&sqs, &dlq.url).await.unwrap();
    let found = redrive::resolve_source(&sqs, &dlq_ref).await.unwrap();
    assert_eq!(
        found,
        QueueRef {
            name: source.name.clone(),
            url: source.url.clone()
        }
    );

    let report = redrive::redrive(&sqs, &dlq.url, &found.url, options().max_messages(12))
        .await
        .unwrap();
    assert_counts(&report, 12, 12, 0);
    assert_eq!(report.left_in_dlq, Some(13));
    let left = depth(&sqs, &dlq.url).await;
    assert_eq!((left.visible, left.not_visible), (13, 0), "{left:?}");

    let rest = redrive::redrive(&sqs, &dlq.url, &source.url, options())
        .await
        .unwrap();
    assert_counts(&rest, 13, 13, 0);
    assert!(depth(&sqs, &dlq.url).await.is_empty());

    let got = drain(&sqs, &source.url).await;
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
    let sqs = sqs().await;
    let (source, dlq) = common::queue_with_dlq(&sqs, true, 5).await;
    // The source queue still remembers the original dedup id (`orig-pay-1`): on AWS it would
    // for 5 minutes after the message moved; moto remembers it while a message holds it.
    fill(&sqs, &source, &[put(Some("acct-1"), "pay-1")]).await;
    fill(&sqs, &dlq, &[put(Some("acct-1"), "pay-1")]).await;
    // Proof that it does: a resend with the original id is dropped.
    fill(&sqs, &source, &[put(Some("acct-1"), "pay-1")]).await;
    assert_eq!(depth(&sqs, &source.url).await.visible, 1);

    let report = redrive::redrive(&sqs, &dlq.url, &source.url, options())
        .await
        .unwrap();
    assert_counts(&report, 1, 1, 0);
    let got = drain(&sqs, &source.url).await;
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
    assert!(depth(&sqs, &dlq.url).await.is_empty());
}

#[tokio::test]
async fn a_target_that_does_not_exist_fails_every_send_and_deletes_nothing() {
    let sqs = sqs().await;
    let (_source, dlq) = common::queue_with_dlq(&sqs, true, 5).await;
    let messages: Vec<_> = (0..5)
        .map(|i| put(Some(["g1", "g2"][i % 2]), format!("m{i}")))
        .collect();
    fill(&sqs, &dlq, &messages).await;
    let nowhere = dlq.url.replace(&dlq.name, "no-such-queue.fifo");

    let report = redrive::redrive(&sqs, &dlq.url, &nowhere, options())
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
    let left = depth(&sqs, &dlq.url).await;
    assert_eq!((left.visible, left.not_visible), (5, 0), "{left:?}");
}

/// Three groups, interleaved, over two receives. The source queue takes at most 1 KiB, so
/// the second message of group `g` (2 KB) cannot go back: it stays in the dead-letter queue and
/// holds back the rest of `g`, while `h` and `k` move in order. After the fix (the source takes
/// 1 MiB) a second run moves the rest of `g`, still in order, behind `g`'s first.
#[tokio::test]
async fn fifo_redrive_keeps_each_groups_order_when_a_send_fails() {
    let sqs = sqs().await;
    let dlq = common::queue(&sqs, "dlq", true, &[]).await;
    let size = |bytes: u32| [(QueueAttributeName::MaximumMessageSize, bytes.to_string())];
    let source = common::queue(&sqs, "src", true, &size(1024)).await;
    let big = "x".repeat(2000);
    let body = |group: &str, i: usize| match (group, i) {
        ("g", 2) => big.clone(),
        _ => format!("{group}{i}"),
    };
    let messages: Vec<(&str, String)> = (1..=5)
        .flat_map(|i| ["g", "h", "k"].map(|g| (g, body(g, i))))
        .collect();
    let puts: Vec<_> = messages
        .iter()
        .map(|(g, b)| put(Some(*g), b.clone()))
        .collect();
    fill(&sqs, &dlq, &puts).await;
    let expected =
        |group: &str, from: usize| -> Vec<String> { (from..=5).map(|i| body(group, i)).collect() };

    let report = redrive::redrive(&sqs, &dlq.url, &source.url, options())
        .await
        .unwrap();
    // g's later messages are held back: received and reported failed, or not even received
    // (SQS hands out no message of a group whose earlier ones are in flight, as the held ones
    // are until the run ends).
    assert_eq!(report.moved, 11, "{report:#?}");
    assert!(matches!(report.failed.len(), 3 | 4), "{report:#?}");
    assert_counts(&report, 11 + report.failed.len(), 11, report.failed.len());
    assert!(!report.is_success());
    assert!(report.stopped.is_none(), "{report:#?}");
    assert!(
        report.failed[0].1.contains("InvalidParameterValue"),
        "{report:#?}"
    );
    for (_, error) in &report.failed[1..] {
        assert!(
            error.contains("of its group (g) was not sent"),
            "{report:#?}"
        );
    }
    assert_eq!(report.released, report.failed.len());
    assert_eq!(report.left_in_dlq, Some(4));

    let got = drain(&sqs, &source.url).await;
    assert_attributes(&got);
    assert_eq!(
        by_group(&got),
        BTreeMap::from([
            ("g".to_owned(), vec!["g1".to_owned()]),
            ("h".to_owned(), expected("h", 1)),
            ("k".to_owned(), expected("k", 1)),
        ])
    );
    // The big one and the rest of its group are in the DLQ, in order, visible again.
    let left = depth(&sqs, &dlq.url).await;
    assert_eq!((left.visible, left.not_visible), (4, 0), "{left:?}");

    sqs.set_queue_attributes()
        .queue_url(&source.url)
        .attributes(QueueAttributeName::MaximumMessageSize, "1048576")
        .send()
        .await
        .unwrap();
    let report = redrive::redrive(&sqs, &dlq.url, &source.url, options())
        .await
        .unwrap();
    assert_counts(&report, 4, 4, 0);
    assert!(report.is_success(), "{report}");
    let got = drain(&sqs, &source.url).await;
    assert_eq!(
        by_group(&got),
        BTreeMap::from([("g".to_owned(), expected("g", 2))])
    );
    assert!(depth(&sqs, &dlq.url).await.is_empty());
}

#[tokio::test]
async fn dry_run_moves_nothing() {
    let sqs = sqs().await;
    let (source, dlq) = common::queue_with_dlq(&sqs, false, 5).await;
    let messages: Vec<_> = (0..4).map(|i| put(None, format!("d{i}"))).collect();
    fill(&sqs, &dlq, &messages).await;

    let report = redrive::redrive(&sqs, &dlq.url, &source.url, options().dry_run(true))
        .await
        .unwrap();
    assert!(report.dry_run && report.is_success(), "{report:#?}");
    assert_counts(&report, 4, 0, 0);
    assert_eq!(report.released, 4);
    assert_eq!(report.left_in_dlq, Some(4));
    assert!(report.to_string().starts_with("dry run: 4 received"));
    assert!(depth(&sqs, &source.url).await.is_empty());
    let left = depth(&sqs, &dlq.url).await;
    assert_eq!((left.visible, left.not_visible), (4, 0), "{left:?}");
}

/// Dead-letters one message per group through the queue's own redrive policy
/// (`maxReceiveCount` 1): moto's own dead-lettering can reorder a group (it skips a message whose
/// group has another one in flight); the order within groups is tested above.
async fn dead_letter_by_sqs(sqs: &Client, source: &Queue, dlq: &Queue, bodies: &[(&str, &str)]) {
    let puts: Vec<_> = bodies.iter().map(|(g, b)| put(Some(*g), *b)).collect();
    fill(sqs, source, &puts).await;
    for _ in 0..4 {
        sqs.receive_message()
            .queue_url(&source.url)
            .max_number_of_messages(10)
            .visibility_timeout(0)
            .send()
            .await
            .unwrap();
    }
    assert!(depth(sqs, &source.url).await.is_empty());
    assert_eq!(depth(sqs, &dlq.url).await.visible, bodies.len() as u64);
}

#[tokio::test]
async fn the_binary_finds_the_source_queue_and_redrives_by_name() {
    let sqs = sqs().await;
    let (source, dlq) = common::queue_with_dlq(&sqs, true, 1).await;
    dead_letter_by_sqs(
        &sqs,
        &source,
        &dlq,
        &[("acct-1", "a"), ("acct-2", "b"), ("acct-3", "c")],
    )
    .await;

    // The library finds the pair by name, the source by ListDeadLetterSourceQueues.
    let route = redrive::route(&sqs, &dlq.name, None).await.unwrap();
    assert_eq!(
        route,
        Route {
            from: QueueRef {
                name: dlq.name.clone(),
                url: dlq.url.clone()
            },
            to: QueueRef {
                name: source.name.clone(),
                url: source.url.clone()
            },
        }
    );

    let run = |args: &[&str]| common::run(REDRIVE, args, &[]);
    let from = ["--from", dlq.name.as_str(), "--wait", "0"];

    let (code, out) = run(&[&from[..], &["--dry-run"]].concat());
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("dry run: 3 received"), "{out}");
    assert!(
        out.contains(&format!("to {} ({})", source.name, source.url)),
        "{out}"
    );

    // A target that does not exist: every send fails, exit 1, nothing moved.
    let nowhere = source.url.replace(&source.name, "no-such-queue.fifo");
    let (code, out) = run(&[&from[..], &["--to", &nowhere]].concat());
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("moved 0 of"), "{out}");
    assert!(out.contains("failed "), "{out}");
    assert!(
        out.contains("left in the dead-letter queue: about 3"),
        "{out}"
    );
    assert_eq!(depth(&sqs, &dlq.url).await.visible, 3);

    let (code, out) = run(&[&from[..], &["--max", "2"]].concat());
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("moved 2 of 2 received, 0 failed"), "{out}");
    // The target by name, the dead-letter queue by URL.
    let (code, out) = run(&["--from", &dlq.url, "--to", &source.name, "--wait", "0"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("moved 1 of 1 received, 0 failed"), "{out}");

    let got = drain(&sqs, &source.url).await;
    assert_eq!(
        by_group(&got),
        BTreeMap::from([
            ("acct-1".to_owned(), vec!["a".to_owned()]),
            ("acct-2".to_owned(), vec!["b".to_owned()]),
            ("acct-3".to_owned(), vec!["c".to_owned()]),
        ])
    );
    assert!(depth(&sqs, &dlq.url).await.is_empty());

    let (code, out) = run(&["--from", "no-such-dlq"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("no queue no-such-dlq"), "{out}");
    // A queue that is no one's dead-letter queue: name the target.
    let (code, out) = run(&["--from", &source.name]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("no queue sends its dead letters to"), "{out}");
}

#[test]
fn redrive_help_lists_its_options_and_exit_codes() {
    let (code, help) = common::run(REDRIVE, &["--help"], &[]);
    assert_eq!(code, Some(0), "{help}");
    for option in [
        "--from <QUEUE>",
        "--to <QUEUE>",
        "--max <N>",
        "--dry-run",
        "--drop-attributes <PREFIX>",
        "--visibility-timeout <SECS>",
        "--wait <SECS>",
        "Exit codes:",
        "  0  ",
        "  1  ",
        "  2  ",
    ] {
        assert!(help.contains(option), "--help lacks {option}:\n{help}");
    }
    assert!(!help.contains("--prefix"), "no template options: {help}");
}

#[test]
fn redrive_refuses_a_bad_command_line() {
    for (args, names) in [
        (&[][..], &["--from <QUEUE>", "required"][..]),
        (&["--from", "q", "--max", "ten"], &["'ten'", "--max"]),
        (&["--from", "q", "--max", "0"], &["--max"]),
        (&["--from", "q", "--wait", "30"], &["'30'", "--wait"]),
        (
            &["--from", "q", "--visibility-timeout", "43201"],
            &["--visibility-timeout"],
        ),
        (&["--from", "q", "--prefix", "dev-"], &["--prefix"]),
    ] {
        let (code, out) = common::run(REDRIVE, args, &[]);
        assert_eq!(code, Some(2), "{args:?}: {out}");
        for name in names {
            assert!(out.contains(name), "{args:?}: lacks {name:?}:\n{out}");
        }
    }
}

/// `--wait` above the SDK's attempt timeout (3 s): the empty long polls end the run, they do
/// not fail it.
#[tokio::test]
async fn a_long_poll_longer_than_the_attempt_timeout_ends_the_run_empty() {
    let sqs = sqs().await;
    let (source, dlq) = common::queue_with_dlq(&sqs, true, 5).await;
    let wait = payments_config::SDK_ATTEMPT_TIMEOUT + Duration::from_secs(1);
    let report = redrive::redrive(
        &sqs,
        &dlq.url,
        &source.url,
        RedriveOptions::default().wait_time(wait),
    )
    .await
    .unwrap();
    assert!(report.is_success(), "{report:#?}");
    assert_eq!(report.received, 0, "{report:#?}");
    assert_eq!(report.stopped, None, "{report:#?}");
}
