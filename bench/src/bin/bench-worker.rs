//! One side of the benchmark: this project's batch processor with the DynamoDB idempotency
//! store, over a workload file, in a process of its own. Writes a [`bench::SideResult`].
//!
//! `bench-worker --events FILE.jsonl --idempotency-table T --effects-table E --out FILE
//! [--started-at-ns N]` against `AWS_ENDPOINT_URL`. The events file has one Lambda SQS event per
//! line; each is read and decoded just before its invocation, as the Lambda runtime would, so
//! the process never holds the whole workload (which would show in its peak memory), and the
//! decoding is kept out of the CPU time, like the Python side does.
//!
//! `bench-worker --sdk-floor N --effects-table E --out FILE`: N sequential `PutItem` calls with
//! the plain SDK client, and the CPU time of each (the floor under any library built on the SDK:
//! run against an endpoint that answers at once, it is the client's own cost per request).

use std::collections::{HashMap, HashSet};
use std::io::BufRead;
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
    /// Set while the record handler's own work runs: its requests are not the store's.
    static IN_HANDLER: ();
}

/// Counts DynamoDB requests per delivery: `[all, the record handler's]`.
#[derive(Debug, Clone, Default)]
struct PerDelivery(Arc<Mutex<HashMap<String, [u32; 2]>>>);

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
            let mut counts = self.0.lock().unwrap();
            let count = counts.entry(delivery).or_default();
            count[0] += 1;
            if IN_HANDLER.try_with(|_| ()).is_ok() {
                count[1] += 1;
            }
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
    if let Some(n) = args.get("sdk-floor") {
        return sdk_floor(n.parse()?, &arg("effects-table")?, &arg("out")?).await;
    }
    let events_path = arg("events")?;
    let events = std::io::BufReader::new(
        std::fs::File::open(&events_path).map_err(|e| format!("cannot read {events_path}: {e}"))?,
    );
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
            IN_HANDLER.scope((), async move {
                dynamodb
                    .put_item()
                    .table_name(table)
                    .item("id", AttributeValue::S(p.payment_id))
                    .item("messageId", AttributeValue::S(ctx.message_id))
                    .item("amountCents", AttributeValue::N(p.amount_cents.to_string()))
                    .send()
                    .await
                    .map(|_| ())
            })
        })
        .idempotent(store),
    );
    let processor = BatchProcessor::new();
    let init_ms = SystemTime::now().duration_since(started)?.as_secs_f64() * 1000.0;

    let mut result = SideResult {
        side: "rust".into(),
        init_ms,
        version: format!("lambda-idempotency {}", env!("CARGO_PKG_VERSION")),
        ..SideResult::default()
    };
    let mut seen = HashSet::new();
    let mut fresh = Vec::new();
    let mut duplicates = Vec::new();
    for (i, line) in events.lines().enumerate() {
        let event: SqsEvent = serde_json::from_str(&line?)
            .map_err(|e| format!("{events_path}: event {i} is not an SQS event: {e}"))?;
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
        let (cpu_before, _) = rusage();
        let t = Instant::now();
        let report = processor
            .process(&LambdaEvent::new(event, context), &handler)
            .await?;
        let response = report.response();
        result.batch_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        result.cpu_ms_total += rusage().0 - cpu_before;
        result.failures += response.batch_item_failures.len() as u64;
        result.batches += 1;
        if i == 0 {
            result.cold_start_ms =
                SystemTime::now().duration_since(started)?.as_secs_f64() * 1000.0;
        }
    }
    let (_, peak_kib) = rusage();
    result.cpu_us_per_record = result.cpu_ms_total * 1000.0 / result.records.max(1) as f64;
    result.peak_rss_mb = peak_kib / 1024.0;
    let counts = counter.0.lock().unwrap();
    let mean = |deliveries: &[String], store_only: bool| {
        if deliveries.is_empty() {
            return 0.0;
        }
        deliveries
            .iter()
            .map(|d| {
                let [all, handler] = counts.get(d).copied().unwrap_or_default();
                f64::from(if store_only { all - handler } else { all })
            })
            .sum::<f64>()
            / deliveries.len() as f64
    };
    result.requests_per_fresh_record = mean(&fresh, false);
    result.requests_per_duplicate_record = mean(&duplicates, false);
    result.store_requests_per_fresh_record = mean(&fresh, true);
    result.store_requests_per_duplicate_record = mean(&duplicates, true);
    std::fs::write(arg("out")?, serde_json::to_string_pretty(&result)?)?;
    Ok(())
}

/// `--sdk-floor`: CPU time per request of the plain SDK client, N `PutItem` calls one after
/// another.
async fn sdk_floor(
    n: u32,
    table: &str,
    out: &str,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let sdk = local_aws::local_sdk_config().await?;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let put = |i: u32| {
        dynamodb
            .put_item()
            .table_name(table)
            .item("id", AttributeValue::S(format!("pay-{i:06}")))
            .item("amountCents", AttributeValue::N(i.to_string()))
            .send()
    };
    put(0).await?; // the first request opens the connection
    let (before, _) = rusage();
    let t = Instant::now();
    for i in 0..n {
        put(i).await?;
    }
    let cpu_us = (rusage().0 - before) * 1000.0 / f64::from(n.max(1));
    let wall_us = t.elapsed().as_secs_f64() * 1e6 / f64::from(n.max(1));
    std::fs::write(
        out,
        serde_json::json!({"requests": n, "cpu_us_per_request": cpu_us, "wall_us_per_request": wall_us})
            .to_string(),
    )?;
    Ok(())
}
