//! The functions' logs as `make up` streams them: one JSON object per line (what the functions
//! write in Lambda), with the name of the function that wrote it in front, as `sam local` and
//! `docker compose logs` show theirs:
//!
//! ```text
//! payment-processor  | {"timestamp":"…","level":"INFO","message":"charged","payment_id":"…","span":{"function":"payment-processor","request_id":"…","name":"lambda"}}
//! local-aws          | {"timestamp":"…","level":"INFO","message":"gateway listening","addr":"127.0.0.1:3000"}
//! ```
//!
//! Every function runs in this one process, so the name comes from the span each invocation runs
//! in ([`function_span`]); lines written outside any invocation (the local gateway, the event
//! source mappings) carry [`HARNESS`].

use std::fmt;

use tracing::field::{Field, Visit};
use tracing::{Event, Span, Subscriber, span};
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// The name of the span an invocation runs in.
pub const SPAN: &str = "lambda";

/// The prefix of lines written outside any function.
pub const HARNESS: &str = "local-aws";

/// The width of the name column: the longest function name, `payments-publisher`.
const WIDTH: usize = 18;

/// The span one invocation of `function` runs in (with the invocation's request id, when it has
/// one). Without [`init`], spans cost nothing and print nothing.
pub fn function_span(function: &'static str, request_id: Option<&str>) -> Span {
    tracing::info_span!(SPAN, function, request_id)
}

/// Installs the global subscriber: JSON lines, prefixed by the function's name, filtered by
/// `RUST_LOG` (default `info`). Fails if a subscriber is installed already.
pub fn init() -> Result<(), tracing_subscriber::util::TryInitError> {
    let format = tracing_subscriber::fmt::format()
        .json()
        .flatten_event(true)
        .with_current_span(true)
        .with_span_list(false);
    tracing_subscriber::registry()
        .with(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")))
        .with(FunctionNames)
        .with(
            tracing_subscriber::fmt::layer()
                .fmt_fields(JsonFields::new())
                .event_format(Prefixed(format)),
        )
        .try_init()
}

/// The function a span belongs to, kept in the span's extensions.
struct FunctionName(String);

/// Records the `function` field of every [`SPAN`] span.
struct FunctionNames;

impl<S> Layer<S> for FunctionNames
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        if attrs.metadata().name() != SPAN {
            return;
        }
        let mut visitor = FunctionField(None);
        attrs.record(&mut visitor);
        if let (Some(name), Some(span)) = (visitor.0, ctx.span(id)) {
            span.extensions_mut().insert(FunctionName(name));
        }
    }
}

struct FunctionField(Option<String>);

impl Visit for FunctionField {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "function" {
            self.0 = Some(value.to_owned());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "function" {
            self.0 = Some(format!("{value:?}").trim_matches('"').to_owned());
        }
    }
}

/// Writes the function's name (or [`HARNESS`]) and ` | ` before what the inner format writes.
struct Prefixed<F>(F);

impl<S, N, F> FormatEvent<S, N> for Prefixed<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let name = ctx.event_scope().and_then(|scope| {
            scope.from_root().find_map(|span| {
                span.extensions()
                    .get::<FunctionName>()
                    .map(|name| name.0.clone())
            })
        });
        write!(writer, "{:<WIDTH$} | ", name.as_deref().unwrap_or(HARNESS))?;
        self.0.format_event(ctx, writer, event)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_carry_the_function_in_front_of_their_json() {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::registry().with(FunctionNames).with(
            tracing_subscriber::fmt::layer()
                .fmt_fields(JsonFields::new())
                .event_format(Prefixed(
                    tracing_subscriber::fmt::format()
                        .json()
                        .flatten_event(true)
                        .with_current_span(true)
                        .with_span_list(false),
                ))
                .with_writer(move || writer.clone()),
        );
        tracing::subscriber::with_default(subscriber, || {
            function_span("receipt-sender", Some("r-1")).in_scope(|| {
                tracing::info!(payment_id = "p-1", "receipt written");
            });
            tracing::warn!("outside any function");
        });
        let out = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");

        let (name, json) = lines[0].split_once(" | ").unwrap();
        assert_eq!(name.trim_end(), "receipt-sender");
        assert_eq!(name.len(), WIDTH);
        let json: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(json["message"], "receipt written");
        assert_eq!(json["payment_id"], "p-1");
        assert_eq!(json["span"]["request_id"], "r-1");

        let (name, json) = lines[1].split_once(" | ").unwrap();
        assert_eq!(name.trim_end(), HARNESS);
        let json: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(json["level"], "WARN");
    }
}
