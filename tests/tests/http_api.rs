//! payments-api over HTTP, through the local gateway and its JWT authorizer: bad input (and a
//! token without the route's scope) is refused before anything is stored, amounts follow their currency's minor unit and the limit and
//! balances are per currency, callers own their payments and their keys, a reused key stays a
//! 422 after its idempotency record expired, concurrent POSTs with one key make one payment, and a
//! client that sends `Prefer: wait=N` learns the payment's outcome, or its state after N seconds.

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use payments_e2e::invariants::Violation;
use payments_e2e::{Options, Pipeline};

async fn scan_count(pipeline: &Pipeline, table: &str) -> usize {
    let name = &pipeline.resources.tables[table].name;
    let page = pipeline
        .clients
        .dynamodb
        .scan()
        .table_name(name)
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    page.items.unwrap_or_default().len()
}

fn problem(answer: &payments_e2e::http::Answer) -> serde_json::Value {
    assert_eq!(
        answer.content_type.as_deref(),
        Some("application/problem+json"),
        "{answer:?}"
    );
    serde_json::from_str(&answer.body).unwrap()
}

/// Each bad input gets its status and a problem+json body naming what is wrong, and neither a
/// payment nor an idempotency record is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_its_status_and_nothing_is_stored() {
    let pipeline = Pipeline::start(Options::default()).await.unwrap();
    let http = pipeline.http().as_caller("acct-1");
    let valid = r#"{"amountCents":100,"currency":"EUR"}"#;
    let long_key = "k".repeat(256);
    let big = format!(
        r#"{{"amountCents":1,"currency":"EUR","description":"{}"}}"#,
        "x".repeat(16 * 1024)
    );
    let json = "application/json";
    // (key, content type, body, status, field)
    type Case<'a> = (
        Option<&'a str>,
        Option<&'a str>,
        &'a str,
        u16,
        Option<&'a str>,
    );
    let cases: Vec<Case> = vec![
        (Some(""), Some(json), valid, 400, Some("Idempotency-Key")),
        (
            Some(&long_key),
            Some(json),
            valid,
            400,
            Some("Idempotency-Key"),
        ),
        (
            Some("clé-é"),
            Some(json),
            valid,
            400,
            Some("Idempotency-Key"),
        ),
        (None, Some(json), valid, 400, Some("Idempotency-Key")),
        (
            Some("neg"),
            Some(json),
            r#"{"amountCents":-1,"currency":"EUR"}"#,
            400,
            Some("amountCents"),
        ),
        (
            Some("cur"),
            Some(json),
            r#"{"amountCents":1,"currency":"XYZ"}"#,
            400,
            Some("currency"),
        ),
        (
            Some("json"),
            Some(json),
            "{\"accountId\":",
            400,
            Some("body"),
        ),
        (
            Some("shape"),
            Some(json),
            r#"{"account":"acct-1","amountCents":1,"currency":"EUR"}"#,
            400,
            Some("body"),
        ),
        (
            Some("nul"),
            Some(json),
            r#"{"amountCents":1,"currency":"EUR","description":"a\u0000b"}"#,
            400,
            Some("description"),
        ),
        (
            Some("fffe"),
            Some(json),
            "{\"amountCents\":1,\"currency\":\"EUR\",\"description\":\"a\u{FFFE}\"}",
            400,
            Some("description"),
        ),
        (
            Some("other"),
            Some(json),
            r#"{"accountId":"acct-2","amountCents":1,"currency":"EUR"}"#,
            403,
            Some("accountId"),
        ),
        (Some("big"), Some(json), &big, 413, Some("body")),
        (
            Some("text"),
            Some("text/plain"),
            valid,
            415,
            Some("Content-Type"),
        ),
        (
            Some("form"),
            Some("application/x-www-form-urlencoded"),
            valid,
            415,
            Some("Content-Type"),
        ),
        (Some("none"), None, valid, 415, Some("Content-Type")),
    ];
    for (key, content_type, body, status, field) in cases {
        let answer = http
            .post_raw(key, content_type, body.as_bytes().to_vec())
            .await
            .unwrap();
        assert_eq!(
            answer.status, status,
            "{key:?} {content_type:?}: {answer:?}"
        );
        let problem = problem(&answer);
        assert_eq!(problem["status"], status);
        assert_eq!(problem["field"].as_str(), field, "{answer:?}");
        let detail = problem["detail"].as_str().unwrap();
        assert!(!detail.is_empty() && !detail.contains("Error"), "{detail}");
    }
    for (method, path, allow) in [
        ("DELETE", "/payments", "POST"),
        ("PUT", "/payments", "POST"),
        ("POST", "/payments/pay_x", "GET"),
    ] {
        let answer = http.request(method, path, &[], Vec::new()).await.unwrap();
        assert_eq!(answer.status, 405, "{method} {path}: {answer:?}");
        assert_eq!(answer.allow.as_deref(), Some(allow));
        problem(&answer);
    }
    let anonymous = http.clone().with_token(None);
    let answer = anonymous.post_payment(Some("anon"), valid).await.unwrap();
    assert_eq!(answer.status, 401, "{answer:?}");
    // Scopes, checked by the gateway before the function: a read-only token cannot charge, a
    // write-only one cannot read, one with neither can do nothing; a wrong method still gets the
    // function's 405 with a payments scope.
    let scope = |name: &str| pipeline.template.parameter(name).unwrap().to_owned();
    let as_scoped = |s: &str| pipeline.http().as_caller_with_scope("acct-1", s);
    let (read_only, write_only) = (
        as_scoped(&scope("ReadScope")),
        as_scoped(&scope("WriteScope")),
    );
    let no_scope = as_scoped("");
    let forbidden = r#"{"message":"Forbidden"}"#;
    for (who, answer) in [
        (
            "read-only POST",
            read_only.post_payment(Some("ro"), valid).await,
        ),
        (
            "unscoped POST",
            no_scope.post_payment(Some("none"), valid).await,
        ),
        ("write-only GET", write_only.get("/payments/pay_x").await),
        ("unscoped GET", no_scope.get("/payments/pay_x").await),
        (
            "unscoped DELETE",
            no_scope
                .request("DELETE", "/payments", &[], Vec::new())
                .await,
        ),
    ] {
        let answer = answer.unwrap();
        assert_eq!(
            (answer.status, answer.body.as_str()),
            (403, forbidden),
            "{who}"
        );
    }
    let answer = read_only.get("/payments/pay_x").await.unwrap();
    assert_eq!(answer.status, 404, "the read-only token reads: {answer:?}");
    for client in [&read_only, &write_only] {
        let answer = client
            .request("DELETE", "/payments", &[], Vec::new())
            .await
            .unwrap();
        assert_eq!(answer.status, 405, "{answer:?}");
        assert_eq!(answer.allow.as_deref(), Some("POST"));
    }
    assert_eq!(
        scan_count(&pipeline, "PaymentsTable").await,
        0,
        "no payment stored"
    );
    assert_eq!(
        scan_count(&pipeline, "IdempotencyTable").await,
        0,
        "no key stored"
    );

    let ok = http
        .post_payment(Some(&uuid::Uuid::new_v4().to_string()), valid)
        .await
        .unwrap();
    assert_eq!(ok.status, 201, "{ok:?}");
    assert_eq!(scan_count(&pipeline, "PaymentsTable").await, 1);
    pipeline.stop().await;
}

/// Money is per currency, through the gateway and the functions with the template's
/// `MaxPaymentAmount` set to 500: an amount is checked against its currency's minor unit and the
/// limit (a `400` naming the field and the rule, nothing stored), may be sent as `amountCents` or
/// as a decimal `amount`, and each account has one balance per currency.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amounts_follow_their_currency_and_balances_are_per_currency() {
    let pipeline = Pipeline::start(Options {
        parameters: vec![("MaxPaymentAmount".into(), "500".into())],
        ..Options::default()
    })
    .await
    .unwrap();
    let http = pipeline.http().as_caller("acct-fx");
    // (body, field, detail)
    let refused = [
        (
            r#"{"amount":"100.5","currency":"JPY"}"#,
            "amount",
            "amount 100.5 JPY: JPY has no minor unit",
        ),
        (
            r#"{"amount":"12.345","currency":"EUR"}"#,
            "amount",
            "amount 12.345 EUR: EUR has 2 decimal places",
        ),
        (
            r#"{"amountCents":50001,"currency":"EUR"}"#,
            "amountCents",
            "amountCents 50001 is over the limit of 500 EUR (50000 minor units)",
        ),
        (
            r#"{"amount":"501","currency":"JPY"}"#,
            "amount",
            "amount 501 JPY is over the limit of 500 JPY (500 minor units)",
        ),
        (
            r#"{"amount":"500.001","currency":"BHD"}"#,
            "amount",
            "amount 500.001 BHD is over the limit of 500 BHD (500000 minor units)",
        ),
        (
            r#"{"amount":"1.00","amountCents":100,"currency":"EUR"}"#,
            "amount",
            "amount and amountCents are both given: give exactly one of amountCents (an integer of minor units) and amount (a decimal string of major units)",
        ),
        (
            r#"{"amountCents":1,"currency":"XAU"}"#,
            "currency",
            "currency `XAU` has no minor unit: a payment's currency must be an active ISO 4217 code with a minor unit",
        ),
    ];
    for (body, field, detail) in refused {
        let key = uuid::Uuid::new_v4().to_string();
        let answer = http.post_payment(Some(&key), body).await.unwrap();
        assert_eq!(answer.status, 400, "{body}: {answer:?}");
        let problem = problem(&answer);
        assert_eq!(problem["field"], field, "{body}");
        assert_eq!(problem["detail"], detail, "{body}");
    }
    assert_eq!(scan_count(&pipeline, "PaymentsTable").await, 0);
    assert_eq!(scan_count(&pipeline, "IdempotencyTable").await, 0);

    // At the limit, in either form; amountCents is minor units of the payment's currency.
    let accepted = [
        r#"{"amountCents":50000,"currency":"EUR"}"#,
        r#"{"amount":"2.50","currency":"EUR"}"#,
        r#"{"amount":"500","currency":"JPY"}"#,
        r#"{"amountCents":70,"currency":"JPY"}"#,
        r#"{"amount":"1.5","currency":"BHD"}"#,
    ];
    let mut ids = Vec::new();
    for body in accepted {
        let key = uuid::Uuid::new_v4().to_string();
        let answer = http.post_payment(Some(&key), body).await.unwrap();
        assert_eq!(answer.status, 201, "{body}: {answer:?}");
        let created: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
        ids.push(created["paymentId"].as_str().unwrap().to_owned());
    }
    let read = http.get(&format!("/payments/{}", ids[4])).await.unwrap();
    let read: serde_json::Value = serde_json::from_str(&read.body).unwrap();
    assert_eq!(
        (read["amountCents"].as_i64(), read["currency"].as_str()),
        (Some(1500), Some("BHD"))
    );
    pipeline
        .drain(Duration::from_secs(60), |_| {})
        .await
        .unwrap();
    let stored = pipeline.stored().await.unwrap();
    assert_eq!(stored.ledger_entries.values().sum::<usize>(), 5);
    // One balance per currency: (minor units, charges); nothing added across currencies.
    assert_eq!(
        stored.balances,
        [
            (("acct-fx".into(), "BHD".into()), (1500, 1)),
            (("acct-fx".into(), "EUR".into()), (50250, 2)),
            (("acct-fx".into(), "JPY".into()), (570, 2)),
        ]
        .into()
    );
    pipeline.stop().await;
}

/// A caller charges and reads its own account only, and its keys are its own: two callers using
/// one key make two payments.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_own_their_payments_and_their_keys() {
    let pipeline = Pipeline::start(Options::default()).await.unwrap();
    let (alice, bob) = (
        pipeline.http().as_caller("acct-alice"),
        pipeline.http().as_caller("acct-bob"),
    );
    let key = uuid::Uuid::new_v4().to_string();
    let body = r#"{"amountCents":700,"currency":"EUR"}"#;
    let a = alice.post_payment(Some(&key), body).await.unwrap();
    let b = bob.post_payment(Some(&key), body).await.unwrap();
    assert_eq!((a.status, b.status), (201, 201), "{a:?} {b:?}");
    assert!(!b.replayed, "bob's request is not a replay of alice's");
    let id = |answer: &payments_e2e::http::Answer| {
        serde_json::from_str::<serde_json::Value>(&answer.body).unwrap()["paymentId"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (alice_payment, bob_payment) = (id(&a), id(&b));
    assert_ne!(
        alice_payment, bob_payment,
        "two callers, one key: two payments"
    );

    let own = alice
        .get(&format!("/payments/{alice_payment}"))
        .await
        .unwrap();
    assert_eq!(own.status, 200, "{own:?}");
    let read: serde_json::Value = serde_json::from_str(&own.body).unwrap();
    assert_eq!(read["accountId"], "acct-alice");
    let theirs = bob
        .get(&format!("/payments/{alice_payment}"))
        .await
        .unwrap();
    assert_eq!(
        theirs.status, 404,
        "another caller's payment is not found: {theirs:?}"
    );
    assert!(!theirs.body.contains("acct-alice"));

    let charge_other = bob
        .post_payment(
            Some(&uuid::Uuid::new_v4().to_string()),
            r#"{"accountId":"acct-alice","amountCents":1,"currency":"EUR"}"#,
        )
        .await
        .unwrap();
    assert_eq!(charge_other.status, 403, "{charge_other:?}");
    pipeline
        .drain(Duration::from_secs(60), |_| {})
        .await
        .unwrap();
    let stored = pipeline.stored().await.unwrap();
    assert_eq!(stored.balance("acct-alice", "EUR"), Some((700, 1)));
    assert_eq!(stored.balance("acct-bob", "EUR"), Some((700, 1)));
    pipeline.stop().await;
}

/// After a key's idempotency record expired, the same key with another body is still a 422 (the
/// payment keeps the request's fingerprint) and stores nothing; the first body still replays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_key_is_refused_even_after_its_record_expired() {
    let pipeline = Pipeline::start(Options::default()).await.unwrap();
    let http = pipeline.http().as_caller("acct-1");
    let key = uuid::Uuid::new_v4().to_string();
    let first = r#"{"amountCents":100,"currency":"EUR"}"#;
    let created = http.post_payment(Some(&key), first).await.unwrap();
    assert_eq!(created.status, 201);

    // Expire the record, as its TTL would.
    let caller = payments_api::identity::Caller {
        id: "acct-1".into(),
        account: lambda_idempotency::publish::MessageGroupId::new("acct-1").unwrap(),
    };
    let stored_key =
        lambda_idempotency::key::stored_key(Some("payments-api"), &caller.scoped_key(&key));
    pipeline
        .clients
        .dynamodb
        .update_item()
        .table_name(&pipeline.resources.tables["IdempotencyTable"].name)
        .key("id", AttributeValue::S(stored_key))
        .update_expression("SET expiration = :past")
        .condition_expression("attribute_exists(id)")
        .expression_attribute_values(":past", AttributeValue::N("1".into()))
        .send()
        .await
        .unwrap();

    let reused = http
        .post_payment(Some(&key), r#"{"amountCents":999,"currency":"EUR"}"#)
        .await
        .unwrap();
    assert_eq!(reused.status, 422, "{reused:?}");
    assert_eq!(problem(&reused)["field"], "Idempotency-Key");
    let again = http.post_payment(Some(&key), first).await.unwrap();
    assert_eq!(again.status, 201, "{again:?}");
    assert!(again.replayed);
    assert_eq!(again.body, created.body);
    pipeline
        .drain(Duration::from_secs(60), |_| {})
        .await
        .unwrap();
    let stored = pipeline.stored().await.unwrap();
    assert_eq!(stored.payment_status.len(), 1);
    assert_eq!(
        stored.balance("acct-1", "EUR"),
        Some((100, 1)),
        "the first body, once"
    );
    pipeline.stop().await;
}

/// A client that loops on a 422 (a key reused with another body after its record expired)
/// takes no number of the account: no gap for payment-processor to pass over, so the account's
/// next payment is charged on its first delivery, however long the loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_looping_on_422_takes_no_number_of_the_account() {
    let pipeline = Pipeline::start(Options::default()).await.unwrap();
    let http = pipeline.http().as_caller("acct-loop");
    let key = uuid::Uuid::new_v4().to_string();
    let first = r#"{"amountCents":100,"currency":"EUR"}"#;
    assert_eq!(
        http.post_payment(Some(&key), first).await.unwrap().status,
        201
    );
    let caller = payments_api::identity::Caller {
        id: "acct-loop".into(),
        account: lambda_idempotency::publish::MessageGroupId::new("acct-loop").unwrap(),
    };
    let stored_key =
        lambda_idempotency::key::stored_key(Some("payments-api"), &caller.scoped_key(&key));
    pipeline
        .clients
        .dynamodb
        .update_item()
        .table_name(&pipeline.resources.tables["IdempotencyTable"].name)
        .key("id", AttributeValue::S(stored_key))
        .update_expression("SET expiration = :past")
        .condition_expression("attribute_exists(id)")
        .expression_attribute_values(":past", AttributeValue::N("1".into()))
        .send()
        .await
        .unwrap();
    let accounts = &pipeline.resources.tables["AccountsTable"].name;
    let next = || async {
        payments_model::order::Account::read(&pipeline.clients.dynamodb, accounts, "acct-loop")
            .await
            .unwrap()
            .next
    };
    let before = next().await;
    // Each 422 forgets the record its request took, so each repeat is a first request again.
    for n in 0..30 {
        let body = format!(r#"{{"amountCents":{},"currency":"EUR"}}"#, 200 + n);
        let reused = http.post_payment(Some(&key), &body).await.unwrap();
        assert_eq!(reused.status, 422, "{reused:?}");
    }
    assert_eq!(
        next().await,
        before,
        "a request answered 422 took a number of the account"
    );
    let later = http
        .post_payment(Some(&uuid::Uuid::new_v4().to_string()), first)
        .await
        .unwrap();
    assert_eq!(later.status, 201, "{later:?}");
    pipeline
        .drain(Duration::from_secs(60), |_| {})
        .await
        .unwrap();
    let stored = pipeline.stored().await.unwrap();
    assert_eq!(
        stored.balance("acct-loop", "EUR"),
        Some((200, 2)),
        "both payments charged, once each"
    );
    pipeline.stop().await;
}

/// 20 concurrent POSTs with one Idempotency-Key produce one payment, and every answer is the
/// stored 201 or a 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_posts_with_one_key_make_one_payment() {
    let pipeline = Pipeline::start(Options::default()).await.unwrap();
    let http = pipeline.http().as_caller("acct-race");
    let key = uuid::Uuid::new_v4().to_string();
    let body =
        r#"{"accountId":"acct-race","amountCents":4200,"currency":"EUR","description":"race"}"#;
    let answers =
        futures_util::future::join_all((0..20).map(|_| http.post_payment(Some(&key), body))).await;
    let answers: Vec<_> = answers.into_iter().map(Result::unwrap).collect();
    let created: Vec<_> = answers.iter().filter(|a| a.status == 201).collect();
    assert!(
        answers.iter().all(|a| a.status == 201 || a.status == 409),
        "{answers:?}"
    );
    assert!(!created.is_empty());
    assert!(
        created.windows(2).all(|w| w[0].body == w[1].body),
        "every 201 is the stored one"
    );
    assert_eq!(
        created.iter().filter(|a| !a.replayed).count(),
        1,
        "exactly one POST ran"
    );
    pipeline
        .drain(Duration::from_secs(60), |_| {})
        .await
        .unwrap();
    let stored = pipeline.stored().await.unwrap();
    assert_eq!(stored.payment_status.len(), 1, "one payment");
    assert_eq!(
        stored.ledger_entries.values().sum::<usize>(),
        1,
        "charged once"
    );
    pipeline.stop().await;
}

/// `POST /payments` of `body` with `key` and these `Prefer` values.
async fn post_preferring(
    http: &payments_e2e::http::HttpClient,
    key: &str,
    body: &str,
    prefer: &str,
) -> payments_e2e::http::Answer {
    let headers = [
        ("idempotency-key", key),
        ("content-type", "application/json"),
        ("prefer", prefer),
    ];
    http.request("POST", "/payments", &headers, body.as_bytes().to_vec())
        .await
        .unwrap()
}

fn json(answer: &payments_e2e::http::Answer) -> serde_json::Value {
    serde_json::from_str(&answer.body).unwrap()
}

/// With `Prefer: wait` while the pipeline runs: a POST never waits (payments-api's capacity is
/// for POSTs: it answers at once, without `Preference-Applied`, as RFC 7240 allows), a retry
/// with the key replays that answer, and a GET with `Prefer: wait` (payments-reader) answers
/// once the payment is charged and names the wait it applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_waits_learns_its_payment_was_charged() {
    let pipeline = Pipeline::start(Options::default()).await.unwrap();
    let http = pipeline.http().as_caller("acct-wait");
    let key = uuid::Uuid::new_v4().to_string();
    let body = r#"{"amountCents":250,"currency":"EUR"}"#;

    let created = post_preferring(&http, &key, body, "wait=10").await;
    assert_eq!(created.status, 201, "{created:?}");
    assert!(!created.replayed);
    assert_eq!(created.preference_applied, None, "a POST never waits");
    assert_eq!(json(&created)["status"], "accepted", "{created:?}");
    let id = json(&created)["paymentId"].as_str().unwrap().to_owned();

    let replayed = post_preferring(&http, &key, body, "respond-async, Wait=10").await;
    assert_eq!(replayed.status, 201, "{replayed:?}");
    assert!(replayed.replayed);
    assert_eq!(replayed.preference_applied, None);
    assert_eq!(replayed.body, created.body);

    let read = http
        .request(
            "GET",
            &format!("/payments/{id}"),
            &[("prefer", "wait=10")],
            Vec::new(),
        )
        .await
        .unwrap();
    assert_eq!(read.status, 200, "{read:?}");
    assert_eq!(read.preference_applied.as_deref(), Some("wait=10"));
    assert_eq!(json(&read)["status"], "charged");
    assert_eq!(json(&read)["amountCents"], 250);
    pipeline.stop().await;
}

/// Without payment-processor the payment stays `accepted`: a POST with `Prefer: wait` answers at
/// once, and a GET with it after the wait, with the body it gives without the header, naming the
/// wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_waits_in_vain_gets_the_state_after_the_wait() {
    let pipeline = Pipeline::start(Options {
        start_processor: false,
        ..Options::default()
    })
    .await
    .unwrap();
    let http = pipeline.http().as_caller("acct-wait");
    let key = uuid::Uuid::new_v4().to_string();
    let body = r#"{"amountCents":300,"currency":"EUR"}"#;

    let waited = post_preferring(&http, &key, body, "wait=2").await;
    assert_eq!(waited.status, 201, "{waited:?}");
    assert_eq!(waited.preference_applied, None, "a POST never waits");
    assert_eq!(json(&waited)["status"], "accepted");
    let stored = http.post_payment(Some(&key), body).await.unwrap();
    assert_eq!(
        waited.body, stored.body,
        "the same body as without the header"
    );

    let id = json(&waited)["paymentId"].as_str().unwrap().to_owned();
    let path = format!("/payments/{id}");
    let plain = http.get(&path).await.unwrap();
    let read = http
        .request("GET", &path, &[("prefer", "wait=1")], Vec::new())
        .await
        .unwrap();
    assert_eq!(read.status, 200, "{read:?}");
    assert_eq!(read.preference_applied.as_deref(), Some("wait=1"));
    assert_eq!(json(&read)["status"], "accepted");
    assert_eq!(read.body, plain.body);
    assert_eq!(plain.preference_applied, None);
    // Without payment-processor the payment stays accepted, its message on payments.fifo.
    pipeline
        .stop_expecting(&[
            Violation::Undrained {
                queue: "PaymentsQueue".into(),
                messages: 1,
            },
            Violation::Unsettled {
                payment_id: id,
                status: "accepted".into(),
            },
        ])
        .await;
}
