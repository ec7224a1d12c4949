//! A consumer's event source in its own terms, for the warnings it logs when it is built: its
//! name, how long it keeps a record (what an idempotency record must outlive), and where a record
//! goes that the consumer cannot settle without a dead-letter queue of its own.

use std::any::TypeId;
use std::time::Duration;

use aws_lambda_events::dynamodb;
use aws_lambda_events::kafka::KafkaEvent;
use aws_lambda_events::kinesis::KinesisEvent;
use aws_lambda_events::sqs::SqsEvent;

use crate::batch::EventSource;

const HOUR: u64 = 60 * 60;
const DAY: u64 = 24 * HOUR;

/// The event sources a [`Consumer`](super::Consumer) serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
    Sqs,
    DynamoDbStreams,
    Kinesis,
    Kafka,
    /// An [`EventSource`] of the application's own.
    Other,
}

/// How long a source keeps a record, so that a delivery or a replay can bring it back: the
/// shortest an idempotency record's expiry may be without a warning, and what the warning says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Retention {
    /// The expiry below which the consumer warns.
    pub(super) rule: Duration,
    /// Why that rule, in the source's terms.
    pub(super) why: &'static str,
}

impl Source {
    /// The source of events `E`.
    pub(super) fn of<E: EventSource>() -> Self {
        let id = TypeId::of::<E>();
        if id == TypeId::of::<SqsEvent>() {
            Self::Sqs
        } else if id == TypeId::of::<dynamodb::Event>() {
            Self::DynamoDbStreams
        } else if id == TypeId::of::<KinesisEvent>() {
            Self::Kinesis
        } else if id == TypeId::of::<KafkaEvent>() {
            Self::Kafka
        } else {
            Self::Other
        }
    }

    /// Its name in a log line.
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Sqs => "SQS",
            Self::DynamoDbStreams => "DynamoDB Streams",
            Self::Kinesis => "Kinesis",
            Self::Kafka => "Kafka",
            Self::Other => "this event source",
        }
    }

    /// How long it keeps a record; `None` when the consumer cannot know (a source of the
    /// application's own).
    pub(super) fn retention(self) -> Option<Retention> {
        match self {
            Self::Sqs => Some(Retention {
                rule: crate::idempotency::DEFAULT_EXPIRY,
                why: "a record must outlive every redelivery of its message: the queue's \
                      retention plus its dead-letter queue's (SQS's default 4 days plus the \
                      longest 14). Safe only if both queues keep messages for less than the \
                      expiry in all; the cold-start queue check compares it with their \
                      MessageRetentionPeriod",
            }),
            Self::DynamoDbStreams => Some(Retention {
                rule: Duration::from_secs(DAY),
                why: "a DynamoDB stream keeps a record 24 hours, and Lambda may deliver it \
                      again (a retry, a bisected batch, a replay from the checkpoint) until \
                      then: a record delivered again after its idempotency record expired runs \
                      again",
            }),
            Self::Kinesis => Some(Retention {
                rule: Duration::from_secs(DAY),
                why: "a Kinesis stream keeps a record at least 24 hours (its retention period, \
                      24 hours by default, up to 365 days), and Lambda may deliver it again \
                      until then: a record delivered again after its idempotency record \
                      expired runs again. The expiry must be at least the stream's retention \
                      period (aws kinesis describe-stream-summary: RetentionPeriodHours), \
                      which the consumer does not read",
            }),
            Self::Kafka => Some(Retention {
                rule: Duration::from_secs(7 * DAY),
                why: "Kafka keeps a record for its topic's retention.ms, 7 days unless the \
                      topic or the cluster says otherwise (the consumer cannot read it), and \
                      Lambda may deliver it again until then: a record delivered again after \
                      its idempotency record expired runs again. The expiry must be at least \
                      the topic's retention",
            }),
            Self::Other => None,
        }
    }

    /// Where a permanent failure or a used-up budget goes without a dead-letter queue.
    pub(super) fn without_dead_letter_queue(self) -> &'static str {
        match self {
            Self::Sqs => {
                "a permanent failure, or a record whose attempt budget is used up, stays on the \
                 queue, received and failed again, until the queue's own redrive policy moves it \
                 (without its reason) or its retention deletes it"
            }
            Self::DynamoDbStreams | Self::Kinesis => {
                "a permanent failure, or a record whose attempt budget is used up, is reported \
                 as its shard's checkpoint and holds the shard (every later record of it) until \
                 the event source mapping's MaximumRetryAttempts or MaximumRecordAgeInSeconds \
                 discards the batch to its on-failure destination (which gets the batch's \
                 sequence numbers, not the records or their reason) or the stream's retention \
                 drops it"
            }
            Self::Kafka => {
                "a permanent failure, or a record whose attempt budget is used up, is reported \
                 as its partition's checkpoint and holds the partition (every later record of \
                 it) until the event source mapping's MaximumRetryAttempts or \
                 MaximumRecordAgeInSeconds discards it to its on-failure destination, or the \
                 topic's retention drops it"
            }
            Self::Other => {
                "a permanent failure, or a record whose attempt budget is used up, is reported \
                 failed to Lambda at every delivery, until the source itself gives up on it"
            }
        }
    }
}

/// The warning at init when no dead-letter queue is set.
pub(super) fn warn_no_dead_letter_queue(source: Source) {
    tracing::warn!(
        source = source.name(),
        "no dead-letter queue (DEAD_LETTER_QUEUE_URL is not set) on {}: {}. Set \
         DEAD_LETTER_QUEUE_URL (an SQS queue) to move it there at once, with its reason",
        source.name(),
        source.without_dead_letter_queue()
    );
}

/// The warning at init of an expiry shorter than what the source keeps a record for (see
/// [`Source::retention`]): [`DEFAULT_EXPIRY`](crate::idempotency::DEFAULT_EXPIRY) on SQS.
pub(super) fn warn_if_expiry_below_the_rule(source: Source, expiry: Duration) {
    let Some(retention) = source.retention() else {
        return;
    };
    if expiry < retention.rule {
        tracing::warn!(
            source = source.name(),
            expiry_seconds = expiry.as_secs(),
            rule_seconds = retention.rule.as_secs(),
            "idempotency expiry (IDEMPOTENCY_TTL_SECONDS) of {} s is shorter than the {} s \
             {} needs: {}",
            expiry.as_secs(),
            retention.rule.as_secs(),
            source.name(),
            retention.why
        );
    }
}
