//! Waiting never costs availability, as template.yaml deploys the API: the reads (where clients
//! wait, `Prefer: wait`) run on a function of their own, whose reserved concurrency is not the
//! POSTs'; the POSTs' function never waits; and on each function's routes the timeouts are
//! ordered: each AWS SDK operation, then the longest wait, then the function, then API Gateway's
//! integration (at most an HTTP API's 30 s), so that nothing slow becomes the gateway's 503.

use std::time::Duration;

use local_aws::template::{Function, Template, TemplateOptions};
use payments_config::SDK_OPERATION_TIMEOUT;
use serde_yaml_ng::Value;

/// The function behind `METHOD path`.
fn function_of<'a>(template: &'a Template, method: &str, path: &str) -> &'a Function {
    template
        .functions
        .values()
        .find(|f| {
            f.http_routes
                .iter()
                .any(|r| r.method == method && r.path == path)
        })
        .unwrap_or_else(|| panic!("no function serves {method} {path}"))
}

/// The function's `Properties` in template.yaml as written.
fn properties<'a>(raw: &'a Value, function: &Function) -> &'a Value {
    &raw["Resources"][function.logical_id.as_str()]["Properties"]
}

#[test]
fn waiting_reads_run_on_their_own_capacity_and_timeouts_are_ordered() {
    let template = Template::load_project(&TemplateOptions::default()).unwrap();
    let raw: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../template.yaml")).unwrap(),
    )
    .unwrap();
    let posts = function_of(&template, "POST", "/payments");
    let reads = function_of(&template, "GET", "/payments/{paymentId}");
    assert_ne!(
        posts.name, reads.name,
        "the reads share the POSTs' function"
    );

    // Each has its own reserved concurrency, from its own parameter.
    let reserved = |f: &Function| match &properties(&raw, f)["ReservedConcurrentExecutions"] {
        Value::Tagged(t) if t.tag == "Ref" => t.value.as_str().unwrap_or_default().to_owned(),
        other => panic!(
            "{}: ReservedConcurrentExecutions is not a !Ref: {other:?}",
            f.name
        ),
    };
    assert_ne!(reserved(posts), reserved(reads));

    // The POSTs' function never waits; the reader waits up to 20 s.
    let max_wait = |f: &Function| -> u64 {
        f.environment["MAX_WAIT_SECONDS"]
            .as_literal()
            .unwrap_or_else(|| panic!("{}: no MAX_WAIT_SECONDS", f.name))
            .parse()
            .unwrap()
    };
    assert_eq!(max_wait(posts), 0);
    assert_eq!(max_wait(reads), payments_api::prefer::MAX_WAIT_SECONDS);

    for f in [posts, reads] {
        let wait = Duration::from_secs(max_wait(f));
        assert!(
            SDK_OPERATION_TIMEOUT < f.timeout(),
            "{}: an SDK operation may outlast the function",
            f.name
        );
        assert!(
            wait + Duration::from_secs(2) <= f.timeout(),
            "{}: a {wait:?} wait does not fit in {:?}",
            f.name,
            f.timeout()
        );
        for route in &f.http_routes {
            let integration = route
                .integration_timeout
                .unwrap_or_else(|| panic!("{}: no TimeoutInMillis", route.name));
            assert!(
                f.timeout() < integration && integration <= Duration::from_secs(30),
                "{}: function {:?}, integration {integration:?}",
                route.name,
                f.timeout()
            );
        }
    }
}
