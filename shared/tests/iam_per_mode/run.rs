//! One run: its resources, its guarded clients, and the check at its end.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::sqs::SqsMessage;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::QueueAttributeName;
use lambda_idempotency::Idempotency;
use lambda_idempotency::count::RequestCounter;
use lambda_idempotency::store::{Backend, DynamoDbBackend};
use lambda_idempotency::time::ManualClock;

use crate::common;
use crate::guard::Guard;
use crate::table::{Resource, granted};

/// A run's resources, made with unguarded clients, and its guarded clients.
pub struct Run {
    labels: &'static [&'static str],
    pub guard: Guard,
    /// Guarded.
    pub dynamodb: aws_sdk_dynamodb::Client,
    /// Guarded.
    pub sqs: aws_sdk_sqs::Client,
    /// Unguarded, for setting up and looking.
    pub setup_dynamodb: aws_sdk_dynamodb::Client,
    pub setup_sqs: aws_sdk_sqs::Client,
    pub idempotency: String,
    pub effects: String,
    pub source: Queue,
    pub dead_letter: Queue,
    pub clock: Arc<ManualClock>,
}

pub struct Queue {
    pub name: String,
    pub url: String,
    pub arn: String,
}

impl Run {
    /// The tables and queues of a run granted `labels`: an idempotency table with its TTL on
    /// `expiration`, an effect table, a source queue whose redrive policy names a dead-letter
    /// queue.
    pub async fn new(labels: &'static [&'static str]) -> Self {
        let counter = RequestCounter::default();
        let setup_dynamodb = common::dynamodb(&counter).await;
        let setup_sqs = common::sqs(&counter).await;
        let idempotency = common::create_table(&setup_dynamodb, "id", "expiration").await;
        let effects = common::create_table(&setup_dynamodb, "pk", "ttl").await;
        let dead_letter = queue(&setup_sqs, &common::unique("dlq"), None).await;
        let redrive = format!(
            r#"{{"deadLetterTargetArn":"{}","maxReceiveCount":64}}"#,
            dead_letter.arn
        );
        let source = queue(&setup_sqs, &common::unique("source"), Some(redrive)).await;
        let guard = Guard::default();
        {
            let mut ledger = guard.ledger();
            ledger.allowed = granted(labels);
            ledger.resources = BTreeMap::from([
                (idempotency.clone(), Resource::IdempotencyTable),
                (effects.clone(), Resource::EffectTables),
                (source.name.clone(), Resource::SourceQueue),
                (dead_letter.name.clone(), Resource::DeadLetterQueue),
            ]);
        }
        let sdk = common::sdk_config().await;
        let dynamodb = aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(&sdk)
                .interceptor(guard.clone())
                .build(),
        );
        let sqs = aws_sdk_sqs::Client::from_conf(
            aws_sdk_sqs::config::Builder::from(&sdk)
                .interceptor(guard.clone())
                .build(),
        );
        Self {
            labels,
            guard,
            dynamodb,
            sqs,
            setup_dynamodb,
            setup_sqs,
            idempotency,
            effects,
            source,
            dead_letter,
            clock: Arc::new(ManualClock::starting_now()),
        }
    }

    /// The backend over the guarded client.
    pub fn backend(&self) -> DynamoDbBackend {
        DynamoDbBackend::new(self.dynamodb.clone(), &self.idempotency)
    }

    /// The engine over `backend`: keys prefixed `fn`, records that expire after an hour.
    pub fn engine<B: Backend>(&self, backend: B) -> Idempotency<B> {
        Idempotency::new(backend)
            .with_key_prefix("fn")
            .with_clock(self.clock.clone())
            .with_expiry(Duration::from_secs(3600))
    }

    /// No request was refused so far.
    pub fn assert_nothing_refused(&self) {
        let ledger = self.guard.ledger();
        assert!(
            ledger.refused.is_empty(),
            "{:?}: requests refused under the table's grants: {:#?}",
            self.labels,
            ledger.refused
        );
    }

    /// The end of a run: no request was refused, and the actions used are the table's.
    pub fn assert_exactly_the_tables_actions(&self) {
        self.assert_nothing_refused();
        let ledger = self.guard.ledger();
        let unused: Vec<_> = ledger.allowed.difference(&ledger.used).collect();
        assert!(
            unused.is_empty(),
            "{:?}: the table grants actions the run never used: {unused:?}",
            self.labels
        );
        assert_eq!(ledger.used, ledger.allowed, "{:?}", self.labels);
    }

    /// A record of the source queue, with a receipt handle of a real message of it.
    pub async fn record(&self, id: &str, body: &str, receives: u32) -> SqsMessage {
        self.setup_sqs
            .send_message()
            .queue_url(&self.source.url)
            .message_body("a handle")
            .send()
            .await
            .unwrap();
        let received = self
            .setup_sqs
            .receive_message()
            .queue_url(&self.source.url)
            .visibility_timeout(600)
            .send()
            .await
            .unwrap();
        let mut m = SqsMessage::default();
        m.message_id = Some(id.into());
        m.body = Some(body.into());
        m.receipt_handle = received
            .messages()
            .first()
            .and_then(|m| m.receipt_handle())
            .map(str::to_owned);
        assert!(m.receipt_handle.is_some());
        m.attributes
            .insert("ApproximateReceiveCount".into(), receives.to_string());
        m.event_source_arn = Some(self.source.arn.clone());
        m
    }

    /// The record of `key` in the idempotency table.
    pub async fn stored(&self, key: &str) -> Option<HashMap<String, AttributeValue>> {
        self.setup_dynamodb
            .get_item()
            .table_name(&self.idempotency)
            .key("id", AttributeValue::S(format!("fn#{key}")))
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .item()
            .cloned()
    }

    /// The bodies on the dead-letter queue.
    pub async fn dead_letters(&self) -> Vec<String> {
        self.setup_sqs
            .receive_message()
            .queue_url(&self.dead_letter.url)
            .max_number_of_messages(10)
            .send()
            .await
            .unwrap()
            .messages()
            .iter()
            .filter_map(|m| m.body().map(str::to_owned))
            .collect()
    }
}

/// Creates a standard queue, with a redrive policy when given one.
pub async fn queue(sqs: &aws_sdk_sqs::Client, name: &str, redrive: Option<String>) -> Queue {
    let mut attributes = vec![(QueueAttributeName::VisibilityTimeout, "600".to_owned())];
    if let Some(policy) = redrive {
        attributes.push((QueueAttributeName::RedrivePolicy, policy));
    }
    let (url, arn) = common::create_queue(sqs, name, &attributes).await;
    Queue {
        name: name.to_owned(),
        url,
        arn,
    }
}
