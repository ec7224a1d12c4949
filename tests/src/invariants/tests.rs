//! Each invariant broken on purpose in a fabricated snapshot is reported, with its ids.

use super::*;

fn payment(account: &str, amount_cents: i64, status: &str) -> Payment {
    Payment {
        account: account.into(),
        amount_cents,
        currency: "EUR".into(),
        status: status.into(),
        last_error: (status == FAILED).then(|| POISONED.into()),
        ..Payment::default()
    }
}

fn entry(payment_id: &str, account: &str, amount_cents: i64) -> LedgerEntry {
    LedgerEntry {
        payment_id: payment_id.into(),
        account: account.into(),
        amount_cents,
        currency: "EUR".into(),
        created_at: 0,
    }
}

fn receipt(payment_id: &str, amount_cents: i64) -> Receipt {
    Receipt {
        payment_id: payment_id.into(),
        account: "a".into(),
        amount_cents,
        currency: "EUR".into(),
    }
}

/// The reason of a payment the failure switch refused as a poison message.
const POISONED: &str =
    "permanent failure: invalid payment: injected permanent failure (FAIL_PAYMENTS)";

/// The whole pipeline ran, and the test made p3 fail as a poison message.
fn whole() -> Scope {
    Scope::pipeline().declaring(Failure::Permanent, ["p3"])
}

/// Payments were charged, receipt-sender never ran, and the test made p3 fail as a poison
/// message.
fn charging() -> Scope {
    Scope::through_charging().declaring(Failure::Permanent, ["p3"])
}

/// Two charged payments of one account and a failed one (declared by [`whole`] and
/// [`charging`]): every invariant holds.
fn healthy() -> Snapshot {
    let mut s = Snapshot::default();
    s.payments.insert("p1".into(), payment("a", 100, CHARGED));
    s.payments.insert("p2".into(), payment("a", 250, CHARGED));
    s.payments.insert("p3".into(), payment("a", 999, FAILED));
    s.ledger = vec![entry("p1", "a", 100), entry("p2", "a", 250)];
    s.receipts = vec![receipt("p1", 100), receipt("p2", 250)];
    s.balances.insert(
        ("a".into(), "EUR".into()),
        Balance {
            cents: 350,
            charges: 2,
        },
    );
    s
}

fn balance(s: &mut Snapshot, cents: i64) {
    s.balances
        .get_mut(&("a".into(), "EUR".into()))
        .unwrap()
        .cents = cents;
}

#[test]
fn a_healthy_snapshot_has_no_violation() {
    assert_eq!(violations(&healthy(), &whole()), vec![]);
}

#[test]
fn a_payment_left_accepted_is_unsettled() {
    let mut s = healthy();
    s.payments.insert("p4".into(), payment("a", 5, "accepted"));
    assert_eq!(
        violations(&s, &whole()),
        vec![Violation::Unsettled {
            payment_id: "p4".into(),
            status: "accepted".into()
        }]
    );
}

#[test]
fn a_failed_payment_without_its_reason_is_reported() {
    let mut s = healthy();
    s.payments.get_mut("p3").unwrap().last_error = None;
    assert_eq!(
        violations(&s, &whole()),
        vec![Violation::FailedWithoutReason {
            payment_id: "p3".into()
        }]
    );
}

#[test]
fn a_charge_without_its_ledger_entry_or_with_two_is_reported() {
    let mut s = healthy();
    s.ledger.retain(|e| e.payment_id != "p2");
    balance(&mut s, 100);
    assert_eq!(
        violations(&s, &whole()),
        vec![Violation::LedgerEntries {
            payment_id: "p2".into(),
            entries: 0
        }]
    );
    let mut s = healthy();
    s.ledger.push(entry("p1", "a", 100));
    balance(&mut s, 450);
    assert_eq!(
        violations(&s, &whole()),
        vec![Violation::LedgerEntries {
            payment_id: "p1".into(),
            entries: 2
        }]
    );
}

#[test]
fn a_ledger_entry_of_another_amount_is_reported() {
    let mut s = healthy();
    s.ledger[1].amount_cents = 4242;
    balance(&mut s, 4342);
    assert_eq!(
        violations(&s, &whole()),
        vec![Violation::LedgerAmount {
            payment_id: "p2".into(),
            payment: (250, "EUR".into()),
            ledger: (4242, "EUR".into())
        }]
    );
}

#[test]
fn a_charge_without_its_receipt_or_with_two_is_reported() {
    let mut s = healthy();
    s.receipts.retain(|r| r.payment_id != "p1");
    assert_eq!(
        violations(&s, &whole()),
        vec![Violation::Receipts {
            payment_id: "p1".into(),
            receipts: 0
        }]
    );
    let mut s = healthy();
    s.receipts.push(receipt("p1", 100));
    assert_eq!(
        violations(&s, &whole()),
        vec![Violation::Receipts {
            payment_id: "p1".into(),
            receipts: 2
        }]
    );
}

#[test]
fn a_receipt_of_another_amount_is_reported() {
    let mut s = healthy();
    s.receipts[0].amount_cents = 4242;
    assert_eq!(
        violations(&s, &whole()),
        vec![Violation::ReceiptAmount {
            payment_id: "p1".into(),
            payment: (100, "EUR".into()),
            receipt: (4242, "EUR".into())
        }]
    );
}

#[test]
fn a_balance_that_is_not_its_ledger_sum_is_reported_either_way() {
    for cents in [349, 351, 0] {
        let mut s = healthy();
        balance(&mut s, cents);
        assert_eq!(
            violations(&s, &whole()),
            vec![Violation::Balance {
                account: "a".into(),
                currency: "EUR".into(),
                balance: cents,
                ledger: 350
            }]
        );
    }
    // A balance with no ledger entry at all, and ledger entries with no balance.
    let mut s = healthy();
    s.balances.clear();
    s.balances.insert(
        ("b".into(), "JPY".into()),
        Balance {
            cents: 7,
            charges: 1,
        },
    );
    assert_eq!(
        violations(&s, &whole()),
        vec![
            Violation::Balance {
                account: "a".into(),
                currency: "EUR".into(),
                balance: 0,
                ledger: 350
            },
            Violation::Balance {
                account: "b".into(),
                currency: "JPY".into(),
                balance: 7,
                ledger: 0
            }
        ]
    );
}

#[test]
fn a_receipt_without_its_charged_payment_is_reported() {
    let mut s = healthy();
    s.receipts.push(receipt("p3", 999));
    s.receipts.push(receipt("forged", 4242));
    assert_eq!(
        violations(&s, &whole()),
        vec![
            Violation::ReceiptWithoutCharge {
                payment_id: "forged".into(),
                status: String::new()
            },
            Violation::ReceiptWithoutCharge {
                payment_id: "p3".into(),
                status: FAILED.into()
            },
        ]
    );
}

#[test]
fn a_ledger_entry_without_its_charged_payment_is_reported() {
    let mut s = healthy();
    s.ledger.push(entry("p3", "a", 999));
    balance(&mut s, 1349);
    assert_eq!(
        violations(&s, &whole()),
        vec![Violation::LedgerWithoutCharge {
            payment_id: "p3".into(),
            status: FAILED.into()
        }]
    );
}

#[test]
fn expectations_are_exact() {
    let v = Violation::FailedWithoutReason {
        payment_id: "p3".into(),
    };
    let w = Violation::Unsettled {
        payment_id: "p4".into(),
        status: "accepted".into(),
    };
    let (one_v, one_w) = (std::slice::from_ref(&v), std::slice::from_ref(&w));
    assert!(Mismatch::between(one_v, one_v).is_empty());
    let m = Mismatch::between(one_v, one_w);
    assert_eq!(
        (m.unexpected, m.missing),
        (vec![v.clone()], vec![w.clone()])
    );
    let m = Mismatch::between(&[v.clone(), v.clone()], one_v);
    assert_eq!(m.unexpected, vec![v]);
}

/// A charged payment without its receipt, a receipt of another amount, and a receipt of a
/// failed payment: the receipt invariants, each broken once.
fn receipts_broken() -> Snapshot {
    let mut s = healthy();
    s.receipts = vec![receipt("p2", 1), receipt("p3", 999)];
    s
}

#[test]
fn receipt_invariants_are_checked_when_receipt_sender_ran() {
    assert_eq!(
        violations(&receipts_broken(), &whole()),
        vec![
            Violation::Receipts {
                payment_id: "p1".into(),
                receipts: 0
            },
            Violation::ReceiptAmount {
                payment_id: "p2".into(),
                payment: (250, "EUR".into()),
                receipt: (1, "EUR".into())
            },
            Violation::ReceiptWithoutCharge {
                payment_id: "p3".into(),
                status: FAILED.into()
            },
        ]
    );
}

#[test]
fn receipt_invariants_are_not_checked_when_receipt_sender_never_ran() {
    assert_eq!(violations(&receipts_broken(), &charging()), vec![]);
}

#[test]
fn through_charging_still_checks_payments_ledger_and_balances() {
    let mut s = receipts_broken();
    s.payments.insert("p4".into(), payment("a", 5, "accepted"));
    s.ledger.push(entry("p3", "a", 999));
    assert_eq!(
        violations(&s, &charging()),
        vec![
            Violation::Unsettled {
                payment_id: "p4".into(),
                status: "accepted".into()
            },
            Violation::Balance {
                account: "a".into(),
                currency: "EUR".into(),
                balance: 350,
                ledger: 1349
            },
            Violation::LedgerWithoutCharge {
                payment_id: "p3".into(),
                status: FAILED.into()
            },
        ]
    );
}

#[test]
fn a_scope_drains_every_work_queue_but_those_it_leaves() {
    let pipeline = Scope::pipeline();
    assert!(settle::WORK_QUEUES.iter().all(|q| pipeline.drains(q)));
    let charging = Scope::through_charging();
    assert!(charging.drains("PaymentsQueue"));
    assert!(!charging.drains("ReceiptsQueue"));
    let leaving = Scope::through_charging().leaving("PaymentsQueue");
    assert!(!leaving.drains("PaymentsQueue"));
}

/// Charged payments with their numbers, each ledger entry written at `at` ms.
fn numbered(s: &mut Snapshot, charges: &[(&str, i64, i64)]) {
    for (id, sequence, at) in charges {
        s.payments.get_mut(*id).unwrap().sequence = Some(*sequence);
        s.ledger
            .iter_mut()
            .find(|e| e.payment_id == *id)
            .unwrap()
            .created_at = *at;
    }
}

#[test]
fn charges_in_the_order_of_their_numbers_hold() {
    let mut s = healthy();
    numbered(&mut s, &[("p1", 1, 10), ("p2", 2, 20)]);
    assert_eq!(violations(&s, &whole()), vec![]);
}

#[test]
fn a_payment_charged_before_a_lower_number_is_reported() {
    let mut s = healthy();
    numbered(&mut s, &[("p1", 1, 30), ("p2", 2, 20)]);
    assert_eq!(
        violations(&s, &whole()),
        vec![Violation::ChargeOrder {
            account: "a".into(),
            lower: "p1".into(),
            higher: "p2".into(),
        }]
    );
}

#[test]
fn a_ledger_entry_or_receipt_of_another_account_is_reported() {
    let mut s = healthy();
    s.ledger[0].account = "b".into();
    s.receipts[1].account = "c".into();
    // The balance of account b is its ledger's sum: only the accounts differ.
    s.balances.insert(
        ("b".into(), "EUR".into()),
        Balance {
            cents: 100,
            charges: 1,
        },
    );
    balance(&mut s, 250);
    assert_eq!(
        violations(&s, &whole()),
        vec![
            Violation::WrongAccount {
                payment_id: "p1".into(),
                of: "ledger entry",
                payment: "a".into(),
                named: "b".into(),
            },
            Violation::WrongAccount {
                payment_id: "p2".into(),
                of: "receipt",
                payment: "a".into(),
                named: "c".into(),
            },
        ]
    );
}

#[test]
fn a_payment_failed_by_an_outage_or_sqs_move_is_reported() {
    for reason in [
        "moved to the dead-letter queue by SQS after its receive limit (crashes or timeouts)",
        "the ledger table is unavailable",
        "the charge timed out",
    ] {
        let mut s = healthy();
        s.payments.get_mut("p3").unwrap().last_error = Some(reason.into());
        assert_eq!(
            violations(&s, &whole()),
            vec![
                Violation::FailedInnocent {
                    payment_id: "p3".into(),
                    reason: reason.into(),
                },
                Violation::FailedOtherwise {
                    payment_id: "p3".into(),
                    declared: Failure::Permanent,
                    reason: reason.into(),
                },
            ],
            "{reason}"
        );
    }
}

#[test]
fn a_scope_declares_no_failure_unless_the_test_does() {
    for scope in [
        Scope::pipeline(),
        Scope::through_charging(),
        Scope::default(),
    ] {
        assert_eq!(
            violations(&healthy(), &scope.clone().leaving("PaymentsQueue")),
            vec![Violation::UndeclaredFailure {
                payment_id: "p3".into(),
                reason: POISONED.into(),
            }],
            "{scope:?}"
        );
    }
}

#[test]
fn only_declared_failures_may_happen() {
    assert_eq!(
        violations(
            &healthy(),
            &Scope::pipeline().declaring(Failure::Permanent, ["p9"])
        ),
        vec![
            Violation::UndeclaredFailure {
                payment_id: "p3".into(),
                reason: POISONED.into(),
            },
            Violation::NotFailed {
                payment_id: "p9".into(),
                declared: Failure::Permanent,
                status: String::new(),
            },
        ]
    );
}

#[test]
fn a_payment_failed_for_another_reason_than_declared_is_reported() {
    let spent = "handler failed: injected failure (FAIL_PAYMENTS) on attempt 5 (failed attempt 5)";
    let timed_out = "handler failed: the charge timed out (failed attempt 5)";
    for (declared, reason, innocent) in [
        (Failure::Permanent, spent, false),
        (Failure::Budget, POISONED, false),
        (Failure::Permanent, timed_out, true),
        (Failure::Budget, "the charge timed out", true),
    ] {
        let mut s = healthy();
        s.payments.get_mut("p3").unwrap().last_error = Some(reason.into());
        let mut expected = vec![Violation::FailedOtherwise {
            payment_id: "p3".into(),
            declared,
            reason: reason.into(),
        }];
        if innocent {
            expected.insert(
                0,
                Violation::FailedInnocent {
                    payment_id: "p3".into(),
                    reason: reason.into(),
                },
            );
        }
        let scope = Scope::pipeline().declaring(declared, ["p3"]);
        assert_eq!(violations(&s, &scope), expected, "{declared:?}: {reason}");
    }
    let mut s = healthy();
    s.payments.get_mut("p3").unwrap().last_error = Some(spent.into());
    let scope = Scope::pipeline().declaring(Failure::Budget, ["p3"]);
    assert_eq!(violations(&s, &scope), vec![]);
}

#[test]
fn a_declared_failure_that_was_charged_is_reported() {
    let scope = whole().declaring(Failure::Budget, ["p2"]);
    assert_eq!(
        violations(&healthy(), &scope),
        vec![Violation::NotFailed {
            payment_id: "p2".into(),
            declared: Failure::Budget,
            status: CHARGED.into(),
        }]
    );
}

#[test]
fn a_marker_declares_the_failures_of_the_payments_it_marks() {
    let mut s = healthy();
    s.payments.get_mut("p3").unwrap().description = "coffee [bad]".into();
    let marked = |marker: &str| Scope::pipeline().declaring_marked(Failure::Permanent, marker);
    assert_eq!(violations(&s, &marked("[bad]")), vec![]);
    assert_eq!(
        violations(&s, &marked("[other]")),
        vec![Violation::UndeclaredFailure {
            payment_id: "p3".into(),
            reason: POISONED.into(),
        }]
    );
    s.payments.get_mut("p1").unwrap().description = "tea [bad]".into();
    assert_eq!(
        violations(&s, &marked("[bad]")),
        vec![Violation::NotFailed {
            payment_id: "p1".into(),
            declared: Failure::Permanent,
            status: CHARGED.into(),
        }]
    );
}
