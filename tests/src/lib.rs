//! End-to-end runs of the payments pipeline against a local AWS endpoint (moto, or LocalStack):
//! the demo (the project's main job, `make demo`) and the end-to-end tests run the same code at
//! different sizes.
//!
//! A run provisions the template's queues and tables under a unique prefix, runs the four
//! functions (payments-api behind a local HTTP gateway, payments-publisher on the payments
//! table's stream, the consumers behind a local SQS event source mapping), each as its own
//! process under a Lambda Runtime API ([`processes`]) or, for tests that reach into them, in this
//! process; sends payments by real HTTP with client retries, concurrent duplicates, reused keys,
//! invalid requests and injected processing failures, drains the pipeline, and checks the stored
//! data.

pub mod checks;
pub mod faults;
pub mod http;
pub mod invariants;
pub mod logs;
pub mod outside;
pub mod own_server;
pub mod pipeline;
pub mod processes;
pub mod report;
pub mod sqs_records;
pub mod stack;
pub mod ticking;
pub mod up;
pub mod workload;

pub use own_server::OwnServer;
pub use pipeline::{Functions, Options, Pipeline};
pub use report::{Report, run};
pub use stack::Stack;
pub use workload::Workload;
