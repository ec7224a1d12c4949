//! Shared set-up for the tests that talk to a local AWS endpoint (moto, started by `make test`).
#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};

#[cfg(feature = "dynamodb")]
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    TimeToLiveSpecification,
};
use lambda_idempotency::count::RequestCounter;
use lambda_idempotency::store::{InMemoryBackend, Put, StoreError, Update, Updated};

/// The local endpoint. The test command starts it; a test never skips without it.
pub fn endpoint() -> String {
    std::env::var("AWS_ENDPOINT_URL").unwrap_or_else(|_| {
        panic!(
            "AWS_ENDPOINT_URL is not set: these tests need a local AWS endpoint. \
             Run them with `make test`, which starts moto on 127.0.0.1 and stops it afterwards."
        )
    })
}

/// The Redis server's URL. The test command (`make test`, `infra/local-aws/local-aws run`)
/// starts one on loopback; a test never skips without it.
pub fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| {
        panic!(
            "REDIS_URL is not set: these tests need a Redis server. Run them with `make test` \
             (or `infra/local-aws/local-aws run -- cargo nextest run ...`), which starts \
             valkey-server on 127.0.0.1 and stops it afterwards."
        )
    })
}

pub async fn sdk_config() -> aws_config::SdkConfig {
    let endpoint = endpoint();
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "test", "test", None, None, "tests",
        ))
        .load()
        .await
}

#[cfg(feature = "dynamodb")]
pub async fn dynamodb(counter: &RequestCounter) -> aws_sdk_dynamodb::Client {
    let config = aws_sdk_dynamodb::config::Builder::from(&sdk_config().await)
        .interceptor(counter.clone())
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

pub async fn sqs(counter: &RequestCounter) -> aws_sdk_sqs::Client {
    let config = aws_sdk_sqs::config::Builder::from(&sdk_config().await)
        .interceptor(counter.clone())
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}

/// A name no other test in this run uses.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{prefix}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// Creates an idempotency table (string key `key_attribute`, TTL on `ttl_attribute`).
#[cfg(feature = "dynamodb")]
pub async fn create_table(
    client: &aws_sdk_dynamodb::Client,
    key_attribute: &str,
    ttl_attribute: &str,
) -> String {
    let name = unique("idempotency");
    create_table_named(client, &name, key_attribute, ttl_attribute).await;
    name
}

/// Creates the idempotency table `name` (string key `key_attribute`, TTL on `ttl_attribute`).
#[cfg(feature = "dynamodb")]
pub async fn create_table_named(
    client: &aws_sdk_dynamodb::Client,
    name: &str,
    key_attribute: &str,
    ttl_attribute: &str,
) {
    client
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(key_attribute)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(key_attribute)
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("create the idempotency table");
    client
        .update_time_to_live()
        .table_name(name)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .enabled(true)
                .attribute_name(ttl_attribute)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("enable TTL");
}

/// Creates a table of the handler's items keyed on `pk` and `sk` (both strings); its name.
#[cfg(feature = "dynamodb")]
pub async fn create_sorted_table(client: &aws_sdk_dynamodb::Client) -> String {
    let name = unique("sorted");
    let attribute = |name: &str| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .unwrap()
    };
    let key = |name: &str, key_type| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(key_type)
            .build()
            .unwrap()
    };
    client
        .create_table()
        .table_name(&name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(attribute("pk"))
        .attribute_definitions(attribute("sk"))
        .key_schema(key("pk", KeyType::Hash))
        .key_schema(key("sk", KeyType::Range))
        .send()
        .await
        .expect("create the sorted table");
    name
}

/// Creates the queue `name` with `attributes`; its URL and ARN.
pub async fn create_queue(
    sqs: &aws_sdk_sqs::Client,
    name: &str,
    attributes: &[(aws_sdk_sqs::types::QueueAttributeName, String)],
) -> (String, String) {
    use aws_sdk_sqs::types::QueueAttributeName;
    let mut create = sqs.create_queue().queue_name(name);
    for (attribute, value) in attributes {
        create = create.attributes(attribute.clone(), value);
    }
    let url = create.send().await.unwrap().queue_url.unwrap();
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap()[&QueueAttributeName::QueueArn]
        .clone();
    (url, arn)
}

/// Creates a FIFO queue and returns its URL.
pub async fn create_fifo_queue(client: &aws_sdk_sqs::Client) -> String {
    let name = format!("{}.fifo", unique("q"));
    client
        .create_queue()
        .queue_name(name)
        .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .expect("create the FIFO queue")
        .queue_url()
        .unwrap()
        .to_owned()
}

/// The in-memory backend whose first `failures` completions fail (a store outage).
#[derive(Debug, Default)]
pub struct FailingCompletions {
    pub inner: InMemoryBackend,
    pub failures: u32,
    pub tried: AtomicU32,
}

impl lambda_idempotency::store::Backend for FailingCompletions {
    async fn put(
        &self,
        record: &lambda_idempotency::state::IdempotencyRecord,
        now_ms: i64,
    ) -> Result<Put, StoreError> {
        self.inner.put(record, now_ms).await
    }
    async fn get(
        &self,
        key: &str,
        now_ms: i64,
    ) -> Result<Option<lambda_idempotency::state::IdempotencyRecord>, StoreError> {
        self.inner.get(key, now_ms).await
    }
    async fn update(&self, key: &str, update: &Update, now_ms: i64) -> Result<Updated, StoreError> {
        if matches!(update, Update::Complete { .. })
            && self.tried.fetch_add(1, Ordering::SeqCst) < self.failures
        {
            return Err(StoreError::Malformed {
                key: key.into(),
                reason: "generated outage".into(),
            });
        }
        self.inner.update(key, update, now_ms).await
    }
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.inner.delete(key).await
    }
}

/// Bodies sent to the mocked dead-letter queue; a body containing `undeliverable` is refused.
pub type Sent = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

pub fn dead_letter_queue(sent: &Sent) -> lambda_idempotency::dead_letter::DeadLetter {
    let log = sent.clone();
    let send = aws_smithy_mocks::mock!(aws_sdk_sqs::Client::send_message_batch)
        .then_compute_output(move |input| {
            let mut ok = Vec::new();
            let mut failed = Vec::new();
            for e in input.entries() {
                if e.message_body().contains("undeliverable") {
                    failed.push(
                        aws_sdk_sqs::types::BatchResultErrorEntry::builder()
                            .id(e.id())
                            .code("InvalidParameterValue")
                            .sender_fault(true)
                            .build()
                            .unwrap(),
                    );
                } else {
                    log.lock().unwrap().push(e.message_body().to_owned());
                    ok.push(
                        aws_sdk_sqs::types::SendMessageBatchResultEntry::builder()
                            .id(e.id())
                            .message_id(format!("dlq-{}", e.id()))
                            .md5_of_message_body("0")
                            .build()
                            .unwrap(),
                    );
                }
            }
            aws_sdk_sqs::operation::send_message_batch::SendMessageBatchOutput::builder()
                .set_successful(Some(ok))
                .set_failed(Some(failed))
                .build()
                .unwrap()
        });
    let sqs =
        aws_smithy_mocks::mock_client!(aws_sdk_sqs, aws_smithy_mocks::RuleMode::MatchAny, [&send]);
    lambda_idempotency::dead_letter::DeadLetter::new(sqs, "https://sqs.local/123456789012/dlq.fifo")
}
