//! The IAM machinery without an endpoint: policy evaluation and the project template's roles.
//! (Conformance reports and the recorder: `iam_reports.rs`.)

mod iam_common;

use iam_common::*;
use iam_conformance::{Decision, Environment, PolicyError, Role, TemplateRoles, evaluate};

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

#[test]
fn a_managed_policy_is_read_and_grants_to_the_roles_it_is_attached_to() {
    let policy = |attachment: &str| {
        let yaml = format!(
            r#"
Resources:
  Jobs: {{ Type: AWS::SQS::Queue, Properties: {{ QueueName: jobs }} }}
  R:
    Type: AWS::IAM::Role
    Properties: {{ Policies: [] }}
  Operators:
    Type: AWS::IAM::ManagedPolicy
    Properties:
      ManagedPolicyName: operators
      {attachment}
      PolicyDocument:
        Statement:
          - {{ Sid: Send, Effect: Allow, Action: sqs:SendMessage, Resource: !GetAtt Jobs.Arn }}
"#
        );
        TemplateRoles::parse(&yaml, &Environment::new(REGION, ACCOUNT))
    };
    let roles = policy("Description: the operators' sends").unwrap();
    let operators = roles.managed_policy("Operators").unwrap();
    assert_eq!(operators.logical_id, "Operators");
    assert_eq!(operators.statements.len(), 1);
    assert_eq!(operators.statements[0].id.policy, "operators");
    assert!(
        operators
            .evaluate("sqs:SendMessage", &queue("jobs"), None)
            .is_allowed()
    );
    assert!(
        !operators
            .evaluate("sqs:DeleteMessage", &queue("jobs"), None)
            .is_allowed()
    );
    // A managed policy is not a function's role, nor a role a managed policy.
    assert!(roles.roles["R"].statements.is_empty());
    assert!(matches!(
        roles.managed_policy("R"),
        Err(PolicyError::NoSuchManagedPolicy(id)) if id == "R"
    ));
    // Attached to a role of the template, it grants to that role too.
    let attached = policy("Roles: [!Ref R]").unwrap();
    assert_eq!(attached.roles["R"].statements.len(), 1);
    assert_eq!(
        attached
            .managed_policy("Operators")
            .unwrap()
            .statements
            .len(),
        1
    );
    // Attached to users or groups (which the check does not model): refused, not ignored.
    for attachment in ["Users: [u]", "Groups: [g]"] {
        assert!(policy(attachment).is_err(), "{attachment}");
    }
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
            "PaymentsReaderRole",
            "PaymentsReconcilerRole",
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
            ("payments-reader", "PaymentsReaderRole"),
            ("payments-reconciler", "PaymentsReconcilerRole"),
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
        [
            table("payments-balances"),
            table("payments"),
            table("payments-accounts")
        ]
    );

    let config = roles.recorder_config(&env());
    assert_eq!(config.hash_keys["payments"], "paymentId");
    assert_eq!(config.hash_keys["payments-idempotency"], "id");
    assert_eq!(config.hash_keys["payments-ledger"], "entryId");
    assert_eq!(config.hash_keys["payments-accounts"], "accountId");
    assert_eq!(config.hash_keys.len(), 6);

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

#[test]
fn managed_policies_policies_and_event_source_mappings_are_read() {
    let yaml = r#"
Resources:
  Jobs: { Type: AWS::SQS::Queue, Properties: { QueueName: jobs } }
  Worker:
    Type: AWS::Lambda::Function
    Properties: { FunctionName: worker, Role: !GetAtt WorkerRole.Arn }
  WorkerRole:
    Type: AWS::IAM::Role
    Properties:
      ManagedPolicyArns: [!Ref Consume]
  Consume:
    Type: AWS::IAM::ManagedPolicy
    Properties:
      PolicyDocument:
        Statement:
          - { Sid: Receive, Effect: Allow, Action: [sqs:ReceiveMessage], Resource: !GetAtt Jobs.Arn }
  Extra:
    Type: AWS::IAM::Policy
    Properties:
      PolicyName: extra
      Roles: [!Ref WorkerRole]
      PolicyDocument:
        Statement:
          - { Sid: Delete, Effect: Allow, Action: sqs:DeleteMessage, Resource: !GetAtt Jobs.Arn }
  Mapping:
    Type: AWS::Lambda::EventSourceMapping
    Properties: { FunctionName: !Ref Worker, EventSourceArn: !GetAtt Jobs.Arn }
"#;
    let roles = TemplateRoles::parse(yaml, &Environment::new(REGION, ACCOUNT)).unwrap();
    let role = roles.for_function("worker").unwrap();
    let sids: Vec<String> = role.statements.iter().map(|s| s.id.to_string()).collect();
    assert_eq!(sids, ["Consume/Receive", "extra/Delete"]);
    let report = roles.conformance("worker", &[]).unwrap();
    // The mapping reads with both statements; GetQueueAttributes and the logs are not granted.
    let denied: Vec<(&str, &str)> = report
        .denied
        .iter()
        .map(|d| (d.operation.as_str(), d.action.as_str()))
        .collect();
    assert_eq!(
        denied,
        [
            ("Lambda platform (logs)", "logs:CreateLogStream"),
            ("Lambda platform (logs)", "logs:PutLogEvents"),
            ("event source mapping Mapping", "sqs:GetQueueAttributes"),
        ],
        "{report}"
    );
    assert_eq!(report.unused, [], "{report}");
    assert_eq!(report.event_sources.len(), 2, "{report}");

    // An AWS managed policy cannot be read: rejected, not ignored.
    let aws_managed = yaml.replace(
        "[!Ref Consume]",
        "[arn:aws:iam::aws:policy/service-role/AWSLambdaSQSQueueExecutionRole]",
    );
    assert!(matches!(
        TemplateRoles::parse(&aws_managed, &Environment::new(REGION, ACCOUNT)),
        Err(PolicyError::Unsupported { .. })
    ));
}

#[test]
fn statements_granting_more_than_they_name_are_found_without_calls() {
    let t = table("t");
    let findings = |statements: &[&str]| -> Vec<String> {
        let role = role_with(statements).unwrap();
        iam_conformance::conformance("f", &[], &role)
            .findings
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    let star = findings(&["{ Sid: All, Effect: Allow, Action: '*', Resource: '*' }"]);
    assert_eq!(
        star,
        ["role R, Sid All (policy p, statement 0): the action * is a wildcard: name each action"]
    );
    let service = findings(&[&format!(
        "{{ Sid: Db, Effect: Allow, Action: 'dynamodb:*', Resource: '{t}' }}"
    )]);
    assert!(
        service[0].contains("dynamodb:* is a wildcard"),
        "{service:?}"
    );
    let records =
        findings(&["{ Sid: R, Effect: Allow, Action: dynamodb:GetRecords, Resource: '*' }"]);
    assert!(
        records[0].contains("dynamodb:GetRecords on *: names every resource"),
        "{records:?}"
    );
    assert_eq!(
        findings(&["{ Sid: L, Effect: Allow, Action: dynamodb:ListStreams, Resource: '*' }"]),
        Vec::<String>::new()
    );
    let table_wildcard = findings(&[&format!(
        "{{ Sid: W, Effect: Allow, Action: dynamodb:GetItem, Resource: 'arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/*' }}"
    )]);
    assert!(
        table_wildcard[0].contains("only wildcards"),
        "{table_wildcard:?}"
    );
    let unknown = findings(&["{ Sid: K, Effect: Allow, Action: kms:Decrypt, Resource: '*' }"]);
    assert!(
        unknown[0].contains("not in the reference table"),
        "{unknown:?}"
    );
}
