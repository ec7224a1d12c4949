//! Each backend against the state machine's table of transitions
//! ([`lambda_idempotency::state::table::TRANSITIONS`]): every row's starting state is written
//! through the backend, the row's event is sent to it, and its answer and the record it stores
//! afterwards must be what the table and the pure functions of `state` say.

use lambda_idempotency::payload::PayloadHash;
use lambda_idempotency::state::table::{After, Before, Event, OWN, SAME, TRANSITIONS};
use lambda_idempotency::state::{IdempotencyRecord, Put, Status, Update, classify};
use lambda_idempotency::store::{Backend, Commit, Failure, TransactionalBackend};
use lambda_idempotency::time::Clock;

use super::Suite;

/// How long after the starting state is written the event comes: time enough for a lease to
/// end (a minute) or a record to expire (an hour), by the suite's manual clock. The records are
/// written live, so that a store with a TTL of its own (Redis) keeps them.
fn event_delay_ms(before: Before) -> i64 {
    match before {
        Before::LeaseEnded => 2 * 60_000,
        Before::CompletedExpired | Before::FailedExpired => 2 * 3_600_000,
        _ => 0,
    }
}

/// Writes `before`'s state under `key` through the backend, at `now_ms`.
async fn write_state<B: Backend>(backend: &B, before: Before, key: &str, now_ms: i64) {
    // Every stored state starts as the in-progress record of a live lease.
    let Some(mut record) = Before::Held.record(key, now_ms) else {
        return;
    };
    if before == Before::Absent {
        return;
    }
    record.attempts = 0;
    record.last_error = None;
    record.result = None;
    assert!(matches!(
        backend.put(&record, now_ms).await.unwrap(),
        Put::Written { .. }
    ));
    let settle = match before {
        Before::Completed | Before::CompletedExpired => Update::Complete {
            owner: OWN.to_owned(),
            payload_hash: SAME.to_owned(),
            expires_at: record.expires_at,
            result: Some("42".to_owned()),
            result_omitted: false,
        },
        Before::Failed | Before::FailedExpired => Update::Fail {
            owner: OWN.to_owned(),
            error: "boom".to_owned(),
            counted: true,
        },
        _ => return,
    };
    backend.update(key, &settle, now_ms).await.unwrap();
}

/// What the backend answered, as a row of the table says it.
async fn send<B: TransactionalBackend>(backend: &B, event: Event, key: &str, now_ms: i64) -> After {
    let refused = |existing: IdempotencyRecord| {
        After::refused(classify(
            existing,
            &PayloadHash::stored(event.payload_hash()),
            now_ms,
        ))
    };
    let new = event.new_record(key, now_ms);
    match event {
        Event::CommitSame | Event::CommitOther => {
            let hash = PayloadHash::raw(key.as_bytes());
            let token = &hash.as_str()[..32];
            match backend.commit(&new, &[], token, now_ms).await.unwrap() {
                Commit::Committed => After::Completed,
                Commit::Exists(existing) => refused(existing),
                other => panic!("{event:?}: {other:?}"),
            }
        }
        Event::RecordFailureSame | Event::RecordFailureOther | Event::RecordFailureOwn => {
            match backend.record_failure(&new, now_ms).await.unwrap() {
                Failure::Recorded { attempts } => After::Failed { attempts },
                Failure::Exists(existing) => refused(existing),
            }
        }
        _ => send_lease_mode(backend, event, key, now_ms).await,
    }
}

async fn send_lease_mode<B: Backend>(backend: &B, event: Event, key: &str, now_ms: i64) -> After {
    if let Some(update) = event.update(now_ms) {
        let updated = backend.update(key, &update, now_ms).await.unwrap();
        let after = backend.get(key, now_ms).await.unwrap();
        return After::of_update(&update, &updated, after.as_ref());
    }
    match backend
        .put(&event.new_record(key, now_ms), now_ms)
        .await
        .unwrap()
    {
        Put::Written { attempts, replaced } => After::Started {
            attempts,
            replaced: replaced.is_some(),
        },
        Put::Exists(existing) => After::refused(classify(
            existing,
            &PayloadHash::stored(event.payload_hash()),
            now_ms,
        )),
    }
}

/// The fields a transition decides.
fn decided(record: Option<&IdempotencyRecord>) -> Option<(Status, u32, Option<&str>, &str)> {
    record.map(|r| {
        (
            r.status,
            r.attempts,
            r.owner.as_deref(),
            r.payload_hash.as_str(),
        )
    })
}

/// Runs every row whose event `include` takes; `send` sends an event to the backend.
async fn check_rows<B, F>(s: &Suite<B>, include: fn(Event) -> bool, send: F)
where
    B: Backend + Clone + 'static,
    F: AsyncFn(&B, Event, &str, i64) -> After,
{
    let backend = s.engine.backend();
    let start = s.clock.now_ms();
    let mut checked = 0;
    for (i, row) in TRANSITIONS.iter().enumerate() {
        if !include(row.event) {
            continue;
        }
        let key = format!("transition-{i}");
        write_state(backend, row.before, &key, start).await;
        let now_ms = start + event_delay_ms(row.before);
        let stored = backend.get(&key, now_ms).await.unwrap();
        let (_, model) = row.event.apply(stored.as_ref(), &key, now_ms);
        let after = send(backend, row.event, &key, now_ms).await;
        let what = format!("{:?} x {:?}", row.before, row.event);
        assert_eq!(after, row.after, "{what}: the backend's answer");
        let now_stored = backend.get(&key, now_ms).await.unwrap();
        assert_eq!(
            decided(now_stored.as_ref()),
            decided(model.as_ref()),
            "{what}: the stored record"
        );
        checked += 1;
    }
    assert!(checked > 0);
}

/// The lease mode's rows: acquire, complete, fail, reset attempts.
pub async fn follows_the_table_of_transitions<B: Backend + Clone + 'static>(s: &Suite<B>) {
    check_rows(
        s,
        |event| !event.is_transactional(),
        async |backend: &B, event, key: &str, now_ms| {
            send_lease_mode(backend, event, key, now_ms).await
        },
    )
    .await;
}

/// Every row, the transactional mode's commit and recorded failure included.
pub async fn follows_the_table_of_transitions_in_transactional_mode<B>(s: &Suite<B>)
where
    B: TransactionalBackend + Clone + 'static,
{
    check_rows(
        s,
        |_| true,
        async |backend: &B, event, key: &str, now_ms| send(backend, event, key, now_ms).await,
    )
    .await;
}
