//! Helpers of the IAM tests: the project's environment and roles, ARNs, a recorder.
#![allow(dead_code)]

use iam_conformance::{
    Call, CallRecorder, Environment, PolicyError, Report, Role, Statement, TemplateRoles,
};

pub const REGION: &str = "us-east-1";
pub const ACCOUNT: &str = "123456789012";
pub const STREAM: &str =
    "arn:aws:dynamodb:us-east-1:123456789012:table/payments/stream/2024-01-01T00:00:00.000";

pub fn env() -> Environment {
    Environment::new(REGION, ACCOUNT).attribute("PaymentsTable", "StreamArn", STREAM)
}

pub fn project() -> TemplateRoles {
    TemplateRoles::load_project(&env()).unwrap_or_else(|e| panic!("{e}"))
}

pub fn table(name: &str) -> String {
    format!("arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}")
}

pub fn queue(name: &str) -> String {
    format!("arn:aws:sqs:{REGION}:{ACCOUNT}:{name}")
}

pub fn queue_url(name: &str) -> String {
    format!("http://127.0.0.1:5000/{ACCOUNT}/{name}")
}

/// The role of function `f` in a template whose role has these statements (flow-style YAML,
/// one per line).
pub fn role_with(statements: &[&str]) -> Result<Role, PolicyError> {
    let statements: String = statements
        .iter()
        .map(|s| format!("              - {s}\n"))
        .collect();
    let yaml = format!(
        r#"
Resources:
  F:
    Type: AWS::Serverless::Function
    Properties: {{ FunctionName: f, Role: !GetAtt R.Arn }}
  R:
    Type: AWS::IAM::Role
    Properties:
      Policies:
        - PolicyName: p
          PolicyDocument:
            Statement:
{statements}"#
    );
    let roles = TemplateRoles::parse(&yaml, &Environment::new(REGION, ACCOUNT))?;
    Ok(roles.for_function("f")?.clone())
}

pub fn keys(k: &[&str]) -> Vec<String> {
    k.iter().map(|s| (*s).to_owned()).collect()
}

/// A recorder configured from the project template.
pub fn recorder() -> CallRecorder {
    CallRecorder::new(project().recorder_config(&env()))
}

pub fn record(recorder: &CallRecorder, target: &str, body: &serde_json::Value) {
    recorder.record(Some(target), Some(body.to_string().as_bytes()));
    assert_eq!(recorder.problems(), [], "{target}");
}

/// The whole check of `function` in the project's template (event sources and platform
/// included) with these calls of its code.
pub fn check(function: &str, calls: &[Call]) -> Report {
    project()
        .conformance(function, calls)
        .unwrap_or_else(|e| panic!("{e}"))
}

pub fn grants_of(report_grants: &[iam_conformance::Grant]) -> Vec<(String, String)> {
    report_grants
        .iter()
        .map(|g| (g.action.clone(), g.resource.clone()))
        .collect()
}

/// The statement `sid` of `role` in `roles`, to change.
pub fn statement_mut<'r>(roles: &'r mut TemplateRoles, role: &str, sid: &str) -> &'r mut Statement {
    roles
        .roles
        .get_mut(role)
        .unwrap_or_else(|| panic!("no role {role}"))
        .statements
        .iter_mut()
        .find(|s| s.id.sid.as_deref() == Some(sid))
        .unwrap_or_else(|| panic!("no {sid} in {role}"))
}

/// The mutations of a mutation test: how many of each kind were made and reported, and those
/// not reported (policy holder, Sid, mutation as displayed).
#[derive(Default)]
pub struct Tally {
    pub counts: std::collections::BTreeMap<String, (usize, usize)>,
    pub unnoticed: Vec<(String, String, String)>,
}

impl Tally {
    /// One mutation of `kind` to the statement `sid` of `holder`, reported or not.
    pub fn record(
        &mut self,
        kind: &str,
        reported: bool,
        holder: &str,
        sid: Option<&str>,
        m: String,
    ) {
        let count = self.counts.entry(kind.to_owned()).or_default();
        count.0 += 1;
        if reported {
            count.1 += 1;
        } else {
            let sid = sid.unwrap_or("(no Sid)").to_owned();
            self.unnoticed.push((holder.to_owned(), sid, m));
        }
    }

    /// How many mutations were made.
    pub fn made(&self) -> usize {
        self.counts.values().map(|c| c.0).sum()
    }

    /// Prints the counts, and fails unless every mutation not reported is one of `harmless`
    /// and every one of `harmless` is made and not reported.
    pub fn assert_reported_but(&self, what: &str, harmless: &[(&str, &str, &str)]) {
        println!(
            "{what}: mutations (made, reported) by kind: {:#?}",
            self.counts
        );
        let allowed: Vec<(String, String, String)> = harmless
            .iter()
            .map(|(r, s, m)| ((*r).to_owned(), (*s).to_owned(), (*m).to_owned()))
            .collect();
        let failures: Vec<String> = self
            .unnoticed
            .iter()
            .filter(|u| !allowed.contains(u))
            .map(|(r, s, m)| format!("{r}, Sid {s}: {m}"))
            .collect();
        assert!(
            failures.is_empty(),
            "{what}: {} of {} mutations not reported:\n{}",
            failures.len(),
            self.made(),
            failures.join("\n")
        );
        let stale: Vec<_> = allowed
            .iter()
            .filter(|a| !self.unnoticed.contains(a))
            .collect();
        assert!(
            stale.is_empty(),
            "{what}: allow-listed but reported or not made: {stale:?}"
        );
    }
}
