//! template.yaml's dashboard and alarms watch metrics that exist. Each metric of the pipeline's
//! own (any namespace but `AWS/*`) is one the functions emit, with the same namespace, name and
//! dimensions: the EMF lines are built by the code each handler prints them with
//! ([`emf::emitted_lines`]; every `.emit()` of the functions is one of those, [`emf::EMITTERS`])
//! and read as CloudWatch reads them (`_aws.CloudWatchMetrics`). Each AWS
//! metric is one its service publishes, under the dimension it publishes it with, for a
//! resource of this stack. The dashboard shows every metric the functions emit, each queue's
//! depth and oldest message (the dead-letter queues' too), each function's errors, throttles
//! and concurrency, each table's throttling, and lists every alarm of the stack.
//!
//! Each finding names what is wrong; `each_check_finds_what_it_looks_for` proves that each
//! check fails on a template that has what it looks for.

mod emf;
mod stack;
mod watched;

use std::collections::{BTreeMap, BTreeSet};

use lambda_idempotency::metrics::Metrics;
use serde_yaml_ng::Value;

use emf::{EMITTERS, Metric, emf_metrics, emit_calls, emitted};
use stack::{AWS_METRICS, Kind, Stack, not_published, project_text};
use watched::{alarm_metrics, dashboards};

/// What is wrong with the dashboard and the alarms of the template `text`, each finding naming
/// the widget, alarm or resource concerned; `stack` names the project's resources.
fn check(text: &str, stack: &Stack, emitted: &BTreeSet<Metric>) -> Vec<String> {
    let raw: Value = serde_yaml_ng::from_str(text).unwrap();
    let resources = raw["Resources"].as_mapping().unwrap();
    let mut findings = Vec::new();
    let shown = dashboards(stack, resources, &mut findings);
    let mut watched = Vec::new();
    for w in alarm_metrics(stack, resources) {
        match w {
            Ok(w) => watched.push(w),
            Err(e) => findings.push(e),
        }
    }
    for w in shown.metrics.iter().chain(&watched) {
        if let Some(why) = not_published(stack, emitted, &w.metric) {
            findings.push(format!("{}: {why}", w.by));
        }
    }

    // Everything the functions emit, and each resource's vital signs, on the dashboard.
    let on_dashboard: BTreeSet<&Metric> = shown.metrics.iter().map(|w| &w.metric).collect();
    for m in emitted.iter().filter(|m| !on_dashboard.contains(m)) {
        findings.push(format!("{m}: emitted, not on the dashboard"));
    }
    let vital: &[(&str, Kind, &[&str])] = &[
        (
            "AWS/SQS",
            Kind::Queue,
            &[
                "ApproximateNumberOfMessagesVisible",
                "ApproximateAgeOfOldestMessage",
            ],
        ),
        (
            "AWS/Lambda",
            Kind::Function,
            &["Errors", "Throttles", "ConcurrentExecutions"],
        ),
        (
            "AWS/DynamoDB",
            Kind::Table,
            &["ReadThrottleEvents", "WriteThrottleEvents"],
        ),
    ];
    for (namespace, kind, names) in vital {
        let (_, dimension, ..) = AWS_METRICS.iter().find(|(ns, ..)| ns == namespace).unwrap();
        for (id, resource) in stack.of_kind(*kind) {
            for name in *names {
                let m = Metric {
                    namespace: (*namespace).to_owned(),
                    name: (*name).to_owned(),
                    dimensions: BTreeMap::from([((*dimension).to_owned(), resource.to_owned())]),
                };
                if !on_dashboard.contains(&m) {
                    findings.push(format!("{id}: no {name} on the dashboard"));
                }
            }
        }
    }

    // The alarm widget: every alarm of the stack, and nothing else.
    let alarms: BTreeSet<String> = resources
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::CloudWatch::Alarm")
        .filter_map(|(id, _)| Some(format!("${{{}.Arn}}", id.as_str()?)))
        .collect();
    let listed: BTreeSet<String> = shown.alarms.iter().cloned().collect();
    for a in alarms.difference(&listed) {
        findings.push(format!("{a}: not in the dashboard's alarm widget"));
    }
    for a in listed.difference(&alarms) {
        findings.push(format!(
            "{a}: in the alarm widget, not an alarm of the stack"
        ));
    }
    findings
}

#[test]
fn the_dashboard_and_the_alarms_watch_what_the_functions_emit() {
    let stack = Stack::project();
    let emitted = emitted();
    assert_eq!(
        check(&project_text(), &stack, &emitted),
        Vec::<String>::new()
    );
    // Not vacuous: the pipeline's metrics of each function, every queue, function and table.
    let functions: BTreeSet<&str> = emitted
        .iter()
        .map(|m| m.dimensions["function"].as_str())
        .collect();
    assert_eq!(
        functions,
        BTreeSet::from([
            "payment-processor",
            "payments-api",
            "payments-publisher",
            "payments-reconciler",
            "receipt-sender",
        ])
    );
    assert!(emitted.len() >= 30, "{emitted:#?}");
    assert_eq!(stack.of_kind(Kind::Queue).count(), 5);
    assert_eq!(stack.of_kind(Kind::Function).count(), 6);
    assert_eq!(stack.of_kind(Kind::Table).count(), 6);
}

#[test]
fn every_emf_line_the_functions_print_is_one_the_check_builds() {
    let mut listed: Vec<(String, String)> = EMITTERS
        .iter()
        .map(|(file, call)| ((*file).to_owned(), (*call).to_owned()))
        .collect();
    listed.sort();
    assert_eq!(emit_calls(), listed);
}

#[test]
fn an_emf_line_makes_one_metric_per_name_and_dimension_set() {
    let line = Metrics::new("Jobs")
        .dimension("function", "f")
        .count("done", 2)
        .milliseconds("lag", 1.5)
        .to_json(0);
    let found: Vec<String> = emf_metrics(&line)
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(found, ["Jobs done {function=f}", "Jobs lag {function=f}"]);
    let no_value = line.replace("\"done\":2", "\"done\":\"2\"");
    assert!(
        emf_metrics(&no_value)
            .unwrap_err()
            .contains("done has no number")
    );
}

#[test]
fn each_check_finds_what_it_looks_for() {
    let stack = Stack::project();
    let emitted = emitted();
    let text = project_text();
    for (from, to, expected) in [
        (
            r#""cacheHits", "function", "payment-processor""#,
            r#""cacheHit", "function", "payment-processor""#,
            "PaymentsPipeline cacheHit {function=payment-processor}: no function emits it",
        ),
        (
            r#""cacheHits", "function", "payment-processor""#,
            r#""cacheHits", "function", "payments-processor""#,
            "PaymentsPipeline cacheHits {function=payment-processor}: emitted, not on the dashboard",
        ),
        (
            "MetricName: failedAhead",
            "MetricName: failed_ahead",
            "PaymentProcessorFailedAheadAlarm: PaymentsPipeline failed_ahead {function=payment-processor}: no function emits it",
        ),
        (
            "Name: function\n          Value: payments-reconciler",
            "Name: fn\n          Value: payments-reconciler",
            "PaymentsReconcilerHeartbeatAlarm: PaymentsPipeline runs {fn=payments-reconciler}: no function emits it",
        ),
        (
            "              MetricName: relayed",
            "              MetricName: relays",
            "PaymentsNotRelayedAlarm: PaymentsPipeline relays {function=payments-publisher}: no function emits it",
        ),
        (
            r#""ApproximateAgeOfOldestMessage", "QueueName", "${ReceiptsDeadLetterQueue.QueueName}""#,
            r#""ApproximateAgeOfOldestMessage", "QueueName", "${ReceiptsQueue.QueueName}""#,
            "ReceiptsDeadLetterQueue: no ApproximateAgeOfOldestMessage on the dashboard",
        ),
        (
            r#""${PaymentsQueue.QueueName}""#,
            r#""${PaymentQueue.QueueName}""#,
            "QueueName ${PaymentQueue.QueueName} is no Queue of the stack",
        ),
        (
            r#""${PaymentsQueue.QueueName}""#,
            r#""${PaymentsQueue}""#,
            "QueueName ${PaymentsQueue} is no Queue of the stack",
        ),
        (
            "Value: !GetAtt ReceiptsQueue.QueueName",
            "Value: !GetAtt ReceiptsQueue.Arn",
            "ReceiptsOldestMessageAlarm: AWS/SQS ApproximateAgeOfOldestMessage {QueueName=${ReceiptsQueue.Arn}}: QueueName ${ReceiptsQueue.Arn} is no Queue",
        ),
        (
            r#""AWS/SQS", "ApproximateAgeOfOldestMessage""#,
            r#""AWS/SQS", "ApproximateAgeOfTheOldestMessage""#,
            "AWS/SQS publishes no ApproximateAgeOfTheOldestMessage",
        ),
        (
            r#"["AWS/Lambda", "ConcurrentExecutions", "FunctionName", "${PaymentsReconcilerFunction}"]"#,
            r#"["AWS/Lambda", "ConcurrentExecutions", "FunctionName", "${PaymentsReconcilerFunction}", "Resource", "x"]"#,
            "PaymentsReconcilerFunction: no ConcurrentExecutions on the dashboard",
        ),
        (
            r#"["AWS/Lambda", "ConcurrentExecutions", "FunctionName", "${PaymentsReconcilerFunction}"]"#,
            r#"["AWS/Lambda", "ConcurrentExecutions", "FunctionName", "${PaymentsReconcilerFunction}", "Resource", "x"]"#,
            "publishes it under the dimension FunctionName alone",
        ),
        (
            r#"["AWS/DynamoDB", "WriteThrottleEvents", "TableName", "${LedgerTable}"]"#,
            r#"["...", "...", "TableName", "${LedgerTable}"]"#,
            "repeats the metric before it",
        ),
        (
            r#"["AWS/ApiGateway", "5xx", "ApiId", "${PaymentsHttpApi}""#,
            r#"["AWS/ApiGateway", "5xx", "ApiId", "${PaymentsApiFunction}""#,
            "ApiId payments-api is no HttpApi of the stack",
        ),
        (
            ",\n              \"${PaymentsReconcilerThrottlesAlarm.Arn}\"",
            "",
            "${PaymentsReconcilerThrottlesAlarm.Arn}: not in the dashboard's alarm widget",
        ),
        (
            "\"${PaymentsReconcilerThrottlesAlarm.Arn}\"",
            "\"${PaymentsReconcilerThrottlesAlarm.Arn}\", \"${PaymentsReconcilerThrottleAlarm.Arn}\"",
            "${PaymentsReconcilerThrottleAlarm.Arn}: in the alarm widget, not an alarm of the stack",
        ),
        (
            "\"region\": \"${AWS::Region}\"",
            "\"region\": \"us-east-1\"",
            "its region is not the stack's",
        ),
        (
            r#"{"type": "metric", "x": 8, "y": 2,"#,
            r#"{"type": "metric", "x": 4, "y": 2,"#,
            "PaymentsDashboard: widget 2 covers widget 1",
        ),
        (
            r#"{"type": "metric", "x": 8, "y": 2,"#,
            r#"{"type": "metric", "x": 20, "y": 2,"#,
            "PaymentsDashboard: widget 2 is not within the 24 columns",
        ),
        (
            "Type: AWS::CloudWatch::Dashboard",
            "Type: AWS::CloudWatch::Dashboards",
            "0 dashboards, not one",
        ),
    ] {
        assert!(text.contains(from), "{from}");
        let found = check(&text.replacen(from, to, 1), &stack, &emitted);
        assert!(
            found.iter().any(|f| f.contains(expected)),
            "{expected}: {found:#?}"
        );
    }
}
