//! [`Template::check`]: rules a deployment would accept but that break exactly-once-in-effect
//! processing or waste retries.

use std::collections::BTreeSet;

use super::{Expr, Finding, Function, Queue, Template};

impl Template {
    /// Checks the template against the rules in `aws-facts.md` that a deployment would not
    /// reject but that break exactly-once-in-effect processing or waste retries: visibility
    /// timeout at least 6 x the consumer's timeout, FIFO/standard dead-letter queues matching
    /// their source, FIFO batch limits, `ReportBatchItemFailures`, `MaximumConcurrency` range,
    /// dead-letter retention at least the source's; and, for a consumer with `MAX_ATTEMPTS` in its
    /// environment, a redrive `maxReceiveCount` that a message blocked behind others of its FIFO
    /// group cannot reach before its attempts are used up
    /// ([`min_max_receive_count`](lambda_idempotency::redrive_policy::min_max_receive_count)),
    /// nor an outage as long as the queue's retention on top of that, at the slowest backoff the
    /// consumer may run with (the `MinValue` of the parameter its `BACKOFF_BASE_SECONDS` comes
    /// from: [`outage_cover`](lambda_idempotency::redrive_policy::outage_cover), the cold-start
    /// check's own), and an `EVENT_SOURCE_BATCH_SIZE` equal to the event source's `BatchSize`.
    ///
    /// Idempotency records must outlive every copy of a message: for a consumer with
    /// `IDEMPOTENCY_TTL_SECONDS` in its environment, the value must be at least its queue's
    /// `MessageRetentionPeriod` plus the dead-letter queue's (a message redriven on the last day
    /// of its dead-letter retention still finds its record), and when the value comes from a
    /// parameter, that parameter's `MinValue` must be too (or a deployment could go below).
    ///
    /// DynamoDB stream sources: the table must have a stream (`StreamSpecification`). DynamoDB
    /// and Kinesis stream sources: the on-failure destination must be a standard queue (Lambda
    /// sends to no FIFO queue).
    ///
    /// ```
    /// use local_aws::template::{Template, TemplateOptions};
    /// let template = Template::load_project(&TemplateOptions::default()).unwrap();
    /// assert_eq!(template.check(), vec![]);
    /// ```
    pub fn check(&self) -> Vec<Finding> {
        let mut findings = Vec::new();
        let mut finding = |resource: &str, message: String| {
            findings.push(Finding {
                resource: resource.to_owned(),
                message,
            })
        };
        for q in self.queues.values() {
            if let Some(r) = &q.redrive
                && let Some(dlq) = self.queues.get(&r.dead_letter_queue)
            {
                if dlq.fifo != q.fifo {
                    finding(
                        &q.logical_id,
                        format!(
                            "dead-letter queue {} must be {} like its source",
                            dlq.logical_id,
                            if q.fifo { "FIFO" } else { "standard" }
                        ),
                    );
                }
                if dlq.message_retention_period < q.message_retention_period {
                    finding(
                        &q.logical_id,
                        format!(
                            "dead-letter queue {} keeps messages {} s, less than the source's {} s",
                            dlq.logical_id,
                            dlq.message_retention_period,
                            q.message_retention_period
                        ),
                    );
                }
            }
        }
        for (f, e) in self.sqs_event_sources() {
            let Some(q) = self.queues.get(&e.queue) else {
                continue;
            };
            let at = format!("{}.Events.{}", f.logical_id, e.name);
            if u64::from(q.visibility_timeout) < 6 * u64::from(f.timeout_seconds) {
                finding(
                    &at,
                    format!(
                        "queue {} has VisibilityTimeout {} s, less than 6 x the function timeout ({} s)",
                        q.logical_id, q.visibility_timeout, f.timeout_seconds
                    ),
                );
            }
            if q.fifo && e.batch_size > 10 {
                finding(
                    &at,
                    format!("BatchSize {} > 10 on a FIFO queue", e.batch_size),
                );
            }
            if q.fifo && e.maximum_batching_window_in_seconds > 0 {
                finding(
                    &at,
                    "MaximumBatchingWindowInSeconds is not supported for FIFO queues".into(),
                );
            }
            if !q.fifo && e.batch_size > 10 && e.maximum_batching_window_in_seconds == 0 {
                finding(
                    &at,
                    format!(
                        "BatchSize {} > 10 needs MaximumBatchingWindowInSeconds >= 1",
                        e.batch_size
                    ),
                );
            }
            if !(1..=10_000).contains(&e.batch_size) {
                finding(&at, format!("BatchSize {} not in 1..=10000", e.batch_size));
            }
            if !e.reports_batch_item_failures() {
                finding(
                    &at,
                    "no FunctionResponseTypes: [ReportBatchItemFailures]: one failed record redelivers the whole batch".into(),
                );
            }
            if let Some(c) = e.maximum_concurrency
                && !(2..=1000).contains(&c)
            {
                finding(
                    &at,
                    format!("ScalingConfig.MaximumConcurrency {c} not in 2..=1000"),
                );
            }
            let literal = |name: &str| f.environment.get(name).and_then(Expr::as_literal);
            if let Some(size) = literal("EVENT_SOURCE_BATCH_SIZE")
                && size.parse::<u32>().ok() != Some(e.batch_size)
            {
                finding(
                    &at,
                    format!(
                        "EVENT_SOURCE_BATCH_SIZE {size} is not the event source's BatchSize {}",
                        e.batch_size
                    ),
                );
            }
            if let (Some(attempts), Some(r)) = (literal("MAX_ATTEMPTS"), &q.redrive) {
                match attempts.parse::<u32>() {
                    Ok(n) => {
                        let required = lambda_idempotency::redrive_policy::min_max_receive_count(
                            e.batch_size,
                            n,
                        );
                        if r.max_receive_count < required {
                            finding(
                                &at,
                                format!(
                                    "queue {} has maxReceiveCount {}, below {required} = (BatchSize - 1) x (MAX_ATTEMPTS - 1) + MAX_ATTEMPTS for BatchSize {} and MAX_ATTEMPTS {n}: SQS would dead-letter messages blocked behind a failing one of their group",
                                    q.logical_id, r.max_receive_count, e.batch_size
                                ),
                            );
                        }
                        let (backoff, base) = self.slowest_backoff(f);
                        let cover = lambda_idempotency::redrive_policy::outage_cover(
                            r.max_receive_count,
                            e.batch_size,
                            n,
                            std::time::Duration::from_secs(q.message_retention_period.into()),
                            backoff,
                            std::time::Duration::from_secs(q.visibility_timeout.into()),
                        );
                        if !cover.holds() {
                            finding(&at, format!("queue {} with {base}: {cover}", q.logical_id));
                        }
                    }
                    Err(_) => finding(&at, format!("MAX_ATTEMPTS {attempts:?} is not a number")),
                }
            }
        }
        for (f, e) in self.sqs_event_sources() {
            if let Some(q) = self.queues.get(&e.queue) {
                self.check_idempotency_expiry(f, q, &mut finding);
            }
        }
        let on_failure = self
            .dynamodb_event_sources()
            .map(|(f, e)| (f, &e.name, &e.on_failure_queue))
            .chain(
                self.kinesis_event_sources()
                    .map(|(f, e)| (f, &e.name, &e.on_failure_queue)),
            );
        for (f, name, queue) in on_failure {
            if let Some(q) = queue.as_ref().and_then(|q| self.queues.get(q))
                && q.fifo
            {
                finding(
                    &format!("{}.Events.{name}", f.logical_id),
                    format!(
                        "on-failure destination {} is a FIFO queue: Lambda sends to standard queues only",
                        q.logical_id
                    ),
                );
            }
        }
        for (f, e) in self.dynamodb_event_sources() {
            let at = format!("{}.Events.{}", f.logical_id, e.name);
            if self
                .tables
                .get(&e.table)
                .is_some_and(|t| t.stream_view_type.is_none())
            {
                finding(
                    &at,
                    format!(
                        "table {} has no stream (StreamSpecification): the event source has nothing to read",
                        e.table
                    ),
                );
            }
        }
        // One finding per resource and message (a parameter shared by consumers is named once).
        let mut seen = BTreeSet::new();
        findings.retain(|f| seen.insert((f.resource.clone(), f.message.clone())));
        findings
    }

    /// The slowest visibility backoff `f` can run with, and what it comes from: its
    /// `BACKOFF_BASE_SECONDS`, or the `MinValue` of the parameter it comes from (none: 0, the
    /// backoff off), or the library's default 2 s; `None` when it is off.
    fn slowest_backoff(
        &self,
        f: &Function,
    ) -> (Option<lambda_idempotency::backoff::RetrySchedule>, String) {
        const VAR: &str = "BACKOFF_BASE_SECONDS";
        let literal = |name: &str| {
            f.environment
                .get(name)
                .and_then(Expr::as_literal)
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        let (base, from) = match f
            .environment_parameters
            .get(VAR)
            .and_then(|name| Some((name, self.parameters.get(name)?)))
        {
            Some((name, p)) => {
                let min = p.min_value.map_or(0, |m| m.max(0.0) as u64);
                (
                    min,
                    format!("{VAR} from {name}, whose MinValue allows {min}"),
                )
            }
            None => {
                let base = literal(VAR).unwrap_or(2);
                (base, format!("{VAR} {base}"))
            }
        };
        let max = literal("BACKOFF_MAX_SECONDS").unwrap_or(300).max(base);
        let schedule = (base > 0).then(|| {
            lambda_idempotency::backoff::RetrySchedule::new(
                std::time::Duration::from_secs(base),
                std::time::Duration::from_secs(max),
            )
        });
        (schedule, from)
    }

    /// The idempotency expiry rule of [`check`](Self::check) for one consumer of `queue`.
    fn check_idempotency_expiry(
        &self,
        f: &Function,
        queue: &Queue,
        finding: &mut impl FnMut(&str, String),
    ) {
        const VAR: &str = "IDEMPOTENCY_TTL_SECONDS";
        let Some(expr) = f.environment.get(VAR) else {
            return;
        };
        let dlq = queue
            .redrive
            .as_ref()
            .and_then(|r| self.queues.get(&r.dead_letter_queue));
        let required = u64::from(queue.message_retention_period)
            + dlq.map_or(0, |d| u64::from(d.message_retention_period));
        let copies = match dlq {
            Some(d) => format!(
                "{} s in {} + {} s in {}",
                queue.message_retention_period,
                queue.logical_id,
                d.message_retention_period,
                d.logical_id
            ),
            None => format!(
                "{} s in {}",
                queue.message_retention_period, queue.logical_id
            ),
        };
        match expr.as_literal().map(|v| (v, v.trim().parse::<u64>())) {
            Some((_, Ok(ttl))) if ttl >= required => {}
            Some((_, Ok(ttl))) => finding(
                &f.logical_id,
                format!(
                    "{VAR} {ttl} is below {required}: a message can still be delivered ({copies}) after its idempotency record expired, and would run again"
                ),
            ),
            _ => finding(
                &f.logical_id,
                format!("{VAR} {expr} is not a number of seconds"),
            ),
        }
        if let Some(name) = f.environment_parameters.get(VAR)
            && let Some(p) = self.parameters.get(name)
        {
            match p.min_value {
                Some(min) if min >= required as f64 => {}
                Some(min) => finding(
                    &format!("Parameters.{name}"),
                    format!(
                        "MinValue {min} is below {required} ({copies}): a deployment may set an expiry shorter than a message can live"
                    ),
                ),
                None => finding(
                    &format!("Parameters.{name}"),
                    format!(
                        "no MinValue: a deployment may set an expiry below {required} ({copies})"
                    ),
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::TemplateOptions;
    use super::*;

    /// A consumer of a queue with a 1-day retention and a 2-day dead-letter queue, its expiry
    /// from a parameter.
    fn consumer(ttl_default: u32, ttl_min: u32, options: &TemplateOptions) -> Vec<Finding> {
        let yaml = format!(
            r#"
Parameters:
  Ttl: {{ Type: Number, Default: {ttl_default}, MinValue: {ttl_min} }}
Resources:
  Jobs:
    Type: AWS::SQS::Queue
    Properties:
      VisibilityTimeout: 60
      MessageRetentionPeriod: 86400
      RedrivePolicy: {{ deadLetterTargetArn: !GetAtt JobsDlq.Arn, maxReceiveCount: 5 }}
  JobsDlq:
    Type: AWS::SQS::Queue
    Properties: {{ MessageRetentionPeriod: 172800 }}
  Worker:
    Type: AWS::Serverless::Function
    Properties:
      Timeout: 10
      Environment: {{ Variables: {{ IDEMPOTENCY_TTL_SECONDS: !Ref Ttl }} }}
      Events:
        Jobs:
          Type: SQS
          Properties:
            Queue: !GetAtt Jobs.Arn
            FunctionResponseTypes: [ReportBatchItemFailures]
"#
        );
        Template::parse(&yaml, options).unwrap().check()
    }

    #[test]
    fn an_expiry_shorter_than_the_messages_can_live_is_a_finding() {
        let findings = consumer(3600, 60, &TemplateOptions::default());
        let resources: Vec<_> = findings.iter().map(|f| f.resource.as_str()).collect();
        assert_eq!(resources, ["Worker", "Parameters.Ttl"], "{findings:#?}");
        assert!(
            findings[0]
                .message
                .contains("IDEMPOTENCY_TTL_SECONDS 3600 is below 259200"),
            "{}",
            findings[0]
        );
        assert!(
            findings[1].message.contains("MinValue 60 is below 259200"),
            "{}",
            findings[1]
        );

        // The sum itself is enough, for the value and for the parameter's bound.
        assert_eq!(
            consumer(259_200, 259_200, &TemplateOptions::default()),
            vec![]
        );
        // A value above a low bound still leaves the bound flagged.
        let findings = consumer(300_000, 100, &TemplateOptions::default());
        assert_eq!(findings.len(), 1, "{findings:#?}");
        assert_eq!(findings[0].resource, "Parameters.Ttl");
        // An override below the sum (but above MinValue) is flagged on the function.
        let options = TemplateOptions::default().parameter("Ttl", "200000");
        let findings = consumer(300_000, 100, &options);
        assert_eq!(findings.len(), 2, "{findings:#?}");
        assert_eq!(findings[0].resource, "Worker");
    }

    #[test]
    fn the_project_template_has_no_findings() {
        let template = Template::load_project(&TemplateOptions::default()).unwrap();
        assert_eq!(template.check(), vec![]);
    }
}
