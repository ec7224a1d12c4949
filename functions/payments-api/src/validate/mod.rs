//! Validation of the Idempotency-Key header and of the payment body.

use lambda_idempotency::publish::{MessageGroupId, invalid_character};
use serde_json::{Map, Value};

use crate::problem::Problem;

/// Longest Idempotency-Key accepted.
pub const MAX_KEY_LEN: usize = 255;
/// Longest description accepted, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 500;
/// Largest `POST /payments` body accepted, in bytes; a larger one is refused unparsed (413).
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// Checks the body's size before anything reads it.
pub fn body_size(body: &[u8]) -> Result<(), Problem> {
    if body.len() > MAX_BODY_BYTES {
        return Err(Problem::too_large(body.len(), MAX_BODY_BYTES));
    }
    Ok(())
}

/// Checks that the `Content-Type` is JSON: `application/json` or `application/*+json`, with
/// any parameters (a `charset` must be UTF-8).
pub fn content_type(value: Option<&[u8]>) -> Result<(), Problem> {
    let Some(raw) = value else {
        return Err(Problem::unsupported_media_type(None));
    };
    let text = String::from_utf8_lossy(raw);
    let mut parts = text.split(';');
    let essence = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
    let json = essence == "application/json"
        || essence
            .strip_prefix("application/")
            .is_some_and(|subtype| subtype.ends_with("+json"));
    let utf8 = parts.all(|p| match p.trim().split_once('=') {
        Some((name, value)) if name.trim().eq_ignore_ascii_case("charset") => {
            value.trim().trim_matches('"').eq_ignore_ascii_case("utf-8")
        }
        _ => true,
    });
    if json && utf8 {
        Ok(())
    } else {
        Err(Problem::unsupported_media_type(Some(&text)))
    }
}

/// A text field with a character SQS would refuse (the payment is relayed to a queue): 400
/// naming the field and the position.
fn sqs_text(field: &'static str, text: &str) -> Result<(), Problem> {
    match invalid_character(text) {
        None => Ok(()),
        Some((position, ch)) => Err(Problem::invalid(
            field,
            format!(
                "{field} has {ch:?} (U+{:04X}) at position {position}, a character the payment queue does not accept",
                u32::from(ch)
            ),
        )),
    }
}

/// The upper limit of a payment's amount when `MAX_PAYMENT_AMOUNT` is not set, in major units of
/// the payment's currency.
pub const DEFAULT_MAX_PAYMENT_AMOUNT: u64 = 1_000_000;

/// The rule a refused currency is refused by.
const CURRENCY_RULE: &str =
    "a payment's currency must be an active ISO 4217 code with a minor unit";

/// The minor unit of a currency payments may be taken in: its ISO 4217 exponent (JPY 0, EUR 2,
/// BHD 3), from the `iso_currency` table. A code that is unknown, superseded, a fund code, or
/// without a minor unit (gold `XAU`, the IMF's `XDR`) is refused with the reason.
///
/// ```
/// use payments_api::validate::exponent;
///
/// assert_eq!(exponent("JPY"), Ok(0));
/// assert_eq!(exponent("EUR"), Ok(2));
/// assert_eq!(exponent("BHD"), Ok(3));
/// assert!(exponent("XAU").unwrap_err().contains("no minor unit"));
/// ```
pub fn exponent(code: &str) -> Result<u32, String> {
    let Some(currency) = iso_currency::Currency::from_code(code) else {
        return Err(format!("currency `{code}` is not an ISO 4217 code"));
    };
    if let Some(newer) = currency.is_superseded() {
        return Err(format!(
            "currency `{code}` is no longer active (superseded by {})",
            newer.code()
        ));
    }
    if currency.is_fund() {
        return Err(format!(
            "currency `{code}` is an ISO 4217 fund code, not a currency"
        ));
    }
    match currency.exponent() {
        None => Err(format!("currency `{code}` has no minor unit")),
        Some(_) if currency.is_special() => Err(format!(
            "currency `{code}` is an ISO 4217 special code, not a currency"
        )),
        Some(e) => Ok(u32::from(e)),
    }
}

/// The upper limit in minor units: `max_amount` major units times 10^`exponent`; `None` when that
/// is beyond `i64` (no amount that can be stored is over it then).
///
/// ```
/// use payments_api::validate::limit_minor_units;
///
/// assert_eq!(limit_minor_units(1_000_000, 0), Some(1_000_000)); // JPY
/// assert_eq!(limit_minor_units(1_000_000, 2), Some(100_000_000)); // EUR
/// assert_eq!(limit_minor_units(1_000_000, 3), Some(1_000_000_000)); // BHD
/// assert_eq!(limit_minor_units(u64::MAX, 2), None);
/// ```
pub fn limit_minor_units(max_amount: u64, exponent: u32) -> Option<i64> {
    10u64
        .checked_pow(exponent)
        .and_then(|unit| max_amount.checked_mul(unit))
        .and_then(|limit| i64::try_from(limit).ok())
}

/// An amount in minor units written as a decimal of major units, with `exponent` decimal places
/// (none for 0): the form the `amount` field takes.
///
/// ```
/// use payments_api::validate::decimal;
///
/// assert_eq!(decimal(1234, 2), "12.34");
/// assert_eq!(decimal(5, 3), "0.005");
/// assert_eq!(decimal(1500, 0), "1500");
/// ```
pub fn decimal(minor: i64, exponent: u32) -> String {
    let digits = minor.unsigned_abs().to_string();
    let places = exponent as usize;
    let sign = if minor < 0 { "-" } else { "" };
    if places == 0 {
        return format!("{sign}{digits}");
    }
    let padded = format!("{digits:0>width$}", width = places + 1);
    let (units, fraction) = padded.split_at(padded.len() - places);
    format!("{sign}{units}.{fraction}")
}

/// A validated `POST /payments` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPayment {
    /// The account; a valid FIFO message group id.
    pub account_id: MessageGroupId,
    /// Minor units of `currency`, > 0 and at most the limit (from `amountCents`, or from
    /// `amount` converted exactly).
    pub amount_cents: i64,
    /// An active ISO 4217 code with a minor unit ([`exponent`]).
    pub currency: String,
    /// Optional free text.
    pub description: Option<String>,
    /// The body as parsed, with `accountId` the caller's account when the body leaves it out:
    /// the request's fingerprint, so that it always holds the account.
    pub json: Value,
    /// Whether the body named its account (else `json`'s `accountId` is the caller's).
    pub account_named: bool,
}

/// Validates the `Idempotency-Key` header value: 1 to 255 printable ASCII characters. A value
/// sent as a structured-field string (`"abc"`) is unquoted first.
pub fn idempotency_key(value: Option<&[u8]>) -> Result<String, Problem> {
    let raw = value.ok_or_else(|| {
        Problem::invalid_key("the Idempotency-Key header is required for POST /payments")
    })?;
    let text = std::str::from_utf8(raw)
        .map_err(|_| Problem::invalid_key("the Idempotency-Key header must be printable ASCII"))?;
    let text = match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        Some(unquoted) => unquoted,
        None => text,
    };
    if text.trim().is_empty() {
        return Err(Problem::invalid_key("the Idempotency-Key header is empty"));
    }
    if text.len() > MAX_KEY_LEN {
        return Err(Problem::invalid_key(format!(
            "the Idempotency-Key header is {} characters long; at most {MAX_KEY_LEN} are allowed",
            text.len()
        )));
    }
    if let Some(c) = text.chars().find(|c| !(' '..='~').contains(c)) {
        return Err(Problem::invalid_key(format!(
            "the Idempotency-Key header must be printable ASCII; it contains {c:?}"
        )));
    }
    Ok(text.to_owned())
}

/// Validates the body of `POST /payments` from a caller whose account is `account`: the body's
/// `accountId` may be left out, and when present must be the caller's (else 403). The amount is
/// `amountCents` (an integer of minor units) or `amount` (a decimal string of major units), at
/// most `max_amount` major units of the payment's currency ([`amount_of`]).
pub fn new_payment(
    body: &[u8],
    account: &MessageGroupId,
    max_amount: u64,
) -> Result<NewPayment, Problem> {
    let json: Value = serde_json::from_slice(body)
        .map_err(|e| Problem::invalid("body", format!("the body is not valid JSON: {e}")))?;
    let Value::Object(map) = &json else {
        return Err(Problem::invalid("body", "the body must be a JSON object"));
    };
    const FIELDS: [&str; 5] = [
        "accountId",
        "amount",
        "amountCents",
        "currency",
        "description",
    ];
    if let Some(unknown) = map.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(Problem::invalid(
            "body",
            format!("unknown field `{unknown}`; expected {}", FIELDS.join(", ")),
        ));
    }
    let account_id = match map.get("accountId") {
        None => account.clone(),
        Some(_) => {
            let given = account_id(map)?;
            if &given != account {
                return Err(Problem::forbidden(format!(
                    "accountId `{given}` is not the caller's account"
                )));
            }
            given
        }
    };
    let (currency, exponent) = currency(map)?;
    let amount_cents = amount_of(map, &currency, exponent, max_amount)?;
    let description = match map.get("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.chars().count() <= MAX_DESCRIPTION_CHARS => {
            sqs_text("description", s)?;
            Some(s.clone())
        }
        Some(Value::String(_)) => {
            return Err(Problem::invalid(
                "description",
                format!("description is longer than {MAX_DESCRIPTION_CHARS} characters"),
            ));
        }
        Some(_) => {
            return Err(Problem::invalid(
                "description",
                "description must be a string",
            ));
        }
    };
    // The request's fingerprint always holds its account: a body leaving it out is the same
    // request as one naming the caller's account, and never the same as another account's.
    let account_named = map.contains_key("accountId");
    let mut json = json;
    if let Value::Object(map) = &mut json {
        map.entry("accountId")
            .or_insert_with(|| Value::String(account_id.as_str().to_owned()));
    }
    Ok(NewPayment {
        account_id,
        amount_cents,
        currency,
        description,
        json,
        account_named,
    })
}

fn account_id(map: &Map<String, Value>) -> Result<MessageGroupId, Problem> {
    match map.get("accountId") {
        None => Err(Problem::invalid("accountId", "accountId is required")),
        Some(Value::String(s)) => MessageGroupId::new(s.as_str())
            .map_err(|e| Problem::invalid("accountId", format!("accountId is invalid: {e}"))),
        Some(_) => Err(Problem::invalid("accountId", "accountId must be a string")),
    }
}

/// The amount of a payment in minor units of `currency` (whose minor unit is `exponent`): exactly
/// one of `amountCents` (a positive integer of minor units) and `amount` (a positive decimal
/// string of major units with at most `exponent` decimal places, converted exactly), and at most
/// `max_amount` major units. A refusal names the field and the rule.
pub fn amount_of(
    map: &Map<String, Value>,
    currency: &str,
    exponent: u32,
    max_amount: u64,
) -> Result<i64, Problem> {
    const BOTH_FORMS: &str = "give exactly one of amountCents (an integer of minor units) and \
                              amount (a decimal string of major units)";
    let (field, shown, minor) = match (map.get("amountCents"), map.get("amount")) {
        (Some(_), Some(_)) => {
            return Err(Problem::invalid(
                "amount",
                format!("amount and amountCents are both given: {BOTH_FORMS}"),
            ));
        }
        (None, None) => {
            return Err(Problem::invalid(
                "amountCents",
                format!("the amount is required: {BOTH_FORMS}"),
            ));
        }
        (Some(value), None) => {
            let minor = amount_cents(value)?;
            let shown = minor.map_or_else(|| value.to_string(), |m| m.to_string());
            ("amountCents", shown, minor)
        }
        (None, Some(value)) => {
            let (text, minor) = decimal_amount(value, currency, exponent)?;
            ("amount", format!("{} {currency}", shorten(text)), minor)
        }
    };
    match (minor, limit_minor_units(max_amount, exponent)) {
        (Some(minor), Some(limit)) if minor <= limit => Ok(minor),
        (Some(minor), None) => Ok(minor),
        (_, Some(limit)) => Err(Problem::invalid(
            field,
            format!(
                "{field} {shown} is over the limit of {max_amount} {currency} ({limit} minor units)"
            ),
        )),
        (None, None) => Err(Problem::invalid(
            field,
            format!(
                "{field} {shown} is over the largest amount that can be stored ({} minor units)",
                i64::MAX
            ),
        )),
    }
}

/// `amountCents`: a positive integer; `None` for one too large for an `i64` (over any limit).
fn amount_cents(value: &Value) -> Result<Option<i64>, Problem> {
    match value {
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(v), _) if v > 0 => Ok(Some(v)),
            (None, Some(_)) => Ok(None),
            _ => Err(amount_cents_invalid()),
        },
        _ => Err(amount_cents_invalid()),
    }
}

fn amount_cents_invalid() -> Problem {
    Problem::invalid(
        "amountCents",
        "amountCents must be a positive integer (minor units)",
    )
}

/// `amount`: a decimal string of major units (`"12.34"`: digits, then optionally a point and
/// digits; no sign, exponent or spaces), more than zero, with at most `exponent` decimal places;
/// converted to minor units exactly. `None` for one too large for an `i64`.
fn decimal_amount<'a>(
    value: &'a Value,
    currency: &str,
    exponent: u32,
) -> Result<(&'a str, Option<i64>), Problem> {
    let Value::String(text) = value else {
        return Err(Problem::invalid(
            "amount",
            "amount must be a string of major units such as \"12.34\" (a JSON number is not exact)",
        ));
    };
    let (units, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(units) || (text.contains('.') && !digits(fraction)) {
        return Err(Problem::invalid(
            "amount",
            format!(
                "amount `{}` is not a decimal number of major units such as \"12.34\" (digits, at most one point, no sign or exponent)",
                shorten(text)
            ),
        ));
    }
    if fraction.len() > exponent as usize {
        let rule = match exponent {
            0 => format!("{currency} has no minor unit"),
            1 => format!("{currency} has 1 decimal place"),
            n => format!("{currency} has {n} decimal places"),
        };
        return Err(Problem::invalid(
            "amount",
            format!("amount {} {currency}: {rule}", shorten(text)),
        ));
    }
    // Exact: the digits of the major units and of the fraction, padded to `exponent` places,
    // are the minor units.
    let padding = exponent as usize - fraction.len();
    let minor_digits = format!("{units}{fraction}{}", "0".repeat(padding));
    let minor_digits = minor_digits.trim_start_matches('0');
    if minor_digits.is_empty() {
        return Err(Problem::invalid("amount", "amount must be more than zero"));
    }
    Ok((text, minor_digits.parse::<i64>().ok()))
}

/// Input echoed in a refusal, cut to 40 characters.
fn shorten(text: &str) -> String {
    const MAX: usize = 40;
    match text.char_indices().nth(MAX) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// `currency`: three upper-case letters, a code [`exponent`] accepts; with its exponent.
fn currency(map: &Map<String, Value>) -> Result<(String, u32), Problem> {
    match map.get("currency") {
        None => Err(Problem::invalid("currency", "currency is required")),
        Some(Value::String(s)) if s.len() == 3 && s.bytes().all(|b| b.is_ascii_uppercase()) => {
            exponent(s).map(|e| (s.clone(), e)).map_err(|reason| {
                Problem::invalid("currency", format!("{reason}: {CURRENCY_RULE}"))
            })
        }
        Some(_) => Err(Problem::invalid(
            "currency",
            "currency must be three upper-case letters (ISO 4217)",
        )),
    }
}

#[cfg(test)]
mod tests;
