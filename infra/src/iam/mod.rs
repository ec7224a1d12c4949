//! IAM, proven both ways: every AWS request a function makes is granted by its execution role,
//! and everything its role grants is used. moto enforces no IAM, so the harness checks it here.
//!
//! The pieces, in the order a conformance test uses them:
//!
//! - [`CallRecorder`] (an SDK interceptor for the DynamoDB, DynamoDB Streams and SQS clients)
//!   records each request as a [`Call`]: the operation, and the tables (with the partition key
//!   values used), streams and queues it names.
//! - [`authorizations`] turns a call into the IAM requests AWS evaluates for it: the action, the
//!   resource ARN and the `dynamodb:LeadingKeys` of the request ([`Authorization`]).
//!   `TransactWriteItems` is authorized item by item, `SendMessageBatch` as `sqs:SendMessage`, and
//!   so on (the sources are in its documentation).
//! - [`TemplateRoles`] reads the template's `AWS::IAM::Role`s (inline policies) and its
//!   `AWS::IAM::ManagedPolicy`s attached to nothing (the operators' tools' policies), with their
//!   resources resolved from an [`Environment`] (the ARNs of the provisioned resources), and
//!   which role each function runs with. [`Role::evaluate`] decides a request: an explicit deny
//!   wins over an allow, which wins over the implicit deny.
//! - [`conformance`] puts them together for one function (or one tool and its managed policy):
//!   the calls not granted, and the grants never exercised (the Lambda platform's own log
//!   actions listed apart) in a [`Report`].
//!
//! ```
//! use local_aws::iam::{CallRecorder, Environment, TemplateRoles, conformance};
//!
//! let env = Environment::new("us-east-1", "123456789012").attribute(
//!     "PaymentsTable",
//!     "StreamArn",
//!     "arn:aws:dynamodb:us-east-1:123456789012:table/payments/stream/2024-01-01T00:00:00.000",
//! );
//! let roles = TemplateRoles::load_project(&env).unwrap();
//! let recorder = CallRecorder::new(roles.recorder_config(&env));
//! // Attached to the function's clients, the recorder sees this request:
//! recorder.record(
//!     Some("DynamoDB_20120810.UpdateItem"),
//!     Some(br#"{"TableName":"payments-idempotency","Key":{"id":{"S":"other#x"}}}"#),
//! );
//! let report = conformance("payments-api", &recorder.take(), roles.for_function("payments-api").unwrap());
//! assert_eq!(report.denied.len(), 1, "{report}"); // the key is not payments-api's
//! println!("{}\n{}", local_aws::iam::Report::markdown_header(), report.markdown_row());
//! ```

mod actions;
mod call;
mod cfn;
mod conformance;
mod error;
mod parse;
mod policy;
mod record;
mod roles;
mod wildcard;

pub use actions::{ActionError, Authorization, authorizations};
pub use call::{Call, ItemKind, LeadingKeys, RecorderConfig, Resource, Service};
pub use cfn::Environment;
pub use conformance::{Denial, PLATFORM_ACTIONS, Report, conformance};
pub use error::PolicyError;
pub use parse::{RecordError, parse_call};
pub use policy::{
    Condition, ConditionOperator, Decision, Effect, Grant, Role, Statement, StatementRef, evaluate,
};
pub use record::CallRecorder;
pub use roles::{FunctionRole, TableKey, TemplateRoles};
