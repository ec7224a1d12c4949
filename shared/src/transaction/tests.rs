//! The `ClientRequestToken` of a transaction ([`request_token`]).

use super::request_token;

/// DynamoDB takes a `ClientRequestToken` of 1 to 36 printable characters.
fn valid(token: &str) -> bool {
    (1..=36).contains(&token.len()) && token.bytes().all(|b| b.is_ascii_graphic())
}

#[test]
fn a_request_token_names_the_attempt_and_the_round() {
    let owner = "0123456789abcdef0123456789abcdef";
    let token = request_token("fn#k", owner, 0);
    assert_eq!(token, format!("{owner}-0"));
    assert_eq!(
        request_token("fn#k", owner, 0),
        token,
        "the same for every try"
    );
    assert_ne!(
        request_token("fn#k", owner, 1),
        token,
        "new after contention"
    );
    let other = "fedcba9876543210fedcba9876543210";
    assert_ne!(
        request_token("fn#k", other, 0),
        token,
        "new for another attempt"
    );
    assert!(valid(&token) && valid(&request_token("fn#k", owner, 999)));
}

#[test]
fn a_request_token_that_would_not_fit_is_hashed() {
    let owner = "0123456789abcdef0123456789abcdef";
    // Past 36 characters, and without an owner: a hash of the key, the owner and the round.
    let cases = [
        (owner, 1_000),
        ("an-owner-token-longer-than-any-the-engine-makes", 0),
        ("", 0),
    ];
    for (owner, round) in cases {
        let token = request_token("fn#k", owner, round);
        assert!(valid(&token), "{token}");
        assert_eq!(token.len(), 32, "{token}");
        assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{token}");
        assert_ne!(request_token("fn#k", owner, round + 1), token);
        assert_ne!(request_token("fn#other", owner, round), token);
    }
}
