//! The project's template.yaml, parsed: the model holds the template's real values.

use std::time::Duration;

use local_aws::template::{
    AttributeType, Expr, KeyType, Naming, Part, RedriveAllowPolicy, StartingPosition,
    StreamViewType, Template, TemplateOptions,
};

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
            "PaymentsOutboxDeadLetterQueue",
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
    assert_eq!(redrive.max_receive_count, 65);

    let payments_dlq = &t.queues["PaymentsDeadLetterQueue"];
    assert_eq!(payments_dlq.name, "payments-dlq.fifo");
    assert!(payments_dlq.fifo);
    assert_eq!(payments_dlq.visibility_timeout, 30);
    assert_eq!(payments_dlq.message_retention_period, 1_209_600);
    assert_eq!(payments_dlq.redrive, None);
    // Only its source queue may dead-letter to it (the ARN in the template is built from the
    // queue name parameter; the model names the queue).
    assert_eq!(
        payments_dlq.redrive_allow_policy,
        Some(RedriveAllowPolicy::ByQueue(vec!["PaymentsQueue".into()]))
    );
    assert_eq!(payments.redrive_allow_policy, None);

    let receipts = &t.queues["ReceiptsQueue"];
    assert_eq!(receipts.name, "receipts");
    assert!(!receipts.fifo);
    assert_eq!(receipts.visibility_timeout, 180);
    let redrive = receipts.redrive.as_ref().unwrap();
    assert_eq!(redrive.dead_letter_queue, "ReceiptsDeadLetterQueue");
    assert_eq!(redrive.max_receive_count, 65);
    assert_eq!(t.queues["ReceiptsDeadLetterQueue"].name, "receipts-dlq");
    assert!(!t.queues["ReceiptsDeadLetterQueue"].fifo);
    assert_eq!(
        t.queues["ReceiptsDeadLetterQueue"].redrive_allow_policy,
        Some(RedriveAllowPolicy::ByQueue(vec!["ReceiptsQueue".into()]))
    );
    let outbox_dlq = &t.queues["PaymentsOutboxDeadLetterQueue"];
    assert_eq!(outbox_dlq.name, "payments-outbox-dlq");
    assert!(!outbox_dlq.fifo);
    assert_eq!(outbox_dlq.message_retention_period, 1_209_600);
    assert_eq!(
        outbox_dlq.redrive_allow_policy,
        Some(RedriveAllowPolicy::DenyAll)
    );

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
            "AccountsTable",
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
        ("AccountsTable", "payments-accounts", "accountId"),
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
    // Balances are per account and currency: the currency is the sort key.
    let currency = t.tables["BalancesTable"].sort_key().unwrap();
    assert_eq!(
        (
            currency.name.as_str(),
            currency.attribute_type,
            currency.key_type
        ),
        ("currency", AttributeType::String, KeyType::Range)
    );
    for id in ["PaymentsTable", "LedgerTable", "ReceiptsTable"] {
        assert_eq!(t.tables[id].sort_key(), None, "{id}");
    }
    // The payments table is the outbox: its stream carries each new payment.
    assert_eq!(
        t.tables["PaymentsTable"].stream_view_type,
        Some(StreamViewType::NewImage)
    );
    for id in [
        "IdempotencyTable",
        "LedgerTable",
        "BalancesTable",
        "ReceiptsTable",
    ] {
        assert_eq!(t.tables[id].stream_view_type, None, "{id}");
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
            "PaymentsPublisherFunction",
            "PaymentsReaderFunction",
            "PaymentsReconcilerFunction",
            "ReceiptSenderFunction"
        ]
    );

    let api = &t.functions["PaymentsApiFunction"];
    assert_eq!(api.name, "payments-api");
    assert_eq!(api.binary.as_deref(), Some("payments-api"));
    assert_eq!(api.timeout_seconds, 20);
    assert_eq!(api.memory_size, 128);
    assert!(!api.function_url);
    assert!(api.sqs_events.is_empty());
    assert!(api.dynamodb_events.is_empty());
    let routes: Vec<_> = api
        .http_routes
        .iter()
        .chain(&t.functions["PaymentsReaderFunction"].http_routes)
        .map(|r| {
            assert_eq!(r.authorizer.as_deref(), Some("PaymentsJwt"), "{r:?}");
            (
                r.method.as_str(),
                r.path.as_str(),
                r.authorization_scopes.join(" "),
            )
        })
        .collect();
    // Charging needs the write scope, reading the read scope; the ANY fallbacks (a wrong method
    // reaches the function, which answers 405) need either. In the order of the API's OpenAPI
    // `Body`, as SAM's translator writes it: by path, then method.
    let either = "payments/write payments/read".to_owned();
    assert_eq!(
        routes,
        [
            ("POST", "/payments", "payments/write".to_owned()),
            ("ANY", "/payments", either.clone()),
            ("GET", "/payments/{paymentId}", "payments/read".to_owned()),
            ("ANY", "/payments/{paymentId}", either),
        ]
    );
    // Globals and the function's own variables, merged.
    assert_eq!(api.environment["RUST_LOG"].as_literal(), Some("info"));
    assert_eq!(api.environment["IDEMPOTENCY_TABLE"], r("IdempotencyTable"));
    assert_eq!(
        api.environment["IDEMPOTENCY_TTL_SECONDS"].as_literal(),
        Some("1555200")
    );
    assert_eq!(
        api.environment_parameters["IDEMPOTENCY_TTL_SECONDS"],
        "IdempotencyTtlSeconds"
    );
    assert_eq!(api.environment["PAYMENTS_TABLE"], r("PaymentsTable"));
    // The upper limit of an amount, in major units of its currency.
    assert_eq!(
        api.environment["MAX_PAYMENT_AMOUNT"].as_literal(),
        Some("1000000")
    );
    assert_eq!(
        api.environment_parameters["MAX_PAYMENT_AMOUNT"],
        "MaxPaymentAmount"
    );
    // The API writes the outbox (the table) only; the publisher queues.
    assert!(!api.environment.contains_key("PAYMENTS_QUEUE_URL"));

    let publisher = &t.functions["PaymentsPublisherFunction"];
    assert_eq!(publisher.name, "payments-publisher");
    assert_eq!(publisher.binary.as_deref(), Some("payments-publisher"));
    assert_eq!(publisher.timeout_seconds, 30);
    assert_eq!(
        publisher.environment["PAYMENTS_QUEUE_URL"].parts(),
        &[Part::Ref("PaymentsQueue".into())]
    );
    assert!(publisher.sqs_events.is_empty());
    let [stream] = publisher.dynamodb_events.as_slice() else {
        panic!("{:?}", publisher.dynamodb_events);
    };
    assert_eq!(stream.name, "NewPayments");
    assert_eq!(stream.table, "PaymentsTable");
    assert_eq!(stream.starting_position, StartingPosition::TrimHorizon);
    assert_eq!(stream.batch_size, 10);
    assert_eq!(stream.maximum_batching_window_in_seconds, 1);
    assert!(stream.reports_batch_item_failures());
    assert!(stream.bisect_batch_on_function_error);
    assert_eq!(stream.maximum_retry_attempts, -1);
    assert_eq!(stream.maximum_retry_attempts(), None);
    assert_eq!(
        stream.maximum_record_age(),
        Some(Duration::from_secs(43_200))
    );
    assert_eq!(stream.filters.len(), 1);
    assert_eq!(stream.filters[0].as_str(), r#"{"eventName": ["INSERT"]}"#);
    assert!(stream.filters[0].matches(&serde_json::json!({"eventName": "INSERT"})));
    assert!(!stream.filters[0].matches(&serde_json::json!({"eventName": "MODIFY"})));
    assert_eq!(
        stream.on_failure_queue.as_deref(),
        Some("PaymentsOutboxDeadLetterQueue")
    );
    assert!(stream.enabled);
    assert_eq!(t.dynamodb_event_sources().count(), 1);

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
    // The default Stage is prod: no failure switch (see template_conditions.rs).
    assert!(!processor.environment.contains_key("FAIL_PAYMENTS"));
    assert_eq!(processor.environment["STAGE"].as_literal(), Some("prod"));
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
fn idempotency_records_outlive_every_copy_of_a_message() {
    let text = std::fs::read_to_string(Template::project_path()).unwrap();
    // The parameter's MinValue lowered: every deployment may now go below 4 + 14 days.
    let low_min = text.replacen("MinValue: 1555200", "MinValue: 86400", 1);
    let findings = Template::parse(&low_min, &TemplateOptions::default())
        .unwrap()
        .check();
    // Once per queue it has to cover (both consumers' queues keep messages 4 + 14 days).
    assert_eq!(findings.len(), 2, "{findings:#?}");
    for f in &findings {
        assert_eq!(f.resource, "Parameters.IdempotencyTtlSeconds");
        assert!(f.message.contains("MinValue 86400 is below 1555200"), "{f}");
    }

    // And a value below the sum: both consumers are flagged (payments-api and the publisher,
    // which consume no queue, are not).
    let options = TemplateOptions::default().parameter("IdempotencyTtlSeconds", "86400");
    let findings = Template::parse(&low_min, &options).unwrap().check();
    let mut flagged: Vec<_> = findings.iter().map(|f| f.resource.as_str()).collect();
    flagged.sort();
    assert_eq!(
        flagged,
        [
            "Parameters.IdempotencyTtlSeconds",
            "Parameters.IdempotencyTtlSeconds",
            "PaymentProcessorFunction",
            "ReceiptSenderFunction"
        ],
        "{findings:#?}"
    );
    let processor = findings
        .iter()
        .find(|f| f.resource == "PaymentProcessorFunction")
        .unwrap();
    assert!(
        processor.message.contains(
            "IDEMPOTENCY_TTL_SECONDS 86400 is below 1555200: a message can still be delivered (345600 s in PaymentsQueue + 1209600 s in PaymentsDeadLetterQueue)"
        ),
        "{processor}"
    );
}

#[test]
fn a_stream_source_needs_a_stream_and_a_standard_on_failure_queue() {
    let text = std::fs::read_to_string(Template::project_path()).unwrap();
    let spec = "      StreamSpecification:\n        StreamViewType: NEW_IMAGE\n";
    assert!(text.contains(spec));
    let findings = Template::parse(&text.replacen(spec, "", 1), &TemplateOptions::default())
        .unwrap()
        .check();
    assert_eq!(findings.len(), 1, "{findings:#?}");
    assert_eq!(
        findings[0].resource,
        "PaymentsPublisherFunction.Events.NewPayments"
    );
    assert!(
        findings[0].message.contains("PaymentsTable has no stream"),
        "{}",
        findings[0]
    );

    let destination = "Destination: !GetAtt PaymentsOutboxDeadLetterQueue.Arn";
    assert!(text.contains(destination));
    let fifo = text.replacen(
        destination,
        "Destination: !GetAtt PaymentsDeadLetterQueue.Arn",
        1,
    );
    let findings = Template::parse(&fifo, &TemplateOptions::default())
        .unwrap()
        .check();
    assert_eq!(findings.len(), 1, "{findings:#?}");
    assert!(
        findings[0].message.contains("is a FIFO queue"),
        "{}",
        findings[0]
    );
}

#[test]
fn stream_sources_that_cannot_run_are_rejected() {
    let text = std::fs::read_to_string(Template::project_path()).unwrap();
    let filter = r#"'{"eventName": ["INSERT"]}'"#;
    assert!(text.contains(filter));
    for (from, to, expected) in [
        (
            filter,
            r#"'{"eventName": [{"anything-but": ["REMOVE"]}]}'"#,
            "is not supported by the local harness",
        ),
        (filter, r#"'{"eventName": "INSERT"}'"#, "must be in a list"),
        (filter, "'not json'", "not JSON"),
        (
            "StartingPosition: TRIM_HORIZON",
            "StartingPosition: AT_TIMESTAMP",
            "TRIM_HORIZON or LATEST",
        ),
        (
            "MaximumRetryAttempts: -1",
            "MaximumRetryAttempts: -2",
            "-1 (no limit)",
        ),
        (
            "MaximumRecordAgeInSeconds: 43200",
            "MaximumRecordAgeInSeconds: 30",
            "60..=604800",
        ),
        (
            "Stream: !GetAtt PaymentsTable.StreamArn",
            "Stream: !GetAtt PaymentsTable.Arn",
            ".StreamArn",
        ),
        (
            "Type: SQS\n                Destination: !GetAtt PaymentsOutboxDeadLetterQueue.Arn",
            "Type: SNS\n                Destination: !Ref AlarmTopic",
            "only SQS destinations",
        ),
        (
            "BisectBatchOnFunctionError: true",
            "BisectBatchOnFunctionError: true\n            ParallelizationFactor: 2",
            "ParallelizationFactor",
        ),
    ] {
        assert!(text.contains(from), "{from}");
        let e = Template::parse(&text.replacen(from, to, 1), &TemplateOptions::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains(expected), "{to}: {e}");
    }
}

#[test]
fn naming_and_parameter_overrides() {
    let options = TemplateOptions::default()
        .naming(Naming::prefix("it-").with_suffix("-x"))
        .parameter("MaxAttempts", "2")
        .parameter("IdempotencyTtlSeconds", "2000000")
        .parameter("FailPayments", "boom:1")
        .parameter("Stage", "test")
        .parameter("ReceiptsQueueName", "other-receipts");
    let t = Template::load_project(&options).unwrap();
    assert_eq!(t.parameter("MaxAttempts"), Some("2"));
    assert_eq!(t.queues["PaymentsQueue"].name, "it-payments-x.fifo");
    assert_eq!(
        t.queues["PaymentsDeadLetterQueue"].name,
        "it-payments-dlq-x.fifo"
    );
    assert_eq!(t.queues["ReceiptsQueue"].name, "it-other-receipts-x");
    // The dead-letter queue still accepts its source, under the source's new name.
    assert_eq!(
        t.queues["ReceiptsDeadLetterQueue"].redrive_allow_policy,
        Some(RedriveAllowPolicy::ByQueue(vec!["ReceiptsQueue".into()]))
    );
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
        35
    );
    assert_eq!(
        t.queues["ReceiptsQueue"]
            .redrive
            .as_ref()
            .unwrap()
            .max_receive_count,
        35
    );
    let env = &t.functions["PaymentProcessorFunction"].environment;
    assert_eq!(env["IDEMPOTENCY_TTL_SECONDS"].as_literal(), Some("2000000"));
    assert_eq!(env["FAIL_PAYMENTS"].as_literal(), Some("boom:1"));

    // Overrides are checked like CloudFormation checks them.
    for (name, value) in [
        ("MaxAttempts", "0"),
        ("MaxAttempts", "11"),
        ("LogRetentionDays", "2"),
        // Below MinValue: a record must outlive the queues' retention (4 + 14 days).
        ("IdempotencyTtlSeconds", "120"),
        ("NoSuchParameter", "1"),
    ] {
        let options = TemplateOptions::default().parameter(name, value);
        assert!(
            Template::load_project(&options).is_err(),
            "{name}={value} accepted"
        );
    }
}

#[test]
fn event_sources_are_read_from_the_translator_s_event_source_mappings() {
    use local_aws::provision::{Provisioned, ProvisionedQueue};
    use local_aws::runner::EventSourceMapping;

    let sam = r#"
Transform: AWS::Serverless-2016-10-31
Resources:
  Jobs: { Type: AWS::SQS::Queue, Properties: { QueueName: jobs, VisibilityTimeout: 60 } }
  Worker:
    Type: AWS::Serverless::Function
    Properties:
      FunctionName: worker
      Timeout: 10
      Events:
        Work:
          Type: SQS
          Properties:
            Queue: !GetAtt Jobs.Arn
            BatchSize: 3
            FunctionResponseTypes: [ReportBatchItemFailures]
"#;
    // SAM's translator makes the event an AWS::Lambda::EventSourceMapping...
    let cfn = local_aws::template::translated(sam).unwrap();
    let mapping = &cfn["Resources"]["WorkerWork"];
    assert_eq!(
        mapping["Type"].as_str(),
        Some("AWS::Lambda::EventSourceMapping")
    );
    assert_eq!(mapping["Properties"]["BatchSize"].as_u64(), Some(3));
    assert_eq!(
        mapping["Properties"]["FunctionResponseTypes"][0].as_str(),
        Some("ReportBatchItemFailures")
    );
    assert!(cfn["Resources"]["Worker"]["Properties"]["Events"].is_null());

    // ... which is what the model reads: the same mapping written by hand, without SAM, gives
    // the same event source.
    let plain = r#"
Resources:
  Jobs: { Type: AWS::SQS::Queue, Properties: { QueueName: jobs, VisibilityTimeout: 60 } }
  Worker:
    Type: AWS::Lambda::Function
    Properties: { FunctionName: worker, Timeout: 10 }
  WorkerWork:
    Type: AWS::Lambda::EventSourceMapping
    Properties:
      FunctionName: !Ref Worker
      EventSourceArn: !GetAtt Jobs.Arn
      BatchSize: 3
      FunctionResponseTypes: [ReportBatchItemFailures]
"#;
    let from_sam = Template::parse(sam, &TemplateOptions::default()).unwrap();
    let from_cfn = Template::parse(plain, &TemplateOptions::default()).unwrap();
    assert_eq!(from_sam.functions["Worker"], from_cfn.functions["Worker"]);
    let worker = &from_sam.functions["Worker"];
    let [work] = worker.sqs_events.as_slice() else {
        panic!("{:?}", worker.sqs_events);
    };
    assert_eq!((work.name.as_str(), work.queue.as_str()), ("Work", "Jobs"));
    assert_eq!(work.batch_size, 3);
    assert!(work.reports_batch_item_failures());

    // And the runner's mapping gets them (the queue as provisioning would give it).
    let provisioned = Provisioned {
        region: "us-east-1".into(),
        account_id: "123456789012".into(),
        queues: [(
            "Jobs".to_owned(),
            ProvisionedQueue {
                name: "jobs".into(),
                url: "http://127.0.0.1:5000/123456789012/jobs".into(),
                arn: "arn:aws:sqs:us-east-1:123456789012:jobs".into(),
                fifo: false,
            },
        )]
        .into(),
        tables: Default::default(),
        kinesis_streams: Default::default(),
        functions: [("Worker".to_owned(), "worker".to_owned())].into(),
    };
    let [m] = EventSourceMapping::for_function(worker, &provisioned)
        .unwrap()
        .try_into()
        .unwrap();
    assert_eq!(m.batch_size, 3);
    assert!(m.report_batch_item_failures);
    assert_eq!(m.timeout, Duration::from_secs(10));

    // Without ReportBatchItemFailures in the mapping, the runner deletes whole batches only.
    let without = sam.replace(
        "            FunctionResponseTypes: [ReportBatchItemFailures]\n",
        "",
    );
    let t = Template::parse(&without, &TemplateOptions::default()).unwrap();
    let [m] = EventSourceMapping::for_function(&t.functions["Worker"], &provisioned)
        .unwrap()
        .try_into()
        .unwrap();
    assert!(!m.report_batch_item_failures);
}

#[test]
fn what_sam_makes_that_the_harness_does_not_emulate_is_refused_by_name() {
    let with_event = |event: &str| {
        let yaml = format!(
            "Resources:\n  S: {{ Type: AWS::Kinesis::Stream, Properties: {{ ShardCount: 1 }} }}\n  Api: {{ Type: AWS::Serverless::HttpApi, Properties: {{ Auth: {{ EnableIamAuthorizer: true }} }} }}\n  F:\n    Type: AWS::Serverless::Function\n    Properties:\n      Events:\n        E: {event}\n"
        );
        Template::parse(&yaml, &TemplateOptions::default())
            .unwrap_err()
            .to_string()
    };
    // Kinesis is emulated (tests/runner_kinesis_template.rs); an MSK cluster is not.
    let msk = with_event(
        "{ Type: MSK, Properties: { Stream: 'arn:aws:kafka:us-east-1:123456789012:cluster/c/1', Topics: [t], StartingPosition: LATEST } }",
    );
    assert!(
        msk.contains("Resources.FE.Properties.EventSourceArn"),
        "{msk}"
    );
    assert!(msk.contains("not emulated by the local harness"), "{msk}");
    let iam = with_event(
        "{ Type: HttpApi, Properties: { ApiId: !Ref Api, Auth: { Authorizer: AWS_IAM } } }",
    );
    assert!(iam.contains("AWS_IAM is not emulated"), "{iam}");
    // A template SAM's translator itself refuses: its message, at `Transform`.
    let bad = with_event("{ Type: SQS, Properties: { BatchSize: 3 } }");
    assert!(bad.starts_with("Transform: "), "{bad}");
}
