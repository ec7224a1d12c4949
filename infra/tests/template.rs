//! The project's template.yaml, parsed: the model holds the template's real values.

use local_aws::template::{AttributeType, Expr, KeyType, Naming, Part, Template, TemplateOptions};

fn project() -> Template {
    Template::load_project(&TemplateOptions::default()).expect("template.yaml parses")
}

fn keys<V>(map: &std::collections::BTreeMap<String, V>) -> Vec<&str> {
    map.keys().map(String::as_str).collect()
}

fn r(name: &str) -> Expr {
    // A bare reference, as `!Ref name` parses.
    let t = Template::parse(
        &format!("Resources:\n  {name}: {{ Type: AWS::SQS::Queue }}\n  F:\n    Type: AWS::Serverless::Function\n    Properties: {{ Environment: {{ Variables: {{ X: !Ref {name} }} }} }}\n"),
        &TemplateOptions::default(),
    )
    .unwrap();
    t.functions["F"].environment["X"].clone()
}

#[test]
fn queues() {
    let t = project();
    assert_eq!(
        keys(&t.queues),
        [
            "PaymentsDeadLetterQueue",
            "PaymentsQueue",
            "ReceiptsDeadLetterQueue",
            "ReceiptsQueue"
        ]
    );
    let payments = &t.queues["PaymentsQueue"];
    assert_eq!(payments.name, "payments.fifo");
    assert!(payments.fifo);
    assert!(!payments.content_based_deduplication);
    assert_eq!(payments.visibility_timeout, 180);
    assert_eq!(payments.message_retention_period, 345_600);
    let redrive = payments.redrive.as_ref().unwrap();
    assert_eq!(redrive.dead_letter_queue, "PaymentsDeadLetterQueue");
    assert_eq!(redrive.max_receive_count, 41);

    let payments_dlq = &t.queues["PaymentsDeadLetterQueue"];
    assert_eq!(payments_dlq.name, "payments-dlq.fifo");
    assert!(payments_dlq.fifo);
    assert_eq!(payments_dlq.visibility_timeout, 30);
    assert_eq!(payments_dlq.message_retention_period, 1_209_600);
    assert_eq!(payments_dlq.redrive, None);

    let receipts = &t.queues["ReceiptsQueue"];
    assert_eq!(receipts.name, "receipts");
    assert!(!receipts.fifo);
    assert_eq!(receipts.visibility_timeout, 180);
    let redrive = receipts.redrive.as_ref().unwrap();
    assert_eq!(redrive.dead_letter_queue, "ReceiptsDeadLetterQueue");
    assert_eq!(redrive.max_receive_count, 41);
    assert_eq!(t.queues["ReceiptsDeadLetterQueue"].name, "receipts-dlq");
    assert!(!t.queues["ReceiptsDeadLetterQueue"].fifo);

    let order: Vec<_> = t
        .queues_in_creation_order()
        .iter()
        .map(|q| q.logical_id.as_str())
        .collect();
    let pos = |id| order.iter().position(|q| *q == id).unwrap();
    assert!(pos("PaymentsDeadLetterQueue") < pos("PaymentsQueue"));
    assert!(pos("ReceiptsDeadLetterQueue") < pos("ReceiptsQueue"));
}

#[test]
fn tables() {
    let t = project();
    assert_eq!(
        keys(&t.tables),
        [
            "BalancesTable",
            "IdempotencyTable",
            "LedgerTable",
            "PaymentsTable",
            "ReceiptsTable"
        ]
    );
    let idempotency = &t.tables["IdempotencyTable"];
    assert_eq!(idempotency.name, "payments-idempotency");
    assert_eq!(idempotency.ttl_attribute.as_deref(), Some("expiration"));
    assert_eq!(idempotency.key_schema.len(), 1);
    let key = idempotency.partition_key();
    assert_eq!(
        (key.name.as_str(), key.attribute_type, key.key_type),
        ("id", AttributeType::String, KeyType::Hash)
    );
    assert_eq!(idempotency.sort_key(), None);
    for (id, name, key) in [
        ("PaymentsTable", "payments", "paymentId"),
        ("LedgerTable", "payments-ledger", "entryId"),
        ("BalancesTable", "payments-balances", "accountId"),
        ("ReceiptsTable", "payments-receipts", "receiptId"),
    ] {
        let table = &t.tables[id];
        assert_eq!(table.name, name);
        assert_eq!(table.partition_key().name, key);
        assert_eq!(table.partition_key().attribute_type, AttributeType::String);
        assert_eq!(table.ttl_attribute, None, "{id}");
    }
}

#[test]
fn functions_and_event_sources() {
    let t = project();
    assert_eq!(
        keys(&t.functions),
        [
            "PaymentProcessorFunction",
            "PaymentsApiFunction",
            "ReceiptSenderFunction"
        ]
    );

    let api = &t.functions["PaymentsApiFunction"];
    assert_eq!(api.name, "payments-api");
    assert_eq!(api.binary.as_deref(), Some("payments-api"));
    assert_eq!(api.timeout_seconds, 10);
    assert_eq!(api.memory_size, 128);
    assert!(api.function_url);
    assert!(api.sqs_events.is_empty());
    let routes: Vec<_> = api
        .http_routes
        .iter()
        .map(|r| (r.method.as_str(), r.path.as_str()))
        .collect();
    assert!(routes.contains(&("POST", "/payments")), "{routes:?}");
    assert!(
        routes.contains(&("GET", "/payments/{paymentId}")),
        "{routes:?}"
    );
    // Globals and the function's own variables, merged.
    assert_eq!(api.environment["RUST_LOG"].as_literal(), Some("info"));
    assert_eq!(api.environment["IDEMPOTENCY_TABLE"], r("IdempotencyTable"));
    assert_eq!(
        api.environment["IDEMPOTENCY_TTL_SECONDS"].as_literal(),
        Some("86400")
    );
    assert_eq!(api.environment["PAYMENTS_TABLE"], r("PaymentsTable"));
    assert_eq!(
        api.environment["PAYMENTS_QUEUE_URL"].parts(),
        &[Part::Ref("PaymentsQueue".into())]
    );

    let processor = &t.functions["PaymentProcessorFunction"];
    assert_eq!(processor.name, "payment-processor");
    assert_eq!(processor.binary.as_deref(), Some("payment-processor"));
    assert_eq!(processor.timeout_seconds, 30);
    assert_eq!(
        processor.environment["RECEIPTS_QUEUE_URL"],
        r("ReceiptsQueue")
    );
    assert_eq!(processor.environment["LEDGER_TABLE"], r("LedgerTable"));
    assert_eq!(processor.environment["BALANCES_TABLE"], r("BalancesTable"));
    assert_eq!(
        processor.environment["FAIL_PAYMENTS"].as_literal(),
        Some("")
    );
    assert_eq!(
        processor.environment["IDEMPOTENCY_TABLE"],
        r("IdempotencyTable")
    );

    let sender = &t.functions["ReceiptSenderFunction"];
    assert_eq!(sender.name, "receipt-sender");
    assert_eq!(sender.timeout_seconds, 30);
    assert_eq!(sender.environment["RECEIPTS_TABLE"], r("ReceiptsTable"));

    let mappings: Vec<_> = t.sqs_event_sources().collect();
    assert_eq!(mappings.len(), 2);
    let payments = &processor.sqs_events[0];
    assert_eq!(processor.sqs_events.len(), 1);
    assert_eq!(payments.queue, "PaymentsQueue");
    assert_eq!(payments.batch_size, 10);
    assert_eq!(payments.maximum_batching_window_in_seconds, 0);
    assert!(payments.reports_batch_item_failures());
    assert_eq!(
        payments.function_response_types,
        ["ReportBatchItemFailures"]
    );
    assert_eq!(payments.maximum_concurrency, Some(5));
    assert!(payments.enabled);
    let receipts = &sender.sqs_events[0];
    assert_eq!(sender.sqs_events.len(), 1);
    assert_eq!(receipts.queue, "ReceiptsQueue");
    assert_eq!(receipts.batch_size, 10);
    assert_eq!(receipts.maximum_batching_window_in_seconds, 1);
    assert!(receipts.reports_batch_item_failures());
    assert_eq!(receipts.maximum_concurrency, Some(5));

    assert_eq!(
        t.function_by_name("receipt-sender").unwrap().logical_id,
        "ReceiptSenderFunction"
    );
}

#[test]
fn the_template_follows_the_aws_facts() {
    assert_eq!(project().check(), vec![]);

    // And the check can fail: a visibility timeout under 6 x the consumer's timeout.
    let text = std::fs::read_to_string(Template::project_path()).unwrap();
    assert!(text.contains("VisibilityTimeout: 180"));
    let short = text.replacen("VisibilityTimeout: 180", "VisibilityTimeout: 60", 1);
    let findings = Template::parse(&short, &TemplateOptions::default())
        .unwrap()
        .check();
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert!(
        findings[0]
            .message
            .contains("less than 6 x the function timeout"),
        "{}",
        findings[0]
    );
}

#[test]
fn naming_and_parameter_overrides() {
    let options = TemplateOptions::default()
        .naming(Naming::prefix("it-").with_suffix("-x"))
        .parameter("MaxAttempts", "2")
        .parameter("IdempotencyTtlSeconds", "120")
        .parameter("FailPayments", "boom:1")
        .parameter("ReceiptsQueueName", "other-receipts");
    let t = Template::load_project(&options).unwrap();
    assert_eq!(t.parameter("MaxAttempts"), Some("2"));
    assert_eq!(t.queues["PaymentsQueue"].name, "it-payments-x.fifo");
    assert_eq!(
        t.queues["PaymentsDeadLetterQueue"].name,
        "it-payments-dlq-x.fifo"
    );
    assert_eq!(t.queues["ReceiptsQueue"].name, "it-other-receipts-x");
    assert_eq!(
        t.tables["IdempotencyTable"].name,
        "it-payments-idempotency-x"
    );
    assert_eq!(
        t.queues["PaymentsQueue"]
            .redrive
            .as_ref()
            .unwrap()
            .max_receive_count,
        11
    );
    assert_eq!(
        t.queues["ReceiptsQueue"]
            .redrive
            .as_ref()
            .unwrap()
            .max_receive_count,
        11
    );
    let env = &t.functions["PaymentProcessorFunction"].environment;
    assert_eq!(env["IDEMPOTENCY_TTL_SECONDS"].as_literal(), Some("120"));
    assert_eq!(env["FAIL_PAYMENTS"].as_literal(), Some("boom:1"));

    // Overrides are checked like CloudFormation checks them.
    for (name, value) in [
        ("MaxAttempts", "0"),
        ("MaxAttempts", "11"),
        ("LogRetentionDays", "2"),
        ("NoSuchParameter", "1"),
    ] {
        let options = TemplateOptions::default().parameter(name, value);
        assert!(
            Template::load_project(&options).is_err(),
            "{name}={value} accepted"
        );
    }
}
