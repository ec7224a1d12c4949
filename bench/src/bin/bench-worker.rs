//! One side of the benchmark: this project's batch processor with the DynamoDB idempotency
//! store, over a workload file, in a process of its own. Writes a [`bench::SideResult`].
//!
//! `bench-worker --events FILE --idempotency-table T --effects-table E --out FILE
//! [--started-at-ns N]` against `AWS_ENDPOINT_URL`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::types::AttributeValue;
use bench::{SideResult, rusage};
use lambda_idempotency::Idempotency;
use lambda_idempotency::batch::{
    BatchProcessor, RecordContext, RecordError, RecordHandler, RecordHandlerExt, json,
};
use lambda_idempotency::store::DynamoDbBackend;
use lambda_runtime::{Context, LambdaEvent};

tokio::task_local! {
    /// The delivery (receipt handle) whose requests are being counted.
    static DELIVERY: String;
}

/// Counts DynamoDB requests per delivery.
#[derive(Debug, Clone, Default)]
struct PerDelivery(Arc<Mutex<HashMap<String, u32>>>);

impl Intercept for PerDelivery {
    fn name(&self) -> &'static str {
        "PerDelivery"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        if let Ok(delivery) = DELIVERY.try_with(Clone::clone) {
            *self.0.lock().unwrap().entry(delivery).or_default() += 1;
        }
        Ok(())
    }
}

/// Runs the inner handler with its delivery marked, for the request counter.
struct Counted<H>(H);

impl<H: RecordHandler> RecordHandler for Counted<H> {
    type Output = H::Output;

    fn handle(
        &self,
        message: &SqsMessage,
        ctx: &RecordContext,
    ) -> impl std::future::Future<Output = Result<Self::Output, RecordError>> + Send {
        let delivery = message.receipt_handle.clone().unwrap_or_default();
        DELIVERY.scope(delivery, self.0.handle(message, ctx))
    }
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Payment {
    payment_id: String,
    amount_cents: i64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let process_start = SystemTime::now();
    let mut args: HashMap<String, String> = HashMap::new();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        args.insert(flag.trim_start_matches("--").to_owned(), value);
    }
    let arg = |name: &str| {
        args.get(name)
            .cloned()
            .ok_or_else(|| format!("--{name} is required"))
    };
    let started = match args.get("started-at-ns") {
        Some(ns) => SystemTime::UNIX_EPOCH + Duration::from_nanos(ns.parse()?),
        None => process_start,
    };
    let workload: bench::Workload =
        serde_json::from_str(&std::fs::read_to_string(arg("events")?)?)?;
    let effects_table = arg("effects-table")?;

    let sdk = local_aws::local_sdk_config().await?;
    let counter = PerDelivery::default();
    let dynamodb = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&sdk)
            .interceptor(counter.clone())
            .build(),
    );
    let store = Idempotency::new(DynamoDbBackend::new(
        dynamodb.clone(),
        arg("idempotency-table")?,
    ));
    let handler = Counted(
        json(|p: Payment, ctx: RecordContext| {
            let (dynamodb, table) = (&dynamodb, &effects_table);
            async move {
                dynamodb
                    .put_item()
                    .table_name(table)
                    .item("id", AttributeValue::S(p.payment_id))
                    .item("messageId", AttributeValue::S(ctx.message_id))
                    .item("amountCents", AttributeValue::N(p.amount_cents.to_string()))
                    .send()
                    .await
                    .map(|_| ())
            }
        })
        .idempotent(store),
    );
    let processor = BatchProcessor::new();

    let mut result = SideResult {
        side: "rust".into(),
        version: format!("lambda-idempotency {}", env!("CARGO_PKG_VERSION")),
        ..SideResult::default()
    };
    let mut seen = HashSet::new();
    let mut fresh = Vec::new();
    let mut duplicates = Vec::new();
    let (cpu_before, _) = rusage();
    for (i, value) in workload.events.into_iter().enumerate() {
        let event: SqsEvent = serde_json::from_value(value)?;
        for r in &event.records {
            let id = r.message_id.clone().unwrap_or_default();
            let delivery = r.receipt_handle.clone().unwrap_or_default();
            if seen.insert(id) {
                fresh.push(delivery)
            } else {
                duplicates.push(delivery)
            }
        }
        result.records += event.records.len() as u64;
        let mut context = Context::default();
        context.deadline = (SystemTime::now() + Duration::from_secs(30))
            .duration_since(SystemTime::UNIX_EPOCH)?
            .as_millis() as u64;
        let t = Instant::now();
        let report = processor
            .process(&LambdaEvent::new(event, context), &handler)
            .await?;
        let response = report.response();
        result.batch_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        result.failures += response.batch_item_failures.len() as u64;
        result.batches += 1;
        if i == 0 {
            result.cold_start_ms =
                SystemTime::now().duration_since(started)?.as_secs_f64() * 1000.0;
        }
    }
    let (cpu_after, peak_kib) = rusage();
    result.cpu_ms_total = cpu_after - cpu_before;
    result.cpu_us_per_record = result.cpu_ms_total * 1000.0 / result.records.max(1) as f64;
    result.peak_rss_mb = peak_kib / 1024.0;
    let counts = counter.0.lock().unwrap();
    let mean = |deliveries: &[String]| {
        if deliveries.is_empty() {
            return 0.0;
        }
        deliveries
            .iter()
            .map(|d| f64::from(counts.get(d).copied().unwrap_or(0)))
            .sum::<f64>()
            / deliveries.len() as f64
    };
    result.requests_per_fresh_record = mean(&fresh);
    result.requests_per_duplicate_record = mean(&duplicates);
    std::fs::write(arg("out")?, serde_json::to_string_pretty(&result)?)?;
    Ok(())
}
