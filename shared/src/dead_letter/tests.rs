use super::*;
use aws_lambda_events::sqs::SqsMessageAttribute;

fn dead_letter(url: &str) -> DeadLetter {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version_latest()
        .build();
    DeadLetter::new(aws_sdk_sqs::Client::from_conf(config), url)
}

fn record(body: &str, attributes: usize) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some("m-1".into());
    m.body = Some(body.into());
    m.event_source_arn = Some("arn:aws:sqs:us-east-1:123456789012:source.fifo".into());
    m.attributes.insert("MessageGroupId".into(), "g".into());
    m.attributes.insert(
        TRACE_HEADER_ATTRIBUTE.into(),
        "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1".into(),
    );
    for i in 0..attributes {
        let mut a = SqsMessageAttribute::default();
        a.data_type = Some("String".into());
        a.string_value = Some(format!("value-{i}"));
        // Inserted in reverse: the copy sorts them.
        m.message_attributes
            .insert(format!("attr-{:02}", attributes - 1 - i), a);
    }
    m
}

fn names(message: &Message) -> Vec<String> {
    let mut names: Vec<_> = message.attributes().keys().cloned().collect();
    names.sort();
    names
}

#[test]
fn the_copy_keeps_its_own_attributes_then_the_originals_by_name_up_to_ten() {
    let dl = dead_letter("https://sqs.local/1/dlq.fifo");
    let message = dl.message_for(&record("{}", 10), "boom").unwrap();
    let mut expected = vec![
        REASON_ATTRIBUTE.to_owned(),
        SOURCE_MESSAGE_ID_ATTRIBUTE.to_owned(),
        SOURCE_QUEUE_ATTRIBUTE.to_owned(),
    ];
    expected.extend((0..7).map(|i| format!("attr-{i:02}")));
    expected.sort();
    assert_eq!(names(&message), expected, "attr-07 to attr-09 are left out");
    assert_eq!(
        message.trace_header(),
        Some("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1")
    );
    assert_eq!(message.group_id().unwrap().as_str(), "g");
    // The same every time (no hash-map order).
    for _ in 0..5 {
        assert_eq!(
            names(&dl.message_for(&record("{}", 10), "boom").unwrap()),
            expected
        );
    }
}

#[test]
fn the_computed_size_is_the_size_sqs_counts() {
    let dl = dead_letter("https://sqs.local/1/dlq.fifo");
    let mut r = record("Zoë's body", 4);
    let mut binary = SqsMessageAttribute::default();
    binary.data_type = Some("Binary".into());
    let mut bytes = aws_lambda_events::encodings::Base64Data::default();
    bytes.extend_from_slice(&[1, 2, 3]);
    binary.binary_value = Some(bytes);
    r.message_attributes.insert("bin".into(), binary);
    let draft = dl.draft(&r, "reason").unwrap();
    for attributes in [draft.full(), draft.reduced(400).unwrap().unwrap().0, vec![]] {
        let message = draft.message(&attributes).unwrap();
        assert_eq!(draft.size(&attributes), message.size());
    }
}

#[test]
fn an_original_attribute_with_an_own_name_is_replaced_not_doubled() {
    let dl = dead_letter("https://sqs.local/1/dlq");
    let mut r = record("{}", 1);
    let mut old = SqsMessageAttribute::default();
    old.data_type = Some("String".into());
    old.string_value = Some("an earlier reason".into());
    r.message_attributes.insert(REASON_ATTRIBUTE.into(), old);
    let message = dl.message_for(&r, "the new reason").unwrap();
    assert_eq!(
        message.attributes()[REASON_ATTRIBUTE].string_value(),
        Some("the new reason")
    );
    assert_eq!(message.attributes().len(), 4);
}

#[test]
fn the_reason_is_made_safe_and_cut() {
    let dl = dead_letter("https://sqs.local/1/dlq");
    let message = dl
        .message_for(
            &record("{}", 0),
            "ValidationException: Value 'jane@example.com' at 'item.email' failed",
        )
        .unwrap();
    assert_eq!(
        message.attributes()[REASON_ATTRIBUTE].string_value(),
        Some("ValidationException: Value '<redacted>' at 'item.email' failed")
    );
    let message = dl.message_for(&record("{}", 0), &"x".repeat(5000)).unwrap();
    assert_eq!(
        message.attributes()[REASON_ATTRIBUTE]
            .string_value()
            .unwrap()
            .len(),
        crate::state::MAX_ERROR_LEN
    );
}

#[test]
fn a_copy_that_does_not_fit_is_reduced_and_marked_and_its_body_kept() {
    let dl = dead_letter("https://sqs.local/1/dlq.fifo");
    let body = "b".repeat(1500);
    let r = record(&body, 3);
    let reason = "r".repeat(1000);
    let (whole, copied) = dl.copy_within(&r, &reason, MAX_MESSAGE_BYTES).unwrap();
    assert_eq!(copied, Copied::Full);
    assert!(whole.size() > 2048);

    let (copy, copied) = dl.copy_within(&r, &reason, 2048).unwrap();
    let Copied::Reduced { marker } = copied else {
        panic!("{copied:?}")
    };
    assert!(copy.size() <= 2048, "{}", copy.size());
    assert_eq!(copy.body(), body);
    assert_eq!(copy.trace_header(), whole.trace_header());
    assert_eq!(
        copy.attributes()[REDUCED_ATTRIBUTE].string_value(),
        Some(marker.as_str())
    );
    assert!(marker.contains("DeadLetterReason cut to"), "{marker}");
    assert!(copy.attributes().contains_key(SOURCE_MESSAGE_ID_ATTRIBUTE));
    assert!(copy.attributes().contains_key(SOURCE_QUEUE_ATTRIBUTE));
    let kept_reason = copy.attributes()[REASON_ATTRIBUTE].string_value().unwrap();
    assert!(kept_reason.len() <= REDUCED_REASON_LEN && kept_reason.ends_with("..."));

    // Less room: the originals go, and the marker names them.
    let (copy, copied) = dl.copy_within(&r, &reason, 1500 + 500).unwrap();
    let Copied::Reduced { marker } = copied else {
        panic!("{copied:?}")
    };
    assert!(copy.size() <= 2000);
    assert!(
        marker.contains("not copied: attr-00, attr-01, attr-02"),
        "{marker}"
    );

    // No room for the marker: the body goes alone.
    let (copy, copied) = dl.copy_within(&r, &reason, 1600).unwrap();
    assert_eq!(copied, Copied::Bare);
    assert!(copy.attributes().is_empty());
    assert_eq!(copy.body(), body);

    // Not even the body.
    let err = dl.copy_within(&r, &reason, 1499).unwrap_err();
    assert!(
        err.contains("1500 bytes") && err.contains("1499 bytes"),
        "{err}"
    );
}

#[test]
fn a_body_near_one_mebibyte_gets_a_reduced_copy() {
    let dl = dead_letter("https://sqs.local/1/dlq");
    let body = "b".repeat(MAX_MESSAGE_BYTES - 600);
    let r = record(&body, 5);
    assert!(
        dl.message_for(&r, &"r".repeat(1024)).is_err(),
        "the whole copy is over 1 MiB"
    );
    let (copy, copied) = dl
        .copy_within(&r, &"r".repeat(1024), MAX_MESSAGE_BYTES)
        .unwrap();
    assert!(matches!(copied, Copied::Reduced { .. }), "{copied:?}");
    assert!(copy.size() <= MAX_MESSAGE_BYTES);
    assert_eq!(copy.body().len(), body.len());
}

#[test]
fn refusals_for_size_are_recognised_with_their_limit() {
    let rejected = |code: &str, message: &str| PublishError::Rejected {
        code: code.into(),
        message: message.into(),
    };
    assert_eq!(
        too_large(&rejected(
            "InvalidParameterValue",
            "One or more parameters are invalid. Reason: Message must be shorter than 2048 bytes."
        )),
        Some(Some(2048))
    );
    assert_eq!(
        too_large(&rejected(
            "AWS.SimpleQueueService.BatchRequestTooLong",
            "Batch requests cannot be longer than 1048576 bytes."
        )),
        Some(None)
    );
    assert_eq!(
        too_large(&rejected("InvalidMessageContents", "bad character")),
        None
    );
    assert_eq!(
        too_large(&PublishError::Exhausted {
            attempts: 3,
            last_error: "timeout".into()
        }),
        None
    );
}
