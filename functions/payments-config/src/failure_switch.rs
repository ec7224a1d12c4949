//! The failure switch (`FAIL_PAYMENTS`): payments made to fail on purpose, for tests and demos
//! only, and refused where `STAGE` says production.

use std::time::Duration;

use crate::{ConfigError, Settings};

/// The failure switch, for tests and demos only (off when unset): comma-separated rules
/// `MARKER:N[:ACTION]`. A payment whose description contains `MARKER`, on each of its first `N`
/// attempts (as the idempotency store counts them: a receive blocked behind a failing payment of
/// its group is not an attempt), gets `ACTION`: `fail` (the default: a retryable error), `permanent` (a permanent
/// error: straight to the dead-letter queue), `panic`, or `sleep=MS` (waits, then is charged).
///
/// ```
/// use payments_config::{Fault, FailureSwitch};
/// use std::time::Duration;
///
/// let switch = FailureSwitch::parse("flaky:2,poison:1000,bad:1:permanent,slow:9:sleep=300").unwrap().unwrap();
/// assert_eq!(switch.fault(Some("a flaky payment"), 2), Some(Fault::Fail));
/// assert_eq!(switch.fault(Some("a flaky payment"), 3), None);
/// assert_eq!(switch.fault(Some("poison"), 999), Some(Fault::Fail));
/// assert_eq!(switch.fault(Some("bad"), 1), Some(Fault::Permanent));
/// assert_eq!(switch.fault(Some("slow"), 1), Some(Fault::Sleep(Duration::from_millis(300))));
/// assert_eq!(switch.fault(Some("steady"), 1), None);
/// assert!(FailureSwitch::parse("").unwrap().is_none());
/// assert!(FailureSwitch::parse("nocount").is_err());
/// assert!(FailureSwitch::parse("m:1:explode").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureSwitch {
    rules: Vec<(String, u32, Fault)>,
}

/// What the failure switch does to a payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A retryable error.
    Fail,
    /// A permanent error.
    Permanent,
    /// A panic.
    Panic,
    /// A pause before the charge.
    Sleep(Duration),
}

impl FailureSwitch {
    /// Parses the rules; `None` for an empty value.
    pub fn parse(value: &str) -> Result<Option<Self>, ConfigError> {
        if value.is_empty() {
            return Ok(None);
        }
        let invalid = |reason: String| ConfigError::Invalid {
            name: "FAIL_PAYMENTS",
            reason,
        };
        let mut rules = Vec::new();
        for rule in value.split(',') {
            let mut parts = rule.splitn(3, ':');
            let marker = parts.next().unwrap_or_default();
            let times = parts
                .next()
                .ok_or_else(|| invalid(format!("`{rule}` is not MARKER:N[:ACTION]")))?;
            if marker.is_empty() {
                return Err(invalid(format!("`{rule}`: the marker is empty")));
            }
            let times = times
                .parse()
                .map_err(|e| invalid(format!("`{times}` is not a number of attempts: {e}")))?;
            let fault = match parts.next() {
                None | Some("fail") => Fault::Fail,
                Some("permanent") => Fault::Permanent,
                Some("panic") => Fault::Panic,
                Some(action) => match action.strip_prefix("sleep=").map(str::parse::<u64>) {
                    Some(Ok(ms)) => Fault::Sleep(Duration::from_millis(ms)),
                    _ => {
                        return Err(invalid(format!(
                            "`{action}` is not an action (fail, permanent, panic, sleep=MS)"
                        )));
                    }
                },
            };
            rules.push((marker.to_owned(), times, fault));
        }
        Ok(Some(Self { rules }))
    }

    /// Reads `FAIL_PAYMENTS`, and refuses it ([`ConfigError::FailureSwitchInProduction`]) when
    /// `STAGE` is a production stage ([`is_production`]): the template leaves the switch out
    /// there, and this stops a function that got one anyway (a hand-edited environment) at its
    /// init.
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use payments_config::{ConfigError, FailureSwitch};
    ///
    /// let env = |stage: &str, rules: &str| {
    ///     HashMap::from([("STAGE".to_owned(), stage.to_owned()), ("FAIL_PAYMENTS".to_owned(), rules.to_owned())])
    /// };
    /// assert!(FailureSwitch::from_settings(&env("test", "flaky:2")).unwrap().is_some());
    /// assert!(FailureSwitch::from_settings(&env("prod", "")).unwrap().is_none());
    /// let refused = FailureSwitch::from_settings(&env("prod", "flaky:2")).unwrap_err();
    /// assert!(matches!(refused, ConfigError::FailureSwitchInProduction { .. }));
    /// ```
    pub fn from_settings(settings: &impl Settings) -> Result<Option<Self>, ConfigError> {
        let rules = settings.get("FAIL_PAYMENTS").unwrap_or_default();
        let switch = Self::parse(&rules)?;
        if switch.is_some()
            && let Some(stage) = settings.get("STAGE").filter(|s| is_production(s))
        {
            return Err(ConfigError::FailureSwitchInProduction { stage, rules });
        }
        Ok(switch)
    }

    /// The fault for a payment with `description`, on its `attempt`-th attempt (1 = first).
    pub fn fault(&self, description: Option<&str>, attempt: u32) -> Option<Fault> {
        let description = description?;
        self.rules
            .iter()
            .find(|(marker, times, _)| description.contains(marker.as_str()) && attempt <= *times)
            .map(|(_, _, fault)| *fault)
    }
}

/// Whether `stage` (`STAGE`, the template's `Stage`) names production: `prod` or `production`,
/// in any case, blanks around ignored.
///
/// ```
/// use payments_config::failure_switch::is_production;
/// assert!(is_production("prod") && is_production(" PROD ") && is_production("Production"));
/// assert!(!is_production("dev") && !is_production("test") && !is_production("preprod"));
/// ```
pub fn is_production(stage: &str) -> bool {
    let stage = stage.trim();
    stage.eq_ignore_ascii_case("prod") || stage.eq_ignore_ascii_case("production")
}
