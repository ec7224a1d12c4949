//! `Mappings` and `!FindInMap`: the redrive backstop of every queue is derived from `MaxAttempts`,
//! and the model resolves lookups as CloudFormation would, or refuses them.

use std::time::Duration;

use lambda_idempotency::backoff::RetrySchedule;
use lambda_idempotency::redrive_policy::outage_cover;
use local_aws::template::{MapValue, Template, TemplateOptions};

fn with_attempts(n: u32) -> Template {
    Template::load_project(&TemplateOptions::default().parameter("MaxAttempts", n.to_string()))
        .unwrap_or_else(|e| panic!("MaxAttempts={n}: {e}"))
}

#[test]
fn each_queue_s_max_receive_count_is_derived_from_max_attempts_for_its_batch_size() {
    for n in 1..=10 {
        let t = with_attempts(n);
        let mut consumers = 0;
        for (f, e) in t.sqs_event_sources() {
            let q = &t.queues[&e.queue];
            let redrive = q.redrive.as_ref().unwrap();
            // The attempt bound and an outage as long as the retention, at the slowest backoff
            // the template allows (BackoffBaseSeconds' MinValue, 1 s).
            let slowest = RetrySchedule::new(Duration::from_secs(1), Duration::from_secs(1));
            let cover = outage_cover(
                redrive.max_receive_count,
                e.batch_size,
                n,
                Duration::from_secs(q.message_retention_period.into()),
                Some(slowest),
                Duration::from_secs(q.visibility_timeout.into()),
            );
            assert_eq!(
                redrive.max_receive_count, cover.required,
                "{} with MaxAttempts {n}: {cover}",
                e.queue
            );
            let env = |name: &str| f.environment[name].as_literal().map(str::to_owned);
            assert_eq!(env("MAX_ATTEMPTS"), Some(n.to_string()), "{}", f.name);
            assert_eq!(
                env("EVENT_SOURCE_BATCH_SIZE"),
                Some(e.batch_size.to_string()),
                "{}",
                f.name
            );
            assert!(!f.environment.contains_key("MAX_RECEIVE_COUNT"));
            consumers += 1;
        }
        assert_eq!(consumers, 2);
        assert_eq!(t.check(), vec![], "MaxAttempts {n}");
    }
    // The default: 5 attempts, batches of 10.
    let t = Template::load_project(&TemplateOptions::default()).unwrap();
    assert_eq!(t.parameter("MaxAttempts"), Some("5"));
    assert_eq!(
        t.mappings.get("RedriveBackstop", "5", "BatchSize10"),
        Some(&MapValue::Text("65".into()))
    );
    let f = t.function_by_name("payment-processor").unwrap();
    assert!(f.environment.contains_key("SOURCE_QUEUE_URL"));
}

#[test]
fn the_check_flags_a_backstop_a_blocked_follower_can_reach() {
    let text = std::fs::read_to_string(Template::project_path()).unwrap();
    // The mapping's row for the default (5 attempts) set to the old maxReceiveCount of 5: below
    // the attempt bound, and no room for an outage, for each of the two consumers.
    let row = r#""5": { BatchSize10: "65" }"#;
    assert!(text.contains(row));
    let low = text.replacen(row, r#""5": { BatchSize10: "5" }"#, 1);
    let findings = Template::parse(&low, &TemplateOptions::default())
        .unwrap()
        .check();
    assert_eq!(findings.len(), 4, "{findings:#?}");
    let below = |text: &str| findings.iter().filter(|f| f.message.contains(text)).count();
    assert_eq!(below("maxReceiveCount 5, below 41"), 2, "{findings:#?}");
    assert_eq!(below("at least 65 = 41 + 24"), 2, "{findings:#?}");
    // At the attempt bound alone (the template's value before the outage's room), the outage is
    // found on each consumer, with the parameter that allows the slowest backoff.
    let bound = text.replacen(row, r#""5": { BatchSize10: "41" }"#, 1);
    let findings = Template::parse(&bound, &TemplateOptions::default())
        .unwrap()
        .check();
    assert_eq!(findings.len(), 2, "{findings:#?}");
    for f in &findings {
        assert!(
            f.message
                .contains("BackoffBaseSeconds, whose MinValue allows 1")
                && f.message.contains("at least 65 = 41 + 24"),
            "{}",
            f.message
        );
    }
    // A BackoffBaseSeconds that allows 0 (the backoff off) is found at any row.
    let min = "    MinValue: 1\n    Description: >-\n      Visibility backoff";
    assert!(text.contains(min));
    let off = text.replacen(
        min,
        "    MinValue: 0\n    Description: >-\n      Visibility backoff",
        1,
    );
    let findings = Template::parse(&off, &TemplateOptions::default())
        .unwrap()
        .check();
    assert_eq!(findings.len(), 2, "{findings:#?}");
    assert!(
        findings[0].message.contains("turn the backoff on"),
        "{}",
        findings[0]
    );
    // An EVENT_SOURCE_BATCH_SIZE that is not the event source's BatchSize is flagged too.
    let size = r#"EVENT_SOURCE_BATCH_SIZE: "10""#;
    assert!(text.contains(size));
    let drifted = text.replacen(size, r#"EVENT_SOURCE_BATCH_SIZE: "5""#, 1);
    let findings = Template::parse(&drifted, &TemplateOptions::default())
        .unwrap()
        .check();
    assert_eq!(findings.len(), 1, "{findings:#?}");
    assert!(
        findings[0]
            .message
            .contains("EVENT_SOURCE_BATCH_SIZE 5 is not the event source's BatchSize 10"),
        "{}",
        findings[0]
    );
}

const QUEUES: &str = r#"
Parameters:
  Size: { Type: String, Default: small, AllowedValues: [small, large] }
Mappings:
  Sizes:
    small: { Count: "2", Zone: us-east-1, Names: [a, b] }
    large: { Count: "9", Zone: eu-west-1 }
  ByRegion:
    us-east-1: { Size: large }
Resources:
  D: { Type: AWS::SQS::Queue }
  Q:
    Type: AWS::SQS::Queue
    Properties:
      RedrivePolicy:
        deadLetterTargetArn: !GetAtt D.Arn
        maxReceiveCount: !FindInMap [Sizes, !Ref Size, Count]
  R:
    Type: AWS::SQS::Queue
    Properties:
      RedrivePolicy:
        deadLetterTargetArn: !GetAtt D.Arn
        maxReceiveCount:
          Fn::FindInMap: [Sizes, !FindInMap [ByRegion, !Ref "AWS::Region", Size], Count]
  F:
    Type: AWS::Serverless::Function
    Properties:
      Environment:
        Variables:
          ZONE: !Sub ["${Z}-x", { Z: !FindInMap [Sizes, !Ref Size, Zone] }]
          NAMES: !Join [",", !FindInMap [Sizes, small, Names]]
"#;

#[test]
fn find_in_map_in_every_form() {
    let count = |t: &Template, q: &str| t.queues[q].redrive.as_ref().unwrap().max_receive_count;
    let t = Template::parse(QUEUES, &TemplateOptions::default()).unwrap();
    assert_eq!(count(&t, "Q"), 2);
    // Nested, with a pseudo parameter as the key, in the long form.
    assert_eq!(count(&t, "R"), 9);
    let env = &t.functions["F"].environment;
    assert_eq!(env["ZONE"].as_literal(), Some("us-east-1-x"));
    assert_eq!(env["NAMES"].as_literal(), Some("a,b"));
    let t = Template::parse(
        QUEUES,
        &TemplateOptions::default().parameter("Size", "large"),
    )
    .unwrap();
    assert_eq!(count(&t, "Q"), 9);
    assert_eq!(
        t.functions["F"].environment["ZONE"].as_literal(),
        Some("eu-west-1-x")
    );
}

#[test]
fn find_in_map_refuses_what_would_fail_a_deployment() {
    // QUEUES with `from` replaced by `to`: the error parsing it.
    let err = |from: &str, to: &str| {
        assert!(QUEUES.contains(from), "{from}");
        Template::parse(&QUEUES.replacen(from, to, 1), &TemplateOptions::default())
            .unwrap_err()
            .to_string()
    };
    let lookup = "!FindInMap [Sizes, !Ref Size, Count]";
    let cases = [
        // A key that is not in the map.
        (
            lookup,
            "!FindInMap [Sizes, medium, Count]",
            "mapping Sizes has no medium.Count",
        ),
        // An allowed value of the parameter used as a key is missing from the map, even though
        // the value in effect is there.
        (
            "AllowedValues: [small, large]",
            "AllowedValues: [small, large, huge]",
            "Size allows huge, which has no Count in mapping Sizes",
        ),
        // A resource as a key: only known at deployment, never in a mapping lookup.
        (
            lookup,
            "!FindInMap [Sizes, !Ref D, Count]",
            "!Ref D is not a parameter",
        ),
        (lookup, "!FindInMap [Nope, a, b]", "no mapping Nope"),
        // The default-value form of AWS::LanguageExtensions.
        (
            lookup,
            "!FindInMap [Sizes, !Ref Size, Count, { DefaultValue: 3 }]",
            "a default value is not supported",
        ),
        // Mappings hold literals only.
        (
            "Count: \"9\"",
            "Count: !Ref Size",
            "Mappings.Sizes.large.Count",
        ),
    ];
    for (from, to, expected) in cases {
        let e = err(from, to);
        assert!(e.contains(expected), "{to}: {e}");
    }
}
