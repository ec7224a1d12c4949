//! An idempotency table that does not fit the backend (a partition key named otherwise, a sort
//! key, a number-typed partition key, no table at all) is the store's fault, never the
//! message's: in both modes every record of a batch is left for redelivery, none is
//! dead-lettered, the dead-letter hook never fires, and no effect of the handler is applied.
//! Against moto (`make test`).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, Put,
    ScalarAttributeType, TransactWriteItem,
};
use common::{Sent, dead_letter_queue};
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{
    BatchProcessor, BatchReport, RecordContext, RecordError, RecordHandlerExt, json,
};
use lambda_idempotency::count::RequestCounter;
use lambda_idempotency::key::KeyConfig;
use lambda_idempotency::store::{Attributes, DynamoDbBackend, StoreError};
use lambda_idempotency::transaction::Transaction;
use lambda_runtime::{Context, LambdaEvent};

/// How the idempotency table is wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Misfit {
    /// Its partition key is `pk`; the backend writes `id`.
    KeyNamedOtherwise,
    /// `id` and a sort key `sk`.
    SortKey,
    /// `id`, but a number.
    NumberKey,
    /// No such table.
    Missing,
}

impl Misfit {
    /// What the error says does not match.
    fn says(self) -> &'static str {
        match self {
            Misfit::KeyNamedOtherwise => {
                "its partition key is `pk` (S), but the backend writes `id` (S)"
            }
            Misfit::SortKey => {
                "it has a sort key `sk` (S), but the backend writes the partition key `id` only"
            }
            Misfit::NumberKey => {
                "its partition key `id` is of type N, but the backend writes a string (S)"
            }
            Misfit::Missing => "does not exist",
        }
    }
}

const MISFITS: [Misfit; 4] = [
    Misfit::KeyNamedOtherwise,
    Misfit::SortKey,
    Misfit::NumberKey,
    Misfit::Missing,
];

/// A client that does not retry: a refused request is refused at once (moto answers some of
/// these transactions with a 500, which the SDK would otherwise retry with backoff).
async fn client(counter: &RequestCounter) -> aws_sdk_dynamodb::Client {
    let config = aws_sdk_dynamodb::config::Builder::from(&common::sdk_config().await)
        .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
        .interceptor(counter.clone())
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

async fn create(
    client: &aws_sdk_dynamodb::Client,
    keys: &[(&str, ScalarAttributeType, KeyType)],
) -> String {
    let name = common::unique("misfit");
    let mut request = client
        .create_table()
        .table_name(&name)
        .billing_mode(BillingMode::PayPerRequest);
    for (attribute, kind, key) in keys {
        request = request
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(*attribute)
                    .attribute_type(kind.clone())
                    .build()
                    .unwrap(),
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name(*attribute)
                    .key_type(key.clone())
                    .build()
                    .unwrap(),
            );
    }
    request.send().await.expect("create the table");
    name
}

/// The name of an idempotency table that is wrong in the way `misfit` says.
async fn misfit_table(client: &aws_sdk_dynamodb::Client, misfit: Misfit) -> String {
    use KeyType::{Hash, Range};
    use ScalarAttributeType::{N, S};
    match misfit {
        Misfit::KeyNamedOtherwise => create(client, &[("pk", S, Hash)]).await,
        Misfit::SortKey => create(client, &[("id", S, Hash), ("sk", S, Range)]).await,
        Misfit::NumberKey => create(client, &[("id", N, Hash)]).await,
        Misfit::Missing => common::unique("no-such-table"),
    }
}

/// Three payments of a standard queue, delivered for the `receives`-th time.
fn batch(receives: u32) -> LambdaEvent<SqsEvent> {
    let mut event = SqsEvent::default();
    event.records = ["p-1", "p-2", "p-3"]
        .iter()
        .map(|id| {
            let mut m = SqsMessage::default();
            m.message_id = Some(format!("m-{id}"));
            m.receipt_handle = Some(format!("rh-{id}"));
            m.body = Some(format!(r#"{{"id":"{id}"}}"#));
            m.attributes
                .insert("ApproximateReceiveCount".into(), receives.to_string());
            m.event_source_arn = Some("arn:aws:sqs:us-east-1:123456789012:payments".into());
            m
        })
        .collect();
    LambdaEvent::new(event, Context::default())
}

#[derive(serde::Deserialize)]
struct Payment {
    id: String,
}

/// What a batch over a misconfigured table left behind.
struct Seen {
    hooked: Arc<AtomicU32>,
    sent: Sent,
}

/// A processor with a dead-letter queue and a budget of one attempt: anything that counted as
/// permanent, or as a failed attempt, would be dead-lettered at once.
fn processor(sent: &Sent) -> BatchProcessor {
    BatchProcessor::new()
        .with_dead_letter(dead_letter_queue(sent))
        .max_attempts(1)
}

/// Asserts that every record of `report` is left for redelivery as a store failure naming the
/// table and what does not match, not counted as an attempt, and that nothing was
/// dead-lettered.
fn assert_left_for_redelivery<T: std::fmt::Debug>(
    label: &str,
    report: &BatchReport<T>,
    seen: &Seen,
    table: &str,
    misfit: Misfit,
) {
    let failed: Vec<_> = report
        .response()
        .batch_item_failures
        .into_iter()
        .map(|f| f.item_identifier)
        .collect();
    assert_eq!(failed, ["m-p-1", "m-p-2", "m-p-3"], "{label}: {report:?}");
    assert_eq!(report.dead_lettered().count(), 0, "{label}: {report:?}");
    for r in &report.records {
        let error = r.result.as_ref().unwrap_err();
        assert!(!error.is_permanent(), "{label}: {error}");
        assert!(
            matches!(error.cause(), RecordError::Store(StoreError::Misconfigured { table: t, .. }) if t == table),
            "{label}: a misconfigured store, not the message's fault: {error:?}"
        );
        assert_eq!(error.attempts(), None, "{label}: not an attempt: {error:?}");
        let text = error.to_string();
        assert!(
            text.contains(&format!("table `{table}`")) && text.contains(misfit.says()),
            "{label}: names the table and the mismatch: {text}"
        );
    }
    assert!(
        seen.sent.lock().unwrap().is_empty(),
        "{label}: nothing sent to the dead-letter queue"
    );
    assert_eq!(
        seen.hooked.load(Ordering::SeqCst),
        0,
        "{label}: the hook never fires"
    );
}

/// Items of the (well configured) effects table.
async fn effects(client: &aws_sdk_dynamodb::Client, table: &str) -> usize {
    client
        .scan()
        .table_name(table)
        .send()
        .await
        .unwrap()
        .items()
        .len()
}

#[tokio::test]
async fn a_misconfigured_table_leaves_every_record_for_redelivery_in_the_lease_mode() {
    let counter = RequestCounter::default();
    let client = client(&counter).await;
    let effects_table = common::create_table(&client, "pk", "ttl").await;
    for misfit in MISFITS {
        let table = misfit_table(&client, misfit).await;
        let engine = Idempotency::new(DynamoDbBackend::new(client.clone(), &table));
        let seen = Seen {
            hooked: Arc::default(),
            sent: Sent::default(),
        };
        let (hooked, c, t) = (seen.hooked.clone(), client.clone(), effects_table.clone());
        let handler = json(move |p: Payment, _ctx: RecordContext| {
            let (c, t) = (c.clone(), t.clone());
            async move {
                c.put_item()
                    .table_name(t)
                    .item("pk", AttributeValue::S(p.id))
                    .send()
                    .await
                    .map(|_| ())
            }
        })
        .on_dead_letter(move |_| {
            hooked.fetch_add(1, Ordering::SeqCst);
            async {}
        })
        .idempotent(engine)
        .with_keys(KeyConfig::json_pointer("/id"));
        for receives in [1, 2] {
            let label = format!("{misfit:?}, lease mode, receive {receives}");
            let report = processor(&seen.sent)
                .process(&batch(receives), &handler)
                .await
                .unwrap();
            assert_left_for_redelivery(&label, &report, &seen, &table, misfit);
        }
    }
    assert_eq!(
        effects(&client, &effects_table).await,
        0,
        "no handler ran: its key was never acquired"
    );
}

#[tokio::test]
async fn a_misconfigured_table_leaves_every_record_for_redelivery_in_the_transactional_mode() {
    let counter = RequestCounter::default();
    let client = client(&counter).await;
    let effects_table = common::create_table(&client, "pk", "ttl").await;
    for misfit in MISFITS {
        let table = misfit_table(&client, misfit).await;
        let engine = Idempotency::new(DynamoDbBackend::new(client.clone(), &table));
        let seen = Seen {
            hooked: Arc::default(),
            sent: Sent::default(),
        };
        let (hooked, t) = (seen.hooked.clone(), effects_table.clone());
        let handler = json(move |p: Payment, _ctx: RecordContext| {
            let put = Put::builder()
                .table_name(&t)
                .item("pk", AttributeValue::S(p.id.clone()))
                .build()
                .unwrap();
            async move {
                Ok::<_, std::io::Error>(Transaction::<_, TransactWriteItem>::new(p.id).put(put))
            }
        })
        .on_dead_letter(move |_| {
            hooked.fetch_add(1, Ordering::SeqCst);
            async {}
        })
        .transactional(engine)
        .with_keys(KeyConfig::json_pointer("/id"));
        // A first delivery goes straight to the commit; a redelivery reads the record first.
        for receives in [1, 2] {
            let label = format!("{misfit:?}, transactional mode, receive {receives}");
            let report = processor(&seen.sent)
                .process(&batch(receives), &handler)
                .await
                .unwrap();
            assert_left_for_redelivery(&label, &report, &seen, &table, misfit);
        }
    }
    assert_eq!(
        effects(&client, &effects_table).await,
        0,
        "no write of the handler was applied"
    );
}

#[tokio::test]
async fn check_table_names_the_table_and_what_does_not_match() {
    let counter = RequestCounter::default();
    let client = client(&counter).await;
    for misfit in MISFITS {
        let table = misfit_table(&client, misfit).await;
        counter.reset();
        let error = DynamoDbBackend::new(client.clone(), &table)
            .check_table()
            .await
            .unwrap_err();
        let StoreError::Misconfigured { table: t, problem } = &error else {
            panic!("{misfit:?}: expected Misconfigured, got {error:?}");
        };
        assert_eq!(t, &table, "{misfit:?}");
        assert!(
            problem.starts_with(&format!("table `{table}` ")) && problem.contains(misfit.says()),
            "{misfit:?}: {problem}"
        );
        assert_eq!(error.to_string(), format!("idempotency store: {problem}"));
        assert_eq!(
            counter.snapshot().into_iter().collect::<Vec<_>>(),
            [("DescribeTable".to_owned(), 1)],
            "{misfit:?}: one DescribeTable, and no TTL read for a table that does not fit"
        );
    }

    // Both mismatches at once are both named.
    let both = create(
        &client,
        &[
            ("pk", ScalarAttributeType::N, KeyType::Hash),
            ("sk", ScalarAttributeType::S, KeyType::Range),
        ],
    )
    .await;
    let error = DynamoDbBackend::new(client.clone(), &both)
        .check_table()
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains(
            "its partition key is `pk` (N), but the backend writes `id` (S); it has a sort key `sk` (S)"
        ),
        "{error}"
    );
}

#[tokio::test]
async fn check_table_passes_a_table_that_fits_and_warns_of_its_ttl() {
    let counter = RequestCounter::default();
    let client = client(&counter).await;
    let good = common::create_table(&client, "id", "expiration").await;
    counter.reset();
    let check = DynamoDbBackend::new(client.clone(), &good)
        .check_table()
        .await
        .unwrap();
    assert!(check.warnings.is_empty(), "{check:?}");
    assert_eq!(
        counter.snapshot().into_iter().collect::<Vec<_>>(),
        [
            ("DescribeTable".to_owned(), 1),
            ("DescribeTimeToLive".to_owned(), 1)
        ]
    );

    // Other attribute names: the table's key is `pk`, its TTL `ttl`.
    let renamed = common::create_table(&client, "pk", "ttl").await;
    let attributes = Attributes {
        key: "pk".into(),
        expiry: "ttl".into(),
        ..Attributes::default()
    };
    let check = DynamoDbBackend::new(client.clone(), &renamed)
        .with_attributes(attributes)
        .check_table()
        .await
        .unwrap();
    assert!(check.warnings.is_empty(), "{check:?}");

    // The TTL on another attribute, or none: the table works, with a warning.
    let other_ttl = common::create_table(&client, "id", "ttl").await;
    let check = DynamoDbBackend::new(client.clone(), &other_ttl)
        .check_table()
        .await
        .unwrap();
    assert_eq!(check.warnings.len(), 1, "{check:?}");
    assert!(
        check.warnings[0].contains(&format!(
            "table `{other_ttl}`'s TTL attribute is `ttl`, but the backend writes the expiry to `expiration`"
        )),
        "{check:?}"
    );
    let no_ttl = create(&client, &[("id", ScalarAttributeType::S, KeyType::Hash)]).await;
    let check = DynamoDbBackend::new(client.clone(), &no_ttl)
        .check_table()
        .await
        .unwrap();
    assert_eq!(check.warnings.len(), 1, "{check:?}");
    assert!(
        check.warnings[0].contains(&format!("table `{no_ttl}` has no TTL on `expiration`")),
        "{check:?}"
    );
}
