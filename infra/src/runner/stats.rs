//! What the mappings of a function did: [`Stats`], with [`StreamStats`] for stream mappings.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// What a function's mappings did so far. For a stream mapping, `records_received` counts the
/// records sent in invocations (a retried record each time), `receive_errors` the failed
/// stream reads, and [`stream`](Self::stream) the rest; `records_deleted` and `delete_errors`
/// are SQS only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Invocations.
    pub batches: u64,
    /// Records received (each receive of a message counts).
    pub records_received: u64,
    /// Records deleted from the queue.
    pub records_deleted: u64,
    /// Records the function reported in `batchItemFailures`.
    pub records_reported_failed: u64,
    /// Invocations that returned an error, panicked or could not be made.
    pub invocation_errors: u64,
    /// Invocations that ran past the function's timeout.
    pub timeouts: u64,
    /// Invocations whose partial batch response was invalid.
    pub invalid_responses: u64,
    /// Failed ReceiveMessage calls (stream mappings: failed DescribeStream or ListShards, GetShardIterator
    /// and GetRecords calls).
    pub receive_errors: u64,
    /// Records whose deletion failed.
    pub delete_errors: u64,
    /// What the function's stream mappings (DynamoDB and Kinesis) did (zeros without one).
    pub stream: StreamStats,
}

impl Stats {
    /// Invocations after which the whole batch was left on the queue (stream mappings: was
    /// retried, bisected or given up on as a whole).
    pub fn whole_batch_failures(&self) -> u64 {
        self.invocation_errors + self.timeouts + self.invalid_responses
    }
}

/// What a function's stream mappings (DynamoDB and Kinesis) did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StreamStats {
    /// Shards found in the streams.
    pub shards: u64,
    /// Records read from the shards (each once).
    pub records_read: u64,
    /// Records no filter pattern matched: consumed without an invocation.
    pub records_filtered: u64,
    /// Records the function processed (its invocation succeeded, or they came before the first
    /// reported failure): each once.
    pub records_processed: u64,
    /// Retries: invocations of records that failed before (a whole batch, or the records from
    /// the first reported failure on).
    pub retries: u64,
    /// Failed batches split in two (`BisectBatchOnFunctionError`).
    pub bisections: u64,
    /// Batches given up on (retries used up, or records too old), each as one invocation record
    /// to the on-failure destination or discarded without one.
    pub batches_given_up: u64,
    /// Records in those batches.
    pub records_given_up: u64,
    /// Invocation records sent to the on-failure queue.
    pub sent_to_on_failure: u64,
    /// Invocation records that could not be sent to the on-failure queue (lost, as in Lambda
    /// after its own retries).
    pub on_failure_errors: u64,
}

/// The live counters behind [`Stats`].
#[derive(Default)]
pub(super) struct Counters {
    pub(super) batches: AtomicU64,
    pub(super) records_received: AtomicU64,
    pub(super) records_deleted: AtomicU64,
    pub(super) records_reported_failed: AtomicU64,
    pub(super) invocation_errors: AtomicU64,
    pub(super) timeouts: AtomicU64,
    pub(super) invalid_responses: AtomicU64,
    pub(super) receive_errors: AtomicU64,
    pub(super) delete_errors: AtomicU64,
    pub(super) shards: AtomicU64,
    pub(super) records_read: AtomicU64,
    pub(super) records_filtered: AtomicU64,
    pub(super) records_processed: AtomicU64,
    pub(super) retries: AtomicU64,
    pub(super) bisections: AtomicU64,
    pub(super) batches_given_up: AtomicU64,
    pub(super) records_given_up: AtomicU64,
    pub(super) sent_to_on_failure: AtomicU64,
    pub(super) on_failure_errors: AtomicU64,
}

impl Counters {
    pub(super) fn add(counter: &AtomicU64, n: usize) {
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub(super) fn snapshot(&self) -> Stats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            batches: get(&self.batches),
            records_received: get(&self.records_received),
            records_deleted: get(&self.records_deleted),
            records_reported_failed: get(&self.records_reported_failed),
            invocation_errors: get(&self.invocation_errors),
            timeouts: get(&self.timeouts),
            invalid_responses: get(&self.invalid_responses),
            receive_errors: get(&self.receive_errors),
            delete_errors: get(&self.delete_errors),
            stream: StreamStats {
                shards: get(&self.shards),
                records_read: get(&self.records_read),
                records_filtered: get(&self.records_filtered),
                records_processed: get(&self.records_processed),
                retries: get(&self.retries),
                bisections: get(&self.bisections),
                batches_given_up: get(&self.batches_given_up),
                records_given_up: get(&self.records_given_up),
                sent_to_on_failure: get(&self.sent_to_on_failure),
                on_failure_errors: get(&self.on_failure_errors),
            },
        }
    }
}
