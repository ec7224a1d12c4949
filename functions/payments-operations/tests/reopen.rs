//! Reopening a failed payment against the local endpoint (moto): the library and the `reopen`
//! binary, on a payments table, an accounts table and a payments queue of their own.
//!
//! Run with `infra/local-aws/local-aws run -- cargo nextest run -p payments-operations --test
//! reopen`; without `AWS_ENDPOINT_URL` every test fails (it never skips).

mod common;

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use aws_sdk_sqs::types::MessageSystemAttributeName;
use lambda_idempotency::publish::DeduplicationId;
use payments_model::{PaymentItem, PaymentRequested, PaymentStatus};
use payments_operations::reopen::{ReopenError, Reopener, Reopening, Tables};

const REOPEN: &str = env!("CARGO_BIN_EXE_reopen");

type Item = HashMap<String, AttributeValue>;

/// The tables and the queue of one test, and clients for them.
struct Setup {
    dynamodb: aws_sdk_dynamodb::Client,
    sqs: aws_sdk_sqs::Client,
    tables: Tables,
    queue: common::Queue,
}

async fn table(dynamodb: &aws_sdk_dynamodb::Client, tag: &str, key: &str) -> String {
    let name = common::unique(tag);
    dynamodb
        .create_table()
        .table_name(&name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(key)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(key)
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("CreateTable");
    name
}

impl Setup {
    async fn new() -> Self {
        let sdk = common::sdk().await;
        let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        let tables = Tables {
            payments: table(&dynamodb, "payments", "paymentId").await,
            accounts: table(&dynamodb, "accounts", "accountId").await,
        };
        let queue = common::queue(&sqs, "payments", true, &[]).await;
        Self {
            dynamodb,
            sqs,
            tables,
            queue,
        }
    }

    fn reopener(&self) -> Reopener {
        Reopener::new(
            self.dynamodb.clone(),
            self.sqs.clone(),
            self.tables.clone(),
            &self.queue.url,
        )
    }

    /// Account `acct-1` with two payments: `pay-1` (number 1) failed, `pay-2` (number 2) still
    /// accepted.
    async fn failed_payment(&self) -> PaymentItem {
        let payment = |id: &str, sequence: u64, status: PaymentStatus| PaymentItem {
            payment_id: id.to_owned(),
            account_id: "acct-1".to_owned(),
            amount_cents: 1250,
            currency: "EUR".to_owned(),
            description: Some("coffee".to_owned()),
            status: status.as_str().to_owned(),
            created_at: 1_767_225_600_000,
            caller_id: "alice".to_owned(),
            request_hash: "hash".to_owned(),
            sequence: Some(sequence),
            reopens: None,
        };
        let failed = payment("pay-1", 1, PaymentStatus::Failed);
        let mut item: Item = serde_dynamo::aws_sdk_dynamodb_1::to_item(&failed).unwrap();
        item.insert("failedAt".into(), AttributeValue::N("1767225601000".into()));
        item.insert(
            "lastError".into(),
            AttributeValue::S("card declined".into()),
        );
        self.put(&self.tables.payments, item).await;
        let later = payment("pay-2", 2, PaymentStatus::Accepted);
        self.put(
            &self.tables.payments,
            serde_dynamo::aws_sdk_dynamodb_1::to_item(&later).unwrap(),
        )
        .await;
        let account = HashMap::from([
            ("accountId".to_owned(), AttributeValue::S("acct-1".into())),
            ("nextSequence".to_owned(), AttributeValue::N("2".into())),
            ("settledSequence".to_owned(), AttributeValue::N("1".into())),
            ("pending2".to_owned(), AttributeValue::S("pay-2".into())),
        ]);
        self.put(&self.tables.accounts, account).await;
        failed
    }

    async fn put(&self, table: &str, item: Item) {
        self.dynamodb
            .put_item()
            .table_name(table)
            .set_item(Some(item))
            .send()
            .await
            .expect("PutItem");
    }

    async fn get(&self, table: &str, key: &str, id: &str) -> Item {
        self.dynamodb
            .get_item()
            .table_name(table)
            .key(key, AttributeValue::S(id.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .expect("GetItem")
            .item
            .unwrap_or_default()
    }

    /// The messages on the payments queue: (group, deduplication id, body).
    async fn sent(&self) -> Vec<(String, String, PaymentRequested)> {
        let messages = self
            .sqs
            .receive_message()
            .queue_url(&self.queue.url)
            .max_number_of_messages(10)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .expect("ReceiveMessage")
            .messages
            .unwrap_or_default();
        messages
            .iter()
            .map(|m| {
                let attribute = |name| m.attributes().unwrap()[&name].clone();
                (
                    attribute(MessageSystemAttributeName::MessageGroupId),
                    attribute(MessageSystemAttributeName::MessageDeduplicationId),
                    serde_json::from_str(m.body().unwrap()).unwrap(),
                )
            })
            .collect()
    }
}

fn s<'i>(item: &'i Item, name: &str) -> Option<&'i str> {
    item.get(name)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
}

fn n(item: &Item, name: &str) -> Option<u64> {
    item.get(name)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
}

fn reopening(payment_id: &str) -> Reopening {
    Reopening {
        payment_id: payment_id.to_owned(),
        operator: "on-call".to_owned(),
        reason: "the card issuer's outage is over".to_owned(),
    }
}

#[tokio::test]
async fn a_failed_payment_is_reopened_recorded_numbered_last_and_sent_once() {
    let setup = Setup::new().await;
    let failed = setup.failed_payment().await;
    let reopener = setup.reopener();

    let reopened = reopener.reopen(&reopening("pay-1")).await.unwrap();
    assert_eq!((reopened.sequence, reopened.reopens), (3, 1));

    let stored = setup
        .get(&setup.tables.payments, "paymentId", "pay-1")
        .await;
    assert_eq!(s(&stored, "status"), Some("accepted"));
    assert_eq!(n(&stored, "sequence"), Some(3));
    assert_eq!(n(&stored, "reopens"), Some(1));
    assert_eq!(s(&stored, "reopenedBy"), Some("on-call"));
    assert_eq!(
        s(&stored, "reopenReason"),
        Some("the card issuer's outage is over")
    );
    assert!(n(&stored, "reopenedAt").is_some());
    assert_eq!(s(&stored, "lastError"), Some("card declined"), "kept");
    assert_eq!(n(&stored, "failedAt"), Some(1_767_225_601_000), "kept");
    let account = setup
        .get(&setup.tables.accounts, "accountId", "acct-1")
        .await;
    assert_eq!(n(&account, "nextSequence"), Some(3));
    // Number 3 has its own item; the account item does not grow. Its unsettled payment numbered
    // before numbers had items stays named there, where payment-processor reads it.
    assert_eq!(s(&account, "pending3"), None);
    assert_eq!(s(&account, "pending2"), Some("pay-2"));
    let number = setup
        .get(
            &setup.tables.accounts,
            "accountId",
            &payments_model::order::number_key("acct-1", 3),
        )
        .await;
    assert_eq!(s(&number, "paymentId"), Some("pay-1"));

    let sent = setup.sent().await;
    assert_eq!(sent.len(), 1, "{sent:?}");
    let (group, dedup, body) = &sent[0];
    assert_eq!(group, "acct-1");
    assert_eq!(
        dedup,
        DeduplicationId::from_key("pay-1#reopen-1").as_str(),
        "a deduplication id of its own, not the first send's"
    );
    assert_ne!(dedup, DeduplicationId::from_key("pay-1").as_str());
    assert_eq!(
        (body.payment_id.as_str(), body.sequence, body.amount_cents),
        ("pay-1", Some(3), failed.amount_cents)
    );

    // Reopened, it is no longer failed: a second reopening is refused and sends nothing.
    assert!(matches!(
        reopener.reopen(&reopening("pay-1")).await,
        Err(ReopenError::NotFailed { status, .. }) if status == "accepted"
    ));
    assert!(setup.sent().await.is_empty());
}

#[tokio::test]
async fn what_cannot_be_reopened_is_refused_and_a_failed_send_is_reported() {
    let setup = Setup::new().await;
    setup.failed_payment().await;
    let reopener = setup.reopener();
    assert!(matches!(
        reopener.reopen(&reopening("pay-none")).await,
        Err(ReopenError::NotFound(id)) if id == "pay-none"
    ));
    assert!(matches!(
        reopener.reopen(&reopening("pay-2")).await,
        Err(ReopenError::NotFailed { status, .. }) if status == "accepted"
    ));
    let broken = HashMap::from([
        (
            "paymentId".to_owned(),
            AttributeValue::S("pay-broken".into()),
        ),
        ("status".to_owned(), AttributeValue::S("failed".into())),
    ]);
    setup.put(&setup.tables.payments, broken).await;
    assert!(matches!(
        reopener.reopen(&reopening("pay-broken")).await,
        Err(ReopenError::Malformed { .. })
    ));
    assert!(setup.sent().await.is_empty());

    // The queue does not exist: the payment is reopened (accepted, numbered), but not sent.
    let nowhere = setup
        .queue
        .url
        .replace(&setup.queue.name, "no-such-queue.fifo");
    let unsent = Reopener::new(
        setup.dynamodb.clone(),
        setup.sqs.clone(),
        setup.tables.clone(),
        nowhere,
    );
    let error = unsent.reopen(&reopening("pay-1")).await.unwrap_err();
    assert!(
        matches!(&error, ReopenError::NotSent { payment_id, .. } if payment_id == "pay-1"),
        "{error}"
    );
    assert!(
        error.to_string().contains("payments-reconciler sends it"),
        "{error}"
    );
    let stored = setup
        .get(&setup.tables.payments, "paymentId", "pay-1")
        .await;
    assert_eq!(s(&stored, "status"), Some("accepted"));
    assert_eq!(n(&stored, "sequence"), Some(3));
}

#[tokio::test]
async fn the_binary_reopens_once_then_refuses() {
    let setup = Setup::new().await;
    setup.failed_payment().await;
    let env = [
        ("PAYMENTS_TABLE", setup.tables.payments.as_str()),
        ("ACCOUNTS_TABLE", setup.tables.accounts.as_str()),
        ("PAYMENTS_QUEUE_URL", setup.queue.url.as_str()),
    ];
    let args = [
        "--payment-id",
        "pay-1",
        "--operator",
        "alice",
        "--reason",
        "card issuer outage over",
    ];
    let (code, out) = common::run(REOPEN, &args, &env);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("reopened pay-1 (reopening 1, number 3 of its account) and sent it"),
        "{out}"
    );
    let stored = setup
        .get(&setup.tables.payments, "paymentId", "pay-1")
        .await;
    assert_eq!(s(&stored, "reopenedBy"), Some("alice"));
    assert_eq!(setup.sent().await.len(), 1);

    let (code, out) = common::run(REOPEN, &args, &env);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("reopen: not reopened: payment pay-1 is accepted, not failed"),
        "{out}"
    );
}

#[test]
fn reopen_help_lists_its_options_and_exit_codes() {
    let (code, help) = common::run(REOPEN, &["--help"], &[]);
    assert_eq!(code, Some(0), "{help}");
    for option in [
        "--payment-id <PAYMENT_ID>",
        "--operator <OPERATOR>",
        "--reason <REASON>",
        "--table <TABLE>",
        "PAYMENTS_TABLE",
        "--accounts-table <ACCOUNTS_TABLE>",
        "ACCOUNTS_TABLE",
        "--queue-url <QUEUE_URL>",
        "PAYMENTS_QUEUE_URL",
        "Exit codes:",
        "  0  ",
        "  1  ",
        "  2  ",
    ] {
        assert!(help.contains(option), "--help lacks {option}:\n{help}");
    }
}

#[test]
fn reopen_refuses_a_bad_command_line() {
    // Without the tables and the queue (neither given nor in the environment).
    let out = std::process::Command::new(REOPEN)
        .args(["--payment-id", "p", "--operator", "o", "--reason", "r"])
        .env_remove("PAYMENTS_TABLE")
        .env_remove("ACCOUNTS_TABLE")
        .env_remove("PAYMENTS_QUEUE_URL")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for name in ["--table", "--accounts-table", "--queue-url"] {
        assert!(err.contains(name), "lacks {name}: {err}");
    }
    let (code, out) = common::run(REOPEN, &["--payment-id", "p", "--bogus"], &[]);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("--bogus"), "{out}");
}
