//! The reconciler's settings: the same environment variables in Lambda and in the one-shot
//! mode (where each is also a command-line option).

use std::time::Duration;

use payments_config::{ConfigError, Settings};

/// How long a payment may stay `accepted` before it is sent again: longer than the relay and
/// the processor normally take, with their retries.
pub const DEFAULT_RESEND_AFTER: Duration = Duration::from_secs(5 * 60);

/// How long a payment may stay `accepted` before it counts as stuck (and alarms).
pub const DEFAULT_STUCK_AFTER: Duration = Duration::from_secs(60 * 60);

/// How far behind the present the audit stays: a charge is audited once it is older than this,
/// so that the charged index (eventually consistent) and charges still committing with an
/// earlier `chargedAt` are not skipped.
pub const DEFAULT_AUDIT_LAG: Duration = Duration::from_secs(2 * 60);

/// The reconciler's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `PAYMENTS_TABLE`.
    pub payments_table: String,
    /// `LEDGER_TABLE`.
    pub ledger_table: String,
    /// `BALANCES_TABLE`.
    pub balances_table: String,
    /// `ACCOUNTS_TABLE`: also holds the audit's cursors.
    pub accounts_table: String,
    /// `PAYMENTS_QUEUE_URL`: where payments are sent again.
    pub payments_queue_url: String,
    /// `DEAD_LETTER_QUEUE_URL`: the payments dead-letter queue, looked into (never emptied).
    pub dead_letter_queue_url: String,
    /// `RESEND_AFTER_SECONDS` (default 300).
    pub resend_after: Duration,
    /// `STUCK_AFTER_SECONDS` (default 3600).
    pub stuck_after: Duration,
    /// `AUDIT_LAG_SECONDS` (default 120).
    pub audit_lag: Duration,
    /// `MAX_PAYMENTS_PER_RUN` (default 1000): payments looked at per run, in each part; the
    /// rest wait for the next run.
    pub max_per_run: usize,
}

impl Config {
    /// Reads the settings.
    pub fn from_settings(settings: &impl Settings) -> Result<Self, ConfigError> {
        let max_per_run =
            match settings.get("MAX_PAYMENTS_PER_RUN") {
                None => 1000,
                Some(v) => v.parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| {
                    ConfigError::Invalid {
                        name: "MAX_PAYMENTS_PER_RUN",
                        reason: format!("`{v}` is not a positive number"),
                    }
                })?,
            };
        Ok(Self {
            payments_table: settings.required("PAYMENTS_TABLE")?,
            ledger_table: settings.required("LEDGER_TABLE")?,
            balances_table: settings.required("BALANCES_TABLE")?,
            accounts_table: settings.required("ACCOUNTS_TABLE")?,
            payments_queue_url: settings.required("PAYMENTS_QUEUE_URL")?,
            dead_letter_queue_url: settings.required("DEAD_LETTER_QUEUE_URL")?,
            resend_after: settings.seconds("RESEND_AFTER_SECONDS", DEFAULT_RESEND_AFTER)?,
            stuck_after: settings.seconds("STUCK_AFTER_SECONDS", DEFAULT_STUCK_AFTER)?,
            audit_lag: settings.seconds("AUDIT_LAG_SECONDS", DEFAULT_AUDIT_LAG)?,
            max_per_run,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn settings(extra: &[(&str, &str)]) -> HashMap<String, String> {
        let mut s: HashMap<String, String> = [
            ("PAYMENTS_TABLE", "p"),
            ("LEDGER_TABLE", "l"),
            ("BALANCES_TABLE", "b"),
            ("ACCOUNTS_TABLE", "a"),
            ("PAYMENTS_QUEUE_URL", "q"),
            ("DEAD_LETTER_QUEUE_URL", "d"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        for (k, v) in extra {
            s.insert((*k).to_owned(), (*v).to_owned());
        }
        s
    }

    #[test]
    fn defaults_and_overrides() {
        let c = Config::from_settings(&settings(&[])).unwrap();
        assert_eq!(c.resend_after, DEFAULT_RESEND_AFTER);
        assert_eq!(c.max_per_run, 1000);
        let c = Config::from_settings(&settings(&[
            ("RESEND_AFTER_SECONDS", "0"),
            ("MAX_PAYMENTS_PER_RUN", "7"),
        ]))
        .unwrap();
        assert_eq!(c.resend_after, Duration::ZERO);
        assert_eq!(c.max_per_run, 7);
    }

    #[test]
    fn a_missing_or_bad_setting_is_named() {
        let mut s = settings(&[]);
        s.remove("DEAD_LETTER_QUEUE_URL");
        assert_eq!(
            Config::from_settings(&s),
            Err(ConfigError::Missing("DEAD_LETTER_QUEUE_URL"))
        );
        let err = Config::from_settings(&settings(&[("MAX_PAYMENTS_PER_RUN", "0")])).unwrap_err();
        assert!(err.to_string().contains("MAX_PAYMENTS_PER_RUN"), "{err}");
    }
}
