//! The reconciler's settings: the same environment variables in Lambda and in the one-shot
//! mode (where each is also a command-line option).

use std::time::Duration;

use payments_config::{ConfigError, Settings};

/// How long a payment may stay `accepted` before it is sent again: longer than the relay and
/// the processor normally take, with their retries.
pub const DEFAULT_RESEND_AFTER: Duration = Duration::from_secs(5 * 60);

/// How long after a payment was sent again it may be sent again: a message sent again is on
/// `payments.fifo` (behind a backlog, perhaps), and sending it every run would only add copies.
pub const DEFAULT_RESEND_INTERVAL: Duration = Duration::from_secs(30 * 60);

/// At most this many payments sent again per run (`MAX_RESENDS_PER_RUN`): the next run goes on
/// from there.
pub const DEFAULT_MAX_RESENDS_PER_RUN: usize = 100;

/// How long a charged payment may go without its receipt before its `PaymentCharged` is sent
/// again: longer than payment-processor's send and receipt-sender's retries take.
pub const DEFAULT_RECEIPT_AFTER: Duration = Duration::from_secs(5 * 60);

/// How long a payment may stay `accepted` before it counts as stuck (and alarms).
pub const DEFAULT_STUCK_AFTER: Duration = Duration::from_secs(60 * 60);

/// How many times a payment's message that SQS moved to the dead-letter queue (its receive
/// limit: crashes or timeouts, not known to be the message's fault) is sent back to the payments
/// queue before a further move marks the payment failed (`SEND_BACK_LIMIT`). Each round is the
/// queue's `maxReceiveCount` receives of a visibility timeout each when every delivery crashes
/// (41 x 180 s, about two hours, with the template's settings): a crash loop shorter than about
/// `limit` rounds fails nothing, one message that crashes its consumer every time fails after
/// `limit + 1` rounds.
pub const DEFAULT_SEND_BACK_LIMIT: u32 = 3;

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
    /// `RECEIPTS_TABLE`: a charged payment's receipt is looked for there.
    pub receipts_table: String,
    /// `RECEIPTS_QUEUE_URL`: where the `PaymentCharged` of a payment without receipt is sent.
    pub receipts_queue_url: String,
    /// `RESEND_AFTER_SECONDS` (default 300).
    pub resend_after: Duration,
    /// `RESEND_INTERVAL_SECONDS` (default 1800): a payment sent again is not sent again
    /// before this.
    pub resend_interval: Duration,
    /// `MAX_RESENDS_PER_RUN` (default 100).
    pub max_resends_per_run: usize,
    /// `RECEIPT_AFTER_SECONDS` (default 300): how long after its charge a payment without a
    /// receipt gets its `PaymentCharged` sent again.
    pub receipt_after: Duration,
    /// `STUCK_AFTER_SECONDS` (default 3600).
    pub stuck_after: Duration,
    /// `AUDIT_LAG_SECONDS` (default 120).
    pub audit_lag: Duration,
    /// `SEND_BACK_LIMIT` (default [`DEFAULT_SEND_BACK_LIMIT`]): how many times a message moved
    /// by SQS is sent back before a further move fails its payment (0: the first move does).
    pub send_back_limit: u32,
    /// `MAX_PAYMENTS_PER_RUN` (default 1000): payments looked at per run, in each part (and
    /// balances compared by the sweep); the rest wait for the next run. The parts that read the
    /// shards of an index give each shard its share of it, at least one.
    pub max_per_run: usize,
}

impl Config {
    /// Reads the settings.
    pub fn from_settings(settings: &impl Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            payments_table: settings.required("PAYMENTS_TABLE")?,
            ledger_table: settings.required("LEDGER_TABLE")?,
            balances_table: settings.required("BALANCES_TABLE")?,
            accounts_table: settings.required("ACCOUNTS_TABLE")?,
            payments_queue_url: settings.required("PAYMENTS_QUEUE_URL")?,
            dead_letter_queue_url: settings.required("DEAD_LETTER_QUEUE_URL")?,
            receipts_table: settings.required("RECEIPTS_TABLE")?,
            receipts_queue_url: settings.required("RECEIPTS_QUEUE_URL")?,
            resend_after: settings.seconds("RESEND_AFTER_SECONDS", DEFAULT_RESEND_AFTER)?,
            resend_interval: settings
                .seconds("RESEND_INTERVAL_SECONDS", DEFAULT_RESEND_INTERVAL)?,
            max_resends_per_run: positive(
                settings,
                "MAX_RESENDS_PER_RUN",
                DEFAULT_MAX_RESENDS_PER_RUN,
            )?,
            receipt_after: settings.seconds("RECEIPT_AFTER_SECONDS", DEFAULT_RECEIPT_AFTER)?,
            stuck_after: settings.seconds("STUCK_AFTER_SECONDS", DEFAULT_STUCK_AFTER)?,
            audit_lag: settings.seconds("AUDIT_LAG_SECONDS", DEFAULT_AUDIT_LAG)?,
            send_back_limit: count(settings, "SEND_BACK_LIMIT", DEFAULT_SEND_BACK_LIMIT)?,
            max_per_run: positive(settings, "MAX_PAYMENTS_PER_RUN", 1000)?,
        })
    }
}

/// A positive number setting, `default` when unset.
fn positive(
    settings: &impl Settings,
    name: &'static str,
    default: usize,
) -> Result<usize, ConfigError> {
    match settings.get(name) {
        None => Ok(default),
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| ConfigError::Invalid {
                name,
                reason: format!("`{v}` is not a positive number"),
            }),
    }
}

/// A count setting (0 included), `default` when unset.
fn count(settings: &impl Settings, name: &'static str, default: u32) -> Result<u32, ConfigError> {
    match settings.get(name) {
        None => Ok(default),
        Some(v) => v.parse::<u32>().map_err(|_| ConfigError::Invalid {
            name,
            reason: format!("`{v}` is not a count (0 or more)"),
        }),
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
            ("RECEIPTS_TABLE", "r"),
            ("RECEIPTS_QUEUE_URL", "rq"),
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
        assert_eq!(c.resend_interval, DEFAULT_RESEND_INTERVAL);
        assert_eq!(c.max_resends_per_run, DEFAULT_MAX_RESENDS_PER_RUN);
        assert_eq!(c.receipt_after, DEFAULT_RECEIPT_AFTER);
        assert_eq!(c.send_back_limit, DEFAULT_SEND_BACK_LIMIT);
        let c = Config::from_settings(&settings(&[
            ("RESEND_AFTER_SECONDS", "0"),
            ("MAX_PAYMENTS_PER_RUN", "7"),
            ("MAX_RESENDS_PER_RUN", "3"),
            ("RESEND_INTERVAL_SECONDS", "60"),
            ("SEND_BACK_LIMIT", "0"),
        ]))
        .unwrap();
        assert_eq!(c.send_back_limit, 0);
        assert_eq!(c.resend_after, Duration::ZERO);
        assert_eq!(c.max_per_run, 7);
        assert_eq!(c.max_resends_per_run, 3);
        assert_eq!(c.resend_interval, Duration::from_secs(60));
    }

    #[test]
    fn a_missing_or_bad_setting_is_named() {
        let mut s = settings(&[]);
        s.remove("DEAD_LETTER_QUEUE_URL");
        assert_eq!(
            Config::from_settings(&s),
            Err(ConfigError::Missing("DEAD_LETTER_QUEUE_URL"))
        );
        for name in ["MAX_PAYMENTS_PER_RUN", "MAX_RESENDS_PER_RUN"] {
            let err = Config::from_settings(&settings(&[(name, "0")])).unwrap_err();
            assert!(err.to_string().contains(name), "{err}");
        }
        let err = Config::from_settings(&settings(&[("SEND_BACK_LIMIT", "-1")])).unwrap_err();
        assert!(err.to_string().contains("SEND_BACK_LIMIT"), "{err}");
    }
}
