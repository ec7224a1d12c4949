//! Validation of the Idempotency-Key header and of the payment body.

use lambda_idempotency::publish::MessageGroupId;
use serde_json::{Map, Value};

use crate::problem::Problem;

/// Longest Idempotency-Key accepted.
pub const MAX_KEY_LEN: usize = 255;
/// Longest description accepted, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 500;

/// Active ISO 4217 currency codes (fiat, plus the CFA and CFP francs and the East Caribbean
/// dollar).
const CURRENCIES: &str = "AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BRL BSD \
     BTN BWP BYN BZD CAD CDF CHF CLP CNY COP CRC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB EUR FJD FKP GBP GEL \
     GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK JMD JOD JPY KES KGS KHR KMF KPW KRW KWD \
     KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MYR MZN NAD NGN NIO NOK \
     NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR RON RSD RUB RWF SAR SBD SCR SDG SEK SGD SHP SLE SOS SRD SSP \
     STN SVC SYP SZL THB TJS TMT TND TOP TRY TTD TWD TZS UAH UGX USD UYU UZS VES VND VUV WST XAF XCD XCG XOF \
     XPF YER ZAR ZMW ZWG";

/// A validated `POST /payments` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPayment {
    /// The account; a valid FIFO message group id.
    pub account_id: MessageGroupId,
    /// > 0.
    pub amount_cents: i64,
    /// ISO 4217.
    pub currency: String,
    /// Optional free text.
    pub description: Option<String>,
    /// The body as parsed, for the payload hash.
    pub json: Value,
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

/// Validates the body of `POST /payments`.
pub fn new_payment(body: &[u8]) -> Result<NewPayment, Problem> {
    let json: Value = serde_json::from_slice(body)
        .map_err(|e| Problem::invalid("body", format!("the body is not valid JSON: {e}")))?;
    let Value::Object(map) = &json else {
        return Err(Problem::invalid("body", "the body must be a JSON object"));
    };
    const FIELDS: [&str; 4] = ["accountId", "amountCents", "currency", "description"];
    if let Some(unknown) = map.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(Problem::invalid(
            "body",
            format!("unknown field `{unknown}`; expected {}", FIELDS.join(", ")),
        ));
    }
    let account_id = account_id(map)?;
    let amount_cents = amount_cents(map)?;
    let currency = currency(map)?;
    let description = match map.get("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.chars().count() <= MAX_DESCRIPTION_CHARS => Some(s.clone()),
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
    Ok(NewPayment {
        account_id,
        amount_cents,
        currency,
        description,
        json,
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

fn amount_cents(map: &Map<String, Value>) -> Result<i64, Problem> {
    let invalid = || {
        Problem::invalid(
            "amountCents",
            "amountCents must be a positive integer (minor units)",
        )
    };
    match map.get("amountCents") {
        None => Err(Problem::invalid("amountCents", "amountCents is required")),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(v) if v > 0 => Ok(v),
            _ => Err(invalid()),
        },
        Some(_) => Err(invalid()),
    }
}

fn currency(map: &Map<String, Value>) -> Result<String, Problem> {
    match map.get("currency") {
        None => Err(Problem::invalid("currency", "currency is required")),
        Some(Value::String(s)) if s.len() == 3 && s.bytes().all(|b| b.is_ascii_uppercase()) => {
            if CURRENCIES.split_ascii_whitespace().any(|c| c == s) {
                Ok(s.clone())
            } else {
                Err(Problem::invalid(
                    "currency",
                    format!("currency `{s}` is not an ISO 4217 code"),
                ))
            }
        }
        Some(_) => Err(Problem::invalid(
            "currency",
            "currency must be three upper-case letters (ISO 4217)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(body: &str) -> Option<&'static str> {
        new_payment(body.as_bytes()).err().and_then(|p| p.field)
    }

    #[test]
    fn keys() {
        assert_eq!(idempotency_key(Some(b"abc-123")).unwrap(), "abc-123");
        assert_eq!(
            idempotency_key(Some(b"\"quoted key\"")).unwrap(),
            "quoted key"
        );
        assert!(idempotency_key(None).is_err());
        assert!(idempotency_key(Some(b"")).is_err());
        assert!(idempotency_key(Some(b"\"\"")).is_err());
        assert!(idempotency_key(Some("é".as_bytes())).is_err());
        assert!(idempotency_key(Some(b"tab\there")).is_err());
        assert!(idempotency_key(Some("k".repeat(255).as_bytes())).is_ok());
        let long = idempotency_key(Some("k".repeat(256).as_bytes())).unwrap_err();
        assert!(long.detail.contains("256"), "{}", long.detail);
    }

    #[test]
    fn bodies() {
        let ok = new_payment(
            br#"{"accountId":"acct-1","amountCents":100,"currency":"EUR","description":"x"}"#,
        )
        .unwrap();
        assert_eq!((ok.amount_cents, ok.currency.as_str()), (100, "EUR"));
        assert_eq!(field_of("{nope"), Some("body"));
        assert_eq!(field_of("[1]"), Some("body"));
        assert_eq!(
            field_of(r#"{"accountId":"a","amountCents":1,"currency":"EUR","extra":1}"#),
            Some("body")
        );
        assert_eq!(
            field_of(r#"{"amountCents":1,"currency":"EUR"}"#),
            Some("accountId")
        );
        assert_eq!(
            field_of(r#"{"accountId":"a b","amountCents":1,"currency":"EUR"}"#),
            Some("accountId")
        );
        assert_eq!(
            field_of(r#"{"accountId":"a","amountCents":0,"currency":"EUR"}"#),
            Some("amountCents")
        );
        assert_eq!(
            field_of(r#"{"accountId":"a","amountCents":-5,"currency":"EUR"}"#),
            Some("amountCents")
        );
        assert_eq!(
            field_of(r#"{"accountId":"a","amountCents":1.5,"currency":"EUR"}"#),
            Some("amountCents")
        );
        assert_eq!(
            field_of(r#"{"accountId":"a","amountCents":"1","currency":"EUR"}"#),
            Some("amountCents")
        );
        assert_eq!(
            field_of(r#"{"accountId":"a","amountCents":1,"currency":"eur"}"#),
            Some("currency")
        );
        assert_eq!(
            field_of(r#"{"accountId":"a","amountCents":1,"currency":"ABC"}"#),
            Some("currency")
        );
        assert_eq!(
            field_of(r#"{"accountId":"a","amountCents":1,"currency":"EURO"}"#),
            Some("currency")
        );
        assert_eq!(
            field_of(r#"{"accountId":"a","amountCents":1,"currency":"EUR","description":7}"#),
            Some("description")
        );
        let unknown =
            new_payment(br#"{"accountId":"a","amountCents":1,"currency":"EUR","amount":1}"#)
                .unwrap_err();
        assert!(unknown.detail.contains("`amount`"), "{}", unknown.detail);
    }
}
