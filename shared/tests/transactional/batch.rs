//! The batch wrapper, `handler.transactional(engine)`, on DynamoDB: each fresh record committed
//! once, a redelivery read first, a redelivered duplicate one read.

use super::*;

fn message(id: &str, body: &str) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some(id.into());
    m.body = Some(body.into());
    m.attributes
        .insert("ApproximateReceiveCount".into(), "1".into());
    m
}

#[tokio::test]
async fn the_batch_wrapper_commits_each_fresh_record_once_and_fails_a_refused_one() {
    let f = fixture().await;
    let table = f.effects.clone();
    #[derive(serde::Deserialize)]
    struct Payment {
        id: String,
        amount: i64,
    }
    let handler = json(move |p: Payment, _ctx: RecordContext| {
        let table = table.clone();
        async move {
            // A refund needs an account that has a balance: account-2 has none.
            let (account, condition) = match p.amount {
                ..0 => ("account-2", Some("attribute_exists(balance)")),
                _ => ("account-1", None),
            };
            Ok::<_, std::io::Error>(
                Tx::new(p.id.clone())
                    .put(entry(&table, &format!("entry-{}", p.id)))
                    .update(add(&table, account, p.amount, condition)),
            )
        }
    })
    .transactional(f.engine.clone())
    .with_keys(KeyConfig::json_pointer("/id"));
    let mut event = SqsEvent::default();
    event.records = vec![
        message("m-1", r#"{"id": "p-1", "amount": 500}"#),
        message("m-2", r#"{"id": "p-2", "amount": 300}"#),
        // The same payment again, under another message id.
        message("m-3", r#"{"id": "p-1", "amount": 500}"#),
        message("m-4", r#"{"id": "p-3", "amount": -100}"#),
    ];
    let report = BatchProcessor::new()
        .process(&LambdaEvent::new(event, Context::default()), &handler)
        .await
        .unwrap();
    let failed: Vec<_> = report
        .response()
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect();
    assert_eq!(failed, ["m-4"]);
    let refused = report
        .records
        .iter()
        .find(|r| r.message_id == "m-4")
        .unwrap();
    let error = refused.result.as_ref().unwrap_err();
    assert!(
        matches!(error, RecordError::Attempt { attempts: 1, .. }),
        "{error:?}"
    );
    assert!(
        matches!(error.cause(), RecordError::Handler(_)),
        "a condition is a handler error"
    );
    assert!(!error.is_permanent());
    let duplicates = report
        .successes()
        .filter(|(_, d): &(&str, &Deduplicated<String>)| d.is_duplicate())
        .count();
    assert_eq!(duplicates, 1);
    assert_eq!(
        balance(&f, "account-1").await,
        Some(800),
        "p-1 and p-2, once each"
    );
    assert_eq!(f.counter.count("TransactWriteItems"), 4);
    assert_eq!(
        f.counter.count("UpdateItem"),
        1,
        "the refused record's failure"
    );
}

#[tokio::test]
async fn a_redelivery_reads_first_and_tells_the_handler_its_attempt() {
    let f = fixture().await;
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (table, s2) = (f.effects.clone(), seen.clone());
    // The first two attempts fail.
    let handler = json(move |_: serde_json::Value, ctx: RecordContext| {
        let fail = {
            let mut seen = s2.lock().unwrap();
            seen.push(ctx.attempt);
            seen.len() <= 2
        };
        let table = table.clone();
        async move {
            if fail {
                return Err(std::io::Error::other("declined"));
            }
            Ok(Tx::new(()).put(entry(&table, "entry-1")))
        }
    })
    .transactional(f.engine.clone());
    let processor = BatchProcessor::new();
    processor
        .process(&delivery("{}", 1), &handler)
        .await
        .unwrap();
    f.counter.reset();
    processor
        .process(&delivery("{}", 2), &handler)
        .await
        .unwrap();
    assert_eq!(f.counter.count("GetItem"), 1, "a redelivery reads first");
    assert_eq!(
        f.counter.count("TransactWriteItems"),
        0,
        "a failed handler commits nothing"
    );
    assert_eq!(
        *seen.lock().unwrap(),
        [1, 2],
        "the handler is told the store's attempt"
    );
    let record = f.engine.get("m-1").await.unwrap().unwrap();
    assert_eq!((record.status, record.attempts), (Status::Failed, 2));
    // The third delivery (receive count 5: it also waited behind others) is attempt 3.
    processor
        .process(&delivery("{}", 5), &handler)
        .await
        .unwrap();
    assert_eq!(*seen.lock().unwrap(), [1, 2, 3]);
    assert_eq!(
        f.engine.get("m-1").await.unwrap().unwrap().status,
        Status::Completed
    );
}

/// One message `m-1` with `body`, delivered for the `receives`-th time.
fn delivery(body: &str, receives: u32) -> LambdaEvent<SqsEvent> {
    let mut m = message("m-1", body);
    m.attributes
        .insert("ApproximateReceiveCount".into(), receives.to_string());
    let mut event = SqsEvent::default();
    event.records = vec![m];
    LambdaEvent::new(event, Context::default())
}

#[tokio::test]
async fn a_redelivered_duplicate_costs_one_read_and_no_transaction() {
    let f = fixture().await;
    let table = f.effects.clone();
    let ran = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let r = ran.clone();
    let handler = json(move |_: serde_json::Value, _ctx: RecordContext| {
        r.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let table = table.clone();
        async move { Ok::<_, std::io::Error>(Tx::new(7).put(entry(&table, "entry-1"))) }
    })
    .transactional(f.engine.clone());
    let processor = BatchProcessor::new();
    processor
        .process(&delivery("{}", 1), &handler)
        .await
        .unwrap();
    let only = |op: &str| vec![(op.to_owned(), 1)];
    assert_eq!(
        f.counter.snapshot().into_iter().collect::<Vec<_>>(),
        only("TransactWriteItems")
    );
    f.counter.reset();
    let report = processor
        .process(&delivery("{}", 2), &handler)
        .await
        .unwrap();
    assert_eq!(
        report.records[0].result.as_ref().unwrap(),
        &Deduplicated::Duplicate {
            stored: Some("7".into())
        }
    );
    assert_eq!(
        f.counter.snapshot().into_iter().collect::<Vec<_>>(),
        only("GetItem")
    );
    assert_eq!(
        ran.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the duplicate's handler did not run"
    );
}
