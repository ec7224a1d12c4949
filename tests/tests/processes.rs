//! The functions as their own processes behave as on Lambda when they fail: a handler's panic
//! fails its record (the batch processor catches it) and the process goes on, an invocation
//! abandoned at its timeout replaces the process that ran it, and a function whose idempotency
//! table cannot serve fails each batch (its cold-start check, started at init, is awaited by
//! each) while its messages wait on their queue, none dead-lettered. The
//! binaries are those of the workspace build (`make test` builds them first).

use std::time::{Duration, SystemTime};

use local_aws::runner::{Invocation, Invoker, sqs_event};
use payments_e2e::invariants::Violation;
use payments_e2e::processes::{Observed, ProcessOptions};
use payments_e2e::{Functions, Options, Pipeline};

const PROCESSOR: &str = "payment-processor";
const MISSING: &str = "no-such-idempotency-table";

fn processes() -> ProcessOptions {
    ProcessOptions {
        build: false,
        ..ProcessOptions::default()
    }
}

/// Accepts a payment with this description by HTTP; returns its id.
async fn accept(pipeline: &Pipeline, description: &str) -> String {
    let answer = pipeline
        .http()
        .as_caller(&format!("acct-{description}"))
        .post_payment(
            Some(description),
            &format!(
                r#"{{"amountCents": 700, "currency": "EUR", "description": "{description}"}}"#
            ),
        )
        .await
        .unwrap();
    assert_eq!(answer.status, 201, "{}", answer.body);
    let body: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    body["paymentId"].as_str().unwrap().to_owned()
}

/// The message of `payment_id` on payments.fifo, received (visible again at once when `again`).
async fn receive(pipeline: &Pipeline, payment_id: &str) -> aws_sdk_sqs::types::Message {
    let url = &pipeline.resources.queues["PaymentsQueue"].url;
    for _ in 0..60 {
        let messages = pipeline
            .clients
            .sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .wait_time_seconds(1)
            .send()
            .await
            .unwrap()
            .messages
            .unwrap_or_default();
        let mut found = None;
        for m in messages {
            let handle = m.receipt_handle.clone().unwrap();
            if m.body.as_deref().unwrap_or_default().contains(payment_id) {
                found = Some(m);
            } else {
                // Not this test's: visible again at once.
                pipeline
                    .clients
                    .sqs
                    .change_message_visibility()
                    .queue_url(url)
                    .receipt_handle(handle)
                    .visibility_timeout(0)
                    .send()
                    .await
                    .unwrap();
            }
        }
        if let Some(m) = found {
            return m;
        }
    }
    let depth = local_aws::runner::queue_depth(&pipeline.clients.sqs, url).await;
    let dlq = local_aws::runner::queue_depth(
        &pipeline.clients.sqs,
        &pipeline.resources.queues["PaymentsDeadLetterQueue"].url,
    )
    .await;
    panic!(
        "no message of {payment_id} on payments.fifo ({depth:?}; its dead-letter queue: {dlq:?}); \
         the functions: {:?}",
        pipeline.processes().map(|p| p.observed())
    );
}

/// Deletes `message`, as the mapping does after a successful invocation.
async fn delete(pipeline: &Pipeline, message: &aws_sdk_sqs::types::Message) {
    pipeline
        .clients
        .sqs
        .delete_message()
        .queue_url(&pipeline.resources.queues["PaymentsQueue"].url)
        .receipt_handle(message.receipt_handle.clone().unwrap())
        .send()
        .await
        .unwrap();
}

/// Makes `message` visible again at once (its next receive is its next attempt).
async fn release(pipeline: &Pipeline, message: &aws_sdk_sqs::types::Message) {
    pipeline
        .clients
        .sqs
        .change_message_visibility()
        .queue_url(&pipeline.resources.queues["PaymentsQueue"].url)
        .receipt_handle(message.receipt_handle.clone().unwrap())
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
}

/// payment-processor's invocation of `message`, its deadline `timeout` from now.
fn invocation(
    pipeline: &Pipeline,
    message: &aws_sdk_sqs::types::Message,
    timeout: Duration,
) -> Invocation {
    let f = pipeline.template.function_by_name(PROCESSOR).unwrap();
    Invocation {
        function_name: f.name.clone(),
        binary: f.binary.clone(),
        function_arn: pipeline.resources.function_arn(&f.name),
        memory_size: f.memory_size,
        request_id: uuid::Uuid::new_v4().to_string(),
        deadline: SystemTime::now() + timeout,
        payload: sqs_event(
            std::slice::from_ref(message),
            &pipeline.resources.queues["PaymentsQueue"].arn,
        ),
    }
}

async fn wait_observed(
    pipeline: &Pipeline,
    what: &str,
    done: impl Fn(&Observed) -> bool,
) -> Observed {
    for _ in 0..150 {
        let observed = pipeline.processes().unwrap().observed();
        if done(&observed) {
            return observed;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!(
        "{what}: not seen within 30 s: {:?}",
        pipeline.processes().unwrap().observed()
    );
}

async fn status(pipeline: &Pipeline, payment_id: &str) -> String {
    pipeline
        .stored()
        .await
        .unwrap()
        .payment_status
        .get(payment_id)
        .cloned()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_fails_its_record_and_a_timeout_replaces_the_process() {
    let pipeline = Pipeline::start(Options {
        fail_payments: "boom:1:panic,slow:1:sleep=60000".into(),
        start_processor: false,
        functions: Functions::Processes(processes()),
        ..Options::default()
    })
    .await
    .unwrap();
    let processes = pipeline.processes().unwrap();
    let invoker = processes.invoker(PROCESSOR).unwrap();
    wait_observed(&pipeline, "payment-processor started", |o| {
        o.starts.get(PROCESSOR) == Some(&1)
    })
    .await;

    // A panic: its record is reported failed, the same process goes on.
    let boom = accept(&pipeline, "boom").await;
    let message = receive(&pipeline, &boom).await;
    let answer = invoker
        .invoke(invocation(&pipeline, &message, Duration::from_secs(30)))
        .await
        .unwrap();
    let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(
        answer["batchItemFailures"][0]["itemIdentifier"],
        message.message_id.clone().unwrap(),
        "{answer}"
    );
    assert!(processes.observed().replaced.is_empty());
    assert_eq!(status(&pipeline, &boom).await, "accepted");
    // Its retry (attempt 2) charges it.
    release(&pipeline, &message).await;
    let message = receive(&pipeline, &boom).await;
    invoker
        .invoke(invocation(&pipeline, &message, Duration::from_secs(30)))
        .await
        .unwrap();
    delete(&pipeline, &message).await;
    assert_eq!(status(&pipeline, &boom).await, "charged");

    // A timeout: the invocation is abandoned, its process replaced by a new one.
    let slow = accept(&pipeline, "slow").await;
    let message = receive(&pipeline, &slow).await;
    let abandoned = tokio::time::timeout(
        Duration::from_secs(2),
        invoker.invoke(invocation(&pipeline, &message, Duration::from_secs(2))),
    )
    .await;
    assert!(abandoned.is_err(), "the sleeping invocation answered");
    let observed = wait_observed(&pipeline, "the timed-out process replaced", |o| {
        o.starts.get(PROCESSOR) == Some(&2)
    })
    .await;
    let reasons = &observed.replaced[PROCESSOR];
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(
        reasons[0].contains("ran past the function's timeout"),
        "{reasons:?}"
    );
    // The new process charges the payment on its retry; nothing was charged by the old one.
    assert_eq!(status(&pipeline, &slow).await, "accepted");
    release(&pipeline, &message).await;
    let message = receive(&pipeline, &slow).await;
    invoker
        .invoke(invocation(&pipeline, &message, Duration::from_secs(30)))
        .await
        .unwrap();
    delete(&pipeline, &message).await;
    assert_eq!(status(&pipeline, &slow).await, "charged");
    pipeline.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_that_cannot_serve_fails_each_batch_and_its_messages_wait() {
    // payment-processor's idempotency table set by hand to one that does not exist: its
    // cold-start check, started at init and awaited by each batch, fails every batch (the init
    // itself does not wait for it, and the process stays up).
    let mut options = processes();
    options.env_overrides.insert(
        PROCESSOR.into(),
        [("IDEMPOTENCY_TABLE".to_owned(), MISSING.to_owned())].into(),
    );
    let pipeline = Pipeline::start(Options {
        functions: Functions::Processes(options),
        ..Options::default()
    })
    .await
    .unwrap();
    // The other functions run: a payment is accepted and relayed, and waits on payments.fifo.
    let id = accept(&pipeline, "waiting").await;
    let queue = "PaymentsQueue";
    let mut depth = 0;
    for _ in 0..50 {
        let d = local_aws::runner::queue_depth(
            &pipeline.clients.sqs,
            &pipeline.resources.queues[queue].url,
        )
        .await
        .unwrap();
        depth = d.visible + d.not_visible;
        if depth > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(depth, 1, "the payment's message waits on payments.fifo");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stored = pipeline.stored().await.unwrap();
    assert_eq!(stored.payment_status[&id], "accepted");
    assert_eq!(stored.dead_lettered_payments, 0, "nothing dead-lettered");
    let observed = wait_observed(&pipeline, "payment-processor's batch refused", |o| {
        o.printed(PROCESSOR)
            .any(|line| line.contains("idempotency table cannot serve") && line.contains(MISSING))
    })
    .await;
    assert!(observed.replaced.is_empty(), "{:?}", observed.replaced);
    pipeline
        .stop_expecting(&[
            Violation::Undrained {
                queue: queue.into(),
                messages: 1,
            },
            Violation::Unsettled {
                payment_id: id,
                status: "accepted".into(),
            },
        ])
        .await;
}
