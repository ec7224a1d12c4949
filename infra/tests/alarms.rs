//! template.yaml's alarms cover every failure path and reach a person: each alarm notifies the
//! alarm topic; each function has an `Errors` and a `Throttles` alarm; each failure metric the
//! code emits (`payments_model::metrics::ALARMED`) has an alarm of its own; each dead-letter
//! queue has a depth and an age alarm; the HTTP API has a 5xx and a latency alarm; a stream
//! trigger that relays nothing has an alarm although `IteratorAge` then has no data; what holds
//! messages or records survives a stack deletion; every log group keeps `LogRetentionDays`.
//!
//! Each check lists what is missing; `each_check_finds_what_it_looks_for` proves that each one
//! fails on a template that lacks what it checks.

use std::collections::BTreeSet;

use local_aws::template::{Template, intrinsic};
use payments_model::metrics::{
    ALARMED, FUNCTION_DIMENSION, NAMESPACE, Trigger, api, function, publisher,
};
use serde_yaml_ng::{Mapping, Value};

/// The alarms' SNS topic.
const TOPIC: &str = "AlarmTopic";

fn project_text() -> String {
    std::fs::read_to_string(Template::project_path()).unwrap()
}

/// A template's resources, in order.
struct Resources(Vec<(String, Value)>);

impl Resources {
    fn parse(text: &str) -> Self {
        let doc: Value = serde_yaml_ng::from_str(text).unwrap();
        let resources = doc["Resources"].as_mapping().expect("Resources");
        Self(
            resources
                .iter()
                .map(|(k, v)| (k.as_str().unwrap().to_owned(), v.clone()))
                .collect(),
        )
    }

    fn of_type<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = (&'a str, &'a Value)> {
        self.0
            .iter()
            .filter(move |(_, r)| r["Type"].as_str() == Some(kind))
            .map(|(id, r)| (id.as_str(), r))
    }

    fn get(&self, id: &str) -> Option<&Value> {
        self.0.iter().find(|(i, _)| i == id).map(|(_, r)| r)
    }

    fn alarms(&self) -> Vec<Alarm<'_>> {
        self.of_type("AWS::CloudWatch::Alarm")
            .map(|(id, r)| Alarm {
                id,
                props: r["Properties"].as_mapping().expect("an alarm's Properties"),
            })
            .collect()
    }

    /// The alarms on `metric` of `namespace` whose dimension `name` satisfies `value`.
    fn alarms_on(
        &self,
        namespace: &str,
        metric: &str,
        name: &str,
        value: impl Fn(&Value) -> bool,
    ) -> Vec<Alarm<'_>> {
        self.alarms()
            .into_iter()
            .filter(|a| {
                a.text("Namespace") == Some(namespace) && a.text("MetricName") == Some(metric)
            })
            .filter(|a| a.dimensions().iter().any(|(n, v)| *n == name && value(v)))
            .collect()
    }

    /// `owner: no METRIC alarm` for each of `metrics` that has no alarm on `owner`.
    fn without_alarm(
        &self,
        owner: &str,
        namespace: &str,
        metrics: &[&str],
        name: &str,
        value: impl Fn(&Value) -> bool,
    ) -> Vec<String> {
        metrics
            .iter()
            .filter(|metric| self.alarms_on(namespace, metric, name, &value).is_empty())
            .map(|metric| format!("{owner}: no {metric} alarm"))
            .collect()
    }
}

/// `!Ref id`'s id.
fn ref_of(v: &Value) -> Option<&str> {
    match intrinsic(v)? {
        (f, Value::String(id)) if f == "Ref" => Some(id),
        _ => None,
    }
}

/// `!GetAtt id.attribute`'s id and attribute.
fn get_att(v: &Value) -> Option<(String, String)> {
    let (f, arg) = intrinsic(v)?;
    if f != "GetAtt" {
        return None;
    }
    match arg {
        Value::String(s) => s.split_once('.').map(|(a, b)| (a.to_owned(), b.to_owned())),
        Value::Sequence(parts) => Some((
            parts.first()?.as_str()?.to_owned(),
            parts.get(1)?.as_str()?.to_owned(),
        )),
        _ => None,
    }
}

struct Alarm<'a> {
    id: &'a str,
    props: &'a Mapping,
}

impl Alarm<'_> {
    fn text(&self, name: &str) -> Option<&str> {
        self.props.get(name).and_then(Value::as_str)
    }

    fn dimensions(&self) -> Vec<(&str, &Value)> {
        self.props
            .get("Dimensions")
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
            .filter_map(|d| Some((d["Name"].as_str()?, &d["Value"])))
            .collect()
    }

    /// Whether `actions` (AlarmActions, OKActions) holds `!Ref AlarmTopic`.
    fn notifies_topic(&self, actions: &str) -> bool {
        self.props
            .get(actions)
            .and_then(Value::as_sequence)
            .is_some_and(|a| a.iter().any(|v| ref_of(v) == Some(TOPIC)))
    }
}

/// Every alarm notifies the topic when it fires and when it clears; the topic's key lets
/// CloudWatch publish (the AWS managed key cannot); the e-mail subscription is optional.
fn check_actions(r: &Resources) -> Vec<String> {
    let mut missing = Vec::new();
    for alarm in r.alarms() {
        for actions in ["AlarmActions", "OKActions"] {
            if !alarm.notifies_topic(actions) {
                missing.push(format!("{}: no {TOPIC} in {actions}", alarm.id));
            }
        }
    }
    let Some(topic) = r.get(TOPIC).filter(|t| t["Type"] == "AWS::SNS::Topic") else {
        missing.push(format!("{TOPIC}: not an SNS topic"));
        return missing;
    };
    let key = ref_of(&topic["Properties"]["KmsMasterKeyId"]).and_then(|k| r.get(k));
    let grants_cloudwatch = key.is_some_and(|k| {
        let statements = k["Properties"]["KeyPolicy"]["Statement"].as_sequence();
        statements.into_iter().flatten().any(|s| {
            let actions: Vec<&str> = s["Action"]
                .as_sequence()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            s["Effect"] == "Allow"
                && s["Principal"]["Service"] == "cloudwatch.amazonaws.com"
                && actions.contains(&"kms:Decrypt")
                && actions.contains(&"kms:GenerateDataKey*")
        })
    });
    if !grants_cloudwatch {
        missing.push(format!(
            "{TOPIC}: its KmsMasterKeyId is not a key of the template granting CloudWatch \
             kms:Decrypt and kms:GenerateDataKey*"
        ));
    }
    for (id, subscription) in r.of_type("AWS::SNS::Subscription") {
        if subscription["Condition"] != "HasAlarmEmail" {
            missing.push(format!("{id}: not under the condition HasAlarmEmail"));
        }
    }
    missing
}

/// Every function, whatever its event source, has an `Errors` and a `Throttles` alarm.
fn check_functions(r: &Resources) -> Vec<String> {
    let mut missing = Vec::new();
    for (id, function) in r.of_type("AWS::Serverless::Function") {
        let name = function["Properties"]["FunctionName"].as_str();
        let is_it = |v: &Value| ref_of(v) == Some(id) || (name.is_some() && v.as_str() == name);
        let metrics = ["Errors", "Throttles"];
        missing.extend(r.without_alarm(id, "AWS/Lambda", &metrics, "FunctionName", is_it));
    }
    missing
}

/// Every failure metric of the code has its alarm, on exactly its dimension (an EMF metric has
/// only `function`: an alarm with another dimension would watch nothing), firing the right way.
fn check_metrics(r: &Resources) -> Vec<String> {
    let mut missing = Vec::new();
    for m in ALARMED {
        let alarms = r.alarms_on(NAMESPACE, m.metric, FUNCTION_DIMENSION, |v| {
            v.as_str() == Some(m.function)
        });
        let fits = |a: &Alarm<'_>| {
            let treats_missing = a.text("TreatMissingData");
            a.dimensions().len() == 1
                && match m.trigger {
                    Trigger::Above => {
                        a.text("ComparisonOperator") == Some("GreaterThanThreshold")
                            && treats_missing != Some("breaching")
                    }
                    Trigger::Missing => {
                        a.text("ComparisonOperator") == Some("LessThanThreshold")
                            && treats_missing == Some("breaching")
                    }
                }
        };
        if !alarms.iter().any(fits) {
            missing.push(format!(
                "{NAMESPACE} {} of {}: no alarm firing when it is {:?}",
                m.metric, m.function, m.trigger
            ));
        }
    }
    missing
}

/// The dead-letter queues: each queue some RedrivePolicy names, and each on-failure destination
/// of an event source.
fn dead_letter_queues(r: &Resources) -> BTreeSet<String> {
    let mut queues = BTreeSet::new();
    for (_, queue) in r.of_type("AWS::SQS::Queue") {
        if let Some((id, _)) = get_att(&queue["Properties"]["RedrivePolicy"]["deadLetterTargetArn"])
        {
            queues.insert(id);
        }
    }
    for (_, function) in r.of_type("AWS::Serverless::Function") {
        let events = function["Properties"]["Events"].as_mapping();
        for (_, event) in events.into_iter().flatten() {
            let destination = &event["Properties"]["DestinationConfig"]["OnFailure"]["Destination"];
            if let Some((id, _)) = get_att(destination) {
                queues.insert(id);
            }
        }
    }
    queues
}

/// Every dead-letter queue has an alarm on a message in it and on its oldest message's age.
fn check_dead_letter_queues(r: &Resources) -> Vec<String> {
    let mut missing = Vec::new();
    for queue in dead_letter_queues(r) {
        let is_it = |v: &Value| get_att(v) == Some((queue.clone(), "QueueName".to_owned()));
        let metrics = [
            "ApproximateNumberOfMessagesVisible",
            "ApproximateAgeOfOldestMessage",
        ];
        missing.extend(r.without_alarm(&queue, "AWS/SQS", &metrics, "QueueName", is_it));
    }
    missing
}

/// The HTTP API has an alarm on its 5xx answers, and none on its own latency, which includes
/// the reads that wait (`Prefer: wait`) by design: its latency alarm is on the duration of the
/// function behind `POST /payments`, which never waits.
fn check_api(r: &Resources) -> Vec<String> {
    let mut missing = Vec::new();
    for (id, _) in r.of_type("AWS::Serverless::HttpApi") {
        let is_it = |v: &Value| ref_of(v) == Some(id);
        missing.extend(r.without_alarm(id, "AWS/ApiGateway", &["5xx"], "ApiId", is_it));
        for alarm in r.alarms_on("AWS/ApiGateway", "Latency", "ApiId", is_it) {
            missing.push(format!(
                "{}: alarms on {id}'s Latency, which includes the reads that wait",
                alarm.id
            ));
        }
    }
    for (id, f) in r.of_type("AWS::Serverless::Function") {
        let posts = f["Properties"]["Events"]
            .as_mapping()
            .into_iter()
            .flatten()
            .any(|(_, e)| e["Properties"]["Method"] == "POST");
        if posts {
            let is_it = |v: &Value| ref_of(v) == Some(id);
            let latency = r.alarms_on("AWS/Lambda", "Duration", "FunctionName", is_it);
            if !latency
                .iter()
                .any(|a| a.text("ExtendedStatistic") == Some("p99"))
            {
                missing.push(format!("{id}: no p99 Duration alarm (the POSTs' latency)"));
            }
        }
    }
    missing
}

/// The function and the name of a metric-math alarm's `MetricStat` in the pipeline's namespace.
fn emf_stat(m: &Value) -> Option<(&str, &str)> {
    let metric = &m["MetricStat"]["Metric"];
    let [d] = metric["Dimensions"].as_sequence()?.as_slice() else {
        return None;
    };
    if metric["Namespace"] != NAMESPACE || d["Name"] != FUNCTION_DIMENSION {
        return None;
    }
    Some((d["Value"].as_str()?, metric["MetricName"].as_str()?))
}

/// A stream trigger that stopped leaves `IteratorAge` without data: an alarm compares the
/// payments payments-api accepted with those payments-publisher relayed (metric math).
fn check_relay_silence(r: &Resources) -> Vec<String> {
    let watches_silence = r.alarms().iter().any(|a| {
        let metrics = a.props.get("Metrics").and_then(Value::as_sequence);
        let stats: Vec<_> = metrics.into_iter().flatten().filter_map(emf_stat).collect();
        stats.contains(&(function::PAYMENTS_API, api::ACCEPTED))
            && stats.contains(&(function::PAYMENTS_PUBLISHER, publisher::RELAYED))
    });
    if watches_silence {
        Vec::new()
    } else {
        vec!["no alarm compares payments accepted with payments relayed".to_owned()]
    }
}

/// Every table and queue survives a stack deletion or replacement with its records or messages.
fn check_retained(r: &Resources) -> Vec<String> {
    let mut missing = Vec::new();
    for kind in ["AWS::DynamoDB::Table", "AWS::SQS::Queue"] {
        for (id, resource) in r.of_type(kind) {
            for policy in ["DeletionPolicy", "UpdateReplacePolicy"] {
                if resource[policy] != "Retain" {
                    missing.push(format!("{id}: {policy} is not Retain"));
                }
            }
        }
    }
    missing
}

/// Every log group keeps its logs `LogRetentionDays`, and every function logs to one of them.
fn check_log_groups(r: &Resources) -> Vec<String> {
    let mut missing = Vec::new();
    let groups: Vec<&str> = r.of_type("AWS::Logs::LogGroup").map(|(id, _)| id).collect();
    for (id, group) in r.of_type("AWS::Logs::LogGroup") {
        if ref_of(&group["Properties"]["RetentionInDays"]) != Some("LogRetentionDays") {
            missing.push(format!("{id}: RetentionInDays is not LogRetentionDays"));
        }
    }
    for (id, function) in r.of_type("AWS::Serverless::Function") {
        let group = ref_of(&function["Properties"]["LoggingConfig"]["LogGroup"]);
        if !group.is_some_and(|g| groups.contains(&g)) {
            missing.push(format!(
                "{id}: LoggingConfig.LogGroup is not a log group of the stack"
            ));
        }
    }
    missing
}

fn check(text: &str) -> Vec<String> {
    let r = Resources::parse(text);
    [
        check_actions(&r),
        check_functions(&r),
        check_metrics(&r),
        check_dead_letter_queues(&r),
        check_api(&r),
        check_relay_silence(&r),
        check_retained(&r),
        check_log_groups(&r),
    ]
    .concat()
}

#[test]
fn the_project_template_has_every_alarm_and_retains_its_data() {
    let text = project_text();
    assert_eq!(check(&text), Vec::<String>::new());
    // Not vacuous: the checks saw what they check.
    let r = Resources::parse(&text);
    assert!(r.alarms().len() >= 27);
    assert_eq!(r.of_type("AWS::Serverless::Function").count(), 6);
    assert_eq!(
        dead_letter_queues(&r),
        BTreeSet::from([
            "PaymentsDeadLetterQueue".to_owned(),
            "PaymentsOutboxDeadLetterQueue".to_owned(),
            "ReceiptsDeadLetterQueue".to_owned(),
        ])
    );
    assert_eq!(r.of_type("AWS::Logs::LogGroup").count(), 7);
}

#[test]
fn each_check_finds_what_it_looks_for() {
    let text = project_text();
    let reconciler = "  PaymentsAuditorFunction:\n    Type: AWS::Serverless::Function\n    \
                      Properties:\n      FunctionName: payments-reconciler\n      \
                      LoggingConfig: { LogGroup: !Ref PaymentsApiLogGroup }\n\nOutputs:";
    let redriven = "  JobsQueue:\n    Type: AWS::SQS::Queue\n    DeletionPolicy: Retain\n    \
                    UpdateReplacePolicy: Retain\n    Properties:\n      RedrivePolicy:\n        \
                    deadLetterTargetArn: !GetAtt JobsDeadLetterQueue.Arn\n  \
                    JobsDeadLetterQueue:\n    Type: AWS::SQS::Queue\n    DeletionPolicy: Retain\n    \
                    UpdateReplacePolicy: Retain\n\nOutputs:";
    for (from, to, expected) in [
        (
            "      AlarmActions: [!Ref AlarmTopic]\n",
            "",
            "PaymentsDeadLetterAlarm: no AlarmTopic in AlarmActions",
        ),
        (
            "      OKActions: [!Ref AlarmTopic]\n",
            "      OKActions: []\n",
            "PaymentsDeadLetterAlarm: no AlarmTopic in OKActions",
        ),
        (
            "KmsMasterKeyId: !Ref AlarmTopicKey",
            "KmsMasterKeyId: alias/aws/sns",
            "AlarmTopic: its KmsMasterKeyId is not a key",
        ),
        (
            "\nOutputs:",
            reconciler,
            "PaymentsAuditorFunction: no Errors alarm",
        ),
        (
            "\nOutputs:",
            reconciler,
            "PaymentsAuditorFunction: no Throttles alarm",
        ),
        (
            "MetricName: Throttles\n      Dimensions:\n        - Name: FunctionName\n          \
             Value: !Ref PaymentsApiFunction",
            "MetricName: Throttles\n      Dimensions:\n        - Name: FunctionName\n          \
             Value: !Ref PaymentsPublisherFunction",
            "PaymentsApiFunction: no Throttles alarm",
        ),
        (
            "MetricName: unavailable",
            "MetricName: rejected",
            "unavailable of payments-api: no alarm",
        ),
        (
            "          Value: receipt-sender",
            "          Value: payment-processor",
            "dead_lettered of receipt-sender: no alarm",
        ),
        (
            "TreatMissingData: breaching",
            "TreatMissingData: notBreaching",
            "runs of payments-reconciler: no alarm firing when it is Missing",
        ),
        (
            "MetricName: ledgerMismatches\n      Dimensions:\n",
            "MetricName: ledgerMismatches\n      Dimensions:\n        - Name: ApiId\n          \
             Value: x\n",
            "ledgerMismatches of payments-reconciler: no alarm",
        ),
        (
            "\nOutputs:",
            redriven,
            "JobsDeadLetterQueue: no ApproximateNumberOfMessagesVisible alarm",
        ),
        (
            "Value: !GetAtt PaymentsOutboxDeadLetterQueue.QueueName\n      Statistic: Maximum\n      \
             Period: 300",
            "Value: !GetAtt PaymentsDeadLetterQueue.QueueName\n      Statistic: Maximum\n      \
             Period: 300",
            "PaymentsOutboxDeadLetterQueue: no ApproximateAgeOfOldestMessage alarm",
        ),
        (
            "MetricName: relayed",
            "MetricName: failed",
            "no alarm compares payments accepted with payments relayed",
        ),
        (
            "MetricName: 5xx",
            "MetricName: 4xx",
            "PaymentsHttpApi: no 5xx alarm",
        ),
        (
            "  IdempotencyTable:\n    Type: AWS::DynamoDB::Table\n    DeletionPolicy: Retain\n",
            "  IdempotencyTable:\n    Type: AWS::DynamoDB::Table\n",
            "IdempotencyTable: DeletionPolicy is not Retain",
        ),
        (
            "  ReceiptsDeadLetterQueue:\n    Type: AWS::SQS::Queue\n    DeletionPolicy: Retain\n    \
             UpdateReplacePolicy: Retain\n",
            "  ReceiptsDeadLetterQueue:\n    Type: AWS::SQS::Queue\n    DeletionPolicy: Retain\n",
            "ReceiptsDeadLetterQueue: UpdateReplacePolicy is not Retain",
        ),
        (
            "LogGroupName: /aws/http-api/payments\n      RetentionInDays: !Ref LogRetentionDays",
            "LogGroupName: /aws/http-api/payments\n      RetentionInDays: 3653",
            "PaymentsApiAccessLogGroup: RetentionInDays is not LogRetentionDays",
        ),
        (
            "    Condition: HasAlarmEmail\n",
            "",
            "AlarmEmailSubscription: not under the condition HasAlarmEmail",
        ),
    ] {
        assert!(text.contains(from), "{from}");
        let found = check(&text.replacen(from, to, 1));
        assert!(
            found.iter().any(|f| f.contains(expected)),
            "{expected}: {found:#?}"
        );
    }
}
