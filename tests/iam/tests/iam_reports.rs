//! The IAM machinery without an endpoint: conformance reports in both directions, and the
//! recorder on real SDK clients (requests recorded before they are sent).

mod iam_common;

use iam_common::*;
use iam_conformance::{CallRecorder, ItemKind, LeadingKeys, RecorderConfig, Report, Resource};

fn charge(ledger_table: &str, balance_action: &str) -> serde_json::Value {
    serde_json::json!({"TransactItems": [
        {"Put": {"TableName": ledger_table, "Item": {"entryId": {"S": "e-1"}, "accountId": {"S": "acc-1"}}}},
        {balance_action: {"TableName": "payments-balances", "Key": {"accountId": {"S": "acc-1"}},
            "Item": {"accountId": {"S": "acc-1"}}}},
        {"Update": {"TableName": "payments", "Key": {"paymentId": {"S": "p-1"}},
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}},
    ]})
}

#[test]
fn a_transaction_over_three_tables_is_authorized_item_by_item() {
    let r = recorder();
    record(
        &r,
        "DynamoDB_20120810.TransactWriteItems",
        &charge("payments-ledger", "Update"),
    );
    let calls = r.take();
    let items: Vec<_> = calls[0]
        .resources
        .iter()
        .map(|res| match res {
            Resource::Table {
                name,
                item,
                leading_keys,
                ..
            } => (name.as_str(), *item, leading_keys.clone()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        items,
        [
            (
                "payments-ledger",
                Some(ItemKind::Put),
                LeadingKeys::Known(keys(&["e-1"]))
            ),
            (
                "payments-balances",
                Some(ItemKind::Update),
                LeadingKeys::Known(keys(&["acc-1"]))
            ),
            (
                "payments",
                Some(ItemKind::Update),
                LeadingKeys::Known(keys(&["p-1"]))
            ),
        ]
    );
    let report = check("payment-processor", &calls);
    assert_eq!(report.denied, [], "{report}");
    let unused = grants_of(&report.unused);
    for used in [
        ("dynamodb:PutItem", table("payments-ledger")),
        ("dynamodb:UpdateItem", table("payments-balances")),
        ("dynamodb:UpdateItem", table("payments")),
    ] {
        assert!(
            !unused.contains(&(used.0.to_owned(), used.1.clone())),
            "{used:?}: {report}"
        );
    }

    // The same transaction putting the balance instead: PutItem on the balances table is not
    // granted, and the allowed items do not carry it.
    let r = recorder();
    record(
        &r,
        "DynamoDB_20120810.TransactWriteItems",
        &charge("payments-ledger", "Put"),
    );
    let report = check("payment-processor", &r.take());
    assert_eq!(report.denied.len(), 1, "{report}");
    assert_eq!(report.denied[0].action, "dynamodb:PutItem");
    assert_eq!(report.denied[0].resource, table("payments-balances"));
    assert_eq!(report.denied[0].operation, "DynamoDB.TransactWriteItems");
}

#[test]
fn a_call_to_a_table_not_granted_is_reported() {
    let r = recorder();
    record(
        &r,
        "DynamoDB_20120810.PutItem",
        &serde_json::json!({"TableName": "payments-ledger", "Item": {"entryId": {"S": "e-1"}}}),
    );
    let report = check("payments-api", &r.take());
    assert_eq!(report.denied.len(), 1, "{report}");
    let d = &report.denied[0];
    assert_eq!(
        (d.operation.as_str(), d.action.as_str(), d.resource.as_str()),
        (
            "DynamoDB.PutItem",
            "dynamodb:PutItem",
            table("payments-ledger").as_str()
        )
    );
    assert_eq!(d.why, "no Allow statement matches the action and resource");
    assert!(!report.is_conformant());
    assert!(report.to_string().contains("NOT GRANTED"), "{report}");
}

#[test]
fn a_granted_action_never_called_is_reported_and_the_platform_s_apart() {
    let r = recorder();
    record(
        &r,
        "DynamoDB_20120810.UpdateItem",
        &serde_json::json!({"TableName": "payments-idempotency", "Key": {"id": {"S": "payments-api#k1"}},
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}),
    );
    record(
        &r,
        "DynamoDB_20120810.PutItem",
        &serde_json::json!({"TableName": "payments", "Item": {"paymentId": {"S": "p-1"}}}),
    );
    let calls = r.snapshot();
    let report = check("payments-api", &calls);
    assert_eq!(report.denied, [], "{report}");
    assert_eq!(report.problems, Vec::<String>::new());
    assert_eq!(
        grants_of(&report.unused),
        [
            (
                "dynamodb:DeleteItem".to_owned(),
                table("payments-idempotency")
            ),
            (
                "dynamodb:DescribeTable".to_owned(),
                table("payments-idempotency")
            ),
            (
                "dynamodb:DescribeTimeToLive".to_owned(),
                table("payments-idempotency")
            ),
            ("dynamodb:GetItem".to_owned(), table("payments")),
            ("dynamodb:UpdateItem".to_owned(), table("payments-accounts")),
            ("dynamodb:PutItem".to_owned(), table("payments-accounts"))
        ]
    );
    assert_eq!(
        grants_of(&report.platform)
            .into_iter()
            .map(|(a, _)| a)
            .collect::<Vec<_>>(),
        ["logs:CreateLogStream", "logs:PutLogEvents"]
    );
    assert!(!report.is_conformant());
    let row = report.markdown_row();
    assert!(
        row.starts_with("| payments-api | `DynamoDB.PutItem` ×1<br>`DynamoDB.UpdateItem` ×1 |"),
        "{row}"
    );
    assert!(
        row.contains("`dynamodb:GetItem` on `payments` (**never used**)"),
        "{row}"
    );
    assert!(
        row.contains("`logs:PutLogEvents` on `/aws/lambda/payments-api` (platform)"),
        "{row}"
    );
    assert!(
        row.contains("if `ForAllValues:StringLike` `payments-api#*`"),
        "{row}"
    );

    // With the read and the forget (a key reused with another body), every grant is used.
    record(
        &r,
        "DynamoDB_20120810.GetItem",
        &serde_json::json!({"TableName": "payments", "Key": {"paymentId": {"S": "p-1"}}}),
    );
    record(
        &r,
        "DynamoDB_20120810.DeleteItem",
        &serde_json::json!({"TableName": "payments-idempotency", "Key": {"id": {"S": "payments-api#k1"}}}),
    );
    // And the account's order: its next number taken, then the number's item put with the
    // payment.
    record(
        &r,
        "DynamoDB_20120810.UpdateItem",
        &serde_json::json!({"TableName": "payments-accounts", "Key": {"accountId": {"S": "acct-1"}}}),
    );
    record(
        &r,
        "DynamoDB_20120810.PutItem",
        &serde_json::json!({"TableName": "payments-accounts", "Item": {"accountId": {"S": "number #1 of acct-1"}}}),
    );
    // And the cold start's check of the idempotency table.
    for action in ["DescribeTable", "DescribeTimeToLive"] {
        record(
            &r,
            &format!("DynamoDB_20120810.{action}"),
            &serde_json::json!({"TableName": "payments-idempotency"}),
        );
    }
    let report = check("payments-api", &r.take());
    assert!(report.is_conformant(), "{report}");
    println!("{}\n{}", Report::markdown_header(), report.markdown_row());
}

#[test]
fn a_leading_keys_violation_is_reported() {
    let r = recorder();
    for key in ["payments-api#ok", "other#x", "other#y"] {
        record(
            &r,
            "DynamoDB_20120810.UpdateItem",
            &serde_json::json!({"TableName": "payments-idempotency", "Key": {"id": {"S": key}}}),
        );
    }
    let report = check("payments-api", &r.take());
    assert_eq!(report.denied.len(), 1, "{report}");
    let d = &report.denied[0];
    assert_eq!(d.action, "dynamodb:UpdateItem");
    assert_eq!(d.resource, table("payments-idempotency"));
    assert_eq!(d.count, 2);
    assert_eq!(d.example_keys, ["other#x", "other#y"]);
    assert!(
        d.why.contains("payments-api/IdempotencyRecords"),
        "{}",
        d.why
    );
    assert!(
        d.why.contains("dynamodb:LeadingKeys") && d.why.contains("payments-api#*"),
        "{}",
        d.why
    );
}

#[test]
fn unknown_partition_keys_are_not_guessed() {
    // A table whose hash key the recorder does not know: the IdempotencyRecords condition
    // cannot be decided, and the report says so rather than allowing it.
    let r = CallRecorder::new(RecorderConfig::new(REGION, ACCOUNT));
    record(
        &r,
        "DynamoDB_20120810.UpdateItem",
        &serde_json::json!({"TableName": "payments-idempotency", "Key": {"id": {"S": "payments-api#k"}}}),
    );
    let report = check("payments-api", &r.take());
    assert_eq!(report.denied, []);
    assert_eq!(report.problems.len(), 1, "{report}");
    assert!(report.problems[0].contains("not configured"), "{report}");
}

#[test]
fn event_source_mappings_are_required_from_the_template_not_recorded() {
    // payments-publisher's code sends to the queue and to the dead-letter queue (whose size it
    // reads once); its event source mapping's stream reads and its on-failure destination come
    // from the template.
    let r = recorder();
    record(
        &r,
        "AmazonSQS.GetQueueAttributes",
        &serde_json::json!({"QueueUrl": queue_url("payments-outbox-dlq"), "AttributeNames": ["MaximumMessageSize"]}),
    );
    record(
        &r,
        "AmazonSQS.SendMessageBatch",
        &serde_json::json!({"QueueUrl": queue_url("payments.fifo"), "Entries": []}),
    );
    record(
        &r,
        "AmazonSQS.SendMessage",
        &serde_json::json!({"QueueUrl": queue_url("payments-outbox-dlq"), "MessageBody": "{}"}),
    );
    let report = check("payments-publisher", &r.snapshot());
    assert!(report.is_conformant(), "{report}");
    let streams = format!("{}/stream/*", table("payments"));
    assert_eq!(
        grants_of(&report.event_sources),
        [
            ("dynamodb:DescribeStream".to_owned(), streams.clone()),
            ("dynamodb:GetRecords".to_owned(), streams.clone()),
            ("dynamodb:GetShardIterator".to_owned(), streams),
            ("dynamodb:ListStreams".to_owned(), "*".to_owned()),
        ],
        "{report}"
    );
    let roles = project();
    let publisher = roles.function("payments-publisher").unwrap();
    let required: Vec<String> = publisher
        .requirements
        .iter()
        .map(|q| format!("{}: {} on {}", q.by, q.action, q.resource))
        .collect();
    assert_eq!(
        required,
        [
            "Lambda platform (logs): logs:CreateLogStream on arn:aws:logs:us-east-1:123456789012:log-group:/aws/lambda/payments-publisher:log-stream:*".to_owned(),
            "Lambda platform (logs): logs:PutLogEvents on arn:aws:logs:us-east-1:123456789012:log-group:/aws/lambda/payments-publisher:log-stream:*".to_owned(),
            format!("event source mapping NewPayments: dynamodb:DescribeStream on {STREAM}"),
            format!("event source mapping NewPayments: dynamodb:GetRecords on {STREAM}"),
            format!("event source mapping NewPayments: dynamodb:GetShardIterator on {STREAM}"),
            "event source mapping NewPayments: dynamodb:ListStreams on *".to_owned(),
            format!("on-failure destination of NewPayments: sqs:SendMessage on {}", queue("payments-outbox-dlq")),
        ]
    );

    // A role without one of the documented actions: the mapping's request is not granted.
    let mut roles = project();
    let read = statement_mut(&mut roles, "PaymentsPublisherRole", "ReadPaymentsStream");
    read.actions.retain(|a| a != "dynamodb:GetShardIterator");
    let report = roles
        .conformance("payments-publisher", &r.snapshot())
        .unwrap();
    assert_eq!(report.denied.len(), 1, "{report}");
    assert_eq!(
        (
            report.denied[0].operation.as_str(),
            report.denied[0].action.as_str(),
            report.denied[0].resource.as_str()
        ),
        (
            "event source mapping NewPayments",
            "dynamodb:GetShardIterator",
            STREAM
        )
    );

    // payment-processor: its SQS event source mapping (receive, delete, attributes) is
    // required; its code's cold-start and backoff calls are recorded.
    let r = recorder();
    let source = queue_url("payments.fifo");
    for (op, body) in [
        (
            "GetQueueAttributes",
            serde_json::json!({"QueueUrl": source}),
        ),
        (
            "GetQueueUrl",
            serde_json::json!({"QueueName": "payments.fifo", "QueueOwnerAWSAccountId": ACCOUNT}),
        ),
        (
            "ChangeMessageVisibilityBatch",
            serde_json::json!({"QueueUrl": source, "Entries": []}),
        ),
    ] {
        record(&r, &format!("AmazonSQS.{op}"), &body);
    }
    let report = check("payment-processor", &r.take());
    assert_eq!(report.denied, [], "{report}");
    let by_mapping = grants_of(&report.event_sources);
    for action in ["sqs:ReceiveMessage", "sqs:DeleteMessage"] {
        assert!(
            by_mapping.contains(&(action.to_owned(), queue("payments.fifo"))),
            "{action}: {report}"
        );
    }
    assert!(
        grants_of(&report.unused)
            .iter()
            .all(|(_, resource)| resource != &queue("payments.fifo")),
        "{report}"
    );
}

#[test]
fn a_statement_broader_than_its_requests_is_reported_with_them() {
    let r = recorder();
    record(
        &r,
        "DynamoDB_20120810.PutItem",
        &serde_json::json!({"TableName": "payments-receipts", "Item": {"paymentId": {"S": "p"}}}),
    );
    let mut roles = project();
    let receipts = statement_mut(&mut roles, "ReceiptSenderRole", "Receipts");
    receipts.resources = vec![format!(
        "arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/payments-*"
    )];
    let report = roles.conformance("receipt-sender", &r.take()).unwrap();
    let text = report.to_string();
    assert!(
        text.contains("role ReceiptSenderRole, Sid Receipts")
            && text.contains(
                "dynamodb:PutItem on arn:aws:dynamodb:us-east-1:123456789012:table/payments-*"
            )
            && text.contains(&format!("{:?}", [table("payments-receipts")])),
        "{text}"
    );

    // The idempotency records without their condition: named, whatever the calls.
    let mut roles = project();
    let records = statement_mut(&mut roles, "ReceiptSenderRole", "IdempotencyRecords");
    records.conditions.clear();
    let report = roles.conformance("receipt-sender", &[]).unwrap();
    assert!(
        report.to_string().contains(
            "role ReceiptSenderRole, Sid IdempotencyRecords (policy receipt-sender, statement 2): grants items of IdempotencyTable without a dynamodb:LeadingKeys condition"
        ),
        "{report}"
    );
}

// --- the recorder on real SDK clients --------------------------------------------------------

#[tokio::test]
async fn the_recorder_sees_what_the_sdk_serializes() {
    // Nothing listens on port 1: each call fails to connect, after the recorder saw it.
    let sdk = local_aws::sdk_config_for("http://127.0.0.1:1")
        .await
        .to_builder()
        .region(aws_config::Region::new(REGION))
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .build();
    let r = recorder();
    let dynamodb = r.dynamodb_client(&sdk);
    let sqs = r.sqs_client(&sdk);
    use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
    let s = |v: &str| AttributeValue::S(v.to_owned());
    let sent = dynamodb
        .transact_write_items()
        .transact_items(
            TransactWriteItem::builder()
                .put(
                    Put::builder()
                        .table_name("payments-ledger")
                        .item("entryId", s("e-1"))
                        .build()
                        .unwrap(),
                )
                .build(),
        )
        .transact_items(
            TransactWriteItem::builder()
                .update(
                    Update::builder()
                        .table_name("payments-balances")
                        .key("accountId", s("acc-1"))
                        .update_expression("ADD balance :a")
                        .expression_attribute_values(":a", AttributeValue::N("5".into()))
                        .build()
                        .unwrap(),
                )
                .build(),
        )
        .send()
        .await;
    assert!(sent.is_err(), "nothing listens on port 1");
    let _ = sqs
        .send_message_batch()
        .queue_url(queue_url("receipts"))
        .send()
        .await;
    // A clone shares the log.
    let calls = r.clone().take();
    assert_eq!(r.problems(), []);
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0].to_string(), "DynamoDB.TransactWriteItems");
    assert!(matches!(
        &calls[0].resources[..],
        [
            Resource::Table { name: l, item: Some(ItemKind::Put), leading_keys: LeadingKeys::Known(lk), .. },
            Resource::Table { name: b, item: Some(ItemKind::Update), leading_keys: LeadingKeys::Known(bk), .. },
        ] if l == "payments-ledger" && lk == &["e-1"] && b == "payments-balances" && bk == &["acc-1"]
    ));
    assert_eq!(calls[1].to_string(), "SQS.SendMessageBatch");
    assert_eq!(
        calls[1].resources,
        [Resource::Queue {
            arn: queue("receipts"),
            url: Some(queue_url("receipts"))
        }]
    );
    assert_eq!(r.snapshot(), [], "take() emptied the log");
}
