//! A burst of one account's payments through the local gateway: concurrent `POST /payments` with
//! distinct Idempotency-Keys for the same account are all accepted (a 5xx retried with its key,
//! as a client does, when the machine is too slow for the function's timeout), each with a number
//! of its own, and the pipeline then charges each exactly once, in its account's order. The
//! account's item stays as small, whatever the number of payments not yet settled. Those run
//! without AWS's limits; the last test fires 200 POSTs at a gateway that applies them, as a
//! client of the deployed API would see it (429s, throttled 500s, retries).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use payments_e2e::invariants::Violation;
use payments_e2e::{Options, Pipeline};
use payments_model::order::{Account, Holder};

type Item = HashMap<String, AttributeValue>;

async fn scan(pipeline: &Pipeline, logical_id: &str) -> Vec<Item> {
    let table = &pipeline.resources.tables[logical_id].name;
    payments_e2e::checks::scan(&pipeline.clients.dynamodb, table)
        .await
        .unwrap()
}

fn n(item: &Item, name: &str) -> Option<i64> {
    item.get(name)?.as_n().ok()?.parse().ok()
}

fn s<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    item.get(name)?.as_s().ok().map(String::as_str)
}

/// `count` concurrent POSTs of `account`'s caller, each with its own key: asserts that every
/// answer is a 201 of a new payment, and answers the payments' ids.
async fn post_a_burst(pipeline: &Pipeline, account: &str, count: usize) -> Vec<String> {
    let http = pipeline.http().as_caller(account);
    let started = std::time::Instant::now();
    let answers = futures_util::future::join_all((0..count).map(|i| {
        let http = http.clone();
        async move {
            let body = format!(r#"{{"amountCents":{},"currency":"EUR"}}"#, 100 + i);
            http.post_payment(Some(&format!("burst-{count}-{i}")), &body)
                .await
                .unwrap()
        }
    }))
    .await;
    eprintln!("{count} POSTs answered in {:?}", started.elapsed());
    // On a machine of few cores, 200 invocations at once can outlast the function's timeout,
    // which API Gateway answers 500: such a POST is retried with its key, as the API's docs tell
    // a client to do, and is then accepted or replayed, never made twice.
    let mut answers = answers;
    let mut retried = std::collections::BTreeSet::new();
    for (i, answer) in answers.iter_mut().enumerate() {
        for _ in 0..5 {
            if !matches!(answer.status, 500 | 503 | 409) {
                break;
            }
            retried.insert(i);
            tokio::time::sleep(Duration::from_millis(200)).await;
            let body = format!(r#"{{"amountCents":{},"currency":"EUR"}}"#, 100 + i);
            *answer = http
                .post_payment(Some(&format!("burst-{count}-{i}")), &body)
                .await
                .unwrap();
        }
    }
    eprintln!("{} POSTs retried after a 500, 503 or 409", retried.len());
    let mut statuses: HashMap<u16, usize> = HashMap::new();
    for a in &answers {
        *statuses.entry(a.status).or_default() += 1;
    }
    assert_eq!(
        statuses,
        HashMap::from([(201, count)]),
        "every POST of the burst is accepted; first other answer: {:?}",
        answers.iter().find(|a| a.status != 201)
    );
    assert!(
        answers
            .iter()
            .enumerate()
            .all(|(i, a)| retried.contains(&i) || !a.replayed),
        "each key ran once: only a retried POST may be a replay"
    );
    let mut ids: Vec<String> = answers
        .iter()
        .map(|a| {
            let body: serde_json::Value = serde_json::from_str(&a.body).unwrap();
            body["paymentId"].as_str().unwrap().to_owned()
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), count, "one payment per key");
    ids
}

/// The account's item in the accounts table, and the names of its attributes, sorted.
async fn account_item(pipeline: &Pipeline, account: &str) -> (Account, Vec<String>) {
    let item = pipeline
        .clients
        .dynamodb
        .get_item()
        .table_name(&pipeline.resources.tables["AccountsTable"].name)
        .key("accountId", AttributeValue::S(account.to_owned()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .expect("the account's item");
    let mut names: Vec<String> = item.keys().cloned().collect();
    names.sort_unstable();
    (Account::of_item(Some(&item)), names)
}

/// 50 concurrent POSTs for one account are all accepted; once the pipeline drains, each payment
/// is charged exactly once, the ledger holds them in the order of their numbers, every number of
/// the account is settled, and the account's item holds its two counters only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_50_payments_of_one_account_is_served_and_charged_in_order() {
    let count = 50;
    let pipeline = Pipeline::start(Options::default()).await.unwrap();
    let account = "acct-burst-50";
    let ids = post_a_burst(&pipeline, account, count).await;
    pipeline
        .drain(Duration::from_secs(300), |_| {})
        .await
        .unwrap();

    // Each payment charged, once, with a number of its own.
    let payments = scan(&pipeline, "PaymentsTable").await;
    assert_eq!(payments.len(), count);
    let mut numbers = Vec::new();
    for p in &payments {
        assert_eq!(s(p, "status"), Some("charged"), "{p:?}");
        numbers.push(n(p, "sequence").expect("every payment is numbered"));
    }
    numbers.sort_unstable();
    numbers.dedup();
    assert_eq!(numbers.len(), count, "no two payments share a number");
    let ledger = scan(&pipeline, "LedgerTable").await;
    assert_eq!(ledger.len(), count, "one ledger entry per payment");
    let mut entries: HashMap<&str, usize> = HashMap::new();
    for e in &ledger {
        *entries.entry(s(e, "paymentId").unwrap()).or_default() += 1;
    }
    assert!(entries.values().all(|&c| c == 1), "charged once each");
    assert!(entries.keys().all(|id| ids.iter().any(|i| i == id)));
    let expected: i64 = (0..count as i64).map(|i| 100 + i).sum();
    let balance = scan(&pipeline, "BalancesTable")
        .await
        .into_iter()
        .find(|b| s(b, "accountId") == Some(account))
        .expect("the account's balance");
    assert_eq!(
        (n(&balance, "balanceCents"), n(&balance, "charges")),
        (Some(expected), Some(count as i64))
    );
    // In the account's order: sorted by number, the charges' times never go back (charges in
    // the same millisecond show no order and pass).
    let mut charges: Vec<(i64, i64)> = ledger
        .iter()
        .map(|e| (n(e, "sequence").unwrap(), n(e, "createdAt").unwrap()))
        .collect();
    charges.sort_unstable();
    if let Some(w) = charges.windows(2).find(|w| w[0].1 > w[1].1) {
        panic!(
            "number {} charged at {} after number {} at {}",
            w[0].0, w[0].1, w[1].0, w[1].1
        );
    }

    // Every number given is settled, and the account item holds its counters only.
    let (state, names) = account_item(&pipeline, account).await;
    assert_eq!(state.settled, state.next, "{state:?}");
    assert!(state.next >= count as u64, "{state:?}");
    assert_eq!(
        names,
        ["accountId", "nextSequence", "settledSequence"],
        "the account item is bounded"
    );
    pipeline.stop().await;
}

/// 200 concurrent POSTs for one account, payment-processor stopped (the 200 payments stay
/// unsettled): all are accepted, each with a number of its own that its number's item names,
/// and the account's item holds its counter only (DynamoDB refuses an item over 400 KB, which
/// would refuse every later payment of the account). Charging in order is the 50-payment test's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_200_payments_of_one_account_is_served_and_leaves_the_account_item_bounded() {
    let count = 200;
    let pipeline = Pipeline::start(Options {
        start_processor: false,
        ..Options::default()
    })
    .await
    .unwrap();
    let account = "acct-burst-200";
    let ids = post_a_burst(&pipeline, account, count).await;
    let (state, names) = account_item(&pipeline, account).await;
    assert_eq!(
        names,
        ["accountId", "nextSequence"],
        "the account item is bounded"
    );
    assert_eq!(state.settled, 0);
    let payments = scan(&pipeline, "PaymentsTable").await;
    assert_eq!(payments.len(), count);
    let mut numbers = Vec::new();
    for p in &payments {
        let id = s(p, "paymentId").unwrap();
        assert!(ids.iter().any(|i| i == id));
        let number = n(p, "sequence").expect("every payment is numbered") as u64;
        assert!(number <= state.next, "{number} was given");
        assert_eq!(
            Holder::read(
                &pipeline.clients.dynamodb,
                &pipeline.resources.tables["AccountsTable"].name,
                account,
                number
            )
            .await
            .unwrap(),
            Holder::Payment(id.to_owned()),
            "number {number}'s item names its payment"
        );
        numbers.push(number);
    }
    numbers.sort_unstable();
    numbers.dedup();
    assert_eq!(numbers.len(), count, "no two payments share a number");
    // Without payment-processor every payment stays accepted, its message on payments.fifo.
    let mut expected = vec![Violation::Undrained {
        queue: "PaymentsQueue".into(),
        messages: count as u64,
    }];
    expected.extend(ids.into_iter().map(|payment_id| Violation::Unsettled {
        payment_id,
        status: "accepted".into(),
    }));
    pipeline.stop_expecting(&expected).await;
}

/// How one POST of a burst went, retried as the API's docs advise.
#[derive(Debug)]
struct Posted {
    /// The first answer's status.
    first: u16,
    /// When the first request was sent, from the burst's start.
    sent_at: Duration,
    /// The statuses that were retried, in order.
    retried: Vec<u16>,
    /// The last answer (a `201`, or what the client gave up on).
    last: payments_e2e::http::Answer,
    /// When the last answer came, from the burst's start.
    done: Duration,
    /// How long the last request took.
    last_took: Duration,
}

/// What the API's docs tell a client to retry: API Gateway's throttling (`429`), a `500` (Lambda
/// throttling the function is one, and the function never ran), a `503`, and a `409` (the key's
/// first request still runs).
fn retryable(status: u16) -> bool {
    matches!(status, 409 | 429 | 500 | 503)
}

/// Full-jitter exponential backoff before retry `n` (1 = the first): a random wait up to
/// 100 ms × 2^(n-1), at most 10 s, or the answer's `Retry-After` when longer.
fn backoff(n: u32, retry_after: Option<u64>) -> Duration {
    let ceiling =
        Duration::from_millis(100 * 2u64.pow((n - 1).min(7))).min(Duration::from_secs(10));
    let jittered = ceiling.mul_f64(fastrand::f64());
    jittered.max(Duration::from_secs(retry_after.unwrap_or(0)))
}

/// One POST of the burst: waits for `start`, sends, and retries with the same key and body
/// while the answer is retryable (at most 100 retries).
async fn post_until_accepted(
    http: payments_e2e::http::HttpClient,
    key: String,
    body: String,
    start: Arc<tokio::sync::Barrier>,
    began: Arc<std::sync::OnceLock<Instant>>,
) -> Posted {
    start.wait().await;
    let began = *began.get_or_init(Instant::now);
    let sent_at = began.elapsed();
    let mut sent = Instant::now();
    let mut answer = http.post_payment(Some(&key), &body).await.unwrap();
    let first = answer.status;
    let mut retried = Vec::new();
    while retryable(answer.status) && retried.len() < 100 {
        retried.push(answer.status);
        tokio::time::sleep(backoff(retried.len() as u32, answer.retry_after)).await;
        sent = Instant::now();
        answer = http.post_payment(Some(&key), &body).await.unwrap();
    }
    let last_took = sent.elapsed();
    Posted {
        first,
        sent_at,
        retried,
        last: answer,
        done: began.elapsed(),
        last_took,
    }
}

/// 200 POSTs at once (40 accounts, 5 each) through the local gateway with AWS's limits and the whole
/// pipeline running: API Gateway's bucket serves its burst and answers the rest `429`
/// (`{"message":"Too Many Requests"}`); of those it lets through, payments-api's reserved
/// concurrency runs some and Lambda throttles the others (`500`). Every client retries as the
/// docs say (same key and body, backoff with jitter) and is accepted; every payment is charged
/// exactly once, and the invariant checker finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_200_posts_is_throttled_as_on_aws_and_every_retried_payment_is_charged_once() {
    let (count, accounts) = (200, 40);
    let pipeline = Pipeline::start(Options {
        aws_limits: true,
        ..Options::default()
    })
    .await
    .unwrap();
    // The limits, from the template.
    let api = pipeline.template.function_by_name("payments-api").unwrap();
    let reserved = api
        .reserved_concurrent_executions
        .expect("payments-api's reserved concurrency") as usize;
    let throttling = api
        .http_routes
        .iter()
        .find(|r| r.name == "POST /payments")
        .and_then(|r| r.throttling)
        .expect("POST /payments is throttled");
    let burst = throttling.burst_limit as usize;

    let http = pipeline.http();
    // One open connection per client first (a path with no route: no token taken, no function
    // run), so that the burst's requests leave together rather than behind 200 connects.
    let warm = futures_util::future::join_all((0..count).map(|_| http.get("/warm-up"))).await;
    assert!(
        warm.iter()
            .all(|a| a.as_ref().is_ok_and(|a| a.status == 404))
    );
    let start = Arc::new(tokio::sync::Barrier::new(count));
    let began = Arc::new(std::sync::OnceLock::new());
    let tasks: Vec<_> = (0..count)
        .map(|i| {
            let http = http.as_caller(&format!("acct-throttled-{}", i % accounts));
            let body = format!(r#"{{"amountCents":{},"currency":"EUR"}}"#, 100 + i);
            tokio::spawn(post_until_accepted(
                http,
                format!("throttled-{i}"),
                body,
                start.clone(),
                began.clone(),
            ))
        })
        .collect();
    let mut posted = Vec::new();
    for task in tasks {
        posted.push(task.await.unwrap());
    }
    let accepted_in = posted.iter().map(|p| p.done).max().unwrap();
    let mut took: Vec<Duration> = posted.iter().map(|p| p.last_took).collect();
    took.sort_unstable();
    eprintln!(
        "an accepted POST took {:?} (median), {:?} (max)",
        took[took.len() / 2],
        took[took.len() - 1]
    );

    // The first answers.
    let first = |status: u16| posted.iter().filter(|p| p.first == status).count();
    let (created, throttled, lambda_throttled) = (first(201), first(429), first(500));
    let others: Vec<u16> = posted
        .iter()
        .map(|p| p.first)
        .filter(|s| ![201, 429, 500].contains(s))
        .collect();
    let retries: usize = posted.iter().map(|p| p.retried.len()).sum();
    let retried_429 = posted
        .iter()
        .flat_map(|p| &p.retried)
        .filter(|s| **s == 429)
        .count();
    let retried_500 = posted
        .iter()
        .flat_map(|p| &p.retried)
        .filter(|s| **s == 500)
        .count();
    let max_tries = posted.iter().map(|p| p.retried.len() + 1).max().unwrap();
    // The first requests were all sent within `spread`: over it the bucket refilled `refill`.
    let spread = posted.iter().map(|p| p.sent_at).max().unwrap();
    let refill = (throttling.rate_limit * spread.as_secs_f64()).ceil() as usize;
    eprintln!(
        "burst of {count} POSTs (burst {burst}, rate {}/s, reserved concurrency {reserved}): \
         first answers 201 x{created}, 429 x{throttled}, 500 x{lambda_throttled}, other {others:?}; \
         first requests sent within {spread:?}; {retries} retries (of 429 x{retried_429}, of 500 \
         x{retried_500}), at most {max_tries} tries for one POST; all accepted after {accepted_in:?}",
        throttling.rate_limit
    );
    assert!(
        others.is_empty(),
        "only 201, 429 and 500 at first: {others:?}"
    );
    // The bucket starts full: the first `burst` requests pass it, so at most `count - burst`
    // are 429s. It lets through its burst and what it refilled while they arrived: with
    // arrivals as they were sent, `count - burst - refill` are 429s. A loaded machine's gateway
    // reads them over a second or more (50 more tokens each second), hence the wide margin: at
    // least a quarter of that.
    assert!(throttled <= count - burst, "{throttled} 429s");
    let expected = (count - burst).saturating_sub(refill);
    assert!(
        throttled * 4 >= expected,
        "{throttled} 429s: the route's bucket (burst {burst}, refilled by {refill} while they were sent) refuses about {expected}"
    );
    // Of those let through, the first `reserved` find a free unit of reserved concurrency.
    let through = count - throttled;
    assert!(created >= reserved.min(through), "{created} created");
    assert!(lambda_throttled <= through - reserved.min(through));

    // Every POST accepted in the end, each key its own payment.
    let failed: Vec<&Posted> = posted.iter().filter(|p| p.last.status != 201).collect();
    assert!(failed.is_empty(), "not accepted after retries: {failed:?}");
    let mut ids: Vec<String> = posted
        .iter()
        .map(|p| {
            let body: serde_json::Value = serde_json::from_str(&p.last.body).unwrap();
            body["paymentId"].as_str().unwrap().to_owned()
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), count, "one payment per key");

    // Each charged exactly once.
    let drain_started = Instant::now();
    pipeline
        .drain(Duration::from_secs(120), |_| {})
        .await
        .unwrap();
    let drained_in = drain_started.elapsed();
    let payments = scan(&pipeline, "PaymentsTable").await;
    assert_eq!(payments.len(), count, "no payment for a throttled request");
    assert!(payments.iter().all(|p| s(p, "status") == Some("charged")));
    let ledger = scan(&pipeline, "LedgerTable").await;
    let mut charges: HashMap<&str, usize> = HashMap::new();
    for e in &ledger {
        *charges.entry(s(e, "paymentId").unwrap()).or_default() += 1;
    }
    assert_eq!(charges.len(), count);
    assert!(charges.values().all(|&c| c == 1), "charged once each");
    eprintln!("the pipeline charged all {count} in {drained_in:?} after the last acceptance");
    pipeline.stop().await;
}
