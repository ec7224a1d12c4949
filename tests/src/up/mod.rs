//! `make up`: the whole stack running locally until Ctrl-C, for a user's own HTTP client, SQS
//! producer, AWS CLI or SDK.
//!
//! [`Up::start`] provisions template.yaml's queues and tables on the endpoint in
//! `AWS_ENDPOINT_URL` under their own names (the template's parameter defaults), and runs every
//! function: payments-api behind the local HTTP API on a fixed port, payments-publisher on the
//! payments table's stream, payment-processor and receipt-sender on their queues. The functions run
//! in this process ([`Functions::InProcess`]) or each as its own process, its binary from one
//! workspace build, under a Lambda Runtime API (`cargo lambda watch --only-lambda-apis`,
//! [`Functions::Processes`]). [`Up::banner`] is what to export in another terminal; [`Up::stop`]
//! stops everything it started.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use local_aws::provision::Provisioned;
use local_aws::template::{Naming, Template};

pub use crate::pipeline::Functions;
pub use crate::processes::ProcessOptions;

use crate::http::TokenIssuer;
use crate::pipeline::{Options, Pipeline};
use crate::stack::BoxError;

/// The line `make up` prints once everything is running; the text after it is the API's URL.
pub const READY: &str = "ready: API on ";

/// The caller the printed token is for (its `sub`, and so its account).
pub const CALLER: &str = "alice";

/// How long the printed token is valid.
pub const TOKEN_TTL: Duration = Duration::from_secs(12 * 3600);

/// How to start the stack.
#[derive(Debug, Clone)]
pub struct UpOptions {
    /// Where the API listens.
    pub api_addr: SocketAddr,
    /// How the functions run.
    pub functions: Functions,
    /// `FailPayments` (the failure switch; empty: off).
    pub fail_payments: String,
}

impl Default for UpOptions {
    fn default() -> Self {
        Self {
            api_addr: SocketAddr::from(([127, 0, 0, 1], 3000)),
            functions: Functions::InProcess,
            fail_payments: String::new(),
        }
    }
}

/// The running stack.
pub struct Up {
    pipeline: Pipeline,
    endpoint: String,
    issuer: local_aws::gateway::IssuerServer,
}

impl Up {
    /// Provisions the template on the endpoint in `AWS_ENDPOINT_URL` and starts every function.
    pub async fn start(options: UpOptions) -> Result<Self, BoxError> {
        let endpoint =
            std::env::var(local_aws::ENDPOINT_VAR).map_err(|_| local_aws::EndpointError::NotSet)?;
        let pipeline = Pipeline::start(Options {
            naming: Naming::none(),
            fail_payments: options.fail_payments,
            stage: crate::stack::DEV_STAGE.to_owned(),
            api_addr: options.api_addr,
            functions: options.functions,
            // What a client of the deployed API gets under load: 429s and throttled POSTs.
            aws_limits: true,
            ..Options::default()
        })
        .await?;
        // The local issuer whose keys the gateway trusts, for tokens of other callers.
        let tokens = TokenIssuer::from_template(&pipeline.template);
        let issuer = local_aws::gateway::serve_issuer(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            tokens.issuer,
            tokens.audience,
        )
        .await?;
        Ok(Self {
            pipeline,
            endpoint,
            issuer,
        })
    }

    fn template(&self) -> &Template {
        &self.pipeline.template
    }

    fn resources(&self) -> &Provisioned {
        &self.pipeline.resources
    }

    /// The API's base URL.
    pub fn api_url(&self) -> String {
        self.pipeline.api_url()
    }

    /// The variables another terminal exports to reach the stack: the endpoint and credentials
    /// for `aws --endpoint-url`, boto3 or any SDK, the API's URL, a token the local API accepts,
    /// and each queue's URL and table's name.
    pub fn exports(&self) -> BTreeMap<String, String> {
        let mut out = exports(
            &self.endpoint,
            &self.api_url(),
            self.template(),
            self.resources(),
        );
        out.insert("ISSUER_URL".into(), self.issuer.url());
        out
    }

    /// What `make up` prints on start: the exports (and the file they were written to, if
    /// any), example commands, and the [`READY`] line last.
    pub fn banner(&self, env_file: Option<&std::path::Path>) -> String {
        banner(
            &self.exports(),
            self.pipeline.observed().is_some(),
            env_file,
        )
    }

    /// Stops the functions and the API (the invocations in progress finish first), and, in watch
    /// mode, the functions' processes and the Runtime API.
    pub async fn stop(self) {
        self.pipeline.stop_unchecked().await;
    }
}

/// `PaymentsQueue` → `PAYMENTS_QUEUE`.
pub(crate) fn env_name(logical_id: &str) -> String {
    let mut out = String::new();
    for (i, c) in logical_id.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

fn exports(
    endpoint: &str,
    api_url: &str,
    template: &Template,
    resources: &Provisioned,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    out.insert("AWS_ENDPOINT_URL".into(), endpoint.to_owned());
    out.insert("AWS_REGION".into(), resources.region.clone());
    out.insert("AWS_DEFAULT_REGION".into(), resources.region.clone());
    out.insert("AWS_ACCESS_KEY_ID".into(), "test".into());
    out.insert("AWS_SECRET_ACCESS_KEY".into(), "test".into());
    out.insert("API_URL".into(), api_url.to_owned());
    // A token that may charge and read (both scopes).
    let issuer = TokenIssuer::from_template(template);
    out.insert(
        "API_TOKEN".into(),
        issuer.token(CALLER, &issuer.scope, TOKEN_TTL),
    );
    for (id, queue) in &resources.queues {
        out.insert(format!("{}_URL", env_name(id)), queue.url.clone());
    }
    for (id, table) in &resources.tables {
        out.insert(env_name(id), table.name.clone());
    }
    out
}

fn banner(
    exports: &BTreeMap<String, String>,
    watch: bool,
    env_file: Option<&std::path::Path>,
) -> String {
    let mut out = String::new();
    let mode = if watch {
        "each function as its own process (its binary from the workspace build) under a Lambda Runtime API: restart `make up WATCH=1` after an edit"
    } else {
        "the functions run in this process"
    };
    let _ = writeln!(out, "payments stack up ({mode})");
    let _ = writeln!(
        out,
        "  payments-api        HTTP API on {}: POST /payments  (JWT authorizer: signatures checked \
         against the local issuer's keys)",
        exports["API_URL"]
    );
    let _ = writeln!(
        out,
        "  payments-reader     the same API: GET /payments/{{paymentId}}, where clients wait"
    );
    let _ = writeln!(
        out,
        "  payments-publisher  on the payments table's stream  -> {}",
        exports.get("PAYMENTS_QUEUE_URL").map_or("", String::as_str)
    );
    let _ = writeln!(
        out,
        "  payment-processor   on {}",
        exports.get("PAYMENTS_QUEUE_URL").map_or("", String::as_str)
    );
    let _ = writeln!(
        out,
        "  receipt-sender      on {}",
        exports.get("RECEIPTS_QUEUE_URL").map_or("", String::as_str)
    );
    let _ = writeln!(
        out,
        "\n# In another terminal (the AWS CLI, boto3 and the SDKs read these; API_TOKEN is a local \
         token for the caller `{CALLER}`, valid {} hours):",
        TOKEN_TTL.as_secs() / 3600
    );
    out.push_str(&export_lines(exports));
    if let Some(file) = env_file {
        let _ = writeln!(out, "# (or: source {})", file.display());
    }
    let _ = writeln!(
        out,
        "\n# Then, for example:\n\
         curl -sS -X POST \"$API_URL/payments\" -H \"Authorization: Bearer $API_TOKEN\" \\\n  \
         -H 'Content-Type: application/json' -H 'Idempotency-Key: coffee-1' \\\n  \
         -d '{{\"amountCents\": 1250, \"currency\": \"EUR\", \"description\": \"coffee\"}}'\n\
         # A token for another caller (its `sub`, and so its account), from the local issuer:\n\
         BOB_TOKEN=$(curl -sS \"$ISSUER_URL/token?sub=bob&scope=payments/write%20payments/read&ttl=3600\")\n\
         aws dynamodb scan --table-name \"$LEDGER_TABLE\"\n\
         aws sqs send-message --queue-url \"$RECEIPTS_QUEUE_URL\" --message-body 'not a receipt'\n\
         # (no aws CLI? the project's .venv/bin/python has boto3, which reads the same variables)\n"
    );
    let _ = writeln!(
        out,
        "{READY}{}  (Ctrl-C stops everything)",
        exports["API_URL"]
    );
    out
}

/// `export NAME=value` lines, one per variable.
pub fn export_lines(exports: &BTreeMap<String, String>) -> String {
    exports
        .iter()
        .map(|(name, value)| format!("export {name}={}\n", shell_quote(value)))
        .collect()
}

/// `value` as one shell word.
fn shell_quote(value: &str) -> String {
    if value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_./:=@,".contains(c))
    {
        value.to_owned()
    } else {
        format!("'{}'", value.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logical_ids_become_variable_names() {
        assert_eq!(env_name("PaymentsQueue"), "PAYMENTS_QUEUE");
        assert_eq!(
            env_name("PaymentsOutboxDeadLetterQueue"),
            "PAYMENTS_OUTBOX_DEAD_LETTER_QUEUE"
        );
        assert_eq!(env_name("LedgerTable"), "LEDGER_TABLE");
    }

    #[test]
    fn values_are_quoted_for_the_shell_when_needed() {
        assert_eq!(
            shell_quote("http://127.0.0.1:4566"),
            "http://127.0.0.1:4566"
        );
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn the_banner_ends_with_the_ready_line_and_exports_everything() {
        let mut exports = BTreeMap::new();
        exports.insert("API_URL".to_owned(), "http://127.0.0.1:3000".to_owned());
        exports.insert("LEDGER_TABLE".to_owned(), "payments-ledger".to_owned());
        let text = banner(&exports, false, None);
        let last = text.lines().last().unwrap();
        assert!(
            last.starts_with(&format!("{READY}http://127.0.0.1:3000")),
            "{last}"
        );
        assert!(
            text.contains("export LEDGER_TABLE=payments-ledger\n"),
            "{text}"
        );
        assert!(
            text.contains("export API_URL=http://127.0.0.1:3000\n"),
            "{text}"
        );
        // How to mint a token for another caller.
        assert!(
            text.contains("\"$ISSUER_URL/token?sub=bob&scope="),
            "{text}"
        );
    }
}
