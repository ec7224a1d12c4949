//! The IAM machinery without an endpoint: policy evaluation, the project template's roles, the
//! recorder on real SDK clients (requests recorded before they are sent), and conformance
//! reports in both directions.

use local_aws::iam::{
    Call, CallRecorder, Decision, Environment, ItemKind, LeadingKeys, PolicyError, RecorderConfig,
    Report, Resource, Role, TemplateRoles, conformance, evaluate,
};

const REGION: &str = "us-east-1";
const ACCOUNT: &str = "123456789012";
const STREAM: &str =
    "arn:aws:dynamodb:us-east-1:123456789012:table/payments/stream/2024-01-01T00:00:00.000";

fn env() -> Environment {
    Environment::new(REGION, ACCOUNT).attribute("PaymentsTable", "StreamArn", STREAM)
}

fn project() -> TemplateRoles {
    TemplateRoles::load_project(&env()).unwrap_or_else(|e| panic!("{e}"))
}

fn table(name: &str) -> String {
    format!("arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}")
}

fn queue(name: &str) -> String {
    format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{name}")
}

fn queue_url(name: &str) -> String {
    format!("http://127.0.0.1:5000/{ACCOUNT}/{name}")
}

/// The role of function `f` in a template whose role has these statements (flow-style YAML,
/// one per line).
fn role_with(statements: &[&str]) -> Result<Role, PolicyError> {
    let statements: String = statements
        .iter()
        .map(|s| format!("              - {s}\n"))
        .collect();
    let yaml = format!(
        r#"
Resources:
  F:
    Type: AWS::Serverless::Function
    Properties: {{ FunctionName: f, Role: !GetAtt R.Arn }}
  R:
    Type: AWS::IAM::Role
    Properties:
      Policies:
        - PolicyName: p
          PolicyDocument:
            Statement:
{statements}"#
    );
    let roles = TemplateRoles::parse(&yaml, &Environment::new(REGION, ACCOUNT))?;
    Ok(roles.for_function("f")?.clone())
}

fn keys(k: &[&str]) -> Vec<String> {
    k.iter().map(|s| (*s).to_owned()).collect()
}

/// A recorder configured from the project template.
fn recorder() -> CallRecorder {
    CallRecorder::new(project().recorder_config(&env()))
}

fn record(recorder: &CallRecorder, target: &str, body: &serde_json::Value) {
    recorder.record(Some(target), Some(body.to_string().as_bytes()));
    assert_eq!(recorder.problems(), [], "{target}");
}

fn check(function: &str, calls: &[Call]) -> Report {
    let roles = project();
    conformance(function, calls, roles.for_function(function).unwrap())
}

fn grants_of(report_grants: &[local_aws::iam::Grant]) -> Vec<(String, String)> {
    report_grants
        .iter()
        .map(|g| (g.action.clone(), g.resource.clone()))
        .collect()
}

// --- evaluation ----------------------------------------------------------------------------

#[test]
fn allow_matches_actions_case_insensitively_and_resources_with_wildcards() {
    let role = role_with(&[&format!(
        "{{ Sid: Read, Effect: Allow, Action: ['dynamodb:Get*'], Resource: ['{}', '{}/index/*'] }}",
        table("t"),
        table("t")
    )])
    .unwrap();
    assert!(evaluate(&role, "dynamodb:GetItem", &table("t"), None).is_allowed());
    assert!(evaluate(&role, "DynamoDB:getitem", &table("t"), None).is_allowed());
    assert!(
        evaluate(
            &role,
            "dynamodb:GetItem",
            &format!("{}/index/by-date", table("t")),
            None
        )
        .is_allowed()
    );
    // Not covered: another action, another table, a table whose name extends the granted one.
    assert!(!evaluate(&role, "dynamodb:Query", &table("t"), None).is_allowed());
    assert!(!evaluate(&role, "dynamodb:GetItem", &table("u"), None).is_allowed());
    assert!(!evaluate(&role, "dynamodb:GetItem", &table("t2"), None).is_allowed());
    // Resources match case-sensitively.
    assert!(!evaluate(&role, "dynamodb:GetItem", &table("T"), None).is_allowed());
}

#[test]
fn explicit_deny_beats_allow_which_beats_implicit_deny() {
    let role = role_with(&[
        "{ Sid: Everything, Effect: Allow, Action: '*', Resource: '*' }",
        &format!(
            "{{ Sid: NoDelete, Effect: Deny, Action: dynamodb:DeleteItem, Resource: '{}' }}",
            table("t")
        ),
    ])
    .unwrap();
    assert_eq!(
        evaluate(&role, "dynamodb:DeleteItem", &table("t"), None),
        Decision::ExplicitDeny {
            statement: role.statements[1].id.clone()
        }
    );
    assert!(evaluate(&role, "dynamodb:DeleteItem", &table("u"), None).is_allowed());
    assert!(evaluate(&role, "dynamodb:GetItem", &table("t"), None).is_allowed());

    let narrow = role_with(&[&format!(
        "{{ Effect: Allow, Action: sqs:SendMessage, Resource: '{}' }}",
        queue("q")
    )])
    .unwrap();
    assert_eq!(
        evaluate(&narrow, "sqs:DeleteMessage", &queue("q"), None),
        Decision::ImplicitDeny {
            near_misses: vec![]
        }
    );
}

#[test]
fn leading_keys_conditions() {
    let like = role_with(&[&format!(
        "{{ Sid: Own, Effect: Allow, Action: dynamodb:UpdateItem, Resource: '{}', \
         Condition: {{ 'ForAllValues:StringLike': {{ 'dynamodb:LeadingKeys': ['a#*'] }} }} }}",
        table("t")
    )])
    .unwrap();
    let t = table("t");
    assert!(
        like.evaluate("dynamodb:UpdateItem", &t, Some(&keys(&["a#1"])))
            .is_allowed()
    );
    assert!(
        like.evaluate("dynamodb:UpdateItem", &t, Some(&keys(&["a#1", "a#2"])))
            .is_allowed()
    );
    let denied = like.evaluate("dynamodb:UpdateItem", &t, Some(&keys(&["a#1", "b#2"])));
    let Decision::ImplicitDeny { near_misses } = &denied else {
        panic!("{denied:?}")
    };
    assert_eq!(
        near_misses.len(),
        1,
        "the statement matched but its condition failed"
    );
    assert!(
        denied.to_string().contains("dynamodb:LeadingKeys"),
        "{denied}"
    );
    // As AWS documents: ForAllValues also holds when the request has no leading keys.
    assert!(like.evaluate("dynamodb:UpdateItem", &t, None).is_allowed());
    assert!(
        like.evaluate("dynamodb:UpdateItem", &t, Some(&[]))
            .is_allowed()
    );

    let equals = role_with(&[&format!(
        "{{ Effect: Allow, Action: dynamodb:GetItem, Resource: '{t}', \
         Condition: {{ 'ForAllValues:StringEquals': {{ 'DynamoDB:LeadingKeys': ['a#*', 'b'] }} }} }}"
    )])
    .unwrap();
    assert!(
        equals
            .evaluate("dynamodb:GetItem", &t, Some(&keys(&["b"])))
            .is_allowed()
    );
    assert!(
        equals
            .evaluate("dynamodb:GetItem", &t, Some(&keys(&["a#*"])))
            .is_allowed()
    );
    assert!(
        !equals
            .evaluate("dynamodb:GetItem", &t, Some(&keys(&["a#1"])))
            .is_allowed()
    );
}

#[test]
fn what_the_model_does_not_cover_is_an_error() {
    let t = table("t");
    let with_condition = |c: &str| {
        role_with(&[&format!(
            "{{ Effect: Allow, Action: dynamodb:GetItem, Resource: '{t}', Condition: {c} }}"
        )])
    };
    for condition in [
        "{ StringEquals: { 'dynamodb:LeadingKeys': [x] } }",
        "{ 'ForAnyValue:StringLike': { 'dynamodb:LeadingKeys': [x] } }",
        "{ 'ForAllValues:StringLike': { 'dynamodb:Attributes': [x] } }",
        "{ StringEqualsIfExists: { 'dynamodb:ReturnValues': NONE } }",
    ] {
        assert!(
            matches!(
                with_condition(condition),
                Err(PolicyError::Unsupported { .. })
            ),
            "{condition}"
        );
    }
    assert!(matches!(
        role_with(&["{ Effect: Allow, NotAction: sqs:*, Resource: '*' }"]),
        Err(PolicyError::Unsupported { .. })
    ));
    assert!(matches!(
        role_with(&["{ Effect: Allow, Action: sqs:*, NotResource: '*' }"]),
        Err(PolicyError::Unsupported { .. })
    ));
    assert!(matches!(
        role_with(&["{ Effect: Maybe, Action: sqs:*, Resource: '*' }"]),
        Err(PolicyError::Invalid { .. })
    ));
    assert!(matches!(
        role_with(&["{ Effect: Allow, Action: sqs:*, Resource: !GetAtt Nowhere.Arn }"]),
        Err(PolicyError::Invalid { .. })
    ));
}

// --- the project's template -----------------------------------------------------------------

#[test]
fn project_roles_parse_and_resolve() {
    let roles = project();
    assert_eq!(
        roles.roles.keys().collect::<Vec<_>>(),
        [
            "PaymentProcessorRole",
            "PaymentsApiRole",
            "PaymentsPublisherRole",
            "ReceiptSenderRole"
        ]
    );
    let function_roles: Vec<(&str, &str)> = roles
        .functions
        .values()
        .map(|f| (f.function_name.as_str(), f.role.as_str()))
        .collect();
    assert_eq!(
        function_roles,
        [
            ("payment-processor", "PaymentProcessorRole"),
            ("payments-api", "PaymentsApiRole"),
            ("payments-publisher", "PaymentsPublisherRole"),
            ("receipt-sender", "ReceiptSenderRole"),
        ]
    );

    let api = roles.for_function("payments-api").unwrap();
    let statement = |role: &Role, sid: &str| {
        role.statements
            .iter()
            .find(|s| s.id.sid.as_deref() == Some(sid))
            .unwrap_or_else(|| panic!("no {sid}"))
            .clone()
    };
    assert_eq!(
        statement(api, "Logs").resources,
        ["arn:aws:logs:us-east-1:123456789012:log-group:/aws/lambda/payments-api:*"]
    );
    let idempotency = statement(api, "IdempotencyRecords");
    assert_eq!(
        idempotency.actions,
        ["dynamodb:UpdateItem", "dynamodb:DeleteItem"]
    );
    assert_eq!(idempotency.resources, [table("payments-idempotency")]);
    assert_eq!(idempotency.conditions.len(), 1);
    assert_eq!(idempotency.conditions[0].values, ["payments-api#*"]);

    let publisher = roles.for_function("payments-publisher").unwrap();
    assert_eq!(
        statement(publisher, "ReadPaymentsStream").resources,
        [format!("{}/stream/*", table("payments"))]
    );
    assert_eq!(
        statement(publisher, "OnFailureDestination").resources,
        [queue("payments-outbox-dlq")]
    );
    let processor = roles.for_function("payment-processor").unwrap();
    assert_eq!(
        statement(processor, "ChargeBalancesAndPayments").resources,
        [table("payments-balances"), table("payments")]
    );

    let config = roles.recorder_config(&env());
    assert_eq!(config.hash_keys["payments"], "paymentId");
    assert_eq!(config.hash_keys["payments-idempotency"], "id");
    assert_eq!(config.hash_keys["payments-ledger"], "entryId");
    assert_eq!(config.hash_keys.len(), 5);

    // The stream grant names the table's streams, not one stream's label (which DynamoDB
    // picks): the roles resolve without knowing the label, and the grant outlives a new stream.
    let without_label = TemplateRoles::load_project(&Environment::new(REGION, ACCOUNT))
        .expect("the roles resolve without the stream's label");
    assert_eq!(
        statement(
            without_label.for_function("payments-publisher").unwrap(),
            "ReadPaymentsStream"
        )
        .resources,
        [format!("{}/stream/*", table("payments"))]
    );
    assert!(matches!(
        roles.for_function("nobody"),
        Err(PolicyError::NoSuchFunction(_))
    ));
}

#[test]
fn provisioned_names_replace_the_templates() {
    // As Environment::from_provisioned gives them for an isolated (prefixed) copy.
    let env = env()
        .reference("IdempotencyTable", "t1-payments-idempotency")
        .attribute("IdempotencyTable", "Arn", table("t1-payments-idempotency"))
        .attribute("ReceiptsQueue", "Arn", queue("t1-receipts"));
    let roles = TemplateRoles::load_project(&env).unwrap();
    let sender = roles.for_function("receipt-sender").unwrap();
    assert!(
        sender
            .evaluate("sqs:ReceiveMessage", &queue("t1-receipts"), None)
            .is_allowed()
    );
    assert!(
        !sender
            .evaluate("sqs:ReceiveMessage", &queue("receipts"), None)
            .is_allowed()
    );
    assert_eq!(
        roles.recorder_config(&env).hash_keys["t1-payments-idempotency"],
        "id"
    );
}

// --- conformance ---------------------------------------------------------------------------

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
            ("dynamodb:GetItem".to_owned(), table("payments"))
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
fn event_source_mapping_calls_map_to_the_function_s_role() {
    // payments-publisher: the stream read by the event source mapping, the code's sends, and
    // the mapping's on-failure destination.
    let r = recorder();
    record(
        &r,
        "DynamoDBStreams_20120810.DescribeStream",
        &serde_json::json!({"StreamArn": STREAM}),
    );
    record(
        &r,
        "DynamoDBStreams_20120810.GetShardIterator",
        &serde_json::json!({"StreamArn": STREAM, "ShardId": "s-1", "ShardIteratorType": "TRIM_HORIZON"}),
    );
    record(
        &r,
        "DynamoDBStreams_20120810.GetRecords",
        &serde_json::json!({"ShardIterator": format!("{STREAM}|1|AAAA")}),
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
    let calls = r.snapshot();
    let report = check("payments-publisher", &calls);
    assert_eq!(report.denied, [], "{report}");
    // The grant on the table's streams (`table/payments/stream/*`) covers ListStreams for that
    // table, which these calls never made.
    let streams = format!("{}/stream/*", table("payments"));
    assert_eq!(
        grants_of(&report.unused),
        [("dynamodb:ListStreams".to_owned(), streams)],
        "{report}"
    );
    record(
        &r,
        "DynamoDBStreams_20120810.ListStreams",
        &serde_json::json!({"TableName": "payments"}),
    );
    let report = check("payments-publisher", &r.snapshot());
    assert_eq!(report.denied, [], "{report}");
    assert_eq!(report.unused, [], "{report}");
    // Without a table, ListStreams asks for every stream (`*`), which the role does not grant.
    record(
        &r,
        "DynamoDBStreams_20120810.ListStreams",
        &serde_json::json!({}),
    );
    let report = check("payments-publisher", &r.take());
    assert_eq!(report.denied.len(), 1, "{report}");
    assert_eq!(
        (
            report.denied[0].action.as_str(),
            report.denied[0].resource.as_str()
        ),
        ("dynamodb:ListStreams", "*")
    );

    // payment-processor: the SQS event source mapping and the cold-start and backoff calls.
    let r = recorder();
    let source = queue_url("payments.fifo");
    for (op, body) in [
        ("ReceiveMessage", serde_json::json!({"QueueUrl": source})),
        (
            "DeleteMessageBatch",
            serde_json::json!({"QueueUrl": source, "Entries": []}),
        ),
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
    let unused = grants_of(&report.unused);
    assert!(
        unused
            .iter()
            .all(|(_, resource)| resource != &queue("payments.fifo")),
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
