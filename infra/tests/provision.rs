//! Provisioning the template on the local endpoint, and verifying what exists against it.

mod common;

use aws_sdk_sqs::types::QueueAttributeName;
use local_aws::provision::{self, Difference};
use local_aws::template::{Naming, Template, TemplateOptions};

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
    assert_eq!(missing.len(), 9, "{missing:#?}");
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
    assert_eq!(resources.queues.len(), 4);
    assert_eq!(resources.tables.len(), 5);

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
        "41"
    );

    // Each function's environment, resolved.
    let env = resources
        .function_env(&t.functions["PaymentsApiFunction"])
        .unwrap();
    assert_eq!(env["PAYMENTS_QUEUE_URL"], payments.url);
    assert_eq!(env["PAYMENTS_TABLE"], naming.apply("payments"));
    assert_eq!(
        env["IDEMPOTENCY_TABLE"],
        naming.apply("payments-idempotency")
    );
    assert_eq!(env["IDEMPOTENCY_TTL_SECONDS"], "86400");
    assert_eq!(env["RUST_LOG"], "info");
    let env = resources
        .function_env(&t.functions["PaymentProcessorFunction"])
        .unwrap();
    assert_eq!(
        env["RECEIPTS_QUEUE_URL"],
        resources.queues["ReceiptsQueue"].url
    );
    assert_eq!(env["LEDGER_TABLE"], naming.apply("payments-ledger"));
    assert_eq!(env["FAIL_PAYMENTS"], "");

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
    let differences = provision::verify(&clients, &changed).await.unwrap();
    assert_eq!(
        properties(&differences),
        [
            ("IdempotencyTable".to_owned(), "TimeToLive".to_owned()),
            ("LedgerTable".to_owned(), "TimeToLive".to_owned()),
            (
                "PaymentsQueue".to_owned(),
                "RedrivePolicy.maxReceiveCount".to_owned()
            ),
            ("PaymentsTable".to_owned(), "KeySchema".to_owned()),
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
    assert!(stdout.contains("export FAIL_PAYMENTS=''"));

    let out = run(&["--prefix", &prefix, "--param", "MaxAttempts=3", "--verify"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Against the default MaxAttempts (5) the derived redrive policies differ: 21 against 41.
    let out = run(&["--prefix", &prefix, "--verify"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("RedrivePolicy.maxReceiveCount is 21, the template says 41")
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
