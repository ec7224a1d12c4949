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
    new_payment(body.as_bytes(), &a, DEFAULT_MAX_PAYMENT_AMOUNT)
        .err()
        .and_then(|p| p.field)
}

/// The body's payment with the default limit, as the caller `acct-1`.
fn payment(body: &str) -> Result<NewPayment, Problem> {
    new_payment(body.as_bytes(), &account(), DEFAULT_MAX_PAYMENT_AMOUNT)
}

/// The refusal of `body` with a limit of `max_amount`: (field, detail).
fn refusal(body: &str, max_amount: u64) -> (Option<&'static str>, String) {
    let problem = new_payment(body.as_bytes(), &account(), max_amount).unwrap_err();
    assert_eq!(problem.status, 400, "{problem:?}");
    (problem.field, problem.detail)
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
    let ok =
        payment(r#"{"accountId":"acct-1","amountCents":100,"currency":"EUR","description":"x"}"#)
            .unwrap();
    assert_eq!((ok.amount_cents, ok.currency.as_str()), (100, "EUR"));
    assert_eq!(field_of("{nope"), Some("body"));
    assert_eq!(field_of("[1]"), Some("body"));
    assert_eq!(
        field_of(r#"{"accountId":"a","amountCents":1,"currency":"EUR","extra":1}"#),
        Some("body")
    );
    let own = payment(r#"{"amountCents":1,"currency":"EUR"}"#).unwrap();
    assert_eq!(own.account_id, account());
    let other = payment(r#"{"accountId":"acct-2","amountCents":1,"currency":"EUR"}"#).unwrap_err();
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
    let bad = payment(r#"{"amountCents":1,"currency":"EUR","description":"nul \u0000 here"}"#)
        .unwrap_err();
    assert_eq!((bad.status, bad.field), (400, Some("description")));
    assert!(
        bad.detail.contains("(U+0000) at position 4"),
        "{}",
        bad.detail
    );
    let fine = r#"{"amountCents":1,"currency":"EUR","description":"tab\t é 😀"}"#;
    assert!(payment(fine).is_ok());
    let unknown = payment(r#"{"amountCents":1,"currency":"EUR","cents":1}"#).unwrap_err();
    assert_eq!(unknown.field, Some("body"));
    assert!(unknown.detail.contains("`cents`"), "{}", unknown.detail);
}

#[test]
fn exponents_come_from_the_iso_4217_table() {
    for (code, places) in [("JPY", 0), ("KRW", 0), ("EUR", 2), ("USD", 2), ("BHD", 3)] {
        assert_eq!(exponent(code), Ok(places), "{code}");
    }
    // The reasons, each refused with the rule.
    for (code, reason) in [
        ("XAU", "has no minor unit"),
        ("XDR", "has no minor unit"),
        ("XTS", "has no minor unit"),
        ("HRK", "no longer active (superseded by EUR)"),
        ("BOV", "fund code"),
        ("ABC", "not an ISO 4217 code"),
    ] {
        let (field, detail) = refusal(
            &format!(r#"{{"amountCents":1,"currency":"{code}"}}"#),
            DEFAULT_MAX_PAYMENT_AMOUNT,
        );
        assert_eq!(field, Some("currency"), "{code}");
        assert!(detail.contains(reason), "{code}: {detail}");
        assert!(
            detail.ends_with(
                "a payment's currency must be an active ISO 4217 code with a minor unit"
            ),
            "{code}: {detail}"
        );
    }
}

#[test]
fn amounts_are_minor_units_of_their_currency() {
    // amountCents is minor units whatever the exponent: 1500 JPY, 15.00 EUR, 1.500 BHD.
    for currency in ["JPY", "EUR", "BHD"] {
        let p = payment(&format!(
            r#"{{"amountCents":1500,"currency":"{currency}"}}"#
        ))
        .unwrap();
        assert_eq!((p.amount_cents, p.currency.as_str()), (1500, currency));
    }
    // amount is major units, converted exactly.
    for (amount, currency, minor) in [
        ("1500", "JPY", 1500),
        ("12.34", "EUR", 1234),
        ("12.3", "EUR", 1230),
        ("12", "EUR", 1200),
        ("0.01", "EUR", 1),
        ("007.10", "EUR", 710),
        ("1.234", "BHD", 1234),
        ("0.005", "BHD", 5),
        ("2.5", "BHD", 2500),
        // No float could hold these: exact all the same.
        ("90071992547409.93", "EUR", 9_007_199_254_740_993),
    ] {
        let body = format!(r#"{{"amount":"{amount}","currency":"{currency}"}}"#);
        let p = new_payment(body.as_bytes(), &account(), u64::MAX).unwrap();
        assert_eq!(p.amount_cents, minor, "{amount} {currency}");
        // And back: the decimal of the minor units is the same amount.
        let written = decimal(minor, exponent(currency).unwrap());
        let body = format!(r#"{{"amount":"{written}","currency":"{currency}"}}"#);
        let again = new_payment(body.as_bytes(), &account(), u64::MAX).unwrap();
        assert_eq!(again.amount_cents, minor, "{written} {currency}");
    }
}

#[test]
fn decimal_places_are_at_most_the_currency_s() {
    for (amount, currency, detail) in [
        ("100.5", "JPY", "amount 100.5 JPY: JPY has no minor unit"),
        ("100.0", "JPY", "amount 100.0 JPY: JPY has no minor unit"),
        (
            "12.345",
            "EUR",
            "amount 12.345 EUR: EUR has 2 decimal places",
        ),
        (
            "1.2345",
            "BHD",
            "amount 1.2345 BHD: BHD has 3 decimal places",
        ),
    ] {
        let body = format!(r#"{{"amount":"{amount}","currency":"{currency}"}}"#);
        assert_eq!(
            refusal(&body, DEFAULT_MAX_PAYMENT_AMOUNT),
            (Some("amount"), detail.to_owned())
        );
    }
    // Not a decimal string of major units.
    for amount in [
        r#""""#,
        r#""-1""#,
        r#""+1""#,
        r#""1e3""#,
        r#"".5""#,
        r#""5.""#,
        r#""1.2.3""#,
        r#"" 12""#,
        r#""12,50""#,
        r#""0""#,
        r#""0.00""#,
        "12.34",
        "null",
        "true",
    ] {
        let body = format!(r#"{{"amount":{amount},"currency":"EUR"}}"#);
        let (field, detail) = refusal(&body, DEFAULT_MAX_PAYMENT_AMOUNT);
        assert_eq!(field, Some("amount"), "{amount}: {detail}");
    }
    let (_, detail) = refusal(r#"{"amount":12.34,"currency":"EUR"}"#, 1);
    assert!(detail.contains("a JSON number is not exact"), "{detail}");
    let (_, detail) = refusal(
        &format!(r#"{{"amount":"{}x","currency":"EUR"}}"#, "9".repeat(100)),
        1,
    );
    assert!(
        detail.chars().count() < 200,
        "the input is echoed cut: {detail}"
    );
}

#[test]
fn amounts_over_the_limit_are_refused_naming_it() {
    // The limit is MAX_PAYMENT_AMOUNT major units: 1,000,000 EUR is 100,000,000 cents.
    let (max, eur) = (DEFAULT_MAX_PAYMENT_AMOUNT, "EUR");
    assert!(payment(r#"{"amountCents":100000000,"currency":"EUR"}"#).is_ok());
    assert_eq!(
        refusal(r#"{"amountCents":100000001,"currency":"EUR"}"#, max),
        (
            Some("amountCents"),
            format!(
                "amountCents 100000001 is over the limit of 1000000 {eur} (100000000 minor units)"
            )
        )
    );
    assert!(payment(r#"{"amount":"1000000.00","currency":"EUR"}"#).is_ok());
    assert_eq!(
        refusal(r#"{"amount":"1000000.01","currency":"EUR"}"#, max),
        (
            Some("amount"),
            "amount 1000000.01 EUR is over the limit of 1000000 EUR (100000000 minor units)"
                .to_owned()
        )
    );
    // JPY: the limit in minor units is the limit itself; BHD: a thousand times it.
    assert!(payment(r#"{"amountCents":1000000,"currency":"JPY"}"#).is_ok());
    assert_eq!(
        refusal(r#"{"amountCents":1000001,"currency":"JPY"}"#, max).1,
        "amountCents 1000001 is over the limit of 1000000 JPY (1000000 minor units)"
    );
    assert!(payment(r#"{"amount":"1000000.000","currency":"BHD"}"#).is_ok());
    assert_eq!(
        refusal(r#"{"amount":"1000000.001","currency":"BHD"}"#, max).1,
        "amount 1000000.001 BHD is over the limit of 1000000 BHD (1000000000 minor units)"
    );
    // Another limit.
    assert_eq!(
        refusal(r#"{"amount":"50.01","currency":"EUR"}"#, 50).1,
        "amount 50.01 EUR is over the limit of 50 EUR (5000 minor units)"
    );
    // Amounts beyond i64: over the limit, never wrapped.
    let (field, detail) = refusal(
        r#"{"amountCents":18446744073709551615,"currency":"EUR"}"#,
        max,
    );
    assert_eq!(field, Some("amountCents"));
    assert!(detail.contains("over the limit of 1000000 EUR"), "{detail}");
    let (field, detail) = refusal(
        &format!(r#"{{"amount":"{}","currency":"EUR"}}"#, "9".repeat(30)),
        max,
    );
    assert_eq!(field, Some("amount"));
    assert!(detail.contains("over the limit of 1000000 EUR"), "{detail}");
    // A limit beyond i64 in minor units: only what can be stored bounds the amount.
    let (_, detail) = refusal(
        r#"{"amount":"92233720368547758.08","currency":"EUR"}"#,
        u64::MAX,
    );
    assert!(
        detail.contains("over the largest amount that can be stored"),
        "{detail}"
    );
    assert_eq!(
        new_payment(
            br#"{"amountCents":9223372036854775807,"currency":"EUR"}"#,
            &account(),
            u64::MAX
        )
        .unwrap()
        .amount_cents,
        i64::MAX
    );
}

#[test]
fn exactly_one_of_amount_and_amount_cents() {
    let (field, detail) = refusal(
        r#"{"amount":"1.00","amountCents":100,"currency":"EUR"}"#,
        DEFAULT_MAX_PAYMENT_AMOUNT,
    );
    assert_eq!(field, Some("amount"));
    assert!(
        detail.contains("both given") && detail.contains("exactly one"),
        "{detail}"
    );
    let (field, detail) = refusal(r#"{"currency":"EUR"}"#, DEFAULT_MAX_PAYMENT_AMOUNT);
    assert_eq!(field, Some("amountCents"));
    assert!(
        detail.contains("required") && detail.contains("exactly one"),
        "{detail}"
    );
}

#[test]
fn decimals_written_back() {
    for (minor, exponent, text) in [
        (1234, 2, "12.34"),
        (1, 2, "0.01"),
        (100, 2, "1.00"),
        (5, 3, "0.005"),
        (1500, 0, "1500"),
        (-1234, 2, "-12.34"),
    ] {
        assert_eq!(decimal(minor, exponent), text);
    }
    assert_eq!(limit_minor_units(1, 0), Some(1));
    assert_eq!(limit_minor_units(u64::MAX, 0), None);
    assert_eq!(limit_minor_units(1, 40), None);
}
