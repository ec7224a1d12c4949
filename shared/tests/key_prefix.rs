//! The engine's key prefix: refused when it could make two different keys share a stored key.

use lambda_idempotency::Idempotency;
use lambda_idempotency::key::{MAX_KEY_BYTES, MAX_PREFIX_BYTES, PrefixError};
use lambda_idempotency::store::InMemoryBackend;

fn engine() -> Idempotency<InMemoryBackend> {
    Idempotency::new(InMemoryBackend::default())
}

#[test]
fn a_prefix_that_would_collide_is_refused() {
    // `a#b` + `c` and `a` + `b#c` would both be stored as `a#b#c`.
    let err = engine().try_with_key_prefix("a#b").unwrap_err();
    assert_eq!(
        err,
        PrefixError::ContainsSeparator {
            prefix: "a#b".into(),
            position: 1
        }
    );
    assert_eq!(engine().with_key_prefix("a").stored_key("b#c"), "a#b#c");
}

#[test]
fn try_with_key_prefix_names_each_problem() {
    assert!(matches!(
        engine().try_with_key_prefix(""),
        Err(PrefixError::Empty)
    ));
    assert!(matches!(
        engine().try_with_key_prefix("x".repeat(MAX_PREFIX_BYTES + 1)),
        Err(PrefixError::TooLong { len }) if len == MAX_PREFIX_BYTES + 1
    ));
    let longest = engine()
        .try_with_key_prefix("x".repeat(MAX_PREFIX_BYTES))
        .unwrap();
    assert!(longest.stored_key(&"k".repeat(10_000)).len() <= MAX_KEY_BYTES);
    assert_eq!(
        engine()
            .try_with_key_prefix("payment-processor")
            .unwrap()
            .stored_key("p-1"),
        "payment-processor#p-1"
    );
}

#[test]
#[should_panic(expected = "contains the separator '#'")]
fn with_key_prefix_panics_on_a_separator() {
    let _ = engine().with_key_prefix("fn#1");
}

#[test]
#[should_panic(expected = "the idempotency key prefix is empty")]
fn with_key_prefix_panics_on_an_empty_prefix() {
    let _ = engine().with_key_prefix("");
}
