//! Provisioning the template on the local endpoint, and verifying what exists against it.

mod common;

use std::collections::BTreeMap;

use aws_sdk_sqs::types::QueueAttributeName;
use local_aws::provision::{self, Difference};
use local_aws::template::{Naming, RedriveAllowPolicy, StreamViewType, Template, TemplateOptions};

fn template(naming: &Naming) -> Template {
    Template::load_project(&TemplateOptions::default().naming(naming.clone())).unwrap()
}

fn properties(differences: &[Difference]) -> Vec<(String, String)> {
    let mut out: Vec<_> = differences
        .iter()
        .map(|d| (d.resource.clone(), d.property.clone()))
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn provision_then_verify_matches_and_is_idempotent() {
    let clients = common::clients().await;
    let naming = Naming::unique("pv");
    let t = template(&naming);

    // Nothing exists yet: every resource is reported missing.
    let missing = provision::verify(&clients, &t).await.unwrap();
    assert_eq!(missing.len(), 11, "{missing:#?}");
    assert!(missing.iter().all(|d| d.property == "exists"));

    let resources = provision::provision(&clients, &t).await.unwrap();
    assert_eq!(provision::verify(&clients, &t).await.unwrap(), vec![]);

    // What came back names what was created.
    let payments = &resources.queues["PaymentsQueue"];
    assert_eq!(payments.name, naming.apply("payments.fifo"));
    assert!(payments.url.ends_with(&payments.name));
    assert_eq!(
        payments.arn,
        format!(
            "arn:aws:sqs:us-east-1:{}:{}",
            resources.account_id, payments.name
        )
    );
    assert_eq!(
        resources.tables["IdempotencyTable"].name,
        naming.apply("payments-idempotency")
    );
    assert_eq!(resources.queues.len(), 5);
    assert_eq!(resources.tables.len(), 6);

    // The payments table has its stream (NEW_IMAGE), the others none.
    let payments_table = &resources.tables["PaymentsTable"];
    let stream_arn = payments_table.stream_arn.as_deref().unwrap();
    assert!(
        stream_arn.starts_with(&format!("{}/stream/", payments_table.arn)),
        "{stream_arn}"
    );
    let described = clients
        .dynamodb
        .describe_table()
        .table_name(&payments_table.name)
        .send()
        .await
        .unwrap()
        .table
        .unwrap();
    let spec = described.stream_specification.unwrap();
    assert!(spec.stream_enabled);
    assert_eq!(spec.stream_view_type.unwrap().as_str(), "NEW_IMAGE");
    assert_eq!(resources.tables["LedgerTable"].stream_arn, None);

    // Each dead-letter queue accepts its source queue only (its local name); the outbox's none.
    let mut allow = BTreeMap::new();
    for id in ["PaymentsDeadLetterQueue", "PaymentsOutboxDeadLetterQueue"] {
        let text = common::queue_attribute(
            &clients,
            &resources.queues[id].url,
            QueueAttributeName::RedriveAllowPolicy,
        )
        .await
        .unwrap();
        allow.insert(
            id,
            serde_json::from_str::<serde_json::Value>(&text).unwrap(),
        );
    }
    assert_eq!(
        allow["PaymentsDeadLetterQueue"],
        serde_json::json!({
            "redrivePermission": "byQueue",
            "sourceQueueArns": [payments.arn],
        })
    );
    assert_eq!(
        allow["PaymentsOutboxDeadLetterQueue"],
        serde_json::json!({"redrivePermission": "denyAll"})
    );
    assert_eq!(
        common::queue_attribute(
            &clients,
            &payments.url,
            QueueAttributeName::RedriveAllowPolicy
        )
        .await,
        None
    );

    // The redrive policy points at the DLQ's ARN with the count derived from MaxAttempts (5)
    // through Mappings.RedriveBackstop.
    let policy =
        common::queue_attribute(&clients, &payments.url, QueueAttributeName::RedrivePolicy)
            .await
            .unwrap();
    let policy: serde_json::Value = serde_json::from_str(&policy).unwrap();
    assert_eq!(
        policy["deadLetterTargetArn"],
        resources.queues["PaymentsDeadLetterQueue"].arn
    );
    assert_eq!(
        policy["maxReceiveCount"].to_string().trim_matches('"'),
        "65"
    );

    // Each function's environment, resolved.
    let env = resources
        .function_env(&t.functions["PaymentsApiFunction"])
        .unwrap();
    assert_eq!(env["PAYMENTS_TABLE"], naming.apply("payments"));
    assert_eq!(
        env["IDEMPOTENCY_TABLE"],
        naming.apply("payments-idempotency")
    );
    assert_eq!(env["IDEMPOTENCY_TTL_SECONDS"], "1555200");
    assert_eq!(env["RUST_LOG"], "info");
    let env = resources
        .function_env(&t.functions["PaymentsPublisherFunction"])
        .unwrap();
    assert_eq!(env["PAYMENTS_QUEUE_URL"], payments.url);
    // `!GetAtt T.StreamArn` resolves to the stream.
    let yaml = "Resources:
  PaymentsTable:
    Type: AWS::DynamoDB::Table
    Properties:
      AttributeDefinitions: [{ AttributeName: k, AttributeType: S }]
      KeySchema: [{ AttributeName: k, KeyType: HASH }]
  F:
    Type: AWS::Serverless::Function
    Properties: { Environment: { Variables: { S: !GetAtt PaymentsTable.StreamArn } } }
";
    let expr = Template::parse(yaml, &TemplateOptions::default())
        .unwrap()
        .functions["F"]
        .environment["S"]
        .clone();
    assert_eq!(resources.resolve(&expr).unwrap(), stream_arn);
    let env = resources
        .function_env(&t.functions["PaymentProcessorFunction"])
        .unwrap();
    assert_eq!(
        env["RECEIPTS_QUEUE_URL"],
        resources.queues["ReceiptsQueue"].url
    );
    assert_eq!(env["LEDGER_TABLE"], naming.apply("payments-ledger"));
    // The default Stage is prod: no failure switch.
    assert!(!env.contains_key("FAIL_PAYMENTS"));
    assert_eq!(env["STAGE"], "prod");

    // Provisioning again finds everything and changes nothing.
    let again = provision::provision(&clients, &t).await.unwrap();
    assert_eq!(again, resources);
    assert_eq!(provision::verify(&clients, &t).await.unwrap(), vec![]);
}

#[tokio::test]
async fn verify_reports_what_differs() {
    let clients = common::clients().await;
    let naming = Naming::unique("vd");
    let t = template(&naming);
    let resources = provision::provision(&clients, &t).await.unwrap();

    // Changed on the endpoint: a queue's visibility timeout and redrive count.
    let payments = &resources.queues["PaymentsQueue"];
    clients
        .sqs
        .set_queue_attributes()
        .queue_url(&payments.url)
        .attributes(QueueAttributeName::VisibilityTimeout, "30")
        .attributes(
            QueueAttributeName::RedrivePolicy,
            serde_json::json!({
                "deadLetterTargetArn": resources.queues["PaymentsDeadLetterQueue"].arn,
                "maxReceiveCount": 9,
            })
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    let differences = provision::verify(&clients, &t).await.unwrap();
    assert_eq!(
        properties(&differences),
        [
            (
                "PaymentsQueue".to_owned(),
                "RedrivePolicy.maxReceiveCount".to_owned()
            ),
            ("PaymentsQueue".to_owned(), "VisibilityTimeout".to_owned()),
        ]
    );
    let visibility = differences
        .iter()
        .find(|d| d.property == "VisibilityTimeout")
        .unwrap();
    assert_eq!(
        (visibility.expected.as_str(), visibility.actual.as_str()),
        ("180", "30")
    );
    assert_eq!(
        visibility.to_string(),
        format!(
            "PaymentsQueue ({}): VisibilityTimeout is 30, the template says 180",
            payments.name
        )
    );

    // Provisioning again brings the queue back to the template.
    provision::provision(&clients, &t).await.unwrap();
    assert_eq!(provision::verify(&clients, &t).await.unwrap(), vec![]);

    // A model that differs from what exists: parameters, key schema, TTL, FIFO-ness.
    let mut changed = Template::load_project(
        &TemplateOptions::default()
            .naming(naming.clone())
            .parameter("MaxAttempts", "7"),
    )
    .unwrap();
    changed.tables.get_mut("PaymentsTable").unwrap().key_schema[0].name = "pk".into();
    changed
        .tables
        .get_mut("IdempotencyTable")
        .unwrap()
        .ttl_attribute = Some("expires_at".into());
    changed.tables.get_mut("LedgerTable").unwrap().ttl_attribute = Some("ttl".into());
    changed
        .queues
        .get_mut("ReceiptsDeadLetterQueue")
        .unwrap()
        .visibility_timeout = 45;
    changed
        .tables
        .get_mut("PaymentsTable")
        .unwrap()
        .stream_view_type = Some(StreamViewType::NewAndOldImages);
    changed
        .tables
        .get_mut("BalancesTable")
        .unwrap()
        .stream_view_type = Some(StreamViewType::KeysOnly);
    changed
        .queues
        .get_mut("PaymentsOutboxDeadLetterQueue")
        .unwrap()
        .redrive_allow_policy = Some(RedriveAllowPolicy::ByQueue(vec!["ReceiptsQueue".into()]));
    let differences = provision::verify(&clients, &changed).await.unwrap();
    assert_eq!(
        properties(&differences),
        [
            ("BalancesTable".to_owned(), "StreamSpecification".to_owned()),
            ("IdempotencyTable".to_owned(), "TimeToLive".to_owned()),
            ("LedgerTable".to_owned(), "TimeToLive".to_owned()),
            (
                "PaymentsOutboxDeadLetterQueue".to_owned(),
                "RedriveAllowPolicy".to_owned()
            ),
            (
                "PaymentsQueue".to_owned(),
                "RedrivePolicy.maxReceiveCount".to_owned()
            ),
            ("PaymentsTable".to_owned(), "KeySchema".to_owned()),
            ("PaymentsTable".to_owned(), "StreamSpecification".to_owned()),
            (
                "ReceiptsDeadLetterQueue".to_owned(),
                "VisibilityTimeout".to_owned()
            ),
            (
                "ReceiptsQueue".to_owned(),
                "RedrivePolicy.maxReceiveCount".to_owned()
            ),
        ],
        "{differences:#?}"
    );
    let ttl = differences
        .iter()
        .find(|d| d.resource == "LedgerTable")
        .unwrap();
    assert_eq!(
        (ttl.expected.as_str(), ttl.actual.as_str()),
        ("enabled on ttl", "disabled")
    );
    let key = differences
        .iter()
        .find(|d| d.property == "KeySchema")
        .unwrap();
    assert_eq!(
        (key.expected.as_str(), key.actual.as_str()),
        ("pk HASH S", "paymentId HASH S")
    );
    let find = |resource: &str, property: &str| {
        differences
            .iter()
            .find(|d| d.resource == resource && d.property == property)
            .map(|d| (d.expected.as_str(), d.actual.as_str()))
            .unwrap()
    };
    assert_eq!(
        find("PaymentsTable", "StreamSpecification"),
        ("NEW_AND_OLD_IMAGES", "NEW_IMAGE")
    );
    assert_eq!(
        find("BalancesTable", "StreamSpecification"),
        ("KEYS_ONLY", "disabled")
    );
    assert_eq!(
        find("PaymentsOutboxDeadLetterQueue", "RedriveAllowPolicy"),
        (
            format!("byQueue {}", resources.queues["ReceiptsQueue"].arn).as_str(),
            "denyAll"
        )
    );

    // Provisioning the changed model enables the missing stream (a view type cannot change).
    let again = provision::provision(&clients, &changed).await.unwrap();
    assert!(again.tables["BalancesTable"].stream_arn.is_some());
    let left = provision::verify(&clients, &changed).await.unwrap();
    assert!(
        !left.iter().any(|d| d.resource == "BalancesTable"
            || d.resource == "PaymentsOutboxDeadLetterQueue"),
        "{left:#?}"
    );
}

#[tokio::test]
async fn verify_reports_a_queue_created_differently() {
    let clients = common::clients().await;
    let naming = Naming::unique("cd");
    let t = template(&naming);
    // Someone created the receipts queue by hand: no redrive, default visibility.
    clients
        .sqs
        .create_queue()
        .queue_name(&t.queues["ReceiptsQueue"].name)
        .send()
        .await
        .unwrap();
    let mut only_receipts = t.clone();
    only_receipts.queues.retain(|id, _| id == "ReceiptsQueue");
    only_receipts.tables.clear();
    let differences = provision::verify(&clients, &only_receipts).await.unwrap();
    assert_eq!(
        properties(&differences),
        [
            ("ReceiptsQueue".to_owned(), "RedrivePolicy".to_owned()),
            ("ReceiptsQueue".to_owned(), "VisibilityTimeout".to_owned()),
        ],
        "{differences:#?}"
    );
    // Provisioning adopts it and sets the template's attributes.
    provision::provision(&clients, &t).await.unwrap();
    assert_eq!(provision::verify(&clients, &t).await.unwrap(), vec![]);
}

#[tokio::test]
async fn the_provision_binary_prints_exports_and_verifies() {
    let _ = common::clients().await; // fails clearly without an endpoint
    let prefix = Naming::unique("bin").prefix_str().to_owned();
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_provision"))
            .args(args)
            .output()
            .expect("run provision")
    };

    // Nothing yet: --verify fails and lists the missing resources.
    let out = run(&["--prefix", &prefix, "--verify"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("exists is no"));

    let out = run(&["--prefix", &prefix, "--param", "MaxAttempts=3"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains(&format!("# queue PaymentsQueue: {prefix}payments.fifo ")),
        "{stdout}"
    );
    assert!(stdout.contains(
        "# function payment-processor (PaymentProcessorFunction, binary payment-processor)"
    ));
    assert!(stdout.contains(&format!(
        "export IDEMPOTENCY_TABLE='{prefix}payments-idempotency'"
    )));
    assert!(stdout.contains("export STAGE='prod'"));
    assert!(!stdout.contains("FAIL_PAYMENTS"), "{stdout}");

    let out = run(&["--prefix", &prefix, "--param", "MaxAttempts=3", "--verify"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Against the default MaxAttempts (5) the derived redrive policies differ: 45 against 65.
    let out = run(&["--prefix", &prefix, "--verify"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("RedrivePolicy.maxReceiveCount is 45, the template says 65"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    let out = run(&[
        "--prefix",
        &prefix,
        "--param",
        "MaxAttempts=3",
        "--function",
        "receipt-sender",
        "--format",
        "dotenv",
    ]);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout
            .lines()
            .all(|l| !l.starts_with('#') && l.contains('=')),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("RECEIPTS_TABLE={prefix}payments-receipts\n")));

    let out = run(&[
        "--prefix",
        &prefix,
        "--param",
        "MaxAttempts=3",
        "--format",
        "json",
    ]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        json["resources"]["queues"]["ReceiptsQueue"]["name"],
        format!("{prefix}receipts")
    );
    assert_eq!(json["functions"]["payments-api"]["binary"], "payments-api");

    assert_eq!(run(&["--bogus"]).status.code(), Some(2));
}
