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

// Each test of this file runs in a process of its own (nextest), so setting the variable here
// touches no other test.
#[test]
fn keys_are_prefixed_with_the_function_name_by_default() {
    // SAFETY: no other thread of this test process reads the environment.
    unsafe { std::env::set_var("AWS_LAMBDA_FUNCTION_NAME", "orders-consumer") };
    let engine = Idempotency::new(InMemoryBackend::default());
    assert_eq!(engine.key_prefix(), Some("orders-consumer"));
    assert_eq!(engine.stored_key("o-1"), "orders-consumer#o-1");
    // An explicit prefix overrides it; no prefix is an explicit choice.
    let explicit = Idempotency::new(InMemoryBackend::default()).with_key_prefix("orders");
    assert_eq!(explicit.stored_key("o-1"), "orders#o-1");
    let bare = Idempotency::new(InMemoryBackend::default()).without_key_prefix();
    assert_eq!(bare.stored_key("o-1"), "o-1");
}

#[tokio::test]
async fn two_functions_sharing_a_table_never_answer_for_each_other() {
    use lambda_idempotency::Outcome;
    use std::sync::Arc;
    let table = Arc::new(InMemoryBackend::default());
    let engine_of = |function: &str| {
        // SAFETY: as above; the engine reads the variable when it is made.
        unsafe { std::env::set_var("AWS_LAMBDA_FUNCTION_NAME", function) };
        Idempotency::new(table.clone())
    };
    let (shipping, billing) = (engine_of("shipping"), engine_of("billing"));
    let body = br#"{"orderId":"o-1"}"#;
    let work = |what: &'static str| move || async move { Ok::<_, std::io::Error>(what.to_owned()) };
    assert_eq!(
        shipping
            .run("o-1", body, None, work("shipped"))
            .await
            .unwrap(),
        Outcome::Ran("shipped".to_owned())
    );
    assert_eq!(
        billing
            .run("o-1", body, None, work("billed"))
            .await
            .unwrap(),
        Outcome::Ran("billed".to_owned()),
        "the other function's record under the same key does not answer for this one"
    );
}

#[test]
fn outside_lambda_there_is_no_default_prefix() {
    // SAFETY: as above.
    unsafe { std::env::remove_var("AWS_LAMBDA_FUNCTION_NAME") };
    let engine = Idempotency::new(InMemoryBackend::default());
    assert_eq!(engine.key_prefix(), None);
    assert_eq!(engine.stored_key("o-1"), "o-1");
}
