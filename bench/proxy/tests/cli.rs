//! The proxy as a user runs it: `--help` lists every option and the exit codes, and a bad command
//! line exits 2 naming what is wrong, before anything is contacted (`AWS_ENDPOINT_URL` is removed
//! unless a test sets it).

use std::process::{Command, Output};

const PROXY: &str = env!("CARGO_BIN_EXE_proxy");

/// The proxy run with `args`, without `AWS_ENDPOINT_URL`: its exit code, stdout and stderr.
fn proxy(args: &[&str]) -> (Option<i32>, String, String) {
    let out: Output = Command::new(PROXY)
        .args(args)
        .env_remove("AWS_ENDPOINT_URL")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {PROXY}: {e}"));
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn proxy_help_lists_its_options_and_exit_codes() {
    let (code, help, err) = proxy(&["--help"]);
    assert_eq!(code, Some(0), "{help}{err}");
    let options = [
        "--upstream <URL>",
        "AWS_ENDPOINT_URL",
        "--latency-ms <MS>",
        "--port <P>",
        "SIGUSR1",
        "--help",
        "--version",
        "Exit codes:",
        "  0  ",
        "  1  ",
        "  2  ",
    ];
    for option in options {
        assert!(help.contains(option), "--help lacks {option:?}:\n{help}");
    }
}

#[test]
fn proxy_refuses_a_bad_command_line() {
    let refused = |args: &[&str], names: &[&str]| {
        let (code, out, err) = proxy(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
        for name in names {
            assert!(
                err.contains(name),
                "{args:?}: stderr lacks {name:?}:\n{err}"
            );
        }
    };
    // Neither --upstream nor AWS_ENDPOINT_URL.
    refused(&[], &["--upstream <URL>", "required"]);
    refused(
        &["--upstream", "ftp://127.0.0.1:21"],
        &["--upstream", "the scheme must be http or https"],
    );
    refused(
        &["--upstream", "127.0.0.1:4566", "--latency-ms", "soon"],
        &["--latency-ms", "'soon'"],
    );
    refused(
        &["--upstream", "127.0.0.1:4566", "--port", "65536"],
        &["--port", "65536"],
    );
}

#[test]
fn proxy_takes_its_upstream_from_the_environment() {
    // A bad AWS_ENDPOINT_URL is reported as the value of --upstream, before anything starts.
    let out = Command::new(PROXY)
        .env("AWS_ENDPOINT_URL", "http://moto.example:4566")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--upstream") && err.contains("moto.example"),
        "{err}"
    );
}
