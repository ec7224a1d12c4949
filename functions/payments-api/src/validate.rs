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

/// Validates the body of `POST /payments` from a caller whose account is `account`: the body's
/// `accountId` may be left out, and when present must be the caller's (else 403).
pub fn new_payment(body: &[u8], account: &MessageGroupId) -> Result<NewPayment, Problem> {
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
    let amount_cents = amount_cents(map)?;
    let currency = currency(map)?;
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

    #[test]
    fn content_types_and_sizes() {
        for ok in [
            "application/json",
            "Application/JSON; charset=UTF-8",
            "application/merge-patch+json",
        ] {
            assert!(content_type(Some(ok.as_bytes())).is_ok(), "{ok}");
        }
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "application/json; charset=latin1",
        ] {
            assert_eq!(
                content_type(Some(bad.as_bytes())).unwrap_err().status,
                415,
                "{bad}"
            );
        }
        assert_eq!(content_type(None).unwrap_err().status, 415);
        assert!(body_size(&[b' '; MAX_BODY_BYTES]).is_ok());
        assert_eq!(
            body_size(&[b' '; MAX_BODY_BYTES + 1]).unwrap_err().status,
            413
        );
    }

    fn account() -> MessageGroupId {
        MessageGroupId::new("acct-1").unwrap()
    }

    fn field_of(body: &str) -> Option<&'static str> {
        let a = MessageGroupId::new("a").unwrap();
        new_payment(body.as_bytes(), &a).err().and_then(|p| p.field)
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
            &account(),
        )
        .unwrap();
        assert_eq!((ok.amount_cents, ok.currency.as_str()), (100, "EUR"));
        assert_eq!(field_of("{nope"), Some("body"));
        assert_eq!(field_of("[1]"), Some("body"));
        assert_eq!(
            field_of(r#"{"accountId":"a","amountCents":1,"currency":"EUR","extra":1}"#),
            Some("body")
        );
        let own = new_payment(br#"{"amountCents":1,"currency":"EUR"}"#, &account()).unwrap();
        assert_eq!(own.account_id, account());
        let other = new_payment(
            br#"{"accountId":"acct-2","amountCents":1,"currency":"EUR"}"#,
            &account(),
        )
        .unwrap_err();
        assert_eq!((other.status, other.field), (403, Some("accountId")));
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
        let bad = new_payment(
            br#"{"amountCents":1,"currency":"EUR","description":"nul \u0000 here"}"#,
            &account(),
        )
        .unwrap_err();
        assert_eq!((bad.status, bad.field), (400, Some("description")));
        assert!(
            bad.detail.contains("(U+0000) at position 4"),
            "{}",
            bad.detail
        );
        let fine = r#"{"amountCents":1,"currency":"EUR","description":"tab\t é 😀"}"#;
        assert!(new_payment(fine.as_bytes(), &account()).is_ok());
        let unknown = new_payment(
            br#"{"accountId":"a","amountCents":1,"currency":"EUR","amount":1}"#,
            &MessageGroupId::new("a").unwrap(),
        )
        .unwrap_err();
        assert!(unknown.detail.contains("`amount`"), "{}", unknown.detail);
    }
}
