//! `Conditions`, resource `Condition`s and `!If`, evaluated as CloudFormation evaluates them; and
//! the project's failure switch, which only reaches payment-processor outside production.

use local_aws::template::{Template, TemplateError, TemplateOptions};

/// A template with `conditions` (the body of its `Conditions` section) and parameters `Stage`
/// (`dev`/`test`/`prod`) and `Region2`, with one queue per condition, named after it, present
/// only when it holds.
fn with_conditions(conditions: &str, stage: &str) -> Result<Template, TemplateError> {
    let names: Vec<&str> = conditions
        .lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.trim().split(':').next())
        .collect();
    let resources: String = names
        .iter()
        .map(|n| format!("  Q{n}: {{ Type: AWS::SQS::Queue, Condition: {n} }}\n"))
        .collect();
    let yaml = format!(
        "Parameters:\n  Stage: {{ Type: String, Default: prod, AllowedValues: [dev, test, prod] }}\n  \
         Region2: {{ Type: String, Default: eu-west-1 }}\n\
         Mappings:\n  Tiers:\n    prod: {{ Tier: gold }}\n    dev: {{ Tier: tin }}\n    test: {{ Tier: tin }}\n\
         Conditions:\n{conditions}\nResources:\n{resources}"
    );
    Template::parse(&yaml, &TemplateOptions::default().parameter("Stage", stage))
}

fn value(conditions: &str, stage: &str, name: &str) -> bool {
    let t = with_conditions(conditions, stage).unwrap_or_else(|e| panic!("{e}"));
    let value = t.conditions.get(name).unwrap();
    // The resource guarded by the condition is there exactly when it holds.
    assert_eq!(t.queues.contains_key(&format!("Q{name}")), value, "{name}");
    value
}

#[test]
fn equals_compares_parameters_pseudo_parameters_and_lookups() {
    let c = "  IsProd: !Equals [!Ref Stage, prod]\n  \
             LongIsProd: { \"Fn::Equals\": [{ Ref: Stage }, prod] }\n  \
             InRegion: !Equals [!Ref \"AWS::Region\", us-east-1]\n  \
             Gold: !Equals [!FindInMap [Tiers, !Ref Stage, Tier], gold]\n  \
             Joined: !Equals [!Sub \"${Stage}-${Region2}\", prod-eu-west-1]\n";
    for (name, prod, dev) in [
        ("IsProd", true, false),
        ("LongIsProd", true, false),
        ("InRegion", true, true),
        ("Gold", true, false),
        ("Joined", true, false),
    ] {
        assert_eq!(value(c, "prod", name), prod, "{name} in prod");
        assert_eq!(value(c, "dev", name), dev, "{name} in dev");
    }
}

#[test]
fn not_and_or_and_condition_references_nest() {
    let c = "  IsProd: !Equals [!Ref Stage, prod]\n  \
             IsDev: !Equals [!Ref Stage, dev]\n  \
             NotProd: !Not [!Condition IsProd]\n  \
             LongNotProd: { \"Fn::Not\": [{ Condition: IsProd }] }\n  \
             DevOrProd: !Or [!Condition IsDev, !Condition IsProd]\n  \
             DevAndProd: !And [!Condition IsDev, !Condition IsProd]\n  \
             Nested: !And [!Not [!Condition IsProd], !Or [!Equals [!Ref Stage, test], !Condition IsDev]]\n  \
             Alias: !Condition NotProd\n";
    let expect = |stage: &str, name: &str| value(c, stage, name);
    assert!(!expect("prod", "NotProd") && expect("test", "NotProd"));
    assert!(!expect("prod", "LongNotProd") && expect("dev", "LongNotProd"));
    assert!(expect("dev", "DevOrProd") && expect("prod", "DevOrProd"));
    assert!(!expect("test", "DevOrProd"));
    assert!(!expect("dev", "DevAndProd") && !expect("prod", "DevAndProd"));
    assert!(expect("dev", "Nested") && expect("test", "Nested") && !expect("prod", "Nested"));
    assert!(expect("test", "Alias") && !expect("prod", "Alias"));
}

#[test]
fn unknown_cyclic_and_malformed_conditions_are_errors() {
    let err = |c: &str| with_conditions(c, "prod").unwrap_err().to_string();
    let unknown = err("  A: !Not [!Condition Missing]\n");
    assert!(unknown.contains("no condition named Missing"), "{unknown}");
    let cycle = err("  A: !Not [!Condition B]\n  B: !Condition A\n");
    assert!(cycle.contains("refers to itself"), "{cycle}");
    assert!(err("  A: !And [!Equals [a, a]]\n").contains("2 to 10"));
    assert!(err("  A: !Equals [a]\n").contains("[Value1, Value2]"));
    assert!(err("  A: !If [B, x, y]\n").contains("not a condition function"));
    // A condition cannot depend on a resource.
    let resource = err("  A: !Equals [!Ref QA, x]\n");
    assert!(resource.contains("QA"), "{resource}");

    // A resource's Condition and an !If must name a condition too.
    let yaml = "Resources:\n  Q: { Type: AWS::SQS::Queue, Condition: Nope }\n";
    let e = Template::parse(yaml, &TemplateOptions::default()).unwrap_err();
    assert!(e.to_string().contains("no condition named Nope"), "{e}");
    let yaml = "Resources:\n  Q: { Type: AWS::SQS::Queue, Properties: { VisibilityTimeout: !If [Nope, 1, 2] } }\n";
    let e = Template::parse(yaml, &TemplateOptions::default()).unwrap_err();
    assert!(e.to_string().contains("no condition named Nope"), "{e}");
}

#[test]
fn if_picks_its_branch_and_no_value_removes_the_key() {
    let yaml = r#"
Parameters:
  Stage: { Type: String, Default: prod }
Conditions:
  IsProd: !Equals [!Ref Stage, prod]
Resources:
  Q:
    Type: AWS::SQS::Queue
    Properties:
      VisibilityTimeout: !If [IsProd, 300, 30]
      MessageRetentionPeriod: { "Fn::If": [IsProd, !Ref "AWS::NoValue", 60] }
  F:
    Type: AWS::Serverless::Function
    Properties:
      Environment:
        Variables:
          MODE: !If [IsProd, !Sub "live-${Stage}", !If [IsProd, never, rehearsal]]
          DEBUG: !If [IsProd, !Ref "AWS::NoValue", "1"]
          ALWAYS: "yes"
"#;
    let parse = |stage: &str| {
        Template::parse(yaml, &TemplateOptions::default().parameter("Stage", stage)).unwrap()
    };
    let prod = parse("prod");
    assert_eq!(prod.queues["Q"].visibility_timeout, 300);
    // Without the property: SQS's default retention (4 days).
    assert_eq!(prod.queues["Q"].message_retention_period, 345_600);
    let env = &prod.functions["F"].environment;
    assert_eq!(env["MODE"].as_literal(), Some("live-prod"));
    assert!(!env.contains_key("DEBUG"));
    assert_eq!(env["ALWAYS"].as_literal(), Some("yes"));

    let dev = parse("dev");
    assert_eq!(dev.queues["Q"].visibility_timeout, 30);
    assert_eq!(dev.queues["Q"].message_retention_period, 60);
    let env = &dev.functions["F"].environment;
    assert_eq!(env["MODE"].as_literal(), Some("rehearsal"));
    assert_eq!(env["DEBUG"].as_literal(), Some("1"));
    assert_eq!(dev.conditions.get("IsProd"), Some(false));
}

#[test]
fn a_resource_whose_condition_is_false_is_absent() {
    let yaml = r#"
Parameters:
  WithDlq: { Type: String, Default: "no", AllowedValues: ["yes", "no"] }
Conditions:
  HasDlq: !Equals [!Ref WithDlq, "yes"]
Resources:
  Dlq: { Type: AWS::SQS::Queue, Condition: HasDlq }
  Jobs:
    Type: AWS::SQS::Queue
    Properties:
      RedrivePolicy: !If
        - HasDlq
        - { deadLetterTargetArn: !GetAtt Dlq.Arn, maxReceiveCount: 3 }
        - !Ref AWS::NoValue
"#;
    let without = Template::parse(yaml, &TemplateOptions::default()).unwrap();
    assert!(!without.queues.contains_key("Dlq"));
    assert!(without.queues["Jobs"].redrive.is_none());
    let with = Template::parse(
        yaml,
        &TemplateOptions::default().parameter("WithDlq", "yes"),
    )
    .unwrap();
    assert_eq!(
        with.queues["Jobs"]
            .redrive
            .as_ref()
            .unwrap()
            .dead_letter_queue,
        "Dlq"
    );
    // A reference to a resource that is left out fails, as the deployment would.
    let broken = yaml.replace(
        "- !Ref AWS::NoValue",
        "- { deadLetterTargetArn: !GetAtt Dlq.Arn, maxReceiveCount: 3 }",
    );
    assert!(Template::parse(&broken, &TemplateOptions::default()).is_err());
}

#[test]
fn the_failure_switch_reaches_payment_processor_only_outside_production() {
    let load = |stage: Option<&str>| {
        let mut options = TemplateOptions::default().parameter("FailPayments", "flaky:2");
        if let Some(stage) = stage {
            options = options.parameter("Stage", stage);
        }
        Template::load_project(&options).unwrap()
    };
    // The default Stage is prod: a deployment that does not say is treated as real.
    let default = load(None);
    assert_eq!(default.parameter("Stage"), Some("prod"));
    assert_eq!(default.conditions.get("FailureSwitchAllowed"), Some(false));
    for t in [default, load(Some("prod"))] {
        let env = &t.function_by_name("payment-processor").unwrap().environment;
        assert!(!env.contains_key("FAIL_PAYMENTS"), "{env:?}");
        assert_eq!(env["STAGE"].as_literal(), Some("prod"));
        assert_eq!(t.check(), vec![]);
    }
    for stage in ["dev", "test"] {
        let t = load(Some(stage));
        assert_eq!(t.conditions.get("FailureSwitchAllowed"), Some(true));
        let processor = t.function_by_name("payment-processor").unwrap();
        assert_eq!(
            processor.environment["FAIL_PAYMENTS"].as_literal(),
            Some("flaky:2")
        );
        assert_eq!(processor.environment["STAGE"].as_literal(), Some(stage));
        assert_eq!(
            processor.environment_parameters["FAIL_PAYMENTS"],
            "FailPayments"
        );
        // No other function gets the switch or the stage.
        for f in t
            .functions
            .values()
            .filter(|f| f.name != "payment-processor")
        {
            assert!(!f.environment.contains_key("FAIL_PAYMENTS"), "{}", f.name);
        }
    }
    assert!(
        Template::load_project(&TemplateOptions::default().parameter("Stage", "staging")).is_err(),
        "Stage has AllowedValues"
    );
}
