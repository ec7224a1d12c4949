//! The transactional wrapper in the batch processor, FIFO: a message whose transaction is refused
//! in front of others of its group never costs them their place. No AWS: the store is the
//! in-memory backend, the dead-letter queue a mocked SQS client.

mod common;

use std::sync::{Arc, Mutex};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use common::{Sent, dead_letter_queue};
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{
    BatchProcessor, DeadLettered, RecordContext, RecordError, RecordHandler, RecordHandlerExt, json,
};
use lambda_idempotency::inline::InlinePut;
use lambda_idempotency::key::KeyConfig;
use lambda_idempotency::state::Status;
use lambda_idempotency::store::{InMemoryBackend, MemoryWrite};
use lambda_idempotency::transaction::Transaction;
use lambda_runtime::{Context, LambdaEvent};

const FIFO_ARN: &str = "arn:aws:sqs:us-east-1:123456789012:q.fifo";

fn record(id: &str, payment: &str, receives: u32) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some(id.into());
    m.receipt_handle = Some(format!("rh-{id}"));
    m.body = Some(format!(r#"{{"id":"{payment}"}}"#));
    m.attributes
        .insert("ApproximateReceiveCount".into(), receives.to_string());
    m.attributes.insert("MessageGroupId".into(), "acct".into());
    m.event_source_arn = Some(FIFO_ARN.into());
    m
}

#[derive(serde::Deserialize)]
struct Payment {
    id: String,
}

#[tokio::test]
async fn a_refused_transaction_holds_its_followers_only_until_it_is_dead_lettered() {
    let backend = Arc::new(InMemoryBackend::default());
    // The poison payment's ledger entry exists already: its put-if-absent is always refused.
    let engine = Idempotency::new(backend.clone());
    engine
        .transact("seed", b"", None, || async {
            Ok::<_, std::io::Error>(
                Transaction::new(()).write(MemoryWrite::put("ledger", "poison", "old")),
            )
        })
        .await
        .unwrap();
    let runs: Arc<Mutex<Vec<(String, u32)>>> = Arc::default();
    let hooked: Arc<Mutex<Vec<DeadLettered>>> = Arc::default();
    let (r, h) = (runs.clone(), hooked.clone());
    let handler = json(move |p: Payment, ctx: RecordContext| {
        r.lock().unwrap().push((p.id.clone(), ctx.attempt));
        async move {
            Ok::<_, std::io::Error>(
                Transaction::new(p.id.clone())
                    .write(MemoryWrite::put_if_absent("ledger", &p.id, "charged")),
            )
        }
    })
    .on_dead_letter(move |dead| {
        h.lock().unwrap().push(dead);
        async {}
    })
    .transactional(engine.clone())
    .with_keys(KeyConfig::json_pointer("/id"));
    let sent = Sent::default();
    let processor = BatchProcessor::new()
        .with_dead_letter(dead_letter_queue(&sent))
        .max_attempts(3);
    let batch = |receives: u32| {
        let mut e = SqsEvent::default();
        e.records = vec![
            record("m-poison", "poison", receives),
            record("m-f1", "f1", receives),
            record("m-f2", "f2", receives),
        ];
        LambdaEvent::new(e, Context::default())
    };
    for receives in 1..=2 {
        let report = processor.process(&batch(receives), &handler).await.unwrap();
        let failed: Vec<_> = report
            .response()
            .batch_item_failures
            .into_iter()
            .map(|f| f.item_identifier)
            .collect();
        assert_eq!(failed, ["m-poison", "m-f1", "m-f2"]);
        let poison = report.records[0].result.as_ref().unwrap_err();
        assert_eq!(poison.attempts(), Some(receives), "{poison}");
        assert!(
            poison
                .to_string()
                .contains("Put on table `ledger` (poison)"),
            "{poison}"
        );
        assert!(matches!(
            report.records[1].result,
            Err(RecordError::GroupBlocked { .. })
        ));
    }
    assert_eq!(
        backend.item("ledger", "f1"),
        None,
        "a blocked follower wrote nothing"
    );

    let report = processor.process(&batch(3), &handler).await.unwrap();
    assert!(
        report.response().batch_item_failures.is_empty(),
        "the poison message is dead-lettered and the followers committed: {:?}",
        report.records
    );
    assert_eq!(sent.lock().unwrap().len(), 1);
    let hooked = hooked.lock().unwrap().clone();
    assert_eq!(hooked.len(), 1);
    assert_eq!(hooked[0].attempts, Some(3));
    let runs = runs.lock().unwrap().clone();
    assert_eq!(
        runs.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(),
        ["poison", "poison", "poison", "f1", "f2"]
    );
    assert_eq!(
        runs.iter().map(|(_, attempt)| *attempt).collect::<Vec<_>>(),
        [1, 2, 3, 1, 1],
        "the store's attempts: the followers' third receive is their first attempt"
    );
    assert_eq!(backend.item("ledger", "f1").as_deref(), Some("charged"));
    assert_eq!(backend.item("ledger", "poison").as_deref(), Some("old"));
    let poison = engine.get("poison").await.unwrap().unwrap();
    assert_eq!(
        (poison.status, poison.attempts),
        (Status::Failed, 0),
        "a redriven message starts a new budget"
    );
    assert_eq!(
        engine.get("f1").await.unwrap().unwrap().status,
        Status::Completed
    );

    // A redelivery of a follower is a duplicate: nothing runs twice.
    let mut again = batch(4);
    again.payload.records.remove(0);
    let report = processor.process(&again, &handler).await.unwrap();
    assert!(report.records[0].result.as_ref().unwrap().is_duplicate());
}

/// A handler that runs a record again by itself (the pipeline's catch-up charges an earlier
/// payment from its table, with a message it builds) says so with the context's receive count:
/// the mode reads the store first, whatever the message carries, and the handler is told its
/// attempt. Both modes that write with the effect, on a message with no attributes at all.
#[tokio::test]
async fn a_receive_count_above_one_in_the_context_reads_the_attempts_whatever_the_message_says() {
    let backend = Arc::new(InMemoryBackend::default());
    let engine = Idempotency::new(backend.clone());
    let told: Arc<Mutex<Vec<u32>>> = Arc::default();
    let (t, i) = (told.clone(), told.clone());
    let transactional = json(move |p: Payment, ctx: RecordContext| {
        t.lock().unwrap().push(ctx.attempt);
        async move {
            Err::<Transaction<String, MemoryWrite>, _>(std::io::Error::other(format!(
                "{} fails",
                p.id
            )))
        }
    })
    .transactional(engine.clone())
    .with_keys(KeyConfig::json_pointer("/id"));
    let inline = json(move |p: Payment, ctx: RecordContext| {
        i.lock().unwrap().push(ctx.attempt);
        async move {
            Err::<InlinePut<String, MemoryWrite>, _>(std::io::Error::other(format!(
                "{} fails",
                p.id
            )))
        }
    })
    .inline(engine.clone())
    .with_attempts_read()
    .with_keys(KeyConfig::json_pointer("/id"));
    let mut message = SqsMessage::default();
    message.body = Some(r#"{"id":"p-1"}"#.into());
    let mut ctx = RecordContext::new("built-by-the-handler");
    ctx.receive_count = 2;
    for _ in 0..2 {
        let error = transactional.handle(&message, &ctx).await.unwrap_err();
        assert!(error.attempts().is_some(), "{error}");
    }
    let error = inline.handle(&message, &ctx).await.unwrap_err();
    assert_eq!(error.attempts(), Some(3), "{error}");
    assert_eq!(
        *told.lock().unwrap(),
        [1, 2, 3],
        "each run is told the attempts the store counted, plus one"
    );
}
