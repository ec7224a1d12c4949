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
//! - [`TemplateRoles`] reads the template's `AWS::IAM::Role`s (inline policies, and the
//!   template's `AWS::IAM::ManagedPolicy`/`Policy` resources attached to them; a managed policy
//!   attached to nothing, an operators' tool's, is read on its own) with their
//!   resources resolved from an [`Environment`] (the ARNs of the provisioned resources), which
//!   role each function runs with, and what Lambda does with that role for it
//!   ([`Requirement`]s: its event source mappings' reads and on-failure sends, the platform's log
//!   writes). [`Role::evaluate`] decides a request: an explicit deny wins over an allow, which
//!   wins over the implicit deny.
//! - [`reference`](mod@reference) holds what AWS documents: each action's resource type (Service Authorization
//!   Reference), hence the narrowest resource a grant can name, and the actions of each event
//!   source.
//! - [`TemplateRoles::conformance`] puts them together for one function in a [`Report`]: the
//!   requests not granted, the grants never exercised, and the statements granting more than
//!   needed ([`Finding`]s: wildcard actions, resources broader than the requests, missing
//!   `dynamodb:LeadingKeys` conditions). [`conformance`] is the same for a bare role and calls.
//! - A [`Recording`] keeps the distinct calls of a run in the repository, for checks of the
//!   template without an endpoint.
//! - [`ResourceAccess`] holds the template's resource policies ([`ResourcePolicy`]: each queue
//!   policy, key policy and role trust policy, evaluated for a [`Caller`]), and
//!   [`TemplateRoles::resource_policy_findings`] checks them caller by caller against what the
//!   roles need: a queue's senders are exactly the principals granted the send, a key's users
//!   the services publishing to the topic it encrypts, a role's only truster Lambda
//!   ([`AccessFinding`]s).
//!
//! ```
//! use iam_conformance::{CallRecorder, Environment, TemplateRoles};
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
//! let report = roles.conformance("payments-api", &recorder.take()).unwrap();
//! assert_eq!(report.denied.len(), 1, "{report}"); // the key is not payments-api's
//! println!("{}\n{}", iam_conformance::Report::markdown_header(), report.markdown_row());
//! ```

mod actions;
mod call;
mod cfn;
mod conformance;
mod error;
mod findings;
mod fixture;
mod parse;
mod policy;
mod record;
pub mod reference;
mod requirement;
mod resource_access;
mod resource_policy;
mod roles;
mod wildcard;

pub use actions::{ActionError, Authorization, authorizations};
pub use call::{Call, ItemKind, LeadingKeys, RecorderConfig, Resource, Service};
pub use cfn::Environment;
pub use conformance::{Denial, Report, conformance};
pub use error::PolicyError;
pub use findings::{Finding, FindingKind, LEADING_KEYS_TABLES};
pub use fixture::Recording;
pub use parse::{RecordError, parse_call};
pub use policy::{
    Condition, ConditionOperator, Decision, Effect, Grant, Role, Statement, StatementRef, evaluate,
};
pub use record::CallRecorder;
pub use reference::{ResourceType, names_no_resource, narrowest, resource_types};
pub use requirement::{Requirement, Requirer};
pub use resource_access::{AccessFinding, OutsidePrincipal, QueueTarget, ResourceAccess};
pub use resource_policy::{
    Attachment, Caller, Principal, PrincipalCondition, PrincipalOperator, ResourceDecision,
    ResourcePolicy, ResourceStatement,
};
pub use roles::{FunctionRole, TableKey, TemplateRoles};
