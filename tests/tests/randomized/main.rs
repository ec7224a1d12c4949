//! A seeded, bounded, randomized run of the whole pipeline: concurrent bursts of one account's
//! payments, client resends with the same key, an outside producer's previous-version,
//! next-version, tampered and never-accepted messages on payments.fifo, forged `PaymentCharged`
//! events on the receipts queue, poison bodies on both queues, payments that fail and are
//! reopened by an operator, a redrive of both dead-letter queues, crashes of payment-processor
//! in the middle of an invocation, payments-reconciler's runs while the traffic flows and after
//! the drains, and a message that crashes payment-processor whenever it is received, which SQS
//! moves to the dead-letter queue itself; mixed and ordered by the seed. Whatever the mix, once
//! the pipeline drains every invariant holds ([`Pipeline::stop`] checks them).
//!
//! What each addition must show:
//! - **Before any operator acts**, the payments that failed are exactly those the run made fail
//!   (refused by the failure switch): an outage, a crash, a reconciler's run or another client's
//!   traffic never fails an innocent payment. (A refused payment whose invocation crashed may be
//!   charged instead: the switch refuses its first attempt only.)
//! - **Crashes** ([`crash`]): at points the seed chooses (request `n` of the invocation's
//!   DynamoDB or SQS client, or after its work), before the bursts, the adversary and the
//!   operators, the invocation ends as a crashed process does and its whole batch comes back.
//!   Every crash point is reached, every message of a crashed batch is received again, and
//!   every innocent payment of a crashed batch ends charged (exactly once: the final check's
//!   ledger).
//! - **The reconciler** ([`operators::reconcile`], with a wait of 1 s instead of 5 minutes before
//!   it acts on a payment left `accepted`): during the bursts, once they are answered (their
//!   payments still being charged; this one or the first at least), once the resends are sent,
//!   after the first drain, as the seed chooses, and always after the last drain (looking up
//!   every receipt and auditing every charge then). Each run sends what it means to and finds no
//!   audit mismatch, and marks failed only payments the run made fail (refused, or the fatal
//!   message's).
//! - **SQS's redrive**: the fatal message (an accepted payment's, or a body that is no payment,
//!   as the seed chooses; in a message group of its own) is sent once payments.fifo holds
//!   nothing else, since a crash takes its whole batch back with it and the messages batched
//!   with it would be received as often. It is received exactly `maxReceiveCount` times (the
//!   template's, applied by the local SQS as SQS applies it), then SQS moves it, and it is the
//!   only message SQS moved. A move is not known to be the message's fault: the reconciler's
//!   runs after each drain (each at the time it would run on AWS, a round of `maxReceiveCount`
//!   visibility timeouts later) send a payment's message back, `SEND_BACK_LIMIT` times, and
//!   nothing else; moved once more, its payment is marked failed as fatal on every delivery,
//!   and nothing else. The final check expects exactly that failure (declared: a message that
//!   crashes its consumer every time).
//!
//! The seed comes from `RANDOMIZED_SEED`, or from the clock (a new one each run, CI's included),
//! and is printed first, so that a failing run is repeated with `RANDOMIZED_SEED=<seed> cargo
//! nextest run -p payments-e2e --test randomized`. The crashes, the reconciler's runs and the
//! fatal message are drawn from a generator of their own, so that a seed's traffic is the same
//! with them as without.

mod crash;
mod operators;
mod traffic;

use std::collections::BTreeSet;
use std::time::Duration;

use futures_util::future::join_all;
use payments_e2e::invariants::{Failure, Scope, Snapshot};
use payments_e2e::workload::{Accepted, Fault};
use payments_e2e::{Options, Pipeline};
use payments_operations::reconcile::Report;

use crash::{Crashes, Point};
use operators::{
    When, assert_marked_only, failed, reconcile, reconcile_at, redrive_all, reopen_failed,
};
use traffic::{burst, forged_receipts, send_fatal, send_poison, send_to_receipts};

/// The variable that sets the seed.
const SEED_VAR: &str = "RANDOMIZED_SEED";

/// Marks a payment that payment-processor fails permanently on its first attempt.
const REFUSED: &str = "[refused]";

/// Marks a payment that fails its first attempt, then is charged.
const FLAKY: &str = "[flaky]";

/// Marks a message that crashes payment-processor whenever it is received ([`crash`]).
const FATAL: &str = "[fatal]";

/// How long each drain may take.
const DRAIN: Duration = Duration::from_secs(60);

fn seed() -> u64 {
    // Set and empty reads as unset: a new seed.
    let seed = match std::env::var(SEED_VAR).ok().filter(|v| !v.is_empty()) {
        Some(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{SEED_VAR}={v:?} is not a seed: give a whole number")),
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64 % 1_000_000_000_000),
    };
    eprintln!("randomized run, seed {seed} (repeat it with {SEED_VAR}={seed})");
    seed
}

/// Before any operator acts: the failed payments are those the failure switch refused, each
/// with its reason. A refused payment whose invocation crashed may be charged instead: the
/// switch refuses only its first attempt, and a crash after that attempt was counted lets the
/// next one charge it.
async fn assert_failed_are_the_refused(
    pipeline: &Pipeline,
    accepted: &[Accepted],
    crashes: &Crashes,
) {
    let failed = failed(pipeline).await;
    let crashed: BTreeSet<String> = crashes
        .crashed()
        .into_iter()
        .flat_map(|c| c.payment_ids)
        .collect();
    let refused: BTreeSet<&str> = accepted
        .iter()
        .filter(|a| a.planned.fault == Fault::Permanent)
        .map(|a| a.payment_id.as_str())
        .collect();
    for (id, reason) in &failed {
        assert!(
            refused.contains(id.as_str()),
            "{id} failed, and the run did not make it fail: {reason:?}"
        );
        assert!(
            reason.as_deref().is_some_and(|r| !r.is_empty()),
            "{id} failed without a reason"
        );
    }
    for id in refused {
        assert!(
            failed.contains_key(id) || crashed.contains(id),
            "{id} was refused and did not fail: {failed:?}"
        );
    }
}

/// Every innocent payment an invocation was processing when it crashed is charged (exactly once:
/// the final check's ledger).
async fn assert_crashed_are_charged(
    pipeline: &Pipeline,
    innocent: &BTreeSet<String>,
    crashes: &Crashes,
) {
    let stored = Snapshot::read(&pipeline.clients.dynamodb, &pipeline.tables())
        .await
        .unwrap();
    for crashed in crashes.crashed() {
        for id in crashed
            .payment_ids
            .iter()
            .filter(|id| innocent.contains(*id))
        {
            assert_eq!(
                stored.payments.get(id).map(|p| p.status.as_str()),
                Some("charged"),
                "{id}, in an invocation that crashed ({crashed:?}), is not charged"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_mix_of_traffic_and_attacks_keeps_every_invariant() {
    // The functions' logs (shown when the run fails), to follow a failing seed.
    let _ = payments_e2e::logs::init();
    let seed = seed();
    let mut rng = fastrand::Rng::with_seed(seed);
    // The crashes, the reconciler's runs and the fatal message: drawn apart, so that a seed's
    // traffic is the same with or without them.
    let mut faults = fastrand::Rng::with_seed(seed ^ 0x5eed_c4a5);
    let started = std::time::Instant::now();
    let pipeline = Pipeline::start(Options {
        fail_payments: format!("{REFUSED}:1:permanent,{FLAKY}:1"),
        ..Options::default()
    })
    .await
    .unwrap();
    let crashes = Crashes::install(&pipeline);
    let mut points = [
        faults.usize(0..=1),
        faults.usize(0..=1),
        faults.usize(0..=1),
    ];
    if points.iter().sum::<usize>() == 0 {
        points[0] = 1;
    }
    // When the reconciler runs while traffic flows: during the bursts (after a delay), once
    // they are answered (their payments still being charged), once the resends are sent; after
    // the first drain.
    let in_bursts = faults.bool().then(|| faults.u64(1_000..4_000));
    let [mut after_bursts, after_resend, after_drain] =
        [faults.bool(), faults.bool(), faults.bool()];
    // At least one run while payments wait to be charged.
    after_bursts |= in_bursts.is_none();
    let fatal_is_payment = faults.bool();
    let mut reports: Vec<Report> = Vec::new();
    let progress = |left: u64| {
        eprintln!(
            "{left} messages left at {:.1} s",
            started.elapsed().as_secs_f64()
        )
    };
    let phase = |name: &str| eprintln!("{name} at {:.1} s", started.elapsed().as_secs_f64());

    // Concurrent bursts of two accounts, a few payments of a third; and, at the same time or
    // after them as the seed says, the adversary.
    for _ in 0..points[0] {
        crashes.arm(Point::random(&mut faults));
    }
    let sizes = [rng.usize(5..=9), rng.usize(5..=9), rng.usize(2..=4)];
    let bursts = sizes.iter().enumerate().map(|(i, size)| {
        let mut rng = rng.fork();
        let pipeline = &pipeline;
        async move {
            let account = format!("acct-rnd-{seed}-{i}");
            burst(pipeline, &mut rng, &account, *size).await
        }
    });
    let reconciled_in_bursts = async {
        let delay = in_bursts?;
        tokio::time::sleep(Duration::from_millis(delay)).await;
        Some(reconcile(&pipeline, When::Traffic).await)
    };
    let (accepted, report) =
        futures_util::future::join(join_all(bursts.collect::<Vec<_>>()), reconciled_in_bursts)
            .await;
    let accepted: Vec<Accepted> = accepted.into_iter().flatten().collect();
    reports.extend(report);
    phase("bursts answered");
    if after_bursts {
        reports.push(reconcile(&pipeline, When::Traffic).await);
    }
    let innocent: Vec<&Accepted> = accepted
        .iter()
        .filter(|a| a.planned.fault == Fault::None)
        .collect();
    let (_outside, mut messages) = payments_e2e::outside::messages(&innocent, 2).unwrap();
    rng.shuffle(&mut messages);
    let forged = forged_receipts(&mut rng, &accepted);
    let resend: Vec<&Accepted> = innocent.iter().copied().filter(|_| rng.bool()).collect();
    let poison_account = accepted[rng.usize(..accepted.len())]
        .planned
        .account
        .clone();
    let wait_first = rng.bool();
    if wait_first {
        pipeline.drain(DRAIN, progress).await.unwrap();
    }
    for _ in 0..points[1] {
        crashes.arm(Point::random(&mut faults));
    }
    let sent = payments_e2e::outside::send(&pipeline.payments_publisher(), messages)
        .await
        .unwrap();
    send_to_receipts(&pipeline, forged).await;
    send_poison(&pipeline, &poison_account).await;
    phase("adversary sent");
    let resent = pipeline.resend(&resend, DRAIN).await.unwrap();
    phase("resent");
    if after_resend {
        reports.push(reconcile(&pipeline, When::Traffic).await);
    }
    pipeline.drain(DRAIN, progress).await.unwrap();
    phase("drained");
    if after_drain {
        reports.push(reconcile(&pipeline, When::Drained).await);
    }
    let innocent_ids: BTreeSet<String> = innocent.iter().map(|a| a.payment_id.clone()).collect();
    let refused_ids: BTreeSet<String> = accepted
        .iter()
        .filter(|a| a.planned.fault == Fault::Permanent)
        .map(|a| a.payment_id.clone())
        .collect();
    assert_failed_are_the_refused(&pipeline, &accepted, &crashes).await;
    assert_crashed_are_charged(&pipeline, &innocent_ids, &crashes).await;
    assert_marked_only(&reports, &refused_ids);

    // The operators: reopen what failed, redrive the dead letters, then let it drain again.
    for _ in 0..points[2] {
        crashes.arm(Point::random(&mut faults));
    }
    let redrive_first = rng.bool();
    let redriven = if redrive_first {
        redrive_all(&pipeline).await
    } else {
        0
    };
    let reopened = reopen_failed(&pipeline).await;
    let redriven = if redrive_first {
        redriven
    } else {
        redrive_all(&pipeline).await
    };
    phase("reopened and redriven");
    pipeline.drain(DRAIN, progress).await.unwrap();
    phase("drained");
    assert_eq!(crashes.pending(), 0, "every crash point was reached");
    assert_eq!(
        crashes.not_redelivered(),
        Vec::<String>::new(),
        "every message of a crashed batch came back"
    );
    assert_crashed_are_charged(&pipeline, &innocent_ids, &crashes).await;

    // A message that crashes payment-processor whenever it is received, while nothing else is
    // on payments.fifo (a crash takes its whole batch back with it, so the messages batched with
    // it would be received as often): SQS moves it to the dead-letter queue after
    // maxReceiveCount receives, and only it; the reconciler's runs after each drain send a
    // payment's message back (and only it) as often as their limit allows, then mark its
    // payment failed (and only it).
    let fatal = send_fatal(&pipeline, seed, fatal_is_payment).await;
    phase("fatal message sent");
    let limit = operators::max_receive_count(&pipeline, "PaymentsQueue").await;
    let send_back_limit = pipeline.reconciler(&[]).unwrap().config().send_back_limit;
    let rounds = if fatal.is_some() {
        send_back_limit + 1
    } else {
        1
    };
    // The reconciler's wait before acting on a payment (1 s) has passed at its first run.
    let mut at = payments_publisher::now_ms() + 2_000;
    for round in 1..=rounds {
        pipeline.drain(DRAIN, progress).await.unwrap();
        phase("fatal message moved");
        assert_eq!(
            crashes.fatal_receives(),
            limit * round,
            "the fatal message was received maxReceiveCount times, then moved by SQS (round {round})"
        );
        let report = reconcile_at(&pipeline, When::Drained, at).await;
        let (sent_back, marked) = if round < rounds {
            (Vec::from_iter(fatal.clone()), Vec::new())
        } else {
            (Vec::new(), Vec::from_iter(fatal.clone()))
        };
        assert_eq!(
            (&report.waiting.sent_back, &report.waiting.marked_failed),
            (&sent_back, &marked),
            "round {round} of {rounds}: the reconciler sends back the fatal message's payment \
             until its limit, then marks it failed, and nothing else:\n{report}"
        );
        reports.push(report);
        // A round: the template's maxReceiveCount (65) receives 180 s apart, then a run.
        at += 65 * 180 * 1000 + 300 * 1000;
    }
    // SQS moved the fatal message and nothing else (each copy sent back left the queue).
    assert_eq!(
        operators::moved_by_sqs(&pipeline).await,
        [fatal.clone().unwrap_or_else(|| "?".into())],
        "SQS moved the fatal message and nothing else"
    );
    let may_fail: BTreeSet<String> = refused_ids.iter().cloned().chain(fatal.clone()).collect();
    assert_marked_only(&reports, &may_fail);
    if let Some(id) = &fatal {
        let reason = failed(&pipeline).await[id].clone().unwrap_or_default();
        assert!(
            reason.contains(payments_operations::reconcile::send_back::FATAL_ON_EVERY_DELIVERY),
            "{reason}"
        );
    }
    let crashed = crashes.crashed();
    eprintln!(
        "seed {seed}: {} payments accepted in bursts of {sizes:?}, {sent} outside messages, \
         {resent} resent, drained before the adversary: {wait_first}, {reopened} reopened, \
         {redriven} redriven (first: {redrive_first}); crashes at {:?}; {} reconciler runs \
         ({} marked failed); the fatal message a payment's: {fatal_is_payment}, received {} \
         times; {:.1} s before the check",
        accepted.len(),
        crashed
            .iter()
            .map(|c| (c.point, c.at_request))
            .collect::<Vec<_>>(),
        reports.len(),
        reports
            .iter()
            .map(|r| r.waiting.marked_failed.len())
            .sum::<usize>(),
        crashes.fatal_receives(),
        started.elapsed().as_secs_f64()
    );
    // A refused payment may still be failed at the end (its first attempt after the operators
    // reopened what had failed); only a refused one may be, with its permanent failure.
    let refused: BTreeSet<&str> = accepted
        .iter()
        .filter(|a| a.planned.fault == Fault::Permanent)
        .map(|a| a.payment_id.as_str())
        .collect();
    let still_failed: Vec<String> = failed(&pipeline)
        .await
        .into_keys()
        .filter(|id| Some(id) != fatal.as_ref())
        .collect();
    for id in &still_failed {
        assert!(
            refused.contains(id.as_str()),
            "{id} failed at the end, and the run did not make it fail"
        );
    }
    let scope = Scope::pipeline()
        .declaring(Failure::Permanent, still_failed)
        .declaring(Failure::Fatal, fatal.clone());
    pipeline.stop_checking(&scope, &[]).await;
    eprintln!(
        "seed {seed}: {:.1} s in all",
        started.elapsed().as_secs_f64()
    );
}
