//! The clients a function under exploration is given: its DynamoDB and SQS clients, each through
//! a fault injector of its own, without the SDK's retries (each fault reaches the function, as
//! when the SDK's retries are used up, and request `n` is the same request in every run), the
//! injectors sharing one crash signal and the test's clock (which ends their outages).

use std::sync::Arc;

use lambda_idempotency::test_util::fault::{Crash, Fault, Faults};
use lambda_idempotency::time::Clock;

/// The client a fault is armed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    DynamoDb,
    Sqs,
}

/// A fault armed at request `n` of a client.
pub type Armed = (Client, u32, Fault);

/// The faulty clients and their injectors.
pub struct FaultyClients {
    pub crash: Arc<Crash>,
    pub dynamodb_faults: Faults,
    pub sqs_faults: Faults,
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub sqs: aws_sdk_sqs::Client,
}

impl FaultyClients {
    /// Clients of `sdk`'s endpoint, their outages timed on `clock`; nothing armed.
    pub fn new(sdk: &aws_config::SdkConfig, clock: Arc<dyn Clock>) -> Self {
        let crash = Arc::new(Crash::default());
        let dynamodb_faults = Faults::new("dynamodb", crash.clone(), clock.clone());
        let sqs_faults = Faults::new("sqs", crash.clone(), clock);
        let dynamodb = crate::faulty_dynamodb(sdk, &dynamodb_faults);
        let sqs = crate::faulty_sqs(sdk, &sqs_faults);
        Self {
            crash,
            dynamodb_faults,
            sqs_faults,
            dynamodb,
            sqs,
        }
    }

    /// The injector of `client`.
    pub fn faults(&self, client: Client) -> &Faults {
        match client {
            Client::DynamoDb => &self.dynamodb_faults,
            Client::Sqs => &self.sqs_faults,
        }
    }

    /// Nothing armed, requests counted from zero, no crash.
    pub fn disarm(&self) {
        self.dynamodb_faults.disarm();
        self.sqs_faults.disarm();
        self.crash.reset();
    }

    /// [`disarm`](Self::disarm), then `fault` armed (none: a clean run).
    pub fn arm(&self, fault: Option<Armed>) {
        self.disarm();
        if let Some((client, n, fault)) = fault {
            self.faults(client).arm(n, fault);
        }
    }

    /// Whether `fault` (none: nothing to fire) fired.
    pub fn fired(&self, fault: Option<Armed>) -> bool {
        fault.is_none_or(|(client, ..)| self.faults(client).fired())
    }

    /// The requests since the arming: DynamoDB's, then SQS's.
    pub fn requests(&self) -> [u32; 2] {
        [self.dynamodb_faults.sent(), self.sqs_faults.sent()]
    }

    /// The operations since the arming, in short.
    pub fn log(&self) -> String {
        format!(
            "dynamodb: {}; sqs: {}",
            self.dynamodb_faults.runs(),
            self.sqs_faults.runs()
        )
    }

    /// The cases of an exploration whose clean run made `operations` (DynamoDB's, SQS's, in
    /// order), one per distinct step and each of `faults`: request `n` is explored when its
    /// operation after the one before it (the first after none) was not seen earlier in the
    /// run. A function that does the same work over several keys (the reconciler's pass over
    /// each shard of the charged index) repeats the requests of its first key, in the same
    /// code with the same state of its own; they are explored at that first key, which keeps
    /// an exploration of 84 requests of 8 shards within a few minutes.
    pub fn planned_steps(operations: &[Vec<String>; 2], faults: &[Fault]) -> Vec<Armed> {
        [Client::DynamoDb, Client::Sqs]
            .into_iter()
            .zip(operations)
            .flat_map(|(client, operations)| {
                let mut seen = std::collections::HashSet::new();
                let steps: Vec<u32> = (0..operations.len())
                    .filter(|&i| {
                        let before = i.checked_sub(1).map(|b| operations[b].as_str());
                        seen.insert((before, operations[i].as_str()))
                    })
                    .map(|i| i as u32 + 1)
                    .collect();
                steps
                    .into_iter()
                    .flat_map(move |n| faults.iter().map(move |f| (client, n, *f)))
            })
            .collect()
    }

    /// Every case of an exploration whose clean run made `requests` (DynamoDB's, SQS's): each
    /// request of each client with each of `faults`.
    pub fn planned(requests: [u32; 2], faults: &[Fault]) -> Vec<Armed> {
        [(Client::DynamoDb, requests[0]), (Client::Sqs, requests[1])]
            .into_iter()
            .flat_map(|(client, count)| {
                (1..=count).flat_map(move |n| faults.iter().map(move |f| (client, n, *f)))
            })
            .collect()
    }
}
