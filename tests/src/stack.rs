//! The template's queues and tables provisioned on the local endpoint under a unique prefix,
//! with helpers to build the functions over them and to read what they stored. The fault
//! injection tests build on this directly; [`Pipeline`](crate::Pipeline) adds the HTTP gateway and
//! the event source runner.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use lambda_idempotency::publish::{DeduplicationId, Message, MessageGroupId, Publisher};
use local_aws::Clients;
use local_aws::provision::{Provisioned, provision};
use local_aws::runner::queue_depth;
use local_aws::template::{Naming, Template, TemplateOptions};
use payments_model::PaymentRequested;

/// A boxed error.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The template's `Stage` for tests and the demo: not `prod`, so that the failure switch
/// (`FailPayments`) reaches payment-processor.
pub const TEST_STAGE: &str = "test";

/// The template's `Stage` for `make up`.
pub const DEV_STAGE: &str = "dev";

/// Provisioned resources of one run.
pub struct Stack {
    /// The SDK configuration for the endpoint.
    pub sdk: aws_config::SdkConfig,
    /// SDK clients for the endpoint.
    pub clients: Clients,
    /// The template, as resolved for this run.
    pub template: Template,
    /// What was provisioned.
    pub resources: Provisioned,
}

impl Stack {
    /// Provisions the template under a unique prefix, with these parameter overrides (`Stage`
    /// is [`TEST_STAGE`] unless they give one), on the endpoint in `AWS_ENDPOINT_URL`.
    pub async fn provision(parameters: &[(&str, &str)]) -> Result<Self, BoxError> {
        Self::provision_named(Naming::unique("e2e"), parameters).await
    }

    /// [`provision`](Self::provision) with a given naming.
    pub async fn provision_named(
        naming: Naming,
        parameters: &[(&str, &str)],
    ) -> Result<Self, BoxError> {
        Self::provision_on(local_aws::local_sdk_config().await?, naming, parameters).await
    }

    /// [`provision_named`](Self::provision_named) on the endpoint of `sdk` (a test's
    /// [`OwnServer`](crate::OwnServer), say).
    pub async fn provision_on(
        sdk: aws_config::SdkConfig,
        naming: Naming,
        parameters: &[(&str, &str)],
    ) -> Result<Self, BoxError> {
        let clients = Clients::new(&sdk);
        let mut options = TemplateOptions::default()
            .naming(naming)
            .parameter("Stage", TEST_STAGE);
        for (k, v) in parameters {
            options = options.parameter(*k, *v);
        }
        let template = Template::load_project(&options)?;
        let resources = provision(&clients, &template).await?;
        Ok(Self {
            sdk,
            clients,
            template,
            resources,
        })
    }

    /// A function's environment, as Lambda would give it.
    pub fn settings(&self, function: &str) -> Result<HashMap<String, String>, BoxError> {
        let f = self
            .template
            .function_by_name(function)
            .ok_or_else(|| format!("template.yaml has no function {function}"))?;
        Ok(self.resources.function_env(f)?.into_iter().collect())
    }

    /// payment-processor as configured by the template (backoff, dead-letter queue).
    pub fn payment_processor(&self) -> Result<payment_processor::App, BoxError> {
        Ok(payment_processor::App::from_settings(
            &self.sdk,
            &self.settings("payment-processor")?,
        )?)
    }

    /// payments-reconciler as configured by the template, with `overrides` of its settings
    /// (e.g. `RESEND_AFTER_SECONDS`).
    pub fn reconciler(
        &self,
        overrides: &[(&str, &str)],
    ) -> Result<payments_operations::reconcile::Reconciler, BoxError> {
        reconciler_with(&self.sdk, self.settings("payments-reconciler")?, overrides)
    }

    /// A queue's URL, by logical id.
    pub fn queue_url(&self, logical_id: &str) -> &str {
        &self.resources.queues[logical_id].url
    }

    /// A table's name, by logical id.
    pub fn table(&self, logical_id: &str) -> &str {
        &self.resources.tables[logical_id].name
    }

    /// Messages in a queue: visible, in flight and delayed.
    pub async fn depth(&self, logical_id: &str) -> Result<u64, BoxError> {
        let d = queue_depth(&self.clients.sqs, self.queue_url(logical_id)).await?;
        Ok(d.visible + d.not_visible + d.delayed)
    }

    /// Stores `payments` as payments-api accepts them (status `accepted`, each numbered in its
    /// account's order, in the order given), so that their messages can be charged: the
    /// processor charges only payments the table holds. Returns them with their numbers, as
    /// payments-publisher would send them.
    pub async fn accept(
        &self,
        mut payments: Vec<PaymentRequested>,
    ) -> Result<Vec<PaymentRequested>, BoxError> {
        use futures_util::{StreamExt, TryStreamExt};
        let mut by_account: Vec<(String, Vec<usize>)> = Vec::new();
        for (i, p) in payments.iter().enumerate() {
            match by_account.iter_mut().find(|(a, _)| *a == p.account_id) {
                Some((_, indexes)) => indexes.push(i),
                None => by_account.push((p.account_id.clone(), vec![i])),
            }
        }
        let payments_ref = &payments;
        let numbered: Vec<Vec<(usize, u64)>> = futures_util::stream::iter(by_account)
            .map(|(_, indexes)| async move {
                let mut numbered = Vec::new();
                for i in indexes {
                    numbered.push((i, self.accept_one(&payments_ref[i]).await?));
                }
                Ok::<_, BoxError>(numbered)
            })
            .buffer_unordered(16)
            .try_collect()
            .await?;
        for (i, sequence) in numbered.into_iter().flatten() {
            payments[i].sequence = Some(sequence);
        }
        Ok(payments)
    }

    async fn accept_one(&self, p: &PaymentRequested) -> Result<u64, BoxError> {
        use aws_sdk_dynamodb::types::{Put, TransactWriteItem};
        use lambda_idempotency::time::Clock;
        use payments_model::order;
        let s = |v: &str| AttributeValue::S(v.to_owned());
        let now = AttributeValue::N(lambda_idempotency::time::SystemClock.now_ms().to_string());
        let put = |sequence: u64| {
            let mut put = Put::builder()
                .table_name(self.table("PaymentsTable"))
                .item("paymentId", s(&p.payment_id))
                .item("accountId", s(&p.account_id))
                .item("amountCents", AttributeValue::N(p.amount_cents.to_string()))
                .item("currency", s(&p.currency))
                .item("status", s("accepted"))
                .item("createdAt", now.clone())
                .item(payments_model::lifecycle::ACCEPTED_AT, now.clone())
                .item("callerId", s("accepted-by-test"))
                .item("requestHash", s("accepted-by-test"))
                .item("sequence", AttributeValue::N(sequence.to_string()))
                .item(
                    payments_model::lifecycle::ACCEPTED_SHARD,
                    s(&payments_model::lifecycle::shard(&p.payment_id)),
                )
                .condition_expression("attribute_not_exists(paymentId)");
            if let Some(d) = &p.description {
                put = put.item("description", s(d));
            }
            TransactWriteItem::builder()
                .put(put.build().expect("table and item are set"))
                .build()
        };
        match order::append(
            &self.clients.dynamodb,
            self.table("AccountsTable"),
            &p.account_id,
            &p.payment_id,
            put,
        )
        .await?
        {
            order::Appended::Numbered(n) => Ok(n),
            order::Appended::Refused => Err(format!("payment {} exists", p.payment_id).into()),
        }
    }

    /// Publishes payments to `payments.fifo` as payments-api would (group = account); `resend`
    /// gives each message a deduplication id of its own, as a producer resending after the
    /// deduplication window would.
    pub async fn publish(
        &self,
        payments: &[PaymentRequested],
        resend: bool,
    ) -> Result<Vec<String>, BoxError> {
        let publisher = Publisher::new(self.clients.sqs.clone(), self.queue_url("PaymentsQueue"));
        let mut messages = Vec::with_capacity(payments.len());
        for p in payments {
            let dedup = if resend {
                DeduplicationId::from_key(&format!("{}-{}", p.payment_id, uuid::Uuid::new_v4()))
            } else {
                DeduplicationId::from_key(&p.payment_id)
            };
            messages.push(Message::fifo(
                MessageGroupId::new(p.account_id.as_str())?,
                dedup,
                serde_json::to_string(p)?,
            )?);
        }
        let mut ids = Vec::with_capacity(payments.len());
        for sent in publisher.send_all(messages).await {
            ids.push(sent?.message_id);
        }
        Ok(ids)
    }

    /// Up to 10 messages of a queue (a dead-letter queue, after a test), with all their message
    /// attributes; they stay on the queue, hidden for its visibility timeout.
    pub async fn receive(
        &self,
        logical_id: &str,
    ) -> Result<Vec<aws_sdk_sqs::types::Message>, BoxError> {
        Ok(self
            .clients
            .sqs
            .receive_message()
            .queue_url(self.queue_url(logical_id))
            .max_number_of_messages(10)
            .message_attribute_names("All")
            .send()
            .await?
            .messages
            .unwrap_or_default())
    }

    /// Every message of a queue, with all their message attributes: receives until nothing is
    /// visible, hiding what it received for 10 minutes so that each message is read once.
    pub async fn receive_all(
        &self,
        logical_id: &str,
    ) -> Result<Vec<aws_sdk_sqs::types::Message>, BoxError> {
        let mut all = Vec::new();
        loop {
            let received = self
                .clients
                .sqs
                .receive_message()
                .queue_url(self.queue_url(logical_id))
                .max_number_of_messages(10)
                .visibility_timeout(600)
                .message_attribute_names("All")
                .send()
                .await?
                .messages
                .unwrap_or_default();
            if received.is_empty() {
                return Ok(all);
            }
            all.extend(received);
        }
    }

    /// The `DeadLetterReason` of every message of a dead-letter queue, by the id of the message
    /// it copies (`DeadLetterSourceMessageId`), each message read once ([`Self::receive_all`]).
    pub async fn dead_letter_reasons(
        &self,
        logical_id: &str,
    ) -> Result<BTreeMap<String, String>, BoxError> {
        use lambda_idempotency::dead_letter::{REASON_ATTRIBUTE, SOURCE_MESSAGE_ID_ATTRIBUTE};
        let mut reasons = BTreeMap::new();
        for m in self.receive_all(logical_id).await? {
            let a = m.message_attributes.unwrap_or_default();
            let text = |name: &str| {
                a.get(name)
                    .and_then(|v| v.string_value())
                    .unwrap_or_default()
                    .to_owned()
            };
            reasons.insert(text(SOURCE_MESSAGE_ID_ATTRIBUTE), text(REASON_ATTRIBUTE));
        }
        Ok(reasons)
    }

    /// The item of a table (its logical id) whose string key `key` is `value`, read consistently.
    pub async fn get(
        &self,
        logical_id: &str,
        key: &str,
        value: &str,
    ) -> Result<Option<HashMap<String, AttributeValue>>, BoxError> {
        Ok(self
            .clients
            .dynamodb
            .get_item()
            .table_name(self.table(logical_id))
            .key(key, AttributeValue::S(value.to_owned()))
            .consistent_read(true)
            .send()
            .await?
            .item)
    }

    /// Every item of a table (its logical id), read consistently.
    pub async fn scan(
        &self,
        logical_id: &str,
    ) -> Result<Vec<HashMap<String, AttributeValue>>, BoxError> {
        let mut items = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .clients
                .dynamodb
                .scan()
                .table_name(self.table(logical_id))
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await?;
            items.extend(page.items.unwrap_or_default());
            match page.last_evaluated_key {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => return Ok(items),
            }
        }
    }

    /// Ledger entries by payment id.
    pub async fn ledger_entries(&self) -> Result<HashMap<String, usize>, BoxError> {
        let mut entries = HashMap::new();
        for item in self.scan("LedgerTable").await? {
            let id = item
                .get("paymentId")
                .and_then(|v| v.as_s().ok())
                .cloned()
                .unwrap_or_default();
            *entries.entry(id).or_default() += 1;
        }
        Ok(entries)
    }

    /// Payment statuses by payment id (empty when a payment has none).
    pub async fn payment_statuses(&self) -> Result<HashMap<String, String>, BoxError> {
        let text = |item: &HashMap<String, AttributeValue>, name: &str| {
            item.get(name)
                .and_then(|v| v.as_s().ok())
                .cloned()
                .unwrap_or_default()
        };
        Ok(self
            .scan("PaymentsTable")
            .await?
            .iter()
            .map(|item| (text(item, "paymentId"), text(item, "status")))
            .collect())
    }

    /// Balances by (account, currency): (minor units, charges).
    pub async fn balances(&self) -> Result<HashMap<(String, String), (i64, i64)>, BoxError> {
        let n = |item: &HashMap<String, AttributeValue>, name: &str| {
            item.get(name)
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        let s = |item: &HashMap<String, AttributeValue>, name: &str| {
            item.get(name)
                .and_then(|v| v.as_s().ok())
                .cloned()
                .unwrap_or_default()
        };
        Ok(self
            .scan("BalancesTable")
            .await?
            .into_iter()
            .map(|item| {
                let key = (s(&item, "accountId"), s(&item, "currency"));
                (key, (n(&item, "balanceCents"), n(&item, "charges")))
            })
            .collect())
    }

    /// Checks that each of `payments` was charged exactly once and every balance (one per account
    /// and currency) is the sum of its payments; returns the offenders.
    pub async fn charged_exactly_once(
        &self,
        payments: &[PaymentRequested],
    ) -> Result<Vec<String>, BoxError> {
        let ledger = self.ledger_entries().await?;
        let balances = self.balances().await?;
        let mut offenders = Vec::new();
        let mut expected: HashMap<(String, String), (i64, i64)> = HashMap::new();
        let ids: HashSet<&str> = payments.iter().map(|p| p.payment_id.as_str()).collect();
        for p in payments {
            let n = ledger.get(&p.payment_id).copied().unwrap_or(0);
            if n != 1 {
                offenders.push(format!("{}: {n} ledger entries", p.payment_id));
            }
            let key = (p.account_id.clone(), p.currency.clone());
            let e = expected.entry(key).or_default();
            e.0 += p.amount_cents;
            e.1 += 1;
        }
        for id in ledger.keys() {
            if !ids.contains(id.as_str()) {
                offenders.push(format!("unknown payment {id} in the ledger"));
            }
        }
        for ((account, currency), want) in &expected {
            let got = balances
                .get(&(account.clone(), currency.clone()))
                .copied()
                .unwrap_or_default();
            if got != *want {
                offenders.push(format!(
                    "{account} {currency}: balance {got:?}, expected {want:?} (minor units, charges)"
                ));
            }
        }
        Ok(offenders)
    }

    /// The stack's tables and queues, for the invariant checker.
    pub fn sources(&self) -> crate::invariants::Sources {
        crate::invariants::Sources::of(&self.clients, &self.resources)
    }

    /// Checks the invariants that apply in `scope` (the stages the test ran) on what the stack
    /// holds, once the work queues the scope drains are empty (at most
    /// [`SETTLE_TIMEOUT`](crate::pipeline::SETTLE_TIMEOUT)); panics unless the violations found
    /// are exactly `expected`.
    pub async fn assert_invariants(
        &self,
        scope: &crate::invariants::Scope,
        expected: &[crate::invariants::Violation],
    ) {
        crate::invariants::settle(
            &self.sources(),
            scope,
            expected,
            crate::pipeline::SETTLE_TIMEOUT,
        )
        .await
        .expect("the stack's tables and queues can be read")
        .assert_passed();
    }

    /// Waits until the payments queue is empty (twice in a row, half a second apart).
    pub async fn wait_drained(&self, timeout: Duration) -> Result<(), BoxError> {
        let end = tokio::time::Instant::now() + timeout;
        let mut empty = 0;
        loop {
            let left = self.depth("PaymentsQueue").await?;
            empty = if left == 0 { empty + 1 } else { 0 };
            if empty >= 2 {
                return Ok(());
            }
            if tokio::time::Instant::now() >= end {
                return Err(format!("not drained within {timeout:?}: {left} messages left").into());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// `n` distinct payments over `accounts` accounts, amounts 100 to 10,099 cents, descriptions
/// `payment {i}{suffix(i)}`.
pub fn payments(
    n: usize,
    accounts: usize,
    tag: &str,
    suffix: impl Fn(usize) -> String,
) -> Vec<PaymentRequested> {
    let run = uuid::Uuid::new_v4().simple().to_string();
    (0..n)
        .map(|i| PaymentRequested {
            payment_id: format!("pay_{tag}_{}_{i}", &run[..8]),
            account_id: format!("acct-{:03}", i % accounts.max(1)),
            amount_cents: 100 + (i as i64 * 37) % 10_000,
            currency: "EUR".into(),
            description: Some(format!("payment {i}{}", suffix(i))),
            sequence: None,
            unknown: Default::default(),
        })
        .collect()
}

/// The payment id in the body and the `DeadLetterReason` of every message of a queue (a
/// dead-letter queue, after a run): receives until the queue has nothing visible, hiding what it
/// received for `hide` so that each message is read once. Bodies without a payment id count as
/// `?`, messages without a reason have an empty one.
pub async fn dead_letters_in_queue(
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
    hide: Duration,
) -> Result<Vec<(String, String)>, BoxError> {
    let mut found = Vec::new();
    loop {
        let messages = sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .visibility_timeout(hide.as_secs() as i32)
            .message_attribute_names("All")
            .send()
            .await?
            .messages
            .unwrap_or_default();
        if messages.is_empty() {
            return Ok(found);
        }
        for m in messages {
            let id = m
                .body
                .as_deref()
                .and_then(|b| serde_json::from_str::<serde_json::Value>(b).ok())
                .and_then(|v| v["paymentId"].as_str().map(str::to_owned));
            let reason = m
                .message_attributes
                .as_ref()
                .and_then(|a| a.get("DeadLetterReason"))
                .and_then(|v| v.string_value())
                .unwrap_or_default()
                .to_owned();
            found.push((id.unwrap_or_else(|| "?".into()), reason));
        }
    }
}

/// payments-reconciler over `settings` (its environment), with `overrides`.
pub(crate) fn reconciler_with(
    sdk: &aws_config::SdkConfig,
    mut settings: HashMap<String, String>,
    overrides: &[(&str, &str)],
) -> Result<payments_operations::reconcile::Reconciler, BoxError> {
    for (k, v) in overrides {
        settings.insert((*k).to_owned(), (*v).to_owned());
    }
    let config = payments_operations::reconcile::Config::from_settings(&settings)?;
    Ok(payments_operations::reconcile::Reconciler::from_sdk(
        sdk, config,
    ))
}
