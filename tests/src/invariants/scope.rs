//! What a test ran and what it made fail: which stages' invariants apply, which queues it leaves
//! holding messages, and which payments it makes fail on purpose, each with the kind of its
//! failure. A scope declares no failure unless the test declares it: any other failed payment is
//! a violation.

use std::collections::BTreeMap;
use std::fmt;

use super::Payment;

/// Why a test makes a payment fail on purpose, as the payment's reason (`lastError`) must say
/// it. A message tampered with, or one of a payment never accepted, fails no payment: it is
/// dead-lettered, and the payments table is left as it was (payment-processor marks a payment
/// failed only from a message that agrees with it), so it has nothing to declare here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Failure {
    /// A poison message: refused as one no retry can charge (an invalid payment, the failure
    /// switch's `permanent`). Its reason says `permanent failure`.
    Permanent,
    /// Its attempt budget used up by the handler's own failures (the failure switch's `fail` or
    /// `panic` on every attempt). Its reason names its last failed attempt (`failed attempt N`)
    /// or the budget (`attempt budget used up`), and no permanent failure.
    Budget,
    /// A message that crashes its consumer on every delivery: SQS moved it to the dead-letter
    /// queue again after payments-reconciler sent it back as often as its limit allows. Its
    /// reason says `fatal to payment-processor on every delivery`
    /// ([`FATAL_ON_EVERY_DELIVERY`](payments_operations::reconcile::send_back::FATAL_ON_EVERY_DELIVERY)).
    Fatal,
}

impl Failure {
    /// Whether a failed payment's `reason` is a failure of this kind.
    ///
    /// ```
    /// use payments_e2e::invariants::Failure;
    ///
    /// let poison = "permanent failure: invalid payment: injected permanent failure (FAIL_PAYMENTS)";
    /// let spent = "handler failed: injected failure (FAIL_PAYMENTS) on attempt 5 (failed attempt 5)";
    /// assert!(Failure::Permanent.explains(poison) && !Failure::Budget.explains(poison));
    /// assert!(Failure::Budget.explains(spent) && !Failure::Permanent.explains(spent));
    /// assert!(!Failure::Budget.explains("the charge timed out"));
    /// let fatal = payments_operations::reconcile::send_back::fatal_reason(3);
    /// assert!(Failure::Fatal.explains(&fatal) && !Failure::Budget.explains(&fatal));
    /// ```
    pub fn explains(self, reason: &str) -> bool {
        let permanent = reason.contains("permanent failure");
        let fatal =
            reason.contains(payments_operations::reconcile::send_back::FATAL_ON_EVERY_DELIVERY);
        match self {
            Self::Permanent => permanent,
            Self::Fatal => fatal,
            Self::Budget => {
                !permanent
                    && !fatal
                    && (reason.contains("(failed attempt ")
                        || reason.contains("attempt budget used up"))
            }
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Permanent => "a permanent failure (a poison message)",
            Self::Budget => "its attempt budget used up by the handler's own failures",
            Self::Fatal => "a message that crashes its consumer on every delivery",
        })
    }
}

impl std::str::FromStr for Failure {
    type Err = String;

    /// `permanent` or `budget`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "permanent" => Ok(Self::Permanent),
            "budget" => Ok(Self::Budget),
            "fatal" => Ok(Self::Fatal),
            other => Err(format!(
                "`{other}` is not a kind of failure (permanent, budget, fatal)"
            )),
        }
    }
}

/// Which stages of the pipeline ran, hence which invariants apply, and which payments the test
/// makes fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// Whether receipt-sender ran: a charged payment has its receipt, no receipt exists without
    /// its charged payment.
    pub receipts: bool,
    /// Work queues left holding messages on purpose (logical ids): not required drained.
    pub left: Vec<String>,
    /// The payments the test makes fail on purpose, each with the kind of its failure: each must
    /// end `failed` with a reason of that kind, and any other failed payment is a violation.
    /// Empty unless the test declares some ([`declaring`](Self::declaring)).
    pub failures: BTreeMap<String, Failure>,
    /// Description markers of the failure switch, each with the kind of failure it makes: a
    /// payment whose description contains one is declared to fail so
    /// ([`declaring_marked`](Self::declaring_marked)), for a check that does not know the
    /// payments' ids (`check-invariants` against a stack someone used by hand).
    pub marked: Vec<(String, Failure)>,
}

impl Scope {
    /// The whole pipeline ran: every invariant applies, every work queue drains, no payment
    /// fails.
    pub fn pipeline() -> Self {
        Self {
            receipts: true,
            left: Vec::new(),
            failures: BTreeMap::new(),
            marked: Vec::new(),
        }
    }

    /// Payments were charged but receipt-sender never ran: the invariants of payments, ledger
    /// and balances apply; those of receipts do not, and the receipts queue may hold the
    /// charges' events. No payment fails.
    pub fn through_charging() -> Self {
        Self {
            receipts: false,
            left: vec!["ReceiptsQueue".to_owned()],
            failures: BTreeMap::new(),
            marked: Vec::new(),
        }
    }

    /// This scope, with `queue` (a logical id) left holding messages on purpose.
    pub fn leaving(mut self, queue: &str) -> Self {
        self.left.push(queue.to_owned());
        self
    }

    /// This scope, where the test makes `payment_ids` fail as `failure`: each must end `failed`
    /// with a reason of that kind ([`Failure::explains`]).
    pub fn declaring<I: IntoIterator<Item = S>, S: Into<String>>(
        mut self,
        failure: Failure,
        payment_ids: I,
    ) -> Self {
        self.failures
            .extend(payment_ids.into_iter().map(|id| (id.into(), failure)));
        self
    }

    /// This scope, where the test makes every payment whose description contains `marker` (a
    /// marker of the failure switch) fail as `failure`.
    pub fn declaring_marked(mut self, failure: Failure, marker: &str) -> Self {
        self.marked.push((marker.to_owned(), failure));
        self
    }

    /// The failure the test declared for `payment` (`payment_id`), by its id or by a marker in
    /// its description; `None` when it is not to fail.
    pub fn declared(&self, payment_id: &str, payment: &Payment) -> Option<Failure> {
        self.failures.get(payment_id).copied().or_else(|| {
            self.marked
                .iter()
                .find(|(marker, _)| payment.description.contains(marker.as_str()))
                .map(|(_, failure)| *failure)
        })
    }

    /// Whether `queue` must be drained.
    pub fn drains(&self, queue: &str) -> bool {
        !self.left.iter().any(|q| q == queue)
    }
}

impl Default for Scope {
    fn default() -> Self {
        Self::pipeline()
    }
}
