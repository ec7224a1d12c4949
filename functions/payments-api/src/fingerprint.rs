//! A request's fingerprint: the hash of its validated payment ([`NewPayment::json`]), which
//! always holds the account. The key's record and the payment item keep it (`requestHash`), and
//! tell a retry (the same fingerprint) from a key reused with another request (`422`).
//!
//! A payments-api older than that rule stored, for a body leaving its account out, the hash of
//! the body alone; a retry of such a request is still recognized as the same request when the
//! stored payment is of the caller's account ([`is_of`]).

use lambda_idempotency::key::canonical_hash;
use serde_json::Value;

use crate::representation::Item;
use crate::validate::NewPayment;

/// The fingerprint of `payment` (bare SHA-256 hex, the form payments and their records have
/// always held).
pub fn of(payment: &NewPayment) -> String {
    canonical_hash(&payment.json)
}

/// The fingerprint an older payments-api stored for `payment`: that of the body alone, when it
/// left its account out (one naming it had the same fingerprint then as now).
fn before_accounts(payment: &NewPayment) -> Option<String> {
    if payment.account_named {
        return None;
    }
    let mut body = payment.json.clone();
    if let Value::Object(map) = &mut body {
        map.remove("accountId");
    }
    Some(canonical_hash(&body))
}

/// Whether the stored payment `stored` is of the request `payment`, whose fingerprint is
/// `fingerprint` ([`of`]): it holds that fingerprint, or it is of the payment's account and
/// holds the fingerprint an older payments-api stored for it (the body's alone).
pub fn is_of(stored: &Item, payment: &NewPayment, fingerprint: &str) -> bool {
    let text = |name: &str| {
        stored
            .get(name)
            .and_then(|v| v.as_s().ok())
            .map(String::as_str)
    };
    let Some(stored_hash) = text("requestHash") else {
        return false;
    };
    stored_hash == fingerprint
        || (text("accountId") == Some(payment.account_id.as_str())
            && before_accounts(payment).is_some_and(|h| h == stored_hash))
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::types::AttributeValue;
    use lambda_idempotency::publish::MessageGroupId;

    use super::*;
    use crate::validate::{DEFAULT_MAX_PAYMENT_AMOUNT, new_payment};

    fn payment(account: &str, body: &str) -> NewPayment {
        let account = MessageGroupId::new(account).unwrap();
        new_payment(body.as_bytes(), &account, DEFAULT_MAX_PAYMENT_AMOUNT).unwrap()
    }

    fn stored(account: &str, hash: &str) -> Item {
        let s = |v: &str| AttributeValue::S(v.to_owned());
        Item::from([
            ("accountId".to_owned(), s(account)),
            ("requestHash".to_owned(), s(hash)),
        ])
    }

    const LEFT_OUT: &str = r#"{"amountCents":5,"currency":"EUR"}"#;

    #[test]
    fn the_fingerprint_holds_the_account() {
        let named = r#"{"currency":"EUR","accountId":"a","amountCents":5}"#;
        assert_eq!(of(&payment("a", LEFT_OUT)), of(&payment("a", named)));
        assert_ne!(of(&payment("a", LEFT_OUT)), of(&payment("b", LEFT_OUT)));
        assert_eq!(payment("a", LEFT_OUT).json["accountId"], "a");
    }

    #[test]
    fn a_body_alone_fingerprint_is_its_accounts_only() {
        let body_alone = canonical_hash(&serde_json::from_str(LEFT_OUT).unwrap());
        let (a, b) = (payment("a", LEFT_OUT), payment("b", LEFT_OUT));
        assert!(is_of(&stored("a", &of(&a)), &a, &of(&a)));
        assert!(is_of(&stored("a", &body_alone), &a, &of(&a)));
        assert!(!is_of(&stored("a", &body_alone), &b, &of(&b)));
        assert!(!is_of(&stored("a", &of(&a)), &b, &of(&b)));
        // A body naming its account had its fingerprint then as now: the body alone is another.
        let named = payment("a", r#"{"accountId":"a","amountCents":5,"currency":"EUR"}"#);
        assert!(!is_of(&stored("a", &body_alone), &named, &of(&named)));
        let other_amount = payment("a", r#"{"amountCents":6,"currency":"EUR"}"#);
        assert!(!is_of(
            &stored("a", &body_alone),
            &other_amount,
            &of(&other_amount)
        ));
    }
}
