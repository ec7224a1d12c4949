//! The operators' tools against their managed policies, both ways, on the local endpoint (which
//! enforces no IAM): each tool runs against the provisioned stack with a recorder on its clients,
//! doing what its binary does (`redrive`: the route, then the redrive; `reopen`: the reopening),
//! and every recorded call is checked against the tool's `AWS::IAM::ManagedPolicy` in
//! template.yaml; every action the policy grants must be used by some run. The distinct calls
//! are kept in `tests/iam/tests/fixtures/operators/POLICY.json` for the mutation test, as
//! iam_conformance keeps the functions': the test fails when a run makes a call the committed
//! recording lacks (`IAM_RECORDING=write` rewrites it).

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::Client;
use iam_conformance::{CallRecorder, Environment, Recording, Report, TemplateRoles, conformance};
use payments_e2e::Stack;
use payments_e2e::stack::payments;
use payments_operations::redrive::{self, RedriveOptions};
use payments_operations::reopen::{Reopener, Reopening, Tables};

/// The stack's roles and managed policies, resolved against what was provisioned.
async fn template_roles(stack: &Stack) -> (Environment, TemplateRoles) {
    let env = Environment::from_provisioned(&stack.resources)
        .with_stream_arns(&stack.clients.dynamodb, &stack.resources)
        .await
        .unwrap();
    let roles = TemplateRoles::load_project(&env).unwrap();
    (env, roles)
}

/// The calls `recorder` saw, checked against the managed policy `policy`; fails with the report
/// unless they conform both ways, or when the committed recording of the policy's calls lacks
/// one of them.
fn assert_conforms(stack: &Stack, roles: &TemplateRoles, policy: &str, recorder: &CallRecorder) {
    assert!(recorder.problems().is_empty(), "{:?}", recorder.problems());
    let calls = recorder.take();
    let report = conformance(policy, &calls, roles.managed_policy(policy).unwrap());
    println!("{}\n{}", Report::markdown_header(), report.markdown_row());
    assert!(report.is_conformant(), "{report}");

    let recording = Recording::from_run(
        &stack.resources,
        stack.template.naming.prefix_str(),
        [(policy.to_owned(), calls)],
    );
    let path = format!(
        "{}/iam/tests/fixtures/operators/{policy}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    if std::env::var("IAM_RECORDING").as_deref() == Ok("write") {
        recording.save(&path).unwrap();
    }
    let committed = Recording::load(&path).unwrap();
    let missing = recording.missing_from(&committed);
    assert!(
        missing.is_empty(),
        "{path} lacks calls of this run (rerun with IAM_RECORDING=write and commit it):\n{}",
        missing.join("\n")
    );
}

/// Puts two messages in the queue `url` (FIFO: one group).
async fn dead_letters(sqs: &Client, url: &str, fifo: bool) {
    for i in 0..2 {
        let body = format!(r#"{{"paymentId":"pay_dead_{i}"}}"#);
        let mut send = sqs.send_message().queue_url(url).message_body(&body);
        if fifo {
            send = send
                .message_group_id("acct-dead")
                .message_deduplication_id(format!("dead-{i}"));
        }
        send.send().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrive_calls_what_its_policy_grants_and_uses_all_of_it() {
    let stack = Stack::provision(&[]).await.unwrap();
    let (env, roles) = template_roles(&stack).await;
    let recorder = CallRecorder::new(roles.recorder_config(&env));
    let sqs = recorder.sqs_client(&stack.sdk);
    let options = RedriveOptions::default().wait_time(std::time::Duration::ZERO);
    for (dlq, source, fifo) in [
        ("PaymentsDeadLetterQueue", "PaymentsQueue", true),
        ("ReceiptsDeadLetterQueue", "ReceiptsQueue", false),
    ] {
        dead_letters(&stack.clients.sqs, stack.queue_url(dlq), fifo).await;
        let (dlq_name, source_name) = (
            &stack.resources.queues[dlq].name,
            &stack.resources.queues[source].name,
        );
        // `redrive --from DLQ --dry-run`: the source by ListDeadLetterSourceQueues; the
        // messages made visible again at the end.
        let route = redrive::route(&sqs, dlq_name, None).await.unwrap();
        assert_eq!(route.to.url, stack.queue_url(source));
        let report = redrive::redrive(
            &sqs,
            &route.from.url,
            &route.to.url,
            options.clone().dry_run(true),
        )
        .await
        .unwrap();
        assert_eq!((report.received, report.released), (2, 2), "{report}");
        // `redrive --from DLQ --to SOURCE`: both by name, the messages moved.
        let route = redrive::route(&sqs, dlq_name, Some(source_name))
            .await
            .unwrap();
        let report = redrive::redrive(&sqs, &route.from.url, &route.to.url, options.clone())
            .await
            .unwrap();
        assert!(report.is_success() && report.moved == 2, "{report}");
        assert_eq!(stack.depth(source).await.unwrap(), 2);
    }
    assert_conforms(&stack, &roles, "PaymentsRedrivePolicy", &recorder);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopen_calls_what_its_policy_grants_and_uses_all_of_it() {
    let stack = Stack::provision(&[]).await.unwrap();
    let (env, roles) = template_roles(&stack).await;
    // A payment accepted, then failed (as payment-processor marks it).
    let payment = stack
        .accept(payments(1, 1, "reopen", |_| String::new()))
        .await
        .unwrap()
        .remove(0);
    stack
        .clients
        .dynamodb
        .update_item()
        .table_name(stack.table("PaymentsTable"))
        .key("paymentId", AttributeValue::S(payment.payment_id.clone()))
        .update_expression("SET #status = :failed")
        .expression_attribute_names("#status", "status")
        .expression_attribute_values(":failed", AttributeValue::S("failed".into()))
        .send()
        .await
        .unwrap();

    let recorder = CallRecorder::new(roles.recorder_config(&env));
    let reopener = Reopener::new(
        recorder.dynamodb_client(&stack.sdk),
        recorder.sqs_client(&stack.sdk),
        Tables {
            payments: stack.table("PaymentsTable").to_owned(),
            accounts: stack.table("AccountsTable").to_owned(),
        },
        stack.queue_url("PaymentsQueue"),
    );
    let reopened = reopener
        .reopen(&Reopening {
            payment_id: payment.payment_id.clone(),
            operator: "on-call".into(),
            reason: "fixed".into(),
        })
        .await
        .unwrap();
    assert_eq!(reopened.reopens, 1);
    assert_eq!(stack.depth("PaymentsQueue").await.unwrap(), 1);
    assert_conforms(&stack, &roles, "PaymentsReopenPolicy", &recorder);
}

/// Each operators' policy is a managed policy attached to nothing, whose description names the
/// operators' role (the only one besides the relay's that payments.fifo takes messages from),
/// and whose ARN the stack exports.
#[test]
fn the_operators_policies_are_attached_to_nothing_and_exported() {
    use serde_yaml_ng::Value;
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../template.yaml")).unwrap();
    let template: Value = serde_yaml_ng::from_str(&text).unwrap();
    let tagged = |v: &Value| match v {
        Value::Tagged(t) => Some((t.tag.to_string(), t.value.as_str().map(str::to_owned))),
        _ => None,
    };
    for policy in ["PaymentsRedrivePolicy", "PaymentsReopenPolicy"] {
        let resource = &template["Resources"][policy];
        assert_eq!(resource["Type"].as_str(), Some("AWS::IAM::ManagedPolicy"));
        for attached in ["Roles", "Users", "Groups"] {
            assert!(
                resource["Properties"].get(attached).is_none(),
                "{policy} is attached ({attached})"
            );
        }
        let description = tagged(&resource["Properties"]["Description"]).unwrap();
        assert_eq!(description.0, "!Sub");
        assert!(
            description
                .1
                .unwrap()
                .contains("${PaymentsQueueOperatorRoleName}"),
            "{policy}"
        );
        let output = &template["Outputs"][format!("{policy}Arn").as_str()];
        assert_eq!(
            tagged(&output["Value"]),
            Some(("!Ref".to_owned(), Some(policy.to_owned())))
        );
    }
    // The IAM model reads both, beside payments-reconciler's (attached to its role, and an
    // operator's for the one-shot mode: checked with the function in iam_conformance).
    let env = Environment::new("us-east-1", "123456789012").attribute(
        "PaymentsTable",
        "StreamArn",
        "arn:aws:dynamodb:us-east-1:123456789012:table/payments/stream/2024-01-01T00:00:00.000",
    );
    let roles = TemplateRoles::load_project(&env).unwrap();
    assert_eq!(
        roles.managed_policies.keys().collect::<Vec<_>>(),
        [
            "PaymentsReconcilerPolicy",
            "PaymentsRedrivePolicy",
            "PaymentsReopenPolicy"
        ]
    );
}

/// The reconciler audits the balances: it reads them, and cannot write one. Its audited sums are
/// its own items (`reconciler#audited#...` of the accounts table).
#[test]
fn the_reconciler_cannot_write_a_balance() {
    let env = Environment::new("us-east-1", "123456789012").attribute(
        "PaymentsTable",
        "StreamArn",
        "arn:aws:dynamodb:us-east-1:123456789012:table/payments/stream/2024-01-01T00:00:00.000",
    );
    let roles = TemplateRoles::load_project(&env).unwrap();
    let policy = roles.managed_policy("PaymentsReconcilerPolicy").unwrap();
    let balances = "arn:aws:dynamodb:us-east-1:123456789012:table/payments-balances";
    let key = ["acct-1".to_owned()];
    for action in ["dynamodb:GetItem", "dynamodb:Scan"] {
        let decision = policy.evaluate(action, balances, Some(&key));
        assert!(decision.is_allowed(), "{action}: {decision}");
    }
    for action in [
        "dynamodb:UpdateItem",
        "dynamodb:PutItem",
        "dynamodb:DeleteItem",
        "dynamodb:BatchWriteItem",
        "dynamodb:PartiQLUpdate",
        "dynamodb:PartiQLInsert",
    ] {
        let decision = policy.evaluate(action, balances, Some(&key));
        assert!(!decision.is_allowed(), "{action}: {decision}");
    }
}
