use super::table::{Before, Event, ON_ITEM, TRANSITIONS};
use super::*;

fn record(status: Status) -> IdempotencyRecord {
    IdempotencyRecord {
        key: "k".into(),
        status,
        expires_at: 100,
        lease_until_ms: Some(50_000),
        owner: Some("t".into()),
        payload_hash: "h".into(),
        attempts: 0,
        last_error: None,
        result: None,
        result_omitted: false,
    }
}

#[test]
fn every_transition_from_every_state_is_in_the_table_once_and_the_functions_agree() {
    let now_ms = 1_800_000_000_000;
    for before in Before::ALL {
        for event in [
            Event::AcquireSame,
            Event::AcquireOther,
            Event::CompleteOwn,
            Event::CompleteStale,
            Event::FailOwn,
            Event::FailStale,
            Event::FailOwnNotCounted,
            Event::ResetAttempts,
            Event::CommitSame,
            Event::CommitOther,
            Event::RecordFailureSame,
            Event::RecordFailureOther,
            Event::RecordFailureOwn,
        ] {
            let rows: Vec<_> = TRANSITIONS
                .iter()
                .filter(|r| r.before == before && r.event == event)
                .collect();
            assert_eq!(rows.len(), 1, "{before:?} x {event:?}: {rows:?}");
            let stored = before.record("k", now_ms);
            let (after, _) = event.apply(stored.as_ref(), "k", now_ms);
            assert_eq!(after, rows[0].after, "{before:?} x {event:?}");
        }
    }
}

#[test]
fn a_record_on_an_item_holds_its_key_whatever_its_expiry() {
    let now_ms = 1_800_000_000_000;
    for row in ON_ITEM {
        let stored = row.before.record("k", now_ms);
        let (after, kept) = row.event.apply_on_item(stored.as_ref(), "k", now_ms);
        assert_eq!(after, row.after, "{row:?}");
        if stored.is_some() {
            assert_eq!(kept, stored, "{row:?}: never rewritten");
        }
    }
    assert_eq!(ON_ITEM.len(), 6);
}

#[test]
fn completed_blocks_until_expiry() {
    let r = record(Status::Completed);
    assert!(!r.is_replaceable(99_999));
    assert!(!r.is_replaceable(100_999), "expiry is in whole seconds");
    assert!(r.is_replaceable(101_000));
}

#[test]
fn in_progress_blocks_until_lease_end() {
    let r = record(Status::InProgress);
    assert!(!r.is_replaceable(50_000));
    assert!(r.is_replaceable(50_001));
}

#[test]
fn a_failed_record_is_replaceable_by_any_payload_and_carries_attempts_to_its_own() {
    let r = record(Status::Failed);
    assert!(r.is_replaceable(0));
    assert!(r.carries_attempts_to("h", 0));
    assert!(
        !r.carries_attempts_to("other", 0),
        "a corrected payload starts again"
    );
    assert!(
        !r.carries_attempts_to("h", 101_000),
        "expired: starts again"
    );
}

#[test]
fn in_progress_never_expires_before_its_lease_ends() {
    let mut r = record(Status::InProgress);
    r.lease_until_ms = Some(200_000);
    assert!(!r.is_replaceable(150_000), "expired, but leased");
    assert!(r.is_replaceable(200_001));
}

#[test]
fn a_record_without_a_lease_is_held_until_it_expires() {
    let mut r = record(Status::InProgress);
    r.lease_until_ms = None;
    assert!(r.is_held(100_999));
    assert!(!r.is_replaceable(100_999));
    assert!(r.is_replaceable(101_000));
    r.status = Status::Failed;
    assert!(!r.is_held(0), "only an in-progress record is held");
    assert!(r.is_replaceable(0));
}

#[test]
fn an_update_finds_its_own_earlier_try() {
    let complete = Update::Complete {
        owner: "t".into(),
        payload_hash: "h".into(),
        expires_at: 1,
        result: None,
        result_omitted: false,
    };
    let fail = Update::Fail {
        owner: "t".into(),
        error: "e".into(),
        counted: true,
    };
    assert!(record(Status::Completed).shows_applied(&complete));
    assert!(!record(Status::Failed).shows_applied(&complete));
    assert!(record(Status::Failed).shows_applied(&fail));
    let mut other = record(Status::Completed);
    other.owner = Some("someone else".into());
    assert!(!other.shows_applied(&complete));
    assert!(!record(Status::Failed).shows_applied(&Update::ResetAttempts));
}

#[test]
fn a_failure_stores_its_error_truncated() {
    let long = "é".repeat(MAX_ERROR_LEN);
    let t = update(
        Some(&record(Status::InProgress)),
        &Update::Fail {
            owner: "t".into(),
            error: long,
            counted: true,
        },
    );
    let written = t.write.unwrap();
    assert!(written.last_error.as_ref().unwrap().len() <= MAX_ERROR_LEN);
    assert_eq!(t.answer, Updated::Applied { attempts: Some(1) });
}

#[test]
fn truncates_on_char_boundary() {
    let long = "é".repeat(MAX_ERROR_LEN);
    let t = truncate_error(&long);
    assert!(t.len() <= MAX_ERROR_LEN);
    assert!(t.ends_with("..."));
    assert_eq!(truncate_error("short"), "short");
}

#[test]
fn status_round_trips() {
    for s in [Status::InProgress, Status::Completed, Status::Failed] {
        assert_eq!(Status::parse(s.as_str()), Some(s));
    }
    assert_eq!(Status::parse("nope"), None);
}
