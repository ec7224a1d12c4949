//! The log lines (`tracing` events) a piece of code emits, captured on the current thread.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// One captured event: its level, and its message followed by its other fields (`name=value`).
#[derive(Debug, Clone)]
pub struct Line {
    pub level: Level,
    pub text: String,
}

/// Captures every event of the current thread while its guard lives.
#[derive(Debug, Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<Line>>>);

impl Logs {
    /// Starts capturing on this thread (a `#[tokio::test]` runs on one), until the guard drops.
    pub fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        let logs = Self::default();
        let guard = tracing::subscriber::set_default(logs.clone());
        (logs, guard)
    }

    /// The lines of `level` so far.
    pub fn at(&self, level: Level) -> Vec<String> {
        let lines = self.0.lock().unwrap();
        lines
            .iter()
            .filter(|l| l.level == level)
            .map(|l| l.text.clone())
            .collect()
    }

    /// Every line so far, whatever its level.
    pub fn all(&self) -> Vec<Line> {
        self.0.lock().unwrap().clone()
    }
}

struct Text(String);

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
}

impl Subscriber for Logs {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut text = Text(String::new());
        event.record(&mut text);
        self.0.lock().unwrap().push(Line {
            level: *event.metadata().level(),
            text: text.0,
        });
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}
