//! IAM, proved both ways on the local endpoint (which enforces no IAM): each function's real code
//! paths run against the provisioned stack with a recorder on its clients, and the whole check
//! runs for each function: every recorded call is granted by its role in template.yaml, what its
//! event source mapping and the platform do with the role (read from the template, not recorded:
//! the local runner's own requests prove nothing about Lambda's) is granted, every grant is used,
//! and no statement grants more than the requests need. The distinct calls are kept in
//! `tests/iam/tests/fixtures/iam-recording.json` for the mutation test; this test fails when the run
//! makes a call the committed recording lacks (`IAM_RECORDING=write` rewrites it). The paths include the cold starts (the idempotency table's check, the
//! redrive policy's) and the recovery ones: a failed charge and its redelivery
//! (which reads its record first), a record in progress elsewhere, a failed attempt's visibility
//! backoff, permanent failures sent to dead-letter queues, a stream record that can never be
//! relayed.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_lambda_events::dynamodb::Event as StreamEvent;
use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use aws_sdk_dynamodb::types::AttributeValue;
use iam_conformance::{CallRecorder, Environment, Recording, Report, TemplateRoles};
use lambda_idempotency::Idempotency;
use lambda_idempotency::key::{KeyConfig, stored_key};
use lambda_idempotency::store::DynamoDbBackend;
use lambda_runtime::LambdaEvent;
use local_aws::gateway::{Gateway, GatewayOptions, JwtAuthorizer};
use local_aws::runner::{InProcess, Runner};
use local_aws::template::Naming;
use payments_e2e::Stack;
use payments_e2e::http::{HttpClient, TokenIssuer};
use payments_e2e::invariants::{Failure, Scope, Violation};
use payments_model::PaymentCharged;
use tokio_util::sync::CancellationToken;

type Settings = HashMap<String, String>;

async fn wait_until_drained(stack: &Stack, queues: &[&str]) {
    let end = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut empty = 0;
    while empty < 3 {
        let mut left = 0;
        for q in queues {
            left += stack.depth(q).await.unwrap();
        }
        empty = if left == 0 { empty + 1 } else { 0 };
        assert!(
            tokio::time::Instant::now() < end,
            "{left} messages left in {queues:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_is_granted_and_every_grant_is_used() {
    let naming = Naming::unique("iam");
    let prefix = naming.prefix_str().to_owned();
    let stack = Stack::provision_named(
        naming,
        &[("FailPayments", "[flaky]:1,[permanent]:1:permanent")],
    )
    .await
    .unwrap();
    let sdk = &stack.sdk;
    let env = Environment::from_provisioned(&stack.resources)
        .with_stream_arns(&stack.clients.dynamodb, &stack.resources)
        .await
        .unwrap();
    let roles = TemplateRoles::load_project(&env).unwrap();
    let recorder = || CallRecorder::new(roles.recorder_config(&env));
    let (api_rec, pub_rec, proc_rec, send_rec) = (recorder(), recorder(), recorder(), recorder());
    let reader_rec = recorder();
    let settings = |f: &str| -> Settings { stack.settings(f).unwrap() };

    // payments-api, behind the gateway and its JWT authorizer.
    let api = payments_api::App::new(
        api_rec.dynamodb_client(sdk),
        payments_api::Config::from_settings(&settings("payments-api")).unwrap(),
    );
    // Its cold start: the idempotency table's check its main runs.
    let check = api.check_idempotency_table().await.unwrap();
    assert!(check.warnings.is_empty(), "{check:?}");
    // payments-reader: the same binary behind the reads, its own role; its cold start too.
    let reader = payments_api::App::new(
        reader_rec.dynamodb_client(sdk),
        payments_api::Config::from_settings(&settings("payments-reader")).unwrap(),
    );
    let check = reader.check_idempotency_table().await.unwrap();
    assert!(check.warnings.is_empty(), "{check:?}");
    let authorizer =
        JwtAuthorizer::from_parameters(&stack.template, "JwtIssuer", "JwtAudience").unwrap();
    let http = HttpClient::new("")
        .with_issuer(TokenIssuer::from_template(&stack.template))
        .as_caller("acct-1");
    let gateway = Gateway::serve(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        GatewayOptions::for_function(stack.template.function_by_name("payments-api").unwrap())
            .with_function(GatewayOptions::for_function(
                stack.template.function_by_name("payments-reader").unwrap(),
            ))
            .with_jwt_authorizer(authorizer),
        move |request: lambda_http::Request| {
            use lambda_http::RequestExt;
            let reads = request
                .lambda_context_ref()
                .is_some_and(|c| c.env_config.function_name == "payments-reader");
            let app = if reads { reader.clone() } else { api.clone() };
            async move { app.handle(request).await }
        },
    )
    .await
    .unwrap();
    let http = http.with_base(gateway.url());

    // The three event-driven functions, each with its own recorded clients, cold start included.
    let shutdown = CancellationToken::new();
    let pub_settings = settings("payments-publisher");
    let publisher = Arc::new(payments_publisher::App::new(
        pub_rec.sqs_client(sdk),
        payments_publisher::Config::from_settings(&pub_settings).unwrap(),
    ));
    // The runners stand in for Lambda's event source mappings: their clients are not recorded.
    let publisher_runner = Runner::new(stack.clients.sqs.clone())
        .dynamodb_streams(aws_sdk_dynamodbstreams::Client::new(sdk))
        .function(
            &stack.template,
            &stack.resources,
            "payments-publisher",
            InProcess::new(move |event: LambdaEvent<StreamEvent>| {
                let app = publisher.clone();
                async move { app.handle(event).await }
            }),
        )
        .unwrap()
        .start(shutdown.clone());

    let proc_settings = settings("payment-processor");
    let proc_sqs = proc_rec.sqs_client(sdk);
    let processor = Arc::new(
        payment_processor::App::new(
            proc_rec.dynamodb_client(sdk),
            proc_sqs.clone(),
            payment_processor::Config::from_settings(&proc_settings).unwrap(),
        )
        .with_processor(
            payments_config::consumer_processor(proc_sqs.clone(), &proc_settings).unwrap(),
        ),
    );
    let send_settings = settings("receipt-sender");
    let send_sqs = send_rec.sqs_client(sdk);
    let sender = Arc::new(
        receipt_sender::App::new(
            send_rec.dynamodb_client(sdk),
            receipt_sender::Config::from_settings(&send_settings).unwrap(),
        )
        .with_processor(
            payments_config::consumer_processor(send_sqs.clone(), &send_settings).unwrap(),
        ),
    );
    // Each consumer's cold start, as its main starts it: the idempotency table's check, and the
    // queue's (the redrive backstop, the dead-letter queue's message size and retention, the
    // expiry against both retentions).
    for (idempotency, sqs, s) in [
        (processor.idempotency(), &proc_sqs, &proc_settings),
        (sender.idempotency(), &send_sqs, &send_settings),
    ] {
        let checks = payments_config::cold_start_checks(
            idempotency.backend().inner(),
            Some(sqs.clone()),
            s,
            idempotency.expiry(),
        )
        .unwrap();
        let found = checks.report(None).await.unwrap();
        assert_eq!(found.table_warnings, Some(vec![]), "{found:?}");
        let check = found.queue.expect("SOURCE_QUEUE_URL is set");
        assert!(
            matches!(
                check.redrive,
                lambda_idempotency::redrive_policy::RedriveCheck::Ok { .. }
            ) && check.findings.is_empty()
                && check.dead_letter.is_some(),
            "{check:?}"
        );
    }
    let consumers = |function: &'static str| {
        Runner::new(stack.clients.sqs.clone())
            .wait_time_seconds(1)
            .function(
                &stack.template,
                &stack.resources,
                function,
                InProcess::new({
                    let (processor, sender) = (processor.clone(), sender.clone());
                    move |event: LambdaEvent<SqsEvent>| {
                        let (processor, sender) = (processor.clone(), sender.clone());
                        async move {
                            if function == "payment-processor" {
                                processor.handle(event).await
                            } else {
                                sender.handle(event).await
                            }
                        }
                    }
                }),
            )
    };
    let processor_runner = consumers("payment-processor")
        .unwrap()
        .start(shutdown.clone());
    let sender_runner = consumers("receipt-sender").unwrap().start(shutdown.clone());

    // payments-api: a payment, its replay, its key reused after the record expired, a read.
    let key = uuid::Uuid::new_v4().to_string();
    let body = r#"{"amountCents":500,"currency":"EUR","description":"first"}"#;
    let created = http.post_payment(Some(&key), body).await.unwrap();
    assert_eq!(created.status, 201, "{created:?}");
    assert!(http.post_payment(Some(&key), body).await.unwrap().replayed);
    let scoped = format!("6:acct-1/{key}");
    stack
        .clients
        .dynamodb
        .update_item()
        .table_name(stack.table("IdempotencyTable"))
        .key(
            "id",
            AttributeValue::S(stored_key(Some("payments-api"), &scoped)),
        )
        .update_expression("SET expiration = :past")
        .expression_attribute_values(":past", AttributeValue::N("1".into()))
        .send()
        .await
        .unwrap();
    let reused = http
        .post_payment(Some(&key), r#"{"amountCents":501,"currency":"EUR"}"#)
        .await
        .unwrap();
    assert_eq!(reused.status, 422, "{reused:?}");
    // A number of the account taken by a request that ended before its write (a crash): a gap,
    // which payment-processor voids before it charges the account's next payment.
    payments_model::order::take_number(
        &stack.clients.dynamodb,
        stack.table("AccountsTable"),
        "acct-1",
    )
    .await
    .unwrap();
    let payment_id = serde_json::from_str::<serde_json::Value>(&created.body).unwrap()["paymentId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        http.get(&format!("/payments/{payment_id}"))
            .await
            .unwrap()
            .status,
        200
    );
    // A failed attempt (backoff), a permanent failure (dead letter, payment marked failed).
    let mut poisoned = String::new();
    for description in ["[flaky] once", "[permanent] never"] {
        let body = format!(r#"{{"amountCents":7,"currency":"EUR","description":"{description}"}}"#);
        let answer = http
            .post_payment(Some(&uuid::Uuid::new_v4().to_string()), &body)
            .await
            .unwrap();
        assert_eq!(answer.status, 201);
        if description.starts_with("[permanent]") {
            let answer: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
            poisoned = answer["paymentId"].as_str().unwrap().to_owned();
        }
    }
    // An outside producer's messages: one for a payment never accepted (refused: the payment is
    // read to say why), and one that arrives before an earlier payment of its account is
    // settled (its account's order is read, the earlier payment charged from the table first).
    // The two seeded payments lack the API's request fingerprint, so the relay dead-letters
    // their stream records instead of sending them: only the outside message reaches the queue.
    let s = |v: &str| AttributeValue::S(v.to_owned());
    let n = |v: u64| AttributeValue::N(v.to_string());
    for sequence in [1u64, 2] {
        stack
            .clients
            .dynamodb
            .put_item()
            .table_name(stack.table("PaymentsTable"))
            .item("paymentId", s(&format!("pay_outside_{sequence}")))
            .item("accountId", s("acct-outside"))
            .item("amountCents", n(10))
            .item("currency", s("EUR"))
            .item("status", s("accepted"))
            .item("sequence", n(sequence))
            .send()
            .await
            .unwrap();
    }
    stack
        .clients
        .dynamodb
        .put_item()
        .table_name(stack.table("AccountsTable"))
        .item("accountId", s("acct-outside"))
        .item("nextSequence", n(2))
        .item("pending1", s("pay_outside_1"))
        .item("pending2", s("pay_outside_2"))
        .send()
        .await
        .unwrap();
    for (payment_id, sequence) in [("pay_never_accepted", 1), ("pay_outside_2", 2)] {
        let body = format!(
            r#"{{"paymentId":"{payment_id}","accountId":"acct-outside","amountCents":10,"currency":"EUR","sequence":{sequence}}}"#
        );
        stack
            .clients
            .sqs
            .send_message()
            .queue_url(stack.queue_url("PaymentsQueue"))
            .message_group_id("acct-outside")
            .message_deduplication_id(payment_id)
            .message_body(body)
            .send()
            .await
            .unwrap();
    }
    // A stream record that is not a payment: dead-lettered by the relay.
    stack
        .clients
        .dynamodb
        .put_item()
        .table_name(stack.table("PaymentsTable"))
        .item("paymentId", AttributeValue::S("not-a-payment".into()))
        .send()
        .await
        .unwrap();
    // receipt-sender: a receipt whose key is in progress elsewhere (visibility set to the lease's
    // end), a body that does not parse, and an event for a payment that does not exist (both
    // dead-lettered). Each event's payment is read first: the first one's is charged.
    stack
        .clients
        .dynamodb
        .put_item()
        .table_name(stack.table("PaymentsTable"))
        .item("paymentId", s("pay_elsewhere"))
        .item("accountId", s("acct-1"))
        .item("amountCents", n(1))
        .item("currency", s("EUR"))
        .item("status", s("charged"))
        .item("ledgerEntryId", s("entry"))
        .send()
        .await
        .unwrap();
    let charged = PaymentCharged {
        payment_id: "pay_elsewhere".into(),
        account_id: "acct-1".into(),
        amount_cents: 1,
        currency: "EUR".into(),
        ledger_entry_id: "entry".into(),
    };
    let charged_body = serde_json::to_string(&charged).unwrap();
    let mut message = SqsMessage::default();
    message.body = Some(charged_body.clone());
    let hash = KeyConfig::json_pointer("/paymentId")
        .payload_hash(&message)
        .unwrap();
    let elsewhere = Idempotency::new(DynamoDbBackend::new(
        stack.clients.dynamodb.clone(),
        stack.table("IdempotencyTable"),
    ))
    .with_key_prefix("receipt-sender");
    elsewhere
        .acquire_hashed(
            "pay_elsewhere",
            &hash,
            Some((SystemTime::now() + Duration::from_secs(2)).into()),
        )
        .await
        .unwrap();
    let never_charged = serde_json::to_string(&PaymentCharged {
        payment_id: "pay_never_charged".into(),
        ..charged.clone()
    })
    .unwrap();
    for body in [charged_body.as_str(), "not json", never_charged.as_str()] {
        stack
            .clients
            .sqs
            .send_message()
            .queue_url(stack.queue_url("ReceiptsQueue"))
            .message_body(body)
            .send()
            .await
            .unwrap();
    }
    publisher_runner
        .wait_streams_caught_up(Duration::from_secs(60))
        .await
        .unwrap();
    wait_until_drained(&stack, &["PaymentsQueue", "ReceiptsQueue"]).await;

    shutdown.cancel();
    for runner in [publisher_runner, processor_runner, sender_runner] {
        runner.stop().await;
    }
    gateway.shutdown().await;

    // payments-reconciler after the run: every charge audited, payments left accepted with
    // their message moved by SQS to the dead-letter queue (sent back; marked failed past the
    // limit of sends back), one with no message (sent again).
    let recon_rec = recorder();
    let (mut left, fatal) = reconcile(&stack, &recon_rec).await;

    let mut reports: Vec<Report> = Vec::new();
    let mut recorded = Vec::new();
    for (function, rec) in [
        ("payments-api", &api_rec),
        ("payments-reader", &reader_rec),
        ("payments-publisher", &pub_rec),
        ("payment-processor", &proc_rec),
        ("receipt-sender", &send_rec),
        ("payments-reconciler", &recon_rec),
    ] {
        assert!(
            rec.problems().is_empty(),
            "{function}: {:?}",
            rec.problems()
        );
        let calls = rec.take();
        reports.push(roles.conformance(function, &calls).unwrap());
        recorded.push((function.to_owned(), calls));
    }
    println!("{}", Report::markdown_header());
    for r in &reports {
        println!("{}", r.markdown_row());
    }
    let failing: Vec<String> = reports
        .iter()
        .filter(|r| !r.is_conformant())
        .map(ToString::to_string)
        .collect();
    assert!(failing.is_empty(), "{}", failing.join("\n\n"));

    let recording = Recording::from_run(&stack.resources, &prefix, recorded);
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/iam/tests/fixtures/iam-recording.json"
    );
    if std::env::var("IAM_RECORDING").as_deref() == Ok("write") {
        recording.save(path).unwrap();
    }
    let committed = Recording::load(path).unwrap();
    let missing = recording.missing_from(&committed);
    assert!(
        missing.is_empty(),
        "{path} lacks calls of this run (rerun with IAM_RECORDING=write and commit it):\n{}",
        missing.join("\n")
    );
    // What the run made on purpose: a payment item with no status and a charged payment with no
    // ledger entry (written by hand for payment-processor's and receipt-sender's refusals), and
    // what the reconciler's pass left with no function running any more.
    left.extend([
        Violation::Unsettled {
            payment_id: "not-a-payment".into(),
            status: String::new(),
        },
        Violation::LedgerEntries {
            payment_id: "pay_elsewhere".into(),
            entries: 0,
        },
    ]);
    stack
        .assert_invariants(
            &Scope::pipeline()
                .leaving("PaymentsQueue")
                .leaving("ReceiptsQueue")
                .declaring(Failure::Permanent, [poisoned])
                .declaring(Failure::Fatal, [fatal]),
            &left,
        )
        .await;
}

/// One payments-reconciler pass with `recorder`'s clients, over what the run left, three
/// payments left accepted (one whose message SQS moved to the dead-letter queue, sent back; one
/// whose message SQS moved again after the limit of sends back, marked failed; one with no
/// message, sent again) and a charged payment whose receipt is gone. Returns the violations the
/// pass leaves with no function running: the payments sent again or back still accepted, the
/// charged payment's receipt event on the receipts queue, its receipt missing; and the payment
/// marked failed, to declare.
async fn reconcile(stack: &Stack, recorder: &CallRecorder) -> (Vec<Violation>, String) {
    use payments_operations::reconcile::send_back::SENT_BACK_ATTRIBUTE;
    use payments_operations::reconcile::{Config, Reconciler};
    let [moved, dead, lost] = <[_; 3]>::try_from(
        stack
            .accept(payments_e2e::stack::payments(3, 3, "iam-reconcile", |_| {
                String::new()
            }))
            .await
            .unwrap(),
    )
    .unwrap();
    let mut settings = stack.settings("payments-reconciler").unwrap();
    for (k, v) in [
        ("RESEND_AFTER_SECONDS", "0"),
        ("AUDIT_LAG_SECONDS", "0"),
        ("RECEIPT_AFTER_SECONDS", "0"),
    ] {
        settings.insert(k.into(), v.into());
    }
    let config = Config::from_settings(&settings).unwrap();
    // As SQS's own move puts them there: no reason; the second after the limit of sends back.
    for (payment, sent_back) in [(&moved, None), (&dead, Some(config.send_back_limit))] {
        let mut send = stack
            .clients
            .sqs
            .send_message()
            .queue_url(stack.queue_url("PaymentsDeadLetterQueue"))
            .message_body(serde_json::to_string(payment).unwrap())
            .message_group_id(&payment.account_id)
            .message_deduplication_id(format!("iam-reconcile-{}", payment.payment_id));
        if let Some(n) = sent_back {
            send = send.message_attributes(
                SENT_BACK_ATTRIBUTE,
                aws_sdk_sqs::types::MessageAttributeValue::builder()
                    .data_type("Number")
                    .string_value(n.to_string())
                    .build()
                    .unwrap(),
            );
        }
        send.send().await.unwrap();
    }
    let receipt = stack.scan("ReceiptsTable").await.unwrap().remove(0);
    stack
        .clients
        .dynamodb
        .delete_item()
        .table_name(stack.table("ReceiptsTable"))
        .key("receiptId", receipt["receiptId"].clone())
        .send()
        .await
        .unwrap();
    let reconciler = Reconciler::new(
        recorder.dynamodb_client(&stack.sdk),
        recorder.sqs_client(&stack.sdk),
        config,
    );
    let report = reconciler
        .run(payments_publisher::now_ms() + 1)
        .await
        .unwrap();
    assert_eq!(
        report.waiting.marked_failed,
        std::slice::from_ref(&dead.payment_id),
        "{report}"
    );
    assert_eq!(
        report.waiting.sent_back,
        std::slice::from_ref(&moved.payment_id),
        "{report}"
    );
    assert!(report.waiting.resent.contains(&lost.payment_id), "{report}");
    assert_eq!(report.receipts.resent.len(), 1, "{report}");
    assert!(report.audit.audited > 0, "{report}");
    assert!(report.audit.mismatches.is_empty(), "{report}");
    let left = vec![
        Violation::Unsettled {
            payment_id: lost.payment_id,
            status: "accepted".into(),
        },
        Violation::Unsettled {
            payment_id: moved.payment_id,
            status: "accepted".into(),
        },
        Violation::Receipts {
            payment_id: receipt["paymentId"].as_s().unwrap().clone(),
            receipts: 0,
        },
    ];
    (left, dead.payment_id)
}

/// Every queue names who may send to it: one queue policy whose one statement denies
/// `sqs:SendMessage` to every principal but its producers' roles (and, on the two work queues,
/// the operators' role, which redrives and reopens), a Deny that no identity policy can
/// override. The roles excepted are exactly those whose own policies grant the send. On a
/// dead-letter queue that SQS moves messages to, the Deny applies to principals' requests only
/// (`aws:PrincipalArn` present), so that it can never stop SQS's own move.
#[test]
fn every_queue_lets_only_its_producers_send() {
    use std::collections::BTreeSet;

    use serde_yaml_ng::Value;
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../template.yaml")).unwrap();
    let template: Value = serde_yaml_ng::from_str(&text).unwrap();
    let resources = template["Resources"].as_mapping().unwrap();
    let tagged = |v: &Value| match v {
        Value::Tagged(t) => Some((t.tag.to_string(), t.value.as_str().map(str::to_owned))),
        _ => None,
    };
    let get_att = |s: &str| Some(("!GetAtt".to_owned(), Some(s.to_owned())));
    let operators = (
        "!Sub".to_owned(),
        Some(
            "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/${PaymentsQueueOperatorRoleName}"
                .to_owned(),
        ),
    );
    // Each queue: its name (the template's default), its producers' roles, and whether the
    // operators' role may send to it too.
    let expected: [(&str, &str, &[&str], bool); 5] = [
        (
            "PaymentsQueue",
            "payments.fifo",
            &["PaymentsPublisherRole", "PaymentsReconcilerRole"],
            true,
        ),
        (
            "ReceiptsQueue",
            "receipts",
            &["PaymentProcessorRole", "PaymentsReconcilerRole"],
            true,
        ),
        (
            "PaymentsDeadLetterQueue",
            "payments-dlq.fifo",
            &["PaymentProcessorRole"],
            false,
        ),
        (
            "ReceiptsDeadLetterQueue",
            "receipts-dlq",
            &["ReceiptSenderRole"],
            false,
        ),
        (
            "PaymentsOutboxDeadLetterQueue",
            "payments-outbox-dlq",
            &["PaymentsPublisherRole"],
            false,
        ),
    ];
    let queues: BTreeSet<&str> = resources
        .iter()
        .filter(|(_, r)| r["Type"].as_str() == Some("AWS::SQS::Queue"))
        .map(|(id, _)| id.as_str().unwrap())
        .collect();
    assert_eq!(
        queues,
        expected.iter().map(|e| e.0).collect(),
        "every queue of the template, and only they, with their senders"
    );

    let mut env = Environment::new("us-east-1", "123456789012");
    for (queue, name, ..) in &expected {
        env = env.reference(
            *queue,
            format!("https://sqs.us-east-1.amazonaws.com/123456789012/{name}"),
        );
    }
    let roles = TemplateRoles::load_project(&env).unwrap();

    for (queue, name, producers, operators_send) in expected {
        let policies: Vec<&Value> = resources
            .values()
            .filter(|r| r["Type"].as_str() == Some("AWS::SQS::QueuePolicy"))
            .filter(|r| {
                r["Properties"]["Queues"]
                    .as_sequence()
                    .unwrap()
                    .iter()
                    .any(|q| tagged(q) == Some(("!Ref".to_owned(), Some(queue.to_owned()))))
            })
            .collect();
        assert_eq!(policies.len(), 1, "{queue}: one queue policy");
        assert_eq!(
            policies[0]["Properties"]["Queues"]
                .as_sequence()
                .unwrap()
                .len(),
            1,
            "{queue}: a policy of its own"
        );
        let statements = policies[0]["Properties"]["PolicyDocument"]["Statement"]
            .as_sequence()
            .unwrap();
        assert_eq!(
            statements.len(),
            1,
            "{queue}: its Deny, and nothing granted"
        );
        let deny = &statements[0];
        assert_eq!(deny["Effect"].as_str(), Some("Deny"), "{queue}");
        assert_eq!(deny["Principal"].as_str(), Some("*"), "{queue}");
        assert_eq!(deny["Action"].as_str(), Some("sqs:SendMessage"), "{queue}");
        assert_eq!(
            tagged(&deny["Resource"]),
            get_att(&format!("{queue}.Arn")),
            "{queue}"
        );
        let excepted: Vec<(String, Option<String>)> =
            deny["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]
                .as_sequence()
                .unwrap_or_else(|| panic!("{queue}: ArnNotEquals aws:PrincipalArn, a list"))
                .iter()
                .map(|v| tagged(v).expect("a resolved ARN"))
                .collect();
        let mut want: Vec<(String, Option<String>)> = producers
            .iter()
            .map(|role| get_att(&format!("{role}.Arn")).unwrap())
            .collect();
        if operators_send {
            want.push(operators.clone());
        }
        assert_eq!(excepted, want, "{queue}: who may send");

        // SQS's own move: to the queues some queue's redrive policy names.
        let moved_to = resources.values().any(|r| {
            tagged(&r["Properties"]["RedrivePolicy"]["deadLetterTargetArn"])
                == get_att(&format!("{queue}.Arn"))
        });
        let conditions: BTreeSet<&str> = deny["Condition"]
            .as_mapping()
            .unwrap()
            .keys()
            .map(|k| k.as_str().unwrap())
            .collect();
        if moved_to {
            assert_eq!(
                conditions,
                BTreeSet::from(["ArnNotEquals", "Null"]),
                "{queue}"
            );
            assert_eq!(
                deny["Condition"]["Null"]["aws:PrincipalArn"].as_str(),
                Some("false"),
                "{queue}: principals' requests only"
            );
        } else {
            assert_eq!(conditions, BTreeSet::from(["ArnNotEquals"]), "{queue}");
        }

        // The roles whose own policies grant the send are the producers: no more, no fewer.
        let arn = format!("arn:aws:sqs:us-east-1:123456789012:{name}");
        let senders: BTreeSet<&str> = roles
            .functions
            .values()
            .filter(|f| {
                roles.roles[&f.role]
                    .evaluate("sqs:SendMessage", &arn, None)
                    .is_allowed()
            })
            .map(|f| f.role.as_str())
            .collect();
        assert_eq!(
            senders,
            producers.iter().copied().collect(),
            "{queue}: the roles granted the send"
        );
    }
}
