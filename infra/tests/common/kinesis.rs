//! Helpers of the Kinesis mapping tests: streams, writes, a handler that records every batch.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::kinesis::KinesisEvent;
use aws_lambda_events::streams::KinesisEventResponse;
use aws_sdk_kinesis::primitives::Blob;
use lambda_runtime::{Error, LambdaEvent};
use local_aws::Clients;
use local_aws::provision::ProvisionedKinesisStream;
use local_aws::runner::{InProcess, Runner, RunningRunner, StreamEventSourceMapping};
use local_aws::template::KinesisStream;
use tokio_util::sync::CancellationToken;

#[allow(unused_imports)]
pub use super::stream::{WAIT, fast, invocation_records, keys};

/// A stream of `shards` shards, provisioned as the template's would be.
pub async fn stream(clients: &Clients, shards: u32) -> ProvisionedKinesisStream {
    let model = KinesisStream {
        logical_id: "S".into(),
        name: super::unique_name("ks", false),
        shard_count: shards,
        retention_period_hours: 24,
    };
    local_aws::provision::create_kinesis_stream(&clients.kinesis, &model)
        .await
        .expect("create the stream")
}

/// Writes a record whose data is `data`, under `partition_key`; its sequence number.
pub async fn put(
    clients: &Clients,
    stream: &ProvisionedKinesisStream,
    partition_key: &str,
    data: &str,
) -> String {
    clients
        .kinesis
        .put_record()
        .stream_arn(&stream.arn)
        .partition_key(partition_key)
        .data(Blob::new(data))
        .send()
        .await
        .expect("PutRecord")
        .sequence_number()
        .to_owned()
}

/// One record as the handler saw it: its data (text), its sequence number, its shard (from
/// `eventID`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen1 {
    pub data: String,
    pub sequence_number: String,
    pub shard_id: String,
}

/// Every batch every invocation saw, and every event whole.
#[derive(Clone, Default)]
pub struct Seen(Arc<Mutex<Vec<Vec<Seen1>>>>, Arc<Mutex<Vec<KinesisEvent>>>);

impl Seen {
    pub fn record(&self, event: &KinesisEvent) -> Vec<Seen1> {
        let batch: Vec<Seen1> = event
            .records
            .iter()
            .map(|r| {
                let id = r.event_id.clone().unwrap_or_default();
                Seen1 {
                    data: String::from_utf8(r.kinesis.data.0.clone()).expect("UTF-8 data"),
                    sequence_number: r.kinesis.sequence_number.clone(),
                    shard_id: id.split(':').next().unwrap_or_default().to_owned(),
                }
            })
            .collect();
        self.0.lock().unwrap().push(batch.clone());
        self.1.lock().unwrap().push(event.clone());
        batch
    }

    /// The data of each batch's records, batch by batch.
    pub fn batches(&self) -> Vec<Vec<String>> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|b| b.iter().map(|r| r.data.clone()).collect())
            .collect()
    }

    pub fn flat(&self) -> Vec<Seen1> {
        self.0.lock().unwrap().concat()
    }

    pub fn events(&self) -> Vec<KinesisEvent> {
        self.1.lock().unwrap().clone()
    }
}

pub fn failures(sequence_numbers: &[&str]) -> KinesisEventResponse {
    let mut response = KinesisEventResponse::default();
    response.set_failures(sequence_numbers.iter().copied());
    response
}

/// Runs `mapping` with a handler that records each batch and answers `respond(invocation
/// index, batch)`.
pub fn start(
    clients: &Clients,
    mapping: StreamEventSourceMapping,
    seen: &Seen,
    respond: impl Fn(usize, &[Seen1]) -> Result<KinesisEventResponse, String> + Send + Sync + 'static,
) -> RunningRunner {
    start_paced(clients, mapping, seen, |_| Duration::ZERO, respond)
}

/// [`start`], the handler first waiting `pause(batch)` (without holding the runtime up), and
/// recording the batch when it is done.
pub fn start_paced(
    clients: &Clients,
    mapping: StreamEventSourceMapping,
    seen: &Seen,
    pause: impl Fn(&KinesisEvent) -> Duration + Send + Sync + 'static,
    respond: impl Fn(usize, &[Seen1]) -> Result<KinesisEventResponse, String> + Send + Sync + 'static,
) -> RunningRunner {
    let (seen, pause, respond) = (seen.clone(), Arc::new(pause), Arc::new(respond));
    Runner::from_clients(clients)
        .stream_options(fast())
        .stream_mapping(
            mapping,
            InProcess::new(move |event: LambdaEvent<KinesisEvent>| {
                let (seen, pause, respond) =
                    (seen.clone(), Arc::clone(&pause), Arc::clone(&respond));
                async move {
                    tokio::time::sleep(pause(&event.payload)).await;
                    let index = seen.batches().len();
                    let batch = seen.record(&event.payload);
                    respond(index, &batch).map_err(Error::from)
                }
            }),
        )
        .expect("a runner with a Kinesis client")
        .start(CancellationToken::new())
}

pub fn mapping(name: &str, stream: &ProvisionedKinesisStream) -> StreamEventSourceMapping {
    StreamEventSourceMapping::new(name, &stream.arn, Duration::from_secs(5))
}
