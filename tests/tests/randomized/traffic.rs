//! What the run sends: the account bursts, the forged receipts, the poison bodies, and the
//! message that crashes payment-processor whenever it is received.

use std::time::Duration;

use futures_util::future::join_all;
use payments_e2e::Pipeline;
use payments_e2e::workload::{Accepted, Behaviour, Fault, Planned};
use payments_model::PaymentCharged;

use crate::{FATAL, FLAKY, REFUSED};

/// One account's burst: `count` concurrent POSTs, each with its own key, some of them resent
/// with the same key (at once, or after the answer); a 503 is retried with the same key, as a
/// client does. Returns the accepted payments.
pub async fn burst(
    pipeline: &Pipeline,
    rng: &mut fastrand::Rng,
    account: &str,
    count: usize,
) -> Vec<Accepted> {
    let http = pipeline.http().as_caller(account);
    let plans: Vec<Planned> = (0..count)
        .map(|position| {
            let marker = match rng.u32(0..10) {
                0 => REFUSED,
                1 => FLAKY,
                _ => "",
            };
            Planned {
                key: format!("{account}-{position}-{}", uuid::Uuid::new_v4().simple()),
                account: account.to_owned(),
                amount_cents: i64::from(rng.u32(100..10_000)),
                currency: "EUR",
                decimal: false,
                description: format!("payment {position} {marker}").trim_end().to_owned(),
                behaviour: match rng.u32(0..4) {
                    0 => Behaviour::ConcurrentDuplicates,
                    1 => Behaviour::ClientRetry,
                    _ => Behaviour::Once,
                },
                fault: if marker == REFUSED {
                    Fault::Permanent
                } else {
                    Fault::None
                },
                position,
            }
        })
        .collect();
    let answers = join_all(plans.iter().map(|plan| {
        let http = http.clone();
        async move {
            let body = serde_json::json!({
                "amountCents": plan.amount_cents,
                "currency": plan.currency,
                "description": plan.description,
            })
            .to_string();
            let post = || http.post_payment(Some(&plan.key), &body);
            let sends = if plan.behaviour == Behaviour::ConcurrentDuplicates {
                3
            } else {
                1
            };
            let mut answers = join_all((0..sends).map(|_| post())).await;
            if plan.behaviour == Behaviour::ClientRetry {
                answers.push(post().await);
            }
            // Until one 201: a 409 (the same key in flight) or a 503 is retried, as a client
            // does.
            for _ in 0..20 {
                if answers
                    .iter()
                    .any(|a| a.as_ref().is_ok_and(|a| a.status == 201))
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                answers.push(post().await);
            }
            (plan.clone(), answers)
        }
    }))
    .await;
    let mut accepted = Vec::new();
    for (planned, answers) in answers {
        let mut ids: Vec<String> = Vec::new();
        for answer in answers {
            let answer = answer.unwrap();
            assert!(
                [201, 409, 503].contains(&answer.status),
                "{}: {answer:?}",
                planned.key
            );
            if answer.status == 201 {
                let body: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
                ids.push(body["paymentId"].as_str().unwrap().to_owned());
            }
        }
        ids.dedup();
        assert_eq!(
            ids.len(),
            1,
            "{}: one payment per key: {ids:?}",
            planned.key
        );
        accepted.push(Accepted {
            payment_id: ids.remove(0),
            planned,
        });
    }
    accepted
}

/// Forged `PaymentCharged` events: for a payment that does not exist, and for real payments
/// with another amount (sent before or after their charge, as the run's order falls).
pub fn forged_receipts(rng: &mut fastrand::Rng, accepted: &[Accepted]) -> Vec<String> {
    let mut events = vec![PaymentCharged {
        payment_id: format!("pay_forged_{}", uuid::Uuid::new_v4().simple()),
        account_id: "acct-forged".into(),
        amount_cents: 4_242,
        currency: "EUR".into(),
        ledger_entry_id: "entry-forged".into(),
    }];
    for a in accepted.iter().filter(|_| rng.u32(0..4) == 0).take(3) {
        events.push(PaymentCharged {
            payment_id: a.payment_id.clone(),
            account_id: a.planned.account.clone(),
            amount_cents: a.planned.amount_cents + 1,
            currency: a.planned.currency.into(),
            ledger_entry_id: format!("entry-forged-{}", a.payment_id),
        });
    }
    events
        .iter()
        .map(|e| serde_json::to_string(e).unwrap())
        .collect()
}

/// Sends `bodies` to the receipts queue (a standard queue), as any sender could.
pub async fn send_to_receipts(pipeline: &Pipeline, bodies: Vec<String>) {
    let url = &pipeline.resources.queues["ReceiptsQueue"].url;
    for body in bodies {
        pipeline
            .clients
            .sqs
            .send_message()
            .queue_url(url)
            .message_body(body)
            .send()
            .await
            .unwrap();
    }
}

/// Poison bodies on payments.fifo (in a real account's group, behind its payments) and on the
/// receipts queue.
pub async fn send_poison(pipeline: &Pipeline, account: &str) {
    use lambda_idempotency::publish::{DeduplicationId, Message, MessageGroupId};
    let messages = ["not json", "{\"paymentId\": 42}", "{}"]
        .iter()
        .map(|body| {
            Message::fifo(
                MessageGroupId::new(account).unwrap(),
                DeduplicationId::from_key(&format!("poison-{}", uuid::Uuid::new_v4())),
                (*body).to_owned(),
            )
            .unwrap()
        })
        .collect();
    payments_e2e::outside::send(&pipeline.payments_publisher(), messages)
        .await
        .unwrap();
    send_to_receipts(pipeline, vec!["not json".into(), "{}".into()]).await;
}

/// The message that crashes payment-processor whenever it is received (as a body that exhausts
/// the function's memory would): never acknowledged, never dead-lettered by the function, it is
/// received until SQS moves it to the dead-letter queue (`maxReceiveCount`). `as_payment`: an
/// accepted payment's (a POST of an account of its own), whose payment the reconciler then
/// marks failed; else a body that is no payment, in a group of its own. Returns the payment's
/// id, if any.
pub async fn send_fatal(pipeline: &Pipeline, seed: u64, as_payment: bool) -> Option<String> {
    use lambda_idempotency::publish::{DeduplicationId, Message, MessageGroupId};
    let account = format!("acct-rnd-{seed}-fatal");
    if !as_payment {
        let message = Message::fifo(
            MessageGroupId::new(&account).unwrap(),
            DeduplicationId::from_key(&format!("fatal-{}", uuid::Uuid::new_v4())),
            format!("{{\"crashes\": \"{FATAL}\"}}"),
        )
        .unwrap();
        payments_e2e::outside::send(&pipeline.payments_publisher(), vec![message])
            .await
            .unwrap();
        return None;
    }
    let key = format!("{account}-{}", uuid::Uuid::new_v4().simple());
    let body = serde_json::json!({
        "amountCents": 1_234,
        "currency": "EUR",
        "description": format!("payment {FATAL}"),
    })
    .to_string();
    let http = pipeline.http().as_caller(&account);
    // A 503 is retried with the same key, as a client does.
    for _ in 0..20 {
        let answer = http.post_payment(Some(&key), &body).await.unwrap();
        if answer.status == 201 {
            let body: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
            return Some(body["paymentId"].as_str().unwrap().to_owned());
        }
        assert_eq!(answer.status, 503, "{answer:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{key}: no 201 in 20 tries");
}
