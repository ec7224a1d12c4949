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
//! - [`TemplateRoles`] reads the template's `AWS::IAM::Role`s (inline policies) with their
//!   resources resolved from an [`Environment`] (the ARNs of the provisioned resources), and
//!   which role each function runs with. [`Role::evaluate`] decides a request: an explicit deny
//!   wins over an allow, which wins over the implicit deny.
//! - [`conformance`] puts them together for one function: the calls not granted, and the grants
//!   never exercised (the Lambda platform's own log actions listed apart) in a [`Report`].
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
mod cfn;
mod conformance;
mod parse;
mod policy;
mod record;
mod roles;

pub use actions::{ActionError, Authorization, authorizations};
pub use cfn::Environment;
pub use conformance::{Denial, PLATFORM_ACTIONS, Report, conformance};
pub use parse::{RecordError, parse_call};
pub use policy::{
    Condition, ConditionOperator, Decision, Effect, Grant, Role, Statement, StatementRef, evaluate,
};
pub use record::{Call, CallRecorder, ItemKind, LeadingKeys, RecorderConfig, Resource, Service};
pub use roles::{FunctionRole, PolicyError, TableKey, TemplateRoles};

/// Whether `text` matches `pattern`, where `*` matches any run of characters (`:` and `/`
/// included) and `?` exactly one, as IAM matches actions, resources and `StringLike` values.
pub(crate) fn wildcard_match(pattern: &str, text: &str, ignore_case: bool) -> bool {
    let fold = |s: &str| -> Vec<char> {
        if ignore_case {
            s.chars().flat_map(char::to_lowercase).collect()
        } else {
            s.chars().collect()
        }
    };
    let (p, t) = (fold(pattern), fold(text));
    let (mut pi, mut ti) = (0, 0);
    // The last `*` seen and the text position it was tried at, to backtrack to.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::wildcard_match;

    #[test]
    fn wildcards() {
        assert!(wildcard_match("dynamodb:Get*", "dynamodb:GetItem", true));
        assert!(wildcard_match("DynamoDB:get*", "dynamodb:GetItem", true));
        assert!(!wildcard_match("DynamoDB:get*", "dynamodb:GetItem", false));
        assert!(wildcard_match("*", "", false));
        assert!(wildcard_match("a*b*c", "a-x-b-y-c", false));
        assert!(!wildcard_match("a*b*c", "a-x-b-y-d", false));
        assert!(wildcard_match(
            "table/t/index/*",
            "table/t/index/by-date",
            false
        ));
        assert!(!wildcard_match("table/t/index/*", "table/t", false));
        assert!(wildcard_match("payments-api#*", "payments-api#", false));
        assert!(!wildcard_match("payments-api#*", "other#x", false));
        assert!(wildcard_match("a?c", "abc", false));
        assert!(!wildcard_match("a?c", "ac", false));
        assert!(wildcard_match("**x", "yyx", false));
    }
}
